"""``_core/dtypes`` holds MXNet 1.9.1's dtype codes without importing MXNet: its copy is MXNet's
own table, and a dtype's code is found as MXNet finds it."""
import sys

import numpy as np
import pytest
from mxnet.ndarray.ndarray import _DTYPE_MX_TO_NP, _DTYPE_NP_TO_MX

from conftest import ROOT, run_command
from mxmixed._core.dtypes import BFLOAT16, MXNET_CODES, mxnet_code


def test_the_codes_are_mxnets_own_table():
    assert MXNET_CODES == {code: np.dtype(t) for code, t in _DTYPE_MX_TO_NP.items() if t is not None}
    assert BFLOAT16 == np.dtype(_DTYPE_MX_TO_NP[12])


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "uint8", "int32", "int8",
                                   "int64", "bool", ">f4", "<f2"])
def test_a_dtypes_code_is_the_one_mxnet_looks_up(dtype):
    assert mxnet_code(dtype) == _DTYPE_NP_TO_MX[np.dtype(dtype).type]


def test_bfloat16s_code_is_12_as_in_mxnet():
    assert mxnet_code(BFLOAT16) == _DTYPE_NP_TO_MX[np.dtype(_DTYPE_MX_TO_NP[12])] == 12


@pytest.mark.parametrize("dtype", ["int16", "uint16", [("x", np.uint16)]])
def test_a_dtype_mxnet_has_no_code_for_is_a_key_error(dtype):
    with pytest.raises(KeyError):
        mxnet_code(dtype)


def test_importing_the_dtypes_loads_no_mxnet():
    code = "import sys, mxmixed._core.dtypes; print('mxnet' in sys.modules)"
    proc = run_command([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       check=True)
    assert proc.stdout.split() == ["False"], proc.stderr[-2000:]
