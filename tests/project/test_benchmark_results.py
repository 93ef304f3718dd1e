"""Benchmark results: ``make bench`` writes outside the tracked tree, ``--record`` merges a run
into the dated committed copy, and the docs quote that copy.

Nothing here runs a benchmark: the run is faked where a test needs one.
"""
import importlib
import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
_record = importlib.import_module("_record")
run_all = importlib.import_module("run_all")


# ----------------------------------------------------------------------------- where runs go
def _git(*args):
    if shutil.which("git") is None or not os.path.exists(os.path.join(ROOT, ".git")):
        pytest.skip("not a git checkout: nothing to say about tracked files")
    return subprocess.run(["git", "-C", ROOT] + list(args), capture_output=True, text=True)


def test_make_bench_default_output_is_ignored_and_untracked(monkeypatch):
    monkeypatch.delenv("MXMIXED_BENCH_OUT", raising=False)
    out = _record.default_out()
    assert out == os.path.join(ROOT, "results", "bench", "results.json")
    for path in [out] + [_record.side_file(out, s) for s in _record.SIDE_FILES]:
        rel = os.path.relpath(path, ROOT)
        assert _git("ls-files", "--error-unmatch", rel).returncode != 0, rel + " is tracked"
        assert _git("check-ignore", "-q", rel).returncode == 0, rel + " is not ignored"


def test_bench_output_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("MXMIXED_BENCH_OUT", str(tmp_path / "runs"))
    assert _record.default_out() == str(tmp_path / "runs" / "results.json")
    assert _record.side_file(_record.default_out(), "op_survey") == str(
        tmp_path / "runs" / "results-op_survey.json")


def test_a_run_writes_only_into_the_output_folder(monkeypatch, tmp_path):
    """main() with the suites faked: results.json lands in $MXMIXED_BENCH_OUT, nowhere else."""
    monkeypatch.setenv("MXMIXED_BENCH_OUT", str(tmp_path / "runs"))
    monkeypatch.setattr(run_all, "machine_and_versions", lambda: (
        {"cpu": "test cpu", "cores": 2, "mxnet_build": "CPU"}, {"mxnet": "1.9.1"}))
    memory_raw = [{"workload": "w", "amp_ratio": 0.5, "amp_bytes": 5e6, "float32_bytes": 1e7,
                   "float16_ratio": 0.25, "float16_bytes": 2.5e6}]
    seen = []

    def fake_suite(name, script, args, out):
        seen.append(out)
        return 0, memory_raw, 0.1

    monkeypatch.setattr(run_all, "run_suite", fake_suite)
    before = _git("status", "--porcelain").stdout
    assert run_all.main(["--only", "memory"]) == 0
    assert seen == [str(tmp_path / "runs" / "results.json")]
    with open(tmp_path / "runs" / "results.json") as handle:
        written = json.load(handle)
    assert [f["value"] for f in written["figures"]] == [0.5, 0.25]
    assert _git("status", "--porcelain").stdout == before


# ----------------------------------------------------------------------------- recording
def _run(date, suites, quick=False, cpu="cpu A"):
    """A results file as run_all.py writes it: suite -> list of figure values."""
    return {"date": date, "command": "python benchmarks/run_all.py", "quick": quick,
            "machine": {"cpu": cpu}, "versions": {"mxnet": "1.9.1"}, "method": "m",
            "not_run": [],
            "suites": {name: {"script": name + ".py", "status": "ok", "raw": []}
                       for name in suites},
            "figures": [{"suite": name, "workload": "w", "figure": "f", "value": v}
                        for name, values in suites.items() for v in values]}


def _write(path, data):
    with open(path, "w") as handle:
        json.dump(data, handle)
    return str(path)


