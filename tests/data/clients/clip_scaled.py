"""A small MXNet AMP script that clips its gradients by global norm the way GluonNLP 0.10's
``scripts/bert/finetune_classifier.py`` does: after ``amp.scale_loss``, without ``amp.unscale``,
so that under ``--dtype float16`` it clips the loss-scaled gradients.

It fits a linear regression with one Dense layer and SGD, and writes the loss of every step
to ``--save-losses``. ``--clip`` picks the clipping function: ``gluon``
(``gluon.utils.clip_global_norm`` on the gradient arrays), ``gluonnlp``
(``gluonnlp.utils.clip_grad_global_norm`` on the parameters), or ``scaled`` (GluonNLP's, with the
threshold multiplied by the loss scale, as its ``finetune_squad.py`` does).
"""
import argparse
import json

import mxnet as mx
from mxnet import autograd, gluon
from mxnet.contrib import amp

parser = argparse.ArgumentParser()
parser.add_argument("--dtype", choices=["float32", "float16"], default="float32")
parser.add_argument("--clip", choices=["gluon", "gluonnlp", "scaled"], default="gluon")
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--save-losses", required=True)
args = parser.parse_args()

mx.random.seed(0)
if args.dtype == "float16":
    amp.init()

X = mx.nd.random.normal(shape=(256, 16))
y = mx.nd.dot(X, mx.nd.random.normal(shape=(16, 1)))
net = gluon.nn.Dense(1, in_units=16)
net.initialize(mx.init.Zero())
net.hybridize()
loss_fn = gluon.loss.L2Loss()
trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.5},
                        update_on_kvstore=False)
if args.dtype == "float16":
    amp.init_trainer(trainer)
params = [p for p in net.collect_params().values() if p.grad_req != "null"]

losses = []
for step in range(args.steps):
    with autograd.record():
        loss = loss_fn(net(X), y).mean()
        if args.dtype == "float16":
            with amp.scale_loss(loss, trainer) as scaled:
                autograd.backward(scaled)
        else:
            loss.backward()
    if args.clip == "gluon":
        gluon.utils.clip_global_norm([p.grad() for p in params], 1.0)
    else:
        import gluonnlp as nlp

        limit = 1.0
        if args.clip == "scaled" and args.dtype == "float16":
            limit *= trainer._amp_loss_scaler.loss_scale
        nlp.utils.clip_grad_global_norm(params, limit)
    trainer.update(1)
    losses.append(float(loss.asscalar()))

with open(args.save_losses, "w") as f:
    json.dump(losses, f)
print("loss %.4f -> %.4f" % (losses[0], losses[-1]))
