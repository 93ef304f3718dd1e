"""An offline text corpus: the docstrings of Python's own standard library.

The corpus is built from text that ships with Python itself: the docstrings of a fixed,
sorted list of pure-Python standard-library modules (each module's docstring, then those of
its public classes, their public methods, and its public functions, in name order). Nothing is
downloaded, and the same Python version gives the same text on every machine
(:func:`corpus_fingerprint` checks it).

* :func:`stdlib_docstrings` / :func:`stdlib_corpus`: the text, tokenized (characters or words)
  and numericalized with a :class:`~mxmixed.tutorial.text.Vocabulary`.
"""
import collections
import hashlib
import importlib
import inspect
import re
import sys

from .vocab import Vocabulary

__all__ = ["STDLIB_MODULES", "stdlib_docstrings", "corpus_fingerprint", "tokenize",
           "TextCorpus", "stdlib_corpus"]

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
