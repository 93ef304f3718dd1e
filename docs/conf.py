"""Sphinx configuration of the mxmixed docs (``make docs``; ``tests/project/test_docs_site.py``
builds it too).

* **API reference**: ``sphinx.ext.autosummary`` with the templates in ``_templates/autosummary``,
  recursive from ``api.rst``: one page per public module (no leading underscore in its name),
  listing the names of its ``__all__``. Each public object is documented once, under the path
  users import it from (:func:`api_model` says which); the other modules that export it link
  to that entry. ``mxmixed.training`` and ``mxmixed.scaler`` have no page of their own: their
  names are documented as ``mxmixed.init_trainer``, ``mxmixed.LossScaler`` and so on.
* References to any other path of a documented object (``mxmixed.training.init_trainer``, or a
  bare ``LossScaler`` in a docstring) are resolved to its documented entry by
  :func:`resolve_public_name`, so ``-n`` (nitpicky) finds only what is really missing.
* **Tutorials**: ``tutorials/*.ipynb`` (``docs/tutorials`` is a symbolic link to that folder),
  rendered by myst-nb from their stored outputs (nothing is executed at build time); each page
  links its ``.ipynb`` for download (``_templates/page.html``, :func:`copy_notebooks`).
* **Offline**: no intersphinx, no remote scripts or fonts; ``tests/project/test_docs_site.py`` checks it.
"""
import importlib
import inspect
import os
import pkgutil
import re
import shutil
import sys
import types
import warnings

from sphinx.util import logging

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
os.environ.setdefault("MPLBACKEND", "Agg")

import mxmixed  # noqa: E402  (needs ROOT on sys.path)

# autosummary imports every submodule it finds; importing ``python -m mxmixed``'s entry point
# would run the command line with Sphinx's arguments.
sys.modules.setdefault("mxmixed.__main__", types.ModuleType("mxmixed.__main__"))

LOG = logging.getLogger("mxmixed.docs")
_SHOWWARNING = warnings.showwarning

# -- project ---------------------------------------------------------------------------------
project = "mxmixed"
author = "the mxmixed developers"
copyright = "the mxmixed developers, Apache-2.0"  # noqa: A001 (Sphinx's name)
release = version = mxmixed.__version__
# The source repository linked from every page; the local source pages when none is set.
REPOSITORY_URL = os.environ.get("MXMIXED_REPOSITORY_URL", "")

# -- general ---------------------------------------------------------------------------------
extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.viewcode",
    "numpydoc",
    "myst_nb",  # brings myst_parser for the .md pages
]
root_doc = "index"
templates_path = ["_templates"]
exclude_patterns = ["_build", "**/.ipynb_checkpoints", "Thumbs.db", ".DS_Store"]
language = "en"
pygments_style = "sphinx"
nitpicky = True
# Genuinely external names: there is no intersphinx (the build is offline).
nitpick_ignore = [("py:mod", "zipfile")]
# Private modules and names are undocumented on purpose: a docstring may still name them.
nitpick_ignore_regex = [(r"py:.*", r"~?mxmixed(\.\w+)*\._\w+.*")]

# -- autodoc + autosummary + numpydoc --------------------------------------------------------
autodoc_member_order = "bysource"
# The public API is annotated, but the types are shown once, in the numpydoc Parameters and
# Returns sections: in signatures MXNet's classes would be unresolvable references (no
# intersphinx offline) and their full paths (mxnet.ndarray.ndarray.NDArray) would crowd them.
autodoc_typehints = "none"
# Our classes subclass MXNet's (gluon.HybridBlock, ...): their undocumented overrides would
# otherwise inherit MXNet's docstrings, which are not ours to keep warning-free.
autodoc_inherit_docstrings = False
autosummary_generate = ["api.rst"]
autosummary_generate_overwrite = True
autosummary_ignore_module_all = False
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

# -- the API model: which page documents which name ------------------------------------------
PACKAGE = "mxmixed"
# Modules whose names are documented under the package (``mxmixed.init``, not
# ``mxmixed.training.init``): users import them from there, and they get no page of their own.
FOLDED = ("mxmixed.training", "mxmixed.scaler")
# Order of the package page's own entries: the Gluon core first, the rest in ``__all__`` order.
CORE_ORDER = ["init", "amp_scope", "init_trainer", "scale_loss", "unscale", "clip_global_norm",
              "step", "LossScaler"]
