"""Train an SSD detector on Pascal VOC, in the style of gluon-cv's scripts/detection/ssd/train_ssd.py.

A client of MXNet and gluoncv only (it knows nothing about mxmixed): ``--amp`` uses
``mxnet.contrib.amp`` as gluon-cv's script does. Validation decodes boxes with the network's
own SSD box decoder and scores them with VOC07 mAP.

Example: ``python train_ssd.py --dataset-root ~/.mxnet/datasets/voc --data-shape 64 --amp``
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

import gluoncv as gcv
from gluoncv import data as gdata
from gluoncv import utils as gutils
from gluoncv.data.batchify import Pad, Stack, Tuple
from gluoncv.data.transforms.presets.ssd import SSDDefaultTrainTransform, SSDDefaultValTransform
from gluoncv.model_zoo import get_model
from gluoncv.utils.metrics.voc_detection import VOC07MApMetric


def parse_args():
    parser = argparse.ArgumentParser(description='Train SSD networks.')
    parser.add_argument('--network', type=str, default='mobilenet0.25',
                        help='Base network name which serves as feature extraction base.')
    parser.add_argument('--base-size', type=int, default=300,
                        help='The model zoo name\'s input size (ssd_<base-size>_<network>_voc).')
    parser.add_argument('--data-shape', type=int, default=300,
                        help='Input data shape; small shapes such as 64 work for quick runs.')
    parser.add_argument('--batch-size', type=int, default=32, help='Training mini-batch size.')
    parser.add_argument('--dataset-root', type=str, default='~/.mxnet/datasets/voc',
                        help='Folder holding VOC2007 and VOC2012.')
    parser.add_argument('--num-workers', '-j', dest='num_workers', type=int, default=4,
                        help='Number of data workers.')
    parser.add_argument('--gpus', type=str, default='',
                        help='Training with GPUs, you can specify 1,3 for example.')
    parser.add_argument('--epochs', type=int, default=240, help='Training epochs.')
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


def get_dataloader(net, train_dataset, val_dataset, data_shape, batch_size, num_workers, ctx):
    width, height = data_shape, data_shape
    # the anchors of this input size, for target generation in the data pipeline
    with autograd.train_mode():
        _, _, anchors = net(mx.nd.zeros((1, 3, height, width), ctx))
    anchors = anchors.as_in_context(mx.cpu())
    batchify_fn = Tuple(Stack(), Stack(), Stack())  # image, cls_targets, box_targets
    train_loader = gluon.data.DataLoader(
        train_dataset.transform(SSDDefaultTrainTransform(width, height, anchors)),
        batch_size, True, batchify_fn=batchify_fn, last_batch='rollover', num_workers=num_workers)
    val_loader = gluon.data.DataLoader(
        val_dataset.transform(SSDDefaultValTransform(width, height)),
        batch_size, False, batchify_fn=Tuple(Stack(), Pad(pad_val=-1)), last_batch='keep',
        num_workers=num_workers)
    return train_loader, val_loader


def validate(net, val_data, ctx, eval_metric):
    """Decode boxes with the network's SSD decoder and NMS, and score VOC07 mAP."""
    eval_metric.reset()
    net.set_nms(nms_thresh=0.45, nms_topk=400)
    net.hybridize(static_alloc=True, static_shape=True)
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
        update_on_kvstore=(False if args.amp else None))
    if args.amp:
        amp.init_trainer(trainer)

    mbox_loss = gcv.loss.SSDMultiBoxLoss()
    ce_metric = mx.metric.Loss('CrossEntropy')
    smoothl1_metric = mx.metric.Loss('SmoothL1')
    logger = logging.getLogger()
    logger.info(args)
    history = {'cross_entropy': [], 'smooth_l1': [], 'map': []}
    for epoch in range(args.epochs):
        ce_metric.reset()
        smoothl1_metric.reset()
        tic = btic = time.time()
        net.hybridize(static_alloc=True, static_shape=True)
        for i, batch in enumerate(train_data):
            if args.max_iters and i >= args.max_iters:
                break
            batch_size = batch[0].shape[0]
            data = gluon.utils.split_and_load(batch[0], ctx_list=ctx, batch_axis=0)
            cls_targets = gluon.utils.split_and_load(batch[1], ctx_list=ctx, batch_axis=0)
            box_targets = gluon.utils.split_and_load(batch[2], ctx_list=ctx, batch_axis=0)
            with autograd.record():
                cls_preds, box_preds = [], []
                for x in data:
                    cls_pred, box_pred, _ = net(x)
                    cls_preds.append(cls_pred)
                    box_preds.append(box_pred)
                sum_loss, cls_loss, box_loss = mbox_loss(
                    cls_preds, box_preds, cls_targets, box_targets)
                if args.amp:
                    with amp.scale_loss(sum_loss, trainer) as scaled_loss:
                        autograd.backward(scaled_loss)
                else:
                    autograd.backward(sum_loss)
            # the loss is already normalized: do not normalize by the batch size again
            trainer.step(1)
            ce_metric.update(0, [l * batch_size for l in cls_loss])
            smoothl1_metric.update(0, [l * batch_size for l in box_loss])
            name1, loss1 = ce_metric.get()
            name2, loss2 = smoothl1_metric.get()
            history['cross_entropy'].append(float(loss1))
            history['smooth_l1'].append(float(loss2))
            if args.log_interval and not (i + 1) % args.log_interval:
                logger.info('[Epoch {}][Batch {}], Speed: {:.3f} samples/sec, {}={:.3f}, {}={:.3f}'
                            .format(epoch, i, batch_size / (time.time() - btic), name1, loss1,
                                    name2, loss2))
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

    net_name = '_'.join(('ssd', str(args.base_size), args.network, 'voc'))
    net = get_model(net_name, pretrained_base=False, norm_layer=gluon.nn.BatchNorm)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter('always')
        net.initialize()
        net.collect_params().reset_ctx(ctx[0])

    train_dataset, val_dataset, eval_metric = get_dataset(args.dataset_root)
    train_data, val_data = get_dataloader(net, train_dataset, val_dataset, args.data_shape,
                                          args.batch_size, args.num_workers, ctx[0])
    history = train(net, train_data, val_data, eval_metric, ctx, args)
    if args.save_metrics:
        with open(args.save_metrics, 'w') as f:
            json.dump(history, f)
