"""An MXNet graph from someone else (a ``-symbol.json``), checked before MXNet loads it.

:func:`check_graph` walks the parsed JSON before ``mx.sym.load_json`` sees it: only ops of
MXNet's registry that run no code named by the file, every edge and head within its node's
outputs, and caps on the attributes that size MXNet's allocations. Imported from
:mod:`mxmixed._files.untrusted`.
"""
import ctypes
import functools
import re

import mxnet as mx

from ..._core.dtypes import MXNET_CODES
from ..._core.errors import one_line
from ._json import UnsafeFileError

__all__ = ["MAX_GRAPH_BYTES", "MAX_GRAPH_NODES", "MAX_COUNT_ATTR", "DENIED_OPS",
           "graph_outputs_limit", "check_graph"]

MAX_GRAPH_BYTES = 32 << 20
"""The largest ``-symbol.json`` read (32 MiB; a ResNet-152 is 0.3 MB, a BERT-large 2 MB)."""

MAX_GRAPH_NODES = 200_000
"""The most nodes in a graph, its subgraphs included (a BERT-large has about 5,000)."""

MAX_COUNT_ATTR = 4096
"""The largest value of an attribute that sets how many outputs or inputs a node has: MXNet
allocates that many entries when it loads the node, whatever the file's size (a 1.4 KB file
with ``num_outputs=2e8`` needs more than 4 GB). A real split has one output per time step or
per group (tens to hundreds); an ``add_n`` or ``Concat`` a few hundred inputs at most."""

# The attributes that size a node's outputs or inputs, found by setting every integer attribute
# of every op of MXNet 1.9.1's registry to 3000 and counting the outputs MXNet then makes
# (tests/files/test_untrusted_graphs.py repeats that scan): an integer ...
_COUNT_ATTRS = ("num_outputs",  # SliceChannel/split, amp_multicast, _foreach, _while_loop, _cond
                "sections",  # _split_v2, _npi_split, _npi_hsplit, _npi_dsplit
                "num_weights",  # multi_sgd_update and the other multi-tensor optimizer ops
                "num_tensors",  # _multi_lamb_update, _multi_mp_lamb_update
                "num_arrays",  # multi_sum_sq, multi_all_finite, reset_arrays
                "num_args",  # Concat, add_n, stack, _np_atleast_*d (one output per input), ...
                "num_out_data")  # _foreach, _while_loop
# ... or a tuple, one output per element
_COUNT_TUPLE_ATTRS = ("indices",)  # _split_v2, _npi_split, _npi_hsplit, _npi_dsplit

DENIED_OPS = {
    # a raw memory address in the `info` attribute, which MXNet calls (a file picks the address)
    "_Native": "calls the function at the memory address in its 'info' attribute",
    "_NDArray": "calls the function at the memory address in its 'info' attribute",
    # Python code registered in this process under the name the file gives
    "Custom": "runs the Python operator registered under its 'op_type'",
    "_npi_Custom": "runs the Python operator registered under its 'op_type'",
    "_CustomFunction": "calls back into an autograd.Function of the process that recorded it",
    # graphs executed by a node: built inside a process, never written by export or save
    "_CachedOp": "builds an executor of a graph held by the process that made it",
    "_CachedOpThreadSafe": "builds an executor of a graph held by the process that made it",
    # the machine's files, and OpenCV's image decoders (no model needs them; in a graph from
    # someone else they would decode bytes that came from its params file)
    "_cvimread": "reads the file that its 'filename' attribute names",
    "_npi_cvimread": "reads the file that its 'filename' attribute names",
    "_cvimdecode": "decodes image file bytes with OpenCV, which no model needs",
    "_npi_cvimdecode": "decodes image file bytes with OpenCV, which no model needs",
    "_imdecode": "decodes image file bytes with OpenCV, which no model needs",
}
"""Ops of MXNet's registry that a graph from someone else may not use, with the reason. Also
refused: every ``_backward_*`` op (made by autograd inside a process, never saved) and every
``_sg_*`` op (a fusion made by a backend pass inside a process: ``_sg_mkldnn_fully_connected``
without its subgraph crashes MXNet)."""
_DENIED_PREFIXES = {
    "_backward_": "is a gradient op made by autograd inside a process, never saved",
    "_sg_": "is a fusion made by a backend pass inside a process (one without its subgraph "
            "crashes MXNet)",
}
_SUBGRAPH_OPS = ("_foreach", "_while_loop", "_cond")
# what a variable's __dtype__ may say, as MXNet writes it: unknown (-1) or a dtype it knows
# (float32 0 ... bool 7, bfloat16 12); MXNet's AMP pass looks any other code up and fails
_DTYPE_CODES = ("-1",) + tuple(str(code) for code in sorted(MXNET_CODES))  # -1: unknown
# the keys under which MXNet 1.9.1 reads a node's attributes; the plain keys of a node as MXNet
# 1.9.1 writes it
_ATTR_SPELLINGS = ("attrs", "attr", "param")
_WRITTEN_KEYS = frozenset(("op", "name", "attrs", "inputs", "control_deps", "subgraphs"))
_HIDDEN_KEYS = ("ctx_group", "lr_mult", "wd_mult", "force_mirroring", "mirror_stage")
# inputs beyond an op's documented arrays that a node may have (its undocumented aux states)
_SPARE_INPUTS = 4
_PLAIN_COUNT = re.compile(r"\s*\+?\d{1,12}\s*")
_TUPLE_ITEM = re.compile(r"[^\s,()\[\]]+")


