"""Train a YOLOv3 detector on Pascal VOC, in the style of gluon-cv's scripts/detection/yolo/train_yolo3.py.

A client of MXNet and gluoncv only (it knows nothing about mxmixed): ``--amp`` uses
``mxnet.contrib.amp`` as gluon-cv's script does. The network computes its own losses (objectness,
box center, box scale, class) from the targets that the data pipeline generates; validation
decodes boxes and scores VOC07 mAP.

Example: ``python train_yolo3.py --dataset-root ~/.mxnet/datasets/voc --data-shape 64 --amp``
"""
import argparse
import json
import logging
import math
import time
import warnings

import mxnet as mx
from mxnet import autograd, gluon
from mxnet.contrib import amp

from gluoncv import data as gdata
from gluoncv import utils as gutils
from gluoncv.data.batchify import Pad, Stack, Tuple
from gluoncv.data.transforms.presets.yolo import (YOLO3DefaultTrainTransform,
                                                  YOLO3DefaultValTransform)
from gluoncv.model_zoo import get_model
from gluoncv.utils.metrics.voc_detection import VOC07MApMetric


def parse_args():
    parser = argparse.ArgumentParser(description='Train YOLO networks with random input shape.')
    parser.add_argument('--network', type=str, default='mobilenet0.25',
                        help='Base network name which serves as feature extraction base.')
    parser.add_argument('--data-shape', type=int, default=416,
                        help='Input data shape for evaluation, use 320, 416, 608... '
                             'Training uses the same shape; it must be a multiple of 32.')
    parser.add_argument('--batch-size', type=int, default=64, help='Training mini-batch size.')
    parser.add_argument('--dataset-root', type=str, default='~/.mxnet/datasets/voc',
                        help='Folder holding VOC2007 and VOC2012.')
    parser.add_argument('--num-workers', '-j', dest='num_workers', type=int, default=4,
                        help='Number of data workers.')
    parser.add_argument('--gpus', type=str, default='',
                        help='Training with GPUs, you can specify 1,3 for example.')
    parser.add_argument('--epochs', type=int, default=200, help='Training epochs.')
    parser.add_argument('--max-iters', type=int, default=0,
                        help='Stop each epoch after this many iterations (0: whole epoch).')
    parser.add_argument('--lr', type=float, default=0.001, help='Learning rate.')
    parser.add_argument('--momentum', type=float, default=0.9, help='SGD momentum.')
    parser.add_argument('--wd', type=float, default=0.0005, help='Weight decay.')
    parser.add_argument('--log-interval', type=int, default=100,
                        help='Logging mini-batch interval.')
    parser.add_argument('--seed', type=int, default=233, help='Random seed to be fixed.')
    parser.add_argument('--amp', action='store_true',
                        help='Use MXNet AMP for mixed precision training.')
    parser.add_argument('--save-metrics', type=str, default='',
                        help='Write the losses and the validation mAP to this JSON file.')
    return parser.parse_args()


def get_dataset(root):
    train_dataset = gdata.VOCDetection(root=root, splits=[(2007, 'trainval'), (2012, 'trainval')])
    val_dataset = gdata.VOCDetection(root=root, splits=[(2007, 'test')])
    val_metric = VOC07MApMetric(iou_thresh=0.5, class_names=val_dataset.classes)
    return train_dataset, val_dataset, val_metric


def get_dataloader(net, train_dataset, val_dataset, data_shape, batch_size, num_workers):
    width, height = data_shape, data_shape
    # image, then objectness, center, scale, weights, class targets, then the padded gt boxes
    batchify_fn = Tuple(*([Stack() for _ in range(6)] + [Pad(axis=0, pad_val=-1)]))
    train_loader = gluon.data.DataLoader(
        train_dataset.transform(YOLO3DefaultTrainTransform(width, height, net)),
        batch_size, True, batchify_fn=batchify_fn, last_batch='rollover', num_workers=num_workers)
    val_loader = gluon.data.DataLoader(
        val_dataset.transform(YOLO3DefaultValTransform(width, height)),
        batch_size, False, batchify_fn=Tuple(Stack(), Pad(pad_val=-1)), last_batch='keep',
        num_workers=num_workers)
    return train_loader, val_loader


