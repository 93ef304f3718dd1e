"""The Graph value of ``mxmixed._core.graph``: parsed once, its readers and its round trip."""
import json

import mxnet as mx

from mxmixed._core.graph import Graph


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
    assert Graph(sym).to_symbol() is sym


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
