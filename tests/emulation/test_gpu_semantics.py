"""Where MXNet 1.9.1's CPU kernel answers differently from its GPU kernel, the emulation gives
the GPU's answer: ROIAlign's padding ROIs and float16 CSR x dense ``dot``.

Each case first shows the CPU difference on plain MXNet, then the emulated result.
"""
import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

from mxmixed import emulation

F16 = np.float16
ROI_ATTRS = dict(pooled_size=(2, 2), spatial_scale=0.5, sample_ratio=2)


def _roi_inputs(dtype):
    rng = np.random.RandomState(0)
    data = mx.nd.array(rng.uniform(-1, 1, (2, 3, 8, 8)), dtype=dtype)
    rois = mx.nd.array([[0, 0, 0, 9, 9], [-1, 0, 0, 0, 0], [1, 2, 2, 12, 14],
                        [-1, 0, 0, 0, 0]], dtype=dtype)
    return data, rois


def _valid_rows(data, rois):
    """ROIAlign of the real ROIs alone (rows 0 and 2), on plain MXNet."""
    return mx.nd.contrib.ROIAlign(data, rois[[0, 2]], **ROI_ATTRS).asnumpy()


def test_plain_cpu_roi_align_leaves_padding_rows_unwritten():
    data, rois = _roi_inputs(np.float32)
    out = mx.nd.full((4, 3, 2, 2), np.nan)
    mx.nd.contrib.ROIAlign(data, rois, out=out, **ROI_ATTRS)
    assert np.isnan(out.asnumpy()[1]).any()  # the GPU writes zeros there


@pytest.mark.parametrize("dtype", [np.float32, F16])
def test_emulated_roi_align_zeroes_padding_rows(dtype):
    data, rois = _roi_inputs(dtype)
    valid = _valid_rows(data, rois)
    out = mx.nd.full((4, 3, 2, 2), np.nan, dtype=dtype)
    with emulation.emulated():
        mx.nd.contrib.ROIAlign(data, rois, out=out, **ROI_ATTRS)
        fresh = mx.nd.contrib.ROIAlign(data, rois, **ROI_ATTRS).asnumpy()
    for result in (out.asnumpy(), fresh):
        assert result.dtype == dtype
        assert (result[[1, 3]] == 0).all()
        np.testing.assert_array_equal(result[[0, 2]], valid)


class _RoiBlock(gluon.HybridBlock):
    def hybrid_forward(self, F, data, rois):
        return F.contrib.ROIAlign(data, rois, **ROI_ATTRS)


@pytest.mark.parametrize("hybridize", [False, True], ids=["imperative", "hybridized"])
def test_emulated_roi_align_gradient_skips_padding_rois(hybridize):
    data, rois = _roi_inputs(np.float32)
    net = _RoiBlock()
    if hybridize:
        net.hybridize()
    grads = []
    for emulate, batch in ((True, rois), (False, rois[[0, 2]])):
        x = data.copy()
        x.attach_grad()
        with emulation.emulated() if emulate else autograd.pause(False):
            with autograd.record():
                out = net(x, batch)
            out.backward(mx.nd.ones_like(out))
        grads.append((out.asnumpy(), x.grad.asnumpy()))
    (out, grad), (valid, valid_grad) = grads
    assert (out[[1, 3]] == 0).all()
    np.testing.assert_array_equal(out[[0, 2]], valid)
    np.testing.assert_allclose(grad, valid_grad, rtol=1e-6, atol=1e-7)


def test_bound_symbol_roi_align_zeroes_padding_rows():
    data, rois = _roi_inputs(F16)
    sym = mx.sym.contrib.ROIAlign(mx.sym.var("data"), mx.sym.var("rois"), name="roi",
                                  **ROI_ATTRS)
    with emulation.emulated():
        exe = sym.simple_bind(mx.cpu(), grad_req="null",
                              type_dict={"data": F16, "rois": F16},
                              data=data.shape, rois=rois.shape)
        exe.arg_dict["data"][:] = data
        exe.arg_dict["rois"][:] = rois
        exe.outputs[0][:] = np.nan
        out = exe.forward(is_train=False)[0].asnumpy()
    assert list(exe.output_dict) == ["roi_output"]
    assert (out[[1, 3]] == 0).all()
    np.testing.assert_array_equal(out[[0, 2]], _valid_rows(data, rois))


def _csr(rows, columns, seed):
    rng = np.random.RandomState(seed)
    dense = rng.uniform(-2, 2, (rows, columns)) * (rng.uniform(size=(rows, columns)) < 0.3)
    return dense.astype(F16)


def _gpu_reference(a, b, rounded_products):
    """float32 sums of the float16 operands' products (each rounded to float16 if asked)."""
    products = a.astype(np.float32)[:, :, None] * b.astype(np.float32)[None, :, :]
    if rounded_products:
        products = products.astype(F16).astype(np.float32)
    return products.sum(axis=1, dtype=np.float32).astype(F16)


def test_plain_cpu_refuses_float16_csr_dot():
    a, b = _csr(8, 6, 0), np.ones((6, 3), F16)
    with pytest.raises(mx.base.MXNetError, match="32-bit and 64-bit"):
        mx.nd.sparse.dot(mx.nd.array(a, dtype=F16).tostype("csr"),
                         mx.nd.array(b, dtype=F16)).wait_to_read()


@pytest.mark.parametrize("columns", [3, 16], ids=["vector_kernel", "scalar_kernel"])
@pytest.mark.parametrize("dot", ["nd.dot", "nd.sparse.dot"])
def test_emulated_float16_csr_dot_is_the_gpus(columns, dot):
    a = _csr(64, 48, 1)
    b = np.random.RandomState(2).uniform(-2, 2, (48, columns)).astype(F16)
    with emulation.emulated():
        func = mx.nd.dot if dot == "nd.dot" else mx.nd.sparse.dot
        out = func(mx.nd.array(a, dtype=F16).tostype("csr"), mx.nd.array(b, dtype=F16))
        out = out.asnumpy()
    scalar = columns > 4  # MXNet's GPU kernel choice: half_t products beyond 4 columns
    want = _gpu_reference(a, b, rounded_products=scalar)
    other = _gpu_reference(a, b, rounded_products=not scalar)
    assert out.dtype == F16
    assert not np.array_equal(want, other)  # the data tells the two kernels apart
    np.testing.assert_array_equal(out, want)
