"""The rounding library works in a process that has ``libmxnet.so`` in its global namespace.

Horovod's MXNet module loads its library with ``RTLD_GLOBAL``, which puts its dependency
``libmxnet.so`` in the global namespace. ``libmxnet.so`` exports its own build of MXNet's
extension API (``mxnet::ext::``, built with the other ``std::string`` ABI), and the rounding
library once exported every ``mxnet::ext::`` symbol it defined: the dynamic linker bound its
references to libmxnet's, and its static initialiser died with SIGSEGV inside ``MXLoadLib``.
The library now exports only the loader's entry points. Each run is a fresh interpreter,
bounded by ``HANG_S``, whose cache holds copies of the session's libraries (built by
``_round16.build``, which sets what they export; a compile here would only repeat that build).
"""
import os
import sys

import pytest

from conftest import ROOT, run_command
from .test_round16_library import STEP, seed_cache

# What horovod.mxnet does before mxmixed runs: import MXNet, then load a library with
# RTLD_GLOBAL whose dependency is libmxnet.so (here: libmxnet.so itself).
GLOBAL_LIBMXNET = r"""
import ctypes, os
import mxnet
ctypes.CDLL(os.path.join(os.path.dirname(mxnet.__file__), "libmxnet.so"), mode=ctypes.RTLD_GLOBAL)
"""
# The oneDNN-layout compute (the second library) ran on blocked arrays.
CHECKS = r"""
print("BLOCKED %d" % _round16.blocked_calls())
"""


def run_step(cache, global_libmxnet):
    code = (GLOBAL_LIBMXNET if global_libmxnet else "") + STEP + CHECKS
    env = dict(os.environ, PYTHONPATH=ROOT, MXMIXED_CACHE_DIR=str(cache),
               MXMIXED_EMULATION_KEEP_LAYOUTS="1")
    proc = run_command([sys.executable, "-c", code], capture_output=True, text=True,
                       env=env, cwd=ROOT)
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
    return proc, lines


@pytest.mark.slow
def test_the_rounding_op_loads_and_rounds_after_libmxnet_went_global(tmp_path,
                                                                     session_libraries):
    seed_cache(tmp_path / "global", session_libraries)
    proc, lines = run_step(tmp_path / "global", global_libmxnet=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert lines["STATUS"] == "built and loaded; keeps oneDNN layouts"
    assert int(lines["BLOCKED"]) > 0
    seed_cache(tmp_path / "local", session_libraries)
    reference, ref_lines = run_step(tmp_path / "local", global_libmxnet=False)
    assert reference.returncode == 0, reference.stderr[-3000:]
    assert lines["DIGEST"] == ref_lines["DIGEST"]
