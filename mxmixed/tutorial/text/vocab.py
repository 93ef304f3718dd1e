"""A token <-> index vocabulary, padded to a multiple of 8 for Tensor Cores."""
import collections

import numpy as np

import mxnet as mx

__all__ = ["Vocabulary"]


class Vocabulary:
    """A token <-> index mapping, with an unknown token and padding to a multiple of 8.

    Indices are given in this order: the unknown token (0), the reserved tokens, then the
    tokens seen at least ``min_count`` times, most frequent first (ties in code-point order),
    and finally padding tokens ``'<pad1>'``, ``'<pad2>'`` ... that make the size a multiple of
    ``multiple_of``, so that a decoder to the vocabulary meets the Tensor Core rule.

    Parameters
    ----------
    tokens : iterable of str
        The tokens to count.
    min_count : int, default 1
        Tokens seen fewer times map to the unknown token.
    max_size : int, optional
        Keep at most this many counted tokens (the most frequent).
    unknown_token : str, default '<unk>'
    reserved_tokens : sequence of str, default ()
        Tokens that get an index whether or not they were seen (e.g. ``'<eos>'``).
    multiple_of : int, default 8
        Pad the size up to a multiple of this (1: no padding).

    Attributes
    ----------
    idx_to_token : list of str
    token_to_idx : dict of str to int
    counts : collections.Counter
        How often each token was seen.
    """

    def __init__(self, tokens, min_count=1, max_size=None, unknown_token="<unk>",
                 reserved_tokens=(), multiple_of=8):
        if isinstance(tokens, str):
            raise TypeError("tokens must be a sequence of tokens, not a str; use "
                            "tokenize(text) first")
        check_int("min_count", min_count, 1)
        check_int("multiple_of", multiple_of, 1)
        if max_size is not None:
            check_int("max_size", max_size, 1)
        if not isinstance(unknown_token, str) or not unknown_token:
            raise ValueError("unknown_token must be a non-empty str, got %r" % (unknown_token,))
        reserved = list(reserved_tokens)
        if unknown_token in reserved or len(set(reserved)) != len(reserved):
            raise ValueError("reserved_tokens must be distinct and must not hold the unknown "
                             "token %r, got %r" % (unknown_token, reserved))
        self.counts = collections.Counter(tokens)
        special = [unknown_token] + reserved
        kept = sorted((t for t, c in self.counts.items()
                       if c >= min_count and t not in special),
                      key=lambda t: (-self.counts[t], t))
        if max_size is not None:
            kept = kept[:max_size]
        self.idx_to_token = special + kept
        pad = 1
        while len(self.idx_to_token) % multiple_of:
            name = "<pad%d>" % pad
            if name not in self.counts:
                self.idx_to_token.append(name)
            pad += 1
        self.token_to_idx = {t: i for i, t in enumerate(self.idx_to_token)}
        self.unknown_token = unknown_token
        self.reserved_tokens = tuple(reserved)
        self.min_count, self.max_size, self.multiple_of = min_count, max_size, multiple_of

    @property
    def unknown_index(self):
        """int: the index of the unknown token (0)."""
        return 0

    def __len__(self):
        return len(self.idx_to_token)

    def __contains__(self, token):
        return token in self.token_to_idx

    def __getitem__(self, token):
        return self.token_to_idx.get(token, 0)

    def __repr__(self):
        return "Vocabulary(size=%d, unknown=%r, min_count=%d)" % (
            len(self), self.unknown_token, self.min_count)

    def to_indices(self, tokens):
        """Map tokens to indices (unknown tokens to 0).

        Parameters
        ----------
        tokens : iterable of str

        Returns
        -------
        numpy.ndarray of int32
        """
        if isinstance(tokens, str):
            raise TypeError("tokens must be a sequence of tokens, not a str; use "
                            "tokenize(text) first")
        lookup = self.token_to_idx.get
        return np.fromiter((lookup(t, 0) for t in tokens), dtype=np.int32)

    def to_tokens(self, indices):
        """Map indices back to tokens.

        Parameters
        ----------
        indices : array_like of int or mxnet.nd.NDArray

        Returns
        -------
        list of str

        Raises
        ------
        IndexError
            For an index outside ``[0, len(vocab))``.
        """
        if isinstance(indices, mx.nd.NDArray):
            indices = indices.asnumpy()
        flat = np.asarray(indices).ravel()
        if flat.size and not np.all(np.equal(np.mod(flat, 1), 0)):
            raise TypeError("indices must be whole numbers")
        flat = flat.astype(np.int64)
        bad = flat[(flat < 0) | (flat >= len(self))]
        if bad.size:
            raise IndexError("index %d is outside the vocabulary of size %d"
                             % (bad[0], len(self)))
        return [self.idx_to_token[i] for i in flat]

    def to_dict(self):
        """The vocabulary as plain Python values (JSON-serializable).

        Returns
        -------
        dict
        """
        return {"idx_to_token": list(self.idx_to_token), "unknown_token": self.unknown_token,
                "reserved_tokens": list(self.reserved_tokens), "min_count": self.min_count,
                "max_size": self.max_size, "multiple_of": self.multiple_of}

    @classmethod
    def from_dict(cls, state):
        """Rebuild a vocabulary saved with :meth:`to_dict` (same indices; counts are empty).

        Parameters
        ----------
        state : dict

        Returns
        -------
        Vocabulary
        """
        try:
            vocab = cls.__new__(cls)
            vocab.idx_to_token = [str(t) for t in state["idx_to_token"]]
            vocab.unknown_token = state["unknown_token"]
            vocab.reserved_tokens = tuple(state["reserved_tokens"])
            vocab.min_count, vocab.max_size = state["min_count"], state["max_size"]
            vocab.multiple_of = state["multiple_of"]
        except (KeyError, TypeError) as err:
            raise ValueError("not a Vocabulary state: missing or bad entry %s" % err) from None
        if not vocab.idx_to_token or vocab.idx_to_token[0] != vocab.unknown_token:
            raise ValueError("not a Vocabulary state: index 0 must be the unknown token")
        vocab.token_to_idx = {t: i for i, t in enumerate(vocab.idx_to_token)}
        if len(vocab.token_to_idx) != len(vocab.idx_to_token):
            raise ValueError("not a Vocabulary state: duplicate tokens")
        vocab.counts = collections.Counter()
        return vocab


def check_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError("%s must be an integer >= %d, got %r" % (name, minimum, value))
