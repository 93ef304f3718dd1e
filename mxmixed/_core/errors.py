"""The one home of "MXNet's error in one line": every message that quotes MXNet's reason uses it."""
import re

__all__ = ["one_line"]


def one_line(err, limit=400):
    """MXNet's reason for an error, in one line: the failed check, and the operator it names.

    The C++ location and traceback are left out, and the text is cut at ``limit`` characters.

    Parameters
    ----------
    err : Exception
    limit : int, default 400

    Returns
    -------
    str
    """
    text = str(err).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    line = lines[-1] if lines else type(err).__name__
    for marker in ("Check failed: ", "MXNetError: "):
        if marker in line:
            line = line.split(marker, 1)[1]
    line = re.sub(r"^\[[\d:]+\] \S+:\d+: ", "", line)
    operator = re.search(r"Error in operator ([^:\s]+)", text)
    if operator and operator.group(1) not in line:
        line = "in operator %s: %s" % (operator.group(1), line)
    return line if len(line) <= limit else line[:limit - 3] + "..."
