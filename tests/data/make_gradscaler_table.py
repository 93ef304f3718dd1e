"""Record torch.amp.GradScaler's scale history for fixed overflow sequences.

The output, ``gradscaler_table.json``, is the reference that ``tests/training/test_scaler_dynamics.py`` and
``tests/training/test_scaler_extremes.py`` hold mxmixed's LossScaler to. It comes from PyTorch, not from
mxmixed. Regenerate it in an environment with PyTorch (the CPU wheel is enough):
``python tests/data/make_gradscaler_table.py``

Two groups of cases:

* ``CONFIGS`` x ``overflow_sequences()``: ordinary scales;
* ``EXTREME_CASES``: sequences that drive the scale to both ends of float32 (large growth
  factors, growth every step, long runs of overflow). At the top GradScaler refuses a growth
  whose float32 result is inf; at the bottom it backs off through the subnormals to 0.
"""
import json
import os

import numpy as np


def overflow_sequences():
    rng = np.random.RandomState(0)
    seqs = {
        "all_clean": [False] * 30,
        "all_overflow": [True] * 12,
        "alternating": [i % 2 == 0 for i in range(30)],
        "burst_then_clean": [True] * 5 + [False] * 25,
        "clean_then_burst": [False] * 20 + [True] * 4 + [False] * 10,
    }
    for p in (0.1, 0.3, 0.6):
        seqs["random_p%.1f" % p] = [bool(x) for x in rng.rand(40) < p]
    return seqs


CONFIGS = [
    {"init_scale": 2.0 ** 16, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 3},
    {"init_scale": 1024.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 1},
    {"init_scale": 128.0, "growth_factor": 3.0, "backoff_factor": 0.25, "growth_interval": 5},
    {"init_scale": 1000.0, "growth_factor": 1.5, "backoff_factor": 0.7, "growth_interval": 2},
]


# GradScaler.get_scale() returns init_scale as given until the first scale() call, while the
# scale it applies is float32: init scales below are float32 numbers, so the two agree.
_F32_1E38 = float(np.float32(1e38))
_F32_1E_30 = float(np.float32(1e-30))

# (name, config, overflows): each drives the scale to one end of the float32 range
EXTREME_CASES = [
    ("top_growth4_from_2^126", {"init_scale": 2.0 ** 126, "growth_factor": 4.0,
                                "backoff_factor": 0.5, "growth_interval": 1}, [False] * 6),
    ("top_growth2_from_2^120", {"init_scale": 2.0 ** 120, "growth_factor": 2.0,
                                "backoff_factor": 0.5, "growth_interval": 1}, [False] * 12),
    ("top_growth1.5_from_1e38", {"init_scale": _F32_1E38, "growth_factor": 1.5,
                                 "backoff_factor": 0.5, "growth_interval": 1}, [False] * 8),
    ("top_growth1000_interval2", {"init_scale": 2.0 ** 16, "growth_factor": 1000.0,
                                  "backoff_factor": 0.5, "growth_interval": 2}, [False] * 40),
    ("top_then_overflows", {"init_scale": 2.0 ** 126, "growth_factor": 4.0,
                            "backoff_factor": 0.5, "growth_interval": 1},
     [False, False, True, False, False, True, True, False, False, False]),
    ("bottom_halving_from_2^-120", {"init_scale": 2.0 ** -120, "growth_factor": 2.0,
                                    "backoff_factor": 0.5, "growth_interval": 1},
     [True] * 35 + [False] * 3),
    ("bottom_backoff0.1_from_1e-30", {"init_scale": _F32_1E_30, "growth_factor": 2.0,
                                      "backoff_factor": 0.1, "growth_interval": 1},
     [True] * 20 + [False] * 2),
    ("bottom_long_overflow_run_from_2^16", {"init_scale": 2.0 ** 16, "growth_factor": 2.0,
                                            "backoff_factor": 0.5, "growth_interval": 2000},
     [True] * 200),
    ("bottom_then_growth", {"init_scale": 2.0 ** -124, "growth_factor": 2.0,
                            "backoff_factor": 0.5, "growth_interval": 1},
     [True] * 4 + [False] * 4),
]


def torch_history(config, overflows):
    """Scales used and steps skipped by torch.amp.GradScaler for an overflow sequence."""
    import torch

    param = torch.nn.Parameter(torch.ones(4))
    opt = torch.optim.SGD([param], lr=0.1)
    scaler = torch.amp.GradScaler("cpu", **config)
    scales, skipped = [], []
    for overflow in overflows:
        scales.append(float(scaler.get_scale()))
        opt.zero_grad()
        loss = (param * (float("inf") if overflow else 1.0)).sum()
        scaler.scale(loss).backward()
        before = param.detach().clone()
        scaler.step(opt)
        scaler.update()
        skipped.append(bool(torch.equal(before, param.detach())))
    return {"scales": scales, "skipped": skipped, "final_scale": float(scaler.get_scale())}


def main():
    import torch

    cases = []
    for config in CONFIGS:
        for name, seq in overflow_sequences().items():
            cases.append({"config": config, "sequence": name, "overflows": seq,
                          "torch": torch_history(config, seq)})
    for name, config, seq in EXTREME_CASES:
        cases.append({"config": config, "sequence": name, "overflows": seq, "extreme": True,
                      "torch": torch_history(config, seq)})
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gradscaler_table.json")
    with open(out, "w") as handle:
        json.dump({"torch_version": torch.__version__, "cases": cases}, handle)
    print("wrote %d cases to %s" % (len(cases), out))


if __name__ == "__main__":
    main()
