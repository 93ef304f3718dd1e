"""An offline text corpus and a small LSTM language model, for the loss-scaling experiment.

The corpus is built from text that ships with Python itself: the docstrings of a fixed,
sorted list of pure-Python standard-library modules (each module's docstring, then those of
its public classes, their public methods, and its public functions, in name order). Nothing is
downloaded, and the same Python version gives the same text on every machine
(:func:`corpus_fingerprint` checks it).

* :func:`stdlib_docstrings` / :func:`stdlib_corpus`: the text, tokenized (characters or words)
  and numericalized with a :class:`Vocabulary`.
* :func:`batchify` and :class:`BPTTBatches`: ``(T, N)`` windows of token ids, with targets
  shifted by one, for truncated back-propagation through time.
* :class:`LSTMLanguageModel` / :func:`lstm_lm`: Embedding, ``gluon.rnn.LSTM`` (layout TNC) and
  a Dense decoder to the vocabulary; sizes are multiples of 8 by default.
* :func:`train_language_model`: one training loop for float32, AMP without loss scaling and
  AMP with dynamic loss scaling, recording the loss and the share of gradients that round to
  zero in float16 (the experiment of ``tutorials/05_loss_scaling_experiment.ipynb``).
"""
import collections
import hashlib
import importlib
import inspect
import math
import re
import sys
import time

import numpy as np

import mxnet as mx
from mxnet import autograd, gluon
from mxnet.gluon import nn, rnn

__all__ = ["STDLIB_MODULES", "stdlib_docstrings", "corpus_fingerprint", "tokenize", "Vocabulary",
           "TextCorpus", "stdlib_corpus", "batchify", "BPTTBatches", "TokenCrossEntropyLoss",
           "LSTMLanguageModel", "lstm_lm", "LM_MODES", "float16_activation_gradients",
           "train_language_model"]

STDLIB_MODULES = tuple(sorted((
    "abc", "argparse", "base64", "bisect", "calendar", "colorsys", "configparser", "contextlib",
    "copy", "csv", "dataclasses", "difflib", "enum", "fnmatch", "fractions", "ftplib",
    "functools", "getopt", "gettext", "glob", "graphlib", "gzip", "hmac", "imaplib", "inspect",
    "ipaddress", "json", "keyword", "logging", "numbers", "operator", "optparse", "pprint",
    "queue", "quopri", "random", "sched", "secrets", "shlex", "smtplib", "statistics",
    "string", "textwrap", "timeit", "tokenize", "traceback", "typing", "uuid", "warnings",
    "weakref", "zipfile",
)))
"""tuple of str: the standard-library modules whose docstrings make the default corpus.

Pure-Python modules whose public names do not depend on the operating system, sorted."""

LEVELS = ("char", "word")
_WORD = re.compile(r"\w+|[^\w\s]|\n")


def _public(name):
    return not name.startswith("_")


def _module_docs(module):
    """Docstrings of a module, its public classes (and their methods) and functions, by name."""
    docs = [inspect.getdoc(module)]
    for name, obj in sorted(vars(module).items()):
        if not _public(name) or getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isclass(obj):
            docs.append(inspect.getdoc(obj))
            for attr, member in sorted(vars(obj).items()):
                if _public(attr) and inspect.isfunction(member):
                    docs.append(inspect.getdoc(member))
        elif inspect.isfunction(obj):
            docs.append(inspect.getdoc(obj))
    return [d for d in docs if d]


def stdlib_docstrings(modules=STDLIB_MODULES):
    """The docstrings of standard-library modules, as one deterministic text.

    Parameters
    ----------
    modules : sequence of str, default :data:`STDLIB_MODULES`
        Module names. They are de-duplicated and sorted, so the order given does not matter.

    Returns
    -------
    str
        Every docstring (module, public classes with their public methods, public functions,
        each in name order), separated by blank lines.

    Raises
    ------
    TypeError
        If ``modules`` is a string or holds something that is not a string.
    ValueError
        If ``modules`` is empty, or a module cannot be imported.
    RuntimeError
        If Python runs with ``-OO`` (``PYTHONOPTIMIZE=2``), which strips every docstring.
    """
    if isinstance(modules, str):
        raise TypeError("modules must be a sequence of module names, not one string %r; "
                        "write (%r,)" % (modules, modules))
    modules = list(modules)
    if not modules:
        raise ValueError("modules is empty: give at least one standard-library module name")
    bad = [m for m in modules if not isinstance(m, str)]
    if bad:
        raise TypeError("module names must be strings, got %r" % (bad[0],))
    if sys.flags.optimize >= 2:
        raise RuntimeError("Python runs with -OO (PYTHONOPTIMIZE=2), which strips docstrings: "
                           "the corpus would be empty; run without -OO")
    parts = []
    for name in sorted(set(modules)):
        try:
            module = importlib.import_module(name)
        except ImportError as err:
            raise ValueError("cannot import module %r for the corpus: %s" % (name, err)) from None
        parts.extend(_module_docs(module))
    return "\n\n".join(parts)


