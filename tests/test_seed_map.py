"""The docs home's seed map and the benchmarks page against what they describe: every public name the map lists
imports, every notebook it links exists and is linked to its docs page, the README carries the map's current table, and the committed benchmarks
page is exactly the page `gpurl_benchpage` writes from the committed records, and the README's CPU time is the committed CPU record."""
import functools, json, subprocess, sys
from pathlib import Path

import pytest

from _cli import script_env
from _docsite import page_name

from gpurl.core.timing import Results
from gpurl.apps.benchpage import SEED_MAP, recorded_speedups, render_benchmarks, resolve, seed_map_markdown, unrecorded_speedups

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "nbs" / "benchmarks" / "h200.json"

@pytest.mark.parametrize("name", sorted({n for row in SEED_MAP for n in row.names}))
def test_every_public_name_imports(name):
    assert resolve(name) is not None

@pytest.mark.parametrize("stem", sorted({s for row in SEED_MAP for s in row.notebooks}))
def test_every_notebook_exists(stem):
    assert (ROOT / "nbs" / f"{stem}.ipynb").is_file(), stem
    assert f"[{stem}]({page_name(stem + '.ipynb')})" in seed_map_markdown(Results.load(RECORDS))

def test_every_pick_finds_its_record():
    results = Results.load(RECORDS)
    for row in SEED_MAP:
        for pick in row.picks: pick.find(results)

def test_readme_carries_the_current_map(readme_writer):
    readme_map = readme_writer.repo_links(seed_map_markdown(Results.load(RECORDS)))     # as the README writer links it
    assert "[rl/01_learner](nbs/rl/01_learner.ipynb)" in readme_map and readme_map in (ROOT / "README.md").read_text()

def test_committed_page_is_the_records_page(tmp_path):
    page = render_benchmarks(Results.load(RECORDS), tmp_path, stem=RECORDS.stem, charts=False)
    assert page.read_text() == (ROOT / "nbs" / "benchmarks.ipynb").read_text(), (
        "nbs/benchmarks.ipynb is not the page of nbs/benchmarks/h200.json: run gpurl_benchpage nbs/benchmarks/h200.json --out nbs")
    assert all((ROOT / "nbs" / p).is_file() for p in [f"benchmarks/{RECORDS.stem}_{c}.png" for c in Results.load(RECORDS).cases()])

def test_the_command_regenerates_the_page(tmp_path):
    r = subprocess.run([sys.executable, "-m", "gpurl.apps.benchpage", RECORDS, "--out", tmp_path], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path, env=script_env())
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "benchmarks.ipynb").read_text() == (ROOT / "nbs" / "benchmarks.ipynb").read_text()

def test_readme_cpu_figures_are_the_cpu_record():
    "The README's CPU time of the default run is the median of the committed CPU record (`gpurl_bench --device cpu --cases default_run`)."
    records = {r.name: r for r in Results.load(ROOT / "nbs" / "benchmarks" / "cpu.json").records}
    cpu, wall = records["default run, CPU time"], records["default run, wall time"]
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"it took {cpu.median:.0f} s of CPU time and {wall.median:.0f} s of wall time" in readme
    assert f"torch {cpu.torch.split('+')[0]}, {cpu.date}" in readme and "`gpurl_bench --device cpu --cases default_run`" in readme

@functools.cache
def known_speedups() -> tuple[float, ...]:
    "Every speed-up the committed records give: the GPU suite's, the portfolio cases' and the CPU run's."
    return tuple(recorded_speedups(Results([r for p in sorted((ROOT / "nbs" / "benchmarks").glob("*.json")) for r in Results.load(p).records])))

def test_readme_speedups_are_recorded():
    "Every speed-up the README quotes is a record's: over its baseline, or over its rival at the same precision."
    assert unrecorded_speedups((ROOT / "README.md").read_text(), known_speedups()) == []

def test_a_planted_unrecorded_speedup_fails():
    readme = (ROOT / "README.md").read_text()
    assert unrecorded_speedups(readme + "\nThe env steps 9,999x faster than anything.\n", known_speedups()) == ["9,999x"]

# Speed-ups the notebooks quote from their own cells' runs, which no committed record holds yet. A figure that moves
# into a record (or out of the prose) leaves this list; a new speed-up in a notebook's prose needs a record first.
QUOTED_WITHOUT_RECORD = {
    "apps/02_benchpage.ipynb": ["1,974x"],          # the example in the prose that describes the check
    "envs/02_replay.ipynb": ["5.9x", "4.3x"],
    "rl/02_dqn.ipynb": ["2.47x", "2.02x"],
    "seq/03_ltc.ipynb": ["13.7x", "3.75x"],
    "seq/05_tft.ipynb": ["0.99x", "1.32x", "1.28x", "0.90x", "1.19x", "1.37x", "8.66x", "0.90x", "1.19x", "1.15x", "1.36x", "1.37x",
                         "8.66x", "8.1x"],
    "seq/06_mamba2.ipynb": ["0.63x", "0.69x", "1.14x", "1.11x", "0.67x", "1.96x", "1.52x", "0.71x", "0.65x", "0.58x", "4.93x"],
}

def notebook_prose(path: Path) -> str:
    "The markdown cells of a notebook, joined."
    return "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "markdown")

@pytest.mark.parametrize("nb", sorted(str(p.relative_to(ROOT / "nbs")) for p in (ROOT / "nbs").rglob("*.ipynb")
                                      if ".ipynb_checkpoints" not in p.parts))
def test_notebook_speedups_are_recorded(nb):
    "A notebook's prose quotes no speed-up without a record, beyond the listed figures of its own cells' runs."
    found = unrecorded_speedups(notebook_prose(ROOT / "nbs" / nb), known_speedups())
    assert found == QUOTED_WITHOUT_RECORD.get(nb, []), (
        f"{nb}: speed-ups without a record: {found}; render the suite's figures from nbs/benchmarks/*.json "
        f"(gpurl.apps.benchpage.records_table) or, for a figure of the notebook's own cells, update QUOTED_WITHOUT_RECORD")
