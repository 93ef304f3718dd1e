"""The emulation's internal node names never reach what a program reads back.

For every op the emulation wraps, an executor of a float16 graph has the output names of plain
float32 MXNet (and of a GPU run): ``output_dict``, ``get_internals()`` bound as a group,
``Module.output_names``, a ``SymbolBlock``'s outputs, parameter names and an exported
``-symbol.json``.
"""
import json
import os

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

from mxmixed import emulation
from mxmixed.emulation import EMULATED_OPS, emulate_symbol

F16 = np.float16
V = mx.sym.var


def _rnn():
    return mx.sym.RNN(V("data"), V("params"), V("state"), V("state_cell"), state_size=4,
                      num_layers=1, mode="lstm", state_outputs=True, name="rnn")


# op -> (symbol, input shapes); every input float16 except BatchNorm's parameters
GRAPHS = {
    "FullyConnected": (lambda: mx.sym.FullyConnected(V("data"), num_hidden=4, name="fc"),
                       {"data": (2, 8)}),
    "Convolution": (lambda: mx.sym.Convolution(V("data"), num_filter=4, kernel=(3, 3),
                                               name="conv"), {"data": (2, 3, 6, 6)}),
    "Deconvolution": (lambda: mx.sym.Deconvolution(V("data"), num_filter=4, kernel=(2, 2),
                                                   name="deconv"), {"data": (2, 3, 4, 4)}),
    "RNN": (_rnn, {"data": (5, 2, 3), "params": (144,), "state": (1, 2, 4),
                   "state_cell": (1, 2, 4)}),
    "UpSampling": (lambda: mx.sym.UpSampling(V("data"), V("weight"), scale=2, num_filter=3,
                                             sample_type="bilinear", num_args=1, name="up"),
                   {"data": (2, 3, 4, 4), "weight": (3, 1, 4, 4)}),
    "dot": (lambda: mx.sym.dot(V("a"), V("b"), name="dot"), {"a": (2, 3), "b": (3, 4)}),
    "batch_dot": (lambda: mx.sym.batch_dot(V("a"), V("b"), name="bdot"),
                  {"a": (2, 2, 3), "b": (2, 3, 4)}),
    "BatchNorm": (lambda: mx.sym.BatchNorm(V("data"), fix_gamma=False, name="bn"),
                  {"data": (2, 3, 4, 4)}),
    "Pooling": (lambda: mx.sym.Pooling(V("data"), kernel=(2, 2), pool_type="avg",
                                       name="pool"), {"data": (2, 3, 4, 4)}),
    "Activation": (lambda: mx.sym.Activation(V("data"), act_type="relu", name="relu"),
                   {"data": (2, 5)}),
    "LeakyReLU": (lambda: mx.sym.LeakyReLU(V("data"), act_type="gelu", name="gelu"),
                  {"data": (2, 5)}),
    "elemwise_add": (lambda: mx.sym.elemwise_add(V("a"), V("b"), name="add"),
                     {"a": (2, 5), "b": (2, 5)}),
    "clip": (lambda: mx.sym.clip(V("data"), 0, 6, name="clip"), {"data": (2, 5)}),
    "softmax": (lambda: mx.sym.softmax(V("data"), axis=-1, name="softmax"), {"data": (2, 5)}),
    "LayerNorm": (lambda: mx.sym.LayerNorm(V("data"), name="ln"), {"data": (2, 5)}),
    "amp_multicast": (lambda: mx.sym.amp_multicast(V("a"), V("b"), num_outputs=2, name="mc"),
                      {"a": (2, 5), "b": (2, 5)}),
    "_contrib_interleaved_matmul_selfatt_qk": (
        lambda: mx.sym.contrib.interleaved_matmul_selfatt_qk(V("qkv"), heads=2, name="qk"),
        {"qkv": (5, 2, 24)}),
    "_contrib_interleaved_matmul_selfatt_valatt": (
        lambda: mx.sym.contrib.interleaved_matmul_selfatt_valatt(V("qkv"), V("att"), heads=2,
                                                                 name="valatt"),
        {"qkv": (5, 2, 24), "att": (4, 5, 5)}),
    "_contrib_interleaved_matmul_encdec_qk": (
        lambda: mx.sym.contrib.interleaved_matmul_encdec_qk(V("q"), V("kv"), heads=2,
                                                            name="encqk"),
        {"q": (5, 2, 8), "kv": (7, 2, 16)}),
    "_contrib_interleaved_matmul_encdec_valatt": (
        lambda: mx.sym.contrib.interleaved_matmul_encdec_valatt(V("kv"), V("att"), heads=2,
                                                                name="encvalatt"),
        {"kv": (7, 2, 16), "att": (4, 5, 7)}),
}


def _float16_types(sym):
    types = {n: F16 for n in sym.list_arguments()}
    if "BatchNorm" in sym.tojson():  # gamma and beta stay float32, as on a GPU
        types = {"data": F16}
    if "amp_multicast" in sym.tojson():
        types["b"] = np.float32  # a mix: the float16 input is widened
    return types


def _output_keys(sym, shapes, types, emulate):
    with emulation.emulated() if emulate else _nothing():
        exe = sym.simple_bind(mx.cpu(), grad_req="null", type_dict=types, **shapes)
        exe.forward(is_train=False)
        bound = sym.bind(mx.cpu(), {n: a for n, a in exe.arg_dict.items()},
                         aux_states=dict(exe.aux_dict), grad_req="null")
    return list(exe.output_dict), list(bound.output_dict)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_every_emulated_op_has_a_names_case():
    assert sorted(GRAPHS) == sorted(EMULATED_OPS)