def corpus_fingerprint(text):
    """A short SHA-256 digest of a text, to check that two machines built the same corpus.

    Parameters
    ----------
    text : str

    Returns
    -------
    str
        The first 16 hex digits of the SHA-256 of the UTF-8 text.
    """
    if not isinstance(text, str):
        raise TypeError("text must be a str, got %s" % type(text).__name__)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def tokenize(text, level="char"):
    """Split a text into tokens.

    Parameters
    ----------
    text : str
    level : {'char', 'word'}, default 'char'
        ``'char'``: every character is a token (newlines included). ``'word'``: runs of word
        characters, single punctuation marks and newlines; other whitespace is dropped.

    Returns
    -------
    list of str
    """
    if not isinstance(text, str):
        raise TypeError("text must be a str, got %s" % type(text).__name__)
    if level not in LEVELS:
        raise ValueError("level must be 'char' or 'word', got %r" % (level,))
    return list(text) if level == "char" else _WORD.findall(text)


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
        _check_int("min_count", min_count, 1)
        _check_int("multiple_of", multiple_of, 1)
        if max_size is not None:
            _check_int("max_size", max_size, 1)
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


def _check_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError("%s must be an integer >= %d, got %r" % (name, minimum, value))


TextCorpus = collections.namedtuple("TextCorpus", ["text", "level", "vocab", "train", "valid",
                                                   "fingerprint"])
TextCorpus.__doc__ = """A tokenized, numericalized corpus (from :func:`stdlib_corpus`).

Attributes
----------
text : str
    The raw text.
level : {'char', 'word'}
vocab : Vocabulary
train, valid : numpy.ndarray of int32
    Token ids of the leading and trailing parts of the text.
fingerprint : str
    :func:`corpus_fingerprint` of the text.
"""


def stdlib_corpus(level="char", min_count=5, max_size=None, valid_fraction=0.1,
                  modules=STDLIB_MODULES):
    """The standard-library docstring corpus, tokenized and split into train and validation.

    Parameters
    ----------
    level : {'char', 'word'}, default 'char'
    min_count : int, default 5
        Rarer tokens become ``'<unk>'``.
    max_size : int, optional
        Largest number of counted tokens (useful at the word level).
    valid_fraction : float, default 0.1
        The trailing share of the tokens held out (0 <= f < 1; 0: no validation part).
    modules : sequence of str, default :data:`STDLIB_MODULES`

    Returns
    -------
    TextCorpus
        The vocabulary is built from the training part only. At the word level, newlines
        become ``'<eos>'``.
    """
    if not (isinstance(valid_fraction, (int, float)) and 0.0 <= valid_fraction < 1.0):
        raise ValueError("valid_fraction must lie in [0, 1), got %r" % (valid_fraction,))
    text = stdlib_docstrings(modules)
    tokens = tokenize(text, level)
    reserved = ()
    if level == "word":
        tokens = ["<eos>" if t == "\n" else t for t in tokens]
        reserved = ("<eos>",)
    n_valid = int(round(len(tokens) * valid_fraction))
    train_tokens, valid_tokens = tokens[:len(tokens) - n_valid], tokens[len(tokens) - n_valid:]
    vocab = Vocabulary(train_tokens, min_count=min_count, max_size=max_size,
                       reserved_tokens=reserved)
    return TextCorpus(text, level, vocab, vocab.to_indices(train_tokens),
                      vocab.to_indices(valid_tokens), corpus_fingerprint(text))


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
    _check_int("batch_size", batch_size, 1)
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
        _check_int("seq_len", seq_len, 1)
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


class TokenCrossEntropyLoss(gluon.loss.Loss):
    """Softmax cross-entropy per token: ``(T, N, V)`` logits and ``(T, N)`` labels give ``(T, N)``.

    Gluon's ``SoftmaxCrossEntropyLoss`` averages over every axis but the batch axis; a language
    model wants one loss per token. ``log_softmax`` is in AMP's float32 list, so under AMP the
    float16 logits are normalized in float32.
    """

    def __init__(self, **kwargs):
        super().__init__(None, 0, **kwargs)

    def hybrid_forward(self, F, pred, label):
        return -F.pick(F.log_softmax(pred, axis=-1), label, axis=-1)


