"""The closing line of a float16 run whose Trainer has no AMP loss scaler (a cast model that
scales on its own, as GluonNLP's ``run_pretraining.py`` with its ``FP16Trainer``) says that no AMP
scaler was seen, not that the run had no loss scaling."""
import gc

from mxnet import gluon

from mxmixed.cli._run_precision import closing_line
from mxmixed.diagnostics.steps import StepRecorder


def test_a_float16_run_without_an_amp_scaler_says_no_amp_loss_scaler_was_seen():
    net = gluon.nn.Dense(2, in_units=2)
    net.initialize()
    net.cast("float16")
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"multi_precision": True})
    summary = {"steps": 3, "amp_loss_scaler": False, "first_nonfinite": None,
               "median_iteration_s": None}
    recorder = StepRecorder()
    recorder._trainer_index(trainer)  # as its first step does
    recorder.summary = lambda: summary
    del trainer, net  # dropped by the script: the recorder does not keep it
    gc.collect()
    line = closing_line(recorder, None, {"active": True})
    assert line == ("mxmixed run: 3 optimizer steps in float16 (emulated on the CPU: its numerics, "
                    "not its speed), no AMP loss scaler (a scale the script applies itself is not "
                    "seen)")
