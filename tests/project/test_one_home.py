"""Each fact below is written in one module of the package (docs/architecture.md, "Where each
fact lives"); anywhere else it is imported from there. Read from the code's syntax tree, so
that prose (docstrings, messages, comments) may still name the numbers."""
import ast
import os

import numpy as np
import pytest

from conftest import ROOT

PACKAGE = os.path.join(ROOT, "mxmixed")

FLOAT16_RANGE = {65504.0, 65520.0, 2.0 ** -14, 2.0 ** -24, 2.0 ** -25}
PARAM_SUFFIXES = {"_weight", "_bias", "_gamma", "_beta", "_moving_mean", "_moving_var",
                  "_running_mean", "_running_var"}
CPU_DEVICE_TYPES = {"cpu", "cpu_pinned", "cpu_shared"}
BFLOAT16_FLAGS = {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16", "amx_bf16",
                  "amx_tile"}
MXNET_DTYPE_TABLES = {"_DTYPE_MX_TO_NP", "_DTYPE_NP_TO_MX"}
# _core/graph.py's var_dtype and dtype_code still read MXNet's tables themselves; they move to
# _core/dtypes.MXNET_CODES with the graph work (issue 44, item 1).
MXNET_DTYPE_TABLE_READERS = {"mxmixed/_core/dtypes.py", "mxmixed/_core/graph.py"}


def _modules():
    for folder, _, files in os.walk(PACKAGE):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as handle:
                    yield os.path.relpath(path, ROOT).replace(os.sep, "/"), ast.parse(handle.read())


MODULES = dict(_modules())


def _constant_value(node):
    """The value of a number written as a constant expression (``2.0 ** -14``), else None."""
    if not isinstance(node, (ast.Constant, ast.BinOp, ast.UnaryOp)):
        return None
    if not all(isinstance(n, (ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop))
               for n in ast.walk(node)):
        return None
    try:
        value = eval(compile(ast.Expression(node), "<constant>", "eval"))  # constants only
    except Exception:  # noqa: BLE001 - not a number after all
        return None
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _where(predicate, allowed):
    found = []
    for path, tree in MODULES.items():
        if path in allowed:
            continue
        found += ["%s:%d" % (path, node.lineno) for node in ast.walk(tree) if predicate(node)]
    return found


def _is_float16_range_number(node):
    return _constant_value(node) in FLOAT16_RANGE and not isinstance(
        getattr(node, "parent", None), (ast.BinOp, ast.UnaryOp))


def _mark_parents():
    for tree in MODULES.values():
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                child.parent = node


_mark_parents()


def test_float16_range_is_written_only_in_core_dtypes():
    assert _where(_is_float16_range_number, {"mxmixed/_core/dtypes.py"}) == [], (
        "import FLOAT16_MAX, FLOAT16_MIN_NORMAL, ... from mxmixed/_core/dtypes.py")

    def finfo_of_float16(node):
        return (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(
            node.func, "id", None)) == "finfo" and "float16" in ast.dump(node))
    assert _where(finfo_of_float16, set()) == []


def test_float32_range_is_never_written_as_a_number():
    """The largest and smallest normal float32 come from NumPy (``_core/dtypes.FLOAT32_MAX``
    where MXNet is loaded), never from a literal."""
    float32_range = {float(np.finfo(np.float32).max), float(np.finfo(np.float32).tiny)}
    assert _where(lambda node: _constant_value(node) in float32_range, set()) == [], (
        "import FLOAT32_MAX / FLOAT32_MIN_NORMAL from mxmixed/_core/dtypes.py")


def test_the_cpu_flags_are_read_only_in_core_devices():
    def cpuinfo(node):
        return isinstance(node, ast.Constant) and node.value == "/proc/cpuinfo"
    assert _where(cpuinfo, {"mxmixed/_core/devices.py"}) == [], (
        "use mxmixed._core.devices.cpu_flags()")


def test_the_bfloat16_cpu_rules_are_written_only_in_core_devices():
    """Which CPU flags bfloat16 needs (AVX-512 F/BW/VL/DQ), which run it natively (AVX512-BF16,
    AMX-BF16) and what AMX needs are decided in _core/devices alone."""
    def bfloat16_flag(node):
        return isinstance(node, ast.Constant) and node.value in BFLOAT16_FLAGS
    assert _where(bfloat16_flag, {"mxmixed/_core/devices.py"}) == [], (
        "use mxmixed._core.devices.bfloat16_support / bfloat16_native / has_amx_bf16")


def test_which_contexts_are_the_cpu_is_said_only_in_core_devices():
    def cpu_comparison(node):
        return isinstance(node, ast.Compare) and any(
            isinstance(n, ast.Constant) and n.value in CPU_DEVICE_TYPES
            for n in [node.left] + node.comparators)
    assert _where(cpu_comparison, {"mxmixed/_core/devices.py"}) == [], (
        "use mxmixed._core.devices.is_cpu (cpu_pinned and cpu_shared are CPU memory)")


def test_the_parameter_name_suffixes_are_listed_only_in_core_params():
    def suffix_list(node):
        return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and sum(
            isinstance(e, ast.Constant) and e.value in PARAM_SUFFIXES for e in node.elts) >= 2
    assert _where(suffix_list, {"mxmixed/_core/params.py"}) == [], (
        "use mxmixed._core.params.is_param_name")


def test_mxnet_dtype_codes_are_read_only_in_core_dtypes():
    def table(node):
        return ((isinstance(node, ast.alias) and node.name in MXNET_DTYPE_TABLES)
                or (isinstance(node, ast.Attribute) and node.attr in MXNET_DTYPE_TABLES))

    def table_by_hand(node):  # a dict keyed by MXNet's codes, bfloat16's 12 among them
        keys = {k.value for k in getattr(node, "keys", ()) if isinstance(k, ast.Constant)}
        return isinstance(node, ast.Dict) and 12 in keys and len(keys & set(range(8))) >= 4
    assert _where(table, MXNET_DTYPE_TABLE_READERS) == [], (
        "use mxmixed._core.dtypes.MXNET_CODES")
    assert _where(table_by_hand, set()) == [], "use mxmixed._core.dtypes.MXNET_CODES"


def test_no_state_is_kept_in_mxmixed_attributes_of_other_objects():
    def mxmixed_attribute(node):
        if isinstance(node, ast.Attribute):
            return node.attr.startswith("_mxmixed_")
        return (isinstance(node, ast.Call) and getattr(node.func, "id", None) in (
            "getattr", "setattr", "hasattr", "delattr") and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and str(node.args[1].value).startswith("_mxmixed_"))
    assert _where(mxmixed_attribute, set()) == [], (
        "keep such state in an object of its owning module (e.g. symbolic._inference.block_facts)")


@pytest.mark.parametrize("source, predicate", [
    ("x = y > 65504.0\n", _is_float16_range_number),
    ("tiny = 2.0 ** -14\n", _is_float16_range_number),
])
def test_a_float16_range_number_is_found_however_it_is_written(source, predicate):
    tree = ast.parse(source)
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            child.parent = node
    assert sum(map(predicate, ast.walk(tree))) == 1
