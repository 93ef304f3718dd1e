"""The explicit steps of multi-precision training, for teaching: float32 master copies by hand.

:func:`make_master_params` ("prep"), :func:`grads_to_master`, :func:`sgd_momentum_step` and
:func:`master_to_model` give bit for bit the weights of MXNet's fused ``mp_sgd_mom_update``
(notebook 02). For training, use :func:`mxmixed.optim.multi_precision_trainer`, which keeps
the master copies inside the optimizer.
"""
import math
from collections import OrderedDict

import numpy as np

import mxnet as mx
from mxnet import autograd

from .._core.dtypes import FLOAT16
from ..optim import param_list

__all__ = ["MasterParams", "make_master_params", "grads_to_master", "master_to_model",
           "sgd_momentum_step"]


class MasterParams:
    """Float32 master copies of float16 parameters, with their gradients and momentum.

    Made by :func:`make_master_params`; the other helpers read and update it in place. All
    arrays are float32 NDArrays on the parameter's context.

    Attributes
    ----------
    weights : collections.OrderedDict of str to mxnet.nd.NDArray
        The master weights, by parameter name.
    grads : collections.OrderedDict of str to mxnet.nd.NDArray
        The float32 gradients, filled by :func:`grads_to_master`.
    momentum : collections.OrderedDict of str to mxnet.nd.NDArray
        The momentum of :func:`sgd_momentum_step`, zero at first.
    lr_mult, wd_mult : dict of str to float
        Each parameter's ``lr_mult`` and ``wd_mult`` when the copies were made, applied by
        :func:`sgd_momentum_step` as a Gluon Trainer applies them.
    """

    def __init__(self, weights, lr_mult, wd_mult):
        self.weights = weights
        self.grads = OrderedDict((n, mx.nd.zeros_like(w)) for n, w in weights.items())
        self.momentum = OrderedDict((n, mx.nd.zeros_like(w)) for n, w in weights.items())
        self.lr_mult = dict(lr_mult)
        self.wd_mult = dict(wd_mult)
        self.grads_fresh = False

    @property
    def names(self):
        """list of str: the parameter names, in order."""
        return list(self.weights)

    def __getitem__(self, name):
        return self.weights[name]

    def __contains__(self, name):
        return name in self.weights

    def __iter__(self):
        return iter(self.weights)

    def __len__(self):
        return len(self.weights)

    def __repr__(self):
        return "MasterParams(%d float32 master weights: %s)" % (
            len(self), ", ".join(self.names[:4]) + (", ..." if len(self) > 4 else ""))


def _check_float16_param(p):
    if p._data is None:
        if getattr(p, "_deferred_init", None):
            raise RuntimeError("parameter '%s' is not initialized yet (deferred initialization "
                               "waits for a first forward pass); run one batch through the net "
                               "first" % p.name)
        raise RuntimeError("parameter '%s' is not initialized; call net.initialize() and "
                           "net.cast('float16') first" % p.name)
    if np.dtype(p.dtype) != FLOAT16:
        raise ValueError("parameter '%s' is %s, not float16: master weights are for float16 "
                         "parameters. net.cast('float16') leaves BatchNorm's parameters "
                         "float32; pass only the float16 ones, e.g. {n: p for n, p in "
                         "net.collect_params().items() if numpy.dtype(p.dtype) == numpy.float16}"
                         % (p.name, np.dtype(p.dtype).name))
    if len(p.list_ctx()) != 1:
        raise ValueError("parameter '%s' lives on %d contexts; the explicit master-weight "
                         "helpers handle one (use multi_precision_trainer for several)"
                         % (p.name, len(p.list_ctx())))


def make_master_params(params):
    """Make float32 master copies of float16 parameters (the talk's "prep" step).

    Parameters
    ----------
    params : mxnet.gluon.ParameterDict or dict or list of mxnet.gluon.Parameter
        Initialized float16 parameters with gradients, each on one context.

    Returns
    -------
    MasterParams
        The float32 copies (exact: every float16 value is a float32 value), zero gradients and
        zero momentum.

    Raises
    ------
    TypeError
        For anything but Parameters.
    ValueError
        For a parameter that is not float16 (BatchNorm's stay float32 after ``cast``), one
        with ``grad_req='null'``, or one on several contexts.
    RuntimeError
        For an uninitialized parameter.

    Examples
    --------
    The mechanism of multi-precision SGD, step by step (MXNet's ``mp_sgd_mom_update`` fuses it):

    >>> import mxnet as mx
    >>> from mxnet import autograd, gluon
    >>> import mxmixed
    >>> from mxmixed.tutorial import master as teach
    >>> net = gluon.nn.Dense(10, in_units=64)
    >>> net.initialize()
    >>> net.cast("float16")
    >>> params = list(net.collect_params().values())
    >>> master = teach.make_master_params(params)      # float32 copies of the weights
    >>> with mxmixed.emulation.emulated():
    ...     with autograd.record():
    ...         loss = net(mx.nd.ones((4, 64), dtype="float16")).sum()
    ...     loss.backward()
    >>> teach.grads_to_master(params, master)           # float16 grads -> float32
    >>> teach.sgd_momentum_step(master, lr=0.1)         # update the float32 copies
    >>> teach.master_to_model(master, params)           # round them into the float16 weights
    >>> net.weight.data().dtype.__name__, len(master)
    ('float16', 2)
    """
    items = param_list(params)
    weights = OrderedDict()
    for p in items:
        _check_float16_param(p)
        if p.grad_req == "null":
            raise ValueError("parameter '%s' has grad_req='null' (it is not trained); leave it "
                             "out of the master weights" % p.name)
        with autograd.pause():
            weights[p.name] = p.data().astype("float32", copy=True)
    return MasterParams(weights, {p.name: p.lr_mult for p in items},
                        {p.name: p.wd_mult for p in items})


