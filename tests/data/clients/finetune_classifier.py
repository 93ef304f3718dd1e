"""Sentence classification with a BERT classifier, in the style of GluonNLP 0.10's
scripts/bert/finetune_classifier.py: ``--dtype float16`` calls ``amp.init()`` before the model is
built and ``amp.init_trainer(trainer)`` once the Trainer is made, and backward runs under
``amp.scale_loss``; gradients are clipped by their global norm and ``trainer.update`` follows
``trainer.allreduce_grads``, with BERTAdam and a warm-up then linear-decay learning rate.
One difference: under float16 the gradients are unscaled (``amp.unscale``) before they are
clipped; GluonNLP's script clips the scaled gradients, which makes its threshold 1 / loss scale.

This is the project's own client script, not a copy of GluonNLP's. It knows nothing about
mxmixed. Instead of a pre-trained BERT and a GLUE task it builds a tiny BERT (``BERTEncoder``,
``BERTModel``, ``BERTClassifier``; random init) and a synthetic sentiment task from the word lists
below (a sentence is positive when its sentiment word is), tokenized with ``BERTTokenizer`` and a
``BERTVocab`` built here, so nothing is downloaded.
"""
# pylint:disable=redefined-outer-name,logging-format-interpolation
import argparse
import json
import logging
import random
import time
from functools import partial

import gluonnlp as nlp
import mxnet as mx
import numpy as np
from gluonnlp.data import BERTTokenizer
from gluonnlp.data.bert.glue import concat_sequences, truncate_seqs_equal
from gluonnlp.model import BERTClassifier, BERTEncoder, BERTModel
from mxnet import gluon
from mxnet.contrib import amp

POSITIVE = ["good", "great", "fine", "lovely", "superb", "pleasant", "bright", "warm"]
NEGATIVE = ["bad", "awful", "poor", "dreadful", "grim", "dull", "bleak", "cold"]
FILLER = ["the", "a", "movie", "film", "plot", "was", "is", "and", "very", "quite", "story",
          "acting", "music", "ending", "it", "this", "of", "with", "really", "overall"]
CLASS_LABELS = ["0", "1"]


