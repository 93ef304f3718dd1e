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


@pytest.fixture(scope="session")
def session_libraries():
    """The paths of the session's two rounding libraries (the plain one, the oneDNN-layout
    one) in its cache: tests/conftest.py seeds the cache from the ones ``make`` built, else
    they are built here once, under the cache's lock. Skipped as ``op`` is where they cannot
    be built."""
    try:
        return _round16.build(), _round16.build(layouts=True)
    except RuntimeError as err:
        pytest.skip("the rounding libraries cannot be built here: %s" % err)
