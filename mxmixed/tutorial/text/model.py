"""A small LSTM language model: Embedding, ``gluon.rnn.LSTM`` (layout TNC), Dense decoder.

Sizes are multiples of 8 by default (the Tensor Core rule).
"""
import mxnet as mx
from mxnet import gluon
from mxnet.gluon import nn, rnn

from .vocab import check_int

__all__ = ["TokenCrossEntropyLoss", "LSTMLanguageModel", "lstm_lm"]


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
            check_int(name, value, 1)
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
        check_int("batch_size", batch_size, 1)
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
