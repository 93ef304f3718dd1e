"""The talks' picture: a gradient histogram against float16's range, before and after scaling;
and the picture of a run (``plot_run``): an ``mxmixed run --report``'s loss scale over the steps.

Figures are built with ``matplotlib.figure.Figure`` and an Agg canvas, never through
``pyplot``: nothing is shown, no global figure is left behind, and it works on a headless
machine. A notebook displays the returned Figure; ``fig.savefig(path)`` writes it.
"""
import array
import math
import os
import textwrap
from typing import TYPE_CHECKING, Any, Mapping, Optional, Tuple, Union

import numpy as np

from .float16 import FLOAT16_MAX, LOG2_EDGES
from .gradients import GradientStats, LossScaleAdvice, gradient_stats

if TYPE_CHECKING:  # matplotlib is imported when a plot is drawn
    import matplotlib.figure

__all__ = ["plot_gradient_range", "FLOAT16_REGIONS"]

_LOG2_MAX = math.log2(FLOAT16_MAX)

FLOAT16_REGIONS = (
    # (from log2, to log2, label, colour)
    (-math.inf, -25.0, "rounds to 0", "#d62728"),
    (-25.0, -24.0, "underflow\n(0 or 2^-24)", "#ff9896"),
    (-24.0, -14.0, "subnormal", "#ffbb78"),
    (-14.0, _LOG2_MAX, "normal", "#98df8a"),
    (_LOG2_MAX, math.inf, "overflow", "#d62728"),
)
"""tuple: float16's ranges on the log2-magnitude axis, as drawn."""


def _stats_pair(gradients, scale):
    if isinstance(gradients, LossScaleAdvice):
        return gradients.unscaled, gradients.scaled
    if isinstance(gradients, GradientStats):
        raise TypeError("pass the gradients (a dict) or a LossScaleAdvice: one GradientStats "
                        "holds a single scale")
    if scale is None:
        raise ValueError("give the loss scale to compare with (scale=...)")
    return gradient_stats(gradients, 1.0), gradient_stats(gradients, scale)


def _shares_text(total):
    return ("exact zeros %.1f%%\nrounds to 0 %.3f%%\nsubnormal %.3f%%\nnormal %.2f%%\n"
            "overflow %.3f%%" % (100 * total.zero, 100 * total.underflow,
                                 100 * total.subnormal, 100 * total.normal,
                                 100 * total.overflow))


