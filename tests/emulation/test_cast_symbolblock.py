"""Networks whose graph declares float32 weights that a run binds as float16 train under emulation.

A ``SymbolBlock`` keeps the ``__dtype__`` its symbol's variables declared when it was built;
``net.cast('float16')`` changes the Parameters, not those declarations. gluon-cv's FPN R-CNNs
are built that way (their features are a SymbolBlock), and its ``train_mask_rcnn.py --amp``
calls ``amp.init()`` and then ``net.cast('float16')``. The emulation must type such a graph by
the arrays the run binds: a stale float32 declaration once made it carry a float16 weight
through the float32 rounding op, and binding failed ("_mxmixed_round16 takes float32 input").

AMP's patches cannot be undone in MXNet 1.9.1, so each run happens in a fresh interpreter.
"""
import json

import pytest

from conftest import run_python

SYMBOLBLOCK_SCRIPT = """
import json
import mxnet as mx
from mxnet import autograd, gluon
from mxnet.contrib import amp
from mxmixed import emulation

emulation.enable()
amp.init()
base = gluon.nn.HybridSequential()
base.add(gluon.nn.Conv2D(8, 3, padding=1), gluon.nn.BatchNorm(), gluon.nn.Activation("relu"),
         gluon.nn.Conv2D(8, 3, padding=1))
base.initialize(mx.init.Xavier())
data = mx.sym.var("data")
net = gluon.SymbolBlock(base(data), data, params=base.collect_params())
declared = {n: a.get("__dtype__") for n, a in net(data).attr_dict().items() if n.endswith("weight")}
net.cast("float16")
net.collect_params(".*batchnorm.*").setattr("dtype", "float32")
net.collect_params(".*batchnorm.*").setattr("grad_req", "null")
net.hybridize()
# one gradient dtype, as in gluon-cv's R-CNN scripts (MXNet's overflow check needs that)
trainer = gluon.Trainer(net.collect_params(".*conv.*"), "sgd", {"learning_rate": 0.01,
                        "multi_precision": True}, update_on_kvstore=False)
amp.init_trainer(trainer)
X = mx.nd.random.uniform(shape=(2, 3, 8, 8)).astype("float16")
losses = []
for _ in range(3):
    with autograd.record():
        loss = net(X).astype("float32").square().mean()
        with amp.scale_loss(loss, trainer) as scaled:
            autograd.backward(scaled)
    trainer.step(X.shape[0])
    losses.append(float(loss.asscalar()))
weight = net.collect_params()[sorted(declared)[0]]
print("RESULT=" + json.dumps({"declared": sorted(set(declared.values())), "losses": losses,
                              "weight": str(weight.data().dtype.__name__),
                              "emulated": emulation.EMULATION.active}))
"""

