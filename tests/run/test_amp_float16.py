"""``mxmixed run --amp float16`` trains a float32 script that has no float16 switch in float16:
AMP switched on before it, its Trainer linked to a loss scaler, the loss scaled at backward,
overflowing steps skipped (sparse weights updated on the kvstore included), clipping by global
norm on the true gradients, the loss drawn per step; a script that calls AMP itself keeps its
own calls, never scaled twice; a Module API script gets one line. The clients are
tests/data/clients/next_token.py (float32, no AMP), clip_scaled.py (MXNet AMP calls of its own)
and train_cifar_module.py (Module API)."""
import json
import math
import os
import sys

import pytest

from conftest import run_command
from mxmixed.diagnostics.plots import plot_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLIENTS = os.path.join(ROOT, "tests", "data", "clients")
NEXT_TOKEN = os.path.join(CLIENTS, "next_token.py")
STEPS = 60


def _run(folder, flags, client=NEXT_TOKEN, args=(), report=True):
    """``mxmixed run FLAGS [--report R] CLIENT ARGS --save-losses L``: (exit code, stderr
    lines, report or None, what the client saved or None)."""
    folder.mkdir(exist_ok=True)
    out = folder / "client.json"
    cmd = [sys.executable, "-m", "mxmixed", "run"] + flags
    if report:
        cmd += ["--report", str(folder / "r.json")]
    cmd += [client] + list(args)
    if client == NEXT_TOKEN:
        cmd += ["--save-losses", str(out)]
    env = dict(os.environ, PYTHONPATH=ROOT, MXNET_STORAGE_FALLBACK_LOG_VERBOSE="0")
    proc = run_command(cmd, capture_output=True, text=True, env=env, cwd=str(folder))
    data = json.loads(out.read_text()) if out.exists() else None
    reported = json.loads((folder / "r.json").read_text()) if report else None
    return proc.returncode, proc.stderr.splitlines(), reported, data


def _drop(losses):
    return losses[0] - losses[-1]


def _runner_lines(lines):
    return [line for line in lines if line.startswith("mxmixed run:")]


@pytest.fixture(scope="module")
def float32(tmp_path_factory):
    """The client as the script runs it, without --amp: (stderr lines, report, saved)."""
    code, lines, report, saved = _run(tmp_path_factory.mktemp("f32"), [], args=["--clip", "0.25"])
    assert code == 0, lines[-20:]
    return lines, report, saved


@pytest.fixture(scope="module")
def float16(tmp_path_factory):
    code, lines, report, saved = _run(tmp_path_factory.mktemp("f16"), ["--amp", "float16"],
                                      args=["--clip", "0.25"])
    assert code == 0, lines[-20:]
    return lines, report, saved


@pytest.mark.slow
def test_a_float32_run_says_it_never_trained_in_float16(float32):
    lines, report, _ = float32
    assert lines[-1] == ("mxmixed run: %d optimizer steps, all in float32: the script never "
                         "trained in float16 (no AMP, no float16 parameters); --amp float16 "
                         "trains it in float16" % STEPS)
    assert report["trained_in"] == "float32"


@pytest.mark.slow
def test_amp_float16_scales_the_loss_and_learns_as_float32_does(float32, float16):
    lines, report, saved = float16
    assert report["trained_in"] == "float16"
    trainer, = report["amp_float16"]["trainers"]
    assert trainer["linked"] and not trainer["script_scales"]
    assert report["amp_float16"]["scaled_by_runner"]
    assert [s["loss_scale"] for s in report["steps"]] == [65536.0] * STEPS
    assert _drop(saved["losses"]) >= 0.5 * _drop(float32[2]["losses"]) > 0
    assert lines[-1].startswith("mxmixed run: %d optimizer steps in float16 (--amp float16, "
                                "emulated on the CPU" % STEPS)
    assert ", 0 skipped on overflow, loss scale 65536 -> 65536" in lines[-1]


@pytest.mark.slow
def test_amp_float16_clips_the_true_gradients_and_the_report_says_so(float32, float16):
    lines, report, saved = float16
    site, = report["scaled_clipping"]
    assert (site["max_norm"], site["loss_scale"], site["unscaled"], site["unscaled_by"],
            site["calls"]) == (0.25, 65536.0, True, "--amp float16", STEPS)
    noted = [line for line in _runner_lines(lines) if "clips gradients" in line]
    assert len(noted) == 1 and "--amp float16 unscales them first" in noted[0]
    # clipped at 0.25 of the true norm, as in float32 (at 0.25 / 65536 it would learn nothing)
    assert saved["losses"][-1] == pytest.approx(float32[2]["losses"][-1], rel=0.02)


@pytest.mark.slow
def test_the_report_and_its_picture_carry_the_loss_of_every_step(float16):
    _, report, saved = float16
    assert [s["loss"] for s in report["steps"]] == pytest.approx(saved["losses"], rel=1e-5)
    top, _ = plot_run(report).axes
    line, = [line for line in top.get_lines() if line.get_gid() == "loss"]
    assert list(line.get_ydata()) == [s["loss"] for s in report["steps"]]


