"""examples/train.py: the gluoncv-style flags, offline by default, clear errors."""
import json
import os
import sys

import pytest

from conftest import ROOT, run_command

SCRIPT = os.path.join(ROOT, "examples", "train.py")


def _run(*flags):
    return run_command([sys.executable, SCRIPT, "--no-progress", *flags], capture_output=True,
                       text=True, cwd=ROOT)


def _accuracy(stdout):
    line = [l for l in stdout.splitlines() if l.startswith("test accuracy:")][0]
    return float(line.split(":")[1].strip().rstrip("%"))


@pytest.mark.slow
@pytest.mark.parametrize("flags", [["--amp"], ["--dtype", "float16", "--static-loss-scale", "64"]],
                         ids=["amp", "float16"])
def test_train_script_trains_the_digits_cnn_in_mixed_precision(flags):
    proc = _run("--epochs", "2", *flags)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _accuracy(proc.stdout) > 80
    assert "emulated on CPU" in proc.stdout


@pytest.mark.slow
def test_train_script_runs_a_gluoncv_model_on_upscaled_digits():
    proc = _run("--model", "cifar_resnet20_v1", "--amp", "--epochs", "1", "--batch-size", "256")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "loss scale" in proc.stdout


BAD_FLAGS = [
    (["--amp", "--dtype", "float16"], "pick one"),
    (["--static-loss-scale", "128"], "needs --amp"),
    (["--epochs", "0"], "at least 1"),
    (["--dataset", "cifar10", "--data-dir", "/nonexistent"], "download=False"),
    (["--model", "no_such_net", "--epochs", "1"], "unknown --model"),
]
# The script's main() on each command line, in one interpreter (one MXNet import, not five):
# its exit status and what it wrote to stderr, a traceback included where one escapes.
BAD_FLAGS_DRIVER = """
import contextlib, io, json, runpy, sys, traceback
main = runpy.run_path(sys.argv[1])["main"]
results = []
for flags in json.loads(sys.argv[2]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = main(["--no-progress"] + flags)
        except SystemExit as exit:
            code = exit.code
        except BaseException:
            traceback.print_exc()
            code = 1
    results.append([code, err.getvalue()])
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def bad_flag_runs():
    proc = run_command([sys.executable, "-c", BAD_FLAGS_DRIVER, SCRIPT,
                        json.dumps([flags for flags, _ in BAD_FLAGS])],
                       capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("case", range(len(BAD_FLAGS)), ids=[m for _, m in BAD_FLAGS])
def test_train_script_bad_flags_give_one_line_errors(bad_flag_runs, case):
    returncode, stderr = bad_flag_runs[case]
    assert returncode == 2, stderr
    assert BAD_FLAGS[case][1] in stderr and "Traceback" not in stderr, stderr
