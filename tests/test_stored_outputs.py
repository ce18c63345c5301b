"""The docs site renders the outputs stored in the notebooks (nbdev's processor runs only import and show_doc cells), so
every CPU cell that draws a plot must be committed with its image: `python tools/execute_notebooks.py` stores them."""
import json, re
from pathlib import Path

import pytest

from _docsite import NBS, ROOT, nb_name

PLOTS = re.compile(r"\bplt\.|\.plot\(|\bplot_\w+\(|\.imshow\(|\.hist\(")
SKIPPED = {"gpu", "slow", "notest"}                       # settings.ini's tst_flags: not run on CPU, nothing stored


def _flags(source: str) -> set[str]:
    return {w for line in source.splitlines() if line.startswith("#|") for w in line[2:].split()}

def _plot_cells(nb_path: Path):
    for i, c in enumerate(json.loads(nb_path.read_text())["cells"]):
        src = "".join(c["source"])
        if c["cell_type"] != "code" or _flags(src) & (SKIPPED | {"export", "exports", "exporti"}): continue
        if "#| output: false" in src: continue                # draws only to test the plot's data
        if PLOTS.search(src) and not src.lstrip().startswith(("def ", "class ", "@")): yield i, c

@pytest.mark.parametrize("nb_path", NBS, ids=nb_name)
def test_plot_cells_have_stored_images(nb_path):
    missing = [f"cell {i}: {''.join(c['source']).splitlines()[0][:60]}" for i, c in _plot_cells(nb_path)
               if not any("image/png" in o.get("data", {}) for o in c.get("outputs", []))]
    assert not missing, (f"{nb_name(nb_path)}: plot cells without a stored image (run python tools/execute_notebooks.py "
                         f"nbs/{nb_name(nb_path)}, then nbdev_clean): {missing}")


def test_source_links_point_at_their_definitions():
    "Every stored show_doc [source] link points at the line that defines its name (tools/refresh_source_links.py)."
    import subprocess, sys
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "refresh_source_links.py")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_record_cells_show_the_committed_records():
    "Every cell that renders the suite's records stores what the committed records render now (tools/render_records.py)."
    import subprocess, sys
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "render_records.py")], capture_output=True, text=True)
    assert r.returncode == 0, "stale record tables (run python tools/render_records.py --fix): " + r.stdout + r.stderr

def test_a_stale_record_table_is_found_and_fixed(tmp_path, record_renderer):
    src = ROOT / "nbs" / "rl" / "03_ppo.ipynb"
    (tmp_path / "benchmarks").mkdir(); (tmp_path / "rl").mkdir()
    (tmp_path / "benchmarks" / "h200.json").write_text((ROOT / "nbs" / "benchmarks" / "h200.json").read_text())
    nb = json.loads(src.read_text())
    cell = next(c for c in nb["cells"] if record_renderer.is_record_cell(c))
    cell["outputs"][0]["data"]["text/markdown"] = ["| a figure pasted by hand |\n"]
    copy = tmp_path / "rl" / "03_ppo.ipynb"; copy.write_text(json.dumps(nb))
    assert record_renderer.stale_cells(copy) == [cell["id"]]
    assert record_renderer.stale_cells(copy, fix=True) == [cell["id"]] and record_renderer.stale_cells(copy) == []
