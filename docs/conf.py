"""Sphinx configuration of the mxmixed docs (``make docs``; ``tests/test_docs.py`` builds it too).

* The API reference (``api.rst``) is generated from the package itself: every module of
  ``mxmixed`` whose name has no leading underscore gets a section, and every name in its
  ``__all__`` is documented once, in the module that defines it, through autodoc + numpydoc.
  Names a module re-exports are listed with a link to that place. A public module without
  ``__all__``, or a name in ``__all__`` that ends up undocumented, is a build warning, and
  ``make docs`` runs with ``-W``: a new public name cannot be forgotten.
* The tutorials are ``tutorials/*.ipynb`` (``docs/tutorials`` is a symbolic link to that
  folder), rendered by myst-nb from their stored outputs; nothing is executed at build time
  (``nb_execution_mode = "off"``). myst-nb rather than nbsphinx: nbsphinx converts Markdown
  cells with pandoc, a binary that pip does not install, while myst-nb parses them in pure
  Python with the same MyST parser that renders the ``.md`` pages.
* Nothing is fetched at build time or when a page is viewed: no intersphinx, no remote
  scripts, fonts or widget managers (``nb_ipywidgets_js`` is emptied). ``tests/test_docs.py``
  checks the built pages for remote resources.
"""
import importlib
import inspect
import os
import pkgutil
import sys
import warnings

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
os.environ.setdefault("MPLBACKEND", "Agg")

import mxmixed  # noqa: E402  (needs ROOT on sys.path)

LOG = logging.getLogger("mxmixed.docs")
_STATE = {}  # the ApiIndex of the current build, from the directive to the final check

# -- project ---------------------------------------------------------------------------------
project = "mxmixed"
author = "the mxmixed developers"
copyright = "the mxmixed developers, Apache-2.0"  # noqa: A001 (Sphinx's name)
release = version = mxmixed.__version__

# -- general ---------------------------------------------------------------------------------
extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.viewcode",
    "numpydoc",
    "myst_nb",  # brings myst_parser for the .md pages
]
root_doc = "index"
exclude_patterns = ["_build", "**/.ipynb_checkpoints", "Thumbs.db", ".DS_Store"]
language = "en"
pygments_style = "sphinx"

# -- autodoc + numpydoc ----------------------------------------------------------------------
autodoc_member_order = "bysource"
autodoc_typehints = "none"
# Our classes subclass MXNet's (gluon.HybridBlock, ...): their undocumented overrides would
# otherwise inherit MXNet's docstrings, which are not ours to keep warning-free.
autodoc_inherit_docstrings = False
numpydoc_show_class_members = False       # methods are documented by autodoc itself
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
numpydoc_validation_checks = set()

# -- notebooks (myst-nb) ---------------------------------------------------------------------
nb_execution_mode = "off"          # render the stored outputs; never run a notebook here
nb_merge_streams = True
nb_output_stderr = "show"
nb_ipywidgets_js = {}              # the default loads require.js and the widget manager from CDNs
myst_enable_extensions = []
myst_heading_anchors = 3

# -- HTML --------------------------------------------------------------------------------------
html_theme = "alabaster"
html_title = "mxmixed %s" % release
html_static_path = ["_static"]
html_css_files = ["mxmixed.css"]
html_theme_options = {
    "description": "float16 mixed precision for Apache MXNet 1.9.1",
    "fixed_sidebar": True,
    "page_width": "1160px",
    "sidebar_width": "250px",
    "show_powered_by": False,
}
html_sidebars = {"**": ["about.html", "navigation.html", "relations.html", "searchbox.html"]}
html_show_sourcelink = False
html_copy_source = False
html_last_updated_fmt = None

# -- the generated API reference ------------------------------------------------------------
PACKAGE = "mxmixed"
# The order of the sections in api.rst; modules not listed follow in alphabetical order.
MODULE_ORDER = [
    "mxmixed", "mxmixed.training", "mxmixed.scaler", "mxmixed.optim", "mxmixed.checkpoint",
    "mxmixed.symbolic", "mxmixed.emulation", "mxmixed.graphpass", "mxmixed.emulated_ops",
    "mxmixed.diagnostics", "mxmixed.tutorial",
    "mxmixed.cli", "mxmixed.sysinfo",
]


