"""The README is the docs home (nbs/index.ipynb) as tools/write_readme.py writes it, with the same two commands, and CI runs the README's test command."""
import json, os, re, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

def _sh_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```sh\n(.*?)```", text, re.S)]

def _index_markdown() -> str:
    nb = json.loads((ROOT / "nbs" / "index.ipynb").read_text())
    return "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")

def test_readme_has_exactly_two_commands():
    blocks = _sh_blocks((ROOT / "README.md").read_text())
    assert len(blocks) == 2, blocks
    install_run, tests = blocks
    assert install_run.startswith("pip install") and "&&" in install_run
    assert "nbdev_test" in tests and "pytest" in tests and "[dev" in tests

def test_index_shows_the_same_commands():
    assert _sh_blocks(_index_markdown()) == _sh_blocks((ROOT / "README.md").read_text())

def test_readme_never_pins_torch():
    text = (ROOT / "README.md").read_text()
    assert not re.search(r"torch\s*==", text), "the README must keep an installed torch (GPU boxes keep their CUDA build)"

def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "README.md" in ci
    assert "torch==" not in ci.split("README command")[0], "CI installs no torch before the README's commands"

def test_ci_smoke_tests_the_torch_floor():
    "CI reads the torch floor from settings.ini and runs a smoke test on exactly that version."
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"torch>=\(\[0-9\.\]\+\)", ci) and "settings.ini" in ci and '"torch==$floor.0"' in ci
    assert re.search(r"requirements = torch>=[0-9.]+ ", (ROOT / "settings.ini").read_text())

def test_readme_is_written_from_the_docs_home(readme_writer):
    "README.md is what tools/write_readme.py makes of nbs/index.ipynb (its text, outputs and repository links)."
    readme = readme_writer.render()
    assert (ROOT / "README.md").read_text() == readme, "README.md is stale: run python tools/write_readme.py"
    assert "](rl/learner.html)" not in readme and "](nbs/rl/01_learner.ipynb)" in readme

def test_readme_python_example_runs(tmp_path):
    "The README's Python example, verbatim, in a fresh process: it trains, reads the run back and acts with a checkpoint."
    blocks = [b for b in re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S) if "from gpurl import" in b]
    assert len(blocks) == 1, "one Python example of the top-level API in the README"
    code = blocks[0] + "\nassert actions.shape == (1,) and actions.dtype == torch.int64 and 0 <= int(actions) < policy.n_actions\n"
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=900,
                       env={**os.environ, "GPURL_DEVICE": "cpu", "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "runs" / "ppo-first" / "results.json").is_file() and "stitched test folds" in r.stdout
