"""ConvertOptions: the one object of a conversion's options, shared by the functions and the CLI."""
import dataclasses
import importlib
import inspect

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

import mxmixed
from mxmixed import symbolic
from mxmixed.cli import _convert as cli_convert
from mxmixed.symbolic import ConversionError, ConvertOptions
from mxmixed._core.graph import Graph

# The ConvertOptions fields that `mxmixed convert` has no flag for, each with why. A new field
# needs a row in mxmixed/cli/_convert.py's OPTION_FLAGS, or its place here.
NOT_ON_THE_CLI = {
    "searched_layers",         # set by --search-tolerance's own search, not by hand
    "keep_detection_float32",  # the CLI keeps detection ops float32, the default
}


def _model():
    net = gluon.nn.HybridSequential(prefix="net_")
    with net.name_scope():
        net.add(gluon.nn.Dense(16, activation="relu"), gluon.nn.Dense(4))
    net.initialize(mx.init.Xavier(rnd_type="gaussian"))
    net.hybridize()
    net(mx.nd.ones((1, 8)))
    sym = net(mx.sym.var("data"))
    params = {k: v.data() for k, v in net.collect_params().items()}
    return sym, params, {}


def test_keywords_and_equal_options_give_the_same_conversion():
    sym, args, auxs = _model()
    layer = [n["name"] for n in Graph(sym).nodes if n["op"] == "FullyConnected"][0]
    keywords = dict(exclude_layers=[layer], keep_io_types=True, cast_optional_params=False)
    by_keywords = symbolic.convert(sym, args, auxs, **keywords)
    by_options = symbolic.convert(sym, args, auxs, options=ConvertOptions(**keywords))
    assert by_options.symbol.tojson() == by_keywords.symbol.tojson()
    assert by_options.report.fp32_layers == by_keywords.report.fp32_layers
    for name, value in by_keywords.arg_params.items():
        assert by_options.arg_params[name].dtype == value.dtype
        np.testing.assert_array_equal(by_options.arg_params[name].asnumpy(), value.asnumpy())
    assert by_keywords.report.options == by_options.report.options == ConvertOptions(**keywords)
    assert mxmixed.ConvertOptions is ConvertOptions


@pytest.mark.parametrize("fields, error, message", [
    (dict(target_dtype="float64"), ConversionError, "unsupported target dtype 'float64'"),
    (dict(exclude_layers="dense0"), ConversionError, "exclude_layers must be a list of names"),
    (dict(target_dtype="bfloat16", keep_io_types=False), ConversionError,
     "keep_io_types=False is for float16 only"),
])
def test_a_bad_value_is_one_line_as_before(fields, error, message):
    sym, args, auxs = _model()
    for call in (lambda: ConvertOptions(**fields), lambda: symbolic.convert(sym, args, auxs, **fields)):
        with pytest.raises(error, match=message) as caught:
            call()
        assert isinstance(caught.value, ValueError) and "\n" not in str(caught.value)


def test_options_and_keywords_together_are_refused():
    sym, args, auxs = _model()
    with pytest.raises(TypeError, match="not both"):
        symbolic.convert(sym, args, auxs, exclude_ops=["Activation"],
                         options=ConvertOptions(exclude_ops=("Activation",)))
    with pytest.raises(TypeError, match="must be a ConvertOptions"):
        symbolic.convert(sym, args, auxs, options={"target_dtype": "float16"})


def test_options_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        ConvertOptions().target_dtype = "bfloat16"


def test_every_field_has_a_cli_flag_or_is_listed_as_not_offered():
    fields = {f.name for f in dataclasses.fields(ConvertOptions)}
    flags = {option.field: option.flag for option in cli_convert.OPTION_FLAGS}
    assert len(flags) == len(cli_convert.OPTION_FLAGS)
    assert set(flags) | NOT_ON_THE_CLI == fields, (
        "give each ConvertOptions field a flag in mxmixed/cli/_convert.py's OPTION_FLAGS, or "
        "list it in NOT_ON_THE_CLI with why")
    assert not set(flags) & NOT_ON_THE_CLI
    import argparse

    from mxmixed.cli import build_parser
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    offered = commands.choices["convert"]._option_string_actions
    for field, flag in flags.items():
        assert flag in offered, (field, flag)
    args = commands.choices["convert"].parse_args(["p", "0", "--out", "o"])
    assert cli_convert.convert_options(args) == ConvertOptions()


