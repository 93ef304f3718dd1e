"""Token streams laid out for truncated back-propagation through time (BPTT)."""
import numpy as np

from .vocab import check_int

__all__ = ["batchify", "BPTTBatches"]


def batchify(indices, batch_size):
    """Lay a token stream out as ``batch_size`` parallel columns.

    Parameters
    ----------
    indices : array_like of int, 1-D
    batch_size : int
        Number of columns N; the tail that does not fill a row is dropped.

    Returns
    -------
    numpy.ndarray of int32, shape (L, N)
        Column n holds the n-th contiguous slice of the stream, so that consecutive windows
        of rows continue each other (what truncated BPTT needs).
    """
    check_int("batch_size", batch_size, 1)
    data = np.asarray(indices)
    if data.ndim != 1:
        raise ValueError("indices must be 1-D, got shape %s" % (data.shape,))
    if data.size and not np.issubdtype(data.dtype, np.integer):
        raise TypeError("indices must be integers, got dtype %s" % data.dtype)
    rows = data.size // batch_size
    if rows < 2:
        raise ValueError("%d tokens give fewer than 2 rows at batch_size %d: nothing to "
                         "predict" % (data.size, batch_size))
    return data[:rows * batch_size].astype(np.int32).reshape(batch_size, rows).T.copy()


class BPTTBatches:
    """``(X, y)`` windows of ``seq_len`` rows for truncated back-propagation through time.

    ``y`` is ``X`` shifted by one token. Windows are taken in order, so the hidden state at
    the end of one window is the right start for the next (detach it between windows).

    Parameters
    ----------
    indices : array_like of int, 1-D
        The token stream.
    batch_size : int
        N, the number of parallel streams.
    seq_len : int
        T, the window length.
    drop_last : bool, default True
        Drop a last window shorter than ``seq_len``.

    Attributes
    ----------
    data : numpy.ndarray of int32, shape (L, N)
        From :func:`batchify`.
    """

    def __init__(self, indices, batch_size, seq_len, drop_last=True):
        check_int("seq_len", seq_len, 1)
        self.data = batchify(indices, batch_size)
        self.batch_size, self.seq_len, self.drop_last = batch_size, seq_len, bool(drop_last)
        if drop_last and len(self) == 0:
            raise ValueError("the stream gives %d rows at batch_size %d, too few for one window "
                             "of seq_len %d" % (self.data.shape[0], batch_size, seq_len))

    def __len__(self):
        usable = self.data.shape[0] - 1
        return usable // self.seq_len if self.drop_last else -(-usable // self.seq_len)

    def __getitem__(self, i):
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            raise TypeError("window index must be an int, got %r" % (i,))
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("window %d out of range (%d windows)" % (i, n))
        start = i * self.seq_len
        stop = min(start + self.seq_len, self.data.shape[0] - 1)
        return self.data[start:stop], self.data[start + 1:stop + 1]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __repr__(self):
        return "BPTTBatches(windows=%d, seq_len=%d, batch_size=%d)" % (
            len(self), self.seq_len, self.batch_size)
