"""Docs check without quarto: process nbs/ with nbdev's own processor (what `nbdev_docs` runs before quarto), render
every processed notebook to HTML with nbconvert (tests/_docsite.py), and require a docstring on every exported public
function/class."""
import ast, json, tomllib
from pathlib import Path

import nbformat
import pytest
import yaml

from _docsite import NBS, ROOT, nb_name

pytestmark = pytest.mark.xdist_group("docs")   # one worker builds the rendered site and runs every check of it

def _exported_sources(nb_path: Path):
    nb = json.loads(nb_path.read_text())
    for i, c in enumerate(nb["cells"]):
        src = "".join(c["source"])
        if c["cell_type"] == "code" and any(l.strip().replace(" ", "") in ("#|export", "#|exports") for l in src.splitlines()):
            yield i, src

@pytest.mark.parametrize("nb_path", NBS, ids=nb_name)
def test_exported_defs_have_docstrings(nb_path):
    missing = []
    for i, src in _exported_sources(nb_path):
        body = "\n".join(l for l in src.splitlines() if not l.lstrip().startswith(("#|", "%", "!")))
        for node in ast.parse(body).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                if ast.get_docstring(node) is None: missing.append(f"cell {i}: {node.name}")
    assert not missing, f"{nb_name(nb_path)}: exported defs without a docstring: {missing}"

@pytest.mark.parametrize("nb_path", NBS, ids=nb_name)
def test_imports_live_in_import_cells(nb_path):
    "nbdev's docs processor executes every cell holding an import: such cells may hold imports only (else a test or GPU cell runs at docs time)."
    bad = []
    for i, c in enumerate(json.loads(nb_path.read_text())["cells"]):
        src = "".join(c["source"])
        if c["cell_type"] != "code" or "nbdev_export()" in src: continue
        if any(l.strip().replace(" ", "") in ("#|export", "#|exports", "#|exporti") for l in src.splitlines()): continue
        body = "\n".join(l for l in src.splitlines() if not l.lstrip().startswith(("%", "!")))
        try: tree = ast.parse(body)
        except SyntaxError: continue
        nodes = tree.body
        if any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in nodes) and not all(isinstance(n, (ast.Import, ast.ImportFrom)) for n in nodes):
            bad.append(f"cell {i}: {src.splitlines()[0][:60]}")
    assert not bad, f"{nb_name(nb_path)}: cells mixing imports with other code (move the imports to an import cell): {bad}"

@pytest.mark.parametrize("nb_path", NBS, ids=nb_name)
def test_one_show_doc_per_cell(nb_path):
    "The docs show a cell's last result only: a second show_doc in a cell hides the first (and breaks links to it)."
    bad = [f"cell {i}: {n} show_doc calls" for i, c in enumerate(json.loads(nb_path.read_text())["cells"])
           if c["cell_type"] == "code" and (n := "".join(c["source"]).count("show_doc(")) > 1]
    assert not bad, f"{nb_name(nb_path)}: split these cells, one show_doc each: {bad}"

def test_docs_process_and_render(docs_site):
    "nbdev's processor runs over every notebook without an error output, and each processed notebook renders to HTML."
    assert sorted(docs_site) == sorted(map(nb_name, NBS)), sorted(docs_site)
    for name, page in docs_site.items():
        assert "<html" in page.read_text().lower(), name
        errors = [f'{o.get("ename")}: {o.get("evalue")}' for c in nbformat.read(page.with_name(Path(name).name), as_version=4).cells
                  for o in c.get("outputs", []) if o.get("output_type") == "error"]
        assert not errors, f"{name}: the docs processor raised {errors}"


def test_sidebar_lists_every_notebook_by_layer():
    "nbs/sidebar.yml (settings.ini custom_sidebar) lists every notebook once, in one section per subpackage, lowest layer first."
    contents = yaml.safe_load((ROOT / "nbs" / "sidebar.yml").read_text())["website"]["sidebar"]["contents"]
    sections = [s for s in contents if isinstance(s, dict)]
    listed = [p for p in contents if isinstance(p, str)] + [p for s in sections for p in s["contents"]]
    assert sorted(listed) == sorted(nb_name(p) for p in NBS), "nbs/sidebar.yml must list every notebook exactly once"
    for s in sections:
        folders = {p.split("/")[0] for p in s["contents"]}
        assert len(folders) == 1 and s["section"].startswith(f"{folders.pop()}:"), s["section"]
    layers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]["layers"]
    bottom_up = [name.strip() for layer in reversed(layers) for name in layer.split("|")]
    order = [s["section"].split(":")[0] for s in sections]
    assert sorted(order, key=bottom_up.index) == order, (order, bottom_up)
