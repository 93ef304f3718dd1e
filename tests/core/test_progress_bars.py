"""tqdm bars only where someone watches: off when stderr is a log, on with MXMIXED_PROGRESS=1."""
import io
import os
import sys

import pytest

import mxnet as mx

from mxmixed._core import progress as _progress
from mxmixed.tutorial import digits_cnn, digits_loaders, fit

from conftest import run_command

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("stream, env, enabled, wanted", [
    (io.StringIO(), None, True, False),      # a log file or a pipe
    (_Terminal(), None, True, True),         # a terminal
    (_Terminal(), None, False, False),       # the caller said no
    (io.StringIO(), "1", True, True),        # asked for
    (_Terminal(), "0", True, False),         # refused
    (io.StringIO(), "1", False, False),      # progress=False still wins
])
def test_bars_are_drawn_only_on_a_terminal_unless_asked(stream, env, enabled, wanted,
                                                        monkeypatch):
    monkeypatch.setattr(sys, "stderr", stream)
    if env is None:
        monkeypatch.delenv(_progress.ENV, raising=False)
    else:
        monkeypatch.setenv(_progress.ENV, env)
    assert _progress.bars_wanted(enabled) is wanted
    bar = _progress.progress(range(3), enabled=enabled, desc="steps", widget=False)
    assert list(bar) == [0, 1, 2]
    assert ("steps" in stream.getvalue()) is wanted


def test_training_loop_writes_no_bar_into_a_log(monkeypatch):
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    monkeypatch.delenv(_progress.ENV, raising=False)
    train, test = digits_loaders(batch_size=256, seed=0)
    fit(digits_cnn(seed=0), train, test, epochs=1, ctx=mx.cpu(), progress=True)
    assert log.getvalue() == ""


@pytest.mark.slow
def test_validate_writes_no_bar_into_a_log_even_when_asked(monkeypatch):
    from mxmixed import symbolic
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    monkeypatch.delenv(_progress.ENV, raising=False)
    net = digits_cnn(seed=0)
    net.hybridize()
    x = mx.nd.random.uniform(shape=(8, 1, 8, 8))
    net(x)
    sym = net(mx.sym.var("data"))
    params = {k: v.data() for k, v in net.collect_params().items()}
    args = {k: v for k, v in params.items() if k in sym.list_arguments()}
    auxs = {k: v for k, v in params.items() if k in sym.list_auxiliary_states()}
    model = symbolic.convert(sym, args, auxs)
    symbolic.validate((sym, args, auxs), model, x.asnumpy(), batch_size=2, progress=True)
    assert log.getvalue() == ""
    monkeypatch.setenv(_progress.ENV, "1")
    symbolic.validate((sym, args, auxs), model, x.asnumpy(), batch_size=2, progress=True)
    assert "validate" in log.getvalue()


def _convert(checkpoint, tmp_path, **env):
    return run_command(
        [sys.executable, "-m", "mxmixed", "convert", checkpoint, "0", "--out",
         str(tmp_path / "out16"), "--validate", "4", "--input-shape", "1,8,8"],
        capture_output=True, text=True, cwd=ROOT,
        env=dict({k: v for k, v in os.environ.items() if k != _progress.ENV},
                 PYTHONPATH=ROOT, **env))


@pytest.mark.slow
def test_convert_into_a_log_has_no_carriage_returns_unless_asked(tmp_path):
    net = digits_cnn(seed=1, prefix="digits_")
    net.hybridize()
    net(mx.nd.zeros((1, 1, 8, 8)))
    net.export(str(tmp_path / "model"))
    quiet = _convert(str(tmp_path / "model"), tmp_path)
    assert quiet.returncode == 0, quiet.stderr
    assert "\r" not in quiet.stderr and "validate float16" not in quiet.stderr
    loud = _convert(str(tmp_path / "model"), tmp_path, MXMIXED_PROGRESS="1")
    assert loud.returncode == 0, loud.stderr
    assert "validate float16" in loud.stderr
