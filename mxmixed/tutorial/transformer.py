"""A small BERT-style Transformer encoder classifier in Gluon, and its task (notebook 10).

* :class:`TransformerEncoderLayer`: self-attention through MXNet's fused interleaved attention
  GEMMs (``interleaved_matmul_selfatt_qk`` / ``_valatt``, as gluonnlp's BERT uses them), then a
  GELU feed-forward network, each followed by a residual connection and LayerNorm (post-norm,
  as in BERT);
* :class:`TransformerClassifier` / :func:`transformer_classifier`: a token Embedding plus a
  learned positional embedding, the encoder layers, mean pooling over the tokens and a Dense
  classifier;
* :func:`module_windows`: the task, which of several standard-library modules a window of
  words of their docstrings comes from (text shipped with Python, nothing downloaded).

The model depends on MXNet only. Sizes are multiples of 8 by default (the Tensor Core rule).
"""
import numpy as np

import mxnet as mx
from mxnet.gluon import nn

from .text.corpus import stdlib_docstrings, tokenize
from .text.vocab import Vocabulary, check_int

__all__ = ["TransformerEncoderLayer", "TransformerClassifier", "transformer_classifier",
           "module_windows"]


class TransformerEncoderLayer(nn.HybridBlock):
    """One post-norm Transformer encoder layer, on ``(T, N, C)`` inputs (layout TNC).

    ``x = LayerNorm(x + Attention(x))``, then ``x = LayerNorm(x + FFN(x))`` with
    ``FFN(x) = Dense(GELU(Dense(x)))``. The attention projects ``x`` once to the queries, keys
    and values of every head, interleaved, and runs the two fused GEMMs
    ``mx.nd.contrib.interleaved_matmul_selfatt_qk`` (scaled by ``1/sqrt(units/num_heads)``)
    and ``..._valatt``, around a softmax. There is no padding mask: every window is full.

    Parameters
    ----------
    units : int, default 32
        The model width C; a multiple of ``num_heads``.
    hidden_size : int, default 64
        The width of the feed-forward network.
    num_heads : int, default 2
    """

    def __init__(self, units=32, hidden_size=64, num_heads=2, **kwargs):
        super().__init__(**kwargs)
        for name, value in (("units", units), ("hidden_size", hidden_size),
                            ("num_heads", num_heads)):
            check_int(name, value, 1)
        if units % num_heads:
            raise ValueError("units (%d) must be a multiple of num_heads (%d)"
                             % (units, num_heads))
        self.units, self.num_heads = units, num_heads
        with self.name_scope():
            self.qkv = nn.Dense(3 * units, flatten=False, in_units=units, prefix="qkv_")
            self.proj = nn.Dense(units, flatten=False, in_units=units, prefix="proj_")
            self.norm1 = nn.LayerNorm(in_channels=units, prefix="norm1_")
            self.ffn1 = nn.Dense(hidden_size, flatten=False, in_units=units, prefix="ffn1_")
            self.ffn2 = nn.Dense(units, flatten=False, in_units=hidden_size, prefix="ffn2_")
            self.norm2 = nn.LayerNorm(in_channels=units, prefix="norm2_")

    def hybrid_forward(self, F, x):
        qkv = self.qkv(x)                                            # (T, N, 3C)
        scores = F.contrib.interleaved_matmul_selfatt_qk(qkv, heads=self.num_heads)
        weights = F.softmax(scores, axis=-1)                         # (N * heads, T, T)
        context = F.contrib.interleaved_matmul_selfatt_valatt(qkv, weights,
                                                              heads=self.num_heads)
        x = self.norm1(x + self.proj(context))
        hidden = F.LeakyReLU(self.ffn1(x), act_type="gelu")
        return self.norm2(x + self.ffn2(hidden))


