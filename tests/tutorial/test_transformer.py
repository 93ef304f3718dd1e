"""mxmixed.tutorial.transformer: the BERT-style classifier of notebook 10 and its task."""
import json

import numpy as np
import pytest

import mxnet as mx
from mxnet import autograd, gluon

import mxmixed
from mxmixed import symbolic
from mxmixed.tutorial import text
from mxmixed.tutorial.transformer import (TransformerClassifier, TransformerEncoderLayer,
                                          module_windows, transformer_classifier)

SEQ, VOCAB = 8, 40


@pytest.fixture(scope="module")
def vocab():
    return text.Vocabulary(text.tokenize(text.stdlib_docstrings(("json", "csv")), "word"),
                           min_count=3)


def _tokens(n, seed=0):
    return np.random.RandomState(seed).randint(0, VOCAB, (n, SEQ)).astype(np.int32)


def test_windows_are_labelled_split_by_position_and_deterministic(vocab):
    X_train, y_train, X_test, y_test = module_windows(("json", "csv"), vocab, seq_len=8)
    assert X_train.dtype == X_test.dtype == np.int32 and y_train.dtype == np.float32
    assert X_train.shape[1] == X_test.shape[1] == 8
    assert set(y_train) == set(y_test) == {0.0, 1.0}
    # the test windows of a module are the tail of its text, after its training windows
    words = ["<eos>" if w == "\n" else w
             for w in text.tokenize(text.stdlib_docstrings(("json",)), "word")]
    ids = vocab.to_indices(words)
    n_train = int((y_train == 0).sum())
    np.testing.assert_array_equal(X_train[0], ids[:8])
    np.testing.assert_array_equal(X_test[0], ids[8 * n_train:8 * n_train + 8])
    again = module_windows(("json", "csv"), vocab, seq_len=8)
    assert all(np.array_equal(a, b) for a, b in zip(again, (X_train, y_train, X_test, y_test)))


@pytest.mark.parametrize("kwargs, error", [
    (dict(modules=("json",)), ValueError), (dict(modules="json"), ValueError),
    (dict(modules=("json", "json")), ValueError), (dict(seq_len=0), ValueError),
    (dict(test_fraction=1.0), ValueError), (dict(vocab=["a"]), TypeError),
    (dict(seq_len=100000), ValueError)])
def test_windows_refuse_bad_arguments(vocab, kwargs, error):
    args = dict(modules=("json", "csv"), vocab=vocab, seq_len=8)
    args.update(kwargs)
    with pytest.raises(error):
        module_windows(**args)


def test_classifier_shapes_seed_and_bad_inputs():
    net = transformer_classifier(VOCAB, SEQ, seed=0, num_classes=3)
    out = net(mx.nd.array(_tokens(4), dtype="int32"))
    assert out.shape == (4, 3) and out.dtype == np.float32
    again = transformer_classifier(VOCAB, SEQ, seed=0, num_classes=3)
    np.testing.assert_array_equal(out.asnumpy(),
                                  again(mx.nd.array(_tokens(4), dtype="int32")).asnumpy())
    with pytest.raises(ValueError, match=r"\(N, 8\)"):
        net(mx.nd.array(np.zeros((4, SEQ + 1)), dtype="int32"))
    with pytest.raises(ValueError, match="multiple of num_heads"):
        TransformerEncoderLayer(units=30, num_heads=4)
    with pytest.raises(ValueError):
        TransformerClassifier(VOCAB, 0)


def test_attention_layer_matches_numpy():
    # the interleaved GEMMs: per head, queries/keys/values are consecutive blocks of the
    # projection; scores scaled by 1/sqrt(head size), softmax over the keys
    layer = TransformerEncoderLayer(units=8, hidden_size=16, num_heads=2)
    mx.random.seed(1)
    layer.initialize(mx.init.Normal(0.5))
    x = np.random.RandomState(2).randn(5, 3, 8).astype(np.float32)  # (T, N, C)
    qkv = layer.qkv(mx.nd.array(x)).asnumpy().reshape(5, 3, 2, 3, 4)  # T, N, heads, qkv, d
    q, k, v = (qkv[:, :, :, i].transpose(1, 2, 0, 3) for i in range(3))  # N, heads, T, d
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(4)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    context = (weights @ v).transpose(2, 0, 1, 3).reshape(5, 3, 8)
    attended = layer.proj(mx.nd.array(context))
    expected = layer.norm2(layer.norm1(mx.nd.array(x) + attended) + layer.ffn2(
        mx.nd.LeakyReLU(layer.ffn1(layer.norm1(mx.nd.array(x) + attended)), act_type="gelu")))
    got = layer(mx.nd.array(x))
    np.testing.assert_allclose(got.asnumpy(), expected.asnumpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_trains_under_amp_and_converts_validates_exports(tmp_path):
    X = _tokens(64, seed=3)
    y = (X[:, 0] < VOCAB // 2).astype(np.float32)  # the first token decides
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    with mxmixed.amp_scope():
        net = transformer_classifier(VOCAB, SEQ, seed=0)
        net.hybridize()
        trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 3e-3},
                                update_on_kvstore=False)
        scaler = mxmixed.init_trainer(trainer)
        losses = []
        for _ in range(40):
            with autograd.record():
                out = net(mx.nd.array(X, dtype="int32"))
                loss = loss_fn(out, mx.nd.array(y))
                with mxmixed.scale_loss(loss, trainer) as scaled:
                    scaled.backward()
            mxmixed.step(trainer, len(X))
            losses.append(float(loss.mean().asscalar()))
    assert out.dtype == np.float16 and scaler.skipped_steps > 0
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])
    prefix = str(tmp_path / "transformer")
    net.save_parameters(prefix + ".params")
    net32 = transformer_classifier(VOCAB, SEQ)
    net32.load_parameters(prefix + ".params")
    net32.hybridize()
    net32(mx.nd.array(X[:2], dtype="int32"))
    net32.export(prefix)
    fp32 = symbolic.load_checkpoint(prefix, 0)
    model = symbolic.convert(*fp32, input_types={"data": "int32"})
    assert model.report.input_dtypes["data"] == "int32"
    graph = json.loads(model.symbol.tojson(remove_amp_cast=False))
    qk = [n for n in graph["nodes"] if n["op"] == "_contrib_interleaved_matmul_selfatt_qk"]
    assert len(qk) == 2
    check = symbolic.validate(fp32, model, {"data": X}, progress=False)
    assert check.passes(1e-2) and check.top1_agreement > 0.95, check
    pytest.importorskip("onnxruntime")
    exported = symbolic.export_onnx(model, {"data": (SEQ,)}, fp32, input_types={"data": "int32"})
    assert symbolic.validate_onnx(fp32, exported, {"data": X}, progress=False).passes(1e-2)
