"""Clipping gradients that still carry the loss scale: found, named, and fixable.

Between ``amp.scale_loss`` and the update, the gradients are the loss scale S times the true
ones (the update divides by S). A clip by global norm on them measures S times the true norm,
so its ``max_norm`` acts as ``max_norm / S`` on the true gradients: GluonNLP 0.10's
``finetune_classifier.py --dtype float16`` clips at 1 / 65536 and learns nothing, on a GPU as
under the emulation. A norm read there for a log is S times too large.

:class:`ClipWatch` sees the calls of the functions in :data:`WATCHED` on the gradients of a
Trainer that carry a scale other than 1. It records each call site, says so once per site,
and, asked to (``mxmixed run --unscale-before-clip``), unscales the gradients before the call
as ``amp.unscale(trainer)`` does, which also sets what the update divides by to 1, so that it does
not unscale twice. A ``max_norm`` that is a whole multiple of the scale (GluonNLP's
``finetune_squad.py`` clips at ``1.0 * size * loss_scale``) is taken to account for it.

Without ``mxmixed run``, :func:`watch_helpers` (called by :func:`mxmixed.init_trainer`) warns
once when these functions clip an mxmixed Trainer's scaled gradients.
"""
import functools
import math
import importlib.abc
import importlib.machinery
import os
import sys
import threading
import warnings
import weakref

import mxnet as mx
from mxnet.contrib import amp

from .._core.state import AMP
from ._handle import handle_of

__all__ = ["WATCHED", "ClipWatch", "carried_scale", "register_trainer", "watch_helpers"]

#: The functions watched, by module: (attribute, what the first argument holds).
WATCHED = {
    "mxnet.gluon.utils": (("clip_global_norm", "arrays"),),
    "gluonnlp.utils.parameter": (("clip_grad_global_norm", "parameters"),
                                 ("grad_global_norm", "parameters")),
    "gluonnlp.utils": (("clip_grad_global_norm", "parameters"),
                       ("grad_global_norm", "parameters")),
}

# the names users call them by
_LABELS = {"mxnet.gluon.utils": "gluon.utils", "gluonnlp.utils.parameter": "gluonnlp.utils",
           "gluonnlp.utils": "gluonnlp.utils"}

# Trainers whose gradients may carry a loss scale: linked by amp.init_trainer (seen while
# ``mxmixed run`` watches) or by mxmixed.init_trainer
_TRAINERS = weakref.WeakSet()

_WATCHES = []  # the runner's watch while it runs; else the helpers' (warn-only) watch
_WRAPPERS = {}  # original function -> its one wrapper, so that two registries patch it once
_REPEATED = set()  # the warnings of watched calls issued again, by text and place
_CALLING = threading.local()  # inside a watched call (gluonnlp's clip calls grad_global_norm)


def register_trainer(trainer):
    """Watch the gradients of ``trainer`` (weakly held).

    Parameters
    ----------
    trainer : mxnet.gluon.Trainer
    """
    _TRAINERS.add(trainer)


def carried_scale(trainer):
    """The scale the gradients of ``trainer`` carry now (1: the true gradients).

    Parameters
    ----------
    trainer : mxnet.gluon.Trainer

    Returns
    -------
    float
    """
    handle = handle_of(trainer)
    if handle is not None:
        return float(handle.gradient_scale) if handle.scaler is not None else 1.0
    original = getattr(trainer, "_amp_original_scale", None)
    if getattr(trainer, "_amp_loss_scaler", None) is None or original is None \
            or not trainer._scale:
        return 1.0
    # amp.scale_loss sets trainer._scale to original / S; amp.unscale sets it to 1
    return float(original) / float(trainer._scale)


def _unscale(trainer):
    """Unscale the gradients in place; the update then divides by nothing more."""
    handle = handle_of(trainer)
    if handle is not None:
        handle.unscale()
    else:
        amp.unscale(trainer)


def _number(value):
    """``value`` as a float, or None when it is no number (the watched function itself then
    says what it makes of it)."""
    try:
        return float(value)
    except TypeError:  # an NDArray of one element (GluonNLP's grad_global_norm allows it)
        pass
    except ValueError:
        return None
    try:
        return float(value.asscalar())
    except Exception:  # noqa: BLE001 - no number: what the watched function says of it stands
        return None


def _accounts_for(max_norm, scale):
    """Whether ``max_norm`` is a whole multiple of the loss scale (the script scaled it)."""
    ratio = max_norm / scale
    return math.isfinite(ratio) and ratio >= 1 and ratio.is_integer()


def _gradient_ids(items, holds):
    """The ids of the NDArrays behind ``items`` (gradient arrays, or Parameters)."""
    arrays = []
    for item in items:
        if holds == "arrays":
            arrays.append(item)
        elif getattr(item, "grad_req", "null") != "null" and getattr(item, "_grad", None):
            arrays.extend(item._grad)
    return {array.handle.value for array in arrays if getattr(array, "handle", None)}


