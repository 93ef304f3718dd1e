"""Record the bits of one emulated float16 training step for each model family.

The output, ``emulation_digests.json``, is the regression net that
``tests/emulation/test_bits.py`` holds the default emulation to: the sha256 of every output,
the loss and every parameter gradient of one training step under ``mxnet.contrib.amp`` with
emulation on, for one model of each family of ``tests/emulation/test_zoo.py``, the tutorial
digits CNN (hybridized and through the Module API) and ``cifar_resnet20_v1``. It was recorded
on the default route (``"route"``: the float32 carry's rounding op keeping oneDNN's layouts),
once, when that became the default (issue 36): fidelity is judged against the GPU, and the
digests guard the default against unintended change. The table before it was recorded on the
cast-pair emulation, whose bits ``MXMIXED_EMULATION_KEEP_LAYOUTS=0`` still gives (the test
compares that route with the cast pairs on every CPU).

Float32 kernels (oneDNN) give different bits on different CPUs and thread counts, so the runs
use one OpenMP thread, and the file records the CPU it was made on; the test compares only on
a CPU with the same model name and instruction-set flags.

Regenerate (only on purpose, on the default emulation, with the reason in the commit):
``python tests/data/make_emulation_digests.py``; ``--print FAMILY ...`` prints one run's
digests instead (what the test calls).
"""
import hashlib
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUTPUT = os.path.join(HERE, "emulation_digests.json")

# Families and the environment each runs in. The pose head's Deconvolution ran with oneDNN
# off when the reference was first recorded; it is kept so.
RUNS = [
    (["classification", "ssd", "yolo", "segmentation", "digits_cnn", "digits_module",
      "cifar_resnet20"], {}),
    (["pose"], {"MXNET_MKLDNN_ENABLED": "0"}),
]
ENV = {"OMP_NUM_THREADS": "1", "MXNET_ENGINE_TYPE": "NaiveEngine"}


def cpu_fingerprint():
    """The CPU model name and the SIMD flags that pick oneDNN's kernels."""
    model, flags = "unknown", []
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model == "unknown":
                    model = value.strip()
                if key.strip() == "flags" and not flags:
                    flags = sorted(f for f in value.split()
                                   if f.startswith(("avx", "fma", "f16c", "sse4", "amx")))
    except OSError:
        pass
    return {"model": model, "flags": flags}


def digest(array):
    """sha256 of an NDArray's raw bytes, with its dtype and shape."""
    values = array.asnumpy()
    return "%s%s:%s" % (values.dtype.name, list(values.shape),
                        hashlib.sha256(values.tobytes()).hexdigest()[:32])


