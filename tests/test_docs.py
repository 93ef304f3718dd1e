"""The docs site: it builds with warnings as errors, documents every public name, renders every
notebook with its stored outputs, loads nothing from the network, and renders in a browser.

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
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
NOTEBOOKS = sorted((ROOT / "tutorials").glob("*.ipynb"))
PLOT_TUTORIAL = "03_gluon_amp"  # a tutorial with plots, for the browser check
CHROMIUM = os.environ.get("MXMIXED_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("MXMIXED_CHROMEDRIVER", "/usr/bin/chromedriver")
BUILD_TIMEOUT_S = 600
REMOTE = re.compile(r"^(https?:)?//", re.I)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """Build the docs once: ``sphinx-build -W --keep-going`` into a temporary folder."""
    for module in ("sphinx", "numpydoc", "myst_nb"):
        if importlib.util.find_spec(module) is None:
            pytest.fail("%s is not installed: the docs extra is part of the test setup "
                        "(pip install -c constraints.txt -e '.[docs]')" % module)
    out = tmp_path_factory.mktemp("docs")
    html = out / "html"
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
           "-d", str(out / "doctrees"), str(DOCS), str(html)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=BUILD_TIMEOUT_S,
                          env=dict(os.environ, MPLBACKEND="Agg"))
    seconds = time.perf_counter() - start
    print("docs build: %.1f s" % seconds)
    return {"html": html, "proc": proc, "seconds": seconds}


def _page(site, name):
    path = site["html"] / name
    assert path.is_file(), "%s was not built" % name
    return path.read_text(encoding="utf-8")


def test_docs_build_without_warnings(site):
    proc = site["proc"]
    problems = [line for line in (proc.stdout + proc.stderr).splitlines()
                if "WARNING" in line or "ERROR" in line or "CRITICAL" in line]
    assert proc.returncode == 0 and not problems, (
        "the docs build failed (warnings are errors; fix the named docstring or page):\n"
        + "\n".join(problems or (proc.stdout + proc.stderr).splitlines()[-40:]))
    assert (site["html"] / "index.html").is_file()


def _public_modules():
    import mxmixed

    names = ["mxmixed"]
    for info in pkgutil.walk_packages(mxmixed.__path__, "mxmixed."):
        if not any(part.startswith("_") for part in info.name.split(".")[1:]):
            names.append(info.name)
    return names


def _inventory(site):
    from sphinx.util.inventory import InventoryFile

    with open(site["html"] / "objects.inv", "rb") as handle:
        inv = InventoryFile.load(handle, "", os.path.join)
    return {name for kind, entries in inv.items() if kind.startswith("py:") for name in entries}


def _resolve(qualname):
    parts = qualname.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            obj = getattr(obj, part)
        return obj
    raise ImportError(qualname)


def test_api_reference_documents_every_public_name(site):
    """Checked from the built inventory, independently of conf.py's own check."""
    documented = _inventory(site)
    by_name = {}
    for qualname in documented:
        by_name.setdefault(qualname.rsplit(".", 1)[-1], []).append(qualname)
    missing = []
    for modname in _public_modules():
        module = importlib.import_module(modname)
        if modname not in documented:
            missing.append(modname + " (module)")
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name)
            if inspect.ismodule(obj):
                if obj.__name__ not in documented:
                    missing.append("%s.%s (module)" % (modname, name))
                continue
            homes = [q for q in by_name.get(name, ()) if _resolve(q) is obj]
            if not homes:
                missing.append("%s.%s" % (modname, name))
    assert not missing, "public names missing from the API reference: %s" % ", ".join(missing)
    api = _page(site, "api.html")
    for anchor in ('id="mxmixed.training.init_trainer"', 'id="mxmixed.scaler.LossScaler"'):
        assert anchor in api


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
    driver.set_page_load_timeout(60)
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


def test_browser_index_page(site, browser):
    errors = _open(browser, site["html"] / "index.html")
    _assert_rendered(browser, errors, "mxmixed")
    links = browser.execute_script(
        "return Array.from(document.querySelectorAll('div.body a')).map(a => a.href);")
    for notebook in NOTEBOOKS:
        assert any(link.endswith("tutorials/%s.html" % notebook.stem) for link in links), \
            notebook.name


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


def test_browser_api_page_lists_the_helpers(site, browser):
    errors = _open(browser, site["html"] / "api.html")
    _assert_rendered(browser, errors, "API reference")
    for anchor, name in (("mxmixed.training.init_trainer", "init_trainer"),
                         ("mxmixed.scaler.LossScaler", "LossScaler")):
        element = browser.find_element("id", anchor)
        assert element.is_displayed() and name in element.text, (anchor, element.text)
        # ... and the summary table of `import mxmixed` links to it.
        assert browser.execute_script(
            "return document.querySelectorAll('a[href$=\"#%s\"]').length;" % anchor) > 0, anchor
