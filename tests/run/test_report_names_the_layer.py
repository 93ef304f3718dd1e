"""``mxmixed run --report`` names the layer whose parameter's gradient first held inf or NaN:
the Gluon block that holds it (with its path in the net), or the op of a Module's graph that
reads it."""
import json
import textwrap

import mxnet as mx
from mxnet import gluon

from mxmixed.cli._run import run_script
from mxmixed.diagnostics.steps import LAYER_FROM, layer_of_parameter

# An overflow that happens by itself, in the backward pass of the middle layer only: its input
# is 240 everywhere and its output gradient 300, so its weight gradient (a sum over 64 rows)
# is 64 * 300 * 240 = 4.6e6, past float16's 65504; every other gradient stays finite (the
# middle layer's weights of 1e-3 keep the gradient it passes back small).
GLUON_SCRIPT = """
    import mxnet as mx
    from mxnet import autograd, gluon

    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(8, in_units=8), gluon.nn.Dense(8, in_units=8),
            gluon.nn.Dense(1, in_units=8))
    net.initialize(mx.init.Zero())
    for layer, value in zip(net, (30.0, 1e-3, 1.0)):
        layer.weight.set_data(mx.nd.full(layer.weight.shape, value))
    net.cast("float16")
    net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                            update_on_kvstore=False)
    with autograd.record():
        loss = net(mx.nd.ones((64, 8), dtype="float16")).astype("float32").sum() * 300
    loss.backward()
    trainer.step(1)
"""

MODULE_SCRIPT = """
    import mxnet as mx

    data = mx.sym.var("data")
    fc1 = mx.sym.FullyConnected(data, num_hidden=4, name="fc1")
    fc2 = mx.sym.FullyConnected(mx.sym.relu(fc1), num_hidden=2, name="fc2")
    mod = mx.mod.Module(mx.sym.SoftmaxOutput(fc2, name="softmax"), context=mx.cpu())
    mod.bind(data_shapes=[("data", (4, 3))], label_shapes=[("softmax_label", (4,))])
    mod.init_params()
    mod.init_optimizer()
    mod.forward_backward(mx.io.DataBatch([mx.nd.ones((4, 3))], [mx.nd.zeros((4,))]))
    group = mod._exec_group
    group.grad_arrays[group.param_names.index("fc2_weight")][0][:] = float("inf")  # planted
    mod.update()
"""


def _first_nonfinite(tmp_path, body):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(body))
    report = tmp_path / "report.json"
    assert run_script(str(script), [], report=str(report)) == 0
    return json.loads(report.read_text())["summary"]["first_nonfinite"]


def test_report_names_the_gluon_block_where_a_backward_overflow_began(tmp_path):
    found = _first_nonfinite(tmp_path, GLUON_SCRIPT)
    param = found["tensor"][len("gradient of "):]  # dense<n>_weight: n counts this process's
    assert found["parameters_affected"] == 1 and param.endswith("_weight")
    assert found["layer"] == "HybridSequential[1] (Dense, %s)" % param[:-len("_weight")]
    assert found["layer_from"] == "block"


def test_report_names_the_op_of_a_module_graph_that_reads_the_parameter(tmp_path):
    found = _first_nonfinite(tmp_path, MODULE_SCRIPT)
    assert found["tensor"] == "gradient of fc2_weight"
    assert found["layer"] == "fc2 (FullyConnected)" and found["layer_from"] == "graph"


def test_a_symbol_block_parameter_is_named_by_the_op_that_reads_it():
    data = mx.sym.var("data")
    out = mx.sym.FullyConnected(mx.sym.relu(data), num_hidden=2, name="head")
    block = gluon.SymbolBlock(out, data)
    block.initialize()
    params = list(block.collect_params().values())
    found = layer_of_parameter("head_weight", params)
    assert found == {"layer": "head (FullyConnected)", "layer_from": "graph"}
    assert found["layer_from"] in LAYER_FROM


def test_a_parameter_no_block_holds_is_named_by_its_prefix():
    found = layer_of_parameter("stage2_conv1_weight", [])
    assert found == {"layer": "stage2_conv1", "layer_from": "name"}
