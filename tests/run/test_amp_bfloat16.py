"""``mxmixed run --amp bfloat16``: an unmodified float32 gluon-cv style script (tests/data/clients/)
trains with bfloat16 AMP switched on before it starts; the report and a line on stderr give
step times to set next to a float32 run, and the net's training step measured against float32;
a script that calls amp.init itself is told, in one line, that its call is ignored."""
import json
import math
import os
import sys

import pytest

from conftest import run_command
from mxmixed._core.devices import bfloat16_support

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLIENTS = os.path.join(ROOT, "tests", "data", "clients")
ITERS = 4
RUNS, WHY = bfloat16_support()

sys.path.insert(0, CLIENTS)
import fake_data  # noqa: E402

sys.path.remove(CLIENTS)


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory):
    return fake_data.make_image_folder(str(tmp_path_factory.mktemp("imagenet")))


def _run(tmp_path, image_folder, runner_args=(), script_args=()):
    report, metrics = tmp_path / "report.json", tmp_path / "metrics.json"
    dead = "http://127.0.0.1:9"  # nothing may be downloaded
    env = dict(os.environ, PYTHONPATH=ROOT, HOME=str(tmp_path / "home"),
               MXNET_HOME=str(tmp_path / "mxnet_home"), HTTP_PROXY=dead, HTTPS_PROXY=dead)
    command = ([sys.executable, "-m", "mxmixed.run", "--report", str(report)]
               + list(runner_args) + [os.path.join(CLIENTS, "train_imagenet.py"),
                                      "--data-dir", image_folder, "--model", "resnet18_v1",
                                      "--input-size", "32", "--batch-size", "2", "-j", "0",
                                      "--num-epochs", "1", "--max-iters", str(ITERS),
                                      "--lr", "0.01", "--seed", "0", "--log-interval", "1",
                                      "--save-metrics", str(metrics)] + list(script_args))
    proc = run_command(command, capture_output=True, text=True, env=env, cwd=str(tmp_path))
    return proc, (json.loads(report.read_text()) if report.exists() else None), (
        json.loads(metrics.read_text()) if metrics.exists() else None)


@pytest.mark.slow
@pytest.mark.skipif(not RUNS, reason="bfloat16 cannot run here: %s" % WHY)
def test_amp_bfloat16_trains_an_unmodified_float32_script_and_times_its_steps(tmp_path,
                                                                              image_folder):
    proc, report, metrics = _run(tmp_path, image_folder, ["--amp", "bfloat16"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert report["emulation"]["amp"] == "bfloat16" and not report["emulation"]["active"]
    summary = report["summary"]
    assert summary["steps"] == ITERS and summary["median_iteration_s"] > 0
    assert not summary["amp_loss_scaler"]  # the script scales nothing; bfloat16 needs none
    assert len(metrics["loss"]) == ITERS and all(math.isfinite(v) for v in metrics["loss"])
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("mxmixed run:")]
    assert len(lines) == 1 and "%d optimizer steps, median step" % ITERS in lines[0]
    (speed,) = report["bfloat16_speed"]  # the net's training step, measured once
    assert speed["block"] in lines[0] and speed["skipped"] is None
    assert speed["float32_seconds"] > 0 and speed["bfloat16_seconds"] > 0 and speed["speedup"] > 0
    assert "bfloat16 AMP" in lines[0]


@pytest.mark.slow
@pytest.mark.skipif(not RUNS, reason="bfloat16 cannot run here: %s" % WHY)
def test_a_script_calling_amp_init_itself_is_told_in_one_line(tmp_path, image_folder):
    proc, report, _ = _run(tmp_path, image_folder, ["--amp", "bfloat16"], ["--amp"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [ln for ln in proc.stderr.splitlines() if "calls amp.init" in ln]
    assert said == ["mxmixed run: the script calls amp.init(target_dtype='float16') but --amp "
                    "bfloat16 switched AMP on already; its call is ignored (run without --amp "
                    "to let the script choose)"]
    assert report["summary"]["steps"] == ITERS


def test_amp_bfloat16_where_it_cannot_run_is_one_line_before_the_script(tmp_path, monkeypatch,
                                                                        capsys):
    from mxmixed import cli
    from mxmixed._core import devices

    monkeypatch.setattr(devices, "cpu_flags", lambda: {"avx2"})
    script = tmp_path / "s.py"
    script.write_text("open(%r, 'w').write('ran')\n" % str(tmp_path / "ran"))
    assert cli.main(["run", "--amp", "bfloat16", str(script)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--amp bfloat16 cannot run here" in err
    assert not (tmp_path / "ran").exists()


# A graph from a file that casts its input to bfloat16 for im2col, which has no CPU bfloat16
# kernel in MXNet 1.9.1: AMP's wrappers never see it, so MXNet's own error comes.
_BFLOAT16_IM2COL = '''import mxnet as mx
GRAPH = ('{"nodes":[{"op":"null","name":"data","inputs":[]},'
         '{"op":"amp_cast","name":"to_bf16","attrs":{"dtype":"bfloat16"},"inputs":[[0,0,0]]},'
         '{"op":"im2col","name":"unfold","attrs":{"kernel":"(2, 2)"},"inputs":[[1,0,0]]}],'
         '"arg_nodes":[0],"heads":[[2,0,0]],"attrs":{"mxnet_version":["int",10901]}}')
print(mx.sym.load_json(GRAPH).eval(ctx=mx.cpu(), data=mx.nd.ones((1, 1, 4, 4)))[0].asnumpy())
'''


@pytest.mark.skipif(not RUNS, reason="bfloat16 cannot run here: %s" % WHY)
def test_an_op_without_a_bfloat16_kernel_is_one_line_naming_it_and_exit_2(tmp_path, capsys):
    from mxmixed import cli

    script = tmp_path / "unfold.py"
    script.write_text(_BFLOAT16_IM2COL)
    assert cli.main(["run", "--amp", "bfloat16", str(script)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    said = [ln for ln in err.splitlines() if "error:" in ln]
    assert len(said) == 1 and "im2col-inl.h" in said[0] and "--fp32-op im2col" in said[0]


@pytest.mark.skipif(not RUNS, reason="bfloat16 cannot run here: %s" % WHY)
def test_fp32_op_keeps_an_op_float32_and_refuses_a_name_mxnet_lacks(tmp_path, capsys):
    from mxmixed import cli

    script, dtype = tmp_path / "relu.py", tmp_path / "dtype.txt"
    script.write_text("import mxnet as mx\nfrom mxnet import gluon\n"
                      "conv = gluon.nn.Conv2D(2, 3, in_channels=1)\nconv.initialize()\n"
                      "y = mx.nd.relu(conv(mx.nd.ones((1, 1, 4, 4))))\n"
                      "open(%r, 'w').write(str(y.dtype))\n" % str(dtype))
    assert cli.main(["run", "--amp", "bfloat16", "--fp32-op", "relu", str(script)]) == 0
    assert dtype.read_text() == "<class 'numpy.float32'>"  # bfloat16 without the option
    dtype.unlink()
    assert cli.main(["run", "--amp", "bfloat16", "--fp32-op", "relux", str(script)]) == 2
    assert "--fp32-op relux: no such MXNet op" in capsys.readouterr().err
    assert not dtype.exists()