# Order of the module pages; modules not named here follow in alphabetical order.
MODULE_ORDER = ["mxmixed", "mxmixed.optim", "mxmixed.checkpoint", "mxmixed.symbolic",
                "mxmixed.emulation", "mxmixed.diagnostics", "mxmixed.distributed", "mxmixed.cli",
                "mxmixed.run", "mxmixed.launch"]
TITLES = {"mxmixed": "mxmixed: the Gluon core"}


def _public_modules():
    names = [PACKAGE]
    for info in pkgutil.walk_packages(mxmixed.__path__, PACKAGE + ".", onerror=lambda n: None):
        if not any(part.startswith("_") for part in info.name.split(".")[1:]):
            names.append(info.name)
    rank = {name: i for i, name in enumerate(MODULE_ORDER)}
    return sorted(names, key=lambda n: (rank.get(".".join(n.split(".")[:2]), len(rank)), n))


def _kind(obj):
    """``function``, ``class``, ``exception``, ``data`` (shown with its value) or ``value``."""
    if inspect.isclass(obj):
        return "exception" if issubclass(obj, BaseException) else "class"
    if inspect.isroutine(obj):
        return "function"
    simple = isinstance(obj, (bool, int, float, str)) and len(repr(obj)) < 60
    return "data" if simple else "value"


PROBLEMS = []  # reported as build warnings (errors under -W) by report_problems


def api_model():
    """Which page documents each public name, and every other path that leads to it.

    A name of ``M.__all__`` is documented on the page of the shallowest module that exports the
    same object (ties: the module that defines it, then :data:`MODULE_ORDER`). The package
    itself documents only the names of the :data:`FOLDED` modules; it lists the others.
    """
    modules = {}
    for name in _public_modules():
        try:
            modules[name] = importlib.import_module(name)
        except Exception as err:  # noqa: BLE001 - a build warning (an error under -W)
            PROBLEMS.append("cannot import %s: %s: %s" % (name, type(err).__name__, err))
    # A submodule hidden behind a same-named attribute of its package (the function
    # ``mxmixed.tutorial.fit`` over the module ``mxmixed.tutorial.fit``) cannot be reached by
    # that name: it gets no page, and its names are documented where its package exports them.
    shadowed = {m for m in modules if m.rsplit(".", 1)[0] in modules and m != PACKAGE and
                not inspect.ismodule(getattr(modules[m.rsplit(".", 1)[0]], m.rsplit(".", 1)[1],
                                             modules[m]))}
    pages = [m for m in modules if m not in FOLDED and m not in shadowed]
    exports = {m: [a for a in getattr(mod, "__all__", ()) if hasattr(mod, a) and not
                   a.startswith("__") and not inspect.ismodule(getattr(mod, a))]
               for m, mod in modules.items()}
    rank = {name: i for i, name in enumerate(pages)}
    owner, aliases = {}, {}   # (module, name) -> canonical full name; any path -> canonical
    extra = {}                # page -> [(name relative to it, kind)] from folded modules
    for m in modules:
        if not hasattr(modules[m], "__all__"):
            PROBLEMS.append("public module %s has no __all__, so its public names are unknown: "
                            "add one (or rename it with a leading underscore)" % m)
        for attr in exports[m]:
            obj = getattr(modules[m], attr)
            holders = [p for p in pages if attr in exports[p] and getattr(modules[p], attr) is obj]
            if not holders and m in FOLDED:
                # Not re-exported by the package: documented on its page, under its own path.
                owner[(m, attr)] = aliases["%s.%s" % (m, attr)] = "%s.%s" % (m, attr)
                # A sibling's docstring, documented on the package page, names it bare.
                aliases.setdefault("%s.%s" % (PACKAGE, attr), "%s.%s" % (m, attr))
                extra.setdefault(PACKAGE, []).append(("%s.%s" % (m[len(PACKAGE) + 1:], attr),
                                                      _kind(obj)))
                continue
            if not holders:
                PROBLEMS.append("%s.%s is in __all__ of a module without a page and of no "
                                "module with a page: export it from %s" % (m, attr,
                                                                       m.rsplit(".", 1)[0]))
                continue
            home = getattr(obj, "__module__", None) if _kind(obj) not in ("data", "value") else None
            in_package = home in FOLDED or m in FOLDED
            choices = [p for p in holders if p != PACKAGE or in_package] or holders
            best = min(choices, key=lambda p: (p.count("."), p != home, rank[p]))
            owner[(m, attr)] = canonical = "%s.%s" % (best, attr)
            aliases["%s.%s" % (m, attr)] = canonical
            if home and home not in shadowed and getattr(obj, "__qualname__", None):
                aliases.setdefault("%s.%s" % (home, obj.__qualname__), canonical)
    for m in FOLDED:
        aliases[m] = PACKAGE
    members, reexports = {}, {}
    for p in pages:
        own = [a for a in exports[p] if owner.get((p, a)) == "%s.%s" % (p, a)]
        if p == PACKAGE:
            own = [a for a in CORE_ORDER if a in own] + [a for a in own if a not in CORE_ORDER]
        members[p] = [(a, _kind(getattr(modules[p], a))) for a in own] + extra.get(p, [])
        reexports[p] = [owner[(p, a)] for a in exports[p] if a not in own and (p, a) in owner]
    children = {p: [c for c in pages if c.rsplit(".", 1)[0] == p and c != p] for p in pages}
    short = {}
    for canonical in set(aliases.values()) - {PACKAGE}:
        short.setdefault(canonical.rsplit(".", 1)[-1], set()).add(canonical)
    for name, targets in short.items():
        if len(targets) == 1 and name not in aliases:
            aliases[name] = targets.pop()
    return {"pages": pages, "members": members, "reexports": reexports, "children": children,
            "aliases": aliases, "titles": TITLES}


