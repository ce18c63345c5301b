"""The `[source]` links of the show_doc outputs stored in the notebooks under nbs/ point at a line of a module under
gpurl/ (`gpurl/rl/dqn.py#L40`); an edit above a definition moves it and leaves the stored link behind.
`python tools/refresh_source_links.py` lists the links that no longer point at their definition and exits 1; `--fix`
rewrites them to the definition's line (no notebook is re-run)."""
import json, re, sys
from pathlib import Path

from fastcore.xtras import globtastic

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"/blob/[^/]+/gpurl/([a-z0-9_/]+)\.py#L(\d+)")     # the module under gpurl/ and the line
HEADING = re.compile(r"^#+\s+(\S+)", re.M)

def definition_lines(module: str, name: str) -> list[int]:
    "1-based lines of gpurl/<module>.py (`module` as `rl/dqn`) that define `name` ('f', 'Class' or 'Class.method', the latter also as @patch)."
    src = (ROOT / "gpurl" / f"{module}.py").read_text().splitlines()
    owner, short = name.rsplit(".", 1) if "." in name else (None, name)
    starts = re.compile(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(short)}\b|^{re.escape(short)}\s*[:=]")
    lines = [i + 1 for i, line in enumerate(src) if starts.match(line)]
    if owner and len(lines) > 1:       # a patched method: the def whose self (or cls) is annotated with its class
        lines = [n for n in lines if re.search(rf"\b(self|cls): {re.escape(owner)}\b", src[n - 1])] or lines
    return lines

def notebooks() -> list[Path]:
    "The notebooks under nbs/ and its subfolders, as nbdev finds them: none under a `_` or `.` name (`_proc`, `.ipynb_checkpoints`)."
    return sorted(globtastic(ROOT / "nbs", file_glob="*.ipynb", skip_folder_re="^[_.]", skip_file_re="^[_.]").map(Path))

def stale_links(nb_path: Path, fix: bool = False) -> list[str]:
    "The stale links of one notebook, as 'name: module.py#Lold (defined at ...)'; with `fix`, rewritten where unambiguous."
    nb, out, changed = json.loads(nb_path.read_text()), [], False
    for cell in nb["cells"]:
        for o in cell.get("outputs", []):
            text = "".join(o.get("data", {}).get("text/markdown", []))
            link = LINK.search(text)
            heading = HEADING.search(text, link.end()) if link else None
            if heading is None: continue
            module, line, name = link.group(1), int(link.group(2)), heading.group(1)
            lines = definition_lines(module, name)
            if line in lines: continue
            out.append(f"{name}: {module}.py#L{line} (defined at {lines or 'no line found'})")
            if fix and len(lines) == 1:
                text = text[:link.start(2)] + str(lines[0]) + text[link.end(2):]
                o["data"]["text/markdown"] = text.splitlines(keepends=True)
                changed = True
    if changed: nb_path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return out

if __name__ == "__main__":
    fix = "--fix" in sys.argv[1:]
    stale = {p.relative_to(ROOT).as_posix(): s for p in notebooks() if (s := stale_links(p, fix))}
    for name, links in stale.items(): print(f"{name}: " + "; ".join(links))
    if stale and not fix: sys.exit("stale [source] links: run python tools/refresh_source_links.py --fix, then nbdev_clean")
