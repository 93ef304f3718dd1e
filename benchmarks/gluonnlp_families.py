"""Every GluonNLP 0.10.0 family through ``mxmixed convert``: float16, bfloat16 and float16 ONNX,
each with ``--validate``.

Each family is built offline (``pretrained=False``, a vocabulary made in memory, random
weights), hybridized, run once on a batch of 2 and exported; its inputs are saved as
``inputs.npz`` in the model's own layout (time-major ``(T, N)`` ids for the language models,
their ``begin_state`` as inputs where a row says "states"). Then ``mxmixed convert PREFIX 0
--validate 2 --inputs inputs.npz --batch-size 2`` runs in a fresh process per format, and the
exit code, the size of the params against float32, the validation error and the ONNX opset are
read off its output.

Sizes are the families' own (BERT-base, ELMo 2x1024, AWD-LSTM 1150 and the standard LSTM 200
with a vocabulary of 33278, wikitext-2's), except the Transformer (1 layer, 16 units), the
convolutional encoder, Highway and fastText (small), which only check that the family converts.
The Transformer decoder's second sample has a fully padded memory (its mask all 0).

Usage: ``python benchmarks/gluonnlp_families.py [--only NAME ...] [--json PATH]`` (run by
hand, several minutes; the table is quoted in docs/symbolic.md).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import gluonnlp as nlp
import mxnet as mx
import numpy as np
from mxnet import gluon

N, T = 2, 8
FORMATS = {"float16": ["--dtype", "float16"], "bfloat16": ["--dtype", "bfloat16"],
           "onnx": ["--format", "onnx"]}


class Wrap(gluon.HybridBlock):
    """A block around ``inner`` whose forward is ``fn(F, inner, *inputs)``."""

    def __init__(self, inner, fn):
        super().__init__()
        self.fn = fn
        with self.name_scope():
            self.inner = inner

    def hybrid_forward(self, F, *xs):
        return self.fn(F, self.inner, *xs)


def _vocab(n):
    return nlp.Vocab(nlp.data.count_tokens(["w%d" % i for i in range(n - 4)]))


def _ids(rng, shape, high=100):
    return rng.randint(1, high, size=shape).astype(np.int32)


class _SpanHead(gluon.HybridBlock):
    """A start/end logit per token over BERT's sequence output (as ``finetune_squad.py``)."""

    def __init__(self, bert):
        super().__init__()
        with self.name_scope():
            self.bert = bert
            self.span = gluon.nn.Dense(2, flatten=False)

    def hybrid_forward(self, F, ids, types, length):
        return self.span(self.bert(ids, types, length))


def _bert(name, head=None):
    def build(rng):
        model = {"bert": "bert_12_768_12", "ernie": "ernie_12_768_12",
                 "roberta": "roberta_12_768_12", "distilbert": "distilbert_6_768_12"}[name]
        kw = dict(pretrained=False)
        if name in ("bert", "ernie"):
            kw.update(use_decoder=False, use_classifier=False, use_pooler=head != "qa")
            vocab = nlp.vocab.BERTVocab(nlp.data.count_tokens(["w%d" % i for i in range(100)]))
        else:
            if name == "roberta":
                kw.update(use_decoder=False)
            vocab = _vocab(104)
        net, _ = nlp.model.get_model(model, dataset_name=None, vocab=vocab, **kw)
        if head == "classifier":
            net = nlp.model.BERTClassifier(net, num_classes=2, dropout=0.0)
        elif head == "qa":
            net = _SpanHead(net)
        net.initialize(mx.init.Normal(0.02))
        length = np.array([T, T - 3], np.float32)
        if name in ("roberta", "distilbert"):
            return net, [_ids(rng, (N, T)), length]
        return net, [_ids(rng, (N, T)), _ids(rng, (N, T), 2), length]
    return build


