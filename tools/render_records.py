"""The notebooks show the benchmark suite's figures through cells that render the committed records
(`Markdown(records_table(Results.load("../benchmarks/h200.json"), "ppo"))`, or `records_grid`, `precision_table`:
`gpurl.apps.benchpage`); a rerun of the
suite changes the records and leaves those cells' stored outputs behind. `python tools/render_records.py` lists the
cells whose stored output is not what the records render now and exits 1; `--fix` stores the current rendering (only
those cells run, nothing else in the notebook)."""
import json, os, sys
from contextlib import contextmanager
from pathlib import Path

from fastcore.xtras import globtastic
from IPython.display import Markdown

from gpurl.apps.benchpage import precision_table, records_grid, records_table
from gpurl.core.timing import Results

ROOT = Path(__file__).resolve().parents[1]
RENDERERS = {"records_table": records_table, "records_grid": records_grid, "precision_table": precision_table}

def notebooks() -> list[Path]:
    "The notebooks under nbs/ and its subfolders, as nbdev finds them."
    return sorted(globtastic(ROOT / "nbs", file_glob="*.ipynb", skip_folder_re="^[_.]", skip_file_re="^[_.]").map(Path))

def last_line(cell: dict) -> str:
    "A cell's last line of code."
    return next((l for l in reversed("".join(cell["source"]).splitlines()) if l.strip() and not l.startswith("#|")), "")

def is_record_cell(cell: dict) -> bool:
    "A code cell that shows records: its last line is `Markdown(f(...))` for f one of `RENDERERS`."
    return cell["cell_type"] == "code" and last_line(cell).startswith(tuple(f"Markdown({f}(" for f in RENDERERS))

@contextmanager
def working_dir(path: Path):
    "Run in `path`, as the notebook's cells do, then come back."
    here = os.getcwd(); os.chdir(path)
    try: yield
    finally: os.chdir(here)

def rendered(cell: dict, folder: Path) -> str:
    "The markdown a record cell's last line renders, evaluated in the notebook's `folder`."
    with working_dir(folder):
        return eval(last_line(cell), {"Markdown": Markdown, "Results": Results, **RENDERERS}).data

def stored(cell: dict) -> str:
    "The markdown a cell's stored output shows ('' if none)."
    return next(("".join(o["data"]["text/markdown"]) for o in cell.get("outputs", []) if "text/markdown" in o.get("data", {})), "")

def stale_cells(nb_path: Path, fix: bool = False) -> list[str]:
    "The record cells of one notebook whose stored output is not the current rendering, by cell id; with `fix`, stored anew."
    nb, out = json.loads(nb_path.read_text()), []
    for cell in filter(is_record_cell, nb["cells"]):
        md = rendered(cell, nb_path.parent)
        if stored(cell) == md: continue
        out.append(cell.get("id", "?"))
        cell["outputs"] = [{"data": {"text/markdown": md.splitlines(keepends=True), "text/plain": ["<IPython.core.display.Markdown object>"]},
                            "execution_count": None, "metadata": {}, "output_type": "execute_result"}]
    if fix and out: nb_path.write_text(json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n")
    return out

if __name__ == "__main__":
    fix = "--fix" in sys.argv[1:]
    stale = {p: ids for p in notebooks() if (ids := stale_cells(p, fix))}
    for p, ids in stale.items(): print(f"{p.relative_to(ROOT)}: {'stored' if fix else 'stale'} {', '.join(ids)}")
    sys.exit(1 if stale and not fix else 0)
