"""Execute the notebooks' CPU cells and store their outputs (plots, tables, printed results) in the notebooks, so the docs
site shows them. Cells flagged with one of settings.ini's `tst_flags` (gpu, slow, notest) are skipped and keep their
outputs as they are. Run from the repository root, then `nbdev_clean`:

    python tools/execute_notebooks.py [--flags "slow"] [NOTEBOOK ...]     # default: every notebook under nbs/

`--flags` runs the cells carrying those flags too (as `nbdev_test --flags` does), e.g. the slow CPU demos.
"""
import configparser, os, sys, time
from pathlib import Path

from execnb.nbio import read_nb, write_nb
from execnb.shell import CaptureShell
from fastcore.xtras import globtastic

ROOT = Path(__file__).resolve().parents[1]


def skip_flags() -> set[str]:
    "The test flags settings.ini skips by default (cells carrying them are not executed here either)."
    cfg = configparser.ConfigParser(); cfg.read(ROOT / "settings.ini")
    return set(cfg["DEFAULT"].get("tst_flags", "").split())

def cell_flags(source: str) -> set[str]:
    "The `#|` directive words of a cell, e.g. {'gpu'} for a cell starting with `#| gpu`."
    return {w for line in source.splitlines() if line.startswith("#|") for w in line[2:].split()}

def notebooks() -> list[Path]:
    "The notebooks under nbs/ and its subfolders, as nbdev finds them: none under a `_` or `.` name (`_proc`, `.ipynb_checkpoints`)."
    return sorted(globtastic(ROOT / "nbs", file_glob="*.ipynb", skip_folder_re="^[_.]", skip_file_re="^[_.]").map(Path))

def execute(path: Path, flags: set[str]) -> float:
    "Run the notebook's cells in order in one kernel, store the outputs of those that ran; returns the seconds taken."
    nb, t0 = read_nb(path), time.time()
    def skip(cell) -> bool:
        return cell.cell_type != "code" or "nbdev_export(" in cell.source or bool(cell_flags(cell.source) & flags)
    os.environ["IN_TEST"] = "1"
    cwd = os.getcwd(); os.chdir(path.parent)
    try: CaptureShell(path).run_all(nb, exc_stop=True, preproc=skip)
    finally: os.chdir(cwd)
    write_nb(nb, path)
    return time.time() - t0

if __name__ == "__main__":
    args, forced = sys.argv[1:], set()
    if args[:1] == ["--flags"]: forced, args = set(args[1].split()), args[2:]
    paths = [Path(p).resolve() for p in args] or notebooks()
    flags = skip_flags() - forced
    for p in paths:
        print(f"{p.name}: {execute(p, flags):.0f} s", flush=True)