MASK_RCNN_SCRIPT = """
import json
import numpy as np
import mxnet as mx
from mxnet import autograd, gluon
from mxnet.contrib import amp
from gluoncv.data import COCODetection, batchify
from gluoncv.data.transforms.presets.rcnn import MaskRCNNDefaultTrainTransform
from gluoncv.model_zoo import get_model
from gluoncv.utils.parallel import Parallel, Parallelizable
import mxmixed

mxmixed.init()
# the model of train_mask_rcnn.py's `custom-model --no-pretrained-base`, made small
net = get_model("custom_mask_rcnn_fpn", classes=COCODetection.CLASSES, transfer=None,
                dataset="coco", pretrained_base=False, base_network_name="resnet18_v1b",
                norm_layer=gluon.nn.BatchNorm, norm_kwargs=None, sym_norm_kwargs=None,
                num_fpn_filters=32, num_box_head_conv=2, num_box_head_conv_filters=32,
                num_box_head_dense_filters=64, short=192, max_size=256, min_stage=2,
                max_stage=6, nms_thresh=0.5, nms_topk=-1, post_nms=-1, roi_mode="align",
                roi_size=(14, 14), strides=(4, 8, 16, 32, 64), clip=4.14, rpn_channel=32,
                base_size=16, scales=(2, 4, 8, 16, 32), ratios=(0.5, 1, 2),
                alloc_size=(384, 384), rpn_nms_thresh=0.7, rpn_train_pre_nms=512,
                rpn_train_post_nms=128, rpn_test_pre_nms=256, rpn_test_post_nms=64,
                rpn_min_size=1, per_device_batch_size=1, num_sample=64, pos_iou_thresh=0.5,
                pos_ratio=0.25, max_num_gt=8, target_roi_scale=2, num_fcn_convs=2)
for param in net.collect_params().values():
    if param._data is None:
        param.initialize()
net.cast("float16")
net.collect_params(".*batchnorm.*").setattr("dtype", "float32")
net.collect_params(".*normalizedperclassboxcenterencoder.*").setattr("dtype", "float32")

rng = np.random.RandomState(0)
transform = MaskRCNNDefaultTrainTransform(net.short, net.max_size, net, ashape=net.ashape,
                                          multi_stage=True)
samples = []
for _ in range(2):
    img = mx.nd.array(rng.randint(0, 255, (180, 240, 3)), dtype="uint8")
    boxes = np.array([[20, 30, 100, 120, 0], [110, 40, 200, 150, 2]], dtype="float32")
    segms = [[np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], dtype="float32")]
             for x0, y0, x1, y1, _ in boxes]
    samples.append(transform(img, boxes, segms))
batch = batchify.MaskRCNNTrainBatchify(net, 1)(samples[:1])

net.collect_params().setattr("grad_req", "null")
net.collect_train_params().setattr("grad_req", "write")
trainer = gluon.Trainer(net.collect_train_params(), "sgd",
                        {"learning_rate": 0.001, "wd": 1e-4, "momentum": 0.9,
                         "multi_precision": True}, update_on_kvstore=False)
scaler = mxmixed.init_trainer(trainer)
bce = gluon.loss.SigmoidBinaryCrossEntropyLoss(from_sigmoid=False)
huber = gluon.loss.HuberLoss(rho=1. / 9.)
ce = gluon.loss.SoftmaxCrossEntropyLoss()


class ForwardBackward(Parallelizable):
    def forward_backward(self, x):
        data, label, gt_mask, rpn_cls_targets, rpn_box_targets, rpn_box_masks = x
        with autograd.record():
            gt_label, gt_box = label[:, :, 4:5], label[:, :, :4]
            cls_pred, box_pred, mask_pred, roi, samples, matches, rpn_score, rpn_box, anchors, \\
                cls_targets, box_targets, box_masks, indices = net(data, gt_box, gt_label)
            rpn_score = rpn_score.squeeze(axis=-1)
            num_rpn_pos = (rpn_cls_targets >= 0).sum()
            rpn_loss = (bce(rpn_score, rpn_cls_targets, rpn_cls_targets >= 0)
                        * rpn_cls_targets.size / num_rpn_pos
                        + huber(rpn_box, rpn_box_targets, rpn_box_masks)
                        * rpn_box.size / num_rpn_pos)
            num_rcnn_pos = (cls_targets >= 0).sum()
            rcnn_loss = (ce(cls_pred, cls_targets, cls_targets.expand_dims(-1) >= 0)
                         * cls_targets.size / num_rcnn_pos
                         + huber(box_pred, box_targets, box_masks) * box_pred.size / num_rcnn_pos)
            take = lambda a: mx.nd.concat(*[mx.nd.take(a[i], indices[i])
                                            for i in range(indices.shape[0])], dim=0)
            roi = take(roi).reshape((indices.shape[0], -1, 4))
            m_cls = take(cls_targets).reshape((indices.shape[0], -1))
            matches = take(matches).reshape((indices.shape[0], -1))
            mask_targets, mask_masks = net.mask_target(roi, gt_mask, matches, m_cls)
            mask_loss = bce(mask_pred, mask_targets, mask_masks) * mask_targets.size \\
                / mask_masks.sum()
            total = rpn_loss.sum() + rcnn_loss.sum() + mask_loss.sum()
            with mxmixed.scale_loss(total, trainer) as scaled:
                autograd.backward(scaled)
        return total, cls_pred.dtype


net.hybridize()
executor = Parallel(1, ForwardBackward())
losses, scales, dtypes = [], [], set()
try:
    for step in range(3):
        executor.put([(p if isinstance(p, mx.nd.NDArray) else p[0]).as_in_context(mx.cpu())
                      for p in batch])
        total, dtype = executor.get()
        mxmixed.step(trainer, 1)
        losses.append(float(total.astype("float32").asscalar()))
        scales.append(scaler.loss_scale)
        dtypes.add(np.dtype(dtype).name)
finally:
    del executor  # stops its worker thread, as the script's train() does on return
print("RESULT=" + json.dumps({"losses": losses, "scales": scales, "dtypes": sorted(dtypes),
                              "emulated": mxmixed.emulation.EMULATION.active}))
"""


def _result(proc):
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT=")][-1]
    return json.loads(line[len("RESULT="):])


@pytest.mark.slow
def test_symbolblock_cast_to_float16_trains_under_amp_and_emulation():
    result = _result(run_python(SYMBOLBLOCK_SCRIPT))
    assert result["emulated"]
    assert result["declared"] == ["0"], "the graph must declare float32 weights for this test"
    assert result["weight"] == "float16"
    assert all(0 < loss < float("inf") for loss in result["losses"])


@pytest.mark.slow
def test_gluoncv_mask_rcnn_fpn_trains_as_its_script_does():
    """The path of gluon-cv's train_mask_rcnn.py --amp: amp.init, net.cast('float16'), the
    trainer's loss scaler, its Parallel executor over a ForwardBackwardTask."""
    result = _result(run_python(MASK_RCNN_SCRIPT))
    assert result["emulated"]
    assert result["dtypes"] == ["float16"]
    assert all(loss == loss and abs(loss) < float("inf") for loss in result["losses"])
    assert len(result["scales"]) == 3
