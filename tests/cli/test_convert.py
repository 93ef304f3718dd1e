"""``mxmixed convert``: the converted checkpoint, the printed report, progress bars, and
one-line errors that leave no output file behind."""
import os
import re
import sys

import numpy as np
import pytest

import mxnet as mx
from mxnet.gluon import nn

from mxmixed import cli, symbolic
from mxmixed.tutorial import digits_arrays, digits_cnn, digits_loaders, evaluate, fit

from conftest import run_command

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """The digits CNN trained in float32 the notebooks' way (mxmixed.tutorial.fit), then exported."""
    folder = tmp_path_factory.mktemp("digits")
    train_loader, test_loader = digits_loaders(batch_size=64, seed=0)
    net = digits_cnn(seed=0, prefix="digits_")
    net.hybridize()
    result = fit(net, train_loader, test_loader, epochs=5, ctx=mx.cpu(), progress=False)
    prefix = str(folder / "digits")
    net.export(prefix)
    _, _, X_test, _ = digits_arrays(seed=0)
    np.save(str(folder / "test_images.npy"), X_test)
    return {"prefix": prefix, "accuracy": result["accuracy"], "test_loader": test_loader,
            "inputs": str(folder / "test_images.npy"), "folder": folder}


@pytest.fixture
def checkpoint(tmp_path):
    """A small valid float32 checkpoint (untrained digits CNN) in its own folder."""
    net = digits_cnn(seed=1, prefix="digits_")
    net.hybridize()
    net(mx.nd.zeros((1, 1, 8, 8)))
    prefix = str(tmp_path / "model")
    net.export(prefix)
    return prefix


def _run(argv, capsys):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _files(folder):
    return sorted(os.listdir(str(folder)))


# ------------------------------------------------------------------ acceptance
@pytest.mark.slow
def test_digits_classifier_converted_by_the_cli_keeps_its_accuracy(digits, tmp_path, capsys):
    out = str(tmp_path / "digits16")
    code, stdout, _ = _run(["convert", digits["prefix"], "0", "--out", out, "--validate", "64",
                            "--inputs", digits["inputs"]], capsys)
    assert code == 0
    net = symbolic.load_float16(out, 0, ctx=mx.cpu())
    accuracy16 = evaluate(net, digits["test_loader"], mx.cpu())
    assert digits["accuracy"] > 0.9
    assert abs(accuracy16 - digits["accuracy"]) <= 0.005
    saved = mx.nd.load(out + "-0000.params")
    assert saved["arg:digits_features_conv0_weight"].dtype == np.float16
    assert saved["arg:digits_features_batchnorm0_gamma"].dtype == np.float32


