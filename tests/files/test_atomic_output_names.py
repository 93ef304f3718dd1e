"""Output names: any legal name can be written (its hidden temporary name is kept within the
filesystem's limit), a name the filesystem cannot hold is refused before any work, every
message names the target and never the hidden temporary file, and printing a path never fails.
"""
import errno
import os
import sys

import pytest
from mxnet import gluon

from conftest import ROOT, run_command, run_convert
from mxmixed import checkpoint, cli
from mxmixed.cli._streams import PipeSafe
from mxmixed._files import atomic

NAME_MAX = 255


def _name_max(folder):
    try:
        return os.pathconf(str(folder), "PC_NAME_MAX")
    except (OSError, ValueError):
        return NAME_MAX


def _net():
    net = gluon.nn.Dense(3, in_units=4)
    net.initialize()
    return net


def _hidden(folder):
    return sorted(name for name in os.listdir(folder) if name.startswith("."))


# ----------------------------------------------------------------------------- the writer
def test_a_checkpoint_with_the_longest_legal_name_is_written_and_loads(tmp_path):
    path = tmp_path / ("c" * (_name_max(tmp_path) - len(".mxc")) + ".mxc")
    assert len(path.name) == _name_max(tmp_path)
    net = _net()
    checkpoint.save(path, net, extra={"step": 1})
    assert checkpoint.load(path, _net()) == {"step": 1}
    assert os.listdir(tmp_path) == [path.name]


@pytest.mark.parametrize("name", ["é" * 127 + "x", "\u4e2d" * 85],
                         ids=["two-byte", "three-byte"])
def test_a_long_name_in_utf8_is_written_whole(tmp_path, name):
    # 255 bytes of UTF-8: the temporary name is cut on a character, never inside one
    assert len(os.fsencode(name)) == 255
    atomic.atomic_write(str(tmp_path / name), b"data")
    assert (tmp_path / name).read_bytes() == b"data" and os.listdir(tmp_path) == [name]


def test_a_pair_with_the_longest_legal_names_is_written_whole(tmp_path):
    stem = "p" * (_name_max(tmp_path) - len("-symbol.json"))
    paths = [str(tmp_path / (stem + "-symbol.json")), str(tmp_path / (stem + "-0000.params"))]
    atomic.atomic_write_group([(paths[0], b"{}"), (paths[1], b"params")])
    atomic.atomic_write_group([(paths[0], b"{ }"), (paths[1], b"params2")])  # over the pair
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(p) for p in paths)


def test_stale_temporary_files_of_a_long_name_are_swept(tmp_path):
    target = str(tmp_path / ("s" * _name_max(tmp_path)))
    temp = atomic._create(target)  # as a process killed outright would leave it
    dead = temp.replace(".%d." % os.getpid(), ".%d." % (2 ** 22 + 1))  # no such pid
    os.rename(temp, dead)
    assert len(os.fsencode(os.path.basename(dead))) <= _name_max(tmp_path)
    assert atomic.sweep_stale(target) == [dead]


def test_a_name_too_long_for_the_filesystem_is_refused_naming_the_target(tmp_path):
    path = tmp_path / ("n" * (_name_max(tmp_path) + 1))
    with pytest.raises(OSError) as info:
        checkpoint.save(path, _net())
    assert info.value.errno == errno.ENAMETOOLONG
    assert info.value.filename == str(path) and ".tmp" not in str(info.value)
    with pytest.raises(OSError) as info:
        atomic.check_writable([str(path)])
    assert info.value.errno == errno.ENAMETOOLONG and info.value.filename == str(path)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("fails", ["os.open", "os.replace"])
