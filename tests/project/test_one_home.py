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
# _core/dtypes.py writes MXNet's table of codes out (so that it loads no MXNet) and
# tests/core/test_dtypes.py compares it with MXNet's own; no module reads MXNet's tables.
MXNET_DTYPE_TABLE_WRITERS = {"mxmixed/_core/dtypes.py"}


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
    assert _where(table, set()) == [], "use mxmixed._core.dtypes.MXNET_CODES"
    assert _where(table_by_hand, MXNET_DTYPE_TABLE_WRITERS) == [], (
        "use mxmixed._core.dtypes.MXNET_CODES")


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


def _is_boolean_word(node):
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and \
        node.value.strip().lower() in ("true", "false")


def _compares_a_boolean_word(node):
    """A comparison with ``"true"``/``"false"`` (any case), or a tuple, list or set of them:
    an MXNet boolean parsed by hand."""
    if isinstance(node, ast.Compare):
        operands = [node.left] + node.comparators
        return any(_is_boolean_word(n) or (isinstance(n, (ast.Tuple, ast.List, ast.Set))
                                           and any(map(_is_boolean_word, n.elts)))
                   for n in operands)
    return (isinstance(node, (ast.Tuple, ast.List, ast.Set))
            and any(map(_is_boolean_word, node.elts))
            and not isinstance(getattr(node, "parent", None), ast.Compare))


def _reads_an_mxnet_variable(node):
    """``os.environ.get("MXNET_...")``, ``os.getenv("MXNET_...")`` or ``os.environ["MXNET_..."]``
    read (not written)."""
    def mxnet_name(n):
        return isinstance(n, ast.Constant) and str(n.value).startswith("MXNET_")
    if isinstance(node, ast.Call):
        return (ast.unparse(node.func) in ("os.environ.get", "environ.get", "os.getenv", "getenv")
                and bool(node.args) and mxnet_name(node.args[0]))
    return (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load)
            and mxnet_name(node.slice) and ast.unparse(node.value).endswith("environ"))


# Reads of the text itself, after _core/mxbool read the value
QUOTES_AN_MXNET_VARIABLE = {
    "mxmixed/emulation/__init__.py",  # quotes MXNET_FC_TRUE_FP16's text in its warning
}
# "True" written by Python, not by MXNet: the NumPy header of a samples file
PYTHON_LITERALS = {"mxmixed/_files/npz.py"}


def test_mxnet_booleans_are_read_only_in_core_mxbool():
    assert _where(_compares_a_boolean_word, {"mxmixed/_core/mxbool.py"} | PYTHON_LITERALS) == [], (
        "read an MXNet boolean attribute with mxmixed._core.mxbool.attr_bool (read_bool, "
        "read_optional_bool)")
    assert _where(_reads_an_mxnet_variable,
                  {"mxmixed/_core/mxbool.py"} | QUOTES_AN_MXNET_VARIABLE) == [], (
        "read an MXNet environment variable with mxmixed._core.mxbool.env_bool")


@pytest.mark.parametrize("source, predicate", [
    ("x = value.lower() in ('true', '1')\n", _compares_a_boolean_word),
    ("TRUE = ('True', 'true', '1')\n", _compares_a_boolean_word),
    ("x = attrs.get('no_bias') == 'False'\n", _compares_a_boolean_word),
    ("x = os.environ.get('MXNET_SAFE_ACCUMULATION', '0')\n", _reads_an_mxnet_variable),
    ("x = os.getenv('MXNET_FC_TRUE_FP16')\n", _reads_an_mxnet_variable),
    ("x = os.environ['MXNET_ELIMINATE_COMMON_EXPR']\n", _reads_an_mxnet_variable),
    ("x = y > 65504.0\n", _is_float16_range_number),
    ("tiny = 2.0 ** -14\n", _is_float16_range_number),
])
def test_a_float16_range_number_is_found_however_it_is_written(source, predicate):
    tree = ast.parse(source)
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            child.parent = node
    assert sum(map(predicate, ast.walk(tree))) == 1


@pytest.mark.parametrize("source, predicate", [
    ("os.environ['MXNET_SUBGRAPH_VERBOSE'] = '0'\n", _reads_an_mxnet_variable),
    ("node['attrs'] = dict(attrs, no_bias='True')\n", _compares_a_boolean_word),
    ("x = {'reverse': 'True'}\n", _compares_a_boolean_word),
])
def test_writing_an_mxnet_boolean_is_not_reading_one(source, predicate):
    tree = ast.parse(source)
    assert not any(map(predicate, ast.walk(tree)))
