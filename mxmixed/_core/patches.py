"""The one way mxmixed patches MXNet: each patch is recorded with what it replaced, and undone by
the registry that applied it.

Each concern that patches owns one :class:`Patches`: the emulation's is
``mxmixed._core.state.EMULATION.patches`` (:func:`mxmixed.emulation.disable` undoes it), AMP's helpers'
is ``mxmixed._core.state.AMP.patches`` (:func:`mxmixed.amp_scope` undoes what was applied inside it),
and ``mxmixed run`` gives its step recorder and its ``amp.init`` note one each.

A patch that someone else has wrapped since (``amp.init`` wraps the operator functions it finds,
the emulation's among them) is taken out from beneath the wrapper, which stays. A patch that
someone else has replaced outright is left alone: putting the original back would undo theirs.
"""
import contextlib

__all__ = ["Patches"]

# how deep the closures of wrappers are searched for a patch wrapped since
_MAX_WRAPPING = 8


class _Patch:
    __slots__ = ("owner", "name", "original", "new", "own")

    def __init__(self, owner, name, original, new, own):
        self.owner, self.name, self.original, self.new, self.own = owner, name, original, new, own


def _own(owner, name):
    """Whether ``owner`` holds ``name`` itself (a module's, a class's or a cell's attribute),
    rather than reading it from its class (an instance attribute set over a method)."""
    if name == "__class__" or not hasattr(owner, "__dict__"):
        return True
    return name in vars(owner)


def _cell_holding(func, target, depth=0):
    """The closure cell of ``func`` (or of a function it wraps) that holds ``target``, or None."""
    if depth > _MAX_WRAPPING:
        return None
    for cell in getattr(func, "__closure__", None) or ():
        try:
            contents = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if contents is target:
            return cell
        if callable(contents) and contents is not func:
            found = _cell_holding(contents, target, depth + 1)
            if found is not None:
                return found
    return None


class Patches:
    """One concern's patches of MXNet, in the order they were applied.

    Parameters
    ----------
    name : str
        Whose patches these are (shown by ``repr``).

    Examples
    --------
    >>> import types
    >>> module = types.SimpleNamespace(f=len)
    >>> patches = Patches("example")
    >>> patches.patch(module, "f", abs)
    >>> module.f is abs, patches.applied()
    (True, ['SimpleNamespace.f'])
    >>> patches.undo()
    >>> module.f is len, patches.applied()
    (True, [])
    """

    def __init__(self, name):
        self.name = name
        self._applied = []

    def __repr__(self):
        return "<Patches %s: %d applied>" % (self.name, len(self._applied))

    def patch(self, owner, name, new):
        """Set ``owner.name`` to ``new``, recording what it replaces.

        Setting the object already there records nothing, so a patch applied twice is undone
        once. ``owner`` may be a module, a class, an instance (``name='__class__'`` retypes
        it) or a closure cell (``name='cell_contents'``).

        Parameters
        ----------
        owner : object
        name : str
        new : object
        """
        original = getattr(owner, name)
        if original is new:
            return
        own = _own(owner, name)
        setattr(owner, name, new)
        self._applied.append(_Patch(owner, name, original, new, own))

    def mark(self):
        """A point to undo back to: ``undo(since=mark())`` undoes only what came after.

        Returns
        -------
        int
        """
        return len(self._applied)

    def undo(self, since=0):
        """Undo the patches applied after ``since``, the last first.

        Parameters
        ----------
        since : int, default 0
            A :meth:`mark`; 0 undoes them all.
        """
        while len(self._applied) > since:
            _restore(self._applied.pop())

    @contextlib.contextmanager
    def applied_inside(self):
        """Undo, on leaving the ``with`` block, every patch applied inside it."""
        mark = self.mark()
        try:
            yield self
        finally:
            self.undo(mark)

    def applied(self):
        """The patches in place, in the order applied, as ``owner.name`` (an instance's owner
        is shown by its class's name).

        Returns
        -------
        list of str
        """
        return ["%s.%s" % (_label(p.owner), p.name) for p in self._applied]


def _label(owner):
    if isinstance(owner, (type, type(contextlib))):
        return owner.__name__
    return type(owner).__name__


def _restore(patch):
    current = getattr(patch.owner, patch.name, None)
    if current is patch.new:
        if patch.own:
            setattr(patch.owner, patch.name, patch.original)
        else:
            delattr(patch.owner, patch.name)
        return
    cell = _cell_holding(current, patch.new)
    if cell is not None:  # wrapped since: the wrapper stays, with the original beneath it
        cell.cell_contents = patch.original
