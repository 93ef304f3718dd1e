"""Models with several data inputs (a gluonnlp BERT: token ids, token types, valid length)
through ``mxmixed convert`` (``--inputs FILE.npz``, ``--input NAME:SHAPE[:DTYPE[:HIGH]]``),
``validate``, the search and the ONNX export; integer inputs stay integer."""
import json
import os

import mxnet as mx
import numpy as np
import pytest

from conftest import run_convert
from mxmixed import cli, symbolic

nlp = pytest.importorskip("gluonnlp")

SEQ, VOCAB = 8, 50


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return _bert(tmp_path_factory.mktemp("bert"))


def _bert(folder):
    """A tiny BERT (2 layers, 2 heads, units 32), random weights, exported as gluonnlp does."""
    mx.random.seed(0)
    encoder = nlp.model.BERTEncoder(num_layers=2, units=32, hidden_size=64, max_length=32,
                                    num_heads=2, dropout=0.0, output_attention=False,
                                    output_all_encodings=False)
    net = nlp.model.BERTModel(encoder, vocab_size=VOCAB, token_type_vocab_size=2, units=32,
                              embed_size=32, use_pooler=True, use_decoder=False,
                              use_classifier=False)
    net.initialize(mx.init.Normal(0.02))
    net.hybridize()
    inputs = _inputs(2)
    net(*[mx.nd.array(inputs[k], dtype=inputs[k].dtype) for k in ("data0", "data1", "data2")])
    prefix = str(folder / "bert")
    net.export(prefix)
    return prefix


def _inputs(n, seed=0):
    rng = np.random.RandomState(seed)
    return {"data0": rng.randint(0, VOCAB, (n, SEQ)).astype(np.int32),
            "data1": rng.randint(0, 2, (n, SEQ)).astype(np.int32),
            "data2": rng.randint(1, SEQ + 1, (n,)).astype(np.float32)}


@pytest.fixture(scope="module")
def npz(bert):
    path = bert + "-inputs.npz"
    np.savez(path, **_inputs(6, seed=1))
    return path


SPECS = ["--input", "data0:%d:int32:%d" % (SEQ, VOCAB), "--input", "data1:%d:int32:2" % SEQ,
         "--input", "data2::float32:%d" % SEQ]


def _written(tmp_path):
    return sorted(f for f in os.listdir(tmp_path) if f.startswith("out"))


def test_validates_on_named_inputs_from_a_npz(bert, npz, tmp_path, capsys):
    code, out, err = run_convert([bert, "0", "--out", str(tmp_path / "out"), "--validate", "6",
                                  "--inputs", npz], capsys)
    assert code == cli.EXIT_OK, err
    assert "Validation: float16 against float32" in out
    assert "data0=int32" in out and "data1=int32" in out and "data2=float32" in out, out
    assert _written(tmp_path) == ["out-0000.params", "out-symbol.json"]


def test_validates_on_random_inputs_from_input_specs(bert, tmp_path, capsys):
    code, out, err = run_convert([bert, "0", "--out", str(tmp_path / "out"), "--validate", "4"]
                                 + SPECS, capsys)
    assert code == cli.EXIT_OK, err
    assert "Validation: float16 against float32" in out


@pytest.mark.parametrize("samples", ["npz", "specs"])
def test_the_report_gives_integer_inputs_their_dtype_without_validate(bert, npz, tmp_path,
                                                                       capsys, samples):
    given = ["--inputs", npz] if samples == "npz" else SPECS
    code, out, err = run_convert([bert, "0", "--out", str(tmp_path / "out")] + given, capsys)
    assert code == cli.EXIT_OK, err
    inputs = [line for line in out.splitlines() if line.startswith("inputs: ")]
    assert inputs == ["inputs: data0=int32, data1=int32, data2=float32"], out


@pytest.mark.parametrize("args, says", [
    (["--input", "data0:8:int32:50", "--input", "data1:8:int32:2", "--input", "dat2::float32"],
     "no data input named 'dat2' (did you mean 'data2'?); the graph's data inputs are "
     "data0, data1, data2"),
    (["--input", "data0:8:int32:50", "--input", "data1:8:int32:2"],
     "no samples for data2; the graph's data inputs are data0, data1, data2"),
    (["--input", "data0:8:int32:50", "--input", "data1:8:int32:2", "--input", "data2::int32:8"],
     "the graph does not take these input dtypes (data0 int32, data1 int32, data2 int32)"),
    (["--input", "data0:8:int32"], "an integer input needs HIGH"),
], ids=["wrong-name", "missing", "wrong-dtype", "no-high"])
def test_a_wrong_input_is_one_line_exit_2_nothing_written(bert, tmp_path, capsys, args, says):
    code, out, err = run_convert([bert, "0", "--out", str(tmp_path / "out"), "--validate", "4"]
                                 + args, capsys)
    assert code == cli.EXIT_USAGE, err
    line, = err.strip().splitlines()
    assert says in line, line
    assert "Traceback" not in err and not out.strip()
    assert _written(tmp_path) == []


