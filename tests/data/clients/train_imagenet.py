"""Train an image classifier on an ImageNet-style image folder, in the style of gluon-cv's
scripts/classification/imagenet/train_imagenet.py.

A client of MXNet and gluoncv only (it knows nothing about mxmixed). ``--dtype float16`` casts
the network with ``net.cast('float16')`` and trains with multi-precision SGD (float32 master
weights), as gluon-cv's script does; ``--amp`` uses ``mxnet.contrib.amp`` instead.
The data folder holds ``train/<class>/*.jpg`` and ``val/<class>/*.jpg``.

Example: ``python train_imagenet.py --model resnet18_v1 --data-dir ~/imagenet --dtype float16``
"""
import argparse
import json
import logging
import math
import random
import time

import numpy as np

import mxnet as mx
from mxnet import autograd, gluon
from mxnet.contrib import amp
from mxnet.gluon.data.vision import transforms

from gluoncv.model_zoo import get_model
from gluoncv.utils import LRScheduler


def parse_args():
    parser = argparse.ArgumentParser(description='Train a model for image classification.')
    parser.add_argument('--data-dir', type=str, default='~/.mxnet/datasets/imagenet',
                        help='Folder holding train/ and val/ image folders.')
    parser.add_argument('--model', type=str, default='resnet18_v1', help='Model zoo name.')
    parser.add_argument('--classes', type=int, default=0,
                        help='Number of classes (0: as many as the train folder has).')
    parser.add_argument('--batch-size', type=int, default=32, help='Training batch size.')
    parser.add_argument('--dtype', type=str, default='float32',
                        help='Data type for training: float32 or float16.')
    parser.add_argument('--amp', action='store_true',
                        help='Use MXNet AMP for mixed precision training (instead of --dtype).')
    parser.add_argument('--num-gpus', type=int, default=0, help='Number of GPUs to use.')
    parser.add_argument('-j', '--num-data-workers', dest='num_workers', default=4, type=int,
                        help='Number of preprocessing workers.')
    parser.add_argument('--num-epochs', type=int, default=3, help='Number of training epochs.')
    parser.add_argument('--max-iters', type=int, default=0,
                        help='Stop each epoch after this many iterations (0: whole epoch).')
    parser.add_argument('--lr', type=float, default=0.1, help='Learning rate.')
    parser.add_argument('--momentum', type=float, default=0.9, help='SGD momentum.')
    parser.add_argument('--wd', type=float, default=0.0001, help='Weight decay.')
    parser.add_argument('--lr-mode', type=str, default='cosine', help='Learning rate scheduler.')
    parser.add_argument('--input-size', type=int, default=224, help='Size of the input image.')
    parser.add_argument('--crop-ratio', type=float, default=0.875,
                        help='Crop ratio during validation.')
    parser.add_argument('--log-interval', type=int, default=50,
                        help='Number of batches to wait before logging.')
    parser.add_argument('--save-metrics', type=str, default='',
                        help='Write the losses and validation accuracy to this JSON file.')
    parser.add_argument('--seed', type=int, default=None,
                        help='Seed the weights and the data order (default: unseeded).')
    return parser.parse_args()


def get_data(args, batch_size):
    normalize = transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    resize = int(math.ceil(args.input_size / args.crop_ratio))
    transform_train = transforms.Compose([
        transforms.RandomResizedCrop(args.input_size),
        transforms.RandomFlipLeftRight(),
        transforms.ToTensor(),
        normalize])
    transform_test = transforms.Compose([
        transforms.Resize(resize, keep_ratio=True),
        transforms.CenterCrop(args.input_size),
        transforms.ToTensor(),
        normalize])
    root = args.data_dir
    train_set = gluon.data.vision.ImageFolderDataset(root + '/train')
    val_set = gluon.data.vision.ImageFolderDataset(root + '/val')
    train_data = gluon.data.DataLoader(
        train_set.transform_first(transform_train), batch_size=batch_size, shuffle=True,
        last_batch='discard', num_workers=args.num_workers)
    val_data = gluon.data.DataLoader(
        val_set.transform_first(transform_test), batch_size=batch_size, shuffle=False,
        num_workers=args.num_workers)
    return train_data, val_data, len(train_set.synsets), len(train_set)


