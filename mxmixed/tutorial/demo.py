"""``mxmixed demo``: the whole mixed-precision story on the offline digits, in one command.

1. Train the digits CNN in float32 and with AMP (dynamic loss scaling), side by side.
2. Print the comparison: accuracy, loss, final loss scale, skipped steps, parameter bytes.
3. Export the float32 model, convert it to float16, validate it and print the report.
4. Write the plots, the AMP checkpoint and the converted model to a results folder.

It runs on a GPU when one is visible, else on the CPU with float16 emulated (numerics, not
speed), and needs no network.
"""
import os

import numpy as np

import mxnet as mx

from .. import checkpoint, emulation, symbolic
from ..training import loss_scaler
from .data import digits_arrays, digits_loaders
from .fit import compare_precisions, evaluate, format_comparison
from .models import digits_cnn

__all__ = ["run_demo"]


def _plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.4))
    for row in rows:
        ax1.plot(row["runs"][0]["losses"], label=row["precision"], alpha=0.8)
    ax1.set(xlabel="step", ylabel="training loss", title="float32 vs AMP")
    ax1.legend()
    amp = [row for row in rows if row["precision"] == "amp"][0]["runs"][0]
    scaler = loss_scaler(amp["trainer"])
    history = np.array(scaler.history)
    ax2.semilogy(history[:, 0], history[:, 1], drawstyle="steps-post", base=2)
    skipped = history[history[:, 2] == 1]
    ax2.scatter(skipped[:, 0], skipped[:, 1], color="red", zorder=3, label="skipped step")
    ax2.set(xlabel="step", ylabel="loss scale", title="AMP dynamic loss scale")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run_demo(out_dir="results/demo", epochs=5, seed=0, progress=True, echo=print):
    """Run the demo and write its results.

    Parameters
    ----------
    out_dir : str, default 'results/demo'
        The results folder; created if missing.
    epochs : int, default 5
        Training epochs of each run.
    seed : int, default 0
        Seed of the data split, the shuffling and the weights.
    progress : bool, default True
        Show tqdm bars.
    echo : callable, default print
        Where the text goes.

    Returns
    -------
    dict
        ``rows`` (the comparison), ``report`` (the conversion report), ``validation``,
        ``float16_accuracy`` and ``files`` (paths written).
    """
    if epochs < 1:
        raise ValueError("epochs must be at least 1, got %r" % (epochs,))
    os.makedirs(out_dir, exist_ok=True)
    ctx = mx.gpu() if mx.context.num_gpus() else mx.cpu()
    echo("mxmixed demo on %s%s" % (ctx, "" if ctx.device_type == "gpu" else
                                   ": float16 is emulated on the CPU (numerics, not speed)"))
    echo("1/3  training the digits CNN in float32 and with AMP, %d epochs each" % epochs)
    rows = compare_precisions(lambda s: digits_cnn(seed=s, ctx=ctx),
                              lambda s: digits_loaders(batch_size=64, seed=s),
                              precisions=("float32", "amp"), seeds=(seed,), epochs=epochs,
                              ctx=ctx, progress=progress)
    echo(format_comparison(rows))
    files = {"plot": os.path.join(out_dir, "training.png"),
             "amp_checkpoint": os.path.join(out_dir, "digits-amp.ckpt")}
    _plot(rows, files["plot"])
    amp = [row for row in rows if row["precision"] == "amp"][0]["runs"][0]
    checkpoint.save(files["amp_checkpoint"], amp["net"], amp["trainer"])

    echo("2/3  exporting the float32 model and converting it to float16")
    net32 = [row for row in rows if row["precision"] == "float32"][0]["runs"][0]["net"]
    prefix32 = os.path.join(out_dir, "digits-fp32")
    net32.export(prefix32, epoch=0)
    model32 = symbolic.load_checkpoint(prefix32, 0)
    model16 = symbolic.convert(*model32)
    echo(str(model16.report))
    paths16 = model16.save(os.path.join(out_dir, "digits-fp16"), 0)
    files.update({"fp32_symbol": prefix32 + "-symbol.json", "fp32_params": prefix32 + "-0000.params",
                  "fp16_symbol": paths16[0], "fp16_params": paths16[1]})

    echo("3/3  validating the float16 model against float32 on the test images")
    _, _, X_test, _ = digits_arrays(seed=seed)
    validation = symbolic.validate(model32, model16, X_test, batch_size=64, ctx=ctx,
                                   progress=progress)
    echo(str(validation))
    with emulation.emulated("auto"):
        block16 = symbolic.load_float16(os.path.join(out_dir, "digits-fp16"), 0, ctx=ctx)
        accuracy16 = evaluate(block16, digits_loaders(batch_size=64, seed=seed)[1], ctx)
    accuracy32 = rows[0]["mean_accuracy"]
    echo("converted float16 model: test accuracy %.2f%% (float32 %.2f%%, %+.2f points)"
         % (100 * accuracy16, 100 * accuracy32, 100 * (accuracy16 - accuracy32)))
    echo("results written to %s: %s" % (os.path.abspath(out_dir),
                                        ", ".join(sorted(os.path.basename(p) for p in files.values()))))
    return {"rows": rows, "report": model16.report, "validation": validation,
            "float16_accuracy": accuracy16, "files": files}
