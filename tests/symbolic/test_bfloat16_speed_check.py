"""The bfloat16 speed check: ``symbolic.compare_speed`` and the figure ``mxmixed convert --dtype
bfloat16 --validate`` prints, with a warning that names it where bfloat16 is slower than
float32 on this CPU. No wall-clock limit is asserted: where a verdict is checked, the times
are given."""
import numpy as np
import pytest

import mxnet as mx
from mxnet import gluon

from mxmixed import cli, symbolic
from mxmixed._core.devices import bfloat16_support
from mxmixed.symbolic import _speed

RUNS, WHY = bfloat16_support()
needs_bfloat16 = pytest.mark.skipif(not RUNS, reason="bfloat16 cannot run here: %s" % WHY)


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    """A small float32 CNN checkpoint and samples for it."""
    with mx.name.NameManager():
        net = gluon.nn.HybridSequential()
        net.add(gluon.nn.Conv2D(16, 3, padding=1, activation="relu"),
                gluon.nn.Conv2D(16, 3, padding=1, activation="relu"),
                gluon.nn.GlobalAvgPool2D(), gluon.nn.Dense(10))
    mx.random.seed(0)
    net.initialize(mx.init.Xavier())
    X = np.random.RandomState(0).uniform(size=(8, 3, 16, 16)).astype(np.float32)
    net.hybridize()
    net(mx.nd.array(X))
    prefix = str(tmp_path_factory.mktemp("cnn") / "cnn")
    net.export(prefix)
    np.save(prefix + "-x.npy", X)
    return prefix, X


def _given_times(monkeypatch, float32, bfloat16):
    """Each timed call of the float32 model takes ``float32`` s, of the bfloat16 one
    ``bfloat16`` s (the models still run)."""
    real = _speed._timed_call

    def timed(runner, batch):
        call = real(runner, batch)
        spent = bfloat16 if runner.compute_dtype() == "bfloat16" else float32
        return lambda: (call(), spent)[1]
    monkeypatch.setattr(_speed, "_timed_call", timed)


@needs_bfloat16
def test_compare_speed_times_both_models_on_one_batch(cnn):
    prefix, X = cnn
    given = symbolic.load_checkpoint(prefix, 0)
    model = symbolic.convert(*given, target_dtype="bfloat16")
    speed = symbolic.compare_speed(given, model, X, batch_size=4, rounds=2)
    assert speed.batch_size == 4 and speed.rounds == 2
    assert speed.float32_seconds > 0 and speed.bfloat16_seconds > 0
    assert speed.spread[0] <= speed.speedup <= speed.spread[1]
    assert "static memory" in speed.float32_setting
    assert str(speed).startswith("speed on this CPU (")


@needs_bfloat16
def test_compare_speed_says_slower_with_the_figure(cnn, monkeypatch):
    prefix, X = cnn
    given = symbolic.load_checkpoint(prefix, 0)
    model = symbolic.convert(*given, target_dtype="bfloat16")
    _given_times(monkeypatch, float32=0.1, bfloat16=0.25)
    speed = symbolic.compare_speed(given, model, X, batch_size=8, rounds=3)
    assert speed.speedup == pytest.approx(0.4) and speed.slower
    assert "0.40x, slower than float32" in str(speed)
    assert speed.warning().startswith("bfloat16 is slower than float32 on this CPU for this "
                                      "model: 0.40x (bfloat16 0.25 s, float32 0.1 s per batch "
                                      "of 8)")


@needs_bfloat16
def test_compare_speed_gives_no_warning_where_bfloat16_is_faster(cnn, monkeypatch):
    prefix, X = cnn
    given = symbolic.load_checkpoint(prefix, 0)
    model = symbolic.convert(*given, target_dtype="bfloat16")
    _given_times(monkeypatch, float32=0.2, bfloat16=0.1)
    speed = symbolic.compare_speed(given, model, X, rounds=1)
    assert speed.speedup == pytest.approx(2.0) and not speed.slower
    assert speed.warning() is None


def test_compare_speed_refuses_a_float16_model(cnn):
    prefix, X = cnn
    given = symbolic.load_checkpoint(prefix, 0)
    with pytest.raises(symbolic.ConversionError, match="does not compute in bfloat16"):
        symbolic.compare_speed(given, symbolic.convert(*given), X)


@needs_bfloat16
def test_cli_prints_the_speed_after_a_passing_bfloat16_validation(cnn, tmp_path, capsys):
    prefix, _ = cnn
    out = str(tmp_path / "bf16")
    code = cli.main(["convert", prefix, "0", "--dtype", "bfloat16", "--out", out,
                     "--validate", "8", "--inputs", prefix + "-x.npy", "--batch-size", "4",
                     "--speed-rounds", "2"])
    printed = capsys.readouterr()
    assert code == 0
    line = [s for s in printed.out.splitlines() if s.startswith("speed on this CPU")]
    assert len(line) == 1 and "per batch of 4" in line[0] and "over 2 rounds" in line[0]
    assert printed.out.index("speed on this CPU") < printed.out.index("wrote ")


@needs_bfloat16
def test_cli_warns_with_the_figure_and_still_writes_where_bfloat16_is_slower(
        cnn, tmp_path, capsys, monkeypatch):
    prefix, _ = cnn
    _given_times(monkeypatch, float32=0.1, bfloat16=0.3)
    out = str(tmp_path / "bf16")
    code = cli.main(["convert", prefix, "0", "--dtype", "bfloat16", "--out", out,
                     "--validate", "8", "--inputs", prefix + "-x.npy"])
    printed = capsys.readouterr()
    assert code == 0 and "wrote " in printed.out
    assert ("mxmixed convert: warning: bfloat16 is slower than float32 on this CPU for this "
            "model: 0.33x" in printed.err)


@pytest.mark.parametrize("flags", [["--speed-rounds", "0"], ["--dtype", "float16"], []])
def test_cli_times_nothing_without_a_bfloat16_validation_to_time(cnn, tmp_path, capsys,
                                                                 monkeypatch, flags):
    prefix, _ = cnn
    monkeypatch.setattr(symbolic, "compare_speed", _refused)
    validate = [] if not flags else ["--validate", "8", "--inputs", prefix + "-x.npy"]
    if flags and flags[0] == "--speed-rounds":
        flags = flags + ["--dtype", "bfloat16"]
    if not flags:
        flags = ["--dtype", "bfloat16"]  # no --validate: nothing to time
    code = cli.main(["convert", prefix, "0", "--out", str(tmp_path / "m")] + flags + validate)
    assert code == 0 and "speed on this CPU" not in capsys.readouterr().out


def _refused(*args, **kwargs):
    raise AssertionError("compare_speed ran")
