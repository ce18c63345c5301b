"""The docs site as the local checks see it: `nbs/` processed by nbdev's own processor (what `nbdev_docs` runs before
Quarto), then every processed notebook rendered to HTML with nbconvert under the name the site gives its page
(`04_env.ipynb` -> `env.html`), next to the files the processor copied (images, styles).

The pages are rendered for an offline browser: nbconvert's template would load require.js and MathJax from a CDN;
neither is needed to read the pages (no widget outputs), so the template leaves them out and math shows as its TeX
source here. The site itself (Quarto) typesets it."""
import configparser, os, re, shutil, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NBS = sorted(p for p in (ROOT / "nbs").glob("*.ipynb") if not p.name.startswith("_"))

OFFLINE_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
"""

def site_url() -> str:
    "The site's own address from settings.ini (nbdev's doc links point there), ending in '/'."
    cfg = configparser.ConfigParser(); cfg.read(ROOT / "settings.ini")
    return cfg["DEFAULT"]["doc_host"].rstrip("/") + "/" + cfg["DEFAULT"]["doc_baseurl"].strip("/") + "/"

def page_name(nb_name: str) -> str:
    "The site's page for a notebook, as nbdev's doc links name it: the numeric prefix dropped, lower case, `.html`."
    return re.sub(r"^\d+[a-zA-Z0-9]*_", "", Path(nb_name).name.lower()).removesuffix(".ipynb") + ".html"

def process_notebooks(dest: Path) -> Path:
    "Copy settings.ini and nbs/ into `dest`, run nbdev's docs processor there; returns its output folder (`_proc`)."
    shutil.copy(ROOT / "settings.ini", dest / "settings.ini")
    shutil.copytree(ROOT / "nbs", dest / "nbs")
    script = "from nbdev.serve import proc_nbs; print(proc_nbs(n_workers=0, force=True))"
    r = subprocess.run([sys.executable, "-c", script], cwd=dest, env={**os.environ, "PYTHONPATH": str(ROOT)},
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, "nbdev's processor failed:\n" + r.stdout[-3000:] + r.stderr[-5000:]
    return dest / "_proc"

def render_pages(proc: Path) -> dict[str, Path]:
    "Render every processed notebook in `proc` to its page beside it; returns {notebook name: page path}."
    import nbformat
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter
    exp = HTMLExporter(extra_loaders=[DictLoader({"offline.html.j2": OFFLINE_TEMPLATE})], template_file="offline.html.j2")
    pages = {}
    for nb_path in sorted(proc.glob("*.ipynb")):
        body, _ = exp.from_notebook_node(nbformat.read(nb_path, as_version=4))
        page = proc / page_name(nb_path.name)
        assert page not in pages.values(), f"two notebooks render to {page.name}"
        page.write_text(body)
        pages[nb_path.name] = page
    return pages
