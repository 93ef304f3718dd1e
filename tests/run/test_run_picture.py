"""``mxmixed run --report R.json`` draws ``R.png`` beside the report: the loss scale per step on a
log2 axis, the skipped steps, and the events (the first non-finite gradient, scaled clipping),
drawn from the report's own numbers. The client is tests/data/clients/clip_scaled.py, whose
float16 run overflows in its first steps and clips gradients that still carry the loss scale."""
import json
import os
import sys
import textwrap
import warnings

import matplotlib.image
import pytest

from conftest import run_command
from mxmixed.cli._run import run_script
from mxmixed.diagnostics.plots import plot_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLIENT = os.path.join(ROOT, "tests", "data", "clients", "clip_scaled.py")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _gid(ax, gid):
    return [line for line in ax.get_lines() if line.get_gid() == gid]


def drawn_scale_at_each_step(line, steps):
    """The value of the drawn step line at each step of ``steps``: the last point drawn at or
    before it (a run of steps with one scale is drawn as its first and last point)."""
    points = list(zip(line.get_xdata(), line.get_ydata()))
    assert [x for x, _ in points] == sorted(x for x, _ in points)
    assert {(x, y) for x, y in points} <= {(s["step"], s["loss_scale"]) for s in steps}
    return [[y for x, y in points if x <= s["step"]][-1] for s in steps]


@pytest.fixture(scope="module")
def clipped_run(tmp_path_factory):
    """The report and the picture of a float16 run of the client (12 steps)."""
    folder = tmp_path_factory.mktemp("run")
    report = folder / "r.json"
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = run_command([sys.executable, "-m", "mxmixed.run", "--report", str(report), CLIENT,
                        "--dtype", "float16", "--clip", "gluon", "--steps", "12",
                        "--save-losses", str(folder / "losses.json")],
                       capture_output=True, text=True, env=env, cwd=str(folder))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "picture" not in proc.stderr, proc.stderr
    return json.loads(report.read_text()), folder / "r.png"


@pytest.mark.slow
def test_the_picture_is_a_png_beside_the_report(clipped_run):
    _, picture = clipped_run
    assert picture.read_bytes()[:8] == PNG_SIGNATURE
    height, width = matplotlib.image.imread(str(picture)).shape[:2]
    assert (width, height) == (1000, 480)  # plot_run's figsize (10, 4.8) at 100 dpi


@pytest.mark.slow
def test_the_loss_scale_line_and_the_skipped_steps_are_the_reports(clipped_run):
    data, _ = clipped_run
    assert data["summary"]["skipped_steps"], "the client's float16 run is meant to overflow"
    ax, = plot_run(data).axes
    line, = _gid(ax, "loss_scale")
    assert drawn_scale_at_each_step(line, data["steps"]) == [
        s["loss_scale"] for s in data["steps"]]
    assert ax.get_yscale() == "log" and ax.yaxis.get_transform().base == 2
    marks, = _gid(ax, "skipped")
    assert list(marks.get_xdata()) == data["summary"]["skipped_steps"]
    scale_of = {s["step"]: s["loss_scale"] for s in data["steps"]}
    assert list(marks.get_ydata()) == [scale_of[n] for n in data["summary"]["skipped_steps"]]


@pytest.mark.slow
def test_the_events_are_the_first_nonfinite_gradient_and_the_scaled_clipping(clipped_run):
    data, _ = clipped_run
    ax, = plot_run(data).axes
    first, clip = _gid(ax, "event")
    assert list(first.get_xdata()) == [data["summary"]["first_nonfinite"]["step"]] * 2
    assert data["summary"]["first_nonfinite"]["layer"] in first.get_label()
    site, = data["scaled_clipping"]
    assert list(clip.get_xdata()) == [site["first_step"]] * 2
    assert "clip_scaled.py:%d" % site["line"] in clip.get_label()
    assert "%d calls" % site["calls"] in clip.get_label()


