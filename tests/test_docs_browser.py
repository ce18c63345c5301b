"""The docs pages in a real browser: every notebook as nbdev's processor leaves it, rendered to HTML (tests/_docsite.py),
opened in headless Chromium (Debian's chromium and chromium-driver, which .ci/run installs) driven by selenium. Every page
loads without a console error, every image has a size, and every internal link (relative, or to the site's own address,
where nbdev's doc links point) resolves to a rendered page and an anchor on it. The browser loads nothing from the
network, and a page that would (a script, style sheet or image from elsewhere) fails here. Without a browser the checks skip, except under CI (`CI` set), where a
missing browser fails. Screenshots of a few pages go to $GPURL_DOCS_SCREENSHOTS (else a temporary folder) to look at."""
import os, shutil
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from _docsite import NBS, nb_name, page_name, site_url

pytestmark = pytest.mark.xdist_group("docs")   # one worker builds the rendered site and runs every check of it

SCREENSHOTS = ("index.ipynb", "data/00_bars.ipynb", "core/07_metrics.ipynb", "rl/02_dqn.ipynb")
PAGE_FACTS = """return {
  images: Array.from(document.images).map(i => ({src: i.getAttribute('src').slice(0, 60), width: i.naturalWidth})),
  links: Array.from(document.querySelectorAll('a[href]')).map(a => a.getAttribute('href')),
  ids: Array.from(document.querySelectorAll('[id]')).map(e => e.id),
  external: Array.from(document.querySelectorAll('script[src], link[href], img[src], iframe[src], video[src]'))
    .filter(e => e.tagName !== 'LINK' || /stylesheet|preload|icon/.test(e.rel)).map(e => e.src || e.href)
    .filter(u => /^https?:/.test(u)),
};"""


def _browser() -> tuple[str, str]:
    "Paths of chromium and chromedriver; skips (fails under CI) when they or selenium are missing."
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    missing = [n for n, p in (("chromium", chromium), ("chromedriver", driver)) if not p]
    try: import selenium  # noqa: F401
    except ImportError: missing.append("selenium (pip install -e '.[dev]')")
    if missing:
        msg = f"no browser for the docs check, missing {', '.join(missing)} (apt-get install -y chromium chromium-driver)"
        if os.environ.get("CI"): pytest.fail(msg)
        pytest.skip(msg)
    return chromium, driver

@pytest.fixture(scope="module")
def browsed(docs_site, tmp_path_factory) -> dict:
    "Every page opened once: {notebook: {'errors', 'images', 'links', 'ids'}}; screenshots of SCREENSHOTS' pages."
    chromium, driver_path = _browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait
    shots = Path(os.environ.get("GPURL_DOCS_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    shots.mkdir(parents=True, exist_ok=True)
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1400"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=opts)
    facts = {}
    try:
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["http://*", "https://*"]})
        for name, page in docs_site.items():
            driver.get(page.as_uri())
            WebDriverWait(driver, 60).until(lambda d: d.execute_script("return document.readyState") == "complete")
            facts[name] = driver.execute_script(PAGE_FACTS)
            facts[name]["errors"] = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
            if name in SCREENSHOTS:
                driver.save_screenshot(str(shots / f"{Path(name).stem}.png"))
                if driver.execute_script("const i = document.querySelector('.jp-OutputArea-output img');"
                                         "if (i) i.scrollIntoView(); return !!i;"):
                    driver.save_screenshot(str(shots / f"{Path(name).stem}_plot.png"))
    finally:
        driver.quit()
    print(f"docs screenshots in {shots}")
    return facts

def _target(href: str, page: Path, root: Path) -> tuple[Path, str] | None:
    "The rendered file and (still quoted) anchor an internal link on `page` of the site in `root` points at (a notebook's means its page); None if external."
    base, folder = site_url(), page.parent
    if href.startswith(base): href, folder = href[len(base):] or "index.html", root
    elif urlsplit(href).scheme: return None
    parts = urlsplit(href)
    path = page if not parts.path else (folder / unquote(parts.path))
    if path.suffix == ".ipynb": path = path.with_name(page_name(path.name))
    return path, parts.fragment

@pytest.mark.parametrize("nb", [nb_name(p) for p in NBS], ids=str)
def test_page_loads_without_console_errors(browsed, nb):
    assert not browsed[nb]["errors"], f"{nb}: console errors: {browsed[nb]['errors']}"

@pytest.mark.parametrize("nb", [nb_name(p) for p in NBS], ids=str)
def test_page_needs_no_network(browsed, nb):
    assert not browsed[nb]["external"], f"{nb}: loads from the network: {browsed[nb]['external'][:10]}"

@pytest.mark.parametrize("nb", [nb_name(p) for p in NBS], ids=str)
def test_images_have_a_size(browsed, nb):
    broken = [i["src"] for i in browsed[nb]["images"] if not i["width"]]
    assert not broken, f"{nb}: images with no size (missing or undecodable): {broken}"

@pytest.mark.parametrize("nb", [nb_name(p) for p in NBS], ids=str)
def test_internal_links_resolve(browsed, docs_site, nb):
    "Anchors compare without case: nbconvert keeps a heading's case in its id, Quarto (and nbdev's doc links) lower it."
    ids = {docs_site[n].resolve(): {i.lower() for i in f["ids"]} for n, f in browsed.items()}
    page, broken, checked = docs_site[nb], [], 0
    for href in browsed[nb]["links"]:
        target = _target(href, page, docs_site["index.ipynb"].parent)
        if target is None: continue
        path, anchor = target[0].resolve(), target[1]
        checked += 1
        if not path.is_file(): broken.append(f"{href} (no file {path.name})")
        elif anchor and path in ids and not {anchor.lower(), unquote(anchor).lower()} & ids[path]:
            broken.append(f"{href} (no anchor #{anchor} among {len(ids[path])} on {path.name})")
    assert not broken, f"{nb}: {len(broken)} of {checked} internal links do not resolve: {broken[:20]}"

def test_the_browser_saw_the_pages(browsed, docs_site):
    "Not vacuous: the plots stored in the notebooks reach the browser as images, and the pages link to each other."
    images = sum(len(f["images"]) for f in browsed.values())
    links = sum(_target(h, docs_site[n], docs_site["index.ipynb"].parent) is not None for n, f in browsed.items() for h in f["links"])
    assert len(browsed) == len(NBS) and images >= 10 and links >= 300, (len(browsed), images, links)
