"""One ``mxmixed convert --validate`` builds Symbols from JSON 3 times (the file's graph, its
internal outputs for type inference, the emulated graph) and writes JSON twice (the AMP pass's
graph, for its type check, and the output file), as counted at MXNet's C API
(docs/architecture.md says the same), and runs the emulation pass once per graph."""
import collections
import json
import sys

import mxnet as mx
import pytest

from mxmixed import cli
from mxmixed._core.graph import as_graph
from mxmixed.emulation import _graphpass

gluoncv = pytest.importorskip("gluoncv")

COUNTED = ("MXSymbolCreateFromJSON", "MXSymbolSaveToJSON")


class _CountingLib:
    """MXNet's ctypes library, counting the calls of the functions in ``COUNTED``."""

    def __init__(self, lib, counts):
        self._lib, self._counts = lib, counts

    def __getattr__(self, name):
        function = getattr(self._lib, name)
        if name not in COUNTED:
            return function

        def counted(*args):
            self._counts[name] += 1
            return function(*args)
        return counted


@pytest.fixture
def resnet18(tmp_path):
    net = gluoncv.model_zoo.get_model("resnet18_v1", pretrained=False)
    net.initialize()
    net.hybridize()
    net(mx.nd.zeros((1, 3, 32, 32)))
    prefix = str(tmp_path / "resnet18")
    net.export(prefix)
    return prefix


def test_convert_validate_builds_and_writes_few_graphs_and_emulates_each_once(
        resnet18, tmp_path, monkeypatch, capsys):
    counts = collections.Counter()
    lib = mx.base._LIB
    shim = _CountingLib(lib, counts)
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("mxnet") \
                and getattr(module, "_LIB", None) is lib:
            monkeypatch.setattr(module, "_LIB", shim)
    passed, made = [], []
    real_pass = _graphpass._emulate_graph

    def counted_pass(graph, *args, **kwargs):
        passed.append(json.dumps(graph.json, sort_keys=True))
        result = real_pass(graph, *args, **kwargs)
        made.append(result)
        return result
    monkeypatch.setattr(_graphpass, "_emulate_graph", counted_pass)
    code = cli.main(["convert", resnet18, "0", "--out", str(tmp_path / "resnet18-16"),
                     "--validate", "2", "--input-shape", "3,32,32"])
    monkeypatch.undo()
    assert code == cli.EXIT_OK, capsys.readouterr().err
    assert counts["MXSymbolCreateFromJSON"] <= 3, counts
    assert counts["MXSymbolSaveToJSON"] <= 2, counts
    # the float32 calibration run and the float16 validation run: one pass each
    assert 1 <= len(passed) <= 2 and len(set(passed)) == len(passed)
    outputs = {json.dumps(as_graph(sym).json, sort_keys=True) for sym in made}
    assert not outputs & set(passed[1:]), "a graph the pass made went through it again"
