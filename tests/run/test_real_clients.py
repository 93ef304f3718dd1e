"""Real clients under ``mxmixed run``: gluon-cv style training scripts that know nothing about
mxmixed (tests/data/clients/) train a few iterations on tiny fake data made here, validate, and end
with finite losses (each run takes under a minute on a 2-core machine; no test checks how long).

The SSD and YOLOv3 runs with ``--amp`` need the emulation of ``amp_multicast`` (MXNet 1.9.1's
oneDNN kernel has no float16 guard: "unknown type for MKLDNN :2").
"""
import json
import math
import os
import sys

import pytest

from conftest import run_command

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLIENTS = os.path.join(ROOT, "tests", "data", "clients")
ITERS = 2

sys.path.insert(0, CLIENTS)
import fake_data  # noqa: E402

sys.path.remove(CLIENTS)


@pytest.fixture(scope="module")
def voc(tmp_path_factory):
    return fake_data.make_voc(str(tmp_path_factory.mktemp("voc")))


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory):
    return fake_data.make_image_folder(str(tmp_path_factory.mktemp("imagenet")))


def _run_client(tmp_path, script, args, runner_args=()):
    """``python -m mxmixed.run --report R CLIENT ARGS --save-metrics M``; (report, metrics)."""
    report, metrics = tmp_path / "report.json", tmp_path / "metrics.json"
    # nothing may be downloaded (a dead proxy makes any attempt fail) or come from a cache
    dead = "http://127.0.0.1:9"
    env = dict(os.environ, PYTHONPATH=ROOT, HOME=str(tmp_path / "home"),
               MXNET_HOME=str(tmp_path / "mxnet_home"), HTTP_PROXY=dead, HTTPS_PROXY=dead,
               http_proxy=dead, https_proxy=dead)
    command = ([sys.executable, "-m", "mxmixed.run", "--report", str(report)] + list(runner_args)
               + [os.path.join(CLIENTS, script)] + list(args)
               + ["--save-metrics", str(metrics), "--log-interval", "1"])
    proc = run_command(command, capture_output=True, text=True, env=env, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(report.read_text()), json.loads(metrics.read_text())


def _finite(values):
    return all(math.isfinite(v) for v in values)


def _check_report(report, amp):
    summary = report["summary"]
    assert report["exit_code"] == 0 and report["emulation"]["active"] is True
    assert summary["steps"] == ITERS
    assert summary["amp_loss_scaler"] is amp
    if amp:
        assert all(s["loss_scale"] > 0 for s in report["steps"])
    return summary


@pytest.mark.slow
def test_ssd_amp_trains_and_validates(tmp_path, voc):
    report, metrics = _run_client(tmp_path, "train_ssd.py", [
        "--dataset-root", voc, "--data-shape", "64", "--batch-size", "2", "-j", "0",
        "--epochs", "1", "--max-iters", str(ITERS), "--amp"])
    _check_report(report, amp=True)
    assert len(metrics["cross_entropy"]) == ITERS
    assert _finite(metrics["cross_entropy"] + metrics["smooth_l1"])
    assert len(metrics["map"]) == 1 and 0.0 <= metrics["map"][0] <= 1.0


@pytest.mark.slow
def test_yolo3_amp_trains_and_validates(tmp_path, voc):
    report, metrics = _run_client(tmp_path, "train_yolo3.py", [
        "--dataset-root", voc, "--data-shape", "64", "--batch-size", "2", "-j", "0",
        "--epochs", "1", "--max-iters", str(ITERS), "--amp"])
    _check_report(report, amp=True)
    assert len(metrics["losses"]) == ITERS
    assert _finite([v for step in metrics["losses"] for v in step])
    assert len(metrics["map"]) == 1 and 0.0 <= metrics["map"][0] <= 1.0


@pytest.mark.slow
@pytest.mark.parametrize("model, mode", [("resnet18_v1", ["--dtype", "float16"]),
                                         ("mobilenet0.25", ["--amp"])], ids=["cast", "amp"])
def test_classification_float16_trains_and_validates(tmp_path, image_folder, model, mode):
    report, metrics = _run_client(tmp_path, "train_imagenet.py", [
        "--data-dir", image_folder, "--model", model, "--input-size", "32",
        "--batch-size", "2", "-j", "0", "--num-epochs", "1", "--max-iters", str(ITERS),
        "--lr", "0.01", "--seed", "0"] + mode)
    summary = _check_report(report, amp=mode == ["--amp"])
    assert summary["first_nonfinite"] is None or mode == ["--amp"]
    assert len(metrics["loss"]) == ITERS and _finite(metrics["loss"])
    assert len(metrics["val_top1"]) == 1 and 0.0 <= metrics["val_top1"][0] <= 1.0


@pytest.mark.slow
def test_module_api_float16_report_shows_its_steps(tmp_path):
    report, metrics = _run_client(tmp_path, "train_cifar_module.py",
                                  ["--dtype", "float16", "--num-epochs", "2"])
    assert report["exit_code"] == 0 and math.isfinite(metrics["train_ce"])
    assert report["note"] == "8 optimizer steps recorded from Module.update"
    assert report["summary"]["steps"] == 8  # 32 examples / batch 8, two epochs
    assert [s["call"] for s in report["steps"]] == ["Module.update"] * 8
    assert all(s["iteration_s"] > 0 for s in report["steps"][1:])
    assert report["summary"]["first_nonfinite"] is None


@pytest.mark.slow
def test_module_api_report_finds_the_first_nonfinite_gradient(tmp_path):
    report, _ = _run_client(tmp_path, "train_cifar_module.py",
                            ["--dtype", "float16", "--num-epochs", "1", "--lr", "1e4"])
    found = report["summary"]["first_nonfinite"]
    assert found is not None and found["step"] > 1
    assert found["tensor"].startswith("gradient of ")
    assert found["layer_from"] == "graph"  # the op of the Module's graph that reads it
    assert found["layer"].startswith(found["tensor"][len("gradient of "):].rsplit("_", 1)[0])
