"""Files from someone else are safe to open: loading runs no code and allocates no more than
the file holds, and every refusal is one line that names the file and the limit.

The hostile files are crafted here: a pickle payload that would create a file, a "zip bomb", a
params member or params file declaring a huge shape, deeply nested JSON.
"""
import json
import os
import pickle
import struct
import sys
import zipfile

import mxnet as mx
import numpy as np
import pytest

from conftest import ROOT, dense_and_trainer, dense_step, run_command
from mxmixed import checkpoint, symbolic
from mxmixed._files import untrusted
from mxmixed.checkpoint import CheckpointError


class _Payload:
    """Unpickling it creates the file ``path``: proof that code ran."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _members(path):
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def _write(path, members, compression=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", compression=compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)


@pytest.fixture
def good(tmp_path):
    net, trainer = dense_and_trainer(momentum=0.9)
    dense_step(net, trainer)
    path = tmp_path / "good.mxc"
    checkpoint.save(path, net, trainer, extra={"step": 1})
    return path, _members(path)


def _one_line_refusal(path, net, trainer=None, match=None, **kwargs):
    with pytest.raises(CheckpointError, match=match) as info:
        checkpoint.load(path, net, trainer, **kwargs)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    assert info.value.__cause__ is None
    return message


def test_a_checkpoint_holds_no_pickle(good):
    _, members = good
    assert sorted(members) == ["extra.json", "manifest.json", "params.nd", "trainer.json",
                               "trainer.nd"]
    for name, data in members.items():
        assert not data.startswith(b"\x80"), name  # every pickle protocol >= 2 starts so
    json.loads(members["trainer.json"])
    assert json.loads(members["manifest.json"])["format_version"] == 2


def _format_1(good, tmp_path, pickled_extra, pickled_states):
    _, members = good
    manifest = json.loads(members["manifest.json"])
    manifest["format_version"] = 1
    old = {"manifest.json": json.dumps(manifest), "params.nd": members["params.nd"],
           "trainer.states": pickled_states, "extra.pkl": pickled_extra}
    path = tmp_path / "old.mxc"
    _write(path, old)
    return path


def test_a_pickle_payload_in_a_format_1_checkpoint_runs_nothing(good, tmp_path):
    proof = tmp_path / "PWNED"
    payload = pickle.dumps(_Payload(str(proof)))
    path = _format_1(good, tmp_path, payload, payload)
    net, trainer = dense_and_trainer(momentum=0.9)
    before = net.weight.data().asnumpy()
    for args in ((net,), (net, trainer)):  # even a net-only load would have returned extra
        message = _one_line_refusal(path, *args, match="format 1.*pickles.*trusted=True")
        assert "Nothing was loaded" in message
        assert not proof.exists()
    assert np.array_equal(net.weight.data().asnumpy(), before)
    # the payload is real: trusted=True does run it (which is what the refusal protects from)
    with pytest.raises(CheckpointError):
        checkpoint.load(path, net, trainer, trusted=True)
    assert proof.exists()


def test_a_genuine_format_1_checkpoint_loads_with_trusted_true(tmp_path, good):
    net, trainer = dense_and_trainer(momentum=0.9)
    dense_step(net, trainer)
    states = trainer._updaters[0].get_states(dump_optimizer=True)  # what format 1 stored
    path = _format_1(good, tmp_path, pickle.dumps({"step": 1}), states)
    net2, trainer2 = dense_and_trainer(momentum=0.9)
    assert checkpoint.load(path, net2, trainer2, trusted=True) == {"step": 1}
    momentum = trainer._updaters[0].states[0].asnumpy()
    assert np.array_equal(trainer2._updaters[0].states[0].asnumpy(), momentum)


def test_pickles_under_format_2_names_are_never_unpickled(good, tmp_path):
    proof = tmp_path / "PWNED"
    _, members = good
    payload = pickle.dumps(_Payload(str(proof)))
    for member in ("trainer.json", "extra.json", "trainer.nd", "params.nd"):
        crafted = dict(members, **{member: payload, "extra.pkl": payload,
                                   "trainer.states": payload})
        _write(tmp_path / "evil.mxc", crafted)
        net, trainer = dense_and_trainer(momentum=0.9)
        _one_line_refusal(tmp_path / "evil.mxc", net, trainer, trusted=True)
        assert not proof.exists(), member


@pytest.mark.parametrize("member, value, match", [
    ("extra.json", {"$object": {"class": "FactorScheduler", "attrs": {"$dict": []}}},
     "unknown value tagged '.object'"),
    ("extra.json", {"$np": {"dtype": "O", "shape": [1], "data": "AAAA"}}, "dtype 'O'"),
    ("extra.json", {"$np": {"dtype": "<f8", "shape": [10 ** 9, 10 ** 9], "data": "AAAA"}},
     r"shape \(1000000000, 1000000000\) in 4 characters"),
    ("extra.json", {"$nd": "7"}, "missing array '7'"),
    ("extra.json", {"$dict": [[[1, 2], 3]]}, "a dict key of type list"),
], ids=["object", "object-dtype", "huge-numpy", "missing-nd", "unhashable-key"])
def test_crafted_plain_data_is_refused_in_one_line(good, tmp_path, member, value, match):
    _, members = good
    _write(tmp_path / "crafted.mxc", dict(members, **{member: json.dumps(value)}))
    net, _ = dense_and_trainer()
    _one_line_refusal(tmp_path / "crafted.mxc", net, match=match)


def test_optimizer_attributes_the_optimizer_lacks_are_refused(good, tmp_path):
    _, members = good
    state = json.loads(members["trainer.json"])
    state["attrs"]["$dict"].append(["__class__", 1])
    _write(tmp_path / "attr.mxc", dict(members, **{"trainer.json": json.dumps(state)}))
    net, trainer = dense_and_trainer(momentum=0.9)
    _one_line_refusal(tmp_path / "attr.mxc", net, trainer, match="lacks \\(__class__\\)")
    assert type(trainer._optimizer) is mx.optimizer.SGD


@pytest.mark.slow
def test_a_zip_bomb_is_refused_before_anything_is_inflated(good, tmp_path):
    _, members = good
    path = tmp_path / "bomb.mxc"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("manifest.json", members["manifest.json"])
        info = zipfile.ZipInfo("params.nd")
        info.compress_type = zipfile.ZIP_DEFLATED
        with archive.open(info, "w", force_zip64=True) as member:
            for _ in range(64):
                member.write(bytes(1 << 24))  # 1 GiB of zeros, about 1 MB deflated
    assert os.path.getsize(path) < 4 << 20
    net, _ = dense_and_trainer()
    _one_line_refusal(path, net, match="member params.nd is compressed.*does not inflate")


def test_a_member_declaring_more_bytes_than_the_file_is_refused(good, tmp_path):
    path, _ = good
    data = bytearray(path.read_bytes())
    central = data.index(b"PK\x01\x02")  # the central directory entry of params.nd
    while data[central + 46:central + 46 + len(b"params.nd")] != b"params.nd":
        central = data.index(b"PK\x01\x02", central + 4)
    struct.pack_into("<II", data, central + 20, 2 << 30, 2 << 30)  # its two sizes: 2 GiB
    path.write_bytes(bytes(data))
    net, _ = dense_and_trainer()
    _one_line_refusal(path, net, match="member params.nd declares 2147483648 bytes, more than")


def _huge_shape(nd):
    data = bytearray(nd)
    # list header (3 x uint64), then the first array: magic, storage type, ndim, dims
    ndim = struct.unpack_from("<i", data, 24 + 8)[0]
    struct.pack_into("<%dq" % ndim, data, 24 + 12, *([10 ** 6] * ndim))
    return bytes(data)


def test_a_params_member_with_a_huge_declared_shape_is_refused(good, tmp_path):
    _, members = good
    crafted = dict(members, **{"params.nd": _huge_shape(members["params.nd"])})
    _write(tmp_path / "shape.mxc", crafted)
    net, _ = dense_and_trainer()
    _one_line_refusal(tmp_path / "shape.mxc", net,
                      match=r"member params.nd cannot be loaded: array 0 declares the shape "
                            r"\(1000000, 1000000\) \(4000000000000 bytes\), more than the \d+ "
                            r"bytes left")


@pytest.mark.parametrize("member", ["manifest.json", "extra.json", "trainer.json"])
def test_deeply_nested_json_is_refused_before_parsing(good, tmp_path, member):
    _, members = good
    _write(tmp_path / "deep.mxc", dict(members, **{member: "[" * 100000 + "]" * 100000}))
    net, trainer = dense_and_trainer(momentum=0.9)
    _one_line_refusal(tmp_path / "deep.mxc", net, trainer,
                      match="member %s nests JSON 100000 levels deep, more than the limit of "
                            "100" % member)


def test_a_manifest_with_wrong_types_is_refused_in_one_line(good, tmp_path):
    _, members = good
    manifest = json.loads(members["manifest.json"])
    manifest["params"] = [{"name": 1, "shape": "x"}]
    _write(tmp_path / "types.mxc", dict(members, **{"manifest.json": json.dumps(manifest)}))
    net, _ = dense_and_trainer()
    _one_line_refusal(tmp_path / "types.mxc", net, match="wrong types")


# ----------------------------------------------------------------------------- the format
def test_nd_bytes_are_the_bytes_mx_nd_save_writes(tmp_path):
    arrays = {"w": mx.nd.ones((2, 3)), "h": mx.nd.array([1, 2], dtype="float16"),
              "i": mx.nd.array([1, 2], dtype="int64"), "u": mx.nd.array([7], dtype="uint8")}
    mx.nd.save(str(tmp_path / "a.nd"), arrays)
    data = untrusted.nd_bytes(arrays)
    assert data == (tmp_path / "a.nd").read_bytes()
    assert untrusted.check_nd_bytes(data, "a.nd") == 4
    for cut in (10, 40, len(data) - 1):
        with pytest.raises(untrusted.UnsafeFileError, match="a.nd"):
            untrusted.check_nd_bytes(data[:cut], "a.nd")


# ----------------------------------------------------------------------------- convert
def _pair(folder):
    data = mx.sym.var("data")
    sym = mx.sym.FullyConnected(data, num_hidden=3, name="fc")
    prefix = str(folder / "m")
    mx.model.save_checkpoint(prefix, 0, sym, {"fc_weight": mx.nd.ones((3, 4)),
                                              "fc_bias": mx.nd.zeros((3,))}, {})
    return prefix


def _convert(*args):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return run_command([sys.executable, "-m", "mxmixed", "convert"] + list(args),
                       capture_output=True, text=True, env=env)


def _error_line(proc):
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mxmixed convert: error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


@pytest.mark.slow
def test_convert_refuses_a_deeply_nested_symbol_file_with_exit_2(tmp_path):
    prefix = _pair(tmp_path)
    (tmp_path / "m-symbol.json").write_text('{"nodes": ' + "[" * 100000 + "]" * 100000
                                            + ', "heads": []}')
    proc = _convert(prefix, "0", "--out", str(tmp_path / "o16"))
    assert proc.returncode == 2
    assert "nests JSON 100001 levels deep, more than the limit of 100" in _error_line(proc)
    with pytest.raises(symbolic.ConversionError, match="m-symbol.json nests JSON"):
        symbolic.load_checkpoint(prefix, 0)


@pytest.mark.slow
def test_convert_refuses_an_input_shape_of_1e12_with_exit_2(tmp_path):
    prefix = _pair(tmp_path)
    proc = _convert(prefix, "0", "--out", str(tmp_path / "o16"), "--validate", "2",
                    "--input-shape", "1000000000000")
    assert proc.returncode == 2
    assert "more than the 2147483647 (2^31 - 1)" in _error_line(proc)
    # under the cap per sample, over it for the graph: still one line and exit 2
    proc = _convert(prefix, "0", "--out", str(tmp_path / "o16"), "--validate", "2",
                    "--input-shape", "4,1000,1000,100")
    assert proc.returncode == 2
    _error_line(proc)
    assert not os.path.exists(tmp_path / "o16-symbol.json")


@pytest.mark.slow
def test_convert_refuses_params_with_a_huge_declared_shape(tmp_path):
    prefix = _pair(tmp_path)
    params = tmp_path / "m-0000.params"
    params.write_bytes(_huge_shape(params.read_bytes()))
    proc = _convert(prefix, "0", "--out", str(tmp_path / "o16"))
    assert proc.returncode == 2
    assert "declares the shape (1000000, 1000000)" in _error_line(proc)


@pytest.mark.slow
def test_a_deeply_nested_declared_shape_attribute_is_not_parsed_recursively(tmp_path):
    prefix = _pair(tmp_path)
    path = tmp_path / "m-symbol.json"
    graph = json.loads(path.read_text())
    for node in graph["nodes"]:
        if node["name"] == "fc_weight":  # a string inside the JSON: not seen by the depth check
            node.setdefault("attrs", {})["__shape__"] = "[" * 50000 + "]" * 50000
    path.write_text(json.dumps(graph))
    symbolic.load_checkpoint(prefix, 0)  # the attribute is not a flat shape: it is ignored
    proc = _convert(prefix, "0", "--out", str(tmp_path / "o16"))
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_an_extra_too_big_to_read_back_is_refused_when_saving(tmp_path, monkeypatch):
    from mxmixed.checkpoint import _format

    monkeypatch.setattr(_format, "MAX_JSON_BYTES", 1000)
    net, _ = dense_and_trainer()
    with pytest.raises(ValueError, match="more than the 1000 that a checkpoint reads back"):
        checkpoint.save(tmp_path / "x.mxc", net, extra={"a": np.zeros(1000)})
    checkpoint.save(tmp_path / "x.mxc", net, extra={"a": mx.nd.zeros(1000)})  # an NDArray fits
    assert checkpoint.load(tmp_path / "x.mxc", net)["a"].shape == (1000,)
    assert os.listdir(tmp_path) == ["x.mxc"]


def test_a_device_or_a_fifo_is_not_read_as_a_checkpoint_or_a_params_file(tmp_path):
    # /dev/zero as a params file would be read without end; a FIFO would block the read
    prefix = _pair(tmp_path)
    os.remove(prefix + "-0000.params")
    os.symlink("/dev/zero", prefix + "-0000.params")
    with pytest.raises(symbolic.ConversionError, match="is not a regular file"):
        symbolic.load_checkpoint(prefix, 0)
    os.mkfifo(tmp_path / "fifo.mxc")
    net, _ = dense_and_trainer()
    _one_line_refusal(tmp_path / "fifo.mxc", net, match="is not a regular file")
    os.symlink("/dev/zero", tmp_path / "zero.mxc")
    _one_line_refusal(tmp_path / "zero.mxc", net, match="is not a regular file")


@pytest.mark.parametrize("change, match", [
    (lambda state: state["attrs"]["$dict"].append(["lr", "fast"]),
     "optimizer attribute 'lr' is a str, this SGD's is a float"),
    (lambda state: state["states"]["$dict"].append([0, "momentum"]),
     "state of parameter 0 is not made of arrays"),
    (lambda state: state["states"]["$dict"].append([99, None]),
     "state of parameter 99 is not made of arrays"),
], ids=["lr-as-text", "text-state", "unknown-parameter"])
def test_optimizer_data_of_the_wrong_kind_is_refused_at_load(good, tmp_path, change, match):
    _, members = good
    state = json.loads(members["trainer.json"])
    change(state)
    _write(tmp_path / "kind.mxc", dict(members, **{"trainer.json": json.dumps(state)}))
    net, trainer = dense_and_trainer(momentum=0.9)
    _one_line_refusal(tmp_path / "kind.mxc", net, trainer, match=match)