def public_modules():
    """Names of the package and every module under it without a leading underscore."""
    names = [PACKAGE]
    for info in pkgutil.walk_packages(mxmixed.__path__, PACKAGE + ".",
                                      onerror=lambda name: None):
        if any(part.startswith("_") for part in info.name.split(".")[1:]):
            continue  # private, or __main__ (importing it would run the command line)
        names.append(info.name)
    rank = {name: i for i, name in enumerate(MODULE_ORDER)}
    return sorted(names, key=lambda n: (rank.get(n, len(rank)), n))


def _is_definition(obj):
    return inspect.isclass(obj) or inspect.isroutine(obj)


class ApiIndex:
    """Where each public name is documented: the module that defines it.

    A class or function belongs to its ``__module__`` when that module is public and lists it
    in ``__all__``. Anything else (constants, or definitions in a private module) belongs to
    the deepest public module that lists the very same object in its ``__all__``.
    """

    def __init__(self):
        self.modules = {}
        self.problems = []
        for name in public_modules():
            try:
                self.modules[name] = importlib.import_module(name)
            except Exception as err:  # noqa: BLE001 - reported as a build warning
                self.problems.append("cannot import %s: %s" % (name, err))
        self.exports = {}
        for name, module in self.modules.items():
            names = getattr(module, "__all__", None)
            if names is None:
                self.problems.append("public module %s has no __all__, so its public names are "
                                     "unknown; add one (or rename it with a leading underscore)"
                                     % name)
                names = []
            self.exports[name] = []
            for attr in names:
                if not hasattr(module, attr):
                    self.problems.append("%s.__all__ lists %r, which does not exist"
                                         % (name, attr))
                    continue
                self.exports[name].append(attr)
        self.owner = {}
        for name in self.modules:
            for attr in self.exports[name]:
                self.owner[(name, attr)] = self._find_owner(name, attr)

    def _find_owner(self, modname, attr):
        obj = getattr(self.modules[modname], attr)
        if inspect.ismodule(obj):
            return obj.__name__
        home = getattr(obj, "__module__", None) if _is_definition(obj) else None
        if home in self.modules and attr in self.exports.get(home, ()):
            return home
        holders = [m for m in self.modules
                   if attr in self.exports.get(m, ()) and getattr(self.modules[m], attr) is obj]
        return max(holders, key=lambda m: (m.count("."), m != modname))

    def owned(self, modname):
        """Names of ``modname.__all__`` documented in ``modname``'s own section."""
        return [a for a in self.exports[modname] if self.owner[(modname, a)] == modname
                and not inspect.ismodule(getattr(self.modules[modname], a))]

    def reexported(self, modname):
        """``(name, target)`` for every other name in ``modname.__all__``."""
        out = []
        for attr in self.exports[modname]:
            obj = getattr(self.modules[modname], attr)
            if inspect.ismodule(obj):
                out.append((attr, obj.__name__))
            elif self.owner[(modname, attr)] != modname:
                out.append((attr, "%s.%s" % (self.owner[(modname, attr)], attr)))
        return out

    def expected_objects(self):
        """Every fully qualified name the API page must document."""
        names = set(self.modules)
        for modname in self.modules:
            names.update("%s.%s" % (modname, a) for a in self.owned(modname))
        return names


def _summary(obj):
    doc = inspect.getdoc(obj) or ""
    first = doc.strip().split("\n\n")[0]
    return " ".join(line.strip() for line in first.splitlines())


def _role(obj, target):
    if inspect.ismodule(obj):
        return "mod"
    if inspect.isclass(obj):
        return "exc" if issubclass(obj, BaseException) else "class"
    if inspect.isroutine(obj):
        return "func"
    return "data"


def _simple_value(obj):
    return isinstance(obj, (bool, int, float, str)) and len(repr(obj)) < 60


def module_rst(index, modname):
    """reStructuredText of one module's section."""
    module = index.modules[modname]
    title = "``%s``" % modname
    lines = [title, "-" * len(title), "", ".. automodule:: %s" % modname, ""]
    reexports = index.reexported(modname)
    if reexports:
        lines += [".. list-table:: Also available here" if modname != PACKAGE else
                  ".. list-table:: Public names of ``import mxmixed``",
                  "   :header-rows: 1", "   :widths: 30 70", "",
                  "   * - name", "     - summary"]
        for attr, target in reexports:
            obj = getattr(module, attr)
            lines += ["   * - :py:%s:`%s.%s <%s>`" % (_role(obj, target), modname.split(".")[-1]
                                                      if modname != PACKAGE else PACKAGE,
                                                      attr, target),
                      "     - %s" % (_summary(obj) or "")]
        lines.append("")
    for attr in index.owned(modname):
        obj = getattr(module, attr)
        full = "%s.%s" % (modname, attr)
        if inspect.isclass(obj):
            kind = "autoexception" if issubclass(obj, BaseException) else "autoclass"
            lines += [".. %s:: %s" % (kind, full), "   :members:", ""]
        elif inspect.isroutine(obj):
            lines += [".. autofunction:: %s" % full, ""]
        else:
            lines += [".. autodata:: %s" % full]
            if not _simple_value(obj):
                lines.append("   :no-value:")
            lines.append("")
    return lines