@pytest.mark.parametrize("op", sorted(GRAPHS))
def test_output_names_are_plain_mxnets(op):
    make, shapes = GRAPHS[op]
    sym = make()
    types = _float16_types(sym)
    assert emulate_symbol(sym, types) is not sym  # the graph really is rewritten
    plain_sym = make()
    plain = _output_keys(plain_sym, shapes, {n: np.float32 for n in types}, emulate=False)
    emulated = _output_keys(sym, shapes, types, emulate=True)
    assert plain[0] == plain[1] == plain_sym.list_outputs() == sym.list_outputs()
    assert emulated == plain


@pytest.mark.parametrize("op", sorted(GRAPHS))
def test_internals_bound_as_a_group_keep_their_names(op):
    make, shapes = GRAPHS[op]
    internals = make().get_internals()
    outputs = [n for n in internals.list_outputs() if n not in internals.list_inputs()]
    group = mx.sym.Group([internals[n] for n in outputs])
    types = _float16_types(make())
    with emulation.emulated():
        exe = group.simple_bind(mx.cpu(), grad_req="null", type_dict=types, **shapes)
    assert list(exe.output_dict) == outputs


def _module_net():
    x = mx.sym.Convolution(V("data"), num_filter=4, kernel=(3, 3), name="conv")
    x = mx.sym.BatchNorm(x, fix_gamma=False, name="bn")
    x = mx.sym.Pooling(x, kernel=(2, 2), pool_type="max", name="pool")
    x = mx.sym.FullyConnected(x, num_hidden=3, name="fc")
    return mx.sym.SoftmaxOutput(x, name="softmax")


def test_module_reads_back_its_own_names():
    sym = _module_net()
    with emulation.emulated():
        mod = mx.mod.Module(sym, context=mx.cpu())
        mod.bind(data_shapes=[mx.io.DataDesc("data", (2, 3, 8, 8), F16)],
                 label_shapes=[mx.io.DataDesc("softmax_label", (2,), F16)])
        mod.init_params()
        mod.forward(mx.io.DataBatch([mx.nd.ones((2, 3, 8, 8), dtype=F16)],
                                    [mx.nd.zeros((2,), dtype=F16)]), is_train=False)
        exe = mod._exec_group.execs[0]
        arg, aux = mod.get_params()
    assert mod.output_names == ["softmax_output"] == list(exe.output_dict)
    assert sorted(arg) == sorted(n for n in sym.list_arguments()
                                 if n not in ("data", "softmax_label"))
    assert sorted(aux) == sorted(sym.list_auxiliary_states())


def _gluon_net():
    net = gluon.nn.HybridSequential(prefix="net_")
    with net.name_scope():
        net.add(gluon.nn.Conv2D(4, 3), gluon.nn.BatchNorm(), gluon.nn.Activation("relu"),
                gluon.nn.Dense(3))
    net.initialize(mx.init.Xavier())
    net.cast("float16")
    return net


def _export(net, folder):
    x = mx.nd.ones((2, 3, 8, 8), dtype=F16)
    net.hybridize()
    net(x)
    prefix = os.path.join(folder, "net")
    net.export(prefix)
    with open(prefix + "-symbol.json") as f:
        return json.load(f), sorted(mx.nd.load(prefix + "-0000.params"))


def test_exported_symbol_and_params_are_unchanged_by_the_emulation(tmp_path):
    plain_folder, emulated_folder = tmp_path / "plain", tmp_path / "emulated"
    plain_folder.mkdir()
    emulated_folder.mkdir()
    net = _gluon_net()
    with emulation.emulated():
        emulated = _export(net, str(emulated_folder))
    net = _gluon_net()
    # without emulation a float16 Conv2D cannot run on a CPU: export the graph float32
    net.cast("float32")
    net.hybridize()
    net(mx.nd.ones((2, 3, 8, 8)))
    net.export(str(plain_folder / "net"))
    with open(str(plain_folder / "net-symbol.json")) as f:
        plain_graph = json.load(f)
    names = sorted(mx.nd.load(str(plain_folder / "net-0000.params")))
    assert [n["name"] for n in emulated[0]["nodes"]] == [n["name"] for n in plain_graph["nodes"]]
    assert emulated[1] == names


def test_symbol_block_outputs_and_params_keep_their_names(tmp_path):
    net = _gluon_net()
    with emulation.emulated():
        graph, _ = _export(net, str(tmp_path))
        sym = mx.sym.load(str(tmp_path / "net-symbol.json"))
        internals = sym.get_internals()
        wanted = [n for n in internals.list_outputs() if n.endswith("_output")][-2:]
        block = gluon.SymbolBlock([internals[n] for n in wanted], V("data"))
        block.cast("float16")
        block.collect_params().load(str(tmp_path / "net-0000.params"), ignore_extra=True)
        block.hybridize()
        outs = block(mx.nd.ones((2, 3, 8, 8), dtype=F16))
    assert [o.dtype for o in outs] == [F16, F16]
    assert block._cached_graph[1].list_outputs() == wanted
    assert sorted(block.collect_params()) == sorted(
        n for n in sym.list_arguments() + sym.list_auxiliary_states() if n != "data")
