"""The docs site: it builds with warnings and unresolved references as errors (``-n -W``),
documents every public name on one page per module under the path users import it from, renders
every notebook with its stored outputs and a download link, shows no broken markup or test
scaffolding, loads nothing from the network, and fits a 1280 px browser window.

One Sphinx build (the same command as ``make docs``, into a temporary folder) serves every
test here. The browser check drives Debian's ``chromium`` and ``chromium-driver`` through
selenium and skips, saying why, when they are missing; ``.ci/run`` installs both and sets
``MXMIXED_REQUIRE_BROWSER=1``, which turns that skip into a failure.
"""
import importlib
import importlib.util
import inspect
import json
import os
import pkgutil
import re
import shutil
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import HANG_S, run_command

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
NOTEBOOKS = sorted((ROOT / "tutorials").glob("*.ipynb"))
PLOT_TUTORIAL = "03_gluon_amp"  # a tutorial with plots, for the browser check
CHROMIUM = os.environ.get("MXMIXED_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("MXMIXED_CHROMEDRIVER", "/usr/bin/chromedriver")
REMOTE = re.compile(r"^(https?:)?//", re.I)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """Build the docs once: ``sphinx-build -n -W --keep-going`` into a temporary folder."""
    for module in ("sphinx", "numpydoc", "myst_nb"):
        if importlib.util.find_spec(module) is None:
            pytest.fail("%s is not installed: the docs extra is part of the test setup "
                        "(pip install -c constraints.txt -e '.[docs]')" % module)
    out = tmp_path_factory.mktemp("docs")
    html = out / "html"
    cmd = [sys.executable, "-m", "sphinx", "-n", "-W", "--keep-going", "-q", "-b", "html",
           "-d", str(out / "doctrees"), str(DOCS), str(html)]
    proc = run_command(cmd, capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ, MPLBACKEND="Agg"))
    return {"html": html, "proc": proc}


def _page(site, name):
    path = site["html"] / name
    assert path.is_file(), "%s was not built" % name
    return path.read_text(encoding="utf-8")


@pytest.mark.slow
def test_docs_build_without_warnings(site):
    proc = site["proc"]
    problems = [line for line in (proc.stdout + proc.stderr).splitlines()
                if "WARNING" in line or "ERROR" in line or "CRITICAL" in line]
    assert proc.returncode == 0 and not problems, (
        "the docs build failed (warnings are errors; fix the named docstring or page):\n"
        + "\n".join(problems or (proc.stdout + proc.stderr).splitlines()[-40:]))
    assert (site["html"] / "index.html").is_file()


# Modules documented under the package (``mxmixed.init_trainer``): they have no page of their own.
FOLDED = ("mxmixed.training", "mxmixed.scaler")
CORE = ["init", "amp_scope", "init_trainer", "scale_loss", "unscale", "clip_global_norm", "step",
        "LossScaler"]
MODULE_ORDER = ["mxmixed", "mxmixed.optim", "mxmixed.checkpoint", "mxmixed.symbolic",
                "mxmixed.emulation", "mxmixed.diagnostics", "mxmixed.distributed", "mxmixed.cli"]
GUIDE = sorted(p.stem for p in DOCS.glob("*.md"))


def _public_modules():
    import mxmixed

    names = ["mxmixed"]
    for info in pkgutil.walk_packages(mxmixed.__path__, "mxmixed."):
        if not any(part.startswith("_") for part in info.name.split(".")[1:]):
            names.append(info.name)
    return names


def _inventory(site):
    """``{full name: page}`` of every Python object in the built inventory."""
    from sphinx.util.inventory import InventoryFile

    with open(site["html"] / "objects.inv", "rb") as handle:
        inv = InventoryFile.load(handle, "", os.path.join)
    out = {}
    for kind, entries in inv.items():
        if kind.startswith("py:"):
            for name, entry in entries.items():
                location = entry[2] if isinstance(entry, tuple) else entry.uri
                out[name] = location.split("#")[0]
    return out


def _resolve(qualname):
    """The object users reach by that dotted path (an attribute wins over a submodule)."""
    parts = qualname.split(".")
    obj = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], 1):
        obj = getattr(obj, part) if hasattr(obj, part) else \
            importlib.import_module(".".join(parts[:i + 1]))
    return obj


def _has_page(modname):
    """Modules folded into the package, or hidden behind a same-named attribute, have none."""
    return modname not in FOLDED and inspect.ismodule(_resolve(modname))


