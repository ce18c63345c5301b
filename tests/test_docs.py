"""Docs check without quarto: process nbs/ with nbdev's own processor (what `nbdev_docs` runs before quarto), render
every processed notebook to HTML with nbconvert, and require a docstring on every exported public function/class."""
import ast, json, os, shutil, subprocess, sys, textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NBS = sorted(p for p in (ROOT / "nbs").glob("*.ipynb") if not p.name.startswith("_"))

def _exported_sources(nb_path: Path):
    nb = json.loads(nb_path.read_text())
    for i, c in enumerate(nb["cells"]):
        src = "".join(c["source"])
        if c["cell_type"] == "code" and any(l.strip().replace(" ", "") in ("#|export", "#|exports") for l in src.splitlines()):
            yield i, src

@pytest.mark.parametrize("nb_path", NBS, ids=lambda p: p.name)
def test_exported_defs_have_docstrings(nb_path):
    missing = []
    for i, src in _exported_sources(nb_path):
        body = "\n".join(l for l in src.splitlines() if not l.lstrip().startswith(("#|", "%", "!")))
        for node in ast.parse(body).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                if ast.get_docstring(node) is None: missing.append(f"cell {i}: {node.name}")
    assert not missing, f"{nb_path.name}: exported defs without a docstring: {missing}"

@pytest.mark.parametrize("nb_path", NBS, ids=lambda p: p.name)
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
    assert not bad, f"{nb_path.name}: cells mixing imports with other code (move the imports to an import cell): {bad}"

def test_docs_process_and_render(tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    shutil.copy(ROOT / "settings.ini", proj / "settings.ini")
    shutil.copytree(ROOT / "nbs", proj / "nbs")
    script = textwrap.dedent("""
        import sys
        from pathlib import Path
        from nbdev.serve import proc_nbs
        cache = proc_nbs(n_workers=0, force=True)
        procs = sorted(Path(cache).rglob('*.ipynb'))
        assert procs, 'proc_nbs produced no notebooks'
        from nbconvert import HTMLExporter
        import nbformat
        exp = HTMLExporter()
        for p in procs:
            body, _ = exp.from_notebook_node(nbformat.read(p, as_version=4))
            assert '<html' in body.lower(), p
            for cell in nbformat.read(p, as_version=4).cells:
                for out in cell.get('outputs', []):
                    assert out.get('output_type') != 'error', f'{p.name}: {out.get("ename")}: {out.get("evalue")}'
            print('rendered', p.name, len(body))
        print('docs ok:', len(procs))
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", script], cwd=proj, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    n_src = len([p for p in (ROOT / "nbs").glob("*.ipynb")])
    assert f"docs ok: {n_src}" in r.stdout, r.stdout[-2000:]
