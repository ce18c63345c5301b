"""Write README.md from nbs/index.ipynb, the docs home, as the repository's front page shows it: the notebook's
markdown, its shown code cells with their outputs (an `echo: false` cell shows its output only, a `hide`, `export` or
`default_exp` cell nothing), and links rewritten for a view of the repository (docs pages and images to the files under
nbs/). Run from the repository root after executing index.ipynb; tests/test_readme.py checks that README.md is what this
writes:

    python tools/write_readme.py
"""
import json, re
from pathlib import Path

from fastcore.xtras import globtastic

from gpurl.apps.benchpage import page_name

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT / "nbs"


def page_notebooks() -> dict[str, str]:
    "{docs page: notebook} for every notebook under nbs/, its subfolders too: `rl/dqn.html` -> `nbs/rl/02_dqn.ipynb`."
    nbs = globtastic(NBS, file_glob="*.ipynb", skip_folder_re="^[_.]", skip_file_re="^[_.]").map(lambda p: Path(p).relative_to(NBS))
    return {(p.parent / page_name(p.stem)).as_posix(): f"nbs/{p.as_posix()}" for p in nbs}


def repo_links(text: str) -> str:
    "Markdown links to docs pages and images, as links to the notebooks and files under nbs/."
    pages = page_notebooks()
    def target(m: re.Match) -> str:
        t = m.group(2)
        if t in pages: t = pages[t]
        elif not re.match(r"[a-z]+:|#|/|nbs/", t): t = f"nbs/{t}"
        return f"{m.group(1)}({t})"
    return re.sub(r"(\]\s?)\(([^)\s]+)\)", target, text)


def directives(source: str) -> dict[str, str]:
    "A cell's `#| key: value` lines (a bare `#| key` maps to '', `#| key value` to 'value')."
    out = {}
    for line in source.splitlines():
        if not line.startswith("#|"): break
        if m := re.match(r"([\w-]+)\s*:?\s*(.*)", line[2:].strip()): out[m.group(1)] = m.group(2).strip()
    return out


def code_cell(cell: dict) -> list[str]:
    "The README blocks of one code cell: its source unless `echo: false`, then its outputs; nothing if `hide`, `export` or `default_exp`."
    src = "".join(cell["source"])
    d = directives(src)
    if {"hide", "export", "default_exp"} & d.keys(): return []
    blocks = [] if d.get("echo") == "false" else ["```python\n" + "\n".join(l for l in src.splitlines() if not l.startswith("#|")) + "\n```"]
    for o in cell.get("outputs", []):
        if o["output_type"] == "stream": blocks.append("```\n" + "".join(o["text"]).rstrip("\n") + "\n```")
        elif "text/markdown" in o.get("data", {}): blocks.append("".join(o["data"]["text/markdown"]).strip())
        elif "text/plain" in o.get("data", {}): blocks.append("```\n" + "".join(o["data"]["text/plain"]).rstrip("\n") + "\n```")
    return blocks


def render(index: Path = NBS / "index.ipynb") -> str:
    "README.md's text: index.ipynb's cells in order, links rewritten for the repository."
    blocks = []
    for cell in json.loads(index.read_text())["cells"]:
        blocks += ["".join(cell["source"]).strip()] if cell["cell_type"] == "markdown" else code_cell(cell)
    return repo_links("\n\n".join(b for b in blocks if b)) + "\n"


if __name__ == "__main__":
    (ROOT / "README.md").write_text(render())
