"""GluonNLP 0.10.0's families through ``mxmixed convert``, at tiny sizes: time-major language
models with their states as inputs and outputs, the convolutional encoder over time, Highway
(ONNX at the opset onnxruntime loads), fastText's dense embedding product (nothing converts to
bfloat16), and the batch axes that calibration and validation split and join along."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

from conftest import run_convert
from mxmixed import symbolic
from mxmixed.symbolic._batch import batch_axes
from mxmixed.symbolic._inference import inference_graph

nlp = pytest.importorskip("gluonnlp")

T, N, VOCAB, HIDDEN = 6, 3, 40, 8


class _WithStates(gluon.HybridBlock):
    """A language model whose begin states are data inputs and whose states are outputs."""

    def __init__(self, lm):
        super().__init__()
        with self.name_scope():
            self.lm = lm

    def hybrid_forward(self, F, x, h, c):
        out, states = self.lm(x, [h, c])
        return [out] + list(states)


def _export(net, inputs, prefix):
    net.hybridize()
    net(*[mx.nd.array(v, dtype=v.dtype) for v in inputs])
    net.export(prefix)
    names = ["data"] if len(inputs) == 1 else ["data%d" % i for i in range(len(inputs))]
    np.savez(prefix + "-inputs.npz", **dict(zip(names, inputs)))
    return prefix


def _lm():
    vocab = nlp.Vocab(nlp.data.count_tokens(["w%d" % i for i in range(VOCAB - 4)]))
    mx.random.seed(0)
    lm = nlp.model.language_model.StandardRNN("lstm", len(vocab), HIDDEN, HIDDEN, 1,
                                              dropout=0.0, tie_weights=True)
    lm.initialize(mx.init.Xavier())
    return lm


@pytest.fixture(scope="module")
def lm_states(tmp_path_factory):
    """A tiny standard LSTM LM: ids (T, N), states (1, N, HIDDEN) in and out."""
    rng = np.random.RandomState(0)
    inputs = [rng.randint(1, VOCAB - 4, (T, N)).astype(np.int32),
              np.zeros((1, N, HIDDEN), np.float32), np.zeros((1, N, HIDDEN), np.float32)]
    return _export(_WithStates(_lm()), inputs, str(tmp_path_factory.mktemp("lm") / "lm"))


def _load(prefix):
    sym, args, auxs = mx.model.load_checkpoint(prefix, 0)
    data = np.load(prefix + "-inputs.npz")
    return (sym, args, auxs), {k: data[k] for k in data.files}


def test_batch_axes_of_a_time_major_lm_with_states_are_its_second(lm_states):
    (sym, _, _), inputs = _load(lm_states)
    axes = batch_axes(inference_graph(sym), {k: v.shape for k, v in inputs.items()})
    assert axes.inputs == {"data0": 1, "data1": 1, "data2": 1}
    assert axes.outputs == (1, 1, 1)


def test_float16_calibration_and_validation_keep_the_states_shape(lm_states):
    model32, inputs = _load(lm_states)
    converted = symbolic.convert(*model32, calibration=inputs, batch_size=1)
    ref = converted.calibration_outputs
    assert [r.shape for r in ref] == [(T, N, VOCAB), (1, N, HIDDEN), (1, N, HIDDEN)]
    check = symbolic.validate(None, converted, inputs, batch_size=2, progress=False,
                              reference=ref)
    assert check.samples == N and check.target_dtype == "float16"
    assert check.passes(0.01), check


def test_cli_validates_the_lm_with_states_in_float16(lm_states, tmp_path, capsys):
    code, out, err = run_convert([lm_states, "0", "--out", str(tmp_path / "lm16"), "--validate",
                                  str(N), "--inputs", lm_states + "-inputs.npz",
                                  "--batch-size", "2"], capsys)
    assert code == 0, err
    assert "Validation: float16 against float32" in out and "samples             %d" % N in out


def _dot_model(prefix):
    """fastText's inference: a dense bag of word and subword weights times the embedding."""
    x = mx.sym.var("data")
    w = mx.sym.var("embedding_weight")
    sym = mx.sym.dot(x, w)
    args = {"embedding_weight": mx.nd.array(np.random.RandomState(0).randn(30, 4))}
    return sym, args, {}


