"""MXNet's booleans are read as MXNet 1.9.1 reads them: each case is put to MXNet itself.

``mxmixed._core.mxbool`` is the one reader of a boolean attribute or environment variable of
MXNet's (``tests/project/test_one_home.py``); before it, eight readers each had their own rule
(spaces stripped or not, ``TRUE`` read as False, ``yes`` read as False where MXNet refuses it).
"""
import mxnet as mx
import numpy as np
import pytest

from mxmixed._core.mxbool import attr_bool, env_bool, read_bool, read_optional_bool

TEXTS = ["true", "True", "TRUE", "tRuE", "1", "false", "False", "FALSE", "0", " true", "true ",
         " 0\t", "yes", "no", "2", "01", "", "None", "none", "t", "\u0130", "\uff54rue"]


def _ours(read, value):
    try:
        return read(value)
    except ValueError:
        return "refused"


def _mxnet_no_bias(text):
    """What MXNet's FullyConnected makes of ``no_bias=text`` (a plain bool parameter)."""
    try:
        sym = mx.sym.FullyConnected(mx.sym.var("x"), num_hidden=2, no_bias=text, name="fc")
    except mx.base.MXNetError:
        return "refused"
    return "fc_bias" not in sym.list_arguments()


def _mxnet_use_length(text):
    """What MXNet's softmax makes of ``use_length=text`` (an optional<bool> parameter)."""
    try:
        sym = mx.sym.softmax(data=mx.sym.var("x"), use_length=text, name="sm")
    except mx.base.MXNetError:
        return "refused"
    return "sm_length" in sym.list_arguments()


@pytest.mark.parametrize("text", TEXTS + [True, False, 1, 0, np.bool_(True)])
def test_a_bool_attribute_reads_as_mxnet_reads_it(text):
    assert _ours(lambda v: read_bool(v, "no_bias"), text) == _mxnet_no_bias(text)


# "none" is left out: MXNet takes it, then softmax aborts the process (bad optional access)
@pytest.mark.parametrize("text", [t for t in TEXTS if t.strip().lower() != "none"])
def test_an_optional_bool_attribute_reads_as_mxnet_reads_it(text):
    ours = _ours(lambda v: read_optional_bool(v, "use_length"), text)
    assert ours == _mxnet_use_length(text)


def test_none_is_an_optional_bools_value_and_no_plain_bools():
    assert read_optional_bool(" None ", "use_length") is None
    assert read_optional_bool(None, "use_length") is None
    with pytest.raises(ValueError, match="no_bias='None': MXNet reads it as a boolean"):
        read_bool("None", "no_bias")


def test_an_attribute_not_given_takes_the_operators_default():
    assert attr_bool({}, "flatten", True) is True
    assert attr_bool({"flatten": "0"}, "flatten", True) is False
    assert attr_bool({"no_bias": None}, "no_bias", False) is False


def _mxnet_safe_accumulation(monkeypatch, value):
    """How MXNet's softmax reads MXNET_SAFE_ACCUMULATION=value (dmlc::GetEnv<bool>): the
    float16 sum of 4096 ones stops at 2048 without it."""
    if value is None:
        monkeypatch.delenv("MXNET_SAFE_ACCUMULATION", raising=False)
    else:
        monkeypatch.setenv("MXNET_SAFE_ACCUMULATION", value)
    try:
        first = mx.nd.softmax(mx.nd.zeros((1, 4096), dtype="float16"))[0, 0].asscalar()
    except mx.base.MXNetError:
        return "refused"
    return {1 / 4096: True, 1 / 2048: False}[float(first)]


@pytest.mark.parametrize("value", [None, "", "0", "1", "TRUE", "False", " 1", "yes", "on"])
def test_an_environment_variable_reads_as_mxnet_reads_it(value, monkeypatch):
    expected = _mxnet_safe_accumulation(monkeypatch, value)
    ours = _ours(lambda v: env_bool("MXNET_SAFE_ACCUMULATION", False), value)
    assert ours == expected


def test_an_unset_or_empty_variable_takes_the_default_and_a_bad_one_is_one_line():
    assert env_bool("V", True, {}) is True and env_bool("V", True, {"V": ""}) is True
    with pytest.raises(ValueError, match=r"^V='on': MXNet reads it as a boolean \(0, 1, true "
                                         r"or false\)$"):
        env_bool("V", False, {"V": "on"})
