"""One model of each gluoncv model-zoo family trains (or infers) in float16 under emulation.

Each family runs with ``mxnet.contrib.amp`` (as gluoncv's training scripts do with ``--amp``),
so AMP's own ``amp_multicast`` nodes sit in the hybridized graphs; the models are built with
``pretrained=False, pretrained_base=False`` and the network is cut off, so nothing can be
downloaded. AMP cannot be undone in a process, so the models run in fresh interpreters.
Small inputs keep the whole module near a minute on two cores. Where the float32 gradients of
these random-init nets exceed float16's range (measured: up to 2e9 for the classifier), the
loss is scaled down, as a static loss scale below 1 would: float16 overflows there on a GPU
too.
"""
import json

import pytest

from conftest import run_python

SCRIPT = r'''
import json, socket, sys
def _offline(*args, **kwargs):
    raise RuntimeError("gluoncv tried to reach the network")
socket.socket.connect = _offline
import numpy as np
import mxnet as mx
from mxnet import autograd
from mxnet.contrib import amp
from gluoncv import model_zoo
from mxmixed import emulation

emulation.enable()
amp.init()
results = {}

def get(name, **kwargs):
    net = model_zoo.get_model(name, pretrained=False, **kwargs)
    net.initialize()
    net.hybridize()
    return net

def finite(*arrays):
    return all(bool(np.isfinite(a.asnumpy().astype(np.float64)).all()) for a in arrays)

def grads(net):
    gs = [p.grad() for p in net.collect_params().values() if p.grad_req != "null"]
    return {"grads": len(gs), "grads_nonzero": sum(bool(g.abs().sum().asscalar() > 0) for g in gs),
            "grads_finite": finite(*gs)}

def classification():
    net = get("mobilenetv2_0.25", classes=10)
    x = mx.nd.random.uniform(shape=(2, 3, 32, 32))
    with autograd.record():
        out = net(x)
        loss = out.astype("float32").sum() * 2.0 ** -22  # float32 grads reach 2e9 here
    loss.backward()
    return dict(out_dtype=np.dtype(out.dtype).name, finite=finite(out), **grads(net))

def ssd():
    net = get("ssd_300_mobilenet0.25_voc", pretrained_base=False)
    x = mx.nd.random.uniform(shape=(1, 3, 128, 128))
    with autograd.record():
        cls, box, _ = net(x)
        loss = cls.astype("float32").sum() + box.astype("float32").sum()
    loss.backward()
    net.hybridize()
    with autograd.predict_mode():
        ids, scores, boxes = net(x)  # the box decoder calls F.amp_multicast
    # in inference mode an untrained net's box predictions, not normalized by batch statistics,
    # can overflow float16 in the decoder's exp (inf), as on a GPU, depending on the last bits
    # of the step before: the decoded boxes must be free of NaN, not finite
    no_nan = not np.isnan(boxes.asnumpy().astype(np.float64)).any()
    return dict(out_dtype=np.dtype(cls.dtype).name, finite=finite(cls, box, scores) and no_nan,
                **grads(net))

def yolo():
    net = get("yolo3_mobilenet0.25_voc", pretrained_base=False)
    x = mx.nd.random.uniform(shape=(1, 3, 64, 64))
    ids, scores, boxes = net(x)
    net.hybridize()
    n, classes = 3 * (2 * 2 + 4 * 4 + 8 * 8), 20
    targets = [mx.nd.zeros((1, n, k)) for k in (1, 2, 2, 2, classes)]
    targets[0][0, 5] = 1
    targets[3][0, 5] = 1
    targets[4][0, 5, 3] = 1
    with autograd.record():
        losses = net(x, mx.nd.array([[[10, 10, 40, 50]]]), *targets)
        total = sum(l.astype("float32").sum() for l in losses) * 2.0 ** -8  # grads to 1.7e5
    total.backward()
    return dict(out_dtype=np.dtype(boxes.dtype).name, finite=finite(boxes, *losses),
                **grads(net))

def segmentation():
    net = get("fcn_resnet50_voc", pretrained_base=False, crop_size=64, base_size=64)
    x = mx.nd.random.uniform(shape=(1, 3, 64, 64))
    with autograd.record():
        outs = net(x)
        loss = sum(o.astype("float32").sum() for o in outs) * 2.0 ** -8  # grads to 6.1e5
    loss.backward()
    return dict(out_dtype=np.dtype(outs[0].dtype).name, finite=finite(*outs), **grads(net))

def pose():
    net = get("simple_pose_resnet18_v1b", pretrained_base=False)
    x = mx.nd.random.uniform(shape=(1, 3, 64, 48))
    with autograd.record():
        out = net(x)
        loss = out.astype("float32").sum()
    loss.backward()
    return dict(out_dtype=np.dtype(out.dtype).name, finite=finite(out), **grads(net))

for family in sys.argv[1:]:
    try:
        results[family] = globals()[family]()
    except Exception as err:
        results[family] = {"error": "%s: %s" % (type(err).__name__, str(err)[:800])}
    mx.nd.waitall()
print("RESULTS " + json.dumps(results))
'''

# All with oneDNN on, the default: the pose head's float16 Deconvolution runs as a Convolution
# (mxmixed/emulation/_deconv.py).
RUNS = {"onednn": (["classification", "ssd", "yolo", "segmentation", "pose"], {})}


@pytest.fixture(scope="module")
def zoo_results():
    results = {}
    for families, env in RUNS.values():
        code = "import sys; sys.argv = ['zoo'] + %r\n%s" % (families, SCRIPT)
        proc = run_python(code, env=env)
        lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULTS ")]
        assert lines, proc.stderr[-3000:]
        results.update(json.loads(lines[-1][len("RESULTS "):]))
    return results


@pytest.mark.slow
@pytest.mark.parametrize("family", ["classification", "ssd", "yolo", "segmentation", "pose"])
def test_family_runs_forward_and_backward_in_float16(family, zoo_results):
    result = zoo_results[family]
    assert "error" not in result, result.get("error")
    assert result["finite"]
    assert result["grads"] > 0
    assert result["grads_finite"]
    assert result["grads_nonzero"] > result["grads"] // 2
    if family in ("classification", "ssd", "segmentation", "pose"):
        assert result["out_dtype"] == "float16"  # AMP's float16 ops compute these outputs
