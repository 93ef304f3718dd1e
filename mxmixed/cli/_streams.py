"""Standard output and error for the commands: a path always prints, a closed pipe breaks nothing."""
import os


def printable(text, encoding=None):
    """``text`` as ``encoding`` can write it: printing a path never fails.

    A byte of a file name that is not UTF-8 (held by Python as a surrogate escape, as in
    ``os.fsdecode(b'mod\\xe8le')``) comes out as ``\\xe8``; any other character the encoding
    lacks as ``\\u4e2d``.

    Parameters
    ----------
    text : str
    encoding : str, optional
        The stream's encoding; UTF-8 by default.

    Returns
    -------
    str
    """
    encoding = encoding or "utf-8"
    try:
        text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a lone surrogate that no file name gave
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.encode(encoding, "backslashreplace").decode(encoding)


class Printable:
    """A text stream whose ``write`` never fails on a character its encoding lacks, and shows
    the bytes of a path that is not UTF-8 alike everywhere (:func:`printable`)."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        return self._stream.write(printable(text, getattr(self._stream, "encoding", None)))

    def __getattr__(self, name):
        return getattr(self._stream, name)


class PipeSafe:
    """Standard output that a closed pipe (``mxmixed convert ... | head -1``) cannot break, nor
    a character its encoding lacks (:func:`printable`).

    Once the reader is gone, the rest of the output is dropped: the command still finishes its
    work (writing the converted pair) and exits with the code its work deserves, with no
    ``BrokenPipeError`` traceback, neither now nor at interpreter exit.
    """

    def __init__(self, stream):
        self._stream, self._gone = stream, False

    def write(self, text):
        if not self._gone:
            try:
                return self._stream.write(printable(text,
                                                    getattr(self._stream, "encoding", None)))
            except BrokenPipeError:
                self._drop()
        return len(text)

    def flush(self):
        if not self._gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._drop()

    def _drop(self):
        self._gone = True
        try:  # what Python still holds for the descriptor goes nowhere at exit
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self._stream.fileno())
            os.close(null)
        except (OSError, ValueError, AttributeError):
            pass

    def __getattr__(self, name):
        return getattr(self._stream, name)
