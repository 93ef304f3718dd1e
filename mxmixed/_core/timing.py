"""Timing float32 against a reduced precision side by side, as mxmixed's speed checks do.

A check alternates the two variants round by round (the machine's load drifts less between
neighbouring calls than between two blocks of calls), repeats a fast call within a round until
it fills about 50 ms (one call of a 0.2 ms model is the timer's noise), and reports the round
whose ratio is the median, with that round's times, so that the figure and the times printed
beside it agree. No MXNet import.
"""
import math
from typing import List, Sequence, Tuple

__all__ = ["ROUND_SECONDS", "repeats_for", "median_round"]

ROUND_SECONDS = 0.05  # a round repeats a fast call for about this long


def repeats_for(seconds: float, most: int = 1000) -> int:
    """Calls of a variant per round, for a call that took ``seconds``.

    Parameters
    ----------
    seconds : float
        One call's time (the fastest variant's, after the warm-up).
    most : int, default 1000
        The largest count.

    Returns
    -------
    int
        At least 1: as many calls as fill :data:`ROUND_SECONDS`, at most ``most``.
    """
    if seconds <= 0:
        return most
    return int(min(most, max(1, math.ceil(ROUND_SECONDS / seconds))))


def median_round(float32: Sequence[float],
                 reduced: Sequence[float]) -> Tuple[float, float, float, Tuple[float, float]]:
    """The round whose ratio float32 / reduced time is the median, and the spread.

    Parameters
    ----------
    float32, reduced : sequence of float
        One time per round for each variant.

    Returns
    -------
    (float32 seconds, reduced seconds, ratio, (smallest ratio, largest ratio))
        The times of that round, its ratio (above 1: the reduced precision is faster), and
        the smallest and largest ratio over the rounds (inf where a time is 0).
    """
    ratios: List[float] = [a / b if b > 0 else float("inf") for a, b in zip(float32, reduced)]
    middle = sorted(range(len(ratios)), key=ratios.__getitem__)[len(ratios) // 2]
    return float32[middle], reduced[middle], ratios[middle], (min(ratios), max(ratios))
