"""The diagnostics on gluoncv detector exports (SSD, YOLOv3, Faster R-CNN): they convert to AMP
the way ``mxmixed convert`` does (detection ops float32, mismatched inputs cast), so the
overflow locator, the memory report and the Tensor Core audit run where MXNet's own
``amp.convert_symbol`` leaves a graph that fails type inference."""
import os
import sys

import numpy as np
import pytest

import mxnet as mx

from mxmixed import diagnostics
from mxmixed._core.errors import one_line

from conftest import run_command

SIZE = 256
# Faster R-CNN's box head (ResNet's last stage) runs once per region proposal: 300 by default,
# which made it 80 CPU seconds; 16 proposals give the same graph (the same ops and tensors), and
# these tests check that the diagnostics run on it, not what it detects
PROPOSALS = 16
DETECTORS = [
    pytest.param("ssd_512_mobilenet1.0_voc", id="ssd"),
    pytest.param("yolo3_mobilenet1.0_voc", id="yolo3"),
    pytest.param("faster_rcnn_resnet50_v1b_voc", id="faster_rcnn", marks=pytest.mark.slow),
]


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    """``export(name)``: a gluoncv detector exported as a user would, loaded back (once per
    name and module; the tests copy what they change)."""
    folder = tmp_path_factory.mktemp("detectors")
    made = {}

    def make(name):
        from gluoncv.model_zoo import get_model
        if name not in made:
            net = get_model(name, pretrained=False, pretrained_base=False)
            if name.startswith("faster_rcnn"):  # gluoncv 0.10.5 has no public setter
                net._rpn_test_post_nms = net.rpn._test_post_nms = PROPOSALS
            net.initialize()
            net.hybridize()
            net(mx.nd.zeros((1, 3, SIZE, SIZE)))
            net.export(str(folder / name))
            made[name] = mx.model.load_checkpoint(str(folder / name), 0)
        return made[name]
    return make


def _batch():
    return mx.nd.array(np.random.RandomState(0).uniform(0, 1, (1, 3, SIZE, SIZE)))


def test_mxnet_own_amp_pass_cannot_convert_an_ssd_export(export):
    """The premise: MXNet's own pass gives an SSD graph that fails type inference where the
    box decoder meets the float32 anchors."""
    from mxnet.contrib import amp
    sym, args, auxs = export("ssd_512_mobilenet1.0_voc")
    converted = amp.convert_symbol(sym, target_dtype="float16", cast_optional_params=False)
    with pytest.raises(mx.base.MXNetError, match="box_decode"):
        converted.infer_type(data=np.float32)


@pytest.mark.slow
@pytest.mark.parametrize("name", DETECTORS)
def test_locator_memory_report_and_audit_run_on_detector_exports(export, name):
    sym, args, auxs = export(name)
    report = diagnostics.find_overflow_symbol(sym, {"data": _batch()}, args, auxs)
    assert report.precision == "amp"
    assert report.checked["forward"] > 100
    memory = diagnostics.memory_report(sym, (1, 3, SIZE, SIZE))
    # AMP stores float16 activations where the float32 model stores float32 ones
    assert memory.bytes("amp", "activations") < 0.8 * memory.bytes("float32", "activations")
    assert memory.bytes("amp", "parameters") == memory.bytes("float32", "parameters")
    audit = diagnostics.tensor_core_audit(sym, (1, 3, SIZE, SIZE))
    assert len(audit.layers) > 20


@pytest.mark.slow
def test_locator_names_a_planted_overflow_in_ssd_extra_layers(export):
    sym, args, auxs = export("ssd_512_mobilenet1.0_voc")
    args = dict(args)
    # the first extra layer after the MobileNet body: weights up to 0.07 * 1e4 = 700 still fit
    # float16, but the 512 x 3 x 3 sums of its output overflow it (> 65504)
    planted = next(k for k in args if k.endswith("_expand_conv0_weight"))
    assert float(args[planted].abs().max().asscalar()) * 1e4 < 65504
    args[planted] = args[planted] * 1e4
    report = diagnostics.find_overflow_symbol(sym, {"data": _batch()}, args, auxs)
    assert report, str(report)
    assert report.phase == "forward" and report.cast_from is None
    layer = planted[:-len("_weight")]
    assert report.node.startswith(layer), str(report)
    assert report.tensor == layer + "_output" and "_emu_" not in str(report)
    assert layer in str(report).splitlines()[0]


@pytest.mark.slow
def test_diagnostics_print_nothing_of_mxnet_s_own(export, tmp_path):
    # in a fresh process: MXNet reads MXNET_SUBGRAPH_VERBOSE once, at the process's first bind
    sym, args, auxs = export("ssd_512_mobilenet1.0_voc")
    prefix = str(tmp_path / "ssd")
    mx.model.save_checkpoint(prefix, 0, sym, args, auxs)
    code = ("import mxnet as mx, numpy as np; from mxmixed import diagnostics; "
            "sym, args, auxs = mx.model.load_checkpoint(%r, 0); "
            "x = mx.nd.array(np.random.RandomState(0).uniform(0, 1, (1, 3, %d, %d))); "
            "diagnostics.find_overflow_symbol(sym, {'data': x}, args, auxs)"
            % (prefix, SIZE, SIZE))
    env = {k: v for k, v in os.environ.items() if k != "MXNET_SUBGRAPH_VERBOSE"}
    proc = run_command([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Subgraph backend" not in proc.stderr + proc.stdout


def test_mxnet_error_line_names_the_operator_and_stays_short():
    x = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=4, name="fc_named")
    with pytest.raises(mx.base.MXNetError) as caught:
        x.infer_type(data=np.float16, fc_named_weight=np.float32)
    text = one_line(caught.value)
    assert "fc_named" in text and "\n" not in text
    assert "Stack trace" not in text and len(text) <= 400


def test_type_error_of_a_big_graph_lists_a_few_inputs_not_all():
    from mxmixed.emulation import emulate_symbol
    x = mx.sym.var("data")
    for i in range(40):
        x = mx.sym.FullyConnected(x, num_hidden=4, name="fc%d" % i)
    x = mx.sym.elemwise_add(x, mx.sym.var("other"), name="add")
    types = {n: np.float16 for n in x.list_arguments()}
    types["other"] = np.float32
    with pytest.raises(TypeError) as caught:
        emulate_symbol(x, types)
    text = str(caught.value)
    # 82 inputs: data, other and 40 x (weight, bias); four are named, 78 counted
    assert "add" in text and "other: float32" in text and "78 float16 more" in text
    assert len(text) < 500 and "fc39_weight" not in text
