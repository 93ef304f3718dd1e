"""Cutting the emulation's casts keeps every bit: outputs, losses and gradients of one training step.

``tests/data/emulation_digests.json`` holds the sha256 of each output, loss and parameter
gradient of one emulated AMP training step per model family, recorded on the emulation that
wrapped every emulated op in its own float16 cast pair (``make_emulation_digests.py``). The
same step on the current emulation must give the same bytes. Float32 kernels differ between
CPUs, so the comparison runs only on a CPU like the one the table was recorded on.
"""
import importlib.util
import json
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
_SPEC = importlib.util.spec_from_file_location(
    "make_emulation_digests", os.path.join(HERE, "data", "make_emulation_digests.py"))
digests = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(digests)

with open(digests.OUTPUT) as _handle:
    TABLE = json.load(_handle)

FAMILIES = sorted(TABLE["families"])
SAME_CPU = digests.cpu_fingerprint() == TABLE["cpu"]


@pytest.fixture(scope="module")
def current():
    if not SAME_CPU:
        pytest.skip("the digests were recorded on %s; float32 kernels give other bits on this "
                    "CPU (%s)" % (TABLE["cpu"]["model"], digests.cpu_fingerprint()["model"]))
    return digests.all_digests()


def test_table_covers_every_zoo_family():
    assert {"classification", "ssd", "yolo", "segmentation", "pose"} <= set(FAMILIES)


@pytest.mark.parametrize("family", FAMILIES)
def test_one_training_step_is_bit_identical(family, current):
    want, got = TABLE["families"][family], current[family]
    assert got["outputs"] == want["outputs"]
    assert got["loss"] == want["loss"]
    assert len(got["grads"]) == len(want["grads"])
    changed = [i for i, (a, b) in enumerate(zip(got["grads"], want["grads"])) if a != b]
    assert not changed, "gradients %s differ" % changed
    assert got.get("inference") == want.get("inference")
