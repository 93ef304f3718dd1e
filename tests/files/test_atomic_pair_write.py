"""Writing a converted pair (symbol json + params) never destroys a good earlier pair.

``mxmixed.symbolic.save_checkpoint`` (behind ``ConvertedModel.save`` and ``mxmixed convert``)
writes through the one atomic writer, ``mxmixed._files.atomic``: when the new pair cannot be completed,
the earlier pair is left exactly as it was, and nothing else is left in the folder.
"""
import os
import subprocess
import threading

import mxnet as mx
import numpy as np
import pytest

from mxmixed import symbolic
from mxmixed._files import atomic as _io


def _pair(scale):
    data = mx.sym.var("data")
    sym = mx.sym.FullyConnected(data, num_hidden=3, name="fc")
    arg_params = {"fc_weight": mx.nd.full((3, 4), scale), "fc_bias": mx.nd.zeros((3,))}
    return sym, arg_params, {}


def _snapshot(folder):
    return {name: (folder / name).read_bytes() for name in sorted(os.listdir(folder))}


@pytest.fixture
def old_pair(tmp_path):
    prefix = str(tmp_path / "ok16")
    symbolic.save_checkpoint(prefix, 0, *_pair(1.0))
    before = _snapshot(tmp_path)
    assert sorted(before) == ["ok16-0000.params", "ok16-symbol.json"]
    return prefix, before


def _other_graph():
    sym, arg_params, aux_params = _pair(2.0)
    return mx.sym.relu(sym, name="act"), arg_params, aux_params


def test_failure_between_the_two_renames_keeps_the_earlier_pair(old_pair, tmp_path,
                                                                monkeypatch):
    prefix, before = old_pair
    real_replace = os.replace
    calls = []

    def replace_failing_second(src, dst):
        calls.append(dst)
        if len(calls) == 2:  # the symbol file is already renamed over the old one
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace_failing_second)
    with pytest.raises(OSError, match="No space left"):
        symbolic.save_checkpoint(prefix, 0, *_other_graph())
    monkeypatch.undo()
    assert len(calls) >= 2
    assert _snapshot(tmp_path) == before
    sym, arg_params, _ = symbolic.load_checkpoint(prefix, 0)
    assert "act" not in sym.tojson()
    assert np.array_equal(arg_params["fc_weight"].asnumpy(), np.ones((3, 4), np.float32))


def test_immutable_params_file_keeps_the_earlier_pair(old_pair, tmp_path):
    # issue 14 item 7: `chattr +i ok16-0000.params`, then convert again to the same --out
    prefix, before = old_pair
    params = str(tmp_path / "ok16-0000.params")
    if subprocess.run(["chattr", "+i", params], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here (needs root and a supporting filesystem)")
    try:
        with pytest.raises(OSError):
            symbolic.save_checkpoint(prefix, 0, *_other_graph())
        assert _snapshot(tmp_path) == before
    finally:
        subprocess.run(["chattr", "-i", params], capture_output=True)


def test_params_target_that_is_a_folder_keeps_the_symbol_file(tmp_path):
    prefix = str(tmp_path / "m")
    symbolic.save_checkpoint(prefix, 0, *_pair(1.0))
    os.remove(prefix + "-0000.params")
    os.mkdir(prefix + "-0001.params")
    before = _snapshot(tmp_path / "m-0001.params"), (tmp_path / "m-symbol.json").read_bytes()
    with pytest.raises(IsADirectoryError):
        symbolic.save_checkpoint(prefix, 1, *_other_graph())
    assert sorted(os.listdir(tmp_path)) == ["m-0001.params", "m-symbol.json"]
    assert (_snapshot(tmp_path / "m-0001.params"), (tmp_path / "m-symbol.json").read_bytes()) \
        == before


def test_interrupt_while_writing_the_params_keeps_the_earlier_pair(old_pair, tmp_path,
                                                                   monkeypatch):
    prefix, before = old_pair

    real_fsync, calls = os.fsync, []

    def interrupted_fsync(fd):
        calls.append(fd)
        if len(calls) == 2:  # the params file is written, not yet on disk
            raise KeyboardInterrupt
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", interrupted_fsync)
    with pytest.raises(KeyboardInterrupt):
        symbolic.save_checkpoint(prefix, 0, *_other_graph())
    assert _snapshot(tmp_path) == before


def test_overwrite_replaces_both_files_with_the_mode_open_gives(old_pair, tmp_path):
    prefix, before = old_pair
    umask = os.umask(0o027)
    try:
        symbolic.save_checkpoint(prefix, 0, *_other_graph())
        assert os.umask(0o027) == 0o027  # the writer never changed the process umask
    finally:
        os.umask(umask)
    after = _snapshot(tmp_path)
    assert sorted(after) == sorted(before)
    assert after["ok16-symbol.json"] != before["ok16-symbol.json"]
    sym, arg_params, _ = symbolic.load_checkpoint(prefix, 0)
    assert "act" in sym.tojson()
    assert np.array_equal(arg_params["fc_weight"].asnumpy(), np.full((3, 4), 2.0, np.float32))
    for name in after:
        assert os.stat(tmp_path / name).st_mode & 0o777 == 0o666 & ~0o027, name


def test_check_writable_finds_an_immutable_or_missing_target_before_any_work(old_pair,
                                                                              tmp_path):
    prefix, before = old_pair
    pair = symbolic.checkpoint_paths(prefix, 0)
    _io.check_writable(pair)
    with pytest.raises(FileNotFoundError):
        _io.check_writable([str(tmp_path / "missing" / "x-symbol.json")])
    with pytest.raises(IsADirectoryError):
        _io.check_writable([str(tmp_path)])
    if subprocess.run(["chattr", "+i", pair[1]], capture_output=True).returncode == 0:
        try:
            with pytest.raises(PermissionError):
                _io.check_writable(pair)
        finally:
            subprocess.run(["chattr", "-i", pair[1]], capture_output=True)
    assert _snapshot(tmp_path) == before


def test_pair_written_from_a_worker_thread(old_pair, tmp_path):
    # signal handlers can only be installed in the main thread: the writer must not try
    prefix, _ = old_pair
    errors = []

    def write():
        try:
            symbolic.save_checkpoint(prefix, 0, *_other_graph())
        except BaseException as err:  # noqa: B902 - reported below
            errors.append(err)

    worker = threading.Thread(target=write)
    worker.start()
    worker.join()
    assert errors == []
    assert "act" in symbolic.load_checkpoint(prefix, 0)[0].tojson()
    assert sorted(os.listdir(tmp_path)) == ["ok16-0000.params", "ok16-symbol.json"]


def test_failed_rollback_keeps_and_names_the_copy_of_the_earlier_file(old_pair, tmp_path,
                                                                      monkeypatch):
    prefix, before = old_pair
    real_replace = os.replace
    calls = []

    def replace_only_once(src, dst):
        calls.append(dst)
        if len(calls) > 1:  # the second rename and the rollback's rename both fail
            raise OSError(5, "Input/output error")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace_only_once)
    with pytest.raises(OSError) as info:
        symbolic.save_checkpoint(prefix, 0, *_other_graph())
    monkeypatch.undo()
    note = " ".join(getattr(info.value, "__notes__", []))
    assert "could not put back the earlier %s-symbol.json" % prefix in note
    kept = note.rsplit(" ", 1)[-1]
    assert open(kept, "rb").read() == before["ok16-symbol.json"]
    assert sorted(os.listdir(tmp_path)) == sorted([os.path.basename(kept), "ok16-0000.params",
                                                   "ok16-symbol.json"])