def test_record_replaces_the_run_suites_and_keeps_the_others(tmp_path):
    recorded = tmp_path / "recorded"
    recorded.mkdir()
    _write(recorded / "2026-01-05-results.json",
           _run("2026-01-05T10:00:00+00:00", {"memory": [0.5], "emulation": [3.0, 1.9]}))
    run = _write(tmp_path / "run.json",
                 _run("2026-02-03T08:00:00+00:00", {"emulation": [2.3, 1.5]}, cpu="cpu B"))
    target, removed, sides = _record.record([run], str(recorded), str(tmp_path))
    assert target == str(recorded / "2026-02-03-results.json")
    assert removed == [str(recorded / "2026-01-05-results.json")]
    assert sides == [] and os.listdir(recorded) == ["2026-02-03-results.json"]
    with open(target) as handle:
        copy = json.load(handle)
    assert copy["date"] == "2026-02-03T08:00:00+00:00" and copy["machine"] == {"cpu": "cpu B"}
    assert [(f["suite"], f["value"]) for f in copy["figures"]] == [
        ("memory", 0.5), ("emulation", 2.3), ("emulation", 1.5)]
    assert copy["suites"]["memory"]["run"]["date"] == "2026-01-05T10:00:00+00:00"
    assert copy["suites"]["memory"]["run"]["machine"] == {"cpu": "cpu A"}
    assert copy["suites"]["emulation"]["run"]["machine"] == {"cpu": "cpu B"}


def test_record_takes_later_runs_over_earlier_ones(tmp_path):
    first = _write(tmp_path / "a.json", _run("2026-03-01T00:00:00+00:00", {"memory": [0.6]}))
    second = _write(tmp_path / "b.json", _run("2026-03-02T00:00:00+00:00", {"memory": [0.4]}))
    target, removed, _ = _record.record([first, second], str(tmp_path / "rec"), str(tmp_path))
    assert os.path.basename(target) == "2026-03-02-results.json" and removed == []
    with open(target) as handle:
        assert [f["value"] for f in json.load(handle)["figures"]] == [0.4]


@pytest.mark.parametrize("change, words", [
    (lambda r: r.update(quick=True), "--quick run"),
    (lambda r: r["suites"]["memory"].update(status="failed"), "suite memory failed"),
    (lambda r: r.pop("figures"), "not a results file"),
])
def test_record_refuses_a_run_unfit_for_the_docs_and_writes_nothing(tmp_path, change, words):
    run = _run("2026-03-01T00:00:00+00:00", {"memory": [0.6]})
    change(run)
    path = _write(tmp_path / "run.json", run)
    with pytest.raises(_record.RecordError, match=words):
        _record.record([path], str(tmp_path / "rec"), str(tmp_path / "side"))
    assert not os.path.exists(tmp_path / "rec")


def test_record_copies_a_suites_own_table_over_the_tracked_one(tmp_path):
    run = _run("2026-03-01T00:00:00+00:00", {"op_survey": []})
    run["suites"]["op_survey"]["raw"] = "see /somewhere/run-op_survey.json"
    path = _write(tmp_path / "run.json", run)
    side = tmp_path / "side"
    side.mkdir()
    with pytest.raises(_record.RecordError, match="no op_survey beside it"):
        _record.record([path], str(tmp_path / "rec"), str(side))
    assert not os.path.exists(tmp_path / "rec")
    _write(tmp_path / "run-op_survey.json", {"ops": ["measured"]})
    target, _, sides = _record.record([path], str(tmp_path / "rec"), str(side))
    assert sides == [str(side / "op_survey.json")]
    with open(side / "op_survey.json") as handle:
        assert json.load(handle) == {"ops": ["measured"]}
    with open(target) as handle:
        assert json.load(handle)["suites"]["op_survey"]["raw"] == "see benchmarks/op_survey.json"