def _check_master(master):
    if not isinstance(master, MasterParams):
        raise TypeError("master must be the MasterParams from make_master_params, got %s"
                        % type(master).__name__)


def _matched(params, master):
    """The parameters of ``params`` in ``master``'s order; an error when the names differ."""
    _check_master(master)
    items = {p.name: p for p in param_list(params)}
    missing = [n for n in master.names if n not in items]
    extra = [n for n in items if n not in master]
    if missing or extra:
        raise ValueError("params and master hold different parameters: %s%s"
                         % ("missing from params: %s" % ", ".join(missing) if missing else "",
                            ("; " if missing else "") + "not in master: %s" % ", ".join(extra)
                            if extra else ""))
    ordered = [items[n] for n in master.names]
    for p in ordered:
        _check_float16_param(p)
        if p.shape != master.weights[p.name].shape:
            raise ValueError("parameter '%s' has shape %s but its master copy %s"
                             % (p.name, p.shape, master.weights[p.name].shape))
    return ordered


def grads_to_master(params, master):
    """Copy the float16 gradients into the float32 master gradients (a cast, exact).

    Parameters
    ----------
    params : mxnet.gluon.ParameterDict or dict or list of mxnet.gluon.Parameter
        The same float16 parameters the master copies were made from, after ``backward``.
    master : MasterParams
        From :func:`make_master_params`; its ``grads`` are overwritten.

    Returns
    -------
    None

    Raises
    ------
    ValueError
        When the parameter names or shapes differ from the master's, a parameter is no longer
        float16, or one has no gradient (``grad_req='null'``).

    .. note::
       The gradients are copied as they are, still multiplied by the loss scale: pass
       ``rescale_grad = 1 / (loss_scale * batch_size)`` to :func:`sgd_momentum_step`, as a
       Trainer does. Check them for inf/NaN before stepping when the scale is dynamic.

    Examples
    --------
    See :func:`make_master_params` for the whole step.

    >>> import mxnet as mx
    >>> from mxnet import autograd, gluon
    >>> import mxmixed
    >>> from mxmixed.tutorial import master as teach
    >>> net = gluon.nn.Dense(2, in_units=4)
    >>> net.initialize()
    >>> net.cast("float16")
    >>> params = list(net.collect_params().values())
    >>> master = teach.make_master_params(params)
    >>> with mxmixed.emulation.emulated():
    ...     with autograd.record():
    ...         loss = net(mx.nd.ones((1, 4), dtype="float16")).sum()
    ...     loss.backward()
    >>> teach.grads_to_master(params, master)
    """
    for p in _matched(params, master):
        if p.grad_req == "null":
            raise ValueError("parameter '%s' has grad_req='null' now: it has no gradient to "
                             "copy" % p.name)
        with autograd.pause():
            mx.nd.Cast(p.grad(), dtype="float32", out=master.grads[p.name])
    master.grads_fresh = True


def master_to_model(master, params):
    """Copy the float32 master weights back into the float16 model parameters (a cast).

    The cast rounds to nearest, ties to even, exactly as the fused ``mp_sgd_mom_update`` does.

    Parameters
    ----------
    master : MasterParams
        From :func:`make_master_params`.
    params : mxnet.gluon.ParameterDict or dict or list of mxnet.gluon.Parameter
        The float16 parameters the master copies were made from; overwritten in place.

    Returns
    -------
    None

    Raises
    ------
    ValueError
        When the parameter names or shapes differ from the master's, or a parameter is no
        longer float16.

    Examples
    --------
    See :func:`make_master_params` for the whole step.

    >>> import mxnet as mx
    >>> from mxnet import gluon
    >>> from mxmixed.tutorial import master as teach
    >>> net = gluon.nn.Dense(2, in_units=4)
    >>> net.initialize()
    >>> net.cast("float16")
    >>> params = list(net.collect_params().values())
    >>> master = teach.make_master_params(params)
    >>> teach.master_to_model(master, params)     # float32 masters rounded into the model
    >>> net.weight.data().dtype.__name__
    'float16'
    """
    for p in _matched(params, master):
        with autograd.pause():
            mx.nd.Cast(master.weights[p.name], dtype="float16", out=p.data())