def graph_outputs_limit(nbytes):
    """The most outputs (all nodes together) a graph of ``nbytes`` bytes may have.

    Loading a graph, inferring its types and listing its outputs costs MXNet and Python about
    210 bytes per output (measured: 655,360 outputs of SliceChannel, 141 MB); a real graph has
    one or two outputs per node, and every node takes at least 30 bytes of JSON. 65,536 plus
    one output per 16 bytes of the file keeps that under about 13 times the file's size, plus
    14 MB.
    """
    return 65536 + nbytes // 16


@functools.lru_cache(maxsize=None)
def _registry():
    size = mx.base.mx_uint()
    names = ctypes.POINTER(ctypes.c_char_p)()
    mx.base.check_call(mx.base._LIB.MXListAllOpNames(ctypes.byref(size), ctypes.byref(names)))
    return frozenset(mx.base.py_str(names[i]) for i in range(size.value))


def _op_handle(op):
    handle = ctypes.c_void_p()
    mx.base.check_call(mx.base._LIB.NNGetOpHandle(mx.base.c_str(op), ctypes.byref(handle)))
    return handle.value


@functools.lru_cache(maxsize=None)
def _denied_handles():
    """The refused ops by their registry entry, so that an alias (``_npi_Custom``) is refused
    with the op it names."""
    return {_op_handle(op): why for op, why in DENIED_OPS.items() if op in _registry()}


def _denied(op):
    """Why ``op`` is refused, or None."""
    if op not in _registry():
        return "is not an op of this MXNet"
    for prefix, why in _DENIED_PREFIXES.items():
        if op.startswith(prefix):
            return why
    return DENIED_OPS.get(op) or _denied_handles().get(_op_handle(op))


def _op_outputs(op, attrs):
    """How many outputs (hidden ones included) MXNet gives a node of ``op`` with ``attrs`` (a
    sorted tuple of pairs whose counts are already capped): an atomic symbol of the op alone
    asked for its internals, so that nothing but the op's own attribute parser runs."""
    handle = ctypes.c_void_p(_op_handle(op))
    keys = [k for k, _ in attrs]
    vals = [v for _, v in attrs]
    sym = mx.base.SymbolHandle()
    mx.base.check_call(mx.base._LIB.MXSymbolCreateAtomicSymbol(
        handle, mx.base.mx_uint(len(keys)), mx.base.c_str_array(keys), mx.base.c_str_array(vals),
        ctypes.byref(sym)))
    internals = mx.sym.Symbol(sym).get_internals()
    count = mx.base.mx_uint()
    mx.base.check_call(mx.base._LIB.MXSymbolGetNumOutputs(internals.handle, ctypes.byref(count)))
    return count.value