def plot_gradient_range(gradients: Union[Mapping[str, Any], LossScaleAdvice],
                        scale: Optional[float] = None, title: Optional[str] = None,
                        figsize: Tuple[float, float] = (9, 6)) -> "matplotlib.figure.Figure":
    """Draw the gradients' log2 histogram against float16's range, unscaled and scaled.

    Parameters
    ----------
    gradients : dict of str to array, or LossScaleAdvice
        Gradients as :func:`~mxmixed.diagnostics.collect_gradients` returns them, or the
        result of :func:`~mxmixed.diagnostics.recommend_loss_scale` (its scale is used).
    scale : float, optional
        The loss scale of the lower panel (required with a dict).
    title : str, optional
        The figure's title.
    figsize : (float, float), default (9, 6)

    Returns
    -------
    matplotlib.figure.Figure
        Two panels sharing the x axis (``log2 |gradient|``): loss scale 1 and ``scale``.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    before, after = _stats_pair(gradients, scale)
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 1, sharex=True)
    counts = [before.total.counts, after.total.counts]
    used = np.nonzero(counts[0] + counts[1])[0]
    if used.size:
        lo = min(-30.0, LOG2_EDGES[used[0]] - 2)
        hi = max(20.0, LOG2_EDGES[used[-1]] + 3)
    else:
        lo, hi = -30.0, 20.0
    for ax, stats, count in zip(axes, (before, after), counts):
        for start, stop, label, colour in FLOAT16_REGIONS:
            a, b = max(start, lo), min(stop, hi)
            if a < b:
                ax.axvspan(a, b, color=colour, alpha=0.35, lw=0, label=label)
        share = 100.0 * count / max(stats.total.size, 1)
        ax.bar(LOG2_EDGES[:-1], share, width=1.0, align="edge", color="#1f77b4",
               edgecolor="white", linewidth=0.3, label="gradients")
        for x in (-24.0, -14.0, _LOG2_MAX):
            ax.axvline(x, color="black", lw=0.6, ls="--")
        exponent = math.log2(stats.scale)
        name = ("2^%d" % exponent) if exponent == int(exponent) else "%g" % stats.scale
        ax.set_title("loss scale %s" % ("1 (unscaled)" if stats.scale == 1 else name),
                     fontsize=10, loc="left")
        ax.set_ylabel("% of values")
        ax.text(0.99, 0.95, _shares_text(stats.total), transform=ax.transAxes, ha="right",
                va="top", fontsize=8, family="monospace",
                bbox={"facecolor": "white", "alpha": 0.8, "lw": 0})
    axes[0].legend(loc="upper left", fontsize=7, ncol=3, framealpha=0.8)
    axes[-1].set_xlim(lo, hi)
    axes[-1].set_xlabel("log2 |gradient|   (dashed: 2^-24 smallest subnormal, 2^-14 smallest "
                        "normal, 65504 largest float16)")
    fig.suptitle(title or "gradients against float16's range", fontsize=11)
    fig.tight_layout()
    return fig


def _short(text, width=70):
    return text if len(text) <= width else "..." + text[-(width - 3):]


def _scale_lines(steps):
    """({trainer: (steps, loss scales)}, (skipped steps, their scales)) for the steps whose
    trainer had an AMP loss scaler, as arrays of numbers.

    Of each run of steps with one scale only its first and last are kept: a step line drawn
    through them is the one drawn through every step (the scale changes only between runs),
    and a run of 400,000 steps does not become 400,000 points.
    """
    lines, skipped = {}, (array.array("d"), array.array("d"))
    for s in steps:
        scale = s.get("loss_scale")
        if scale is None:
            continue
        xs, ys, tail = lines.setdefault(s.get("trainer", 0), (array.array("d"),
                                                               array.array("d"), [False]))
        if tail[0] and ys[-1] == scale:
            xs[-1] = s["step"]  # the run goes on: its last point moves
        else:
            tail[0] = len(ys) > 0 and ys[-1] == scale  # the new point ends a run of two
            xs.append(s["step"])
            ys.append(scale)
        if s.get("skipped"):
            skipped[0].append(s["step"])
            skipped[1].append(scale)
    return {k: (xs, ys) for k, (xs, ys, _) in lines.items()}, skipped


def _draw_scales(ax, steps):
    """The loss scale per step (log2 axis) and the skipped steps."""
    lines, skipped = _scale_lines(steps)
    for trainer, (xs, ys) in sorted(lines.items()):
        label = "loss scale" + (" (trainer %d)" % trainer if len(lines) > 1 else "")
        ax.step(np.frombuffer(xs), np.frombuffer(ys), where="mid", lw=1.6, label=label,
                gid="loss_scale")
    if len(skipped[0]):
        ax.plot(np.frombuffer(skipped[0]), np.frombuffer(skipped[1]), "x", color="#d62728",
                ms=8, mew=2, ls="none", label="skipped step (inf/NaN)", gid="skipped")
    if lines:
        ax.set_yscale("log", base=2)
        ax.set_ylabel("loss scale (log2 axis)")
    else:
        ax.set_yticks([])
        ax.text(0.5, 0.5, "no AMP loss scaler: no loss scale to draw", transform=ax.transAxes,
                ha="center", va="center", fontsize=10, color="gray")


def _draw_events(ax, report):
    """The first non-finite gradient and the scaled clipping call sites, as vertical lines."""
    events = []
    first = (report.get("summary") or {}).get("first_nonfinite")
    if first:
        events.append((first["step"], "#d62728", ":", "first non-finite gradient, step %d: %s"
                       % (first["step"], _short(first.get("layer") or first.get("tensor", "")))))
    for site in report.get("scaled_clipping") or []:
        if site.get("first_step") is not None:
            how = "unscaled first" if site.get("unscaled") else "not unscaled"
            events.append((site["first_step"], "#ff7f0e", "--",
                           "clips scaled gradients (%s, %d calls): %s"
                           % (how, site.get("calls", 0), _short(site["site"], 50))))
    for n, (step, colour, style, label) in enumerate(events):  # the first drawn on top
        ax.axvline(step, color=colour, ls=style, lw=2.2 if n == 0 else 1.4, label=label,
                   gid="event", zorder=3 + len(events) - n)


def _draw_losses(ax, steps):
    """The loss of each step the runner saw (gid ``loss``), skipped steps marked on it."""
    # arrays of numbers, not lists of the records: a long run's steps are made one at a time
    seen, skipped = (array.array("d"), array.array("d")), (array.array("d"), array.array("d"))
    for s in steps:
        if s.get("loss") is not None:
            for xs, ys in (seen, skipped) if s.get("skipped") else (seen,):
                xs.append(s["step"])
                ys.append(s["loss"])
    ax.plot(np.frombuffer(seen[0]), np.frombuffer(seen[1]), lw=1.4, color="#1f77b4",
            label="loss (the sum backward differentiates)", gid="loss")
    if len(skipped[0]):
        ax.plot(np.frombuffer(skipped[0]), np.frombuffer(skipped[1]), "x",
                color="#d62728", ms=6, mew=1.5, ls="none", gid="loss_skipped")
    ax.set_ylabel("loss")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper right", fontsize=8, framealpha=0.9)


def plot_run(report: Mapping[str, Any],
             figsize: Optional[Tuple[float, float]] = None) -> "matplotlib.figure.Figure":
    """Draw an ``mxmixed run --report`` report: the loss scale per step and what happened,
    under the loss per step where the runner saw it.

    Parameters
    ----------
    report : dict
        The report as written (``json.load`` of it): its ``steps``, ``summary`` and
        ``scaled_clipping`` are drawn.
    figsize : (float, float), optional
        (10, 4.8), or (10, 7.2) with the loss panel.

    Returns
    -------
    matplotlib.figure.Figure
        One panel over the step numbers: the loss scale each step's gradients carried (a
        step line on a log2 axis, one per trainer with an AMP loss scaler; gid
        ``loss_scale``), the skipped steps as red crosses at their scale (gid ``skipped``),
        and vertical lines (gid ``event``) at the first non-finite gradient (its layer)
        and at the first step of each call site that clipped gradients still carrying the loss
        scale. A report with no step draws a panel that says so. When the steps carry their
        ``loss`` (``mxmixed run --amp float16`` sees it at ``backward``), a panel above draws
        it (gid ``loss``), the skipped steps crossed on it (gid ``loss_skipped``).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    steps = report.get("steps") or []
    summary = report.get("summary") or {}
    losses = any(s.get("loss") is not None for s in steps)
    fig = Figure(figsize=figsize or ((10, 7.2) if losses else (10, 4.8)))
    FigureCanvasAgg(fig)
    if losses:
        top, ax = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [1, 1.3]})
        _draw_losses(top, steps)
    else:
        ax = fig.subplots()
    script = os.path.basename(str(report.get("script") or "the script"))
    fig.suptitle("mxmixed run %s: %d optimizer steps, %d skipped on overflow (%s)"
                 % (script, len(steps), summary.get("skipped", 0),
                    report.get("status", "?")), fontsize=11)
    if not steps:
        note = textwrap.fill(report.get("note") or "no optimizer step was seen", 90,
                             break_on_hyphens=False)
        ax.text(0.5, 0.5, note, transform=ax.transAxes, ha="center", va="center", fontsize=10)
        ax.set_xticks([])
        ax.set_yticks([])
        fig.tight_layout()
        return fig
    _draw_scales(ax, steps)
    _draw_events(ax, report)
    last = steps[-1]["step"]
    ax.set_xlim(0.5, last + 0.5)
    ax.set_xlabel("optimizer step")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # a run with no AMP scaler and no event has none
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize=8, ncol=1,
                  framealpha=0.9)
    fig.tight_layout()
    return fig


def run_picture_path(report_path: str) -> str:
    """Where ``mxmixed run --report`` draws its picture, beside the report: ``R.png`` for
    ``R.json``, ``NAME.png`` for any other ``NAME`` (``r`` -> ``r.png``, ``r.rank1`` ->
    ``r.rank1.png``, ``r.png`` -> ``r.png.png``), so that a picture never takes the name of
    its report, nor of another report or picture of the run's ranks."""
    stem, ext = os.path.splitext(report_path)
    return (stem if ext.lower() == ".json" else report_path) + ".png"
