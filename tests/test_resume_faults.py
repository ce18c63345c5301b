"""`gpurl_train --resume` after corrupt files: every file resume relies on is read back first; a bad one is named,
kept as NAME.corrupt, and rebuilt, and the resumed run ends with exactly the results of an uninterrupted one."""
import json, shutil, subprocess, sys
from pathlib import Path

import pytest

from gpurl.run.record import load_run
from gpurl.core.state import read_safetensors_header
from _cli import TINY, script_env

pytestmark = pytest.mark.xdist_group("resume_faults")   # one worker builds the module fixture its tests share

SHAPE = ["--folds", "2", "--train_bars", "150", "--val_bars", "50", "--test_bars", "50", "--epochs", "3", "--device", "cpu"]


def _gpurl_train(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpurl.apps.cli", "--quiet", *map(str, args)], cwd=cwd, env=script_env(),
                          capture_output=True, text=True, timeout=600)

@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    "One finished tiny PPO run of two folds (copied by each test before it breaks something)."
    d = tmp_path_factory.mktemp("resume")
    (d / "ppo.json").write_text(json.dumps(TINY["ppo"]))
    r = _gpurl_train("--algo", "ppo", "--config", d / "ppo.json", *SHAPE, "--out", d / "run", cwd=d)
    assert r.returncode == 0, r.stderr
    return d / "run"

def _results(run: Path) -> list:
    return [(f["fold"], f["test"]["sharpe"], f["best_epoch"]) for f in json.loads((run / "results.json").read_text())["folds"]]

def _truncate(path: Path, keep: int = -7) -> None:
    raw = path.read_bytes(); path.write_bytes(raw[:keep])

def _unfinish(run: Path, fold: int) -> None:
    "Make `fold` the interrupted one: its result files and results.json gone, its last state kept."
    for p in (run / "folds" / f"fold{fold}.json", run / "folds" / f"fold{fold}_test.safetensors", run / "results.json"):
        p.unlink()

@pytest.mark.parametrize("broken", ["folds/fold0.json", "folds/fold0_test.safetensors", "checkpoints/fold0_best.safetensors"])
def test_a_finished_folds_bad_file_is_rebuilt(finished, tmp_path, broken):
    run = tmp_path / "run"; shutil.copytree(finished, run)
    _truncate(run / broken)
    r = _gpurl_train("--resume", run, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"{run / broken} cannot be used" in r.stderr and "kept as" in r.stderr, r.stderr
    assert (run / (broken + ".corrupt")).is_file()                       # kept, not deleted
    assert _results(run) == _results(finished)                          # fold 0 and the folds after it trained again
    for k in (0, 1):                                                    # every file the run's results name is back
        for name in (f"checkpoints/fold{k}_best.safetensors", f"folds/fold{k}_test.safetensors"):
            assert read_safetensors_header(run / name), name
    assert load_run(run).trainer(0) is not None                         # the rebuilt fold's best checkpoint loads

def test_a_truncated_last_state_restarts_its_fold(finished, tmp_path):
    run = tmp_path / "run"; shutil.copytree(finished, run)
    _unfinish(run, 1)
    _truncate(run / "checkpoints" / "fold1_last_state.safetensors", 100)
    r = _gpurl_train("--resume", run, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "fold1_last_state.safetensors cannot be used" in r.stderr and "truncated" in r.stderr, r.stderr
    assert _results(run) == _results(finished)

def test_a_torn_metrics_line_reruns_the_fold(finished, tmp_path):
    run = tmp_path / "run"; shutil.copytree(finished, run)
    _unfinish(run, 1)
    m = run / "metrics.jsonl"
    lines = m.read_text().splitlines()
    m.write_text("\n".join(lines[:-1] + [lines[-1][: len(lines[-1]) // 2]]))   # the last epoch's line torn mid-write
    r = _gpurl_train("--resume", run, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "metrics.jsonl has no line for fold 1's epoch(s) [2] (torn line(s) [6])" in r.stderr, r.stderr
    assert _results(run) == _results(finished)
    rows = [json.loads(l) for l in m.read_text().splitlines()]
    assert [(r["fold"], r["epoch"]) for r in rows] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
