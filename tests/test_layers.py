"""The architecture as CI holds it: import-linter's layer and cycle contracts (pyproject.toml) keep on the package and
break on a planted upward import, and no module or function outgrows what a reader can hold in view."""
import ast, os, shutil, subprocess, sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 600, 60
LINT = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))


def lint(cwd: Path) -> subprocess.CompletedProcess:
    "`lint-imports` with pyproject.toml's contracts over the package found first on PYTHONPATH=cwd."
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run([LINT, "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def modules() -> list[Path]:
    "Every exported module of the package (nbdev's generated index excluded)."
    return sorted(p for p in (ROOT / "gpurl").rglob("*.py") if p.name != "_modidx.py")


def test_contracts_keep():
    r = lint(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Contracts: 2 kept, 0 broken." in r.stdout, r.stdout


@pytest.mark.parametrize("planted, module, target", [
    ("from gpurl.apps import cli", "core/config.py", "gpurl.apps"),       # the lowest layer reaching the top
    ("from gpurl.rl.dqn import DqnTrainer", "seq/mamba2.py", "gpurl.rl"),  # one independent sibling importing another
])
def test_planted_upward_import_breaks(tmp_path, planted, module, target):
    shutil.copytree(ROOT / "gpurl", tmp_path / "gpurl")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    with open(tmp_path / "gpurl" / module, "a") as f: f.write(f"\n{planted}\n")
    r = lint(tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Contracts: 1 kept, 1 broken." in r.stdout and f"not allowed to import {target}" in r.stdout, r.stdout


def test_planted_cycle_breaks(tmp_path):
    shutil.copytree(ROOT / "gpurl", tmp_path / "gpurl")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    with open(tmp_path / "gpurl" / "core" / "device.py", "a") as f: f.write("\ndef _late():\n    from gpurl.core import graphs\n")
    r = lint(tmp_path)                              # a lazy import inside a function still closes a cycle
    assert r.returncode == 1 and "No cycles are allowed in gpurl.core" in r.stdout, r.stdout


def test_sizes():
    long_modules = {str(p.relative_to(ROOT)): n for p in modules() if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    long_functions = {}
    for p in modules():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES: long_functions[f"{p.relative_to(ROOT)}:{node.name}"] = n
    assert not long_modules, f"modules over {MAX_MODULE_LINES} lines (split them): {long_modules}"
    assert not long_functions, f"functions over {MAX_FUNCTION_LINES} lines (split them): {long_functions}"
