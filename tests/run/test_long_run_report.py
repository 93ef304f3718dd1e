"""The report and the picture of a long run cost less memory than the report itself: the steps
are held in columns of numbers, written into the report one record a line as they are made, and
drawn from the same columns (a 400,000-step run once took +469 MB at its end, 7.8 times its
61 MB report: the whole report as one string, read back as records for the picture).
Measured with ``tracemalloc`` (Python's and NumPy's allocations), never by the clock."""
import json
import os
import tracemalloc

from mxmixed.cli._run_report import finish_report
from mxmixed.diagnostics.steps import StepLog, StepRecorder

STEPS = 30000


def record(n):
    """Step ``n`` of a run whose scale halves at every 1000th step, which is skipped."""
    skipped = n % 1000 == 0
    scale = 65536.0 / 2 ** (n // 1000)
    return {"step": n, "call": "step", "trainer": 0, "loss_scale": scale,
            "skipped": skipped, "call_s": 1e-4 * (n % 7), "iteration_s": None if n == 1
            else 1e-3 * (n % 13), "next_loss_scale": scale / 2 if skipped else scale}


def long_run():
    recorder = StepRecorder()
    for n in range(1, STEPS + 1):
        recorder.steps.append(record(n))
    return recorder


def test_a_step_is_held_in_a_few_dozen_bytes():
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        recorder = long_run()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held / STEPS < 80, "%.0f bytes a step" % (held / STEPS)
    assert recorder.steps[0] == record(1) and recorder.steps[-1] == record(STEPS)
    assert list(recorder.steps)[1234] == record(1235)


def test_the_report_and_its_picture_cost_less_memory_than_the_report(tmp_path):
    recorder = long_run()
    report = str(tmp_path / "r.json")
    final = {"status": "finished", "run_id": "0", "script": "train.py", "argv": [],
             "exit_code": 0, "error": None, "wall_s": 1.0, "scaled_clipping": []}
    # matplotlib's modules, fonts and caches, loaded once per process, are no cost of a report
    short = StepRecorder()
    short.steps.append(record(1))
    finish_report(str(tmp_path / "short.json"), final, {}, short)
    tracemalloc.start()
    try:
        finish_report(report, final, {"requested": True, "active": True}, recorder)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    size = os.path.getsize(report)
    assert peak < size, "peak %d bytes for a report of %d" % (peak, size)
    data = json.loads(open(report).read())
    assert data["steps"] == [record(n) for n in range(1, STEPS + 1)]
    assert data["summary"]["steps"] == STEPS and data["summary"]["skipped"] == STEPS // 1000
    assert os.path.getsize(str(tmp_path / "r.png")) > 0


def test_a_step_log_gives_back_the_records_it_was_given():
    log = StepLog()
    records = [{"step": 1, "call": "Module.update", "trainer": 0, "call_s": 0.5,
                "iteration_s": None},
               {"step": 2, "call": "step", "trainer": 1, "loss_scale": 8.0, "skipped": None,
                "loss": 2.5, "call_s": 0.25, "iteration_s": 0.75, "next_loss_scale": 8.0},
               {"step": 3, "call": "update", "trainer": 1, "loss_scale": 8.0, "skipped": True,
                "call_s": 0.25, "iteration_s": 0.5, "next_loss_scale": 4.0}]
    for one in records:
        log.append(dict(one))
    assert list(log) == records and log[-1] == records[-1] and log[1:] == records[1:]
    assert len(log) == 3 and log.calls() == ["Module.update", "step", "update"]
    assert log.median_iteration_s() == 0.75