def _lm(model, states):
    def build(rng):
        kw = dict(dropout=0.0) if model.startswith("standard") else {}
        lm, _ = nlp.model.get_model(model, dataset_name=None, vocab=_vocab(33278),
                                    pretrained=False, **kw)
        lm.initialize(mx.init.Xavier())
        x = _ids(rng, (T, N))
        if not states:
            return Wrap(lm, lambda F, lm, x: lm(x)[0]), [x]
        state = lm.begin_state(batch_size=N)
        paired = isinstance(state[0], (list, tuple))  # AWD: [h, c] per layer
        begin = [a.asnumpy() for a in (sum(map(list, state), []) if paired else state)]

        def forward(F, lm, x, *s):
            given = [list(s[i:i + 2]) for i in range(0, len(s), 2)] if paired else list(s)
            out, new = lm(x, given)
            flat = sum(map(list, new), []) if paired else list(new)
            return [out] + flat
        return Wrap(lm, forward), [x] + begin
    return build


def _bigrnn(rng):
    vocab, embed, hidden, projection = 100, 512, 2048, 512
    big = nlp.model.language_model.BigRNN(vocab, embed, hidden, 1, projection)
    big.initialize(mx.init.Xavier())

    class Big(gluon.HybridBlock):  # BigRNN is a Block: its parts, hybridized
        def __init__(self):
            super().__init__()
            with self.name_scope():
                self.embedding, self.encoder, self.decoder = (big.embedding, big.encoder,
                                                              big.decoder)

        def hybrid_forward(self, F, x, h, c):
            out, state = self.encoder.unroll(T, self.embedding(x), [h, c], layout="TNC",
                                             merge_outputs=True)
            logits = self.decoder(out.reshape((-1, projection))).reshape((T, -1, vocab))
            return [logits, state[0], state[1]]
    return Big(), [_ids(rng, (T, N)), np.zeros((N, projection), np.float32),
                   np.zeros((N, hidden), np.float32)]


def _elmo(rng):
    elmo = nlp.model.get_model("elmo_2x1024_128_2048cnn_1xhighway", dataset_name=None,
                               pretrained=False)
    elmo = elmo[0] if isinstance(elmo, tuple) else elmo
    elmo.initialize(mx.init.Xavier())
    begin = [a.asnumpy() for d in elmo.begin_state(mx.nd.zeros, batch_size=N)
             for layer in d for a in layer]

    def forward(F, elmo, x, *s):
        half = len(s) // 2
        forward_states = [list(s[i:i + 2]) for i in range(0, half, 2)]
        backward_states = [list(s[i:i + 2]) for i in range(half, len(s), 2)]
        return elmo(x, [forward_states, backward_states], None)[0]
    return Wrap(elmo, forward), [rng.randint(1, 260, size=(N, T, 50)).astype(np.int32)] + begin


def _transformer(part):
    def build(rng):
        units = 16
        enc, dec, one = nlp.model.transformer.get_transformer_encoder_decoder(
            num_layers=1, num_heads=2, units=units, hidden_size=32, dropout=0.0)
        length = np.array([T, T - 3], np.float32)
        if part == "encoder":
            enc.initialize(mx.init.Xavier())
            return (Wrap(enc, lambda F, enc, x, v: enc(x, None, v)[0]),
                    [rng.randn(N, T, units).astype(np.float32), length])
        block = dec if part == "decoder" else one
        block.initialize(mx.init.Xavier())
        memory = rng.randn(N, T, units).astype(np.float32)
        mask = (np.arange(T)[None] < length[:, None]).astype(np.float32)
        mask[1] = 0  # a fully padded memory row
        if part == "decoder":
            return (Wrap(block, lambda F, d, x, m, k, v: d(x, [m, k], v)[0]),
                    [rng.randn(N, T, units).astype(np.float32), memory, mask, length])
        return (Wrap(block, lambda F, d, x, m, k: gluon.HybridBlock.forward(d, x, [m, k])[0]),
                [rng.randn(N, 3, units).astype(np.float32), memory, mask])
    return build


def _convolutional_encoder(rng):
    net = nlp.model.ConvolutionalEncoder(embed_size=16, num_filters=(8, 8),
                                         ngram_filter_sizes=(2, 3), output_size=None)
    net.initialize(mx.init.Xavier())
    return net, [rng.randn(T, N, 16).astype(np.float32)]


def _highway(rng):
    net = nlp.model.Highway(16, num_layers=2)
    net.initialize(mx.init.Xavier())
    return net, [rng.randn(N, 16).astype(np.float32)]


