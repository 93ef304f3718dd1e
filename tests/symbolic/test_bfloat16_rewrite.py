"""The float32 rewrites of a bfloat16 conversion (``symbolic/_rewrite.py``) compute what the
graph computed: a masked softmax as a SequenceMask and a plain softmax, params-only values
folded into params. Checked against MXNet's own float32 results on small graphs."""
import mxnet as mx
import numpy as np

from mxmixed._core.graph import as_graph
from mxmixed.symbolic._rewrite import fold_constants, mask_softmax


def _run(sym, arrays):
    executor = sym.bind(mx.cpu(), {k: mx.nd.array(v, dtype=v.dtype) for k, v in arrays.items()},
                        grad_req="null")
    return executor.forward(is_train=False)[0].asnumpy()


def test_masked_softmax_becomes_a_plain_softmax_with_the_same_values():
    x, length = mx.sym.var("x"), mx.sym.var("length")
    sym = mx.sym.softmax(x, length, axis=-1, use_length=True, name="att")
    rng = np.random.RandomState(0)
    arrays = {"x": rng.normal(0, 3, (2, 3, 7)).astype(np.float32),
              "length": rng.randint(1, 8, (2, 3)).astype(np.int32)}
    graph, rewritten = mask_softmax(sym)
    assert rewritten == ["att"]
    assert all(n.attrs.get("use_length") is None for n in graph.nodes if n.op == "softmax")
    want, got = _run(sym, arrays), _run(graph.to_symbol(), arrays)
    past = np.arange(7) >= arrays["length"][..., None]
    assert (got[past] == 0).all()  # exp(-1e30 - max) is exactly 0 in float32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_softmax_without_length_or_on_another_axis_is_left_alone():
    x, length = mx.sym.var("x"), mx.sym.var("length")
    plain = mx.sym.softmax(x, axis=-1)
    other_axis = mx.sym.softmax(x, length, axis=1, use_length=True)
    for sym in (plain, other_axis):
        graph = as_graph(sym)
        assert mask_softmax(graph) == (graph, [])


def _fc_on_concat():
    data, w1, w2 = mx.sym.var("data"), mx.sym.var("w1"), mx.sym.var("w2")
    weight = mx.sym.reshape(mx.sym.concat(w1, w2, dim=0, name="qk"), shape=(-1, 4), name="flat")
    return mx.sym.FullyConnected(data, weight, no_bias=True, num_hidden=6, name="fc")


def test_a_value_of_params_alone_is_computed_once_and_stored():
    rng = np.random.RandomState(0)
    args = {"w1": mx.nd.array(rng.normal(size=(3, 4))), "w2": mx.nd.array(rng.normal(size=(3, 4)))}
    sym = _fc_on_concat()
    graph, new_args, auxs, folded = fold_constants(sym, args, {})
    assert folded == ["flat"]
    assert [n.op for n in graph.nodes if not n.is_variable] == ["FullyConnected"]
    assert sorted(new_args) == ["flat_folded"] and auxs == {}
    data = rng.normal(size=(2, 4)).astype(np.float32)
    want = _run(sym, dict(data=data, **{k: v.asnumpy() for k, v in args.items()}))
    got = _run(graph.to_symbol(), dict(data=data, flat_folded=new_args["flat_folded"].asnumpy()))
    np.testing.assert_array_equal(got, want)


def test_values_that_read_data_grow_or_draw_at_random_are_not_folded():
    data, bias = mx.sym.var("data"), mx.sym.var("bias")
    grown = mx.sym.broadcast_to(bias, shape=(64, 4))  # bigger than the param it is made of
    noise = mx.sym.random.uniform(shape=(64, 4))       # no inputs: a draw, not a constant
    sym = mx.sym.elemwise_add(data + bias, grown) + noise
    graph = as_graph(sym)
    result = fold_constants(graph, {"bias": mx.nd.ones((1, 4))}, {})
    assert result[0] is graph and result[3] == []


def test_a_value_left_unfolded_still_feeds_the_graph_beside_a_folded_one():
    data, w, bias = mx.sym.var("data"), mx.sym.var("w"), mx.sym.var("bias")
    weight = mx.sym.reshape(w, shape=(4, 4), name="flat")
    grown = mx.sym.broadcast_to(bias, shape=(2, 4), name="grown")
    sym = mx.sym.FullyConnected(data, weight, no_bias=True, num_hidden=4) + grown
    rng = np.random.RandomState(1)
    arrays = {"data": rng.normal(size=(2, 4)).astype(np.float32),
              "w": rng.normal(size=(16,)).astype(np.float32),
              "bias": rng.normal(size=(1, 4)).astype(np.float32)}
    params = {k: mx.nd.array(arrays[k]) for k in ("w", "bias")}
    graph, args, _, folded = fold_constants(sym, params, {})
    assert folded == ["flat"] and sorted(args) == ["bias", "flat_folded"]
    assert "broadcast_to" in [n.op for n in graph.nodes]
    got = _run(graph.to_symbol(), {"data": arrays["data"], "bias": arrays["bias"],
                                   "flat_folded": args["flat_folded"].asnumpy()})
    np.testing.assert_array_equal(got, _run(sym, arrays))


def _self_attention_softmax(qkv, valid, name):
    """gluonnlp's masked self-attention scores and softmax: 2 heads, sequence 5, each batch
    row's length repeated for every head and query, computed anew for each call."""
    scores = mx.sym.contrib.interleaved_matmul_selfatt_qk(qkv, heads=2)
    rows = mx.sym.broadcast_axis(mx.sym.reshape(valid, shape=(-1, 1)), axis=1, size=5)
    length = mx.sym.reshape(mx.sym.broadcast_axis(mx.sym.expand_dims(rows, axis=1), axis=1,
                                                  size=2), shape=(-1, 0), reverse=True)
    return mx.sym.softmax(scores, length.astype("int32"), axis=-1, use_length=True, name=name)


def test_self_attention_layers_with_the_same_lengths_share_one_mask():
    valid, other = mx.sym.var("valid"), mx.sym.var("other")
    q1, q2, q3 = (mx.sym.var("qkv%d" % k) for k in (1, 2, 3))
    sym = mx.sym.Group([_self_attention_softmax(q1, valid, "a1"),
                        _self_attention_softmax(q2, valid, "a2"),
                        _self_attention_softmax(q3, other, "a3")])
    rng = np.random.RandomState(0)
    arrays = {"qkv%d" % k: rng.normal(0, 2, (5, 3, 12)).astype(np.float32) for k in (1, 2, 3)}
    arrays.update(valid=np.array([5, 2, 1], np.float32), other=np.array([3, 4, 5], np.float32))
    graph, rewritten = mask_softmax(sym)
    assert rewritten == ["a1", "a2", "a3"]
    assert [n.op for n in graph.nodes].count("SequenceMask") == 2  # a1 and a2 share theirs
    executor = graph.to_symbol().bind(mx.cpu(), {k: mx.nd.array(v) for k, v in arrays.items()},
                                      grad_req="null")
    want = sym.bind(mx.cpu(), {k: mx.nd.array(v) for k, v in arrays.items()}, grad_req="null")
    for got, ref in zip(executor.forward(), want.forward()):
        np.testing.assert_allclose(got.asnumpy(), ref.asnumpy(), rtol=1e-6, atol=1e-7)
