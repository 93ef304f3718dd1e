"""The JSON depth check reads any text in linear time and counts brackets only outside strings.

On main its string pattern backtracked: ``"`` followed by ``\\"`` N times took 40 s at 80 KB and
days at a few MB, for a manifest or a ``-symbol.json`` from someone else.
"""
import json
import random

import pytest

from mxmixed._files.untrusted import UnsafeFileError, check_json_depth


def _depth(value):
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


_TRICKY = ['', '[', ']', '{', '}', '\\', '"', '\\"', '\\\\', '[[{"', 'é', '\u2028', 'a\nb', '\\u005b']


def _random_json(rng, level=0):
    roll = rng.random()
    if level > 12 or roll < 0.3:
        return rng.choice([None, True, 1.5, -3, "".join(rng.choice(_TRICKY) for _ in range(4))])
    items = [_random_json(rng, level + 1) for _ in range(rng.randint(0, 3))]
    if roll < 0.65:
        return items
    return {"".join(rng.choice(_TRICKY) for _ in range(3)) + str(k): v for k, v in enumerate(items)}


def test_the_depth_is_counted_outside_strings_only():
    rng = random.Random(35)
    for _ in range(300):
        value = _random_json(rng)
        depth = _depth(value)
        for text in (json.dumps(value), json.dumps(value, ensure_ascii=False).encode("utf-8")):
            check_json_depth(text, "doc", limit=depth)
            if depth:
                with pytest.raises(UnsafeFileError, match="nests JSON %d levels deep, more than "
                                                          "the limit of %d" % (depth, depth - 1)):
                    check_json_depth(text, "doc", limit=depth - 1)


@pytest.mark.parametrize("text, depth", [
    ('["[[[[[", [[]], "\\"]"]', 3),  # strings and an escape across every block boundary
    ('["[[[[[', 6),  # a string that never closes: the brackets after its quote count
])
def test_the_depth_is_the_same_read_in_blocks_of_any_size(text, depth):
    rng = random.Random(36)
    cases = [(text, depth)] + [(json.dumps(v), _depth(v)) for v in
                               (_random_json(rng) for _ in range(40))]
    for text, depth in cases:
        for block in (1, 2, 3, 7):
            check_json_depth(text, "doc", limit=depth, block=block)
            if depth:
                with pytest.raises(UnsafeFileError, match="nests JSON %d levels" % depth):
                    check_json_depth(text, "doc", limit=depth - 1, block=block)


# main's check ran for days on these: pytest.ini's timeout ends such a run, by the thread
# method, as a scan stuck inside one regular-expression call never returns to a signal handler
@pytest.mark.timeout(method="thread")
@pytest.mark.parametrize("text, depth", [
    ('"' + '\\"' * 2_000_000, 0),  # a string that never ends: nothing after it is JSON
    ('["' + '\\"' * 1_000_000 + '"]', 1),
    ('["' + '\\\\' * 1_000_000 + '"]', 1),
    ('[' * 150 + '"' + '\\"[' * 1_000_000 + '"' + ']' * 150, 150),
    ('"\\' * 2_000_000, 0),
    ('[' * 1_000_000 + ']' * 1_000_000, 1_000_000),
], ids=["escaped-quotes", "escaped-quotes-closed", "escaped-backslashes", "deep-around-a-string",
        "quote-backslash", "one-million-levels"])
def test_megabytes_of_adversarial_json_are_checked_in_one_pass(text, depth):
    if depth <= 100:
        check_json_depth(text, "doc")
        check_json_depth(text.encode("utf-8"), "doc")
    else:
        with pytest.raises(UnsafeFileError, match="doc nests JSON %d levels deep" % depth):
            check_json_depth(text.encode("utf-8"), "doc")
