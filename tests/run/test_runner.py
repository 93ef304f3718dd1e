"""``mxmixed run``: a script runs as ``__main__`` with its argv, exit code and traceback; the
hooks behind ``--report`` come off again; the report tells the float16 story of a script that
knows nothing about mxmixed; ``--no-emulation`` is the plain-MXNet baseline."""
import json
import os
import sys
import textwrap

import mxnet as mx
import pytest
from mxnet import gluon

from conftest import run_command
from mxmixed import emulation
from mxmixed.cli import build_parser
from mxmixed.cli._run import run_script
from mxmixed.diagnostics.steps import StepRecorder

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _script(tmp_path, body, name="script.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def _run(args, env=None):
    """``python -m mxmixed.run ARGS`` in a fresh interpreter (AMP cannot be undone)."""
    full_env = dict(os.environ, PYTHONPATH=ROOT, **(env or {}))
    return run_command([sys.executable, "-m", "mxmixed.run"] + list(args), capture_output=True,
                       text=True, env=full_env, cwd=ROOT)


# ----------------------------------------------------------------------------- exit codes, argv
@pytest.mark.parametrize("body, code", [
    ("x = 1\n", 0),
    ("import sys\nsys.exit(3)\n", 3),
    ("raise SystemExit()\n", 0),
])
def test_exit_code_passes_through(tmp_path, body, code):
    assert run_script(_script(tmp_path, body), []) == code


def test_system_exit_message_is_printed_and_exits_1(tmp_path, capsys):
    assert run_script(_script(tmp_path, "raise SystemExit('no data found')\n"), []) == 1
    assert "no data found" in capsys.readouterr().err


def test_argv_and_path_are_those_of_python_script(tmp_path):
    out = tmp_path / "seen.json"
    script = _script(tmp_path, """
        import json, sys
        json.dump({"argv": sys.argv, "path0": sys.path[0], "name": __name__},
                  open(sys.argv[-1], "w"))
    """)
    saved_argv, saved_path0 = sys.argv[:], sys.path[0]
    assert run_script(script, ["--amp", "-j", "0", str(out)]) == 0
    seen = json.loads(out.read_text())
    assert seen == {"argv": [script, "--amp", "-j", "0", str(out)], "path0": str(tmp_path),
                    "name": "__main__"}
    assert sys.argv == saved_argv and sys.path[0] == saved_path0


def test_missing_script_exits_2(tmp_path, capsys):
    assert run_script(str(tmp_path / "nope.py"), []) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("where, message", [
    ("missing/report.json", "does not exist"),
    (".", "is a folder"),
])
def test_unwritable_report_exits_2_before_the_script_runs(tmp_path, capsys, where, message):
    ran = tmp_path / "ran"
    script = _script(tmp_path, "open(%r, 'w').close()\n" % str(ran))
    assert run_script(script, [], report=str(tmp_path / where)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--report" in err and message in err
    assert not ran.exists()


def test_a_folder_as_script_exits_2_saying_so(tmp_path, capsys):
    assert run_script(str(tmp_path), []) == 2
    assert "is a folder, not a Python file" in capsys.readouterr().err


@pytest.mark.slow
def test_command_line_exit_code_and_argv(tmp_path):
    script = _script(tmp_path, "import sys\nprint(sys.argv[1:])\nsys.exit(int(sys.argv[-1]))\n")
    proc = _run([script, "--report", "7"])  # the script's own --report, not the runner's
    assert proc.returncode == 7, proc.stderr
    assert "['--report', '7']" in proc.stdout


def test_parser_keeps_script_arguments_for_the_script():
    args = build_parser().parse_args(["run", "--report", "r.json", "train.py", "--amp", "--report", "x",
                              "--version", "-h"])
    assert (args.report, args.script, args.args) == ("r.json", "train.py",
                                                      ["--amp", "--report", "x", "--version", "-h"])
    assert args.no_emulation is False and args.func.__module__ == "mxmixed.cli._run"


# ----------------------------------------------------------------------------- tracebacks
@pytest.mark.slow
def test_traceback_is_the_scripts_own(tmp_path):
    script = _script(tmp_path, """
        def load():
            raise ValueError("bad annotation")

        load()
    """, name="train.py")
    proc = _run([script])
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    start = lines.index("Traceback (most recent call last):")
    assert script in lines[start + 1]
    assert lines[-1] == "ValueError: bad annotation"
    assert "runpy" not in proc.stderr and "mxmixed/run.py" not in proc.stderr


# ----------------------------------------------------------------------------- hooks
def test_hooks_are_undone_after_the_run(tmp_path):
    step, update = gluon.Trainer.step, gluon.Trainer.update
    module_update = mx.mod.Module.update
    script = _script(tmp_path, """
        import mxnet as mx
        from mxnet import autograd, gluon
        net = gluon.nn.Dense(2)
        net.initialize()
        trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
        for _ in range(2):
            with autograd.record():
                loss = net(mx.nd.ones((4, 3))).sum()
            loss.backward()
            trainer.step(4)
        raise RuntimeError("after two steps")
    """)
    report = tmp_path / "report.json"
    assert run_script(script, [], report=str(report)) == 1
    assert gluon.Trainer.step is step and gluon.Trainer.update is update
    assert mx.mod.Module.update is module_update
    data = json.loads(report.read_text())
    assert data["summary"]["steps"] == 2 and data["exit_code"] == 1
    assert data["note"] == "2 optimizer steps recorded from Trainer.step"
    assert "after two steps" in data["error"]


def test_emulation_is_switched_off_again(tmp_path):
    assert run_script(_script(tmp_path, "x = 1\n"), []) == 0
    assert not emulation.emulation_active()


# ----------------------------------------------------------------------------- the report
AMP_SCRIPT = """
    # Plain MXNet AMP, as gluon-cv's scripts use it: nothing here knows about mxmixed.
    import sys
    import mxnet as mx
    from mxnet import autograd, gluon
    from mxnet.contrib import amp

    use_amp = "--amp" in sys.argv
    if use_amp:
        amp.init()
    mx.random.seed(0)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(16, activation="relu"), gluon.nn.Dense(4))
    net.initialize()
    net.hybridize()
    dtype = "float16" if "--float16" in sys.argv else "float32"
    net.cast(dtype)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                            update_on_kvstore=False)
    if use_amp:
        amp.init_trainer(trainer)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    X = mx.nd.random.uniform(shape=(8, 10)).astype(dtype)
    y = mx.nd.array([0, 1, 2, 3, 0, 1, 2, 3]).astype(dtype)
    for i in range(5):
        with autograd.record():
            loss = loss_fn(net(X), y)
            if use_amp:
                with amp.scale_loss(loss, trainer) as scaled:
                    autograd.backward(scaled)
            else:
                loss.backward()
        if i == 1:  # a planted overflow in the second step
            net[1].weight.grad()[:] = float("inf")
        trainer.step(8)
    print("loss", loss.mean().asscalar())
"""


@pytest.mark.slow
def test_report_tells_the_float16_story_of_a_plain_amp_script(tmp_path):
    script = _script(tmp_path, AMP_SCRIPT)
    report = tmp_path / "report.json"
    proc = _run(["--report", str(report), script, "--amp"])
    assert proc.returncode == 0, proc.stderr
    data = json.loads(report.read_text())
    assert data["emulation"]["active"] is True
    summary, steps = data["summary"], data["steps"]
    assert summary["steps"] == 5 and summary["amp_loss_scaler"] is True
    assert summary["skipped_steps"] == [2]
    # MXNet 1.9.1's scaler backs off one step late: step 3 still uses 2**16, step 4 uses 2**15
    assert [s["loss_scale"] for s in steps] == [2.0 ** 16] * 3 + [2.0 ** 15] * 2
    assert [s["skipped"] for s in steps] == [False, True, False, False, False]
    first = summary["first_nonfinite"]
    assert first["step"] == 2 and first["tensor"] == "gradient of %s" % "dense1_weight"
    assert first["layer"] == "HybridSequential[1] (Dense, dense1)"
    assert first["layer_from"] == "block"
    assert all(s["call_s"] > 0 for s in steps)
    assert all(s["iteration_s"] > 0 for s in steps[1:]) and summary["median_iteration_s"] > 0


@pytest.mark.slow
def test_report_without_loss_scaler_finds_the_first_nonfinite_gradient(tmp_path):
    script = _script(tmp_path, AMP_SCRIPT)
    report = tmp_path / "report.json"
    proc = _run(["--report", str(report), script, "--float16"])
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(report.read_text())["summary"]
    assert summary["amp_loss_scaler"] is False and summary["skipped"] == 0
    assert summary["first_nonfinite"]["step"] == 2
    assert summary["first_nonfinite"]["tensor"] == "gradient of dense1_weight"


@pytest.mark.slow
def test_no_emulation_is_the_plain_mxnet_baseline(tmp_path):
    script = _script(tmp_path, AMP_SCRIPT)
    report = tmp_path / "report.json"
    ok = _run(["--no-emulation", "--report", str(report), script])
    assert ok.returncode == 0, ok.stderr
    data = json.loads(report.read_text())
    assert data["emulation"] == dict(data["emulation"], requested=False, active=False)
    assert data["summary"]["steps"] == 5
    # float16 without the emulation fails on a CPU (no float16 GEMM), as plain MXNet does
    failed = _run(["--no-emulation", script, "--float16"])
    assert failed.returncode == 1
    assert "MXNetError" in failed.stderr


def test_relative_report_path_survives_a_chdir_in_the_script(tmp_path, monkeypatch):
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    script = _script(tmp_path, "import os\nos.chdir('elsewhere')\n")
    assert run_script(script, [], report="report.json") == 0
    assert json.loads((tmp_path / "report.json").read_text())["exit_code"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("body, error", [
    ('raise ValueError("bad thing\\nsecond line")\n', "ValueError: bad thing"),
    ("x = (1,\n", "SyntaxError: '(' was never closed (broken.py, line 1)"),
])
def test_report_error_is_one_line_and_a_syntax_error_shows_no_runner_frames(tmp_path, body, error):
    script = _script(tmp_path, body, name="broken.py")
    report = tmp_path / "report.json"
    proc = _run(["--no-emulation", "--report", str(report), script])
    assert proc.returncode == 1
    assert json.loads(report.read_text())["error"] == error
    assert "runpy" not in proc.stderr and "mxmixed" not in proc.stderr, proc.stderr


def test_report_says_in_its_first_line_when_no_step_was_seen(tmp_path):
    script = _script(tmp_path, """
        import mxnet as mx
        w = mx.nd.ones((3,))
        for _ in range(3):
            w -= 0.1 * w  # a hand-written update: no Trainer, no Module
    """)
    report = tmp_path / "report.json"
    assert run_script(script, [], report=str(report)) == 0
    data = json.loads(report.read_text())
    assert list(data)[0] == "note" and data["summary"]["steps"] == 0
    assert data["note"].startswith("no optimizer step was seen")
    assert "mxnet.module.Module.update" in data["note"]


def test_ctrl_c_in_the_script_is_one_line_naming_the_exit_code_and_the_report(tmp_path, capsys):
    script = _script(tmp_path, "raise KeyboardInterrupt\n")
    report = tmp_path / "r.json"
    assert run_script(script, [], report=str(report)) == 130
    line, = capsys.readouterr().err.strip().splitlines()
    assert line == ("mxmixed run: the script was interrupted (Ctrl-C), exit 130; the report says "
                    "so: %s" % report)
    assert json.loads(report.read_text())["status"] == "interrupted"


def test_summary_min_scale_is_no_larger_than_the_last():
    # gluon-cv's Mask R-CNN: both steps skipped, the scaler halved after the second; MXNet
    # moves the scale one step late, so no step's gradients carried the halved scale
    recorder = StepRecorder()
    recorder.steps = [
        {"step": 1, "loss_scale": 65536.0, "skipped": True, "iteration_s": None,
         "next_loss_scale": 65536.0},
        {"step": 2, "loss_scale": 65536.0, "skipped": True, "iteration_s": 19.0,
         "next_loss_scale": 32768.0}]
    summary = recorder.summary()
    assert summary["loss_scale_first"] == 65536.0
    assert summary["loss_scale_last"] == summary["loss_scale_min"] == 32768.0
    assert summary["skipped_steps"] == [1, 2]