API = api_model()
# autosummary writes the module pages into docs/api/, never deletes one, and regenerates a
# nested page only when its parent's page changed: start from an empty folder every build.
shutil.rmtree(os.path.join(HERE, "api"), ignore_errors=True)
autosummary_context = {"api": {k: v for k, v in API.items() if k != "aliases"}}


def resolve_public_name(app, env, node, contnode):
    """Resolve a Python reference to another path of a documented object (see module doc)."""
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].lstrip("~.").removesuffix("()")
    candidates = [target]
    # In a docstring: relative to where the documented object is defined, innermost first.
    source = next((n.source for n in node.traverse(include_self=True, descend=False,
                                                   ascend=True) if n.source), "") or ""
    defined = re.search(r"docstring of ([\w.]+)", source)
    if defined:
        parts = defined.group(1).split(".")
        candidates[:0] = [".".join(parts[:i] + [target]) for i in range(len(parts) - 1, 0, -1)]
    if node.get("py:class"):    # an attribute named inside its class's docstring
        candidates.insert(0, "%s.%s" % (node["py:class"], target))
        if node.get("py:module"):
            candidates.insert(0, "%s.%s.%s" % (node["py:module"], node["py:class"], target))
    if node.get("py:module"):
        candidates.insert(0, "%s.%s" % (node["py:module"], target))
    domain = env.get_domain("py")
    for candidate in candidates:
        head, rest = candidate, ""
        while head and head not in API["aliases"]:   # a method: LossScaler.state_dict
            head, _, tail = head.rpartition(".")
            rest = "." + tail + rest
        if not head:
            continue
        full = API["aliases"][head] + rest
        # An undocumented attribute of a documented class links to the class.
        for target in (full, API["aliases"][head]) if rest.count(".") == 1 else (full,):
            for role in ("obj", "mod"):
                found = domain.resolve_xref(env, node["refdoc"], app.builder, role, target,
                                            node, contnode)
                if found is not None:
                    return found
    return None


# Bare names that are also everyday words: in prose they are linked only through an explicit role.
NOT_AUTOLINKED = {"init", "step", "convert", "validate", "enable", "disable", "describe", "main",
                  "rank", "collect", "fit", "save", "load", "announce", "tokenize", "batchify",
                  "unscale", "emulated"}


