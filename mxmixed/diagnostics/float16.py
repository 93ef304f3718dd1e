"""Float16's representable range and where a set of values falls in it.

IEEE float16 has 5 exponent bits and 10 fraction bits:

==================  =====================  ==========================================
range               bounds                 what happens to a value cast to float16
==================  =====================  ==========================================
overflow            ``|x| >= 65520``       becomes inf (65504 is the largest float16)
normal              ``2**-14 <= |x|``      kept with 11 significant bits
subnormal           ``2**-24 ... 2**-14``  kept with fewer bits: precision is lost
rounds to zero      ``|x| <= 2**-25``      becomes 0 (2**-25 itself is a tie, to even)
==================  =====================  ==========================================

Between 2**-25 and 2**-24 a value rounds up to the smallest subnormal, 2**-24. The shares
here are computed by casting to float16 (NumPy rounds to nearest even, as a GPU does), so each
value lands exactly where a float16 cast would put it.
"""
from collections import namedtuple
from typing import TYPE_CHECKING, Sequence, Union

import numpy as np

from .._core.dtypes import (FLOAT16_MAX, FLOAT16_MIN_NORMAL, FLOAT16_MIN_SUBNORMAL,
                            FLOAT16_OVERFLOW, FLOAT16_ROUND_TO_ZERO)

if TYPE_CHECKING:  # for the annotations only
    import mxnet as mx

__all__ = ["FLOAT16_MAX", "FLOAT16_MIN_NORMAL", "FLOAT16_MIN_SUBNORMAL", "FLOAT16_ROUND_TO_ZERO",
           "FLOAT16_OVERFLOW", "LOG2_EDGES", "RangeShares", "float16_shares", "log2_histogram"]

_Values = Union[np.ndarray, Sequence[float], "mx.nd.NDArray"]

LOG2_EDGES = np.arange(-150, 130, dtype=np.float64)
"""numpy.ndarray: edges of the log2-magnitude histogram: one bin per power of two, [e, e+1),
covering every finite nonzero float32 (2**-149 ... 2**128)."""

_RangeShares = namedtuple("RangeShares", ["name", "size", "scale", "zero", "underflow",
                                          "subnormal", "normal", "overflow", "nonfinite",
                                          "max_abs", "min_abs", "counts"])


class RangeShares(_RangeShares):
    """Where the values of one tensor fall in float16's range, after scaling.

    Shares are fractions of all ``size`` elements; ``zero + underflow + subnormal + normal +
    overflow + nonfinite == 1``.

    Parameters
    ----------
    name : str
        The tensor (a parameter name, or 'all').
    size : int
        Number of elements.
    scale : float
        The loss scale the values were multiplied by.
    zero : float
        Share exactly zero before scaling (dead ReLUs and the like: no precision to lose).
    underflow : float
        Share nonzero that rounds to zero in float16 (``|x * scale| <= 2**-25``).
    subnormal : float
        Share that becomes a nonzero subnormal float16 (below 2**-14): kept, with lost precision.
    normal : float
        Share that becomes a normal float16.
    overflow : float
        Share finite that becomes inf in float16 (``|x * scale| >= 65520``).
    nonfinite : float
        Share already inf or NaN.
    max_abs, min_abs : float
        Largest and smallest nonzero finite magnitude, after scaling (0 when there is none).
    counts : numpy.ndarray of int64
        Histogram of log2 magnitudes of the nonzero finite scaled values on :data:`LOG2_EDGES`.
    """

    __slots__ = ()

    def __repr__(self):
        return ("RangeShares(name=%r, size=%d, scale=%g, zero=%.4g, underflow=%.4g, "
                "subnormal=%.4g, normal=%.4g, overflow=%.4g, nonfinite=%.4g, max_abs=%.4g)"
                % (self.name, self.size, self.scale, self.zero, self.underflow, self.subnormal,
                   self.normal, self.overflow, self.nonfinite, self.max_abs))


