"""mxmixed.tutorial.text: the standard-library docstring corpus, vocabulary, BPTT batches and LSTM LM."""
import abc
import inspect
import json
import types

import numpy as np
import pytest

import mxnet as mx
from mxnet import gluon

import mxmixed
from mxmixed.tutorial import text

from conftest import run_python

SMALL = ("json", "abc", "textwrap")


# ---------------------------------------------------------------- corpus
def test_docstrings_are_deterministic_and_order_free():
    first = text.stdlib_docstrings(SMALL)
    assert first == text.stdlib_docstrings(SMALL)
    assert first == text.stdlib_docstrings(("textwrap", "abc", "json", "abc"))
    assert first.startswith(inspect.getdoc(abc))
    assert len(first) > 5000


@pytest.mark.slow
def test_default_corpus_is_the_same_in_a_fresh_interpreter():
    # another process, another hash seed, other modules imported first
    code = ("import mxmixed.tutorial.text as t; print(t.corpus_fingerprint(t.stdlib_docstrings()), "
            "len(t.stdlib_docstrings()))")
    here = "%s %d" % (text.corpus_fingerprint(text.stdlib_docstrings()),
                      len(text.stdlib_docstrings()))
    proc = run_python(code, env={"PYTHONHASHSEED": "12345"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-2:] == here.split()


def test_default_module_list_is_sorted_and_unique():
    assert list(text.STDLIB_MODULES) == sorted(set(text.STDLIB_MODULES))


@pytest.mark.parametrize("modules, error", [
    ("json", TypeError), ([], ValueError), (["no_such_module_xyz"], ValueError),
    ([1], TypeError)])
def test_docstrings_bad_modules(modules, error):
    with pytest.raises(error):
        text.stdlib_docstrings(modules)


def test_docstrings_refuse_optimize_2(monkeypatch):
    # MXNet 1.9.1 itself fails to import under -OO (ndarray_doc joins None docstrings), so
    # the flag is faked here.
    monkeypatch.setattr(text.corpus, "sys", types.SimpleNamespace(flags=types.SimpleNamespace(
        optimize=2)))
    with pytest.raises(RuntimeError, match="-OO"):
        text.stdlib_docstrings(SMALL)


def test_fingerprint():
    assert text.corpus_fingerprint("abc") == text.corpus_fingerprint("abc")
    assert text.corpus_fingerprint("abc") != text.corpus_fingerprint("abd")
    assert len(text.corpus_fingerprint("")) == 16
    with pytest.raises(TypeError):
        text.corpus_fingerprint(b"abc")


def test_tokenize():
    assert text.tokenize("ab c\n", "char") == ["a", "b", " ", "c", "\n"]
    assert text.tokenize("Return x + y.\nDone", "word") == ["Return", "x", "+", "y", ".", "\n",
                                                            "Done"]
    with pytest.raises(ValueError, match="level"):
        text.tokenize("abc", "byte")
    with pytest.raises(TypeError):
        text.tokenize(["a"])


# ---------------------------------------------------------------- vocabulary
def test_vocabulary_order_padding_and_unknown():
    vocab = text.Vocabulary(list("aaabbc"), min_count=2, reserved_tokens=("<eos>",))
    assert vocab.idx_to_token[:4] == ["<unk>", "<eos>", "a", "b"]
    assert len(vocab) == 8 and vocab.idx_to_token[4:] == ["<pad1>", "<pad2>", "<pad3>", "<pad4>"]
    assert vocab["c"] == vocab.unknown_index == 0 and "c" not in vocab and "a" in vocab
    assert list(vocab.to_indices("a b c".split())) == [2, 3, 0]
    assert vocab.to_indices([]).dtype == np.int32
    assert len(text.Vocabulary(list("abc"), multiple_of=1)) == 4


def test_vocabulary_ties_are_stable():
    assert text.Vocabulary(list("bcab"), multiple_of=1).idx_to_token == ["<unk>", "b", "a", "c"]


def test_vocabulary_round_trip():
    tokens = text.tokenize(text.stdlib_docstrings(SMALL))
    vocab = text.Vocabulary(tokens)
    ids = vocab.to_indices(tokens)
    assert vocab.to_tokens(ids) == tokens
    assert vocab.to_tokens(mx.nd.array(ids[:10])) == tokens[:10]
    again = text.Vocabulary.from_dict(json.loads(json.dumps(vocab.to_dict())))
    assert again.idx_to_token == vocab.idx_to_token
    assert np.array_equal(again.to_indices(tokens), ids)


def test_vocabulary_bad_args():
    with pytest.raises(TypeError, match="tokenize"):
        text.Vocabulary("abc")
    with pytest.raises(ValueError, match="min_count"):
        text.Vocabulary(list("abc"), min_count=0)
    with pytest.raises(ValueError, match="multiple_of"):
        text.Vocabulary(list("abc"), multiple_of=0)
    with pytest.raises(ValueError, match="max_size"):
        text.Vocabulary(list("abc"), max_size=0)
    with pytest.raises(ValueError, match="reserved"):
        text.Vocabulary(list("abc"), reserved_tokens=("<unk>",))
    vocab = text.Vocabulary(list("abc"))
    with pytest.raises(IndexError, match="outside"):
        vocab.to_tokens([0, 8])
    with pytest.raises(IndexError):
        vocab.to_tokens([-1])
    with pytest.raises(TypeError):
        vocab.to_indices("abc")
    with pytest.raises(ValueError, match="Vocabulary state"):
        text.Vocabulary.from_dict({"idx_to_token": ["a"]})


def test_stdlib_corpus():
    corpus = text.stdlib_corpus(modules=SMALL, valid_fraction=0.1)
    assert corpus.fingerprint == text.corpus_fingerprint(corpus.text)
    assert len(corpus.train) + len(corpus.valid) == len(corpus.text)
    assert abs(len(corpus.valid) - 0.1 * len(corpus.text)) <= 1
    assert len(corpus.vocab) % 8 == 0
    assert corpus.train.dtype == np.int32 and corpus.train.max() < len(corpus.vocab)
    n = len(corpus.train)
    assert "".join(corpus.vocab.to_tokens(corpus.train[:200])) == \
        "".join(t if t in corpus.vocab else "<unk>" for t in corpus.text[:200])
    words = text.stdlib_corpus("word", min_count=1, modules=SMALL, valid_fraction=0.0)
    assert words.vocab.idx_to_token[1] == "<eos>" and len(words.valid) == 0
    assert "\n" not in words.vocab and n > len(words.train)
    with pytest.raises(ValueError, match="valid_fraction"):
        text.stdlib_corpus(modules=SMALL, valid_fraction=1.0)


# ---------------------------------------------------------------- batches
def test_batchify_columns_are_contiguous_streams():
    data = text.batchify(np.arange(23), 4)
    assert data.shape == (5, 4) and data.dtype == np.int32
    assert list(data[:, 0]) == [0, 1, 2, 3, 4] and list(data[:, 1]) == [5, 6, 7, 8, 9]


@pytest.mark.parametrize("indices, batch_size, error", [
    (np.arange(10), 0, ValueError), (np.arange(10), 2.0, ValueError),
    (np.arange(10), 6, ValueError), (np.zeros((2, 5), int), 2, ValueError),
    (np.linspace(0, 1, 10), 2, TypeError)])
def test_batchify_bad_args(indices, batch_size, error):
    with pytest.raises(error):
        text.batchify(indices, batch_size)


def test_bptt_batches_shapes_shift_and_continuity():
    batches = text.BPTTBatches(np.arange(1000), batch_size=8, seq_len=35)
    assert len(batches) == (125 - 1) // 35 == 3
    X, y = batches[0]
    assert X.shape == y.shape == (35, 8) and X.dtype == np.int32
    assert np.array_equal(X[1:], y[:-1])
    assert np.array_equal(batches[1][0][0], y[-1])
    assert np.array_equal(batches[-1][0], batches[2][0])
    assert len(list(batches)) == 3
    ragged = text.BPTTBatches(np.arange(1000), batch_size=8, seq_len=35, drop_last=False)
    assert len(ragged) == 4 and ragged[3][0].shape == (124 - 105, 8)


def test_bptt_batches_bad_args():
    with pytest.raises(ValueError, match="seq_len"):
        text.BPTTBatches(np.arange(100), 2, 0)
    with pytest.raises(ValueError, match="too few"):
        text.BPTTBatches(np.arange(100), 10, 35)
    batches = text.BPTTBatches(np.arange(100), 2, 5)
    with pytest.raises(IndexError):
        batches[len(batches)]
    with pytest.raises(TypeError):
        batches[1.0]


# ---------------------------------------------------------------- model
@pytest.mark.parametrize("hybridize", [False, True])
def test_lm_forward_shapes(hybridize):
    net = text.lstm_lm(24, seed=0, embed_size=16, hidden_size=32, num_layers=2)
    if hybridize:
        net.hybridize()
    X = mx.nd.array(np.random.RandomState(0).randint(0, 24, (7, 3)))
    logits, states = net(X, *net.begin_state(3))
    assert logits.shape == (7, 3, 24)
    assert [s.shape for s in states] == [(2, 3, 32), (2, 3, 32)]
    alone = net(X)  # zero states, the same cached graph
    assert isinstance(alone, mx.nd.NDArray)
    np.testing.assert_allclose(alone.asnumpy(), logits.asnumpy(), rtol=1e-6)


def test_lm_is_seeded():
    X = mx.nd.array(np.arange(12).reshape(4, 3) % 8)
    a = text.lstm_lm(8, seed=3, embed_size=8, hidden_size=8)(X).asnumpy()
    b = text.lstm_lm(8, seed=3, embed_size=8, hidden_size=8)(X).asnumpy()
    assert np.array_equal(a, b)


def test_lm_float16_under_amp():
    X = mx.nd.array(np.arange(12).reshape(4, 3) % 8)
    with mxmixed.amp_scope():
        net = text.lstm_lm(8, seed=0, embed_size=8, hidden_size=8)
        net.hybridize()
        logits, states = net(X, *net.begin_state(3))
        assert logits.dtype == np.float16 and states[0].dtype == np.float16


@pytest.mark.parametrize("kwargs", [dict(vocab_size=0), dict(vocab_size=8, hidden_size=2.5),
                                    dict(vocab_size=8, num_layers=0),
                                    dict(vocab_size=8, dropout=1.0)])
def test_lm_bad_args(kwargs):
    with pytest.raises(ValueError):
        text.LSTMLanguageModel(**kwargs)


def test_lm_bad_input_and_states():
    net = text.lstm_lm(8, embed_size=8, hidden_size=8)
    with pytest.raises(ValueError, match="T, N"):
        net(mx.nd.zeros((4,)))
    with pytest.raises(ValueError, match="2 states"):
        net(mx.nd.zeros((4, 2)), net.begin_state(2)[0])
    with pytest.raises(ValueError, match="batch_size"):
        net.begin_state(0)


def test_token_cross_entropy_matches_gluon():
    rng = np.random.RandomState(0)
    pred = mx.nd.array(rng.randn(5, 3, 8))
    label = mx.nd.array(rng.randint(0, 8, (5, 3)))
    ours = text.TokenCrossEntropyLoss()(pred, label)
    ref = gluon.loss.SoftmaxCrossEntropyLoss()(pred.reshape((-1, 8)), label.reshape((-1,)))
    assert ours.shape == (5, 3)
    np.testing.assert_allclose(ours.asnumpy().ravel(), ref.asnumpy(), rtol=1e-5)


# ---------------------------------------------------------------- training helper
@pytest.fixture(scope="module")
def tiny_batches():
    corpus = text.stdlib_corpus(modules=("json",))
    return corpus, text.BPTTBatches(corpus.train, batch_size=4, seq_len=8)


@pytest.mark.parametrize("mode", text.LM_MODES)
def test_train_language_model_runs_each_mode(mode, tiny_batches):
    corpus, batches = tiny_batches
    run = text.train_language_model(
        mode, lambda: text.lstm_lm(len(corpus.vocab), seed=0, embed_size=8, hidden_size=16),
        batches, steps=4, measure_every=2, progress=False)
    assert len(run["losses"]) == 4 and np.all(np.isfinite(run["losses"]))
    assert run["measured_steps"] == [0, 2, 3]
    for key in ("underflow_params", "underflow_activations"):
        assert len(run[key]) == 3 and all(0.0 <= v <= 1.0 for v in run[key])
    if mode == "float32":
        assert run["scales"] is None
    else:
        assert len(run["scales"]) == 4
        assert mxmixed.loss_scaler(run["trainer"]).dynamic == (mode == "float16-scaled")
    assert not mxmixed.amp_initialized()


def test_train_language_model_same_start(tiny_batches):
    corpus, batches = tiny_batches
    runs = [text.train_language_model(
        mode, lambda: text.lstm_lm(len(corpus.vocab), seed=0, embed_size=8, hidden_size=16),
        batches, steps=1, measure_every=None, progress=False) for mode in text.LM_MODES]
    first = [r["losses"][0] for r in runs]
    assert max(first) - min(first) < 1e-2   # same weights and window; float16 rounding only


def test_train_language_model_bad_args(tiny_batches):
    corpus, batches = tiny_batches

    def build():
        return text.lstm_lm(len(corpus.vocab), embed_size=8, hidden_size=8)

    with pytest.raises(ValueError, match="mode"):
        text.train_language_model("amp", build, batches, 1)
    with pytest.raises(TypeError, match="BPTTBatches"):
        text.train_language_model("float32", build, [(0, 0)], 1)
    with pytest.raises(ValueError, match="steps"):
        text.train_language_model("float32", build, batches, 0)
    with pytest.raises(ValueError, match="clip"):
        text.train_language_model("float32", build, batches, 1, clip=-1.0)
    with pytest.raises(ValueError, match="scaler"):
        text.train_language_model("float32", build, batches, 1, scaler=mxmixed.LossScaler())
    with pytest.raises(TypeError, match="LSTMLanguageModel"):
        text.train_language_model("float32", lambda: gluon.nn.Dense(2), batches, 1)
    assert not mxmixed.amp_initialized()