def test_convert_prints_the_report_and_the_validation(digits, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MXMIXED_PROGRESS", raising=False)
    code, stdout, err = _run(["convert", digits["prefix"], "0", "--out",
                              str(tmp_path / "digits16"), "--validate", "16", "--inputs",
                              digits["inputs"]], capsys)
    assert code == 0
    lines = stdout.splitlines()
    assert lines[0].startswith("Float16 conversion report")
    assert [line.split() for line in lines if line.startswith("Convolution")] == [
        ["Convolution", "2", "0"]]
    assert any(line.startswith("cast nodes inserted: 2") for line in lines)
    assert "Validation: float16 against float32" in stdout
    samples = [line.split() for line in lines if line.strip().startswith("samples")]
    assert samples == [["samples", "16"]]
    assert "validate float16" not in err  # no tqdm bars when stderr is not a terminal
    assert "wrote " in lines[-1]


@pytest.mark.slow
def test_python_dash_m_mxmixed_convert_writes_the_checkpoint(checkpoint, tmp_path):
    out = str(tmp_path / "out16")
    proc = run_command([sys.executable, "-m", "mxmixed", "convert", checkpoint, "0",
                        "--out", out, "--validate", "4", "--input-shape", "1,8,8"],
                       capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode == 0, proc.stderr
    assert "Float16 conversion report" in proc.stdout and "Validation" in proc.stdout
    assert os.path.isfile(out + "-symbol.json") and os.path.isfile(out + "-0000.params")


@pytest.mark.slow
def test_python_dash_m_mxmixed_convert_bad_input_is_one_line_without_traceback(tmp_path):
    proc = run_command([sys.executable, "-m", "mxmixed", "convert", str(tmp_path / "none"),
                        "0", "--out", str(tmp_path / "out")], capture_output=True,
                       text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "Traceback" not in proc.stderr and "does not exist" in proc.stderr
    assert _files(tmp_path) == []


def test_no_keep_io_types_writes_a_float16_input(checkpoint, tmp_path, capsys):
    out = str(tmp_path / "io16")
    code, stdout, _ = _run(["convert", checkpoint, "0", "--out", out, "--no-keep-io-types"],
                           capsys)
    assert code == 0
    assert "inputs: data=float16" in stdout
    net = symbolic.load_float16(out, 0, ctx=mx.cpu())
    assert net(mx.nd.zeros((2, 1, 8, 8), dtype="float16")).dtype == np.float16


def test_keep_optional_params_float32_is_mxnets_default(checkpoint, tmp_path, capsys):
    out = str(tmp_path / "fp32params")
    code, _, _ = _run(["convert", checkpoint, "0", "--out", out,
                       "--keep-optional-params-float32"], capsys)
    assert code == 0
    assert {v.dtype for v in mx.nd.load(out + "-0000.params").values()} == {np.float32}


def test_exclude_keeps_the_layer_float32_in_the_report(checkpoint, tmp_path, capsys):
    code, stdout, _ = _run(["convert", checkpoint, "0", "--out", str(tmp_path / "ex"),
                            "--exclude", "digits_output_fwd"], capsys)
    assert code == 0
    assert "1 kept float32: 1 excluded layer" in stdout.splitlines()[0]
    rows = [line.split(None, 3) for line in stdout.splitlines()
            if line.startswith("  excluded layer")]
    assert rows == [["excluded", "layer", "1", "digits_output_fwd"]]


class _OverflowNet(nn.HybridBlock):
    """One Dense (``net_big_fwd``, weights 2e4) overflows float16; a BatchNorm with moving
    variance 1e10 brings its outputs back to about 1 for the layers after it."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.first = nn.Dense(16, in_units=8, prefix="first_")
            self.big = nn.Dense(16, in_units=16, prefix="big_")
            self.norm = nn.BatchNorm(in_channels=16, prefix="norm_")
            self.mid = nn.Dense(16, activation="relu", in_units=16, prefix="mid_")
            self.out = nn.Dense(4, in_units=16, prefix="out_")

    def hybrid_forward(self, F, x):
        return self.out(self.mid(self.norm(self.big(F.relu(self.first(x))))))


def _overflow_checkpoint(tmp_path):
    mx.random.seed(0)
    net = _OverflowNet(prefix="net_")
    net.initialize(mx.init.Xavier())
    net.big.weight.set_data(mx.nd.full((16, 16), 2e4))
    net.norm.running_var.set_data(mx.nd.full((16,), 1e10))
    net.hybridize()
    X = np.random.RandomState(0).uniform(0.5, 1.0, size=(8, 8)).astype(np.float32)
    net(mx.nd.array(X))
    net.export(str(tmp_path / "overflow"))
    np.save(str(tmp_path / "x.npy"), X)
    return str(tmp_path / "overflow"), str(tmp_path / "x.npy")


def test_failed_validation_names_the_layer_that_overflowed(tmp_path, capsys):
    prefix, inputs = _overflow_checkpoint(tmp_path)
    code, _, err = _run(["convert", prefix, "0", "--out", str(tmp_path / "o16"), "--validate",
                         "8", "--inputs", inputs], capsys)
    assert code == 1
    line = err.strip().splitlines()[-1]
    assert "the first inf appears at layer 'net_big_fwd' (FullyConnected): --exclude "\
        "net_big_fwd keeps it float32" in line, err
    code, _, err = _run(["convert", prefix, "0", "--out", str(tmp_path / "o16"), "--validate",
                         "8", "--inputs", inputs, "--exclude", "net_big_fwd"], capsys)
    assert code == 0, err  # the fix it names works


def test_search_tolerance_finds_the_overflowing_layer(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MXMIXED_PROGRESS", raising=False)
    mx.random.seed(0)
    net = _OverflowNet(prefix="net_")
    net.initialize(mx.init.Xavier())
    net.big.weight.set_data(mx.nd.full((16, 16), 2e4))
    net.norm.running_var.set_data(mx.nd.full((16,), 1e10))
    net.hybridize()
    X = np.random.RandomState(0).uniform(0.5, 1.0, size=(8, 8)).astype(np.float32)
    assert net.big(mx.nd.relu(net.first(mx.nd.array(X)))).abs().max().asscalar() > 65504
    net(mx.nd.array(X))
    net.export(str(tmp_path / "overflow"))
    np.save(str(tmp_path / "x.npy"), X)
    code, stdout, err = _run(["convert", str(tmp_path / "overflow"), "0", "--out",
                              str(tmp_path / "overflow16"), "--search-tolerance", "0.01",
                              "--inputs", str(tmp_path / "x.npy")], capsys)
    assert code == 0
    assert "layers kept float32:   net_big_fwd" in stdout
    assert [line.split() for line in stdout.splitlines() if line.startswith("  search")] \
        == [["search", "1", "net_big_fwd"]]
    assert "search" not in err  # no tqdm bars when stderr is not a terminal
    net16 = symbolic.load_float16(str(tmp_path / "overflow16"), 0, ctx=mx.cpu())
    y16, y32 = net16(mx.nd.array(X)).asnumpy(), net(mx.nd.array(X)).asnumpy()
    assert np.abs(y16 - y32).max() / np.abs(y32).max() <= 0.01


# ------------------------------------------------------------------ bad input
def _corrupt(prefix, case, tmp_path):
    """Damage the checkpoint at ``prefix`` as ``case`` says; return the expected message."""
    sym_path, params_path = prefix + "-symbol.json", prefix + "-0000.params"
    if case == "missing symbol":
        os.remove(sym_path)
        return "symbol file .* does not exist"
    if case == "missing params":
        os.remove(params_path)
        return "params file .* does not exist"
    if case == "unreadable symbol":
        os.remove(sym_path)
        os.mkdir(sym_path)
        return "cannot read symbol file .*"
    if case == "invalid json":
        with open(sym_path, "w") as handle:
            handle.write("this is not JSON")
        return "is not valid JSON"
    if case == "truncated json":
        with open(sym_path) as handle:
            text = handle.read()
        with open(sym_path, "w") as handle:
            handle.write(text[:len(text) // 2])
        return "is not valid JSON \\(truncated\\?\\)"
    if case == "json but not a symbol":
        with open(sym_path, "w") as handle:
            handle.write('{"name": "model"}')
        return "JSON but not an MXNet symbol"
    if case == "truncated params":
        with open(params_path, "rb") as handle:
            data = handle.read()
        with open(params_path, "wb") as handle:
            handle.write(data[:len(data) // 2])
        return "params file .* cannot be loaded"
    if case == "params of another model":
        other = nn.Dense(3, in_units=2, prefix="other_")
        other.initialize()
        mx.nd.save(params_path, {"arg:" + k: v.data() for k, v in
                                 other.collect_params().items()})
        return "do not match the symbol: 2 name\\(s\\) not in the symbol"
    if case == "params of the wrong shape":
        params = mx.nd.load(params_path)
        params["arg:digits_hidden_weight"] = mx.nd.zeros((64, 100))
        mx.nd.save(params_path, params)
        return "'digits_hidden_weight' has shape \\(64, 100\\)"
    if case == "params missing a weight":
        params = mx.nd.load(params_path)
        del params["arg:digits_output_weight"]
        mx.nd.save(params_path, params)
        return "parameter\\(s\\) of the symbol missing \\(e.g. 'digits_output_weight'\\)"
    if case == "float64 params":
        params = {k: v.astype("float64") for k, v in mx.nd.load(params_path).items()}
        mx.nd.save(params_path, params)
        return "as float64, an unsupported dtype"
    raise AssertionError(case)


BAD_FILES = ["missing symbol", "missing params", "unreadable symbol", "invalid json",
             "truncated json", "json but not a symbol", "truncated params",
             "params of another model", "params of the wrong shape", "params missing a weight",
             "float64 params"]


@pytest.mark.parametrize("case", BAD_FILES)
def test_bad_checkpoint_is_a_one_line_error_and_writes_nothing(case, checkpoint, tmp_path,
                                                               capsys):
    pattern = _corrupt(checkpoint, case, tmp_path)
    before = _files(tmp_path)
    code, stdout, err = _run(["convert", checkpoint, "0", "--out", str(tmp_path / "out")],
                             capsys)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("mxmixed convert: error: ")
    assert re.search(pattern, err), err
    assert _files(tmp_path) == before
    assert stdout == ""


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root reads files whatever their permissions")
def test_unreadable_params_file_is_a_one_line_error(checkpoint, tmp_path, capsys):
    os.chmod(checkpoint + "-0000.params", 0)
    code, _, err = _run(["convert", checkpoint, "0", "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "cannot read params file" in err
    assert not os.path.exists(str(tmp_path / "out-symbol.json"))


@pytest.mark.parametrize("argv, message", [
    (["--dtype", "bfloat16", "--search-tolerance", "0.1", "--input-shape", "1,8,8"],
     "--search-tolerance searches float16 layers only"),
    (["--dtype", "bfloat16", "--no-keep-io-types"], "--no-keep-io-types is for float16 only"),
    (["--dtype", "int8"], "unsupported dtype 'int8'"),
    (["--exclude", "digits_outpt_fwd"], "no layer named 'digits_outpt_fwd'"),
    (["--exclude-op", "Convolutionn"], "unknown operator 'Convolutionn'"),
    (["--validate", "4"], "need samples: give --inputs"),
    (["--validate", "many"], "argument --validate: must be an integer, got 'many'"),
    (["--search-tolerance", "-1", "--input-shape", "1,8,8"], "must be a positive number"),
    (["--validate", "2", "--input-shape", "1,12,12"], "data shapes {'data': (1, 1, 12, 12)} "
                                                      "(batch axis first) do not fit the symbol"),
    (["--validate", "2", "--input-shape", "8,8"], "data shapes {'data': (1, 8, 8)} (batch axis "
                                                   "first) do not fit the symbol"),
    (["--validate", "2", "--input-shape", "one"], "argument --input-shape: must be positive "
                                                   "integers"),
    (["--validate", "2", "--input-shape", "3,x,224"], "argument --input-shape: must be positive "
                                                       "integers"),
    (["--validate", "2", "--input-shape", "0,8,8"], "every size must be at least 1"),
    (["--validate", "2", "--input-shape", "1,8,8", "--inputs", "x.npy"], "not allowed with"),
    (["--tolerance", "0"], "argument --tolerance: must be a positive number"),
])
def test_bad_option_is_a_one_line_error_and_writes_nothing(argv, message, checkpoint, tmp_path,
                                                           capsys):
    before = _files(tmp_path)
    code, _, err = _run(["convert", checkpoint, "0", "--out", str(tmp_path / "out")] + argv,
                        capsys)
    assert code == 2
    assert err.count("\n") == 1 and message in err
    assert _files(tmp_path) == before


@pytest.mark.parametrize("value", [np.nan, np.inf, 1e39])
def test_non_finite_samples_are_refused(checkpoint, tmp_path, capsys, value):
    X = np.random.RandomState(0).uniform(size=(4, 1, 8, 8))
    X[2, 0, 3, 3] = value  # 1e39 is finite as float64, inf as float32
    np.save(str(tmp_path / "x.npy"), X)
    code, _, err = _run(["convert", checkpoint, "0", "--out", str(tmp_path / "out"),
                         "--validate", "4", "--inputs", str(tmp_path / "x.npy")], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "1 of the 256 values used are inf or NaN" in err
    assert not os.path.exists(str(tmp_path / "out-symbol.json"))


@pytest.mark.parametrize("suffix", ["-symbol.json", "-0000.params"])
def test_a_file_name_as_prefix_suggests_the_prefix(checkpoint, tmp_path, capsys, suffix):
    code, _, err = _run(["convert", checkpoint + suffix, "0", "--out", str(tmp_path / "out")],
                        capsys)
    assert code == 2 and err.count("\n") == 1
    assert "did you mean %s?" % checkpoint in err


def test_bad_epoch_is_a_one_line_error(checkpoint, tmp_path, capsys):
    code, _, err = _run(["convert", checkpoint, "x", "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "argument EPOCH: must be an integer" in err and err.count("\n") == 1


def test_output_equal_to_the_input_is_refused(checkpoint, tmp_path, capsys, monkeypatch):
    before = {name: os.path.getmtime(str(tmp_path / name)) for name in _files(tmp_path)}
    monkeypatch.chdir(str(tmp_path))
    for out in (checkpoint, "./model", "model"):
        code, _, err = _run(["convert", checkpoint, "0", "--out", out], capsys)
        assert code == 2 and "would overwrite the input checkpoint" in err
    assert {name: os.path.getmtime(str(tmp_path / name)) for name in _files(tmp_path)} == before


def test_missing_output_folder_is_refused(checkpoint, tmp_path, capsys):
    code, _, err = _run(["convert", checkpoint, "0", "--out",
                         str(tmp_path / "no" / "such" / "out")], capsys)
    assert code == 2 and "output folder" in err and "does not exist" in err
    assert not os.path.exists(str(tmp_path / "no"))


def test_failure_while_writing_leaves_neither_file(checkpoint, tmp_path, capsys, monkeypatch):
    before = _files(tmp_path)

    def full_disk(*args, **kwargs):  # fsync reports ENOSPC where writes were delayed
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    code, stdout, err = _run(["convert", checkpoint, "0", "--out", str(tmp_path / "out")],
                             capsys)
    assert code == cli.EXIT_WRITE_FAILED == 3
    assert "cannot write the checkpoint" in err and "No space left on device" in err
    assert err.count("\n") == 1
    assert _files(tmp_path) == before