# The public functions that take the conversion options as keywords as well as options=, each
# with the private module whose options_from turns them into a ConvertOptions.
MIRRORS = {
    "convert": "mxmixed.symbolic._conversion",
    "search_fp32_layers": "mxmixed.symbolic._search",
    "convert_hybrid_block": "mxmixed.symbolic._blocks",
}
# A value away from its default for each field; a new field needs one here.
AWAY_FROM_DEFAULT = {
    "target_dtype": "bfloat16", "exclude_layers": ("net_dense0_fwd",),
    "exclude_ops": ("Activation",), "keep_io_types": False, "cast_optional_params": False,
    "searched_layers": ("net_dense1_fwd",), "keep_detection_float32": False,
    "fold_batchnorm": True,
}


class _Made(Exception):
    pass


@pytest.mark.parametrize("function", sorted(MIRRORS))
def test_every_option_is_a_keyword_with_the_options_default(function):
    parameters = inspect.signature(getattr(symbolic, function)).parameters
    for field in dataclasses.fields(ConvertOptions):
        assert field.name in parameters, "%s lacks the keyword %s" % (function, field.name)
        assert parameters[field.name].default == field.default, (function, field.name)
        assert parameters[field.name].kind is inspect.Parameter.KEYWORD_ONLY, (function, field.name)


@pytest.mark.parametrize("function", sorted(MIRRORS))
def test_the_option_keywords_close_each_signature_in_the_fields_order(function):
    names = list(inspect.signature(getattr(symbolic, function)).parameters)
    fields = [f.name for f in dataclasses.fields(ConvertOptions)]
    assert names[-len(fields) - 1:] == ["options"] + fields


def test_a_keyword_that_is_no_option_is_refused_by_name():
    sym, args, auxs = _model()
    with pytest.raises(TypeError, match="unexpected keyword argument 'exclude_layer'"):
        symbolic.convert(sym, args, auxs, exclude_layer=["net_dense0_fwd"])


def test_an_option_passed_by_position_is_refused():
    sym, args, auxs = _model()
    with pytest.raises(TypeError, match="positional argument"):
        symbolic.convert(sym, args, auxs, "bfloat16")


def test_the_cli_names_the_flag_of_a_ruled_out_option_as_the_options_name_the_field():
    import argparse

    from mxmixed.cli import build_parser
    from mxmixed.cli._preflight import CLIError
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    args = commands.choices["convert"].parse_args(["p", "0", "--out", "o", "--dtype", "bfloat16",
                                                   "--no-keep-io-types"])
    with pytest.raises(CLIError) as by_flag:
        cli_convert.convert_options(args)
    with pytest.raises(ConversionError) as by_keyword:
        ConvertOptions(target_dtype="bfloat16", keep_io_types=False)
    assert str(by_flag.value) == str(by_keyword.value).replace("keep_io_types=False",
                                                               "--no-keep-io-types")


@pytest.mark.parametrize("function", sorted(MIRRORS))
@pytest.mark.parametrize("field", sorted(AWAY_FROM_DEFAULT))
def test_each_option_keyword_reaches_the_conversion_as_that_option(function, field, monkeypatch):
    assert set(AWAY_FROM_DEFAULT) == {f.name for f in dataclasses.fields(ConvertOptions)}
    module = importlib.import_module(MIRRORS[function])
    real = module.options_from

    def spy(options=None, **keywords):
        raise _Made(real(options, **keywords))
    monkeypatch.setattr(module, "options_from", spy)
    sym, args, auxs = _model()
    value = AWAY_FROM_DEFAULT[field]
    call = {"convert": lambda: symbolic.convert(sym, args, auxs, **{field: value}),
            "search_fp32_layers": lambda: symbolic.search_fp32_layers(
                sym, args, auxs, np.ones((2, 8)), **{field: value}),
            "convert_hybrid_block": lambda: symbolic.convert_hybrid_block(
                gluon.nn.Dense(4), **{field: value})}[function]
    with pytest.raises(_Made) as made:
        call()
    assert made.value.args[0] == ConvertOptions(**{field: value})


def test_the_search_keeps_layers_searched_before_float32_in_its_result():
    sym, args, auxs = _model()
    args["net_dense1_weight"] = args["net_dense1_weight"] * 1e6  # its output overflows float16
    kept, found = "net_dense0_fwd", "net_dense1_fwd"
    result = symbolic.search_fp32_layers(sym, args, auxs, np.ones((4, 8), dtype=np.float32),
                                         progress=False, searched_layers=[kept])
    assert result.layers == [found]
    assert result.model.report.options.searched_layers == (kept, found)
    reasons = {name: reason for name, _, reason in result.model.report.fp32_layers}
    assert reasons[kept] == reasons[found] == "search"