def _trainer_ids(trainer):
    return {g.handle.value for p in trainer._params if getattr(p, "_grad", None)
            for g in p._grad}


# mxmixed's folder and MXNet's: frames there are never the user's call site
_LIBRARIES = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
              os.path.dirname(os.path.abspath(mx.__file__)) + os.sep)


def _call_site(frame, script=None):
    """(file, line) of the user's call: the first frame of ``script`` from ``frame`` outwards,
    else the first frame outside mxnet, gluonnlp and mxmixed, else ``frame``'s."""
    first, outside = frame, None
    script = os.path.realpath(script) if script else None
    while frame is not None:
        name = frame.f_code.co_filename
        if script and os.path.realpath(name) == script:
            return name, frame.f_lineno
        if outside is None and not os.path.abspath(name).startswith(_LIBRARIES) \
                and os.sep + "gluonnlp" + os.sep not in name:
            outside = frame
        frame = frame.f_back
    frame = outside or first
    return frame.f_code.co_filename, frame.f_lineno


class ClipWatch:
    """What happens when a watched function runs on gradients that carry a loss scale.

    Parameters
    ----------
    unscale : bool, default False
        Unscale the gradients before the call (``mxmixed run --unscale-before-clip``).
    script : str, optional
        The script whose line is the call site (else the first frame outside the libraries).
    say : callable, optional
        Called once per call site, with its record and the message; default: a
        ``UserWarning`` at the call site.
    step : callable, optional
        Returns the number of the optimizer step under way, recorded with each site.
    helpers_only : bool, default False
        Watch only Trainers linked by :func:`mxmixed.init_trainer`.
    unscaled_by : str, default '--unscale-before-clip'
        What asked for ``unscale``, as the message names it.

    Attributes
    ----------
    sites : dict
        ``(file, line)`` -> record: ``site``, ``file``, ``line``, ``function``, ``calls``,
        ``max_norm``, ``loss_scale``, ``effective_max_norm``, ``unscaled``, ``first_step``.
    """

    def __init__(self, unscale=False, script=None, say=None, step=None, helpers_only=False,
                 unscaled_by="--unscale-before-clip"):
        self.unscale = unscale
        self.unscaled_by = unscaled_by
        self.script = script
        self.sites = {}
        self._say = say or _warn
        self._step = step
        self._helpers_only = helpers_only

    def records(self):
        """The call sites in the order first seen, for a report.

        Returns
        -------
        list of dict
        """
        return list(self.sites.values())

    def _scaled_trainer(self, items, holds):
        trainers = [t for t in list(_TRAINERS)
                    if not self._helpers_only or handle_of(t) is not None]
        trainers = [(t, carried_scale(t)) for t in trainers]
        trainers = [(t, s) for t, s in trainers if s != 1.0]
        if not trainers:
            return None, 1.0
        ids = _gradient_ids(items, holds)
        return next(((t, s) for t, s in trainers if ids & _trainer_ids(t)), (None, 1.0))

    def before(self, function, items, holds, max_norm, frame):
        """Called before ``function`` runs on ``items`` with ``max_norm`` from ``frame``."""
        trainer, scale = self._scaled_trainer(items, holds)
        if trainer is None:
            return
        max_norm = None if max_norm is None else _number(max_norm)
        if max_norm is not None and _accounts_for(max_norm, scale):
            return
        file, line = _call_site(frame, self.script)
        record = self.sites.get((file, line))
        if record is None:
            record = self.sites[(file, line)] = {
                "site": "%s:%d" % (file, line), "file": file, "line": line,
                "function": function, "calls": 0, "max_norm": max_norm, "loss_scale": scale,
                "effective_max_norm": None if max_norm is None else max_norm / scale,
                "unscaled": self.unscale, "unscaled_by": self.unscaled_by if self.unscale else None,
                "first_step": self._step() if self._step else None}
            self._say(record, message(record, helpers=self._helpers_only))
        record["calls"] += 1
        if self.unscale:
            _unscale(trainer)

    # ---------------------------------------------------------------- patching
    def install(self, patches):
        """Watch the functions of :data:`WATCHED` (GluonNLP's also when it is imported later),
        through ``patches``; undo them with ``patches.undo()`` and then :meth:`uninstall`.

        Parameters
        ----------
        patches : mxmixed._core.patches.Patches
        """
        if not self._helpers_only:  # the Trainers that amp.init_trainer links are watched
            init_trainer = _registering(amp.amp.init_trainer)
            patches.patch(amp.amp, "init_trainer", init_trainer)
            patches.patch(amp, "init_trainer", init_trainer)
        _patch_loaded(patches)
        if not all(name in sys.modules for name in WATCHED):
            self._finder = _PatchOnImport(patches)
            sys.meta_path.insert(0, self._finder)
        _WATCHES.append(self)
        return self

    def uninstall(self):
        """Stop being the watch in charge (the patches are undone by their registry)."""
        finder = getattr(self, "_finder", None)
        if finder is not None and finder in sys.meta_path:
            sys.meta_path.remove(finder)
        if self in _WATCHES:
            _WATCHES.remove(self)