def _check_number(name, value, low=None, high=None, low_open=False, high_open=False):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) \
            or not math.isfinite(value):
        raise ValueError("%s must be a finite number, got %r" % (name, value))
    if low is not None and (value < low or (low_open and value == low)):
        raise ValueError("%s must be %s %r, got %r" % (name, ">" if low_open else ">=", low,
                                                         value))
    if high is not None and (value > high or (high_open and value == high)):
        raise ValueError("%s must be %s %r, got %r" % (name, "<" if high_open else "<=", high,
                                                         value))


def _f32(value):
    return float(np.float32(value))


def sgd_momentum_step(master, lr, momentum=0.9, wd=0.0, rescale_grad=1.0, clip_gradient=None):
    """One SGD-with-momentum update of the float32 master weights, MXNet's formula exactly.

    For each parameter, in float32, as ``mp_sgd_mom_update`` computes it::

        g      = rescale_grad * grad32              (clipped to [-clip, clip] if given)
        mom    = momentum * mom - (lr * wd) * weight32 - lr * g
        weight32 = weight32 + mom

    where ``lr`` and ``wd`` are multiplied by the parameter's ``lr_mult`` / ``wd_mult`` as a
    Gluon Trainer does. Call :func:`master_to_model` afterwards to cast the new weights into
    the float16 model.

    Parameters
    ----------
    master : MasterParams
        Its ``grads`` must be fresh from :func:`grads_to_master`; its ``weights`` and
        ``momentum`` are updated in place.
    lr : float
        Learning rate (> 0).
    momentum : float, default 0.9
        Momentum, in [0, 1).
    wd : float, default 0.0
        Weight decay (>= 0).
    rescale_grad : float, default 1.0
        Gradient multiplier (> 0), typically ``1 / (loss_scale * batch_size)``.
    clip_gradient : float, optional
        Clip the rescaled gradient to ``[-clip_gradient, clip_gradient]``.

    Returns
    -------
    None

    Raises
    ------
    TypeError
        When ``master`` is not a :class:`MasterParams`.
    ValueError
        For a bad hyper-parameter.
    RuntimeError
        When the gradients were not copied since the last step.

    .. note::
       Every scalar is rounded to float32 first and each product is rounded as the kernel
       rounds it, so the weights equal those of ``mx.nd.mp_sgd_mom_update`` (and of a
       multi-precision SGD Trainer) bit for bit.

    Examples
    --------
    See :func:`make_master_params` for the whole step.

    >>> import mxnet as mx
    >>> from mxnet import autograd, gluon
    >>> import mxmixed
    >>> from mxmixed.tutorial import master as teach
    >>> net = gluon.nn.Dense(2, in_units=4)
    >>> net.initialize()
    >>> net.cast("float16")
    >>> params = list(net.collect_params().values())
    >>> master = teach.make_master_params(params)
    >>> with mxmixed.emulation.emulated():
    ...     with autograd.record():
    ...         loss = net(mx.nd.ones((1, 4), dtype="float16")).sum()
    ...     loss.backward()
    >>> teach.grads_to_master(params, master)
    >>> teach.sgd_momentum_step(master, lr=0.1, momentum=0.9)
    """
    _check_master(master)
    _check_number("lr", lr, low=0, low_open=True)
    _check_number("momentum", momentum, low=0, high=1, high_open=True)
    _check_number("wd", wd, low=0)
    _check_number("rescale_grad", rescale_grad, low=0, low_open=True)
    if clip_gradient is not None:
        _check_number("clip_gradient", clip_gradient, low=0, low_open=True)
    if not master.grads_fresh:
        raise RuntimeError("no fresh gradients in the master copy: call grads_to_master(params, "
                           "master) after backward and before each step")
    c_momentum = _f32(momentum)
    with autograd.pause():
        for name in master.names:
            lr_i = np.float32(lr * master.lr_mult[name])
            wd_i = np.float32(wd * master.wd_mult[name])
            weight, mom, grad = master.weights[name], master.momentum[name], master.grads[name]
            if clip_gradient is None:
                step = grad * float(lr_i * np.float32(rescale_grad))
            else:
                step = mx.nd.clip(grad * _f32(rescale_grad), -_f32(clip_gradient),
                                  _f32(clip_gradient)) * float(lr_i)
            new_mom = mom * c_momentum - weight * float(lr_i * wd_i) - step
            mom[:] = new_mom
            weight[:] = weight + new_mom
    master.grads_fresh = False
