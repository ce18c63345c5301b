"""Shared by the tests that run gpurl's console scripts: the tiny trainer settings and how to find and start a script."""
import os, shutil, sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

TINY = {"dqn": {"rainbow": {"hidden": [16, 16], "iqn_n": 8, "iqn_n_prime": 8, "iqn_k": 4, "iqn_embedding_dim": 8},
                "env": {"window": 2}, "n_envs": 8, "steps_per_epoch": 8, "batch_size": 16, "warmup": 64, "replay_capacity": 2048},
        "ppo": {"env": {"window": 4, "episode_len": 24}, "n_envs": 8, "n_steps": 16, "hidden": [16, 16], "iterations_per_epoch": 1}}


def console(name: str) -> str:
    "An installed console script (next to this interpreter, else on PATH)."
    exe = Path(sys.executable).parent / name
    found = str(exe) if exe.exists() else shutil.which(name)
    if found is None: pytest.fail(f"the {name} console script is not installed: pip install -e '.[dev]'")
    return found

def script_env() -> dict:
    "The environment a console script runs in: this checkout's gpurl first, on the CPU."
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), "GPURL_DEVICE": "cpu"}