def parse_args():
    parser = argparse.ArgumentParser(
        description='BERT fine-tune example for a (synthetic) classification task.',
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument('--optimizer', type=str, default='bertadam',
                        help='The optimizer to be used for training')
    parser.add_argument('--epochs', type=int, default=8, help='number of epochs.')
    parser.add_argument('--training_steps', type=int,
                        help='The total training steps. Note that if specified, epochs will '
                             'be ignored.')
    parser.add_argument('--batch_size', type=int, default=16,
                        help='Batch size. Number of examples per gpu in a minibatch.')
    parser.add_argument('--dev_batch_size', type=int, default=32,
                        help='Batch size for dev set')
    parser.add_argument('--lr', type=float, default=3e-3, help='Initial learning rate')
    parser.add_argument('--epsilon', type=float, default=1e-6,
                        help='Small value to avoid division by 0')
    parser.add_argument('--warmup_ratio', type=float, default=0.1,
                        help='ratio of warmup steps used in NOAM\'s stepsize schedule')
    parser.add_argument('--log_interval', '--log-interval', type=int, default=1,
                        help='report interval')
    parser.add_argument('--max_len', type=int, default=16,
                        help='Maximum length of the sentences')
    parser.add_argument('--round_to', type=int, default=None,
                        help='The length of padded sequences will be rounded up to be multiple '
                             'of this argument (one shape for every batch when it is max_len).')
    parser.add_argument('--seed', type=int, default=2, help='Random seed')
    parser.add_argument('--gpu', type=int, default=None,
                        help='Which gpu for finetuning (default: CPU).')
    parser.add_argument('--num_train_examples', type=int, default=64,
                        help='Size of the synthetic training set')
    parser.add_argument('--num_dev_examples', type=int, default=64,
                        help='Size of the synthetic dev set')
    parser.add_argument('--num_layers', type=int, default=2)
    parser.add_argument('--num_heads', type=int, default=2)
    parser.add_argument('--units', type=int, default=32)
    parser.add_argument('--hidden_size', type=int, default=64)
    parser.add_argument('--dtype', type=str, default='float32', choices=['float32', 'float16'],
                        help='The data type for training.')
    parser.add_argument('--save-metrics', '--save_metrics', dest='save_metrics', default=None,
                        help='Write the per-step losses and the dev accuracy to this JSON file')
    return parser.parse_args()


def make_sentences(num_examples, rng):
    """(sentence, label) pairs: a few filler words around one sentiment word."""
    examples = []
    for i in range(num_examples):
        label = i % 2
        words = [rng.choice(FILLER) for _ in range(rng.randint(3, 8))]
        words.insert(rng.randint(0, len(words)), rng.choice(POSITIVE if label else NEGATIVE))
        examples.append((' '.join(words), str(label)))
    rng.shuffle(examples)
    return examples


def convert_examples_to_features(example, tokenizer=None, truncate_length=512, cls_token=None,
                                 sep_token=None, class_labels=None, vocab=None):
    """convert examples into input ids, segment ids, valid length and label"""
    label = np.array([class_labels.index(example[-1])], dtype='int32')
    tokens_raw = [tokenizer(text) for text in example[:-1]]
    tokens_trun = truncate_seqs_equal(tokens_raw, truncate_length)
    tokens_trun[0] = [cls_token] + tokens_trun[0]
    tokens, segment_ids, _ = concat_sequences(tokens_trun, [[sep_token]] * len(tokens_trun))
    input_ids = vocab[tokens]
    return input_ids, segment_ids, len(input_ids), label


def preprocess_data(tokenizer, vocab, args, rng):
    """Train/eval data preparation."""
    trans = partial(convert_examples_to_features, tokenizer=tokenizer,
                    truncate_length=args.max_len - 2, cls_token=vocab.cls_token,
                    sep_token=vocab.sep_token, class_labels=CLASS_LABELS, vocab=vocab)
    batchify_fn = nlp.data.batchify.Tuple(
        nlp.data.batchify.Pad(axis=0, pad_val=vocab[vocab.padding_token],
                              round_to=args.round_to),
        nlp.data.batchify.Pad(axis=0, pad_val=0, round_to=args.round_to),
        nlp.data.batchify.Stack(),
        nlp.data.batchify.Stack('int32'))
    data_train = gluon.data.SimpleDataset(
        list(map(trans, make_sentences(args.num_train_examples, rng))))
    data_dev = gluon.data.SimpleDataset(
        list(map(trans, make_sentences(args.num_dev_examples, rng))))
    loader_train = gluon.data.DataLoader(data_train, batch_size=args.batch_size, shuffle=True,
                                         batchify_fn=batchify_fn, last_batch='rollover')
    loader_dev = gluon.data.DataLoader(data_dev, batch_size=args.dev_batch_size, shuffle=False,
                                       batchify_fn=batchify_fn)
    return loader_train, loader_dev, len(data_train)


def build_model(args, vocab, ctx):
    encoder = BERTEncoder(num_layers=args.num_layers, units=args.units,
                          hidden_size=args.hidden_size, max_length=args.max_len,
                          num_heads=args.num_heads, dropout=0.1)
    bert = BERTModel(encoder, vocab_size=len(vocab), token_type_vocab_size=2, units=args.units,
                     embed_size=args.units, use_pooler=True, use_decoder=False,
                     use_classifier=False)
    model = BERTClassifier(bert, dropout=0.1, num_classes=len(CLASS_LABELS))
    model.initialize(init=mx.init.Normal(0.02), ctx=ctx)
    return model


def evaluate(model, loader_dev, loss_function, metric, ctx):
    """Evaluate the model on the dev set."""
    metric.reset()
    step_loss = 0
    for seqs in loader_dev:
        input_ids, segment_ids, valid_length, label = [s.as_in_context(ctx) for s in seqs]
        out = model(input_ids, segment_ids, valid_length.astype('float32'))
        step_loss += loss_function(out, label).mean().asscalar()
        metric.update([label.reshape((-1))], [out])
    metric_nm, metric_val = metric.get()
    logging.info('validation metrics:%s:%.4f, loss=%.4f', metric_nm, metric_val,
                 step_loss / len(loader_dev))
    return metric_val


def train(args):
    np.random.seed(args.seed)
    random.seed(args.seed)
    mx.random.seed(args.seed)
    rng = random.Random(args.seed)
    ctx = mx.cpu() if args.gpu is None else mx.gpu(args.gpu)

    # data type with mixed precision training
    if args.dtype == 'float16':
        amp.init()

    counter = nlp.data.count_tokens(POSITIVE + NEGATIVE + FILLER)
    vocab = nlp.vocab.BERTVocab(counter)
    tokenizer = BERTTokenizer(vocab, lower=True)
    model = build_model(args, vocab, ctx)
    loss_function = gluon.loss.SoftmaxCELoss()
    model.hybridize(static_alloc=True)
    loss_function.hybridize(static_alloc=True)
    train_data, dev_data, num_train_examples = preprocess_data(tokenizer, vocab, args, rng)

    logging.info('Now we are doing BERT classification training on %s!', ctx)
    all_model_params = model.collect_params()
    optimizer_params = {'learning_rate': args.lr, 'epsilon': args.epsilon, 'wd': 0.01}
    trainer = gluon.Trainer(all_model_params, args.optimizer, optimizer_params,
                            update_on_kvstore=False)
    if args.dtype == 'float16':
        amp.init_trainer(trainer)

    epoch_number = args.epochs
    num_train_steps = int(num_train_examples / args.batch_size * args.epochs)
    if args.training_steps:
        num_train_steps = args.training_steps
        epoch_number = 9999
    logging.info('training steps=%d', num_train_steps)
    num_warmup_steps = int(num_train_steps * args.warmup_ratio)

    # Do not apply weight decay on LayerNorm and bias terms
    for _, v in model.collect_params('.*beta|.*gamma|.*bias').items():
        v.wd_mult = 0.0
    params = [p for p in all_model_params.values() if p.grad_req != 'null']

    metric = mx.metric.Accuracy()
    losses, accuracies = [], []
    step_num = 0
    tic = time.time()
    for epoch_id in range(epoch_number):
        metric.reset()
        for batch_id, seqs in enumerate(train_data):
            if step_num < num_warmup_steps:
                new_lr = args.lr * (step_num + 1) / num_warmup_steps
            else:
                offset = (step_num - num_warmup_steps) / (num_train_steps - num_warmup_steps)
                new_lr = args.lr - offset * args.lr
            trainer.set_learning_rate(new_lr)

            with mx.autograd.record():
                input_ids, segment_ids, valid_length, label = seqs
                input_ids = input_ids.as_in_context(ctx)
                valid_length = valid_length.as_in_context(ctx).astype('float32')
                label = label.as_in_context(ctx)
                out = model(input_ids, segment_ids.as_in_context(ctx), valid_length)
                ls = loss_function(out, label).mean()
                if args.dtype == 'float16':
                    with amp.scale_loss(ls, trainer) as scaled_loss:
                        mx.autograd.backward(scaled_loss)
                else:
                    ls.backward()

            trainer.allreduce_grads()
            if args.dtype == 'float16':
                # unscale before clipping, as MXNet's AMP asks (GluonNLP's script does not)
                amp.unscale(trainer)
            nlp.utils.clip_grad_global_norm(params, 1)
            trainer.update(1)
            step_num += 1

            step_loss = float(ls.asscalar())
            losses.append(step_loss)
            metric.update([label.reshape((-1))], [out])
            if (batch_id + 1) % args.log_interval == 0:
                metric_nm, metric_val = metric.get()
                logging.info('[Epoch %d Batch %d/%d] loss=%.4f, lr=%.7f, metrics:%s:%.4f',
                             epoch_id + 1, batch_id + 1, len(train_data), step_loss,
                             trainer.learning_rate, metric_nm, metric_val)
            if step_num >= num_train_steps:
                break
        mx.nd.waitall()
        accuracies.append(float(evaluate(model, dev_data, loss_function, metric, ctx)))
        if step_num >= num_train_steps:
            logging.info('Finish training step: %d', step_num)
            break
    logging.info('Time cost=%.2fs', time.time() - tic)
    print('final dev accuracy=%.4f after %d steps' % (accuracies[-1], step_num), flush=True)
    if args.save_metrics:
        with open(args.save_metrics, 'w') as f:
            json.dump({'loss': losses, 'accuracy': accuracies}, f)


if __name__ == '__main__':
    logging.basicConfig(level=logging.INFO,
                        format='%(levelname)s:%(name)s:%(asctime)s %(message)s',
                        datefmt='%H:%M:%S')
    train(parse_args())