def link_api_names(app, doctree):
    """Turn inline code that names a documented object (``mxmixed.init_trainer``,
    ``LossScaler``, ``find_overflow()``) into a link, in the guide pages and the tutorials."""
    from docutils import nodes
    from sphinx import addnodes

    source = str(app.env.doc2path(app.env.docname))
    if not source.endswith((".md", ".ipynb")):
        return
    for literal in list(doctree.findall(nodes.literal)):
        if isinstance(literal.parent, (nodes.reference, addnodes.pending_xref)):
            continue
        text = literal.astext().strip()
        name = text.removesuffix("()")
        if name in NOT_AUTOLINKED or not name.replace(".", "").replace("_", "").isalnum():
            continue
        target = API["aliases"].get(name)
        if target is None or target == PACKAGE and name != PACKAGE:
            continue
        xref = addnodes.pending_xref("", refdomain="py", reftype="obj", reftarget=target,
                                     refexplicit=True, refwarn=True)
        literal.replace_self(xref)
        xref += literal


# -- HTML --------------------------------------------------------------------------------------
html_theme = "alabaster"
html_title = "mxmixed %s" % release
html_static_path = ["_static"]
html_css_files = ["mxmixed.css"]
html_theme_options = {
    "description": "float16 mixed precision for Apache MXNet 1.9.1",
    "fixed_sidebar": True,
    "page_width": "1240px",
    "sidebar_width": "240px",
    "show_powered_by": False,
}
html_sidebars = {"**": ["about.html", "projectinfo.html", "navigation.html", "apimodules.html",
                        "searchbox.html"]}
html_context = {
    "repository_url": REPOSITORY_URL,
    # (module, page) of the top-level API pages, for the sidebar.
    "api_modules": [(p, "api/" + p) for p in API["pages"] if p.count(".") <= 1],
}
html_show_sourcelink = False
html_copy_source = False
html_last_updated_fmt = None


def fill_api_index(app, docname, source):
    """List every API module on the API index page (``{{ api_modules }}`` in ``api.rst``), and
    add any guide page missing from the index's Guide toctree (a page another branch adds,
    such as ``run.md``) in front of ``troubleshooting``."""
    if docname == "api":
        source[0] = source[0].replace("{{ api_modules }}", "\n   ".join(API["pages"]))
    if docname == root_doc:
        listed = set(re.findall(r"^([\w/.-]+)$", source[0], re.M))
        pages = sorted(name[:-3] for name in os.listdir(HERE) if name.endswith(".md"))
        missing = [p for p in pages if p not in listed and p != root_doc]
        if missing:
            source[0] = source[0].replace("\ntroubleshooting\n",
                                          "\n" + "\n".join(missing) + "\ntroubleshooting\n", 1)


def notebook_link(app, pagename, templatename, context, doctree):
    """Tell ``layout.html`` which ``.ipynb`` a tutorial page comes from."""
    source = app.env.doc2path(pagename, base=False) if pagename in app.env.all_docs else None
    if source and str(source).endswith(".ipynb"):
        context["notebook_download"] = os.path.basename(str(source))


def copy_notebooks(app, exception):
    """Put each rendered notebook next to its page, for the download link."""
    if exception is None and app.builder.format == "html":
        for docname in app.env.found_docs:
            source = str(app.env.doc2path(docname))
            if source.endswith(".ipynb"):
                target = os.path.join(app.outdir, os.path.dirname(docname),
                                      os.path.basename(source))
                os.makedirs(os.path.dirname(target), exist_ok=True)
                shutil.copyfile(source, target)


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
    entry and renders it as a parameter; the project's convention is a ``.. note::`` for sharp
    edges wherever it falls, so it is moved, unchanged, in front of the first section.
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


def _numpydoc_warnings_count(message, category, filename, lineno, file=None, line=None):
    """numpydoc reports a malformed docstring with Python's ``warnings``, which Sphinx does not
    count: make them Sphinx warnings, so that ``-W`` fails on them too."""
    if os.sep + "numpydoc" + os.sep in filename:
        LOG.warning("numpydoc: %s", message, type="numpydoc")
    else:
        _SHOWWARNING(message, category, filename, lineno, file, line)


def report_problems(app):
    for problem in PROBLEMS:
        LOG.warning("API reference: %s", problem)


def setup(app):
    warnings.filterwarnings("default", category=UserWarning, module=r"numpydoc\b")
    warnings.showwarning = _numpydoc_warnings_count
    app.connect("builder-inited", report_problems)
    app.connect("autodoc-process-docstring", move_directives_out_of_parameters, priority=100)
    app.connect("missing-reference", resolve_public_name)
    app.connect("doctree-read", link_api_names)
    app.connect("source-read", fill_api_index)
    app.connect("html-page-context", notebook_link)
    app.connect("build-finished", copy_notebooks)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
