"""The rounding library is loaded only when it is whole and ours, and only where MXNet agrees.

A ``round16-*.so`` in the cache truncated to 4096 bytes or half its size once killed the process
with SIGBUS inside ``MXLoadLib``, and a library planted under the predictable name in a cache
folder others can write was loaded (its constructor ran). Now each build records size and
sha256 beside the library; a library that does not match, or a file or folder that is not this
user's or that others can write, is never loaded: it is rebuilt (in a private folder when the
folder is not safe), or the emulation falls back, with one warning and the same results.
The oneDNN-layout compute reads MXNet 1.9.1's internal array struct: it is installed only when
MXNet is that release and a probe reads back what MXNet wrote.
"""
import hashlib
import json
import logging
import os
import subprocess
import sys

import pytest

import mxnet as mx

from conftest import ROOT, run_command
from mxmixed.emulation import _round16, _round16_build

OTHER_UID = 4242


def fake_build(monkeypatch, calls):
    """Builds that only write a small file: the folder and record logic without a compiler."""
    def build_into(path, compiler, cxx, sources, flags, exports=(), lock=None):
        calls.append(path)
        tmp = path + ".new"
        with open(tmp, "wb") as handle:
            handle.write(b"\x7fELF library of %d bytes" % len(calls))
        os.chmod(tmp, 0o755)
        with open(tmp, "rb") as handle:
            data = handle.read()
        _round16_build._write_own(_round16_build._record_of(path), json.dumps({
            "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}).encode(), 0o644)
        os.replace(tmp, path)
    monkeypatch.setattr(_round16_build, "_build_into", build_into)
    monkeypatch.setattr(_round16_build, "_PRIVATE", {})


def build_here(folder):
    return _round16_build._compile("round16", [_round16_build.KERNEL], [], [], str(folder), None)


@pytest.mark.parametrize("mode", [0o777, 0o757, 0o775, 0o722])
def test_a_folder_others_can_write_is_not_built_in(monkeypatch, caplog, tmp_path, mode):
    calls = []
    fake_build(monkeypatch, calls)
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(mode)
    with caplog.at_level(logging.WARNING, logger="mxmixed.emulation"):
        path = build_here(folder)
        assert build_here(folder) == path  # one private folder per process, one warning
    assert os.path.dirname(path) != str(folder) and os.listdir(str(folder)) == []
    assert (os.stat(os.path.dirname(path)).st_mode & 0o777) == 0o700
    assert len(caplog.records) == 1 and "writable by" in caplog.text, caplog.text


def test_a_folder_of_another_user_is_not_built_in(monkeypatch, caplog, tmp_path):
    calls = []
    fake_build(monkeypatch, calls)
    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o755)
    os.chown(str(folder), OTHER_UID, OTHER_UID)
    with caplog.at_level(logging.WARNING, logger="mxmixed.emulation"):
        path = build_here(folder)
    assert not path.startswith(str(folder))
    assert len(caplog.records) == 1 and "belongs to uid %d" % OTHER_UID in caplog.text


def test_the_default_folder_made_group_writable_by_an_earlier_version_is_tightened(
        monkeypatch, caplog, tmp_path):
    """Earlier versions made ~/.cache/mxmixed with the umask's mode (775 under umask 002)."""
    fake_build(monkeypatch, [])
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("MXMIXED_CACHE_DIR")
    folder = tmp_path / ".cache" / "mxmixed"
    folder.mkdir(parents=True)
    folder.chmod(0o775)
    with caplog.at_level(logging.WARNING, logger="mxmixed.emulation"):
        path = _round16_build._compile("round16", [_round16_build.KERNEL], [], [], None, None)
    assert os.path.dirname(path) == str(folder) and caplog.records == []
    assert (os.stat(str(folder)).st_mode & 0o777) == 0o755


def test_a_missing_folder_is_made_private(monkeypatch, tmp_path):
    fake_build(monkeypatch, [])
    path = build_here(tmp_path / "new" / "cache")
    assert os.path.dirname(path) == str(tmp_path / "new" / "cache")
    assert (os.stat(os.path.dirname(path)).st_mode & 0o777) == 0o700


def damage_by(kind, path):
    record = _round16_build._record_of(path)
    if kind == "truncated to 4096 bytes":
        os.truncate(path, 4096)
    elif kind == "truncated to half":
        os.truncate(path, os.path.getsize(path) // 2)
    elif kind == "replaced, same size":
        with open(path, "r+b") as handle:
            handle.seek(8)
            handle.write(b"X")
    elif kind == "another user's":
        os.chown(path, OTHER_UID, OTHER_UID)
    elif kind == "writable by others":
        os.chmod(path, 0o777)
    elif kind == "a link":
        os.rename(path, path + ".real")
        os.symlink(path + ".real", path)
    elif kind == "record of another user":
        os.chown(record, OTHER_UID, OTHER_UID)
    elif kind == "record not json":
        with open(record, "w") as handle:
            handle.write("{")


DAMAGE = ["truncated to 4096 bytes", "truncated to half", "replaced, same size",
          "another user's", "writable by others", "a link", "record of another user",
          "record not json"]


@pytest.mark.parametrize("kind", DAMAGE)
def test_a_damaged_or_foreign_library_is_rebuilt_with_one_warning(monkeypatch, caplog, tmp_path,
                                                                  kind):
    calls = []
    fake_build(monkeypatch, calls)
    path = build_here(tmp_path)
    with open(path, "rb") as handle:
        good = handle.read()
    if kind.startswith("truncated"):  # a real library's size, so that the cuts land inside
        with open(path, "wb") as handle:
            handle.write(good * 1000)
        _round16_build._write_own(_round16_build._record_of(path), json.dumps({
            "size": len(good) * 1000, "sha256": hashlib.sha256(
                good * 1000).hexdigest()}).encode(), 0o644)
    damage_by(kind, path)
    assert _round16_build._damage(path)
    with caplog.at_level(logging.WARNING, logger="mxmixed.emulation"):
        assert build_here(tmp_path) == path
    assert len(calls) == 2 and _round16_build._damage(path) is None
    assert not os.path.islink(path) and os.stat(path).st_uid == os.geteuid()
    assert len(caplog.records) == 1 and "rebuilt" in caplog.text, caplog.text


def test_an_unrecorded_library_is_rebuilt_quietly(monkeypatch, caplog, tmp_path):
    """A library without its record was built before records existed (or never finished)."""
    calls = []
    fake_build(monkeypatch, calls)
    path = build_here(tmp_path)
    os.remove(_round16_build._record_of(path))
    with caplog.at_level(logging.WARNING, logger="mxmixed.emulation"):
        build_here(tmp_path)
    assert len(calls) == 2 and caplog.records == []


def test_a_damaged_library_that_cannot_be_rebuilt_is_refused(monkeypatch, tmp_path):
    fake_build(monkeypatch, [])
    path = build_here(tmp_path)
    os.truncate(path, 4)

    def fail(*args, **kwargs):
        raise RuntimeError("g++ failed: no space left")

    monkeypatch.setattr(_round16_build, "_build_into", fail)
    with pytest.raises(RuntimeError, match="damaged or not ours .* rebuilding it failed: g.. "
                                           "failed: no space left"):
        build_here(tmp_path)


# A float16 conv-relu-conv step through the emulation, in a fresh interpreter: its bytes, the
# rounding op's status and the warnings. Convolution and relu read any layout, so every route
# (kept layouts, plain layouts, cast pairs) gives the same bytes.
STEP = r"""
import hashlib, logging, sys
import numpy as np
import mxnet as mx
from mxmixed import emulation
from mxmixed.emulation import _round16
logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="WARNING %(message)s")
x = mx.sym.var("data")
c1 = mx.sym.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=16, no_bias=True, name="c1")
r = mx.sym.Activation(c1, act_type="relu")
c2 = mx.sym.Convolution(r, kernel=(3, 3), pad=(1, 1), num_filter=16, no_bias=True, name="c2")
types = {"data": np.float16, "c1_weight": np.float16, "c2_weight": np.float16}
exe = emulation.emulate_symbol(c2, types).simple_bind(mx.cpu(), data=(2, 16, 8, 8),
                                                      type_dict=types)
rng = np.random.RandomState(0)
for name in sorted(exe.arg_dict):
    exe.arg_dict[name][:] = rng.standard_normal(exe.arg_dict[name].shape).astype(np.float16)
out = exe.forward(is_train=True)[0]
exe.backward([mx.nd.array(rng.standard_normal(out.shape) * 100, dtype=np.float16)])
digest = hashlib.sha256(out.asnumpy().tobytes())
for name in sorted(exe.grad_dict):
    digest.update(exe.grad_dict[name].asnumpy().tobytes())
print("STATUS " + _round16.status())
print("DIGEST " + digest.hexdigest())
"""


def step(cache, **env):
    env.setdefault("MXMIXED_EMULATION_KEEP_LAYOUTS", "1")
    full = dict(os.environ, PYTHONPATH=ROOT, MXMIXED_CACHE_DIR=str(cache), **env)
    proc = run_command([sys.executable, "-c", STEP], capture_output=True, text=True,
                       env=full, cwd=ROOT)
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("WARNING")]
    return proc.returncode, lines.get("STATUS"), lines.get("DIGEST"), warnings


def seed_cache(folder, session_libraries, cxx=None, layouts=(False, True)):
    """Copies of the session's libraries in ``folder``, under the names and with the records
    that builds with the compiler ``cxx`` give them (``layouts``: which of the two): a cache
    from which a run loads without compiling, for tests of loading rather than of compiling.
    The paths of the copies."""
    def copy_into(path, compiler, cxx, sources, flags, exports=(), lock=None):
        with open(session_libraries[_round16_build.LAYOUT_SOURCE in sources], "rb") as handle:
            data = handle.read()
        _round16_build._write_own(_round16_build._record_of(path), json.dumps({
            "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}).encode(), 0o644)
        _round16_build._write_own(path, data, 0o755)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_round16_build, "_build_into", copy_into)
        return [_round16.build(str(folder), cxx=cxx, layouts=which) for which in layouts]


@pytest.fixture(scope="module")
def cast_pairs(tmp_path_factory):
    code, status, digest, warnings = step(tmp_path_factory.mktemp("none"),
                                          CXX="/nonexistent/c++")
    assert code == 0 and "no C++ compiler" in status and len(warnings) == 1
    return digest


@pytest.mark.slow
@pytest.mark.parametrize("library, cut", [(0, "4096"), (1, "half")],
                         ids=["4096-round16", "half-round16-onednn"])
def test_a_truncated_cached_library_gives_one_warning_and_the_same_bytes(
        tmp_path, cast_pairs, session_libraries, library, cut):
    """A cache with both libraries, one of them cut: the run rebuilds it (a real compile, so
    each library and each cut once, not every pair; both cuts of one library:
    test_a_damaged_or_foreign_library_is_rebuilt_with_one_warning)."""
    cache = tmp_path / "cache"
    path = seed_cache(cache, session_libraries)[library]
    os.truncate(path, 4096 if cut == "4096" else os.path.getsize(path) // 2)
    code, status, digest, warnings = step(cache)  # once SIGBUS inside MXLoadLib
    assert code == 0 and digest == cast_pairs
    assert len(warnings) == 1 and "damaged or not ours" in warnings[0], warnings
    assert status == "built and loaded; keeps oneDNN layouts"  # rebuilt
    assert _round16_build._damage(path) is None


@pytest.mark.slow
def test_a_truncated_library_that_cannot_be_rebuilt_falls_back_to_the_cast_pairs(
        tmp_path, cast_pairs, session_libraries):
    """The libraries in the cache were built with a compiler that now fails: the damaged one
    cannot be rebuilt, so the emulation keeps the cast pairs, with one warning and the same
    bytes."""
    cxx = tmp_path / "cxx-broken"
    cxx.write_text("#!/bin/sh\nexit 1\n")
    cxx.chmod(0o755)
    cache = tmp_path / "cache"
    path = seed_cache(cache, session_libraries, cxx=str(cxx))[0]
    os.truncate(path, os.path.getsize(path) // 2)
    code, status, digest, warnings = step(cache, CXX=str(cxx))
    assert code == 0 and digest == cast_pairs
    assert len(warnings) == 1 and "rebuilding it failed" in warnings[0], warnings
    assert "rebuilding it failed" in status


PLANTED = r"""
#include <stdio.h>
__attribute__((constructor)) static void planted(void) {
  FILE* f = fopen("%s", "w");
  if (f) fclose(f);
}
"""


@pytest.mark.slow
def test_a_library_planted_in_a_folder_others_can_write_is_never_loaded(
        tmp_path, cast_pairs, session_libraries):
    """Planted under the predictable names (the session's libraries'), with forged records;
    the run builds its own (real compiles) in a private folder. Which modes count as
    writable by others: test_a_folder_others_can_write_is_not_built_in."""
    import shutil
    shared = tmp_path / "shared"
    shared.mkdir()
    marker = tmp_path / "constructor-ran"
    source = tmp_path / "planted.c"
    source.write_text(PLANTED % marker)
    for name in session_libraries:
        target = str(shared / os.path.basename(name))
        subprocess.run([shutil.which("gcc") or "gcc", "-shared", "-fPIC", str(source), "-o",
                        target], check=True)
        shutil.copy(name + ".sha256", target + ".sha256")  # a forged record would not help
        with open(target, "rb") as handle:
            data = handle.read()
        with open(target + ".sha256", "w") as handle:
            json.dump({"size": len(data),
                       "sha256": hashlib.sha256(data).hexdigest()}, handle)
    shared.chmod(0o777)
    code, status, digest, warnings = step(shared)
    assert not marker.exists()
    assert code == 0 and digest == cast_pairs
    assert status == "built and loaded; keeps oneDNN layouts"  # built in a private folder
    assert len(warnings) == 1 and "writable by" in warnings[0], warnings


def test_another_mxnet_release_is_refused_before_the_library_is_opened(monkeypatch, tmp_path):
    monkeypatch.setattr(_round16, "_mxnet_version", lambda: ("1.9.0", 10900))
    with pytest.raises(RuntimeError, match=r"reads MXNet 1\.9\.1's internals, and this is "
                                           r"MXNet 1\.9\.0 \(libmxnet\.so 10900\)"):
        _round16.keep_layouts(str(tmp_path / "never-opened.so"))


def test_this_mxnet_is_the_release_the_layout_compute_reads():
    assert _round16._mxnet_version() == _round16.MXNET_RELEASE == (mx.__version__, 10901)


def cxx_with(tmp_path, define):
    import shutil
    wrapper = tmp_path / "cxx-test"
    wrapper.write_text('#!/bin/sh\nexec "%s" "$@" %s\n' % (shutil.which("g++"), define))
    wrapper.chmod(0o755)
    return str(wrapper)


@pytest.fixture(scope="module")
def misread(tmp_path_factory):
    """``misread(shift)``: (compiler wrapper, oneDNN-layout library) built with a test-only
    define that moves the fields of the copied MKLDNNMemory by ``shift`` bytes; one real
    compile per shift and module."""
    built = {}

    def make(shift):
        if shift not in built:
            folder = tmp_path_factory.mktemp("misread")
            cxx = cxx_with(folder, "-DMXMIXED_ROUND16_TEST_MISREAD=%d" % shift)
            built[shift] = cxx, _round16.build(str(folder / "lib"), layouts=True, cxx=cxx)
        return built[shift]
    return make


@pytest.mark.slow
@pytest.mark.parametrize("shift", [8, 64])
def test_a_struct_copy_that_disagrees_with_libmxnet_is_refused_by_the_probe(misread, shift):
    """Built with a test-only define that moves the fields of the copied MKLDNNMemory, the
    library must refuse in keep_layouts() (nothing installed), not crash."""
    _, path = misread(shift)
    before = _round16.blocked_calls()
    with pytest.raises(RuntimeError, match="reads oneDNN arrays differently from this "
                                           r"libmxnet\.so \(probe check \d failed\)"):
        _round16.keep_layouts(path)
    assert _round16.blocked_calls() == before


@pytest.mark.slow
def test_a_refused_probe_leaves_the_plain_compute_with_one_warning(tmp_path, cast_pairs,
                                                                   session_libraries, misread):
    """End to end: the op keeps working on plain layouts, the same bytes, one warning. The
    plain library is the session's (the define changes only the oneDNN-layout one), the
    oneDNN-layout one the misread build's, both in the run's cache under that compiler's
    names."""
    import shutil
    cxx, misread_library = misread(8)
    seed_cache(tmp_path / "cache", session_libraries, cxx=cxx, layouts=[False])
    for name in (misread_library, misread_library + ".sha256"):
        shutil.copy2(name, str(tmp_path / "cache"))
    code, status, digest, warnings = step(tmp_path / "cache", CXX=cxx)
    assert code == 0 and digest == cast_pairs
    assert status.startswith("built and loaded; plain layouts (RuntimeError: ")
    assert "probe check" in status
    assert len(warnings) == 1 and "cannot keep oneDNN layouts" in warnings[0], warnings