class LSTMLanguageModel(nn.HybridBlock):
    """Embedding -> ``gluon.rnn.LSTM`` (layout TNC) -> Dense decoder to the vocabulary.

    Parameters
    ----------
    vocab_size : int
        Size of the vocabulary (a multiple of 8 for Tensor Cores: :class:`Vocabulary` pads).
    embed_size : int, default 64
    hidden_size : int, default 256
    num_layers : int, default 1
    dropout : float, default 0.0
        Dropout between LSTM layers (and on the LSTM output); 0 keeps the model deterministic.

    Notes
    -----
    Called as ``net(data)`` or ``net(data, states)``:

    - ``data``, NDArray of shape ``(T, N)``: token ids;
    - ``states``, optional: ``h`` and ``c``, each ``(num_layers, N, hidden_size)``, e.g. from
      :meth:`begin_state`.

    It returns the logits, an NDArray of shape ``(T, N, vocab_size)``, and, only when states
    were given, the final ``[h, c]`` (a list of NDArray), to carry to the next window.
    """

    def __init__(self, vocab_size, embed_size=64, hidden_size=256, num_layers=1, dropout=0.0,
                 **kwargs):
        super().__init__(**kwargs)
        for name, value in (("vocab_size", vocab_size), ("embed_size", embed_size),
                            ("hidden_size", hidden_size), ("num_layers", num_layers)):
            _check_int(name, value, 1)
        if not (isinstance(dropout, (int, float)) and 0.0 <= dropout < 1.0):
            raise ValueError("dropout must lie in [0, 1), got %r" % (dropout,))
        self.vocab_size, self.embed_size = vocab_size, embed_size
        self.hidden_size, self.num_layers, self.dropout = hidden_size, num_layers, dropout
        with self.name_scope():
            self.embedding = nn.Embedding(vocab_size, embed_size, prefix="embedding_")
            self.lstm = rnn.LSTM(hidden_size, num_layers=num_layers, layout="TNC",
                                 dropout=dropout, input_size=embed_size, prefix="lstm_")
            self.drop = nn.Dropout(dropout) if dropout else None
            self.decoder = nn.Dense(vocab_size, flatten=False, in_units=hidden_size,
                                    prefix="decoder_")

    def begin_state(self, batch_size, ctx=None, dtype="float32"):
        """Zero ``[h, c]`` states for ``batch_size`` streams.

        Parameters
        ----------
        batch_size : int
        ctx : mxnet.Context, optional
        dtype : str, default 'float32'
            'float16' for a net cast with ``net.cast('float16')``.

        Returns
        -------
        list of NDArray
        """
        _check_int("batch_size", batch_size, 1)
        return self.lstm.begin_state(batch_size, ctx=ctx or mx.cpu(), dtype=dtype)

    def _state_dtype(self):
        return next(iter(self.lstm.collect_params().values())).dtype

    def forward(self, data, *states):
        # A hybridized block caches one argument structure; called on NDArrays without
        # states, run with zero states so that the cached graph always takes (data, h, c).
        if not states and isinstance(data, mx.nd.NDArray):
            if data.ndim != 2:
                raise ValueError("data must be (T, N) token ids, got shape %s" % (data.shape,))
            states = self.begin_state(data.shape[1], ctx=data.context, dtype=self._state_dtype())
            return super().forward(data, *states)[0]
        return super().forward(data, *states)

    def hybrid_forward(self, F, data, *states):
        embedded = self.embedding(data)
        if states:
            if len(states) != 2:
                raise ValueError("an LSTM takes 2 states (h, c), got %d" % len(states))
            output, states = self.lstm(embedded, list(states))
        else:
            output = self.lstm(embedded)
        if self.drop is not None:
            output = self.drop(output)
        logits = self.decoder(output)
        return (logits, states) if states else logits


def lstm_lm(vocab_size, seed=None, ctx=None, **kwargs):
    """Create and initialize an :class:`LSTMLanguageModel`.

    Parameters
    ----------
    vocab_size : int
    seed : int, optional
        Seeds ``mx.random`` before the initialization, for reproducible weights.
    ctx : mxnet.Context, optional
        The CPU by default.
    **kwargs
        Passed to :class:`LSTMLanguageModel`.

    Returns
    -------
    LSTMLanguageModel
        Initialized (Xavier weights, zero biases), not hybridized.
    """
    net = LSTMLanguageModel(vocab_size, **kwargs)
    if seed is not None:
        mx.random.seed(seed)
    net.initialize(mx.init.Xavier(), ctx=ctx or mx.cpu())
    return net