class ApiModulesDirective(SphinxDirective):
    """``.. mxmixed-api::`` renders one section per public module (see the module docstring)."""

    has_content = False

    def run(self):
        index = _STATE["index"] = ApiIndex()
        for problem in index.problems:
            LOG.warning("API reference: %s", problem, location=self.get_location())
        lines = []
        for modname in index.modules:
            lines += module_rst(index, modname) + [""]
            self.env.note_dependency(inspect.getsourcefile(index.modules[modname]))
        node = nodes.section()
        node.document = self.state.document
        nested_parse_with_titles(self.state, StringList(lines, source="<mxmixed-api>"), node)
        return node.children


def check_api_complete(app, env):
    """Warn (an error under -W) for any public name that the API page failed to document."""
    index = _STATE.pop("index", None)
    if index is None:
        if "api" in env.found_docs:
            return  # api.rst unchanged since the last build: nothing was re-read
        LOG.warning("API reference: no page uses the mxmixed-api directive")
        return
    documented = set(env.get_domain("py").objects) | set(env.get_domain("py").modules)
    for name in sorted(index.expected_objects() - documented):
        LOG.warning("API reference: %s is public but was not documented", name)


_ENTRY_SECTIONS = ("Parameters", "Other Parameters", "Attributes")


def _section_at(lines, i):
    """The section title when ``lines[i]`` is one (a title underlined with dashes)."""
    if i + 1 < len(lines) and lines[i].strip() and not lines[i].startswith(" "):
        under = lines[i + 1].strip()
        if under and set(under) == {"-"} and len(under) >= len(lines[i].strip()) // 2:
            return lines[i].strip()
    return None


def move_directives_out_of_parameters(app, what, name, obj, options, lines):
    """Move a directive that closes a Parameters (or Attributes) section ahead of the sections.

    numpydoc reads a ``.. note::`` indented like the entries of such a section as one more
    entry, named ``.. note::``, and renders it as a parameter. The project's convention is a
    ``.. note::`` for sharp edges, wherever it falls, so the directive is moved (unchanged)
    in front of the first section, where it renders as a note. In Returns, Yields and Raises
    numpydoc renders it as intended, so those are left alone. Runs before numpydoc.
    """
    first = next((i for i in range(len(lines)) if _section_at(lines, i)), None)
    if first is None:
        return
    moved, out, section, i = [], [], None, 0
    while i < len(lines):
        title = _section_at(lines, i)
        if title:
            section = title
        elif section in _ENTRY_SECTIONS and lines[i].startswith(".. "):
            block = [lines[i]]
            i += 1
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" ")):
                block.append(lines[i])
                i += 1
            while block and not block[-1].strip():
                block.pop()
            moved += block + [""]
            out.append("")
            continue
        out.append(lines[i])
        i += 1
    if moved:
        lines[:] = out[:first] + moved + out[first:]


_SHOWWARNING = warnings.showwarning


def _numpydoc_warnings_count(message, category, filename, lineno, file=None, line=None):
    """numpydoc reports a malformed docstring (an unknown section, a bad underline) with
    Python's ``warnings``, which Sphinx does not count; make them Sphinx warnings, so ``-W``
    fails on them like on any other docstring error."""
    if os.sep + "numpydoc" + os.sep in filename:
        LOG.warning("numpydoc: %s", message, type="numpydoc")
    else:
        _SHOWWARNING(message, category, filename, lineno, file, line)


def setup(app):
    warnings.filterwarnings("default", category=UserWarning, module=r"numpydoc\b")
    warnings.showwarning = _numpydoc_warnings_count
    app.add_directive("mxmixed-api", ApiModulesDirective)
    app.connect("autodoc-process-docstring", move_directives_out_of_parameters, priority=100)
    app.connect("env-check-consistency", check_api_complete)
    return {"parallel_read_safe": False, "parallel_write_safe": True}
