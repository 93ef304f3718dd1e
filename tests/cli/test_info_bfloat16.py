"""``mxmixed info`` says whether bfloat16 runs natively, emulated by oneDNN or not at all, and
``mxmixed info --probe`` times float32 against bfloat16 here."""
import mxnet as mx
import numpy as np
import pytest

from mxmixed import cli
from mxmixed.diagnostics import machine
from mxmixed._core import amx, devices

CORE = {"avx2", "avx512f", "avx512bw", "avx512vl", "avx512dq"}


@pytest.mark.parametrize("flags, start", [
    (CORE | {"avx512_bf16"}, "native: oneDNN runs bfloat16 with this CPU's AVX512-BF16"),
    (CORE | {"avx512_bf16", "amx_bf16", "amx_tile"}, "native: oneDNN runs bfloat16 with this "
                                                     "CPU's AMX-BF16"),
    (CORE, "emulated by oneDNN: AVX-512 without AVX512-BF16 or AMX, so bfloat16 runs but is "
           "slower than float32"),
    ({"avx2", "fma"}, "cannot run: MXNet's bfloat16 ops (oneDNN) need a CPU with AVX-512"),
])
def test_info_names_how_bfloat16_runs_from_the_cpu_flags(monkeypatch, flags, start):
    monkeypatch.setattr(devices, "cpu_flags", lambda: flags)
    assert machine.collect()["bfloat16"].startswith(start)


def test_probe_answers_cannot_run_and_exits_0_where_bfloat16_cannot_run(monkeypatch, capsys):
    monkeypatch.setattr(devices, "cpu_flags", lambda: {"avx2"})
    assert cli.main(["info", "--probe"]) == 0
    captured = capsys.readouterr()
    line = [l for l in captured.out.splitlines() if l.startswith("bfloat16 probe:")]
    assert len(line) == 1 and "bfloat16 cannot run here" in line[0] and "avx512f" in line[0]
    assert captured.err == ""


@pytest.mark.skipif(not devices.bfloat16_support()[0],
                    reason="bfloat16 cannot run here: %s" % devices.bfloat16_support()[1])
def test_probe_times_both_dtypes_and_its_bfloat16_input_really_is_bfloat16(capsys):
    cast = amx.to_bfloat16(mx.nd.array([1.0, 1.0 + 2.0 ** -9, 3.0]))
    assert cast.dtype == np.dtype([("bfloat16", np.uint16)])
    # 1 + 2**-9 lies below bfloat16's step at 1 (2**-7 / 2): it rounds to 1
    assert cast.astype("float32").asnumpy().tolist() == [1.0, 1.0, 3.0]
    assert cli.main(["info", "--probe"]) == 0
    out = capsys.readouterr().out
    assert "bfloat16 probe (medians of interleaved runs on this machine):" in out
    assert out.count("ms  speed-up") == 2


EMULATED = CORE  # AVX-512 without AVX512-BF16 or AMX


def test_amp_scope_says_in_one_line_that_emulated_bfloat16_is_slow(monkeypatch):
    import mxmixed

    monkeypatch.setattr(devices, "cpu_flags", lambda: EMULATED)
    with pytest.warns(UserWarning, match="emulated by oneDNN .*slower than float32") as got:
        with mxmixed.amp_scope(target_dtype="bfloat16"):
            pass
    assert len(got) == 1 and "\n" not in str(got[0].message)


def test_load_bfloat16_and_convert_say_it_where_bfloat16_is_emulated(monkeypatch, tmp_path,
                                                                      capsys):
    from mxnet import gluon

    from mxmixed import symbolic

    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(8, activation="relu"), gluon.nn.Dense(3))
    net.initialize()
    net.hybridize()
    net(mx.nd.ones((1, 4)))
    prefix = str(tmp_path / "m")
    net.export(prefix)
    monkeypatch.setattr(devices, "cpu_flags", lambda: EMULATED)
    assert cli.main(["convert", prefix, "0", "--out", prefix + "-bf16", "--dtype",
                     "bfloat16"]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "slower than float32" in err
    with pytest.warns(UserWarning, match="slower than float32"):
        symbolic.load_bfloat16(prefix + "-bf16", 0)


def test_native_bfloat16_loads_without_a_warning(monkeypatch, tmp_path):
    import warnings

    from mxnet import gluon

    from mxmixed import symbolic

    net = gluon.nn.Dense(3)
    net.initialize()
    net.hybridize()
    net(mx.nd.ones((1, 4)))
    prefix = str(tmp_path / "d")
    net.export(prefix)
    symbolic.convert(*mx.model.load_checkpoint(prefix, 0), target_dtype="bfloat16").save(
        prefix + "-bf16")
    monkeypatch.setattr(devices, "cpu_flags", lambda: CORE | {"avx512_bf16"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        symbolic.load_bfloat16(prefix + "-bf16", 0)


@pytest.mark.parametrize("status, shown", [
    ("on", "oneDNN's AMX kernels: on (asked for at `import mxmixed`"),
    ("off: requested after MXNet had run oneDNN ops, which keep the instruction set they picked "
     "(a bfloat16 GEMM ran 0.63x float32 here)", "oneDNN's AMX kernels: off: requested after"),
])
def test_info_says_amx_is_on_only_where_the_request_says_so(monkeypatch, status, shown):
    monkeypatch.setattr(devices, "cpu_flags", lambda: CORE | {"avx512_bf16", "amx_bf16",
                                                              "amx_tile"})
    monkeypatch.setattr(amx, "amx_status", lambda: status)
    line = machine.collect()["bfloat16"]
    assert shown in line and "\n" not in line
    assert ("kernels: on" in line) == status.startswith("on")