def test_a_bfloat16_conversion_that_converts_nothing_is_refused_with_the_reason():
    sym, args, auxs = _dot_model(None)
    with pytest.raises(symbolic.ConversionError,
                       match="nothing converts to bfloat16: all 1 layers stay float32 "
                             r"\(dot: no bfloat16 kernel"):
        symbolic.convert(sym, args, auxs, target_dtype="bfloat16")


def test_load_bfloat16_names_a_float32_file_as_float32(tmp_path):
    if not mxmixed_bfloat16_runs():
        pytest.skip("this CPU cannot run bfloat16")
    sym, args, auxs = _dot_model(None)
    prefix = str(tmp_path / "f32")
    mx.model.save_checkpoint(prefix, 0, sym, args, auxs)
    with pytest.raises(symbolic.ConversionError, match="is a float32 model, not a bfloat16 one"):
        symbolic.load_bfloat16(prefix, 0)


def mxmixed_bfloat16_runs():
    from mxmixed import bfloat16_support
    return bfloat16_support()[0]


@pytest.mark.slow
def test_time_major_convolutional_encoder_passes_the_memory_check_and_validates(tmp_path,
                                                                              capsys):
    """--validate 20 --batch-size 20 was refused: the pre-check inferred at batch 1, one time
    step, which a convolution over 2 steps refuses."""
    mx.random.seed(0)
    net = nlp.model.ConvolutionalEncoder(embed_size=4, num_filters=(4, 4),
                                         ngram_filter_sizes=(2, 3), output_size=None)
    net.initialize(mx.init.Xavier())
    x = np.random.RandomState(0).randn(T, 20, 4).astype(np.float32)
    prefix = _export(net, [x], str(tmp_path / "conv"))
    code, out, err = run_convert([prefix, "0", "--out", str(tmp_path / "conv16"), "--validate",
                                  "20", "--batch-size", "20", "--inputs",
                                  prefix + "-inputs.npz"], capsys)
    assert code == 0, err
    assert "samples             20" in out


