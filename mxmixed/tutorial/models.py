"""The small digits CNN that the tests, notebooks, demo and benchmarks all train.

Channel and hidden sizes are multiples of 8, the Tensor Core rule. It has no random
layers (no Dropout), so a resumed run can be bit-identical to an uninterrupted one.
"""
import os

import mxnet as mx
from mxnet.gluon import nn

__all__ = ["DigitsCNN", "digits_cnn", "exported_digits_mlp"]


class DigitsCNN(nn.HybridBlock):
    """Two 3x3 convolutions with BatchNorm, a max-pool and two Dense layers.

    Parameters
    ----------
    channels : tuple of int, default (16, 32)
        Output channels of the two convolutions (multiples of 8).
    hidden : int, default 64
        Units of the hidden Dense layer (a multiple of 8).
    classes : int, default 10
        Number of classes.
    in_channels : int, default 1
        Channels of the input images.
    image_size : int, default 8
        Height and width of the input images (even).
    """

    def __init__(self, channels=(16, 32), hidden=64, classes=10, in_channels=1, image_size=8,
                 **kwargs):
        super().__init__(**kwargs)
        c1, c2 = channels
        pooled = (image_size // 2) ** 2 * c2
        with self.name_scope():
            self.features = nn.HybridSequential(prefix="features_")
            with self.features.name_scope():
                self.features.add(
                    nn.Conv2D(c1, 3, padding=1, use_bias=False, in_channels=in_channels),
                    nn.BatchNorm(in_channels=c1),
                    nn.Activation("relu"),
                    nn.Conv2D(c2, 3, padding=1, use_bias=False, in_channels=c1),
                    nn.BatchNorm(in_channels=c2),
                    nn.Activation("relu"),
                    nn.MaxPool2D(2),
                )
            self.hidden = nn.Dense(hidden, activation="relu", in_units=pooled, prefix="hidden_")
            self.output = nn.Dense(classes, in_units=hidden, prefix="output_")

    def hybrid_forward(self, F, x):
        return self.output(self.hidden(self.features(x)))


def digits_cnn(seed=None, ctx=None, **kwargs):
    """Create and initialize a :class:`DigitsCNN`.

    Parameters
    ----------
    seed : int, optional
        Seeds ``mx.random`` before the Xavier initialization, for reproducible weights.
    ctx : mxnet.Context, optional
        Context of the parameters; the CPU by default.
    **kwargs
        Passed to :class:`DigitsCNN`.

    Returns
    -------
    DigitsCNN
        The initialized network (not hybridized).
    """
    if seed is not None:
        mx.random.seed(seed)
    net = DigitsCNN(**kwargs)
    net.initialize(mx.init.Xavier(magnitude=2.0), ctx=ctx or mx.cpu())
    return net


def exported_digits_mlp(folder, hidden=32):
    """A float32 Symbol checkpoint to convert: a small MLP for the 8x8 digits, exported.

    The stand-in for a trained model in the examples of :mod:`mxmixed.symbolic`: 64 inputs,
    ``hidden`` relu units and 10 outputs, initialized (not trained), hybridized, run once and
    exported as ``digits-symbol.json`` and ``digits-0000.params`` in ``folder``.

    Parameters
    ----------
    folder : str
    hidden : int, default 32

    Returns
    -------
    str
        The checkpoint's prefix, ``folder/digits``.

    Examples
    --------
    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> prefix = exported_digits_mlp(folder)
    >>> sorted(os.listdir(folder))
    ['digits-0000.params', 'digits-symbol.json']
    """
    net = nn.HybridSequential()
    net.add(nn.Dense(hidden, activation="relu"), nn.Dense(10))
    net.initialize()
    net.hybridize()
    net(mx.nd.ones((1, 64)))
    prefix = os.path.join(folder, "digits")
    net.export(prefix)
    return prefix