@pytest.mark.slow
def test_api_reference_documents_every_public_name(site):
    """Checked from the built inventory, independently of conf.py's own bookkeeping."""
    documented = _inventory(site)
    by_name = {}
    for qualname in documented:
        by_name.setdefault(qualname.rsplit(".", 1)[-1], []).append(qualname)
    missing = []
    for modname in _public_modules():
        module = importlib.import_module(modname)
        if modname not in documented and _has_page(modname):
            missing.append(modname + " (module)")
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name)
            if inspect.ismodule(obj) or name.startswith("__"):
                continue
            if not [q for q in by_name.get(name, ()) if _resolve(q) is obj]:
                missing.append("%s.%s" % (modname, name))
    assert not missing, "public names missing from the API reference: %s" % ", ".join(missing)


@pytest.mark.slow
def test_api_pages_one_per_module_gluon_core_first_under_the_import_path(site):
    documented = _inventory(site)
    for name in CORE:   # documented as mxmixed.X, on the package's page
        assert documented.get("mxmixed." + name) == "api/mxmixed.html", name
        assert "mxmixed.training.%s" % name not in documented or name == "LossScaler", name
    for modname in _public_modules():
        page = site["html"] / "api" / ("%s.html" % modname)
        assert page.is_file() == _has_page(modname), modname
    core = _page(site, "api/mxmixed.html")
    positions = [core.find('id="mxmixed.%s"' % name) for name in CORE]
    assert -1 not in positions and positions == sorted(positions), dict(zip(CORE, positions))
    assert 'id="mxmixed.training.init_trainer"' not in core
    # The package page lists the other modules in the order of the guide.
    links = [core.find('href="%s.html"' % m) for m in MODULE_ORDER[1:]
             if (site["html"] / "api" / ("%s.html" % m)).is_file()]
    assert -1 not in links and links == sorted(links), links
    index = _page(site, "api.html")
    assert 'href="genindex.html"' in index and 'href="py-modindex.html"' in index
    # The API index lists every module page, the Gluon core first.
    links = [index.find('href="api/%s.html"' % m) for m in MODULE_ORDER
             if (site["html"] / "api" / ("%s.html" % m)).is_file()]
    assert -1 not in links and links == sorted(links), links
    assert (site["html"] / "py-modindex.html").is_file()


@pytest.mark.slow
def test_every_page_shows_the_version_and_links_the_source_and_indexes(site):
    import mxmixed

    for name in ("index.html", "quickstart.html", "api/mxmixed.html"):
        page = _page(site, name)
        assert "version %s" % mxmixed.__version__ in page, name
        assert 'class="project-source"' in page and "genindex.html" in page, name
        assert "py-modindex.html" in page, name


@pytest.mark.slow
def test_guide_pages_link_the_api(site):
    """Inline code naming an API object is a link, and the core names are linked."""
    gluon = _page(site, "gluon.html")
    for name in CORE:
        assert 'href="api/mxmixed.html#mxmixed.%s"' % name in gluon, name
    quickstart = _page(site, "quickstart.html")
    for name in ("init", "init_trainer", "scale_loss", "step"):
        assert 'href="api/mxmixed.html#mxmixed.%s"' % name in quickstart, name


@pytest.mark.slow
def test_every_notebook_rendered_with_its_outputs(site):
    assert NOTEBOOKS, "no notebooks under tutorials/"
    index = _page(site, "index.html")
    for notebook in NOTEBOOKS:
        page = _page(site, "tutorials/%s.html" % notebook.stem)
        assert 'href="tutorials/%s.html"' % notebook.stem in index, \
            "%s is not linked from the index" % notebook.name
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        outputs = [o for c in cells if c["cell_type"] == "code" for o in c.get("outputs", ())]
        images = sum(1 for o in outputs if "image/png" in o.get("data", {}))
        texts = sum(1 for o in outputs if o.get("output_type") == "stream")
        assert page.count("<img") >= images, "%s: %d stored plots, fewer rendered" % (
            notebook.name, images)
        assert page.count('class="cell_output') >= min(1, images + texts), \
            "%s: the stored outputs were not rendered" % notebook.name
        # ... with a link to download the notebook itself, which is next to the page.
        assert 'href="%s"' % notebook.name in page, "%s: no download link" % notebook.name
        download = site["html"] / "tutorials" / notebook.name
        assert download.read_bytes() == notebook.read_bytes(), notebook.name


class _Text(HTMLParser):
    """The text of a page's body; with ``code=False``, without code, outputs and signatures."""

    SKIP = {"script", "style"}
    CODE = {"pre", "code"}

    def __init__(self, code):
        super().__init__()
        self.code, self.stack, self.parts, self.in_body = code, [], [], False

    def handle_starttag(self, tag, attrs):
        classes = (dict(attrs).get("class") or "").split()
        if tag == "div" and "body" in classes:
            self.in_body = True
        if tag in ("br", "img", "meta", "link", "input", "hr"):
            return
        skip = tag in self.SKIP or (not self.code and (tag in self.CODE or "highlight" in
                                                       classes or "sig" in classes))
        self.stack.append(skip or (self.stack[-1] if self.stack else False))

    def handle_endtag(self, tag):
        if tag not in ("br", "img", "meta", "link", "input", "hr") and self.stack:
            self.stack.pop()

    def handle_data(self, data):
        if self.in_body and not (self.stack and self.stack[-1]):
            self.parts.append(data)


