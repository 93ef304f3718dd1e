"""The refusal of every check on a file from someone else, and the checks on its JSON text.

:func:`check_json_depth` refuses JSON nested deeper than a limit (Python's parser recurses once
per level and ends in a ``RecursionError``), in time linear in the text;
:func:`json_object_pairs` refuses a key given twice. Imported from
:mod:`mxmixed._files.untrusted`.
"""
import re

import numpy as np

__all__ = ["UnsafeFileError", "MAX_JSON_DEPTH", "check_json_depth", "json_object_pairs"]


class UnsafeFileError(ValueError):
    """A file from someone else breaks a limit that is checked before it is parsed."""


MAX_JSON_DEPTH = 100
"""The deepest nesting of arrays and objects accepted in a JSON file from someone else (Python's
parser recurses once per level; MXNet's symbol files nest 5 deep, checkpoint manifests about 10)."""

_ESCAPE = re.compile(rb"\\.", re.S)  # a backslash and the character it escapes
_STRING = re.compile(rb'"[^"]*"')  # a string, once its escapes are gone
_BRACKETS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[{]}")


def check_json_depth(text, source, limit=MAX_JSON_DEPTH, block=1 << 20):
    """Refuse JSON text nested deeper than ``limit``, before a recursive parser sees it.

    Linear in the length of the text: three passes that never look back (the escapes, read
    left to right; the strings, which hold no quote once their escapes are gone; the brackets
    left, summed as +1 and -1), so that no input makes the check slow. They go a block at a
    time, so that what they make is a block's size, not the text's several times.

    Parameters
    ----------
    text : str or bytes
    source : str
        How to name the file in the message (its path).
    limit : int
    block : int, default 1 MiB
        Bytes read at a time (the depth found is the same for any size).

    Raises
    ------
    UnsafeFileError
        One line naming ``source`` and the limit.
    """
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    level = depth = 0
    for brackets in _brackets(memoryview(data).cast("B"), block):
        if brackets:
            run = np.frombuffer(brackets, dtype=np.int8).cumsum(dtype=np.int64) + level
            level, depth = int(run[-1]), max(depth, int(run.max()))
    if depth > limit:
        raise UnsafeFileError("%s nests JSON %d levels deep, more than the limit of %d; "
                              "refusing to parse it" % (source, depth, limit))


def _brackets(view, block):
    """The brackets of JSON text outside its strings, in order, as bytes 1 (open) and 255
    (close), made a block at a time: a backslash that ends a block escapes the next block's
    first character; a string left open at a block's end goes on in the next, and the brackets
    after its quote count only if it never closes (as the whole text's pass counts them)."""
    escape, quote = b"", False
    pending = []  # the brackets after an open string's quote
    for start in range(0, len(view), block):
        # outside a string a backslash is not JSON: the parser stops there, so dropping it (and
        # the next character) changes nothing before the point where the parser would stop
        text = _ESCAPE.sub(b"", escape + bytes(view[start:start + block]))
        escape = b""
        if text.endswith(b"\\"):
            text, escape = text[:-1], b"\\"
        if quote:
            closed = text.find(b'"')
            if closed < 0:  # the open string goes on
                pending.append(text.translate(_BRACKETS, _NOT_BRACKETS))
                continue
            text, quote, pending = text[closed + 1:], False, []
        text = _STRING.sub(b"", text)
        opened = text.find(b'"')
        if opened >= 0:
            quote, pending = True, [text[opened + 1:].translate(_BRACKETS, _NOT_BRACKETS)]
            text = text[:opened]
        yield text.translate(_BRACKETS, _NOT_BRACKETS)
    yield from pending


class _DuplicateKey(ValueError):
    pass


def json_object_pairs(pairs):
    """An ``object_pairs_hook`` for :func:`json.loads` that refuses a key given twice.

    Python keeps the last value of a repeated key and MXNet's reader may keep another one: a
    graph checked in one reading and loaded in the other would not be the graph checked.

    Raises
    ------
    ValueError
        Naming the key (the caller adds the file).
    """
    result = dict(pairs)
    if len(result) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey("the key %r is given twice in one object" % key[:80])
            seen.add(key)
    return result