@functools.lru_cache(maxsize=None)
def _op_inputs(op):
    """What MXNet's registry documents of ``op``'s inputs: ``(count, variadic, key)``, the
    number of single array arguments, whether one of them is a list (``NDArray-or-Symbol[]``) and the
    attribute that counts it (``num_args``; '' where none does). Read from the op's
    documentation, so that no code of the op runs (composing an op of no inputs, which would
    tell exactly, crashes MXNet for some: ``reset_arrays``)."""
    name, desc, key, ret = (ctypes.c_char_p() for _ in range(4))
    size = mx.base.mx_uint()
    names, types, docs = (ctypes.POINTER(ctypes.c_char_p)() for _ in range(3))
    mx.base.check_call(mx.base._LIB.MXSymbolGetAtomicSymbolInfo(
        ctypes.c_void_p(_op_handle(op)), ctypes.byref(name), ctypes.byref(desc),
        ctypes.byref(size), ctypes.byref(names), ctypes.byref(types), ctypes.byref(docs),
        ctypes.byref(key), ctypes.byref(ret)))
    arrays = [mx.base.py_str(types[i]) for i in range(size.value)]
    arrays = [t for t in arrays if t.startswith(("NDArray", "Symbol"))]
    lists = [t for t in arrays if t.endswith("[]")]
    return len(arrays) - len(lists), bool(lists), mx.base.py_str(key.value or b"")


def _most_inputs(op, attrs):
    """The most inputs a node of ``op`` with ``attrs`` may have: the documented arrays and
    :data:`_SPARE_INPUTS` (auxiliary states are not all documented: ``BatchNorm_v1``'s moving
    mean and variance); for a list, its count attribute (capped) or, where none counts it (the
    multi-tensor optimizer ops, a few inputs per weight), 8 times :data:`MAX_COUNT_ATTR`."""
    count, variadic, key = _op_inputs(op)
    if not variadic:
        return count + _SPARE_INPUTS
    if key and _PLAIN_COUNT.fullmatch(attrs.get(key, "")):
        return count + int(attrs[key]) + _SPARE_INPUTS
    return 8 * MAX_COUNT_ATTR