def _registering(init_trainer):
    @functools.wraps(init_trainer)
    def registering(optimizer_or_trainer, *args, **kwargs):
        result = init_trainer(optimizer_or_trainer, *args, **kwargs)
        register_trainer(optimizer_or_trainer)
        return result
    return registering


def message(record, helpers=False):
    """The one-line story of a call site: what it does, what it costs, the fix.

    Parameters
    ----------
    record : dict
        A :attr:`ClipWatch.sites` record.
    helpers : bool
        Name mxmixed's fix instead of MXNet's.

    Returns
    -------
    str
    """
    where = "%s:%d" % (record["file"], record["line"])
    scale = "%g" % record["loss_scale"]
    if record["max_norm"] is None:
        what = ("%s reads the global norm of gradients that still carry the loss scale %s "
                "(%s)" % (where, scale, record["function"]))
        cost = ": it is %s times the true norm" % scale
    else:
        what = ("%s clips gradients that still carry the loss scale %s (%s, max_norm %g)"
                % (where, scale, record["function"], record["max_norm"]))
        cost = (": the true gradients are clipped at %g / %s = %.3g"
                % (record["max_norm"], scale, record["effective_max_norm"]))
    if helpers:
        return what + cost + ("; clip with mxmixed.clip_global_norm(trainer, max_norm), which "
                              "clips the true gradients, or call mxmixed.unscale(trainer) first")
    if record["unscaled"]:
        return what + ("; %s unscales them first (as amp.unscale(trainer) does), at every call"
                       % record.get("unscaled_by", "--unscale-before-clip"))
    return what + cost + ("; call amp.unscale(trainer) before clipping, or run with "
                          "--unscale-before-clip")


def _warn(record, text):
    warnings.warn_explicit(text, UserWarning, record["file"], record["line"])


def _current():
    return _WATCHES[-1] if _WATCHES else _HELPERS


_HELPERS = ClipWatch(helpers_only=True)


def _wrap(original, function, holds):
    """The one wrapper of ``original`` that asks the watch in charge first."""
    if getattr(original, "__mxmixed_watched__", False):
        return original
    wrapper = _WRAPPERS.get(original)
    if wrapper is not None:
        return wrapper

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        if getattr(_CALLING, "busy", False):
            return original(*args, **kwargs)
        args = list(args)
        if args:
            items = args[0] = list(args[0])  # a generator would be used up by the check
        else:
            items = kwargs[holds] = list(kwargs[holds])
        max_norm = args[1] if len(args) > 1 else kwargs.get("max_norm")
        caller = sys._getframe(1)
        _CALLING.busy = True
        try:
            _current().before(function, items, holds, max_norm, caller)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                result = original(*args, **kwargs)
        finally:
            _CALLING.busy = False
        _warn_again(caught, caller)
        return result

    wrapper.__mxmixed_watched__ = True
    _WRAPPERS[original] = wrapper
    return wrapper


def _warn_again(caught, caller):
    """Issue the warnings the wrapped function gave, each where it would have pointed without
    the wrapper (its ``stacklevel=2`` names this file instead of the caller's line), once per
    place as Python's default does (``catch_warnings`` resets Python's own record of that)."""
    for found in caught:
        where = (caller.f_code.co_filename, caller.f_lineno) \
            if os.path.abspath(found.filename) == os.path.abspath(__file__) \
            else (found.filename, found.lineno)
        key = (str(found.message), found.category) + where
        if key not in _REPEATED:
            _REPEATED.add(key)
            warnings.warn_explicit(found.message, found.category, *where,
                                   module_globals=caller.f_globals)


def _patch_module(patches, module):
    for name, holds in WATCHED.get(module.__name__, ()):
        current = getattr(module, name, None)
        if current is None or getattr(current, "__mxmixed_watched__", False):
            continue  # patched already, by whichever registry did it first
        function = "%s.%s" % (_LABELS[module.__name__], name)
        patches.patch(module, name, _wrap(current, function, holds))


def _patch_loaded(patches):
    for name in WATCHED:
        module = sys.modules.get(name)
        if module is not None:
            _patch_module(patches, module)


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches GluonNLP's functions once ``gluonnlp.utils`` (which imports them) is loaded."""

    def __init__(self, patches):
        self._patches = patches

    def find_spec(self, fullname, path, target=None):
        if fullname != "gluonnlp.utils":
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _Loader(spec.loader, self._patches)
        return spec


class _Loader(importlib.abc.Loader):
    def __init__(self, loader, patches):
        self._loader, self._patches = loader, patches

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _patch_loaded(self._patches)

    def __getattr__(self, name):
        return getattr(self._loader, name)


def watch_helpers():
    """Warn once when a watched function clips an mxmixed Trainer's scaled gradients.

    Applied through ``AMP.patches`` (:func:`mxmixed.amp_scope` undoes it; after a process-wide
    :func:`mxmixed.init` it stays), for the modules already imported.
    """
    _patch_loaded(AMP.patches)
