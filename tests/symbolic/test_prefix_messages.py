"""A wrong PREFIX or EPOCH is answered with what exists: the folder's checkpoints, the epochs."""
import os
import sys

import mxnet as mx
import pytest

from conftest import ROOT, run_command
from mxmixed import symbolic


def _save(prefix, *epochs):
    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=3, name="fc")
    for epoch in epochs:
        mx.model.save_checkpoint(prefix, epoch, sym, {"fc_weight": mx.nd.ones((3, 4)),
                                                      "fc_bias": mx.nd.zeros((3,))}, {})


def test_a_folder_given_as_prefix_is_named_a_folder(tmp_path):
    _save(str(tmp_path / "model"), 0)
    for prefix in (str(tmp_path), str(tmp_path) + os.sep):
        with pytest.raises(symbolic.ConversionError) as info:
            symbolic.load_checkpoint(prefix, 0)
        assert str(info.value) == (
            "PREFIX %r is a folder; give the checkpoint's prefix inside it (its name without "
            "-symbol.json), such as %s" % (prefix, os.path.join(prefix, "model")))


def test_a_missing_epoch_lists_the_epochs_that_exist(tmp_path):
    prefix = str(tmp_path / "model")
    _save(prefix, 0, 5)
    _save(str(tmp_path / "model-other"), 3)  # another prefix's epochs are not listed
    with pytest.raises(symbolic.ConversionError) as info:
        symbolic.load_checkpoint(prefix, 3)
    assert str(info.value) == ("params file %s-0003.params does not exist; epochs with a params "
                               "file for prefix %r: 0, 5" % (prefix, prefix))
    os.remove(prefix + "-0000.params")
    os.remove(prefix + "-0005.params")
    with pytest.raises(symbolic.ConversionError, match=r"no params file \(model-EPOCH.params\) "
                                                       r"exists for prefix"):
        symbolic.load_checkpoint(prefix, 3)


@pytest.mark.slow
def test_convert_says_so_with_exit_2(tmp_path):
    _save(str(tmp_path / "model"), 0, 5)
    env = dict(os.environ, PYTHONPATH=ROOT)
    for args, expected in [([str(tmp_path), "0"], "is a folder; give the checkpoint's prefix"),
                           ([str(tmp_path / "model"), "3"], "epochs with a params file for "
                                                            "prefix %r: 0, 5" % str(tmp_path / "model"))]:
        proc = run_command([sys.executable, "-m", "mxmixed", "convert"] + args
                           + ["--out", str(tmp_path / "o16")], capture_output=True, text=True,
                           env=env)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and expected in lines[0], proc.stderr
