"""The console scripts as a user meets them: `--help` answers, and a run whose output goes to a log file (not a
terminal) writes one progress bar, a line per fold, instead of a bar per fold's epochs."""
import json, os, re, shutil, subprocess, sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PPO_TINY = {"env": {"window": 4, "episode_len": 24}, "n_envs": 8, "n_steps": 16, "hidden": [16, 16], "iterations_per_epoch": 1}


def _console(name: str) -> str:
    "An installed console script (next to this interpreter, else on PATH)."
    exe = Path(sys.executable).parent / name
    found = str(exe) if exe.exists() else shutil.which(name)
    if found is None: pytest.fail(f"the {name} console script is not installed: pip install -e '.[dev]'")
    return found

def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), "GPURL_DEVICE": "cpu"}

def test_gpurl_info_help():
    r = subprocess.run([_console("gpurl_info"), "--help"], capture_output=True, text=True, env=_env(), timeout=120)
    assert r.returncode == 0, r.stderr
    assert "--device" in r.stdout and "usage" in r.stdout.lower()

def test_gpurl_info_runs():
    r = subprocess.run([_console("gpurl_info"), "--device", "cpu"], capture_output=True, text=True, env=_env(), timeout=120)
    assert r.returncode == 0, r.stderr
    assert "device cpu" in r.stdout and "budget:" in r.stdout

def test_progress_into_a_log_file_is_one_bar(tmp_path):
    cfg = tmp_path / "ppo.json"; cfg.write_text(json.dumps(PPO_TINY))
    with open(tmp_path / "log.txt", "w") as log:
        r = subprocess.run([_console("gpurl_train"), "--algo", "ppo", "--config", cfg, "--folds", "2", "--train_bars", "150",
                            "--val_bars", "50", "--test_bars", "50", "--epochs", "3", "--device", "cpu", "--out", tmp_path / "run"],
                           stdout=log, stderr=subprocess.STDOUT, env=_env(), timeout=600, cwd=tmp_path)
    text = (tmp_path / "log.txt").read_text()
    assert r.returncode == 0, text
    updates = [u for u in re.split(r"[\r\n]", text) if "it/s]" in u or "epoch/s]" in u or "fold/s]" in u or "s/fold]" in u]
    assert not [u for u in updates if "epoch" in u], "no per-epoch bars in a log file"
    assert 1 <= len([u for u in updates if "walk-forward" in u]) <= 2 + 2, updates
