"""Nothing in the project points outside it: no tracked file names the workspace's shared notes, git-ignored
scripts, or issue numbers a reader of the repository cannot see."""
import re, subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTSIDE = re.compile(r"\.\./shared|(?<![\w/])\.gpu/|\b(?:DESIGN|BENCHMARKING|STYLE)\.md\b|\b[Ii]ssues? ?#?\d+\b")

def _tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return [ROOT / p for p in out if (ROOT / p).is_file() and p != "tests/test_self_contained.py"]

def test_no_tracked_file_points_outside_the_project():
    hits = []
    for p in _tracked():
        try: text = p.read_text()
        except UnicodeDecodeError: continue                      # images and other binaries
        hits += [f"{p.relative_to(ROOT)}:{n}: {m.group(0)}" for n, line in enumerate(text.splitlines(), 1)
                 for m in OUTSIDE.finditer(line)]
    assert not hits, "references outside the project:\n" + "\n".join(hits[:30])