def _text(html, code):
    parser = _Text(code)
    parser.feed(html)
    return "".join(parser.parts)


def _content_pages(site):
    """The guide pages and the tutorials (the pages written by hand, not generated)."""
    return ["%s.html" % name for name in GUIDE] + \
        ["tutorials/%s.html" % notebook.stem for notebook in NOTEBOOKS]


@pytest.mark.slow
def test_no_literal_markup_in_rendered_text(site):
    """``2**16`` outside code renders as a stray bold: ``**`` may only show inside code."""
    bad = []
    for name in _content_pages(site):
        text = _text(_page(site, name), code=False)
        for match in re.finditer(r".{0,40}\*\*.{0,40}", text):
            bad.append("%s: %s" % (name, " ".join(match.group(0).split())))
    assert not bad, "literal ** in rendered text (write it as code, or as 2^16):\n" + \
        "\n".join(bad)


@pytest.mark.slow
def test_no_test_scaffolding_in_rendered_pages(site):
    """nbval's markers live in the cells' tags, not as ``# NBVAL_...`` comments on display."""
    bad = []
    for name in _content_pages(site):
        # In a tutorial, code cells count too; a guide page may name the marker in inline code.
        count = _text(_page(site, name), code=name.startswith("tutorials/")).count("NBVAL_")
        if count:
            bad.append("%s: %d" % (name, count))
    assert not bad, "NBVAL_ markers shown in the rendered pages: %s" % ", ".join(bad)


@pytest.mark.slow
def test_pages_load_nothing_from_the_network(site):
    attr = re.compile(r"<(script|link|img|iframe|source)\b[^>]*?\b(?:src|href)=\"([^\"]+)\"", re.I)
    remote = []
    for path in site["html"].rglob("*"):
        if path.suffix == ".html":
            for tag, url in attr.findall(path.read_text(encoding="utf-8")):
                if REMOTE.match(url) and not (tag.lower() == "link" and "canonical" in url):
                    remote.append("%s: <%s> %s" % (path.relative_to(site["html"]), tag, url))
        elif path.suffix == ".css":
            for url in re.findall(r"url\(\s*['\"]?([^'\")]+)", path.read_text(encoding="utf-8")):
                if REMOTE.match(url):
                    remote.append("%s: %s" % (path.relative_to(site["html"]), url))
            for url in re.findall(r"@import\s+(?:url\()?['\"]?([^'\");]+)",
                                  path.read_text(encoding="utf-8")):
                if REMOTE.match(url):
                    remote.append("%s: @import %s" % (path.relative_to(site["html"]), url))
    assert not remote, "pages load resources from the network:\n" + "\n".join(remote)


# ----------------------------------------------------------------------------- browser check
def _browser_missing():
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not os.access(path, os.X_OK)]
    if missing:
        return ("headless browser check skipped: %s not found (install Debian's chromium and "
                "chromium-driver: apt-get install chromium chromium-driver)" % ", ".join(missing))
    if importlib.util.find_spec("selenium") is None:
        return "headless browser check skipped: selenium is not installed (the docs extra)"
    return None