class _GraphWalk:
    """One walk over a graph and its subgraphs; ``bad`` makes the one-line refusal."""

    def __init__(self, source, nbytes):
        self.source, self.nodes, self.outputs = source, 0, 0
        self.max_outputs = graph_outputs_limit(nbytes)
        self.known = {}  # (op, attrs) -> outputs, for this file only
        self.as_written = True  # every node in the keys MXNet 1.9.1 writes

    def bad(self, detail):
        return UnsafeFileError("%s is refused: %s" % (self.source, detail))

    def entry(self, value, counts, where):
        """An edge or head ``[node, output, version]`` within the nodes before it."""
        if not (isinstance(value, list) and len(value) in (2, 3)
                and all(type(v) is int for v in value)):
            raise self.bad("%s is not [node, output, version]" % where)
        node, index = value[0], value[1]
        if not 0 <= node < len(counts):
            raise self.bad("%s names node %d, which is not before it (%d nodes)"
                           % (where, node, len(counts)))
        if not 0 <= index < counts[node]:
            raise self.bad("%s names output %d of node %d, which has %d output(s)"
                           % (where, index, node, counts[node]))
        if len(value) == 3 and not 0 <= value[2] < 2 ** 31:
            raise self.bad("%s has the version %d" % (where, value[2]))

    def attrs(self, node, where):
        """The node's attributes as MXNet 1.9.1 reads them: ``attrs`` and ``attr`` fill one
        dict, the later in the file replacing the earlier whole; then the entries of ``param``
        whose keys are not in it yet (nnvm's ``JSONNode::Load``)."""
        attrs, param = {}, {}
        for key, value in node.items():
            if key in _ATTR_SPELLINGS:
                if not isinstance(value, dict) or not all(
                        isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
                    raise self.bad("the attributes of %s are not strings" % where)
                if key == "param":
                    param = value
                else:
                    attrs = dict(value)
                for text in value.items():
                    self.text(text[0], where)
                    self.text(text[1], where)
        for key, value in param.items():
            attrs.setdefault(key, value)
        return attrs

    def text(self, value, where):
        """Refuse a string that is no Unicode text (a lone surrogate, from a ``\\ud800``
        escape): MXNet's reader takes UTF-8 bytes, and it has none."""
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise self.bad("%s holds a string that is not valid Unicode (a lone surrogate "
                               "such as \\ud800)" % where) from None

    def count_attrs(self, attrs, where):
        """Cap the attributes that size the node's outputs or inputs."""
        for key in _COUNT_ATTRS:
            if key in attrs:
                value = attrs[key]
                if not _PLAIN_COUNT.fullmatch(value):
                    raise self.bad("%s has %s=%r, not a plain count" % (where, key, value[:40]))
                if int(value) > MAX_COUNT_ATTR:
                    raise self.bad("%s has %s=%d, more than the limit of %d"
                                   % (where, key, int(value), MAX_COUNT_ATTR))
        for key in _COUNT_TUPLE_ATTRS:
            items = len(_TUPLE_ITEM.findall(attrs.get(key, "")))
            if items > MAX_COUNT_ATTR:
                raise self.bad("%s has %d %s, more than the limit of %d"
                               % (where, items, key, MAX_COUNT_ATTR))

    def outputs_of(self, op, attrs, where):
        # hidden attributes (__shape__, lr_mult, fc_weight_lr_mult, ...) are no op's
        # parameters: the atomic symbol refuses some of them, and none sizes an output
        kept = tuple(sorted((k, v) for k, v in attrs.items()
                            if not (k.startswith("__") or k.endswith(_HIDDEN_KEYS))))
        if (op, kept) in self.known:
            return self.known[op, kept]
        try:
            self.known[op, kept] = _op_outputs(op, kept)
            return self.known[op, kept]
        except mx.base.MXNetError as err:
            # MXNet's reason may quote a value from the file: cut short
            raise self.bad("%s: MXNet refuses its attributes: %s"
                           % (where, one_line(err, limit=203))) from None

    def graph(self, graph, where=""):
        """Check one graph (``where`` names a subgraph in messages)."""
        if not isinstance(graph, dict) or not isinstance(graph.get("nodes"), list) \
                or not isinstance(graph.get("heads"), list):
            raise self.bad("%sit is not an MXNet graph (no 'nodes' and 'heads')" % where)
        nodes = graph["nodes"]
        self.nodes += len(nodes)
        if self.nodes > MAX_GRAPH_NODES:
            raise self.bad("it has more than %d nodes" % MAX_GRAPH_NODES)
        counts = []
        for index, node in enumerate(nodes):
            self.node(node, index, where, counts)
        if len(graph["heads"]) > sum(counts):
            # each head costs MXNet and every pass an output, so repeated heads would make a
            # few bytes of file each cost a node's worth of memory and time
            raise self.bad("%sit has %d heads, more than the %d outputs of its nodes"
                           % (where, len(graph["heads"]), sum(counts)))
        for k, value in enumerate(graph["heads"]):
            self.entry(value, counts, "%shead %d" % (where, k))
        self.graph_attrs(graph, nodes, where)

    def graph_attrs(self, graph, nodes, where):
        """Check a graph's ``arg_nodes`` and its attributes."""
        arg_nodes = graph.get("arg_nodes", [])
        if not isinstance(arg_nodes, list) or not all(
                type(n) is int and 0 <= n < len(nodes) and nodes[n]["op"] == "null"
                for n in arg_nodes):
            raise self.bad("%sits arg_nodes are not variables of the graph" % where)
        extra = graph.get("attrs", {})
        version = extra.get("mxnet_version") if isinstance(extra, dict) else None
        if not isinstance(extra, dict) or set(extra) - {"mxnet_version"} or (
                version is not None and not (isinstance(version, list) and len(version) == 2
                                             and version[0] == "int" and type(version[1]) is int)):
            raise self.bad("%sits graph attributes are not the mxnet_version MXNet writes"
                           % where)

    def node(self, node, index, where, counts):
        """Check one node of a graph; append the number of its outputs to ``counts``."""
        if not isinstance(node, dict) or not isinstance(node.get("op"), str) \
                or not isinstance(node.get("name"), str) \
                or not isinstance(node.get("inputs", []), list):
            raise self.bad("%snode %d is not an MXNet node (op, name, inputs)"
                           % (where, index))
        op = node["op"]
        self.text(node["name"], "%snode %d" % (where, index))
        if op != "null" and op in _registry() and len(node.get("inputs", [])) > _SPARE_INPUTS:
            most = _most_inputs(op, self.attrs(node, "node %d" % index))
            if len(node["inputs"]) > most:
                # MXNet would load it, and refuse it only when it infers its types, each input
                # having cost it and every pass before an allocation (100,000: 9 s, 187 MB)
                raise self.bad("%snode %d (%s) has %d inputs, more than its op takes (at "
                               "most %d)" % (where, index, op[:80], len(node["inputs"]), most))
        if not _WRITTEN_KEYS.issuperset(node):
            self.as_written = False
        for k, value in enumerate(node.get("inputs", [])):
            self.entry(value, counts, "%sinput %d of node %d" % (where, k, index))
        deps = node.get("control_deps", [])
        if not isinstance(deps, list) or not all(
                type(d) is int and 0 <= d < index for d in deps):
            raise self.bad("%sa control dependency of node %d is not a node before it"
                           % (where, index))
        if deps:
            raise self.bad("%snode %d (%r) has control dependencies: no export writes "
                           "them, and MXNet's AMP pass copies them pointing into the "
                           "unconverted graph" % (where, index, node["name"][:80]))
        named = "%snode %d (%s)" % (where, index, op[:80])
        attrs = self.attrs(node, named)
        if op == "null":
            if node.get("inputs") or node.get("subgraphs"):
                raise self.bad("%snode %d is a variable with inputs" % (where, index))
            dtype = attrs.get("__dtype__")
            if dtype is not None and dtype not in _DTYPE_CODES:
                raise self.bad("%svariable %d (%r) declares __dtype__=%r, which is none "
                               "of MXNet's dtype codes (%s)"
                               % (where, index, node["name"][:80], dtype[:40],
                                  ", ".join(_DTYPE_CODES)))
            counts.append(1)
            return
        why = _denied(op)
        if why is not None:
            raise self.bad("%snode %d (%r) uses the op %s, which %s"
                           % (where, index, node["name"][:80], op[:80], why))
        self.count_attrs(attrs, named)
        subgraphs = node.get("subgraphs", [])
        if not isinstance(subgraphs, list) or subgraphs and op not in _SUBGRAPH_OPS:
            raise self.bad("%s carries subgraphs, which only %s do"
                           % (named, ", ".join(_SUBGRAPH_OPS)))
        for k, sub in enumerate(subgraphs):
            self.graph(sub, "%ssubgraph %d of node %d: " % (where, k, index))
        counts.append(self.outputs_of(op, attrs, named))
        self.outputs += counts[-1]
        if self.outputs > self.max_outputs:
            raise self.bad("its nodes have more than %d outputs in all (65536 and one for "
                           "every 16 bytes of the file)" % self.max_outputs)


def check_graph(graph, source, nbytes):
    """Check an MXNet graph from someone else before ``mx.sym.load_json`` sees it.

    Every op must be in MXNet's registry and not in :data:`DENIED_OPS`; every input edge and
    head ``[node, output, version]`` must name an earlier node and one of its outputs (MXNet
    checks node indices but not output indices, and reads past its arrays); the attributes
    that size a node's outputs or inputs are at most :data:`MAX_COUNT_ATTR`, all outputs
    together at most :func:`graph_outputs_limit` of the file's size, and the nodes at most
    :data:`MAX_GRAPH_NODES`. The subgraphs of control-flow ops are checked the same way.

    Parameters
    ----------
    graph : dict
        The parsed JSON (parsed with ``object_pairs_hook=json_object_pairs``).
    source : str
        How to name the file in the message (its path).
    nbytes : int
        The size of the file.

    Raises
    ------
    UnsafeFileError
        One line naming ``source`` and what is wrong.

    Returns
    -------
    bool
        Whether MXNet reads the graph as it is written: every node in the keys MXNet 1.9.1
        writes (``attrs``, not the older ``attr`` or ``param``) and the graph saved by this
        MXNet's version or a later one. Otherwise MXNet's loader changes it as it loads it
        (attribute spellings merged; for older versions, hidden keys moved, missing inputs
        added, ``argmax``'s ``axis=-1`` dropped), and only MXNet's reading of it is the model.
    """
    walk = _GraphWalk(source, nbytes)
    if nbytes > MAX_GRAPH_BYTES:
        raise walk.bad("it has %d bytes, more than the limit of %d" % (nbytes, MAX_GRAPH_BYTES))
    walk.graph(graph)
    version = graph.get("attrs", {}).get("mxnet_version", ["int", 800])[1]
    return walk.as_written and version >= _mxnet_version()


@functools.lru_cache(maxsize=None)
def _mxnet_version():
    """MXNet's version as its graphs record it (10901 for 1.9.1)."""
    version = ctypes.c_int()
    mx.base.check_call(mx.base._LIB.MXGetVersion(ctypes.byref(version)))
    return version.value
