"""The Graph value of ``mxmixed._core.graph``: parsed once, its readers and its round trip."""
import gc
import json
import weakref

import mxnet as mx
import pytest

from mxmixed._core.graph import Graph, as_graph, cast_node, graph_text


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


def test_a_graph_typed_and_made_a_symbol_is_freed_without_the_cycle_collector():
    graph = Graph(json.loads(_net().tojson(remove_amp_cast=False)))
    graph.entry_dtypes(graph.consumed_entries(), {"data": "float32"})
    probe = graph.with_heads([(graph.index("fc0"), 0)])
    probe.to_symbol()
    gone = [weakref.ref(graph), weakref.ref(probe)]
    gc.disable()
    try:
        del graph, probe
        assert [ref() for ref in gone] == [None, None]
    finally:
        gc.enable()


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


def test_a_rebuild_maps_control_dependencies_to_the_nodes_they_named():
    graph = Graph(_net())
    add, relu = graph.index("add0"), graph.index("relu0")
    graph = graph.with_nodes({add: dict(graph.nodes[add], control_deps=[relu])})
    new = graph.rebuild()
    for i, node in enumerate(graph.nodes):
        if node["op"] != "null":  # a cast before every op: every index moves
            new.add(cast_node(node["name"] + "_cast", "float32", new.entry(node["inputs"][0])))
        new.place(i, new.add(new.mapped(node)))
    nodes = new.graph().nodes
    (dep,) = next(n for n in nodes if n["name"] == "add0")["control_deps"]
    assert nodes[dep]["name"] == "relu0"


def test_a_control_dependency_on_a_node_read_as_another_follows_it():
    graph = Graph(_net())
    add = graph.index("add0")
    graph = graph.with_nodes({add: dict(graph.nodes[add], control_deps=[graph.index("relu0")])})
    new = graph.rebuild()
    for i, node in enumerate(graph.nodes):
        if node["name"] == "relu0":
            new.redirect((i, 0), new.entry(node["inputs"][0]))  # relu0 read as fc0
            continue
        new.place(i, new.add(new.mapped(node)))
    nodes = new.graph().nodes
    assert next(n for n in nodes if n["name"] == "add0")["control_deps"] == \
        [next(j for j, n in enumerate(nodes) if n["name"] == "fc0")]


def test_a_control_dependency_on_a_dropped_node_is_dropped():
    graph = Graph(_net())
    add = graph.index("add0")
    graph = graph.with_nodes({add: dict(graph.nodes[add], control_deps=[graph.index("data")])})
    new = graph.rebuild()
    for i, node in enumerate(graph.nodes):
        if node["name"] != "data":  # dropped: nothing reads it once fc0 is gone
            new.place(i, new.add(dict(node, inputs=[])))
    assert next(n for n in new.graph().nodes if n["name"] == "add0")["control_deps"] == []


def test_names_in_any_script_survive_a_round_trip_through_mxnet():
    x = mx.sym.var("données")
    sym = mx.sym.relu(mx.sym.FullyConnected(x, num_hidden=2, name="réseau_fc"), name="网络_relu")
    again = Graph(json.loads(sym.tojson())).to_symbol()
    assert again.list_arguments() == ["données", "réseau_fc_weight", "réseau_fc_bias"]
    assert again.get_internals().list_outputs()[-1] == "网络_relu_output"
    assert "\\u" not in graph_text(Graph(sym).json)


def test_type_inference_knows_a_bfloat16_input():
    from mxmixed._core.dtypes import BFLOAT16
    from mxmixed._core.graph import infer_types

    a, b = mx.sym.var("a"), mx.sym.var("b")
    args, outs, _ = infer_types(mx.sym.concat(a, b), {"a": BFLOAT16})
    assert args == {"a": BFLOAT16, "b": BFLOAT16} and outs == [BFLOAT16]
