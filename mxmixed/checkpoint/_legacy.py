"""The opt-in loader of format 1 checkpoints: the one module of mxmixed that imports pickle.

Format 1 (earlier mxmixed builds) stored the trainer states and ``extra`` as pickles, which
``checkpoint.load`` reads only with ``trusted=True``: unpickling runs any code the file holds.
``ruff``'s banned-api rule (``pyproject.toml``) refuses ``pickle`` in every other module.
"""
import pickle

from ._format import corrupt

__all__ = ["unpickle", "repickle"]


def unpickle(path, data, what):
    """The object pickled in ``data``, a member of the format 1 checkpoint at ``path``.

    Parameters
    ----------
    path : str
        The checkpoint, named in the error.
    data : bytes
    what : str
        The member, as the error names it ("trainer states", "extra").

    Raises
    ------
    CheckpointError
        One line, when the pickle is damaged.
    """
    try:
        return pickle.loads(data)
    except Exception as err:  # a damaged pickle raises almost anything
        raise corrupt(path, "unreadable %s: %s: %s" % (what, type(err).__name__, err)) from None


def repickle(value):
    """``value`` pickled again, as ``Trainer.save_states`` would (for MXNet's ``set_states``)."""
    return pickle.dumps(value)
