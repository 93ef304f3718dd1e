"""Recording a benchmark run: its suites merged into the dated copy under ``benchmarks/recorded/``.

``make bench`` writes its results outside the tracked tree (``results/bench/``, or the folder
``$MXMIXED_BENCH_OUT`` names), so running it changes no tracked file. The docs' tables and the
tests read the committed copy, ``benchmarks/recorded/<YYYY-MM-DD>-results.json``, the newest
by name. ``python benchmarks/run_all.py --record [RUN.json ...]`` (``make bench-record``)
records runs: each suite of a run replaces that suite in the newest recorded copy, the other
suites are kept, and every suite carries the run it came from (date, command, machine,
versions). The result is written under the date of its newest suite and replaces the older
copy, which it contains. The suites with a file of their own (``op_survey``, ``onnx_zoo``) have
it copied over the tracked one in ``benchmarks/``. A ``--quick`` run or a failed suite is
refused: neither belongs in the docs.
"""
import json
import os
import shutil
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RECORDED = os.path.join(HERE, "recorded")
SUFFIX = "-results.json"
# suites that write a full table of their own beside results.json: suite -> tracked copy
SIDE_FILES = {"op_survey": "op_survey.json", "onnx_zoo": "onnx_zoo.json"}


class RecordError(Exception):
    """A run that cannot be recorded; the message says why and what to do."""


def default_out():
    """Where ``make bench`` writes ``results.json``: ``$MXMIXED_BENCH_OUT`` or ``results/bench``."""
    folder = os.environ.get("MXMIXED_BENCH_OUT") or os.path.join(ROOT, "results", "bench")
    return os.path.join(os.path.abspath(folder), "results.json")


def side_file(out, suite):
    """The full table a suite writes beside the results file ``out`` (str)."""
    return os.path.splitext(out)[0] + "-" + suite + ".json"


def recorded_copies(folder=RECORDED):
    """The recorded copies in ``folder``, oldest first (their names start with the date)."""
    if not os.path.isdir(folder):
        return []
    return [os.path.join(folder, f) for f in sorted(os.listdir(folder)) if f.endswith(SUFFIX)]


def latest(folder=RECORDED):
    """The newest recorded copy (path), or None."""
    copies = recorded_copies(folder)
    return copies[-1] if copies else None


def load_latest(folder=RECORDED):
    """The newest recorded copy, read (dict): what the docs and the tests quote."""
    path = latest(folder)
    if path is None:
        raise RecordError("no recorded benchmark results in %s: run `make bench` and then "
                          "`make bench-record`" % os.path.relpath(folder, ROOT))
    with open(path) as handle:
        return json.load(handle)


def _run_of(results):
    return {k: results.get(k) for k in ("date", "command", "quick", "machine", "versions")}


def _read_run(path):
    if not os.path.exists(path):
        raise RecordError("no results file at %s: run `make bench` first, or name the file "
                          "a run wrote (--out)" % path)
    try:
        with open(path) as handle:
            run = json.load(handle)
    except (OSError, ValueError) as err:
        raise RecordError("cannot read %s: %s" % (path, err)) from None
    if not isinstance(run, dict) or not {"date", "suites", "figures"} <= set(run):
        raise RecordError("%s is not a results file of benchmarks/run_all.py" % path)
    if run.get("quick"):
        raise RecordError("%s is a --quick run (a smoke run): record a full run" % path)
    for name, entry in run["suites"].items():
        if entry.get("status") != "ok":
            raise RecordError("suite %s failed in %s: rerun it, or record a run without it "
                              "(run_all.py --only/--skip)" % (name, path))
    if not run["suites"]:
        raise RecordError("%s holds no suite" % path)
    return run


def merge(base, runs):
    """The recorded copy: the suites of ``base`` (dict or None), each run's replacing them.

    Every suite entry gets the ``run`` it came from; the figures follow their suites. The
    copy's ``date``, ``machine`` and ``versions`` are those of its newest suite's run.
    """
    suites, figures = {}, {}
    if base is not None:
        for name, entry in base["suites"].items():
            suites[name] = dict(entry, run=entry.get("run") or _run_of(base))
            figures[name] = [f for f in base["figures"] if f["suite"] == name]
    for run in runs:
        for name, entry in run["suites"].items():
            suites[name] = dict(entry, run=_run_of(run))
            figures[name] = [f for f in run["figures"] if f["suite"] == name]
    newest = max((entry["run"] for entry in suites.values()), key=lambda r: r["date"])
    last = runs[-1] if runs else base
    return {
        "date": newest["date"],
        "recorded": "merged from several runs of benchmarks/run_all.py: each suite's `run` "
                    "says when, where and with which command it was measured",
        "machine": newest["machine"], "versions": newest["versions"],
        "method": last.get("method"), "not_run": last.get("not_run", []),
        "suites": suites,
        "figures": [f for name in suites for f in figures[name]],
    }


def write_json(path, data):
    """Write ``data`` to ``path`` whole or not at all."""
    handle = tempfile.NamedTemporaryFile("w", dir=os.path.dirname(path), suffix=".tmp",
                                         delete=False)
    try:
        with handle:
            json.dump(data, handle, indent=1, default=str)
            handle.write("\n")
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(handle.name, 0o666 & ~mask)  # a temporary file is private; a result is not
        os.replace(handle.name, path)
    except BaseException:
        os.unlink(handle.name)
        raise


def _copy(src, dest):
    tmp = dest + ".tmp"
    shutil.copyfile(src, tmp)
    os.replace(tmp, dest)


def record(paths, folder=RECORDED, side_folder=HERE):
    """Merge the runs at ``paths`` into the newest recorded copy in ``folder``.

    Returns (path written, [older copies removed], [side files copied]). Everything is
    checked before anything is written.
    """
    runs = [_read_run(p) for p in paths]
    sides = []
    for path, run in zip(paths, runs):
        for suite, name in SIDE_FILES.items():
            if suite in run["suites"]:
                src = side_file(path, suite)
                if not os.path.exists(src):
                    raise RecordError("%s has no %s beside it (%s): record the folder the run "
                                      "wrote" % (path, suite, src))
                sides.append((src, os.path.join(side_folder, name)))
    base_path = latest(folder)
    base = None
    if base_path is not None:
        with open(base_path) as handle:
            base = json.load(handle)
    merged = merge(base, runs)
    for suite, name in SIDE_FILES.items():
        raw = merged["suites"].get(suite, {}).get("raw")
        if isinstance(raw, str) and raw.startswith("see "):  # not kept inline: the copy's path
            merged["suites"][suite]["raw"] = "see benchmarks/" + name
    os.makedirs(folder, exist_ok=True)
    target = os.path.join(folder, merged["date"][:10] + SUFFIX)
    write_json(target, merged)
    for src, dest in sides:
        _copy(src, dest)
    removed = [p for p in recorded_copies(folder) if p != target]
    for path in removed:
        os.remove(path)
    return target, removed, [dest for _, dest in sides]