def test_a_npz_with_a_wrong_name_names_the_graphs_inputs(bert, tmp_path, capsys):
    path = str(tmp_path / "bad.npz")
    arrays = _inputs(4)
    np.savez(path, data0=arrays["data0"], data1=arrays["data1"], length=arrays["data2"])
    code, _, err = run_convert([bert, "0", "--out", str(tmp_path / "out"), "--validate", "4",
                                "--inputs", path], capsys)
    assert code == cli.EXIT_USAGE
    line, = err.strip().splitlines()
    assert "no data input named 'length'" in line and "data0, data1, data2" in line, line


def _declared_npz(path, arrays, header_only=()):
    """A .npz whose members ``header_only`` declare their shape but hold no data."""
    import io
    import zipfile

    with zipfile.ZipFile(path, "w") as archive:
        for name, value in arrays.items():
            buffer = io.BytesIO()
            if name in header_only:
                np.lib.format.write_array_header_1_0(buffer, {
                    "descr": np.lib.format.dtype_to_descr(value.dtype),
                    "fortran_order": False, "shape": value.shape})
            else:
                np.lib.format.write_array(buffer, value, allow_pickle=True)
            archive.writestr(name + ".npy", buffer.getvalue())


def _refusal(bert, tmp_path, capsys, path):
    code, out, err = run_convert([bert, "0", "--out", str(tmp_path / "out"), "--validate", "4",
                                  "--inputs", path], capsys)
    assert code == cli.EXIT_USAGE, err
    assert "Traceback" not in err and not out.strip() and _written(tmp_path) == []
    line, = err.strip().splitlines()
    return line


def test_a_npz_with_a_pickled_array_is_refused_unread(bert, tmp_path, capsys):
    path = str(tmp_path / "pickled.npz")
    _declared_npz(path, dict(_inputs(4), data0=np.array([{"a": 1}] * 4, dtype=object)))
    assert "holds Python objects (a pickle), which are never loaded" in _refusal(
        bert, tmp_path, capsys, path)


def test_a_file_that_only_starts_like_a_zip_is_one_line(bert, tmp_path, capsys):
    path = str(tmp_path / "broken.npz")
    with open(path, "wb") as handle:
        handle.write(b"PK\x03\x04 and nothing a zip file holds")
    assert "as a NumPy .npz archive: File is not a zip file" in _refusal(
        bert, tmp_path, capsys, path)


def test_a_npz_whose_arrays_disagree_on_the_sample_count_is_refused(bert, tmp_path, capsys):
    path = str(tmp_path / "uneven.npz")
    arrays = _inputs(6)
    np.savez(path, **dict(arrays, data2=arrays["data2"][:5]))
    assert "different numbers of samples (data0 6, data1 6, data2 5)" in _refusal(
        bert, tmp_path, capsys, path)


def test_only_the_samples_used_are_read_from_a_npz(bert, tmp_path, capsys):
    path = str(tmp_path / "long.npz")
    stored = _inputs(6, seed=1)
    import io
    import zipfile
    with zipfile.ZipFile(path, "w") as archive:  # each array declares 2^28 rows, stores 6
        for name, value in stored.items():
            buffer = io.BytesIO()
            np.lib.format.write_array_header_1_0(buffer, {
                "descr": np.lib.format.dtype_to_descr(value.dtype), "fortran_order": False,
                "shape": (2 ** 28,) + value.shape[1:]})
            buffer.write(value.tobytes())
            archive.writestr(name + ".npy", buffer.getvalue())
    code, out, err = run_convert([bert, "0", "--out", str(tmp_path / "out"), "--validate", "4",
                                  "--inputs", path], capsys)
    assert code == cli.EXIT_OK, err
    assert "Validation: float16 against float32" in out


