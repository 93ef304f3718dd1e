"""Shared fixtures: every test starts and ends with emulation off and seeded generators."""
import os
import stat
import subprocess
import sys
import tempfile

import numpy as np
import pytest

os.environ.setdefault("MPLBACKEND", "Agg")
# the emulation's rounding op is compiled on first use: into this session's own directory
os.environ.setdefault("MXMIXED_CACHE_DIR", tempfile.mkdtemp(prefix="mxmixed-cache-"))

import mxnet as mx  # noqa: E402

from mxmixed import emulation  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _clean_emulation_state():
    emulation.disable()
    mx.random.seed(0)
    np.random.seed(0)
    yield
    emulation.disable()


def run_python(code, timeout=300, env=None):
    """Run Python code in a fresh interpreter (for AMP, whose patches cannot be undone).

    Returns the CompletedProcess; stdout and stderr are text.
    """
    full_env = dict(os.environ, PYTHONPATH=ROOT, **(env or {}))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, env=full_env, cwd=ROOT)


def pytest_collection_modifyitems(config, items):
    """The tutorial notebooks (nbval's cells) are slow: they train models end to end."""
    tutorials = os.path.join(ROOT, "tutorials")
    for item in items:
        if str(item.path).startswith(tutorials + os.sep):
            item.add_marker(pytest.mark.slow)


def pytest_sessionfinish(session, exitstatus):
    """Fail the session if anything in it replaced /dev/null (a root process can: MXNet's
    profiler once re-created its output file there)."""
    if not stat.S_ISCHR(os.stat(os.devnull).st_mode):
        sys.stderr.write("\nFAILED: %s is no longer a character device at the end of the "
                         "session; a test or a benchmark wrote over it\n" % os.devnull)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
