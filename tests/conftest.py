"""Fixtures shared by test files: the rendered docs site, built once per pytest session."""
import pytest

from _docsite import process_notebooks, render_pages

@pytest.fixture(scope="session")
def docs_site(tmp_path_factory) -> dict:
    "nbs/ processed by nbdev's docs processor and rendered to HTML: {notebook name: page path}."
    return render_pages(process_notebooks(tmp_path_factory.mktemp("docs")))