LM_MODES = ("float32", "float16-unscaled", "float16-scaled")
"""tuple of str: the three runs of :func:`train_language_model`."""


def float16_activation_gradients(net):
    """Names, in :func:`~mxmixed.diagnostics.collect_gradients` output, of the activation
    gradients that are float16 tensors under AMP.

    They are the gradients flowing into the decoder's output (the logits), the LSTM's output
    and the embedding's output. (The gradients of the loss ops, ``log_softmax`` and ``pick``,
    stay float32 under AMP; the LSTM's fused parameter vector is a parameter gradient.)

    Parameters
    ----------
    net : LSTMLanguageModel

    Returns
    -------
    list of str
    """
    from .diagnostics.gradients import ACTIVATION_MARK

    if not isinstance(net, LSTMLanguageModel):
        raise TypeError("net must be an LSTMLanguageModel, got %s" % type(net).__name__)
    return [net.decoder.name + "_fwd" + ACTIVATION_MARK, net.lstm.prefix + "rnn0" + ACTIVATION_MARK,
            net.embedding.name + "_fwd" + ACTIVATION_MARK]


def _detach(states):
    return [s.detach() for s in states]


def train_language_model(mode, build_net, batches, steps, learning_rate=2e-3, clip=1.0,
                         scaler=None, measure_every=25, ctx=None, progress=True):
    """Train a language model in float32, or float16 (AMP) with or without loss scaling.

    The three modes run one loop; only the precision and the loss scaler differ:

    * ``'float32'``: no AMP, no scaler; clipping with ``gluon.utils.clip_global_norm``.
    * ``'float16-unscaled'``: AMP (:func:`mxmixed.amp_scope`) with a static scale of 1, i.e.
      no loss scaling. The scaler still skips a step whose gradients hold inf or NaN (and
      counts it in ``skipped``), so this run can fail only through underflow and precision
      loss, not through one overflowing step poisoning the weights.
    * ``'float16-scaled'``: AMP with a dynamic :class:`~mxmixed.scaler.LossScaler`
      (MXNet's constants: 2**16 to start, halved on overflow, doubled after 2000 clean steps).

    The loss of a window is the *mean* per-token cross-entropy, back-propagated as it is (as
    bigLSTM and gluon-nlp's language-model scripts do), and the step is ``step(trainer, 1)``.
    Adam; the hidden state is carried from window to window and detached.

    Every ``measure_every`` steps (and at the first and last step), after the update, the
    gradients of the current window are recomputed in float32 with
    :func:`mxmixed.diagnostics.collect_gradients` (from zero initial states) and
    :func:`mxmixed.diagnostics.gradient_stats` gives the share of the nonzero values that
    round to zero in float16 at the scale the run uses (1 without scaling, the scaler's scale
    with it; in float32, what float16 without scaling would lose), for the parameters and for
    the activation gradients named by :func:`float16_activation_gradients`.

    Parameters
    ----------
    mode : {'float32', 'float16-unscaled', 'float16-scaled'}
    build_net : callable
        Returns a fresh initialized :class:`LSTMLanguageModel`; called inside the AMP scope.
    batches : BPTTBatches
        Windows are cycled through when ``steps`` exceeds their number.
    steps : int
    learning_rate : float, default 2e-3
        Adam's learning rate.
    clip : float or None, default 1.0
        Global norm of the true (unscaled) gradients to clip to; None: no clipping.
    scaler : LossScaler, optional
        For ``'float16-scaled'`` only: the scaler to use instead of a default dynamic one.
    measure_every : int or None, default 25
        None: no gradient measurements.
    ctx : mxnet.Context, optional
    progress : bool, default True
        A text tqdm bar over the steps.

    Returns
    -------
    dict
        ``mode``, ``losses`` (per step, float32 values; inf or nan when the run diverged),
        ``measured_steps``, ``underflow_params`` and ``underflow_activations`` (shares per
        measurement), ``scales`` (per step; 1.0 without scaling, None in float32),
        ``skipped`` (steps skipped on overflow), ``seconds`` (wall time of the loop, without
        measurements), ``net`` and ``trainer``.

    .. note::
       The loss block is hybridized, so AMP's graph pass casts the float16 logits to float32
       for ``log_softmax`` (on AMP's float32 list), as on a GPU.
    """
    from tqdm import tqdm  # text bars: they render in the docs, where widgets do not

    from .diagnostics import collect_gradients, gradient_stats
    from .diagnostics.gradients import ACTIVATION_MARK
    from .scaler import LossScaler
    from .training import amp_scope, clip_global_norm, init_trainer, scale_loss, step

    if mode not in LM_MODES:
        raise ValueError("mode must be one of %s, got %r" % (LM_MODES, mode))
    if not isinstance(batches, BPTTBatches):
        raise TypeError("batches must be a BPTTBatches, got %s" % type(batches).__name__)
    _check_int("steps", steps, 1)
    if measure_every is not None:
        _check_int("measure_every", measure_every, 1)
    if clip is not None and not (isinstance(clip, (int, float)) and math.isfinite(clip)
                                 and clip > 0):
        raise ValueError("clip must be positive and finite, or None; got %r" % (clip,))
    if scaler is not None and mode != "float16-scaled":
        raise ValueError("a scaler applies to mode 'float16-scaled' only, not %r" % (mode,))
    ctx = ctx or mx.cpu()
    loss_fn = TokenCrossEntropyLoss()
    loss_fn.hybridize()  # AMP's graph pass then casts the logits to float32 for log_softmax
    tokens = batches.seq_len * batches.batch_size
    result = {"mode": mode, "losses": [], "measured_steps": [], "underflow_params": [],
              "underflow_activations": [], "scales": [] if mode != "float32" else None}
    measure_at = set() if measure_every is None else \
        set(range(0, steps, measure_every)) | {steps - 1}
    seconds = 0.0
    with amp_scope(enabled=mode != "float32"):
        net = build_net()
        if not isinstance(net, LSTMLanguageModel):
            raise TypeError("build_net must return an LSTMLanguageModel, got %s"
                            % type(net).__name__)
        net.hybridize()
        trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": learning_rate},
                                update_on_kvstore=False)
        loss_scaler = None
        if mode == "float16-unscaled":
            loss_scaler = init_trainer(trainer, LossScaler.static(1.0))
        elif mode == "float16-scaled":
            loss_scaler = init_trainer(trainer, scaler if scaler is not None else "dynamic")
        params = [p for p in net.collect_params().values() if p.grad_req != "null"]
        activation_keys = float16_activation_gradients(net)
        states = net.begin_state(batches.batch_size, ctx=ctx)
        bar = tqdm(total=steps, desc=mode, mininterval=2.0, disable=not progress)
        for i in range(steps):
            x_np, y_np = batches[i % len(batches)]
            if i % len(batches) == 0:
                states = net.begin_state(batches.batch_size, ctx=ctx)
            X, y = mx.nd.array(x_np, ctx=ctx), mx.nd.array(y_np, ctx=ctx)
            started = time.perf_counter()
            states = _detach(states)
            with autograd.record():
                logits, states = net(X, *states)
                loss = loss_fn(logits, y).mean()
                if loss_scaler is not None:
                    result["scales"].append(loss_scaler.loss_scale)
                    with scale_loss(loss, trainer) as scaled:
                        scaled.backward()
                else:
                    loss.backward()
            if clip is not None:
                if loss_scaler is not None:
                    clip_global_norm(trainer, clip)
                else:
                    gluon.utils.clip_global_norm([p.grad(ctx) for p in params], clip)
            step(trainer, 1)
            value = float(loss.astype("float32").asscalar())
            seconds += time.perf_counter() - started
            result["losses"].append(value)
            if i in measure_at:
                scale = loss_scaler.loss_scale if mode == "float16-scaled" else 1.0
                grads = collect_gradients(net, (X, y), loss_fn=loss_fn, activations=True,
                                          ctx=ctx)
                # collect_gradients gives the gradient of the summed token losses; the run
                # back-propagates their mean, so its float16 values are these / tokens * scale
                weights = {n: g for n, g in grads.items() if not n.endswith(ACTIVATION_MARK)}
                acts = {n: g for n, g in grads.items() if n in activation_keys}
                if len(acts) != len(activation_keys):
                    raise RuntimeError("activation gradients %s not found among %s"
                                       % (sorted(set(activation_keys) - set(acts)), list(grads)))
                result["measured_steps"].append(i)
                result["underflow_params"].append(
                    gradient_stats(weights, scale / tokens).total.underflow)
                result["underflow_activations"].append(
                    gradient_stats(acts, scale / tokens).total.underflow)
            bar.update(1)
        bar.close()
    result.update(skipped=loss_scaler.skipped_steps if loss_scaler is not None else 0,
                  seconds=seconds, net=net, trainer=trainer)
    return result