def _fasttext(rng):
    vocab = _vocab(104)
    subwords = nlp.vocab.create_subword_function("NGramHashes", ngrams=[3, 4],
                                                 num_subwords=1000)
    net = nlp.model.train.FasttextEmbeddingModel(vocab.token_to_idx, subwords, 16,
                                                 sparse_grad=False)
    net.initialize(mx.init.Xavier())
    words = np.zeros((N, len(vocab) + 1000), np.float32)  # a dense bag of word and subwords
    words[0, 3], words[0, 200], words[1, 5] = 1.0, 0.5, 1.0
    return Wrap(net, lambda F, m, x: F.dot(x, m.weight.var())), [words]


FAMILIES = {
    "BERT-base": _bert("bert"), "BERT classifier": _bert("bert", "classifier"),
    "BERT span (QA)": _bert("bert", "qa"), "RoBERTa": _bert("roberta"),
    "DistilBERT": _bert("distilbert"), "ERNIE": _bert("ernie"), "ELMo (states)": _elmo,
    "AWD-LSTM 1150": _lm("awd_lstm_lm_1150", False),
    "AWD-LSTM 1150 (states)": _lm("awd_lstm_lm_1150", True),
    "standard LSTM 200": _lm("standard_lstm_lm_200", False),
    "standard LSTM 200 (states)": _lm("standard_lstm_lm_200", True),
    "BigRNN (states)": _bigrnn, "Transformer encoder": _transformer("encoder"),
    "Transformer decoder": _transformer("decoder"),
    "Transformer one-step decoder": _transformer("one-step"),
    "convolutional encoder": _convolutional_encoder, "Highway": _highway,
    "fastText": _fasttext,
}


def export(name, folder):
    """Build family ``name``, export it into ``folder``; its prefix."""
    rng = np.random.RandomState(0)
    mx.random.seed(0)
    net, inputs = FAMILIES[name](rng)
    net.hybridize()
    net(*[mx.nd.array(v, dtype=v.dtype) for v in inputs])
    prefix = os.path.join(folder, "model")
    net.export(prefix)
    names = ["data"] if len(inputs) == 1 else ["data%d" % i for i in range(len(inputs))]
    np.savez(os.path.join(folder, "inputs.npz"), **dict(zip(names, inputs)))
    return prefix


def convert(prefix, fmt):
    """One ``mxmixed convert`` run: its exit code and what its output says."""
    folder = os.path.dirname(prefix)
    argv = [sys.executable, "-m", "mxmixed", "convert", prefix, "0", "--out",
            os.path.join(folder, fmt), "--validate", str(N), "--inputs",
            os.path.join(folder, "inputs.npz"), "--batch-size", str(N)] + FORMATS[fmt]
    run = subprocess.run(argv, capture_output=True, text=True,
                         env=dict(os.environ, MXMIXED_PROGRESS="0"))
    text = run.stdout + run.stderr
    size = re.search(r"params [\d.]+ \w?B -> [\d.]+ \w?B \(([\d.]+)%\)", text)
    error = re.search(r"max rel error\s+([\d.e+-]+|inf|nan)", text)
    opset = re.search(r"ONNX: opset (\d+)", text)
    refusal = re.search(r"error: (.*)", text)
    return {"exit": run.returncode, "size_percent": float(size.group(1)) if size else None,
            "error": float(error.group(1)) if error else None,
            "opset": int(opset.group(1)) if opset else None,
            "refusal": refusal.group(1) if refusal and run.returncode else None}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="+", choices=sorted(FAMILIES), metavar="NAME")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    results = {}
    for name in args.only or FAMILIES:
        with tempfile.TemporaryDirectory() as folder:
            prefix = export(name, folder)
            results[name] = {fmt: convert(prefix, fmt) for fmt in FORMATS}
        cells = []
        for fmt, got in results[name].items():
            if got["exit"] == 0:
                cells.append("%s %.3g, %.1f%%%s" % ("pass" if got["error"] is not None else "ok",
                                                    got["error"] or 0.0,
                                                    got["size_percent"] or 0.0,
                                                    ", opset %d" % got["opset"]
                                                    if got["opset"] else ""))
            else:
                cells.append("exit %d: %s" % (got["exit"], (got["refusal"] or "")[:90]))
        print("| %s | %s |" % (name, " | ".join(cells)), flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
