"""``mxmixed convert`` keeps its word when the terminal does not: Ctrl-C is one line and exit
130 with nothing half-written; a reader that goes away (``| head -1``) costs no traceback and
no files; a validation that cannot tell says so."""
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

import mxnet as mx
from mxnet import gluon

from conftest import ROOT, communicate, wait_for
from mxmixed import symbolic
from mxmixed.tutorial import digits_cnn


@pytest.fixture
def checkpoint(tmp_path):
    net = digits_cnn(seed=1, prefix="digits_")
    net.hybridize()
    net(mx.nd.zeros((1, 1, 8, 8)))
    net.export(str(tmp_path / "model"))
    return str(tmp_path / "model")


def _convert(checkpoint, out, **popen):
    return subprocess.Popen([sys.executable, "-m", "mxmixed", "convert", checkpoint, "0",
                             "--out", out, "--validate", "16", "--input-shape", "1,8,8"],
                            cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), text=True, **popen)


@pytest.mark.slow
def test_a_closed_pipe_costs_no_traceback_and_no_files(checkpoint, tmp_path):
    out = str(tmp_path / "piped")
    proc = _convert(checkpoint, out, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before anything is printed, as with `| head -0`
    _, err = communicate(proc)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert os.path.isfile(out + "-symbol.json") and os.path.isfile(out + "-0000.params")


def _loaded_mxnet(pid):
    try:
        with open("/proc/%d/maps" % pid) as maps:
            return "libmxnet" in maps.read()
    except OSError:
        return False


def test_ctrl_c_is_one_line_exit_130_and_nothing_written(checkpoint, tmp_path):
    out = str(tmp_path / "interrupted")
    proc = _convert(checkpoint, out, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # once MXNet is loaded, the command line is parsed and the conversion's work has begun
    wait_for(lambda: _loaded_mxnet(proc.pid) or proc.poll() is not None,
             "mxmixed convert to load MXNet", poll=0.01)
    proc.send_signal(signal.SIGINT)
    _, err = communicate(proc)
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == [
        "mxmixed convert: interrupted (Ctrl-C); no file was left half-written"], err
    assert not [f for f in os.listdir(str(tmp_path)) if f.startswith("interrupted")]


def test_validation_of_a_model_with_constant_outputs_is_inconclusive():
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(4, in_units=8, weight_initializer="zeros"))
    net.initialize()
    net.hybridize()
    net(mx.nd.zeros((1, 8)))
    sym = net(mx.sym.var("data"))
    args = {p.name: p.data() for p in net.collect_params().values()}
    report = symbolic.validate((sym, args, {}), symbolic.convert(sym, args, {}),
                               np.random.RandomState(0).uniform(size=(16, 8)), progress=False)
    assert report.passes(0.01)  # it does pass: that is why it must be flagged
    assert report.inconclusive and "same constant" in report.inconclusive
    assert str(report).splitlines()[1].strip().startswith("INCONCLUSIVE")


def test_validation_of_a_model_that_ignores_its_input_is_inconclusive():
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(4, in_units=8, weight_initializer="zeros",
                           bias_initializer=mx.init.Constant(0.25)))
    net.initialize()
    net.hybridize()
    net(mx.nd.zeros((1, 8)))
    sym = net(mx.sym.var("data"))
    args = {p.name: p.data() for p in net.collect_params().values()}
    report = symbolic.validate((sym, args, {}), symbolic.convert(sym, args, {}),
                               np.random.RandomState(0).uniform(size=(16, 8)), progress=False)
    assert report.inconclusive is not None


def test_validation_of_a_model_whose_outputs_depend_on_the_input_is_conclusive():
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(4, in_units=8))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    net(mx.nd.zeros((1, 8)))
    sym = net(mx.sym.var("data"))
    args = {p.name: p.data() for p in net.collect_params().values()}
    report = symbolic.validate((sym, args, {}), symbolic.convert(sym, args, {}),
                               np.random.RandomState(0).uniform(size=(16, 8)), progress=False)
    assert report.inconclusive is None and "INCONCLUSIVE" not in str(report)
