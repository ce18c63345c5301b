"""Fixtures shared by test files: the rendered docs site, built once per pytest session, and the tools the tests drive
(the README writer, the record renderer)."""
import importlib.util
from pathlib import Path

import pytest

from _docsite import process_notebooks, render_pages

@pytest.fixture(scope="session")
def docs_site(tmp_path_factory) -> dict:
    "nbs/ processed by nbdev's docs processor and rendered to HTML: {notebook path under nbs/ (`rl/02_dqn.ipynb`): page path}."
    return render_pages(process_notebooks(tmp_path_factory.mktemp("docs")))

def load_tool(name: str):
    "The script tools/<name>.py as a module."
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "tools" / f"{name}.py")
    tool = importlib.util.module_from_spec(spec); spec.loader.exec_module(tool)
    return tool

@pytest.fixture(scope="session")
def readme_writer():
    "tools/write_readme.py as a module: what writes README.md from the docs home."
    return load_tool("write_readme")

@pytest.fixture(scope="session")
def record_renderer():
    "tools/render_records.py as a module: what stores the notebooks' renderings of the committed records."
    return load_tool("render_records")
