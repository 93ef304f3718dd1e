"""The comparison rules of :func:`validate` and the search, one verdict per output.

* ``relative``: ``max|y16 - y32| / max|y32|`` per output (the error relative to the output
  scale). Entries where both models give the same value, the same infinity included, count
  as equal.
* ``detections``: for detectors with gluoncv's outputs ``(ids (N, K, 1), scores (N, K, 1),
  boxes (N, K, 4))`` after NMS. Element-wise comparison is meaningless there: float16 moves a
  score a little, the order of near-equal scores changes and a box leaves or enters the
  top K. Each float32 detection is matched to a float16 detection of the same class with IoU
  >= 0.5 (greedy, highest score first). The error of a pair is ``max(|box diff| / max|box|,
  |score diff|)``; a detection left without a partner counts as error 1, unless its score is
  within ``_CUTOFF_MARGIN`` of the lowest score of a full top-K list (it may fall on either
  side of the cut).
"""
from dataclasses import dataclass

import numpy as np

__all__ = ["DETECTION_RULE", "OutputCheck", "RELATIVE_RULE", "compare_outputs", "is_detection"]

_IOU_MIN = 0.5
_CUTOFF_MARGIN = 0.01
DETECTION_RULE = ("detections: matched by class and IoU >= %.1f; error = max(|box diff| / "
                  "max|box|, |score diff|), 1 for an unmatched detection" % _IOU_MIN)
RELATIVE_RULE = "relative: max|y16 - y32| / max|y32|"


@dataclass
class OutputCheck:
    """The verdict on one output (or one group of outputs, for detections).

    Attributes
    ----------
    name : str
        ``'output 0'``, ... or ``'detections'`` (ids, scores and boxes together).
    rule : str
        The rule, in words.
    error : float
        The error under that rule; compare it with the tolerance.
    detail : str
        Counts behind the error.
    """

    name: str
    rule: str
    error: float
    detail: str = ""


def is_detection(outputs):
    """Whether a list of arrays looks like gluoncv's (ids, scores, boxes) after NMS."""
    if len(outputs) != 3:
        return False
    ids, scores, boxes = outputs
    return (ids.ndim == 3 and scores.shape == ids.shape and ids.shape[-1] == 1
            and boxes.ndim == 3 and boxes.shape[:2] == ids.shape[:2] and boxes.shape[-1] == 4)


def relative_error(a, b):
    """``max|b - a| / max|a|`` with equal entries (also equal infinities) counting as 0."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    same = (a64 == b64) | (np.isnan(a64) & np.isnan(b64))
    diff = np.where(same, 0.0, np.abs(a64 - b64))
    diff[~np.isfinite(diff)] = np.inf
    abs_err = float(diff.max()) if diff.size else 0.0
    finite = np.abs(a64[np.isfinite(a64)])
    scale = float(finite.max(initial=0.0))
    rel = abs_err / scale if scale > 0 else (0.0 if abs_err == 0 else np.inf)
    return abs_err, float(rel)


def _valid(ids, scores, boxes):
    return (ids >= 0) & (scores > 0) & np.isfinite(boxes).all(axis=1) & np.isfinite(scores)


def _iou(a, b, scale):
    """IoU matrix; two degenerate boxes (zero area, as clipped boxes of an untrained detector
    are) count as overlapping fully when their corners are within 1% of ``scale``."""
    lo = np.maximum(a[:, None, :2], b[None, :, :2])
    hi = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.clip(hi - lo, 0, None).prod(axis=2)
    area_a = np.clip(a[:, 2:] - a[:, :2], 0, None).prod(axis=1)
    area_b = np.clip(b[:, 2:] - b[:, :2], 0, None).prod(axis=1)
    union = area_a[:, None] + area_b[None, :] - inter
    iou = inter / np.where(union > 0, union, 1)
    degenerate = (area_a[:, None] == 0) | (area_b[None, :] == 0)
    close = np.abs(a[:, None, :] - b[None, :, :]).max(axis=2) <= 0.01 * scale
    return np.where(degenerate, close.astype(float), iou)


def match_detections(ref, got):
    """Compare detections by matching; returns an :class:`OutputCheck`."""
    (ids32, sc32, bx32), (ids16, sc16, bx16) = [[o.astype(np.float64) for o in outs]
                                                for outs in (ref, got)]
    scale = 0.0
    for n in range(len(ids32)):
        keep = _valid(ids32[n, :, 0], sc32[n, :, 0], bx32[n])
        if keep.any():
            scale = max(scale, float(np.abs(bx32[n][keep]).max()))
    scale = scale or 1.0
    worst, pairs, unmatched, total = 0.0, 0, 0, 0
    for n in range(len(ids32)):
        lists = []
        for ids, sc, bx in ((ids32, sc32, bx32), (ids16, sc16, bx16)):
            keep = _valid(ids[n, :, 0], sc[n, :, 0], bx[n])
            lists.append((ids[n, keep, 0], sc[n, keep, 0], bx[n][keep], keep.all()))
        cutoff = -np.inf
        for _, sc, _, full in lists:
            if full and len(sc):
                cutoff = max(cutoff, float(sc.min()) + _CUTOFF_MARGIN)
        (i32, s32, b32, _), (i16, s16, b16, _) = lists
        iou = (_iou(b32, b16, scale) if len(b32) and len(b16)
               else np.zeros((len(b32), len(b16))))
        taken = np.zeros(len(b16), bool)
        for k in np.argsort(-s32, kind="stable"):
            ok = (i16 == i32[k]) & ~taken & (iou[k] >= _IOU_MIN)
            if ok.any():
                j = int(np.argmax(np.where(ok, iou[k], -1.0)))
                taken[j] = True
                pairs += 1
                err = max(float(np.abs(b32[k] - b16[j]).max()) / scale,
                          abs(float(s32[k] - s16[j])))
                worst = max(worst, err)
            elif s32[k] > cutoff:
                unmatched += 1
        extra = int(((~taken) & (s16 > cutoff)).sum())
        unmatched += extra
        total += len(s32)
    if unmatched:
        worst = 1.0
    detail = "%d of %d float32 detections matched, %d unmatched" % (pairs, total, unmatched)
    return OutputCheck("detections", DETECTION_RULE, worst, detail)


def compare_outputs(ref, got, rule="auto"):
    """Per-output checks and the overall figures.

    Returns
    -------
    tuple
        ``(checks, max_abs_error, max_rel_error, nonfinite_share, top1)``; the non-finite
        share counts float16 values that are inf or NaN where float32 is finite.
    """
    # inf - inf and the like are expected here (float16 overflow) and handled explicitly
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        return _compare_outputs(ref, got, rule)


def _compare_outputs(ref, got, rule):
    abs_err, rel, nonfinite, total = 0.0, 0.0, 0, 0
    checks = []
    for k, (a, b) in enumerate(zip(ref, got)):
        bad = ~np.isfinite(b) & np.isfinite(a)
        nonfinite += int(bad.sum())
        total += b.size
        a_err, r_err = relative_error(a, b)
        abs_err, rel = max(abs_err, a_err), max(rel, r_err)
        checks.append(OutputCheck("output %d" % k, RELATIVE_RULE, r_err))
    if rule == "detections" or (rule == "auto" and is_detection(ref)):
        checks = [match_detections(ref, got)]
    top1 = None
    if ref and ref[0].ndim == 2 and ref[0].shape[1] > 1:
        top1 = float(np.mean(ref[0].argmax(axis=1) == got[0].argmax(axis=1)))
    return checks, abs_err, rel, (nonfinite / total if total else 0.0), top1
