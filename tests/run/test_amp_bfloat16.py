"""``mxmixed run --amp bfloat16``: an unmodified float32 gluon-cv style script (tests/data/clients/)
trains with bfloat16 AMP switched on before it starts; the report and a line on stderr give
step times to set next to a float32 run; a script that calls amp.init itself is told, in one
line, that its call is ignored."""
import json
import math
import os
import sys

import pytest

from conftest import run_command
from mxmixed._core.state import bfloat16_support

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