def test_a_failing_write_names_the_target_never_the_temporary_file(tmp_path, monkeypatch,
                                                                   fails):
    path = tmp_path / "ckpt.mxc"
    real = getattr(os, fails.split(".")[1])

    def refuse(first, *args, **kwargs):
        if os.path.basename(str(first)).startswith("."):
            raise PermissionError(errno.EACCES, "Permission denied", first)
        return real(first, *args, **kwargs)

    monkeypatch.setattr(os, fails.split(".")[1], refuse)
    with pytest.raises(PermissionError) as info:
        checkpoint.save(path, _net())
    assert info.value.filename == str(path), str(info.value)
    assert ".tmp" not in str(info.value) and info.value.filename2 is None
    monkeypatch.undo()
    assert os.listdir(tmp_path) == []


# ----------------------------------------------------------------------------- the CLI
def test_convert_writes_an_output_with_the_longest_legal_name(digits_pair, tmp_path, capsys):
    out = str(tmp_path / ("o" * (_name_max(tmp_path) - len("-symbol.json"))))
    code, stdout, err = run_convert([digits_pair, "0", "--out", out], capsys)
    assert code == cli.EXIT_OK, err
    assert os.path.isfile(out + "-symbol.json") and os.path.isfile(out + "-0000.params")
    assert not _hidden(tmp_path)


def test_convert_refuses_a_name_too_long_before_any_work(digits_pair, tmp_path, capsys, monkeypatch):
    def no_work(*args, **kwargs):
        raise AssertionError("the conversion started")
    monkeypatch.setattr("mxmixed.symbolic.load_checkpoint", no_work)
    out = str(tmp_path / ("o" * (_name_max(tmp_path) - len("-symbol.json") + 1)))
    code, _, err = run_convert([digits_pair, "0", "--out", out], capsys)
    assert code == cli.EXIT_USAGE, err
    line, = err.strip().splitlines()
    assert "too long" in line and "bytes" in line and ".tmp" not in line
    assert sorted(os.listdir(tmp_path)) == ["in"]


def _latin1_run(digits_pair, out, extra=()):
    env = dict(os.environ, PYTHONPATH=ROOT, PYTHONIOENCODING="utf-8:strict")
    return run_command([sys.executable, "-m", "mxmixed", "convert", digits_pair, "0", "--out",
                        os.fsencode(out)] + list(extra),
                       cwd=ROOT, env=env, capture_output=True)


@pytest.mark.slow
def test_a_latin1_output_name_is_printed_under_a_strict_utf8_stdout(digits_pair, tmp_path):
    out = os.fsdecode(os.fsencode(str(tmp_path)) + b"/mod\xe8le")  # 'modèle' in Latin-1
    proc = _latin1_run(digits_pair, out)
    stdout, stderr = proc.stdout.decode("utf-8"), proc.stderr.decode("utf-8")
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr and "nothing written" not in stderr, stderr
    assert "wrote " in stdout and "mod\\xe8le-symbol.json" in stdout, stdout
    assert os.path.isfile(out + "-symbol.json") and os.path.isfile(out + "-0000.params")


@pytest.mark.slow
def test_an_error_naming_a_latin1_path_is_one_line_under_a_strict_utf8_stdout(digits_pair, tmp_path):
    out = os.fsdecode(os.fsencode(str(tmp_path)) + b"/no\xe9where/model")
    proc = _latin1_run(digits_pair, out)
    stderr = proc.stderr.decode("utf-8")
    assert proc.returncode == cli.EXIT_USAGE, stderr
    line, = stderr.strip().splitlines()
    assert "no\\xe9where" in line, line


def test_printing_a_path_never_fails_whatever_the_encoding(capsys):
    # what cli.main does with stdout and stderr: surrogate escapes come out as \\xNN
    import io
    raw = io.BytesIO()
    strict = io.TextIOWrapper(raw, encoding="ascii", errors="strict")
    safe = PipeSafe(strict)
    print("wrote", os.fsdecode(b"/tmp/mod\xe8le"), "and \u4e2d", file=safe)
    safe.flush()
    assert raw.getvalue() == b"wrote /tmp/mod\\xe8le and \\u4e2d\n"