@pytest.mark.slow
def test_highway_exports_to_onnx_at_an_opset_onnxruntime_loads(tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    mx.random.seed(0)
    net = nlp.model.Highway(8, num_layers=2)
    net.initialize(mx.init.Xavier())
    x = np.random.RandomState(0).randn(4, 8).astype(np.float32)
    prefix = _export(net, [x], str(tmp_path / "highway"))
    code, out, err = run_convert([prefix, "0", "--out", str(tmp_path / "hw16"), "--format",
                                  "onnx", "--validate", "4", "--inputs", prefix + "-inputs.npz"],
                                 capsys)
    assert code == 0, err
    assert "ONNX: opset 17" in out


class _Loop(gluon.HybridBlock):
    """A Dense, then a recurrence written with ``foreach`` (as ELMo's BiLM encoder is): a
    FullyConnected inside the loop's subgraph."""

    def __init__(self):
        super().__init__()
        with self.name_scope():
            self.dense = gluon.nn.Dense(HIDDEN, flatten=False)
            self.w = self.params.get("cell_weight", shape=(HIDDEN, HIDDEN))

    def hybrid_forward(self, F, x, w):
        h = self.dense(x)

        def body(step, states):
            new = F.FullyConnected(step, w, num_hidden=HIDDEN, no_bias=True) + states[0]
            return new, [new]

        first = F.zeros_like(F.slice_axis(h, axis=0, begin=0, end=1)).reshape((-3, 0))
        out, _ = F.contrib.foreach(body, h, [first])
        return out


def test_a_foreach_subgraph_is_kept_float32_with_its_reason_and_validates(tmp_path):
    """MXNet's AMP pass converted inside the loop (ELMo: 'Incompatible attr', here a float16
    FullyConnected inside the subgraph that no CPU kernel runs)."""
    mx.random.seed(0)
    net = _Loop()
    net.initialize(mx.init.Xavier())
    x = np.random.RandomState(0).randn(T, N, 4).astype(np.float32)
    model32 = _load(_export(net, [x], str(tmp_path / "loop")))[0]
    converted = symbolic.convert(*model32)
    kept = {name: reason for name, op, reason in converted.report.fp32_layers
            if op == "_foreach"}
    assert list(kept.values()) == ["control flow"]
    assert any("control-flow op(s) kept float32" in note for note in converted.report.notes)
    assert converted.report.count("FullyConnected", "float16") == 1
    check = symbolic.validate(model32, converted, x, progress=False)
    assert check.passes(0.01), check


@pytest.mark.slow
def test_lm_with_states_exports_to_onnx_with_its_batch_axis_and_validates(lm_states, tmp_path,
                                                                         capsys):
    """The exporter was given (1, T) ids and (1, 1, HIDDEN) states: the batch axis put first."""
    pytest.importorskip("onnxruntime")
    code, out, err = run_convert([lm_states, "0", "--out", str(tmp_path / "lm16"), "--format",
                                  "onnx", "--validate", str(N), "--inputs",
                                  lm_states + "-inputs.npz"], capsys)
    assert code == 0, err
    assert "ONNX: opset 17" in out and "samples             %d" % N in out


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    """A tiny Transformer decoder (1 layer, 2 heads, 16 units); the memory of sample 1 is
    fully padded (its memory mask all 0)."""
    mx.random.seed(0)
    _, dec, _ = nlp.model.transformer.get_transformer_encoder_decoder(
        num_layers=1, num_heads=2, units=16, hidden_size=32, dropout=0.0)
    dec.initialize(mx.init.Xavier())

    class Decode(gluon.HybridBlock):
        def __init__(self, dec):
            super().__init__()
            with self.name_scope():
                self.dec = dec

        def hybrid_forward(self, F, x, mem, mem_mask, valid_length):
            return self.dec(x, [mem, mem_mask], valid_length)[0]

    rng = np.random.RandomState(0)
    mem_mask = np.ones((N, T), np.float32)
    mem_mask[1] = 0
    inputs = [rng.randn(N, T, 16).astype(np.float32), rng.randn(N, T, 16).astype(np.float32),
              mem_mask, np.full((N,), T, np.float32)]
    return _export(Decode(dec), inputs, str(tmp_path_factory.mktemp("dec") / "dec"))


def test_the_attention_mask_constant_stays_float32_and_padded_rows_stay_finite(decoder):
    """-1e18 * ones_like(score) was inf in float16, and the softmax of a fully masked row
    NaN."""
    model32, inputs = _load(decoder)
    converted = symbolic.convert(*model32)
    kept = [(op, reason) for _, op, reason in converted.report.fp32_layers
            if reason == "constant beyond float16"]
    assert kept and all(op == "_mul_scalar" for op, _ in kept)
    assert any("_mul_scalar -1e+18" in note for note in converted.report.notes)
    check = symbolic.validate(model32, converted, inputs, progress=False)
    assert check.nonfinite_share == 0.0 and check.passes(0.01), check


@pytest.fixture(scope="module")
def lm_big_vocab(tmp_path_factory):
    """A tiny LSTM LM whose tied embedding (2000 x 8) is most of its params."""
    vocab = nlp.Vocab(nlp.data.count_tokens(["w%d" % i for i in range(1996)]))
    mx.random.seed(0)
    lm = nlp.model.language_model.StandardRNN("lstm", len(vocab), HIDDEN, HIDDEN, 1,
                                              dropout=0.0, tie_weights=True)
    lm.initialize(mx.init.Xavier())

    class Logits(gluon.HybridBlock):
        def __init__(self, lm):
            super().__init__()
            with self.name_scope():
                self.lm = lm

        def hybrid_forward(self, F, x):
            return self.lm(x)[0]

    x = np.random.RandomState(0).randint(1, 1996, (T, N)).astype(np.int32)
    return _export(Logits(lm), [x], str(tmp_path_factory.mktemp("lmv") / "lm"))


def test_a_tied_embedding_is_stored_once_in_float16_and_the_file_halves(lm_big_vocab):
    """The output layer reads the embedding's weight: MXNet's pass refused the float16 output
    layer and the weight stayed float32 (the float16 file was 100% of float32)."""
    model32, inputs = _load(lm_big_vocab)
    converted = symbolic.convert(*model32)
    weight = [n for n in model32[1] if n.endswith("embedding0_weight")]
    assert weight and converted.arg_params[weight[0]].dtype == np.float16
    assert not [n for n in converted.arg_params if "_tied_" in n]
    assert not [n for n in converted.symbol.list_inputs() if "_tied_" in n]
    assert converted.report.size_ratio <= 0.51
    assert converted.report.count("FullyConnected", "float16") == 1
    assert any("tied weights" in note for note in converted.report.notes)
    check = symbolic.validate(model32, converted, inputs["data"], progress=False)
    assert check.passes(0.01), check


def test_a_concat_of_weights_is_stored_in_float16(lm_states):
    """An RNN's flat params are a concat of its weights, computed on every call in float32:
    folded once into one param, stored float16."""
    model32, _ = _load(lm_states)
    converted = symbolic.convert(*model32)
    assert converted.report.param_bytes_after.get("float32", 0) == 0
    assert any("computed once" in note for note in converted.report.notes)


def test_a_time_major_npy_is_read_along_its_batch_axis(lm_big_vocab, tmp_path, capsys):
    """(T, N) token ids in one .npy: the samples are its columns, not its first rows (the
    first 3 rows would have been 3 time steps of every sequence)."""
    ids = np.load(lm_big_vocab + "-inputs.npz")["data"]
    path = str(tmp_path / "ids.npy")
    np.save(path, ids)
    code, out, err = run_convert([lm_big_vocab, "0", "--out", str(tmp_path / "lm16"),
                                  "--validate", str(N), "--inputs", path], capsys)
    assert code == 0, err
    assert "samples             %d" % N in out and "data=int32" in out
    code, _, err = run_convert([lm_big_vocab, "0", "--out", str(tmp_path / "lm16b"),
                                "--validate", str(N + 1), "--inputs", path], capsys)
    assert code == 2 and "along its batch axis 1" in err


def test_time_major_ids_beyond_int32_are_refused_not_wrapped(lm_big_vocab, tmp_path, capsys):
    """int64 token ids past int32's range in a time-major .npy: one line, as in a .npz, where
    a cast to int32 would have wrapped them to other (valid-looking) ids."""
    ids = np.load(lm_big_vocab + "-inputs.npz")["data"].astype(np.int64)
    ids[0, 0] = 2 ** 32 + 5
    path = str(tmp_path / "ids.npy")
    np.save(path, ids)
    code, _, err = run_convert([lm_big_vocab, "0", "--out", str(tmp_path / "lm16"),
                                "--validate", str(N), "--inputs", path], capsys)
    assert code == 2 and "holds integers beyond int32" in err, err
    assert not (tmp_path / "lm16-symbol.json").exists()


def test_a_float16_conversion_that_converts_nothing_says_so_in_a_warning():
    x = mx.sym.var("data")
    sym = mx.sym.relu(x * 2.0 + 1.0)
    converted = symbolic.convert(sym, {}, {})
    assert any(note.startswith("warning: nothing converts to float16: all 3 layers stay "
                               "float32") for note in converted.report.notes)
