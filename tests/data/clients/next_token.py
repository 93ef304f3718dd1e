"""A small float32 next-token model with no float16 switch, in the style of GluonNLP 0.10's
language-model scripts (``scripts/language_model/word_language_model.py``,
``large_word_language_model.py``): an Embedding, a Dense layer, an output layer, the mean
token cross-entropy, gradients clipped by ``gluon.utils.clip_global_norm`` on the gradient
arrays, ``trainer.step``. It knows nothing of AMP or mxmixed: ``mxmixed run --amp float16``
is what trains it in float16.

``--sparse`` makes it like the big LM: the output weight is ``row_sparse`` (read with
``row_sparse_data``) and the Embedding's gradient is sparse, so MXNet makes the Trainer update
on its kvstore (``update_on_kvstore=True``). ``--plant-inf STEP`` puts an inf into that step's
input features, so that its gradients overflow. ``--backward autograd`` calls
``autograd.backward`` instead of ``loss.backward()``.

The data is a fixed cycle of tokens, made in the script (nothing is read or downloaded). The
loss of every step goes to ``--save-losses`` (JSON), with whether every weight is finite at the
end.
"""
import argparse
import json
import math

import mxnet as mx
from mxnet import autograd, gluon

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--lr", type=float, default=0.5)
parser.add_argument("--clip", type=float, default=None)
parser.add_argument("--sparse", action="store_true")
parser.add_argument("--plant-inf", type=int, default=None)
parser.add_argument("--backward", choices=["ndarray", "autograd"], default="ndarray")
parser.add_argument("--save-losses", required=True)
args = parser.parse_args()

VOCAB, UNITS, BATCH = 32, 16, 64
mx.random.seed(1)


class NextToken(gluon.HybridBlock):
    def __init__(self, sparse, **kwargs):
        super().__init__(**kwargs)
        self.sparse = sparse
        with self.name_scope():
            self.embedding = gluon.nn.Embedding(VOCAB, UNITS, sparse_grad=sparse)
            self.hidden = gluon.nn.Dense(UNITS, in_units=UNITS + 1, activation="tanh")
            self.out_weight = self.params.get("out_weight", shape=(VOCAB, UNITS),
                                              stype="row_sparse" if sparse else "default",
                                              grad_stype="row_sparse" if sparse else "default")

    def forward(self, tokens, feature):
        h = self.hidden(mx.nd.concat(self.embedding(tokens), feature, dim=1))
        if self.sparse:
            weight = self.out_weight.row_sparse_data(mx.nd.arange(VOCAB)).tostype("default")
        else:
            weight = self.out_weight.data()
        return mx.nd.dot(h, weight, transpose_b=True)


net = NextToken(args.sparse)
net.initialize(mx.init.Xavier())
trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": args.lr})
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
params = [p for p in net.collect_params().values() if p.grad_req != "null"]

tokens = mx.nd.arange(BATCH) % VOCAB
targets = (tokens * 7 + 3) % VOCAB
losses = []
for step in range(1, args.steps + 1):
    feature = mx.nd.ones((BATCH, 1))
    if step == args.plant_inf:
        feature[0] = float("inf")
    with autograd.record():
        loss = loss_fn(net(tokens, feature), targets).mean()
    if args.backward == "autograd":
        autograd.backward(loss)
    else:
        loss.backward()
    if args.clip is not None:
        gluon.utils.clip_global_norm([p.grad() for p in params], args.clip)
    trainer.step(1)
    losses.append(float(loss.asscalar()))

finite = all(math.isfinite(float(p.data().astype("float32").abs().sum().asscalar()))
             if p._stype == "default" else
             math.isfinite(float(p.row_sparse_data(mx.nd.arange(VOCAB)).data.abs().sum()
                                 .asscalar()))
             for p in net.collect_params().values())
with open(args.save_losses, "w") as f:
    json.dump({"losses": losses, "weights_finite": finite}, f)
print("first loss %.4f last loss %.4f" % (losses[0], losses[-1]))