def test_record_command_says_why_in_one_line(tmp_path, capsys):
    assert run_all.main(["--record", str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("run_all.py --record: no results file at") and "\n" not in err


def test_the_committed_copy_is_one_dated_file_of_full_runs():
    copies = _record.recorded_copies()
    assert len(copies) == 1, copies
    copy = _record.load_latest()
    assert os.path.basename(copies[0]) == copy["date"][:10] + "-results.json"
    for name, entry in copy["suites"].items():
        assert entry["status"] == "ok" and not entry["run"]["quick"], name
    assert not os.path.exists(os.path.join(ROOT, "benchmarks", "results.json"))


def test_the_gpu_fidelity_results_say_whether_the_gpu_half_ran():
    """docs/emulation.md: benchmarks/results-gpu-fidelity.json says "not yet run" until the
    GPU half of benchmarks/gpu_fidelity.py runs; its reference is PyTorch, never MXNet."""
    with open(os.path.join(ROOT, "benchmarks", "results-gpu-fidelity.json")) as handle:
        results = json.load(handle)
    assert results["status"] in ("not yet run", "measured")
    assert results["mxnet_on_gpu"] is False


# ----------------------------------------------------------------------------- the docs quote it
def _fig(copy, suite, workload, figure=""):
    found = [f for f in copy["figures"] if f["suite"] == suite and f["figure"].startswith(figure)
             and workload in (None, f["workload"])]
    assert len(found) == 1, (suite, workload, figure, len(found))
    return found[0]


def _ratio(f, bold=False):
    """'1.59x (1.22-1.62)', the value bold if asked."""
    value = "%.2fx" % f["value"]
    return "%s (%.2f-%.2f)" % ("**%s**" % value if bold else value, *f["spread"])


def _cells(f, digits=2):
    """'| 2.33x | 1.53-2.55 |' as in the README's table."""
    return "| %.*fx | %.*f-%.*f |" % (digits, f["value"], digits, f["spread"][0], digits,
                                      f["spread"][1])


def _goal(f):
    limit = float(str(f["goal"]).replace("<=", ""))
    return "≤ %gx: %s" % (limit, "met" if f["value"] <= limit else "not met")


def _readme(c):
    emu = lambda w: _fig(c, "emulation", w)  # noqa: E731
    ssd = lambda w, fig="emulated AMP step / float32": _fig(c, "ssd_step", w, fig)  # noqa: E731
    conv = _fig(c, "convert", "resnet50_v1", "float16 params")
    mem = lambda fig: _fig(c, "memory", "resnet50_v1, batch 32, 3x224x224", fig)  # noqa: E731
    bf = lambda w, fig: _fig(c, "bfloat16", w, fig)  # noqa: E731
    bert = lambda w: _fig(c, "bert_step", "gluonnlp BERTClassifier, " + w)  # noqa: E731
    return [
        ("emulated AMP step / float32 step (digits CNN", _cells(emu("digits_cnn"))),
        ("emulation cost: the same (gluoncv", _cells(emu("cifar_resnet20_v1"))),
        ("emulation cost, `MXMIXED_EMULATION_KEEP_LAYOUTS=0` (digits", _cells(
            emu("digits_cnn (KEEP_LAYOUTS=0, plain layouts)"))),
        ("emulation cost, the same `=0`", _cells(
            emu("cifar_resnet20_v1 (KEEP_LAYOUTS=0, plain layouts)"))),
        ("helper overhead:", _cells(_fig(c, "overhead", "digits_cnn"))),
        ("conversion of `resnet50_v1`", "| %.3f | exact |" % conv["value"]),
        ("`convert` + report", "report %.2f s (%.2f-%.2f)" % (conv["convert_s"],
                                                             *conv["convert_spread_s"])),
        ("validation of that conversion", "| %.0f%% |" % (100 * _fig(
            c, "convert", "resnet50_v1", "validate")["value"])),
        ("training memory, AMP / float32", "| %.3f |" % mem("AMP")["value"]),
        ("training memory, `cast('float16')`", "| %.3f |" % mem("cast")["value"]),
        ("tutorial suite when it had 7 notebooks", _cells(_fig(c, "notebooks", None), digits=1)),
        ("CPU ops without a float16 kernel", "| %s |" % _fig(c, "op_survey", None,
                                                              "ops without")["value"]),
        ("The SSD step (", "**%.2fx** a float32 step with oneDNN on (spread %.2f-%.2f)" % (
            ssd("SSD mobilenet0.25 (oneDNN on)")["value"],
            *ssd("SSD mobilenet0.25 (oneDNN on)")["spread"])),
        ("The BERT step (", "**%.2fx** a float32 step at 2 layers x 128 units (%.2f-%.2f)" % (
            bert("2x128, seq 64, batch 16")["value"], *bert("2x128, seq 64, batch 16")["spread"])),
        ("The BERT step (", "**%.2fx** at 4 layers x 512 units, sequence 128 (%.2f-%.2f)" % (
            bert("4x512, seq 128, batch 8")["value"], *bert("4x512, seq 128, batch 8")["spread"])),
        ("bfloat16 is slower than", "training step %.2fx, inference %.2fx (%.2fx against" % (
            bf("resnet50_v1", "training")["value"],
            bf("resnet50_v1", "inference speed-up, batch 16, 224")["value"],
            bf("resnet50_v1", "inference speed-up, batch 16: float32 (static, no")["value"])),
    ]


def _emulation_md(c):
    table = "| emulated AMP step / float32 step, 2-core AMD EPYC with AVX-512"
    bert = "| emulated AMP BERT step / float32 step, 2-core Intel Xeon"
    emu = lambda w: _fig(c, "emulation", w)  # noqa: E731
    ssd = lambda w: _fig(c, "ssd_step", w, "emulated AMP step / float32")  # noqa: E731
    on = ssd("SSD mobilenet0.25 (oneDNN on)")
    plain = ssd("SSD mobilenet0.25 (oneDNN on, KEEP_LAYOUTS=0)")
    zero = " (KEEP_LAYOUTS=0, plain layouts)"
    return [
        ((table, "| digits CNN, batch 64 |"), "| %s | %s |" % (
            _ratio(emu("digits_cnn")), _goal(emu("digits_cnn")))),
        ((table, "| digits CNN, `KEEP_LAYOUTS=0` |"), "| %s |" % _ratio(emu("digits_cnn" + zero))),
        ((table, "| `cifar_resnet20_v1`, batch 64 |"), "| %s | %s |" % (
            _ratio(emu("cifar_resnet20_v1")), _goal(emu("cifar_resnet20_v1")))),
        ((table, "| `cifar_resnet20_v1`, `KEEP_LAYOUTS=0` |"), "| %s |" % _ratio(
            emu("cifar_resnet20_v1" + zero))),
        ((table, "| SSD mobilenet0.25, batch 2, oneDNN on |"), "| %s | %s |" % (
            _ratio(on), _goal(on))),
        ((table, "| SSD, `KEEP_LAYOUTS=0` |"), "| %s |" % _ratio(plain)),
        ((table, "| SSD, oneDNN off |"), "| %s |" % _ratio(ssd("SSD mobilenet0.25 (oneDNN off)"))),
    ] + [((bert, row), "| %s | %s |" % (_ratio(f), _goal(f))) for row, f in (
        ("| gluonnlp BERT classifier, 2 layers x 128", _fig(
            c, "bert_step", "gluonnlp BERTClassifier, 2x128, seq 64, batch 16")),
        ("| gluonnlp BERT classifier, 4 layers x 512", _fig(
            c, "bert_step", "gluonnlp BERTClassifier, 4x512, seq 128, batch 8")))]


def _run_md(c):
    table = "| comparison, 2-core AMD EPYC with AVX-512 and AVX512-BF16 |"
    ssd = lambda w, fig: _fig(c, "ssd_step", "SSD mobilenet0.25 " + w, fig)  # noqa: E731
    check, casts = _fig(c, "ssd_step", "SSD mobilenet0.25", "share")["value"].split(" / ")
    rows = [("| emulated AMP / float32, oneDNN on", ssd("(oneDNN on)", "emulated AMP step / float")),
            ("| emulated AMP with `MXMIXED_EMULATION_KEEP_LAYOUTS=0`", ssd(
                "(oneDNN on, KEEP_LAYOUTS=0)", "emulated AMP step / float")),
            ("| emulated AMP / float32, oneDNN off", ssd("(oneDNN off)", "emulated AMP step /")),
            ("| emulated AMP with MXNet's", ssd("(MXNet's multi_all_finite)", "emulated")),
            ("| emulated AMP / the same without", ssd("(oneDNN on)", "emulated AMP step / same")),
            ("| in one process: emulated AMP with the new", ssd("(oneDNN on, one process)",
                                                             "emulated AMP step, the")),
            ("| in one process: emulated AMP without", ssd("(oneDNN on, one process)",
                                                        "emulated AMP step, no"))]
    return [((table, marker), "| %s |" % _ratio(f)) for marker, f in rows] + [
        ("In that run the casts take", "casts take %s of the operator time and the overflow "
                                       "check %s" % (casts, check))]


def _bfloat16_md(c):
    table = "| workload | speed-up (median, min-max) |"
    bf = lambda w, fig: _fig(c, "bfloat16", w, fig)  # noqa: E731
    infer = bf("resnet50_v1", "inference speed-up, batch 16, 224")
    train = bf("resnet50_v1", "training")
    acc = bf("digits CNN, 4 epochs, seeds [0, 1, 2]", "test accuracy")
    unfolded = bf("resnet50_v1", "inference speed-up, batch 16: float32 (static, oneDNN "
                                 "subgraph) / bfloat16 unfolded")
    fused = bf("resnet50_v1", "inference speed-up, batch 16: float32 (static, oneDNN subgraph) / "
                              "bfloat16 folded, with")
    words = lambda f: "%gx: %s" % (f["goal"], "met" if f["met"] else "not met")  # noqa: E731
    return [
        ((table, "| ResNet-50 v1 inference, batch 16"), "| %s | %gx, error ≤ %g: %s |" % (
            _ratio(infer, bold=True), infer["goal"], infer["max_error"],
            "met" if infer["met"] else "not met")),
        ((table, "| ResNet-50 v1 inference, batch 16"), "error against float32 %.4f |" % (
            infer["error_bfloat16"])),
        ((table, "| same, float32 without the subgraph"), "| %s |" % _ratio(
            bf("resnet50_v1", "inference speed-up, batch 16: float32 (static, no"))),
        ((table, "| same, unfolded"), "| %s | | error %.4f |" % (
            _ratio(unfolded), unfolded["error_unfolded"])),
        ((table, "| same, folded, oneDNN subgraph on the bfloat16 block too"),
         "| %s | | error %.4f |" % (_ratio(fused), fused["error_fused"])),
        ("goal (1.7x against float32 at its best, error at most 0.01) is met",
         "%.2fx, error %.4f, where the unfolded graph gave %.2fx" % (
             infer["value"], infer["error_bfloat16"], unfolded["value"])),
        ((table, "| SSD-512 MobileNet1.0 inference"), "| %s |" % _ratio(
            bf("ssd_512_mobilenet1.0_voc", "inference speed-up, batch 4, 512"))),
        ((table, "| ResNet-50 v1 training step"), "| %s | %s |" % (
            _ratio(train, bold=True), words(train))),
        ((table, "| cifar_resnet20_v1 training step"), "| %s |" % _ratio(
            bf("cifar_resnet20_v1", "training"))),
        ((table, "| probe: GEMM"), "| %.2fx / %.2fx |" % (
            bf("probe gemm", "op")["value"], bf("probe conv", "op")["value"])),
        ((table, "| digits CNN, 4 epochs"), "float32 %s; bfloat16 %s |" % (
            " ".join("%.3f" % a for a in acc["float32"]),
            " ".join("%.3f" % a for a in acc["bfloat16"]))),
        ("same run the benchmark's `mxmixed convert", "exited %d" % bf(
            "ssd_512_mobilenet1.0_voc", "inference speed-up, batch 4, 512")["convert_exit_code"]),
    ] + _bert_rows(table, bf, words) + _order_rows(c)


def _order_rows(c):
    """The natural order's figures (benchmarks/bfloat16_order.py), by import order."""
    raw = c["suites"]["bfloat16_order"]["raw"]

    def figures(model):
        found = {r["figure"].split(", ")[2].split(":")[0]: r for r in raw
                 if r["workload"] == model and r.get("value") is not None}
        return [found[o] for o in ("mxmixed-imported-first", "mxnet-imported-first",
                                   "ops-before-import")]
    resnet, bert = figures("resnet50_v1b"), figures("BERT 4x512")
    return [("benchmarks/bfloat16_order.py` (`make bench`) measures",
             "ResNet-50 v1b batch 8 %.2fx / %.2fx / %.2fx, BERT 4x512 batch 8 %.2fx / %.2fx / "
             "%.2fx float32, errors %.4f and %.4f" % (
                 *(r["value"] for r in resnet), *(r["value"] for r in bert),
                 resnet[0]["error_bfloat16"], bert[0]["error_bfloat16"]))]


def _bert_rows(table, bf, words):
    infer = bf("BERT 4x512 inference", "inference speed-up, 4x512")
    train = bf("BERT 4x512 training", "training step")
    return [
        ((table, "| BERT 4x512 inference"), "| %s | %gx, error ≤ %g: %s |" % (
            _ratio(infer, bold=True), infer["goal"], infer["max_error"],
            "met" if infer["met"] else "not met")),
        ((table, "| BERT 4x512 inference"), "error against float32 %.4f |" % (
            infer["error_bfloat16"])),
        ((table, "| BERT, float32 without the subgraph backend"), "| %s |" % _ratio(
            bf("BERT 4x512 inference", "inference speed-up: float32 (static, no"))),
        ((table, "| BERT, float32 with the conversion's float32 rewrites"), "| %s |" % _ratio(
            bf("BERT 4x512 inference", "inference speed-up: float32 with"))),
        ((table, "| BERT 4x512 training step"), "| %s | %s |" % (
            _ratio(train, bold=True), words(train))),
    ]


def _symbolic_md(c):
    conv = _fig(c, "convert", "resnet50_v1", "float16 params")
    val = _fig(c, "convert", "resnet50_v1", "validate")
    out = [
        ("resnet50_v1: `convert` + report", "| %.3f s (%.3f-%.3f; goal < 3 s) |" % (
            conv["convert_s"], *conv["convert_spread_s"])),
        ("resnet50_v1: `load_checkpoint` with checks", "| %.3f s |" % conv["load_checkpoint_s"]),
        ("resnet50_v1: `validate` on 8 images", val["absolute"].split("; ")[1].split(" for ")[0]
         .replace(")", ";")),
    ]
    zoo = "| model | input | convert |"
    search = "| model | candidates n |"
    for f in c["figures"]:
        if f["suite"] != "zoo" or not f["figure"].startswith("float16 params"):
            continue
        r = f["row"]
        verdict = "pass" if r["passes"] else "**fail**"
        out.append(((zoo, "| %s " % r["workload"]), "| %s | %.2f s | %.3f | %d (" % (
            r["input"], r["convert_s"], r["size_ratio"], r["fp32_layers"])))
        out.append(((zoo, "| %s " % r["workload"]), "| %s, %.2g, %s" % (
            r["rule"], r["error"], verdict)))
        out.append(((zoo, "| %s " % r["workload"]), "| %.2f s / %.2f s |" % (
            r["fp16_infer_s"], r["fp32_infer_s"])))
        if "search_evaluations" in r:
            out.append(((search, "| %s (%s) |" % (r["workload"], r["input"])),
                        "| %d | %d / %d | %.1f s | %d | %.2g -> %.2g |" % (
                            r["search_candidates"], r["search_evaluations"], r["search_bound"],
                            r["search_s"], r["search_layers"], r["search_initial_error"],
                            r["search_error"])))
    return out


def _untrusted_md(c):
    table = "| what (`benchmarks/graph_cost.py`) | peak memory | where it goes |"
    cost = lambda fig: _fig(c, "graph_cost", None, fig)  # noqa: E731
    chain, validate = cost("mxmixed convert: peak"), cost("mxmixed convert --validate")
    onnx, settle = cost("mxmixed convert --format onnx"), cost("bfloat16 conversion time")
    return [
        ((table, "| `mxmixed convert` of a long graph"), "(%s) | %.1fx the symbol file |" % (
            chain["workload"], chain["value"])),
        ((table, "| MXNet alone"), "| %.1fx the symbol file |" % cost("MXNet alone")["value"]),
        ((table, "| `mxmixed convert --validate 2` of the same"), "| %.1fx the symbol file |" % (
            validate["value"])),
        ((table, "| `mxmixed convert --format onnx`"), "(%s) | %.1fx the params file |" % (
            onnx["workload"], onnx["value"])),
        ((table, "| bfloat16 settling"), "(%s) | %s |" % (settle["workload"], _ratio(settle))),
    ]


def _unit(lines, where):
    """The table row (or the whole paragraph, spaces normalized) holding ``where``."""
    anchor, marker = where if isinstance(where, tuple) else (None, where)
    start = 0
    if anchor is not None:
        hits = [i for i, line in enumerate(lines) if anchor in line]
        assert len(hits) == 1, "%r: %d lines" % (anchor, len(hits))
        start = hits[0] + 1
    hits = [i for i in range(start, len(lines)) if marker in lines[i]]
    assert hits, "no line holds %r" % marker
    i = hits[0]
    if lines[i].startswith("|"):
        return lines[i]
    first, last = i, i
    while first > 0 and lines[first - 1].strip():
        first -= 1
    while last + 1 < len(lines) and lines[last + 1].strip():
        last += 1
    return " ".join(" ".join(lines[first:last + 1]).split())


@pytest.mark.parametrize("doc, quotes", [
    ("README.md", _readme), ("docs/emulation.md", _emulation_md),
    ("docs/bfloat16.md", _bfloat16_md), ("docs/symbolic.md", _symbolic_md),
    ("docs/run.md", _run_md), ("docs/untrusted-files.md", _untrusted_md)])
def test_docs_quote_the_recorded_benchmark_copy(doc, quotes):
    copy = _record.load_latest()
    with open(os.path.join(ROOT, doc), encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    name = os.path.basename(_record.latest())
    stale = []
    for where, text in quotes(copy):
        if text not in _unit(lines, where):
            stale.append("%s: expected %r" % (where, text))
    assert not stale, "%s does not match %s:\n%s" % (doc, name, "\n".join(stale))
    assert "benchmarks/recorded/" + name in " ".join(lines)
