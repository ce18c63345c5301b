"""Fixtures shared by test files: the rendered docs site, built once per pytest session, and the README writer."""
import pytest

from _docsite import process_notebooks, render_pages

@pytest.fixture(scope="session")
def docs_site(tmp_path_factory) -> dict:
    "nbs/ processed by nbdev's docs processor and rendered to HTML: {notebook path under nbs/ (`rl/02_dqn.ipynb`): page path}."
    return render_pages(process_notebooks(tmp_path_factory.mktemp("docs")))

@pytest.fixture(scope="session")
def readme_writer():
    "tools/write_readme.py as a module: what writes README.md from the docs home."
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location("write_readme", Path(__file__).resolve().parents[1] / "tools" / "write_readme.py")
    tool = importlib.util.module_from_spec(spec); spec.loader.exec_module(tool)
    return tool
