"""Keep a real GPU's float16 outputs of the NLP ops, for the emulation's tests.

The output, ``gpu_outputs_nlp.npz``, holds for each case of ``CASES`` its float16 inputs (and
head gradient) and the outputs a GPU computed from them, as ``benchmarks/gpu_fidelity.py``'s
``gpu`` half composed MXNet 1.9.1's GPU kernels with PyTorch. It comes from the GPU, not from
mxmixed; ``tests/emulation/test_gpu_recorded_outputs.py`` holds the emulation to it.
Regenerate it after a GPU run of that script:
``python tests/data/make_gpu_outputs.py CASES.npz GPU-OUTPUTS.npz``
"""
import json
import os
import sys

import numpy as np

CASES = ("gelu", "elemwise_mul", "mul_scalar", "exp", "erf", "softmax_safe_acc",
         "layernorm_safe_acc", "selfatt_qk", "selfatt_valatt")
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu_outputs_nlp.npz")


def main(cases_path, outputs_path, out_path=OUT):
    cases, raw = dict(np.load(cases_path)), dict(np.load(outputs_path))
    about = json.loads(bytes(raw.pop("__about__")).decode())
    kept = {}
    for name in CASES:
        kept.update({k: v for k, v in cases.items()
                     if k.startswith(name + "/") and "/emu_" not in k})
        if name + "/emu_dy" in cases:
            kept[name + "/dy"] = cases[name + "/emu_dy"]
        kept.update({k[:-len("/gpu")]: v for k, v in raw.items()
                     if k.startswith(name + "/") and k.endswith("/gpu")})
    about = {k: about[k] for k in ("device", "torch", "cudnn", "date")}
    about["specs"] = {name: json.loads(bytes(cases["__specs__"]).decode())[name] for name in CASES}
    kept["__about__"] = np.frombuffer(json.dumps(about).encode(), dtype=np.uint8)
    np.savez_compressed(out_path, **kept)
    print("wrote %s (%d arrays)" % (out_path, len(kept)))


if __name__ == "__main__":
    main(*sys.argv[1:])
