"""The zoo table of docs/onnx.md is the one benchmarks/onnx_zoo.py makes from its JSON, and the
JSON covers the benchmark's models with the fields the docs page speaks of."""
import importlib.util
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BEGIN, END = "% onnx_zoo table: begin\n", "% onnx_zoo table: end\n"


def _benchmark():
    spec = importlib.util.spec_from_file_location(
        "onnx_zoo", os.path.join(ROOT, "benchmarks", "onnx_zoo.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows():
    with open(os.path.join(ROOT, "benchmarks", "onnx_zoo.json")) as handle:
        return json.load(handle)["rows"]


def test_docs_table_is_the_benchmarks_table():
    with open(os.path.join(ROOT, "docs", "onnx.md")) as handle:
        page = handle.read()
    assert page.count(BEGIN) == 1 and page.count(END) == 1
    table = page.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert table == _benchmark().table(_rows()), (
        "docs/onnx.md's table is stale: paste `python benchmarks/onnx_zoo.py --table`")


def test_benchmark_rows_cover_its_models():
    rows = {r["model"]: r for r in _rows()}
    assert set(rows) == {spec[0] for spec in _benchmark().MODELS}
    for row in rows.values():
        assert row["status"] in ("validated", "validation fails", "export fails"), row
        if row["status"] != "export fails":
            assert row["checker"] == "full check passes" and row["params_as_inputs"] == 0


def test_classification_families_validate_at_about_half_the_size():
    rows = {r["model"]: r for r in _rows()}
    assert rows["resnet50_v1b"]["size_ratio"] <= 0.51
    for row in rows.values():
        if row["family"] == "classification":
            assert row["status"] == "validated", row
            # BatchNorm's four vectors stay float32: densenet121 has 121 BatchNorm layers
            assert row["size_ratio"] <= 0.52, row