@pytest.mark.slow
@pytest.mark.parametrize("backward", ["ndarray", "autograd"])
def test_an_overflowing_step_is_skipped_and_the_scale_backs_off(tmp_path, backward):
    code, lines, report, saved = _run(tmp_path, ["--amp", "float16"],
                                      args=["--plant-inf", "5", "--backward", backward])
    assert code == 0, lines[-20:]
    assert report["summary"]["skipped_steps"] == [5]
    assert report["steps"][5]["loss_scale"] == 32768.0
    assert saved["weights_finite"] and math.isfinite(saved["losses"][-1])


@pytest.mark.slow
def test_sparse_weights_updated_on_the_kvstore_skip_the_overflowing_step_everywhere(tmp_path):
    """The big LM's case: row_sparse weights make MXNet update on the kvstore, where the step
    used to be applied before any overflow check (NaN weights, the scale halving for ever)."""
    code, lines, plain, plain_saved = _run(tmp_path / "f32", [], args=["--sparse"])
    assert code == 0, lines[-20:]
    code, lines, report, saved = _run(tmp_path / "f16", ["--amp", "float16"],
                                      args=["--sparse", "--plant-inf", "5"])
    assert code == 0, lines[-20:]
    trainer, = report["amp_float16"]["trainers"]
    assert trainer["linked"] and trainer["update_on_kvstore"]
    assert report["summary"]["skipped_steps"] == [5]
    assert report["summary"]["loss_scale_last"] == 32768.0
    assert saved["weights_finite"]
    assert _drop(saved["losses"]) >= 0.5 * _drop(plain_saved["losses"]) > 0


@pytest.mark.slow
@pytest.mark.parametrize("scale", ["1", "128"])
def test_a_fixed_loss_scale_is_used_at_every_step(tmp_path, scale):
    code, lines, report, saved = _run(tmp_path, ["--amp", "float16", "--loss-scale", scale])
    assert code == 0, lines[-20:]
    assert {s["loss_scale"] for s in report["steps"]} == {float(scale)}
    assert report["amp_float16"]["loss_scale"] == float(scale)
    assert saved["losses"][-1] < 0.5 * saved["losses"][0]


@pytest.mark.slow
@pytest.mark.parametrize("flags, said", [
    (["--amp", "float16", "--loss-scale", "0"], "--loss-scale takes 'dynamic' or a positive "
                                                "number (1: no loss scaling), got '0'"),
    (["--amp", "float16", "--loss-scale", "nan"], "got 'nan'"),
    (["--amp", "float16", "--loss-scale", "big"], "got 'big'"),
    (["--loss-scale", "8"], "--loss-scale needs --amp float16"),
])
def test_a_bad_loss_scale_is_refused_in_one_line_before_the_script_runs(tmp_path, flags, said):
    code, lines, _, saved = _run(tmp_path, flags, report=False)
    assert code == 2 and saved is None
    assert len(lines) == 1 and lines[0].startswith("mxmixed run: error: ") and said in lines[0]


@pytest.mark.slow
def test_a_script_that_calls_amp_itself_is_never_scaled_twice(tmp_path):
    client = os.path.join(CLIENTS, "clip_scaled.py")
    args = ["--dtype", "float16", "--clip", "scaled", "--save-losses", str(tmp_path / "l.json")]
    code, lines, report, _ = _run(tmp_path, ["--amp", "float16"], client=client, args=args)
    assert code == 0, lines[-20:]
    losses = json.loads((tmp_path / "l.json").read_text())
    assert losses[-1] < 1e-3 * losses[0]  # scaled twice, it would skip every step
    trainer, = report["amp_float16"]["trainers"]
    assert trainer["script_scales"] and not report["amp_float16"]["scaled_by_runner"]
    assert report["summary"]["skipped"] < 5


@pytest.mark.slow
def test_a_module_api_script_that_mxnet_amp_cannot_bind_ends_with_one_line(tmp_path):
    client = os.path.join(CLIENTS, "train_cifar_module.py")
    code, lines, report, _ = _run(tmp_path, ["--amp", "float16"], client=client,
                                  args=["--num-epochs", "1"])
    assert code == 2 and report["exit_code"] == 2
    assert lines[-1].startswith("mxmixed run: error: --amp float16 cannot train this Module "
                                "API script")
    assert not [line for line in lines if line.startswith("Traceback")]
    assert report["amp_float16"]["module_unscaled"]


@pytest.mark.slow
def test_file_and_argv0_are_what_python_gives(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "s.py").write_text("import sys\nprint(__file__)\nprint(sys.argv[0])\n")
    env = dict(os.environ, PYTHONPATH=ROOT)
    for relative in ("sub/s.py", "./sub/../sub/s.py"):
        python = run_command([sys.executable, relative], capture_output=True, text=True,
                             env=env, cwd=str(tmp_path))
        runner = run_command([sys.executable, "-m", "mxmixed", "run", "--no-emulation",
                              relative], capture_output=True, text=True, env=env,
                             cwd=str(tmp_path))
        assert python.returncode == runner.returncode == 0, runner.stderr
        assert runner.stdout == python.stdout
        assert python.stdout.splitlines()[1] == relative