def run_families(families, save_dir=None):
    """Run one emulated AMP training step per family in this process; return the digests.

    With ``save_dir``, each family's outputs, loss and gradients are also saved there as
    ``FAMILY.npz`` (for the cross-route bounds of ``emulation/test_bits.py``).
    """
    import numpy as np
    import mxnet as mx
    from mxnet import autograd
    from mxnet.contrib import amp
    from mxmixed import emulation

    emulation.enable()
    amp.init()
    rng = np.random.RandomState(0)

    def uniform(*shape):
        return mx.nd.array(rng.uniform(size=shape).astype(np.float32))

    def get(name, hybridize=True, **kwargs):
        from gluoncv import model_zoo
        mx.random.seed(0)
        net = model_zoo.get_model(name, pretrained=False, **kwargs)
        net.initialize()
        if hybridize:
            net.hybridize()
        return net

    def perturb(net, x):
        """Finish deferred init, then give biases and BatchNorm betas random values: zeros
        would hide the bias composition's second rounding."""
        net(x)
        for name, param in sorted(net.collect_params().items()):
            if name.endswith(("bias", "beta")):
                value = rng.uniform(-0.5, 0.5, size=param.shape).astype(np.float32)
                param.set_data(mx.nd.array(value, dtype=param.dtype))

    def record(outputs, loss, net):
        grads = [p.grad() for p in net.collect_params().values() if p.grad_req != "null"]
        return keep(outputs, loss, grads)

    def keep(outputs, loss, grads):
        """The digests; with ``save_dir``, the arrays too (``FAMILY.npz``, for bounds)."""
        if save_dir:
            arrays = {"loss": loss.asnumpy()}
            arrays.update(("output%d" % i, o.asnumpy()) for i, o in enumerate(outputs))
            arrays.update(("grad%d" % i, g.asnumpy()) for i, g in enumerate(grads))
            np.savez(os.path.join(save_dir, current[0] + ".npz"), **arrays)
        return {"outputs": [digest(o) for o in outputs], "loss": digest(loss),
                "grads": [digest(g) for g in grads]}

    def classification():
        net = get("mobilenetv2_0.25", classes=10)
        x = uniform(2, 3, 32, 32)
        perturb(net, x)
        with autograd.record():
            out = net(x)
            loss = out.astype("float32").sum() * 2.0 ** -22
        loss.backward()
        return record([out], loss, net)

    def ssd():
        net = get("ssd_300_mobilenet0.25_voc", pretrained_base=False)
        x = uniform(1, 3, 128, 128)
        perturb(net, x)
        with autograd.record():
            cls, box, _ = net(x)
            loss = cls.astype("float32").sum() + box.astype("float32").sum()
        loss.backward()
        result = record([cls, box], loss, net)
        with autograd.predict_mode():
            result["inference"] = [digest(o) for o in net(x)]
        return result

    def yolo():
        net = get("yolo3_mobilenet0.25_voc", hybridize=False, pretrained_base=False)
        x = uniform(1, 3, 64, 64)
        perturb(net, x)
        net.hybridize()
        n, classes = 3 * (2 * 2 + 4 * 4 + 8 * 8), 20
        targets = [mx.nd.zeros((1, n, k)) for k in (1, 2, 2, 2, classes)]
        targets[0][0, 5] = 1
        targets[3][0, 5] = 1
        targets[4][0, 5, 3] = 1
        with autograd.record():
            losses = net(x, mx.nd.array([[[10, 10, 40, 50]]]), *targets)
            total = sum(l.astype("float32").sum() for l in losses) * 2.0 ** -8
        total.backward()
        return record(losses, total, net)

    def segmentation():
        net = get("fcn_resnet50_voc", pretrained_base=False, crop_size=64, base_size=64)
        x = uniform(1, 3, 64, 64)
        perturb(net, x)
        with autograd.record():
            outs = net(x)
            loss = sum(o.astype("float32").sum() for o in outs) * 2.0 ** -8
        loss.backward()
        return record(outs, loss, net)

    def pose():
        net = get("simple_pose_resnet18_v1b", pretrained_base=False)
        x = uniform(1, 3, 64, 48)
        perturb(net, x)
        with autograd.record():
            out = net(x)
            loss = out.astype("float32").sum()
        loss.backward()
        return record([out], loss, net)

    def cifar_resnet20():
        net = get("cifar_resnet20_v1", classes=10)
        x = uniform(8, 3, 32, 32)
        y = mx.nd.array(rng.randint(0, 10, size=8).astype(np.float32))
        perturb(net, x)
        loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()
        with autograd.record():
            out = net(x)
            loss = loss_fn(out, y).mean()
        loss.backward()
        return record([out], loss, net)

    def digits_cnn():
        from mxmixed.tutorial import digits_arrays
        from mxmixed.tutorial import digits_cnn as make
        X, y = digits_arrays()[:2]
        net = make(seed=0)
        net.hybridize(static_alloc=True, static_shape=True)
        loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()
        x, t = mx.nd.array(X[:64]), mx.nd.array(y[:64])
        perturb(net, x)
        with autograd.record():
            out = net(x)
            loss = loss_fn(out, t).mean() * 1024.0
        loss.backward()
        return record([out], loss, net)

    def digits_module():
        from mxmixed.tutorial import digits_arrays
        from mxmixed.tutorial import digits_cnn as make
        X, y = digits_arrays()[:2]
        net = make(seed=0)
        perturb(net, mx.nd.array(X[:2]))
        net.cast("float16")
        data = mx.sym.var("data", dtype="float16")
        sym = net(data)
        sym = mx.sym.SoftmaxOutput(sym.astype("float32"), name="softmax")
        params = {p.name: p.data() for p in net.collect_params().values()}
        types = dict({n: v.dtype for n, v in params.items()}, data="float16",
                     softmax_label="float32")
        exe = sym.simple_bind(mx.cpu(), data=(64,) + X.shape[1:], type_dict=types)
        for name, value in params.items():
            (exe.arg_dict if name in exe.arg_dict else exe.aux_dict)[name][:] = value
        exe.arg_dict["data"][:] = X[:64]
        exe.arg_dict["softmax_label"][:] = y[:64]
        out = exe.forward(is_train=True)[0]
        exe.backward()
        names = sorted(n for n in params if n in exe.grad_dict)
        return keep([out], out, [exe.grad_dict[n] for n in names])

    chosen = dict(classification=classification, ssd=ssd, yolo=yolo,
                  segmentation=segmentation, pose=pose, cifar_resnet20=cifar_resnet20,
                  digits_cnn=digits_cnn, digits_module=digits_module)
    results, current = {}, [None]
    for family in families:
        current[0] = family
        results[family] = chosen[family]()
        mx.nd.waitall()
    try:  # which rounding the float32 carry used (absent before the carry existed)
        from mxmixed.emulation import _round16
        results["_round16"] = _round16.status()
    except ImportError:
        pass
    return results


def run_in_fresh_interpreter(families, env, save_dir=None):
    """Run :func:`run_families` in a fresh interpreter (AMP cannot be undone)."""
    full_env = dict(os.environ, PYTHONPATH=ROOT)
    full_env.update(ENV, **env)
    save = ["--save", save_dir] if save_dir else []
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--print"] + save + families,
                          capture_output=True, text=True, env=full_env, cwd=ROOT, timeout=900)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("DIGESTS ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError("digest run failed:\n" + proc.stderr[-3000:])
    return json.loads(lines[-1][len("DIGESTS "):])


def all_digests(extra_env=None, save_dir=None):
    """Every family's digests, each group in its own interpreter (arrays to ``save_dir``)."""
    results = {}
    for families, env in RUNS:
        results.update(run_in_fresh_interpreter(families, dict(env, **(extra_env or {})),
                                                save_dir))
    return results


def main(argv):
    if argv[:1] == ["--print"]:
        save_dir = argv[2] if argv[1:2] == ["--save"] else None
        families = argv[3:] if save_dir else argv[1:]
        print("DIGESTS " + json.dumps(run_families(families, save_dir)))
        return 0
    families = all_digests()
    table = {"cpu": cpu_fingerprint(), "env": ENV, "route": families.pop("_round16", None),
             "families": families}
    tmp = OUTPUT + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(table, handle, indent=1, sort_keys=True)
        handle.write("\n")
    os.replace(tmp, OUTPUT)
    print("wrote %s (%d families)" % (OUTPUT, len(table["families"])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
