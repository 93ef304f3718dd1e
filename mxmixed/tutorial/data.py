"""Offline datasets: the handwritten digits that ship inside scikit-learn.

Nothing here downloads. ``cifar10_loaders`` keeps the real CIFAR-10 path for users with
the data at hand, and refuses to download unless asked to.
"""
import numpy as np

import mxnet as mx
from mxnet import gluon

__all__ = ["digits_arrays", "digits_datasets", "digits_loaders", "SeededSampler",
           "cifar10_loaders"]

NUM_CLASSES = 10


def digits_arrays(test_fraction=0.2, seed=0, size=8, channels=1):
    """Load scikit-learn's 8x8 digits as NCHW float32 arrays with a deterministic split.

    Parameters
    ----------
    test_fraction : float, default 0.2
        Share of the 1797 images held out for testing.
    seed : int, default 0
        Seed of the split; the same seed always gives the same split.
    size : int, default 8
        Output height and width, a multiple of 8 (nearest-neighbour upscaling), e.g. 32
        for CIFAR-style networks such as gluoncv's ``cifar_resnet20_v1``.
    channels : int, default 1
        Number of channels; the grey image is repeated (3 for RGB networks).

    Returns
    -------
    tuple of numpy.ndarray
        ``(X_train, y_train, X_test, y_test)``; images in [0, 1], labels int32.
    """
    from sklearn.datasets import load_digits

    if not 0.0 < test_fraction < 1.0:
        raise ValueError("test_fraction must lie strictly between 0 and 1, got %r" % (test_fraction,))
    if size < 8 or size % 8:
        raise ValueError("size must be a multiple of 8 (8, 16, 32, ...), got %r" % (size,))
    if channels < 1:
        raise ValueError("channels must be at least 1, got %r" % (channels,))
    digits = load_digits()
    X = (digits.images.astype(np.float32) / 16.0)[:, None, :, :]
    y = digits.target.astype(np.int32)
    factor = size // 8
    if factor > 1:
        X = X.repeat(factor, axis=2).repeat(factor, axis=3)
    if channels > 1:
        X = np.repeat(X, channels, axis=1)
    order = np.random.RandomState(seed).permutation(len(y))
    n_test = int(round(len(y) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    return X[train], y[train], X[test], y[test]


def digits_datasets(test_fraction=0.2, seed=0, size=8, channels=1):
    """The digits split as Gluon datasets.

    Parameters
    ----------
    test_fraction, seed, size, channels
        As in :func:`digits_arrays`.

    Returns
    -------
    tuple of mxnet.gluon.data.ArrayDataset
        ``(train, test)``.
    """
    X_train, y_train, X_test, y_test = digits_arrays(test_fraction, seed, size, channels)
    return (gluon.data.ArrayDataset(mx.nd.array(X_train), mx.nd.array(y_train, dtype="int32")),
            gluon.data.ArrayDataset(mx.nd.array(X_test), mx.nd.array(y_test, dtype="int32")))


class SeededSampler(gluon.data.Sampler):
    """A shuffling sampler driven by its own NumPy generator, whose state can be saved.

    Gluon's ``RandomSampler`` draws from NumPy's global generator, so a resumed run cannot
    reproduce its data order. This one owns a ``RandomState``; ``get_state`` and
    ``set_state`` make exact resume possible.

    Parameters
    ----------
    length : int
        Number of samples.
    seed : int, default 0
        Seed of the generator.
    """

    def __init__(self, length, seed=0):
        self._length = int(length)
        self.rng = np.random.RandomState(seed)

    def __iter__(self):
        return iter(self.rng.permutation(self._length).tolist())

    def __len__(self):
        return self._length

    def get_state(self):
        """Return the generator state (a tuple, as ``RandomState.get_state``)."""
        return self.rng.get_state()

    def set_state(self, state):
        """Restore a state returned by :meth:`get_state`."""
        self.rng.set_state(state)


def digits_loaders(batch_size=64, test_fraction=0.2, seed=0, size=8, channels=1):
    """Train and test DataLoaders over the digits, shuffled by a :class:`SeededSampler`.

    Parameters
    ----------
    batch_size : int, default 64
        Batch size of both loaders. The last partial training batch is dropped so every
        step sees the same batch size.
    test_fraction, seed, size, channels
        As in :func:`digits_arrays`; ``seed`` also seeds the shuffling.

    Returns
    -------
    tuple of mxnet.gluon.data.DataLoader
        ``(train_loader, test_loader)``; ``train_loader.sampler`` is not exposed by Gluon,
        so the sampler is attached as ``train_loader.seeded_sampler``.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be positive, got %r" % (batch_size,))
    train, test = digits_datasets(test_fraction, seed, size, channels)
    sampler = SeededSampler(len(train), seed)
    batches = gluon.data.BatchSampler(sampler, batch_size, last_batch="discard")
    train_loader = gluon.data.DataLoader(train, batch_sampler=batches)
    train_loader.seeded_sampler = sampler
    test_loader = gluon.data.DataLoader(test, batch_size=batch_size, shuffle=False)
    return train_loader, test_loader


def cifar10_loaders(batch_size=64, root=None, download=False):
    """CIFAR-10 through Gluon's loader, for users who have the data at hand.

    Parameters
    ----------
    batch_size : int, default 64
        Batch size.
    root : str, optional
        Folder of the CIFAR-10 binaries; Gluon's default folder when omitted.
    download : bool, default False
        Off by default: this project must work offline. With False and no data in
        ``root``, a FileNotFoundError says so instead of reaching for the network.

    Returns
    -------
    tuple of mxnet.gluon.data.DataLoader
        ``(train_loader, test_loader)`` of normalised NCHW float32 images.
    """
    import os

    from mxnet.gluon.data.vision import CIFAR10, transforms

    kwargs = {} if root is None else {"root": root}
    folder = os.path.expanduser(kwargs.get("root", os.path.join(mx.base.data_dir(), "datasets", "cifar10")))
    if not download and not os.path.isdir(os.path.join(folder, "cifar-10-batches-bin")):
        raise FileNotFoundError(
            "CIFAR-10 is not in %s and download=False; fetch it yourself or pass download=True "
            "on a machine with network access" % folder)
    to_tensor = transforms.Compose([transforms.ToTensor(),
                                    transforms.Normalize([0.4914, 0.4822, 0.4465],
                                                         [0.2023, 0.1994, 0.2010])])
    train = CIFAR10(train=True, **kwargs).transform_first(to_tensor)
    test = CIFAR10(train=False, **kwargs).transform_first(to_tensor)
    return (gluon.data.DataLoader(train, batch_size, shuffle=True, last_batch="discard"),
            gluon.data.DataLoader(test, batch_size, shuffle=False))
