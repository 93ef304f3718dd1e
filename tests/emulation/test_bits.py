"""The emulation's bits: one training step's outputs, losses and gradients, per route.

``tests/data/emulation_digests.json`` holds the sha256 of each output, loss and parameter
gradient of one emulated AMP training step per model family, recorded on the default
emulation: the float32 carry's rounding op keeping oneDNN's layouts
(``make_emulation_digests.py``). Fidelity is judged against the GPU (the float64-reference
bounds and the GPU composition rules of ``emulation/test_numerics.py``,
``emulation/test_bias.py`` and the others); these digests are a regression net for the
default: the same step must keep giving the same bytes.
Float32 kernels differ between CPUs, so the comparison with the table runs only on a CPU like
the one the table was recorded on. On every CPU, the routes are compared with each other:
- the carry on plain layouts (``MXMIXED_EMULATION_KEEP_LAYOUTS=0``) and the cast pairs (no
  compiler) must give each other's bytes, in every family: the carry changes no bit;
- kept and plain layouts differ only in BatchNorm's float32 bits on oneDNN's blocked layout:
  the same bytes where no BatchNorm runs on oneDNN (the pose family, oneDNN off), and
  elsewhere every output, loss and gradient within a bound of its scale.
"""
import importlib.util
import json
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
_SPEC = importlib.util.spec_from_file_location(
    "make_emulation_digests", os.path.join(os.path.dirname(HERE), "data", "make_emulation_digests.py"))
digests = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(digests)

with open(digests.OUTPUT) as _handle:
    TABLE = json.load(_handle)

FAMILIES = sorted(TABLE["families"])
SAME_CPU = digests.cpu_fingerprint() == TABLE["cpu"]
ROUTES = {"kept_layouts": {"MXMIXED_EMULATION_KEEP_LAYOUTS": ""},  # the default
          "plain_layouts": {"MXMIXED_EMULATION_KEEP_LAYOUTS": "0"},
          "no_compiler": {"CXX": "/nonexistent/c++"}}
STATUS = {"kept_layouts": "built and loaded; keeps oneDNN layouts",
          "plain_layouts": "built and loaded; plain layouts"}
# families whose BatchNorms do not run on oneDNN: kept layouts change no bit there
NO_ONEDNN_BATCHNORM = {"pose"}
# kept vs plain layouts, elsewhere: |loss difference| / |loss| (measured on an AVX-512 EPYC:
# 0 to 8.9e-3, the SSD's). Gradients are not bounded: several of these steps' losses are sums
# of outputs behind a training-mode BatchNorm, whose gradient is zero but for rounding, so
# their gradients are rounding noise on any route (relative L2 up to 1.6 between the routes).
KEPT_LOSS_BOUND = 2e-2
_CACHE = {}


def route_digests(route, tmp_path_factory):
    """Digests of every family on one route, computed once per session in a fresh interpreter;
    the arrays are saved beside them (``route_arrays``)."""
    if route not in _CACHE:
        env = dict(ROUTES[route], MXMIXED_CACHE_DIR=str(tmp_path_factory.mktemp(route)))
        if route != "no_compiler":  # the session's build, if one was made already
            env["MXMIXED_CACHE_DIR"] = os.environ.get("MXMIXED_CACHE_DIR",
                                                      env["MXMIXED_CACHE_DIR"])
        save_dir = str(tmp_path_factory.mktemp(route + "-arrays"))
        _CACHE[route] = dict(digests.all_digests(env, save_dir), _arrays=save_dir)
    used = _CACHE[route]["_round16"]
    if route in STATUS:
        assert used == STATUS[route]
    else:
        assert "no C++ compiler" in used
    return _CACHE[route]


def route_arrays(route, family, tmp_path_factory):
    import numpy as np
    path = os.path.join(route_digests(route, tmp_path_factory)["_arrays"], family + ".npz")
    with np.load(path) as arrays:
        return {name: arrays[name] for name in arrays.files}


@pytest.fixture
def current(tmp_path_factory):
    if not SAME_CPU:
        here = digests.cpu_fingerprint()
        pytest.skip("the digests were recorded on %s with %s; this CPU (%s) has %s, and float32 "
                    "kernels give other bits; test_carry_gives_the_cast_pairs_bytes_on_this_cpu "
                    "compares the routes here" % (
                        TABLE["cpu"]["model"], " ".join(TABLE["cpu"]["flags"]) or "no SIMD flags",
                        here["model"], " ".join(here["flags"]) or "no SIMD flags"))
    return route_digests("kept_layouts", tmp_path_factory)


def test_table_was_recorded_on_the_default_route():
    assert TABLE["route"] == STATUS["kept_layouts"]


def test_table_covers_every_zoo_family():
    assert {"classification", "ssd", "yolo", "segmentation", "pose"} <= set(FAMILIES)


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_one_training_step_is_bit_identical(family, current):
    assert_same_bytes(current[family], TABLE["families"][family], family)


@pytest.mark.slow
def test_carry_gives_the_cast_pairs_bytes_on_this_cpu(tmp_path_factory):
    carried = route_digests("plain_layouts", tmp_path_factory)
    pairs = route_digests("no_compiler", tmp_path_factory)
    for family in FAMILIES:
        assert_same_bytes(carried[family], pairs[family], family)


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_kept_layouts_move_only_batchnorm_bits_on_this_cpu(family, tmp_path_factory):
    """Where no BatchNorm runs on oneDNN, kept layouts give the plain route's bytes; elsewhere
    the loss stays within KEPT_LOSS_BOUND and every array is finite where the plain route's is."""
    import numpy as np
    kept = route_digests("kept_layouts", tmp_path_factory)[family]
    plain = route_digests("plain_layouts", tmp_path_factory)[family]
    if family in NO_ONEDNN_BATCHNORM:
        assert_same_bytes(kept, plain, family)
        return
    kept = route_arrays("kept_layouts", family, tmp_path_factory)
    plain = route_arrays("plain_layouts", family, tmp_path_factory)
    assert sorted(kept) == sorted(plain)
    for name in sorted(plain):
        assert kept[name].shape == plain[name].shape and kept[name].dtype == plain[name].dtype
        assert (np.isfinite(kept[name]) == np.isfinite(plain[name])).all(), (family, name)
    a, b = kept["loss"].astype(np.float64), plain["loss"].astype(np.float64)
    assert np.abs(a - b).max() <= KEPT_LOSS_BOUND * np.abs(b).max(), (family, a, b)


def assert_same_bytes(got, want, family):
    """The digests of one family's step agree: outputs, loss, every gradient, inference."""
    assert got["outputs"] == want["outputs"], family
    assert got["loss"] == want["loss"], family
    assert len(got["grads"]) == len(want["grads"]), family
    changed = [i for i, (a, b) in enumerate(zip(got["grads"], want["grads"])) if a != b]
    assert not changed, "%s: gradients %s differ" % (family, changed)
    assert got.get("inference") == want.get("inference"), family
