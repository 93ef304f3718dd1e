"""The Graph value of ``mxmixed._core.graph``: parsed once, its readers and its round trip."""
import json

import mxnet as mx
import pytest

from mxmixed._core.graph import Graph, as_graph


def _net():
    x = mx.sym.var("data")
    a = mx.sym.FullyConnected(x, num_hidden=4, name="fc0")
    b = mx.sym.Activation(a, act_type="relu", name="relu0")
    return mx.sym.Group([mx.sym.elemwise_add(a, b, name="add0"), b])


def test_readers_and_consumers():
    graph = Graph(_net())
    fc, relu, add = (graph.index(n) for n in ("fc0", "relu0", "add0"))
    assert graph.consumers(fc) == [relu, add]
    assert graph.readers((fc, 0)) == [relu, add]
    assert graph.consumers(add) == []
    assert (relu, 0) in graph.consumed_entries() and (add, 0) in graph.consumed_entries()
    assert graph.arg_nodes == [j for j, n in enumerate(graph.nodes) if n["op"] == "null"]


def test_to_symbol_round_trips_the_json():
    sym = _net()
    text = sym.tojson(remove_amp_cast=False)
    again = Graph(json.loads(text)).to_symbol()
    assert json.loads(again.tojson(remove_amp_cast=False)) == json.loads(text)
    graph = Graph(sym)
    made = graph.to_symbol()
    assert made is graph.to_symbol() and as_graph(made) is graph
    assert made.tojson() == sym.tojson() and repr(made) == repr(sym)


def test_nodes_are_read_only_and_an_edit_is_a_new_graph():
    graph = Graph(_net())
    fc = graph.index("fc0")
    node = graph.nodes[fc]
    assert (node.op, node.name, node["op"]) == ("FullyConnected", "fc0", "FullyConnected")
    with pytest.raises(TypeError):
        node["op"] = "Convolution"
    with pytest.raises(TypeError):
        node.attrs["num_hidden"] = "8"
    edited = graph.with_attrs({fc: {"num_hidden": "8"}})
    assert edited is not graph and graph.nodes[fc].attrs["num_hidden"] == "4"
    assert edited.nodes[fc].attrs["num_hidden"] == "8"
    assert edited.to_symbol().infer_shape(data=(2, 3))[1][0] == (2, 8)
    assert graph.with_attrs({fc: {"num_hidden": "4"}}) is graph


def test_dtypes_of_entries_read_no_json(monkeypatch):
    graph = Graph(_net())
    graph.to_symbol()
    calls = []
    real = mx.sym.Symbol.tojson
    monkeypatch.setattr(mx.sym.Symbol, "tojson", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(mx.sym, "load_json", lambda *a, **k: calls.append(1) / 0)
    types, _ = graph.entry_dtypes(graph.consumed_entries(), {"data": "float16"})
    assert {t.name for t in types.values()} == {"float16"}
    probe = graph.with_heads([(graph.index("fc0"), 0)])
    assert probe.to_symbol().list_outputs() == ["fc0_output"]
    assert calls == []


def test_rebuild_copies_the_graph():
    graph = Graph(_net())
    new = graph.rebuild()
    for i, node in enumerate(graph.nodes):
        new.place(i, new.add(new.mapped(node)))
    copy = new.graph()
    assert isinstance(copy, Graph)
    assert copy.nodes == graph.nodes and copy.heads == graph.heads
    assert copy.arg_nodes == graph.arg_nodes


def test_dtypes_are_kept_per_known_inputs():
    graph = Graph(_net())
    entries = graph.consumed_entries()
    types, _ = graph.entry_dtypes(entries, {"data": "float32"})
    assert {t.name for t in types.values()} == {"float32"}
    assert len(graph._dtypes) == 1
    graph.entry_dtypes(entries, {"data": "float32"})
    assert len(graph._dtypes) == 1