def test_named_samples_too_large_for_memory_are_refused_before_any_is_read(
        tmp_path, capsys, monkeypatch):
    from mxmixed.cli import _preflight
    a, b, w = mx.sym.var("a"), mx.sym.var("b"), mx.sym.var("w")
    prefix = str(tmp_path / "two")
    mx.model.save_checkpoint(prefix, 0, mx.sym.broadcast_mul(mx.sym.relu(a + b), w, name="out"),
                             {"w": mx.nd.ones((1, 1))}, {})
    path = str(tmp_path / "declared.npz")
    row = np.zeros((4, 2 ** 20), dtype=np.float32)
    _declared_npz(path, {"a": row, "b": row}, header_only={"a", "b"})  # declared, not stored
    monkeypatch.setattr(_preflight, "available_memory", lambda: 2 ** 20)  # 1 MiB
    line = _refusal(prefix, tmp_path, capsys, path)
    assert "4 samples of a 1048576, b 1048576" in line and "of memory" in line, line


def test_integer_inputs_are_never_cast(bert):
    # MXNet's AMP pass treats every data input as float32; the token ids feed Embedding (on
    # the float32 list), so no amp_cast reads them, and the settling types them as int32
    fp32 = symbolic.load_checkpoint(bert, 0)
    for kwargs in ({}, {"keep_io_types": False}, {"target_dtype": "bfloat16"}):
        model = symbolic.convert(*fp32, input_types={"data0": "int32", "data1": "int32"},
                                 **kwargs)
        assert model.report.input_dtypes["data0"] == "int32", kwargs
        assert model.report.input_dtypes["data1"] == "int32", kwargs
        graph = json.loads(model.symbol.tojson(remove_amp_cast=False))
        nodes = graph["nodes"]
        ids = {i for i, n in enumerate(nodes) if n["name"] in ("data0", "data1")}
        readers = {n["op"] for n in nodes if any(src in ids for src, _, _ in n["inputs"])}
        assert readers == {"Embedding"}, (kwargs, readers)
        for i in ids:
            assert nodes[i].get("attrs", {}).get("__dtype__") in (None, "4"), nodes[i]


def test_python_validate_and_search_take_a_dict(bert):
    fp32 = symbolic.load_checkpoint(bert, 0)
    inputs = _inputs(4)
    model = symbolic.convert(*fp32, calibration=inputs)
    assert model.report.input_dtypes["data0"] == "int32"
    check = symbolic.validate(fp32, model, inputs, batch_size=2, progress=False)
    assert check.samples == 4 and check.passes(1e-2), check
    search = symbolic.search_fp32_layers(*fp32, inputs, progress=False)
    assert search.error <= 1e-2
    with pytest.raises(symbolic.ConversionError, match="data0, data1, data2"):
        symbolic.validate(fp32, model, inputs["data0"], progress=False)
    with pytest.raises(symbolic.ConversionError, match="missing data2"):
        symbolic.validate(fp32, model, {k: inputs[k] for k in ("data0", "data1")},
                          progress=False)
    with pytest.raises(symbolic.ConversionError, match="same number of samples"):
        symbolic.validate(fp32, model, dict(inputs, data2=inputs["data2"][:3]), progress=False)


def test_onnx_export_validates_or_names_the_op(bert, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    code, out, err = run_convert([bert, "0", "--out", str(tmp_path / "out"), "--format", "onnx",
                                  "--validate", "4"] + SPECS, capsys)
    if code == cli.EXIT_OK:
        assert "inputs data0 int32, data1 int32, data2 float32" in out, out
        assert "onnxruntime" in out and _written(tmp_path) == ["out.onnx"]
    else:  # MXNet's exporter cannot write an op: one line that names it
        assert code == cli.EXIT_USAGE, err
        line, = err.strip().splitlines()
        assert "ONNX" in line, line


def test_python_onnx_validation_takes_a_dict(bert):
    pytest.importorskip("onnxruntime")
    fp32 = symbolic.load_checkpoint(bert, 0)
    types = {"data0": "int32", "data1": "int32"}
    model = symbolic.convert(*fp32, input_types=types)
    exported = symbolic.export_onnx(model, {"data0": (SEQ,), "data1": (SEQ,), "data2": ()},
                                    fp32, input_types=types)
    check = symbolic.validate_onnx(fp32, exported, _inputs(4), progress=False)
    assert check.passes(1e-2), check
    with pytest.raises(symbolic.ConversionError, match="data0, data1, data2"):
        symbolic.export_onnx(model, (SEQ,))