def test_a_run_without_steps_draws_a_picture_saying_so(tmp_path):
    script = tmp_path / "script.py"
    script.write_text("x = 1\n")
    report = tmp_path / "r.json"
    assert run_script(str(script), [], report=str(report)) == 0
    assert (tmp_path / "r.png").read_bytes()[:8] == PNG_SIGNATURE
    ax, = plot_run(json.loads(report.read_text())).axes
    assert not ax.get_lines()
    assert [t.get_text().replace("\n", " ") for t in ax.texts] == [json.loads(
        report.read_text())["note"]]


def test_steps_without_a_loss_scaler_or_an_event_draw_no_empty_legend():
    # a float32 run, or a script with its own scaler (GluonNLP's run_pretraining.py): matplotlib
    # warned "No artists with labels found to put in legend" into the script's output
    report = {"steps": [{"step": 1, "trainer": 0, "loss_scale": None, "skipped": False}],
              "summary": {"skipped": 0}, "status": "finished"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ax, = plot_run(report).axes
    assert ax.get_legend() is None
    assert [t.get_text() for t in ax.texts] == ["no AMP loss scaler: no loss scale to draw"]


def test_a_picture_that_cannot_be_written_is_one_line_and_keeps_the_exit_code(tmp_path, capsys):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent("""
        import sys
        sys.exit(3)
    """))
    (tmp_path / "r.png").mkdir()  # a folder where the picture goes
    assert run_script(str(script), [], report=str(tmp_path / "r.json")) == 3
    assert json.loads((tmp_path / "r.json").read_text())["exit_code"] == 3
    err, = [line for line in capsys.readouterr().err.splitlines() if "picture" in line]
    assert err.startswith("mxmixed run: error: cannot draw the report's picture %s: "
                          % (tmp_path / "r.png"))


def test_a_long_run_draws_each_run_of_one_loss_scale_as_two_points():
    # 400,000 steps drawn point by point cost the picture hundreds of MB; a run of steps with
    # one scale is drawn through its ends, the same step line
    scales = [65536.0] * 5 + [32768.0] + [65536.0] * 4 + [16384.0] * 2
    steps = [{"step": n, "trainer": 0, "loss_scale": scale, "skipped": n == 6}
             for n, scale in enumerate(scales, 1)]
    ax, = plot_run({"steps": steps, "summary": {"skipped": 1}}).axes
    line, = _gid(ax, "loss_scale")
    assert list(line.get_xdata()) == [1, 5, 6, 7, 10, 11, 12]
    assert drawn_scale_at_each_step(line, steps) == scales
    marks, = _gid(ax, "skipped")
    assert (list(marks.get_xdata()), list(marks.get_ydata())) == ([6], [32768.0])


def test_a_report_named_like_a_picture_keeps_its_json_and_gets_its_own_picture(tmp_path):
    script = tmp_path / "script.py"
    script.write_text("x = 1\n")
    assert run_script(str(script), [], report=str(tmp_path / "r.png")) == 0
    assert json.loads((tmp_path / "r.png").read_text())["status"] == "finished"
    assert (tmp_path / "r.png.png").read_bytes()[:8] == PNG_SIGNATURE


@pytest.mark.parametrize("name", ["r", "r.json", "r.png", "r.txt"])
def test_every_rank_writes_a_report_and_a_picture_of_its_own(tmp_path, monkeypatch, name):
    script = tmp_path / "script.py"
    script.write_text("import os\nprint(os.environ['HOROVOD_RANK'])\n")
    written = {}
    for rank in range(3):
        monkeypatch.setenv("HOROVOD_RANK", str(rank))
        monkeypatch.setenv("HOROVOD_SIZE", "3")
        before = set(os.listdir(str(tmp_path)))
        assert run_script(str(script), [], report=str(tmp_path / name)) == 0
        written[rank] = set(os.listdir(str(tmp_path))) - before
    # each rank adds two new files: nothing of another rank is written over
    assert all(len(files) == 2 for files in written.values()), written
    for rank, files in written.items():
        picture, = [f for f in files if open(str(tmp_path / f), "rb").read(8) == PNG_SIGNATURE]
        report, = files - {picture}
        assert json.loads((tmp_path / report).read_text())["pid"] == os.getpid()
