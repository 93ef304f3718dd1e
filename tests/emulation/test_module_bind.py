"""The Module API binds an emulated float16 graph from the data shape alone, as on a GPU."""
import mxnet as mx
import numpy as np
from mxnet.contrib import amp

from mxmixed import emulation


def _conv_bn_fc():
    x = mx.sym.Convolution(mx.sym.var("data"), num_filter=4, kernel=(3, 3), name="conv")
    x = mx.sym.BatchNorm(x, fix_gamma=False, name="bn")
    x = mx.sym.FullyConnected(x, num_hidden=3, name="fc")
    return mx.sym.SoftmaxOutput(x, name="softmax")


def _bound(sym, dtype):
    mod = mx.mod.Module(sym, data_names=["data"], label_names=["softmax_label"],
                        context=mx.cpu())
    mod.bind(data_shapes=[mx.io.DataDesc("data", (2, 3, 8, 8), dtype)],
             label_shapes=[mx.io.DataDesc("softmax_label", (2,), dtype)])
    mod.init_params(mx.init.Xavier())
    return mod


def _shapes(mod):
    arg, aux = mod.get_params()
    return {k: (v.shape, v.dtype) for k, v in list(arg.items()) + list(aux.items())}


def test_module_binds_float16_conv_bn_fc_from_data_shape():
    sym = _conv_bn_fc()
    plain = {k: s for k, (s, _) in _shapes(_bound(sym, np.float32)).items()}
    with emulation.emulated():
        mod = _bound(sym, np.float16)
        batch = mx.io.DataBatch([mx.nd.ones((2, 3, 8, 8))], [mx.nd.array([0, 1])])
        mod.forward_backward(batch)
        out = mod.get_outputs()[0]
    assert {k: s for k, (s, _) in _shapes(mod).items()} == plain
    assert np.isfinite(out.asnumpy()).all()


def test_module_binds_amp_converted_model_from_data_shape():
    data = mx.sym.var("data")
    x = mx.sym.Convolution(data, num_filter=10, kernel=(2, 3), name="conv")
    x = mx.sym.BatchNorm(x, fix_gamma=False, name="bn")
    fc = mx.sym.FullyConnected(x, num_hidden=10, name="fc")
    mod = mx.mod.Module(fc, data_names=["data"], label_names=None, context=mx.cpu())
    mod.bind(data_shapes=[("data", (1, 3, 12, 12))])
    mod.init_params()
    sym, arg, aux = amp.convert_model(mod.symbol, *mod.get_params(),
                                      target_dtype_ops=["Convolution"])
    with emulation.emulated():
        converted = mx.mod.Module(sym, data_names=["data"], label_names=None, context=mx.cpu())
        converted.bind(data_shapes=[("data", (1, 3, 12, 12))])
        converted.set_params(arg, aux)
        converted.forward(mx.io.DataBatch([mx.nd.ones((1, 3, 12, 12))]), is_train=False)
        out = converted.get_outputs()[0].asnumpy()
    assert arg["fc_weight"].dtype == np.float16
    assert out.shape == (1, 10) and np.isfinite(out).all()