@pytest.fixture(scope="module")
def browser():
    reason = _browser_missing()
    if reason and os.environ.get("MXMIXED_REQUIRE_BROWSER") == "1":
        pytest.fail(reason.replace("skipped", "required (MXMIXED_REQUIRE_BROWSER=1)"))
    if reason:
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="mxmixed-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--user-data-dir=" + profile,
                 "--window-size=1280,900"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(HANG_S)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _open(driver, path):
    """Load a built page; return the browser's console errors about it."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(path.as_uri())
    WebDriverWait(driver, 30).until(
        lambda d: d.execute_script("return document.readyState") == "complete")
    return [entry["message"] for entry in driver.get_log("browser")
            if entry.get("level") == "SEVERE"]


def _assert_rendered(driver, errors, title_part):
    assert title_part.lower() in driver.title.lower(), driver.title
    state = driver.execute_script("""
        const body = document.querySelector('div.body');
        const side = document.querySelector('div.sphinxsidebar');
        return {h1: (document.querySelector('h1') || {}).innerText || '',
                bodyHeight: body ? body.getBoundingClientRect().height : 0,
                text: body ? body.innerText.length : 0,
                font: getComputedStyle(document.body).fontFamily,
                sidebarWidth: side ? side.getBoundingClientRect().width : 0};""")
    assert state["h1"] and state["text"] > 200 and state["bodyHeight"] > 300, state
    # The theme's stylesheet applied: alabaster's serif body font and a laid-out sidebar.
    assert "georgia" in state["font"].lower() and state["sidebarWidth"] > 100, state
    assert not errors, "console errors:\n" + "\n".join(errors)


@pytest.mark.slow
def test_browser_index_page(site, browser):
    errors = _open(browser, site["html"] / "index.html")
    _assert_rendered(browser, errors, "mxmixed")
    links = browser.execute_script(
        "return Array.from(document.querySelectorAll('div.body a')).map(a => a.href);")
    for notebook in NOTEBOOKS:
        assert any(link.endswith("tutorials/%s.html" % notebook.stem) for link in links), \
            notebook.name


@pytest.mark.slow
def test_browser_tutorial_images_load(site, browser):
    from selenium.webdriver.support.ui import WebDriverWait

    page = site["html"] / "tutorials" / ("%s.html" % PLOT_TUTORIAL)
    errors = _open(browser, page)
    _assert_rendered(browser, errors, "mxmixed")
    images = 'return Array.from(document.querySelectorAll("div.body img"))'
    WebDriverWait(browser, 30).until(lambda d: d.execute_script(images + ".every(i => i.complete);"))
    loaded = browser.execute_script(
        images + ".map(i => [i.getAttribute('src'), i.naturalWidth, i.naturalHeight]);")
    assert loaded, "%s shows no images" % PLOT_TUTORIAL
    broken = [src for src, width, height in loaded if not (width > 0 and height > 0)]
    assert not broken, "images that did not load: %s" % broken


@pytest.mark.slow
def test_browser_api_page_lists_the_helpers(site, browser):
    errors = _open(browser, site["html"] / "api" / "mxmixed.html")
    _assert_rendered(browser, errors, "mxmixed")
    for name in ("init_trainer", "LossScaler"):
        anchor = "mxmixed." + name
        element = browser.find_element("id", anchor)
        assert element.is_displayed() and name in element.text, (anchor, element.text)
        # ... and the page's summary table links to it.
        assert browser.execute_script(
            "return document.querySelectorAll('a[href$=\"#%s\"]').length;" % anchor) > 0, anchor


@pytest.mark.slow
def test_browser_sidebar_lists_the_api_modules(site, browser):
    for name in ("index.html", "api/mxmixed.diagnostics.html"):
        _open(browser, site["html"] / name)
        listed = browser.execute_script("""
            return Array.from(document.querySelectorAll('div.sphinxsidebar div.api-modules a'))
                .filter(a => a.getBoundingClientRect().height > 0).map(a => a.innerText.trim());""")
        expected = [m for m in MODULE_ORDER if (site["html"] / "api" / ("%s.html" % m)).is_file()]
        assert [m for m in listed if m in expected] == expected, (name, listed)


@pytest.mark.slow
def test_browser_pages_fit_1280_px(site, browser):
    """No page scrolls sideways in a 1280 px window: code wraps, tables fit or scroll inside."""
    assert browser.execute_script("return window.outerWidth;") <= 1280
    wide = []
    for name in _content_pages(site) + ["api/mxmixed.html"]:
        _open(browser, site["html"] / name)
        width = browser.execute_script(
            "return [document.documentElement.scrollWidth, document.documentElement.clientWidth];")
        if width[0] > width[1]:
            culprits = browser.execute_script("""
                const right = document.documentElement.clientWidth;
                return Array.from(document.querySelectorAll('div.body *'))
                    .filter(e => e.getBoundingClientRect().right > right)
                    .slice(0, 3).map(e => e.tagName + ': ' + e.innerText.slice(0, 60));""")
            wide.append("%s: %d px > %d px %s" % (name, width[0], width[1], culprits))
    assert not wide, "pages wider than the window:\n" + "\n".join(wide)


@pytest.mark.slow
def test_browser_table_keys_are_not_split_mid_word(site, browser):
    """The run page's report table: a key such as ``exit_code`` stays on one line."""
    _open(browser, site["html"] / "run.html")
    split = browser.execute_script("""
        return Array.from(document.querySelectorAll('div.body table.docutils td code'))
            .filter(c => c.innerText.length <= 24 && !c.innerText.includes(' '))
            .filter(c => c.getClientRects().length > 1).map(c => c.innerText);""")
    assert not split, "table names split across lines: %s" % split


@pytest.mark.slow
def test_browser_sidebar_shows_long_code_whole(site, browser):
    """The emulation page's sidebar: long code paths wrap inside it, none is cut off."""
    _open(browser, site["html"] / "emulation.html")
    cut = browser.execute_script("""
        const side = document.querySelector('div.sphinxsidebar');
        if (!side) { return ['no sidebar']; }
        const right = side.getBoundingClientRect().right;
        return Array.from(side.querySelectorAll('code, span.pre'))
            .filter(c => c.getBoundingClientRect().right > right + 1).map(c => c.innerText);""")
    assert not cut, "sidebar code cut off: %s" % cut
