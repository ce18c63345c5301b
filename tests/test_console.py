"""The console scripts as a user meets them: `--help` answers, and a run whose output goes to a log file (not a
terminal) writes one progress bar, a line per fold, instead of a bar per fold's epochs."""
import json, re, subprocess

from _cli import ROOT, TINY, console, script_env

def test_gpurl_info_help():
    r = subprocess.run([console("gpurl_info"), "--help"], capture_output=True, text=True, env=script_env(), timeout=120)
    assert r.returncode == 0, r.stderr
    assert "--device" in r.stdout and "usage" in r.stdout.lower()

def test_gpurl_info_runs():
    r = subprocess.run([console("gpurl_info"), "--device", "cpu"], capture_output=True, text=True, env=script_env(), timeout=120)
    assert r.returncode == 0, r.stderr
    assert "device cpu" in r.stdout and "budget:" in r.stdout

def test_progress_into_a_log_file_is_one_bar(tmp_path):
    cfg = tmp_path / "ppo.json"; cfg.write_text(json.dumps(TINY["ppo"]))
    with open(tmp_path / "log.txt", "w") as log:
        r = subprocess.run([console("gpurl_train"), "--algo", "ppo", "--config", cfg, "--folds", "2", "--train_bars", "150",
                            "--val_bars", "50", "--test_bars", "50", "--epochs", "3", "--device", "cpu", "--out", tmp_path / "run"],
                           stdout=log, stderr=subprocess.STDOUT, env=script_env(), timeout=600, cwd=tmp_path)
    text = (tmp_path / "log.txt").read_text()
    assert r.returncode == 0, text
    updates = [u for u in re.split(r"[\r\n]", text) if "it/s]" in u or "epoch/s]" in u or "fold/s]" in u or "s/fold]" in u]
    assert not [u for u in updates if "epoch" in u], "no per-epoch bars in a log file"
    assert 1 <= len([u for u in updates if "walk-forward" in u]) <= 2 + 2, updates

def test_commands_that_return_a_value_exit_0(tmp_path):
    "What gpurl_benchpage and gpurl_bench return from Python (the page's path, the results) is not their exit status."
    r = subprocess.run([console("gpurl_benchpage"), ROOT / "nbs" / "benchmarks" / "h200.json", "--out", tmp_path / "page"],
                       capture_output=True, text=True, env=script_env(), timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "page" / "benchmarks.ipynb").is_file()
    r = subprocess.run([console("gpurl_bench"), "--quick", "--cases", "metrics", "--out", tmp_path / "bench", "--quiet"],
                       capture_output=True, text=True, env=script_env(), timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "bench" / "results.json").is_file() and "| metrics |" in r.stdout
