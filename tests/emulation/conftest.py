"""Fixtures of the emulation's tests."""
import pytest

from mxmixed.emulation import _round16


@pytest.fixture(scope="module")
def op():
    """The float32 carry's rounding op, built on first use; the test is skipped without a
    compiler (the rounding library's own tests say why)."""
    name = _round16.round16_op()
    if name is None:
        pytest.skip("no C++ compiler here: " + _round16.status())
    return name
