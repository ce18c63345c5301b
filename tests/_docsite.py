"""The docs site as the local checks see it: `nbs/` processed by nbdev's own processor (what `nbdev_docs` runs before
Quarto), then every processed notebook rendered to HTML with nbconvert under the name the site gives its page
(`rl/02_dqn.ipynb` -> `rl/dqn.html`), next to the files the processor copied (images, styles).

The pages are rendered for an offline browser: nbconvert's template would load require.js and MathJax from a CDN;
neither is needed to read the pages (no widget outputs), so the template leaves them out and math shows as its TeX
source here. The site itself (Quarto) typesets it."""
import configparser, os, re, shutil, subprocess, sys
from pathlib import Path

from fastcore.xtras import globtastic

ROOT = Path(__file__).resolve().parents[1]

def notebooks(folder: Path) -> list[Path]:
    "The notebooks under `folder` and its subfolders, as nbdev finds them: none under a `_` or `.` name (`_proc`, `.ipynb_checkpoints`)."
    return sorted(globtastic(folder, file_glob="*.ipynb", skip_folder_re="^[_.]", skip_file_re="^[_.]").map(Path))

def nb_name(nb_path: Path, folder: Path = ROOT / "nbs") -> str:
    "A notebook's name as the checks report it: its path under `folder` (`rl/02_dqn.ipynb`)."
    return nb_path.relative_to(folder).as_posix()

NBS = notebooks(ROOT / "nbs")

OFFLINE_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
"""

def site_url() -> str:
    "The site's own address from settings.ini (nbdev's doc links point there), ending in '/'."
    cfg = configparser.ConfigParser(); cfg.read(ROOT / "settings.ini")
    return cfg["DEFAULT"]["doc_host"].rstrip("/") + "/" + cfg["DEFAULT"]["doc_baseurl"].strip("/") + "/"

def page_name(nb_name: str) -> str:
    "The site's page for a notebook, as nbdev's doc links name it: its folder kept, the file name's numeric prefix dropped, lower case, `.html`."
    p = Path(nb_name)
    return (p.parent / (re.sub(r"^\d+[a-zA-Z0-9]*_", "", p.name.lower()).removesuffix(".ipynb") + ".html")).as_posix()

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
    "Render every processed notebook in `proc` to its page beside it; returns {notebook path under `proc`: page path}."
    import nbformat
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter
    exp = HTMLExporter(extra_loaders=[DictLoader({"offline.html.j2": OFFLINE_TEMPLATE})], template_file="offline.html.j2")
    pages = {}
    for nb_path in notebooks(proc):
        body, _ = exp.from_notebook_node(nbformat.read(nb_path, as_version=4))
        name = nb_name(nb_path, proc)
        page = proc / page_name(name)
        assert page not in pages.values(), f"two notebooks render to {page_name(name)}"
        page.write_text(body)
        pages[name] = page
    return pages
