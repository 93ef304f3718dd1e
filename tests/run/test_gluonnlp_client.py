"""A GluonNLP-style client under ``mxmixed run``: tests/data/clients/finetune_classifier.py (in the
style of GluonNLP 0.10's scripts/bert/finetune_classifier.py, knowing nothing about mxmixed)
fine-tunes a tiny random-init ``BERTClassifier`` on a synthetic sentiment task, with MXNet AMP
(``--dtype float16``) and as plain float32. Each run takes about 15 s on a 2-core machine.

``--round_to 16`` pads every batch to one shape: without it each new sequence length builds a
new cached graph, which is several times slower under the emulation.
"""
import json
import math
import os
import re
import sys

import pytest

from conftest import run_command

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLIENT = os.path.join(ROOT, "tests", "data", "clients", "finetune_classifier.py")
STEPS = 32  # 64 examples / batch 16, 8 epochs
ACCURACY = re.compile(r"^final dev accuracy=([0-9.]+) after (\d+) steps$", re.M)


def _run(tmp_path, args):
    """``python -m mxmixed.run --report R finetune_classifier.py ARGS``; (report, metrics,
    stdout)."""
    pytest.importorskip("gluonnlp")
    report, metrics = tmp_path / "report.json", tmp_path / "metrics.json"
    dead = "http://127.0.0.1:9"  # nothing may be downloaded
    env = dict(os.environ, PYTHONPATH=ROOT, HOME=str(tmp_path / "home"),
               MXNET_HOME=str(tmp_path / "mxnet_home"), HTTP_PROXY=dead, HTTPS_PROXY=dead,
               http_proxy=dead, https_proxy=dead)
    command = ([sys.executable, "-m", "mxmixed.run", "--report", str(report), CLIENT]
               + list(args) + ["--round_to", "16", "--seed", "2", "--save-metrics", str(metrics)])
    proc = run_command(command, capture_output=True, text=True, env=env, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(report.read_text()), json.loads(metrics.read_text()), proc.stdout


def _check_training(report, metrics, stdout):
    assert report["exit_code"] == 0 and report["emulation"]["active"] is True
    assert report["note"] == "%d optimizer steps recorded from Trainer.update" % STEPS
    assert report["summary"]["steps"] == STEPS
    assert [s["call"] for s in report["steps"]] == ["update"] * STEPS
    losses = metrics["loss"]
    assert len(losses) == STEPS and all(math.isfinite(v) for v in losses)
    # it learns: the last epoch's training loss is below the first's, and the dev accuracy
    # rises above chance at some epoch
    assert sum(losses[-4:]) < sum(losses[:4])
    assert len(metrics["accuracy"]) == 8 and max(metrics["accuracy"]) > 0.5
    found = ACCURACY.findall(stdout)
    assert len(found) == 1, stdout[-2000:]
    accuracy, steps = float(found[0][0]), int(found[0][1])
    assert steps == STEPS and 0.0 <= accuracy <= 1.0
    assert accuracy == pytest.approx(metrics["accuracy"][-1], abs=1e-4)


@pytest.mark.slow
def test_bert_finetuning_float16_amp_under_mxmixed_run(tmp_path):
    report, metrics, stdout = _run(tmp_path, ["--dtype", "float16"])
    _check_training(report, metrics, stdout)
    summary, steps = report["summary"], report["steps"]
    assert summary["amp_loss_scaler"] is True
    assert all(s["loss_scale"] > 0 and s["skipped"] in (True, False) for s in steps)
    # skipped steps are AMP's: each halves the scale the next step uses
    skipped = [s["step"] for s in steps if s["skipped"]]
    assert summary["skipped_steps"] == skipped and summary["skipped"] == len(skipped)
    for before, after in zip(steps, steps[1:]):
        if before["skipped"]:
            assert after["loss_scale"] == before["loss_scale"] / 2
        else:
            assert after["loss_scale"] >= before["loss_scale"]
    assert summary["loss_scale_first"] == steps[0]["loss_scale"] == 2.0 ** 16
    assert summary["first_nonfinite"] is None or skipped


@pytest.mark.slow
def test_bert_finetuning_float32_under_mxmixed_run(tmp_path):
    report, metrics, stdout = _run(tmp_path, [])
    _check_training(report, metrics, stdout)
    assert report["summary"]["amp_loss_scaler"] is False
    assert report["summary"]["first_nonfinite"] is None
    assert all("loss_scale" not in s for s in report["steps"])
