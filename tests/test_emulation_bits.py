"""Cutting the emulation's casts keeps every bit: outputs, losses and gradients of one training step.

``tests/data/emulation_digests.json`` holds the sha256 of each output, loss and parameter
gradient of one emulated AMP training step per model family, recorded on the emulation that
wrapped every emulated op in its own float16 cast pair (``make_emulation_digests.py``). The
same step must give the same bytes on the current emulation, both with the compiled rounding
op of the float32 carry and with its fallback when no compiler is present (the cast pairs).
The opt-in ``MXMIXED_EMULATION_KEEP_LAYOUTS=1`` is not held to these bytes: BatchNorm's float32
kernels on oneDNN's blocked layout give other bits than on plain layout
(``test_emulation_round16.py`` checks what it does keep).
Float32 kernels differ between CPUs, so the comparison with the table runs only on a CPU like
the one the table was recorded on. On every CPU, the two routes must give each other's bytes:
the fallback is the cast-pair emulation the table was recorded on, so this is the same proof
made against a reference path computed here, covering the vector rounding instructions of
whatever CPU runs the suite.
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
ROUTES = {"round16": {"MXMIXED_EMULATION_KEEP_LAYOUTS": "0"},
          "no_compiler": {"CXX": "/nonexistent/c++"}}
_CACHE = {}


def route_digests(route, tmp_path_factory):
    """Digests of every family on one route, computed once per session in a fresh interpreter."""
    if route not in _CACHE:
        env = dict(ROUTES[route], MXMIXED_CACHE_DIR=str(tmp_path_factory.mktemp(route)))
        if route == "round16":  # the session's build, if one was made already
            env["MXMIXED_CACHE_DIR"] = os.environ.get("MXMIXED_CACHE_DIR",
                                                      env["MXMIXED_CACHE_DIR"])
        _CACHE[route] = digests.all_digests(env)
    used = _CACHE[route]["_round16"]
    if route == "round16":
        assert used == "built and loaded; plain layouts"
    else:
        assert "no C++ compiler" in used
    return _CACHE[route]


@pytest.fixture(params=sorted(ROUTES))
def current(request, tmp_path_factory):
    if not SAME_CPU:
        here = digests.cpu_fingerprint()
        pytest.skip("the digests were recorded on %s with %s; this CPU (%s) has %s, and float32 "
                    "kernels give other bits; test_carry_gives_the_cast_pairs_bytes_on_this_cpu "
                    "compares the routes here" % (
                        TABLE["cpu"]["model"], " ".join(TABLE["cpu"]["flags"]) or "no SIMD flags",
                        here["model"], " ".join(here["flags"]) or "no SIMD flags"))
    return route_digests(request.param, tmp_path_factory)


def test_table_covers_every_zoo_family():
    assert {"classification", "ssd", "yolo", "segmentation", "pose"} <= set(FAMILIES)


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_one_training_step_is_bit_identical(family, current):
    assert_same_bytes(current[family], TABLE["families"][family], family)


@pytest.mark.slow
def test_carry_gives_the_cast_pairs_bytes_on_this_cpu(tmp_path_factory):
    carried = route_digests("round16", tmp_path_factory)
    pairs = route_digests("no_compiler", tmp_path_factory)
    for family in FAMILIES:
        assert_same_bytes(carried[family], pairs[family], family)


def assert_same_bytes(got, want, family):
    """The digests of one family's step agree: outputs, loss, every gradient, inference."""
    assert got["outputs"] == want["outputs"], family
    assert got["loss"] == want["loss"], family
    assert len(got["grads"]) == len(want["grads"]), family
    changed = [i for i, (a, b) in enumerate(zip(got["grads"], want["grads"])) if a != b]
    assert not changed, "%s: gradients %s differ" % (family, changed)
    assert got.get("inference") == want.get("inference"), family