class TransformerClassifier(nn.HybridBlock):
    """Token ids ``(N, T)`` -> class logits ``(N, num_classes)``: a tiny BERT-style encoder.

    Embedding plus a learned positional embedding, ``num_layers``
    :class:`TransformerEncoderLayer`, the mean over the ``T`` tokens, a Dense classifier.

    Parameters
    ----------
    vocab_size : int
    seq_len : int
        T, the window length every input has (the positional embedding has ``seq_len`` rows).
    num_classes : int, default 2
    units : int, default 32
    hidden_size : int, default 64
    num_heads : int, default 2
    num_layers : int, default 2
    """

    def __init__(self, vocab_size, seq_len, num_classes=2, units=32, hidden_size=64,
                 num_heads=2, num_layers=2, **kwargs):
        super().__init__(**kwargs)
        for name, value in (("vocab_size", vocab_size), ("seq_len", seq_len),
                            ("num_classes", num_classes), ("num_layers", num_layers)):
            check_int(name, value, 1)
        self.seq_len = seq_len
        with self.name_scope():
            self.embedding = nn.Embedding(vocab_size, units, prefix="embedding_")
            self.position_weight = self.params.get("position_weight", shape=(seq_len, units),
                                                   init=mx.init.Normal(0.02))
            self.layers = nn.HybridSequential(prefix="layers_")
            with self.layers.name_scope():
                for _ in range(num_layers):
                    self.layers.add(TransformerEncoderLayer(units, hidden_size, num_heads))
            self.output = nn.Dense(num_classes, in_units=units, prefix="output_")

    def forward(self, tokens, *args):
        if isinstance(tokens, mx.nd.NDArray) and (tokens.ndim != 2
                                                  or tokens.shape[1] != self.seq_len):
            raise ValueError("tokens must be (N, %d) token ids, got shape %s"
                             % (self.seq_len, tokens.shape))
        return super().forward(tokens, *args)

    def hybrid_forward(self, F, tokens, position_weight):
        x = F.transpose(self.embedding(tokens), axes=(1, 0, 2))      # (T, N, C)
        x = F.broadcast_add(x, F.expand_dims(position_weight, axis=1))
        x = self.layers(x)
        return self.output(F.mean(x, axis=0))                        # (N, num_classes)


def transformer_classifier(vocab_size, seq_len, seed=None, ctx=None, **kwargs):
    """Create and initialize a :class:`TransformerClassifier`.

    Parameters
    ----------
    vocab_size, seq_len : int
    seed : int, optional
        Seeds ``mx.random`` before the initialization, for reproducible weights.
    ctx : mxnet.Context, optional
        The CPU by default.
    **kwargs
        Passed to :class:`TransformerClassifier`.

    Returns
    -------
    TransformerClassifier
        Initialized (Xavier weights, zero biases, LayerNorm at identity, ``N(0, 0.02)``
        positions), not hybridized.
    """
    net = TransformerClassifier(vocab_size, seq_len, **kwargs)
    if seed is not None:
        mx.random.seed(seed)
    net.initialize(mx.init.Xavier(), ctx=ctx or mx.cpu())
    return net


def module_windows(modules, vocab, seq_len=16, test_fraction=0.2):
    """Windows of words from the docstrings of standard-library modules, labelled by module.

    Each module's docstrings (:func:`~mxmixed.tutorial.text.stdlib_docstrings`) are tokenized
    at the word level (newlines become ``'<eos>'``, as in
    :func:`~mxmixed.tutorial.text.stdlib_corpus`) and cut into consecutive, non-overlapping
    windows of ``seq_len`` tokens. The leading windows of each module are for training, its
    trailing ``test_fraction`` for testing, so no text is in both.

    Parameters
    ----------
    modules : sequence of str
        Two or more module names; the label of a window is the index of its module here.
    vocab : Vocabulary
        Maps the words to ids (unknown words to 0).
    seq_len : int, default 16
    test_fraction : float, default 0.2
        In ``(0, 1)``.

    Returns
    -------
    tuple of numpy.ndarray
        ``(X_train, y_train, X_test, y_test)``: token ids ``(n, seq_len)`` as int32, labels
        as float32 (what Gluon's losses take).
    """
    if isinstance(modules, str) or len(modules) < 2 or len(set(modules)) != len(modules):
        raise ValueError("modules must be two or more distinct module names, got %r"
                         % (modules,))
    if not isinstance(vocab, Vocabulary):
        raise TypeError("vocab must be a Vocabulary, got %s" % type(vocab).__name__)
    check_int("seq_len", seq_len, 1)
    if not (isinstance(test_fraction, float) and 0.0 < test_fraction < 1.0):
        raise ValueError("test_fraction must lie in (0, 1), got %r" % (test_fraction,))
    parts = ([], [], [], [])
    for label, module in enumerate(modules):
        words = ["<eos>" if w == "\n" else w
                 for w in tokenize(stdlib_docstrings((module,)), "word")]
        n = len(words) // seq_len
        n_test = int(round(n * test_fraction))
        if n - n_test < 1 or n_test < 1:
            raise ValueError("module %r gives %d windows of %d words: too few to split"
                             % (module, n, seq_len))
        ids = vocab.to_indices(words[:n * seq_len]).reshape(n, seq_len)
        for i, block in ((0, ids[:n - n_test]), (2, ids[n - n_test:])):
            parts[i].append(block)
            parts[i + 1].append(np.full(len(block), label, dtype=np.float32))
    return tuple(np.concatenate(p) for p in parts)