def _as_float64(values):
    try:
        import mxnet as mx

        if isinstance(values, mx.nd.NDArray):
            values = values.asnumpy()
    except ImportError:  # pragma: no cover
        pass
    return np.asarray(values, dtype=np.float64).ravel()


def log2_histogram(values: _Values) -> np.ndarray:
    """Histogram of ``log2 |x|`` over the nonzero finite values, one bin per power of two.

    Parameters
    ----------
    values : array_like or mxnet.nd.NDArray

    Returns
    -------
    numpy.ndarray of int64
        Counts on :data:`LOG2_EDGES` (bin k holds ``2**e <= |x| < 2**(e+1)``, e = edge k).
    """
    x = np.abs(_as_float64(values))
    x = x[np.isfinite(x) & (x > 0)]
    counts, _ = np.histogram(np.log2(x), bins=LOG2_EDGES)
    return counts.astype(np.int64)


def float16_shares(values: _Values, scale: float = 1.0, name: str = "") -> "RangeShares":
    """Where values land when multiplied by ``scale`` and cast to float16.

    Parameters
    ----------
    values : array_like or mxnet.nd.NDArray
        Gradients (any float dtype), unscaled.
    scale : float, default 1.0
        The loss scale.
    name : str, optional
        Carried into the result.

    Returns
    -------
    RangeShares

    Examples
    --------
    >>> import numpy as np
    >>> from mxmixed import diagnostics
    >>> shares = diagnostics.float16_shares(np.array([1e-9, 1e-6, 1.0, 1e5]))
    >>> shares.underflow, shares.subnormal, shares.normal, shares.overflow
    (0.25, 0.25, 0.25, 0.25)
    """
    if not (np.isfinite(scale) and scale > 0):
        raise ValueError("scale must be positive and finite, got %r" % (scale,))
    raw = _as_float64(values)
    size = raw.size
    if size == 0:
        raise ValueError("no values to analyse%s" % (" in '%s'" % name if name else ""))
    finite = np.isfinite(raw)
    scaled = raw * scale
    with np.errstate(over="ignore"):
        half = scaled.astype(np.float16)
    nonzero = finite & (raw != 0)
    n_zero = int(np.count_nonzero(finite & (raw == 0)))
    n_under = int(np.count_nonzero(nonzero & (half == 0)))
    n_over = int(np.count_nonzero(nonzero & np.isinf(half)))
    tiny = np.abs(half) < np.float16(FLOAT16_MIN_NORMAL)
    n_sub = int(np.count_nonzero(nonzero & (half != 0) & tiny))
    n_nonfinite = int(size - np.count_nonzero(finite))
    n_normal = size - n_zero - n_under - n_over - n_sub - n_nonfinite
    mags = np.abs(scaled[nonzero])
    with np.errstate(divide="ignore"):
        counts, _ = np.histogram(np.log2(mags[np.isfinite(mags)]), bins=LOG2_EDGES)
    return RangeShares(name=name, size=size, scale=float(scale), zero=n_zero / size,
                       underflow=n_under / size, subnormal=n_sub / size, normal=n_normal / size,
                       overflow=n_over / size, nonfinite=n_nonfinite / size,
                       max_abs=float(mags.max()) if mags.size else 0.0,
                       min_abs=float(mags.min()) if mags.size else 0.0,
                       counts=counts.astype(np.int64))


def combine(shares, name="all"):
    """Pool several :class:`RangeShares` (taken at one scale) into one, weighted by size."""
    shares = list(shares)
    if not shares:
        raise ValueError("nothing to combine")
    size = sum(s.size for s in shares)
    pooled = {field: sum(getattr(s, field) * s.size for s in shares) / size
              for field in ("zero", "underflow", "subnormal", "normal", "overflow", "nonfinite")}
    nonempty = [s for s in shares if s.max_abs > 0]
    return RangeShares(name=name, size=size, scale=shares[0].scale,
                       max_abs=max((s.max_abs for s in nonempty), default=0.0),
                       min_abs=min((s.min_abs for s in nonempty), default=0.0),
                       counts=np.sum([s.counts for s in shares], axis=0), **pooled)
