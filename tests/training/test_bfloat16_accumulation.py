"""bfloat16 AMP keeps the gradients of parameters with ``grad_req='add'`` (issue 56: GluonNLP's
``train_transformer.py`` learned far less under bfloat16 AMP than in float32).

MXNet 1.9.1's oneDNN ``amp_cast`` drops its result when asked to add it, so every parameter that
reaches AMP's cast alone kept a zero gradient under gradient accumulation;
``training._accumulate`` routes parameters through a copy."""
import numpy as np
import pytest

import mxnet as mx
from mxnet import autograd, gluon

import mxmixed
from conftest import run_python
from mxmixed._core.devices import bfloat16_support

RUNS, WHY = bfloat16_support()
pytestmark = pytest.mark.skipif(not RUNS, reason="bfloat16 cannot run here: %s" % WHY)

LAYERS = {
    "dense": lambda: [gluon.nn.Embedding(7, 8), gluon.nn.Dense(5, flatten=False)],
    "layernorm": lambda: [gluon.nn.Embedding(7, 8), gluon.nn.LayerNorm()],
    "conv": lambda: [gluon.nn.Embedding(7, 8), gluon.nn.Conv1D(4, 3)],
}


def _grads(make, grad_req, passes, hybridize):
    mx.random.seed(0)
    net = gluon.nn.HybridSequential()
    with net.name_scope():
        net.add(*make())
    net.initialize(mx.init.Xavier())
    if hybridize:
        net.hybridize()
    x = mx.nd.array(np.random.RandomState(0).randint(0, 7, (4, 6)))
    net(x)
    net.collect_params().setattr("grad_req", grad_req)
    net.collect_params().zero_grad()
    for _ in range(passes):
        with autograd.record():
            loss = (net(x).astype("float32") ** 2).sum()
        loss.backward()
    return {name.split("_", 1)[1]: p.grad().asnumpy().astype(np.float64)
            for name, p in net.collect_params().items()}


@pytest.mark.parametrize("hybridize", [False, True], ids=["imperative", "hybridized"])
@pytest.mark.parametrize("layers", sorted(LAYERS))
def test_accumulated_gradients_are_the_sum_of_the_passes(layers, hybridize):
    with mxmixed.amp_scope(target_dtype="bfloat16"):
        written = _grads(LAYERS[layers], "write", 1, hybridize)
        added = _grads(LAYERS[layers], "add", 2, hybridize)
    for name, grad in written.items():
        assert np.abs(grad).max() > 0, name
        np.testing.assert_allclose(added[name], 2 * grad, rtol=1e-6, atol=1e-6, err_msg=name)


def test_mxnets_own_bfloat16_amp_drops_accumulated_gradients():
    """The MXNet 1.9.1 bug mxmixed works around: if this starts failing, the copy can go."""
    code = """
import mxnet as mx
from mxnet import autograd, gluon
from mxnet.contrib import amp
amp.init(target_dtype="bfloat16")
net = gluon.nn.Dense(3)
net.initialize()
net.hybridize()
x = mx.nd.ones((2, 4))
net(x)
net.collect_params().setattr("grad_req", "add")
net.collect_params().zero_grad()
with autograd.record():
    y = net(x).astype("float32").sum()
y.backward()
print("MAX", float(net.weight.grad().abs().max().asscalar()))
"""
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("MAX")[-1].strip() == "0.0"


# a Transformer in small: tied embeddings, scaled dot-product attention with a -1e18 padding
# mask, LayerNorm, a ReLU feed-forward, label smoothing and gradient accumulation, trained to
# reverse its input (GluonNLP's train_transformer.py has all of these)
VOCAB, LENGTH, UNITS = 12, 6, 32


class TinyTransformer(gluon.HybridBlock):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.embed = self.params.get("embed", shape=(VOCAB, UNITS))
            self.position = self.params.get("position", shape=(LENGTH, UNITS))
            self.qkv = gluon.nn.Dense(3 * UNITS, flatten=False)
            self.proj = gluon.nn.Dense(UNITS, flatten=False)
            self.norm1, self.norm2 = gluon.nn.LayerNorm(), gluon.nn.LayerNorm()
            self.ffn1 = gluon.nn.Dense(2 * UNITS, flatten=False, activation="relu")
            self.ffn2 = gluon.nn.Dense(UNITS, flatten=False)

    def hybrid_forward(self, F, tokens, mask, embed, position):
        h = F.Embedding(tokens, embed, input_dim=VOCAB, output_dim=UNITS) * (UNITS ** 0.5)
        h = F.broadcast_add(h, F.expand_dims(position, 0))
        q, k, v = F.split(self.qkv(h), num_outputs=3, axis=-1)
        score = F.batch_dot(q, k, transpose_b=True) / (UNITS ** 0.5)
        score = F.where(F.broadcast_like(F.expand_dims(mask, 1), score), score,
                        -1e18 * F.ones_like(score))
        h = self.norm1(h + self.proj(F.batch_dot(F.softmax(score, axis=-1), v)))
        h = self.norm2(h + self.ffn2(self.ffn1(h)))
        return F.FullyConnected(h, embed, num_hidden=VOCAB, no_bias=True,
                                flatten=False)


def _train_reversal(steps=200, accumulate=2):
    rng = np.random.RandomState(0)
    mx.random.seed(0)
    net = TinyTransformer()
    net.initialize(mx.init.Xavier())
    net.hybridize(static_alloc=True)
    net.collect_params().setattr("grad_req", "add")
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 3e-3})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss(sparse_label=False)

    def batch(n):
        tokens = rng.randint(1, VOCAB, size=(n, LENGTH))
        tokens[:, -1] = 0  # padding, masked out
        target = tokens[:, ::-1].copy()  # reversed: only attention can find each token
        return mx.nd.array(tokens), mx.nd.array(tokens != 0), mx.nd.array(target)

    for _ in range(steps):
        for _ in range(accumulate):
            tokens, mask, target = batch(16)
            smoothed = 0.9 * mx.nd.one_hot(target, VOCAB) + 0.1 / VOCAB
            with autograd.record():
                loss = loss_fn(net(tokens, mask).astype("float32"), smoothed)
            loss.backward()
        trainer.step(16 * accumulate)
        net.collect_params().zero_grad()
    tokens, mask, target = batch(64)
    logits = net(tokens, mask).astype("float32")
    return float(gluon.loss.SoftmaxCrossEntropyLoss()(logits, target).mean().asscalar())


def test_a_small_transformer_with_accumulated_gradients_learns_in_bfloat16_as_in_float32():
    float32 = _train_reversal()
    with mxmixed.amp_scope(target_dtype="bfloat16"):
        bfloat16 = _train_reversal()
    untrained = np.log(VOCAB)
    assert float32 < 0.5 * untrained, float32  # the task is learned
    assert bfloat16 <= 1.1 * float32 + 0.02, (bfloat16, float32)