def validate(net, val_data, ctx, eval_metric):
    eval_metric.reset()
    net.set_nms(nms_thresh=0.45, nms_topk=400)
    mx.nd.waitall()
    net.hybridize()
    for batch in val_data:
        data = gluon.utils.split_and_load(batch[0], ctx_list=ctx, batch_axis=0, even_split=False)
        label = gluon.utils.split_and_load(batch[1], ctx_list=ctx, batch_axis=0, even_split=False)
        det_bboxes, det_ids, det_scores, gt_bboxes, gt_ids, gt_difficults = [], [], [], [], [], []
        for x, y in zip(data, label):
            ids, scores, bboxes = net(x)
            det_ids.append(ids)
            det_scores.append(scores)
            det_bboxes.append(bboxes.clip(0, batch[0].shape[2]))
            gt_ids.append(y.slice_axis(axis=-1, begin=4, end=5))
            gt_bboxes.append(y.slice_axis(axis=-1, begin=0, end=4))
            gt_difficults.append(y.slice_axis(axis=-1, begin=5, end=6) if y.shape[-1] > 5 else None)
        eval_metric.update(det_bboxes, det_ids, det_scores, gt_bboxes, gt_ids, gt_difficults)
    return eval_metric.get()


def train(net, train_data, val_data, eval_metric, ctx, args):
    net.collect_params().reset_ctx(ctx)
    trainer = gluon.Trainer(
        net.collect_params(), 'sgd',
        {'learning_rate': args.lr, 'wd': args.wd, 'momentum': args.momentum},
        kvstore='local', update_on_kvstore=(False if args.amp else None))
    if args.amp:
        amp.init_trainer(trainer)

    metrics = [mx.metric.Loss(n) for n in ('ObjLoss', 'BoxCenterLoss', 'BoxScaleLoss', 'ClassLoss')]
    logger = logging.getLogger()
    logger.info(args)
    history = {'losses': [], 'map': []}
    for epoch in range(args.epochs):
        tic = btic = time.time()
        mx.nd.waitall()
        net.hybridize()
        for i, batch in enumerate(train_data):
            if args.max_iters and i >= args.max_iters:
                break
            batch_size = batch[0].shape[0]
            data = gluon.utils.split_and_load(batch[0], ctx_list=ctx, batch_axis=0)
            fixed_targets = [gluon.utils.split_and_load(batch[it], ctx_list=ctx, batch_axis=0)
                             for it in range(1, 6)]
            gt_boxes = gluon.utils.split_and_load(batch[6], ctx_list=ctx, batch_axis=0)
            sum_losses, parts = [], [[], [], [], []]
            with autograd.record():
                for ix, x in enumerate(data):
                    losses = net(x, gt_boxes[ix], *[ft[ix] for ft in fixed_targets])
                    sum_losses.append(sum(losses))
                    for part, loss in zip(parts, losses):
                        part.append(loss)
                if args.amp:
                    with amp.scale_loss(sum_losses, trainer) as scaled_loss:
                        autograd.backward(scaled_loss)
                else:
                    autograd.backward(sum_losses)
            trainer.step(batch_size)
            for metric, part in zip(metrics, parts):
                metric.update(0, part)
            values = [metric.get() for metric in metrics]
            history['losses'].append([float(v) for _, v in values])
            if args.log_interval and not (i + 1) % args.log_interval:
                logger.info('[Epoch {}][Batch {}], LR: {:.2E}, Speed: {:.3f} samples/sec, {}'.format(
                    epoch, i, trainer.learning_rate, batch_size / (time.time() - btic),
                    ', '.join('{}={:.3f}'.format(n, v) for n, v in values)))
            btic = time.time()
        logger.info('[Epoch {}] Training cost: {:.3f}'.format(epoch, time.time() - tic))
        map_name, mean_ap = validate(net, val_data, ctx, eval_metric)
        mean_ap = [0.0 if math.isnan(v) else float(v) for v in mean_ap]
        logger.info('[Epoch {}] Validation: {}={:.4f}'.format(epoch, map_name[-1], mean_ap[-1]))
        history['map'].append(mean_ap[-1])
    return history


if __name__ == '__main__':
    args = parse_args()
    logging.basicConfig(level=logging.INFO)
    if args.amp:
        amp.init()
    gutils.random.seed(args.seed)
    ctx = [mx.gpu(int(i)) for i in args.gpus.split(',') if i.strip()]
    ctx = ctx if ctx else [mx.cpu()]

    net = get_model('_'.join(('yolo3', args.network, 'voc')), pretrained_base=False)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter('always')
        net.initialize()

    train_dataset, val_dataset, eval_metric = get_dataset(args.dataset_root)
    train_data, val_data = get_dataloader(net, train_dataset, val_dataset, args.data_shape,
                                          args.batch_size, args.num_workers)
    history = train(net, train_data, val_data, eval_metric, ctx, args)
    if args.save_metrics:
        with open(args.save_metrics, 'w') as f:
            json.dump(history, f)