def test(net, ctx, val_data, dtype):
    acc_top1 = mx.metric.Accuracy()
    for batch in val_data:
        data = gluon.utils.split_and_load(batch[0], ctx_list=ctx, batch_axis=0)
        label = gluon.utils.split_and_load(batch[1], ctx_list=ctx, batch_axis=0)
        outputs = [net(X.astype(dtype, copy=False)) for X in data]
        acc_top1.update(label, outputs)
    return acc_top1.get()[1]


def main():
    args = parse_args()
    logging.basicConfig(level=logging.INFO)
    logger = logging.getLogger()
    logger.info(args)
    if args.seed is not None:
        random.seed(args.seed)
        np.random.seed(args.seed)
        mx.random.seed(args.seed)
    if args.amp:
        amp.init()
    ctx = [mx.gpu(i) for i in range(args.num_gpus)] or [mx.cpu()]
    batch_size = args.batch_size * max(1, args.num_gpus)
    train_data, val_data, classes, samples = get_data(args, batch_size)
    classes = args.classes or classes
    dtype = 'float32' if args.amp else args.dtype

    num_batches = max(1, samples // batch_size)
    lr_scheduler = LRScheduler(args.lr_mode, base_lr=args.lr, nepochs=args.num_epochs,
                               iters_per_epoch=num_batches)
    optimizer_params = {'wd': args.wd, 'momentum': args.momentum, 'lr_scheduler': lr_scheduler}
    if dtype != 'float32':
        optimizer_params['multi_precision'] = True

    net = get_model(args.model, pretrained=False, classes=classes)
    net.cast(dtype)
    net.initialize(mx.init.MSRAPrelu(), ctx=ctx)
    net.hybridize(static_alloc=True, static_shape=True)
    trainer = gluon.Trainer(net.collect_params(), 'sgd', optimizer_params,
                            update_on_kvstore=(False if args.amp else None))
    if args.amp:
        amp.init_trainer(trainer)
    L = gluon.loss.SoftmaxCrossEntropyLoss()
    train_metric = mx.metric.Accuracy()
    history = {'loss': [], 'val_top1': []}
    for epoch in range(args.num_epochs):
        tic = btic = time.time()
        train_metric.reset()
        for i, batch in enumerate(train_data):
            if args.max_iters and i >= args.max_iters:
                break
            data = gluon.utils.split_and_load(batch[0], ctx_list=ctx, batch_axis=0)
            label = gluon.utils.split_and_load(batch[1], ctx_list=ctx, batch_axis=0)
            with autograd.record():
                outputs = [net(X.astype(dtype, copy=False)) for X in data]
                loss = [L(yhat, y.astype(dtype, copy=False)) for yhat, y in zip(outputs, label)]
                if args.amp:
                    with amp.scale_loss(loss, trainer) as scaled_loss:
                        autograd.backward(scaled_loss)
                else:
                    autograd.backward(loss)
            trainer.step(batch_size)
            train_metric.update(label, outputs)
            mean_loss = sum(l.astype('float32').mean().asscalar() for l in loss) / len(loss)
            history['loss'].append(float(mean_loss))
            if args.log_interval and not (i + 1) % args.log_interval:
                logger.info('Epoch[%d] Batch [%d]\tSpeed: %f samples/sec\tloss=%f\t%s=%f\tlr=%f' % (
                    epoch, i, batch_size / (time.time() - btic), mean_loss,
                    *train_metric.get(), trainer.learning_rate))
            btic = time.time()
        top1 = test(net, ctx, val_data, dtype)
        history['val_top1'].append(float(top1))
        logger.info('[Epoch %d] time cost: %f\tvalidation: top1=%f' % (epoch, time.time() - tic, top1))
    if args.save_metrics:
        with open(args.save_metrics, 'w') as f:
            json.dump(history, f)


if __name__ == '__main__':
    main()
