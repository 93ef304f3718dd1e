"""The CPU has one home, _core/devices: its flags come from one reader of /proc/cpuinfo, and
cpu_pinned and cpu_shared arrays are CPU memory, which MXNet computes with its CPU kernels (a
float16 GEMM fails on them as on 'cpu'), so the emulation serves them too."""
import io

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

from mxmixed import emulation
from mxmixed._core import devices

CPU_CONTEXTS = [mx.cpu(), mx.cpu_pinned(), mx.Context("cpu_shared", 0)]


@pytest.mark.parametrize("ctx", CPU_CONTEXTS + [None], ids=str)
def test_cpu_pinned_and_shared_memory_count_as_the_cpu(ctx):
    assert devices.is_cpu(ctx)


def test_a_gpu_context_is_not_the_cpu():
    assert not devices.is_cpu(mx.gpu(0))


def test_the_flags_are_the_words_of_the_cpuinfo_flags_line(monkeypatch):
    text = "processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu avx2 avx512f\nbugs\t\t: spectre\n"
    monkeypatch.setattr(devices, "open", lambda path: io.StringIO(text), raising=False)
    assert devices.cpu_flags() == {"fpu", "avx2", "avx512f"}


def test_flags_that_cannot_be_read_are_none_and_bfloat16_is_assumed_to_run(monkeypatch):
    def unreadable(path):
        raise FileNotFoundError(path)
    monkeypatch.setattr(devices, "open", unreadable, raising=False)
    assert devices.cpu_flags() is None
    assert devices.bfloat16_native() is None
    if mx.runtime.Features().is_enabled("MKLDNN"):
        assert devices.bfloat16_support() == (True, "")


@pytest.mark.parametrize("ctx", CPU_CONTEXTS, ids=str)
def test_a_float16_gemm_on_cpu_memory_runs_under_the_emulation(ctx):
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((3, 8)), rng.standard_normal((4, 8))
    with emulation.emulated():
        expected = mx.nd.FullyConnected(mx.nd.array(x, dtype="float16"),
                                        mx.nd.array(w, dtype="float16"),
                                        no_bias=True, num_hidden=4).asnumpy()
        got = mx.nd.FullyConnected(mx.nd.array(x, ctx=ctx, dtype="float16"),
                                   mx.nd.array(w, ctx=ctx, dtype="float16"),
                                   no_bias=True, num_hidden=4)
        assert got.dtype == np.float16
        np.testing.assert_array_equal(got.asnumpy(), expected)


@pytest.mark.parametrize("ctx", CPU_CONTEXTS[1:], ids=str)
def test_a_hybridized_float16_block_on_cpu_memory_runs_under_the_emulation(ctx):
    net = gluon.nn.Dense(4, in_units=8)
    net.initialize(ctx=ctx)
    net.cast("float16")
    net.hybridize()
    x = mx.nd.ones((2, 8), ctx=ctx, dtype="float16")
    with emulation.emulated():
        out = net(x)
        assert out.dtype == np.float16 and out.asnumpy().shape == (2, 4)
