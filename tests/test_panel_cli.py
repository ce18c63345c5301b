"""gpurl_train on a panel end to end, as a user runs it: the baselines, the portfolio PPO and a sequence model's book on a wide CSV
of closes through the installed console script
(exit 0, results.json, report.md and both plots), and bad inputs (one line on stderr, exit code 2, nothing written)."""
import json, subprocess
from pathlib import Path

import pytest
from gpurl.data.panel import synthetic_panel

from _cli import console, script_env

SIZES = ["--folds", "2", "--train_bars", "150", "--val_bars", "50", "--test_bars", "100"]


def _run(args, cwd, tool: str = "gpurl_train") -> subprocess.CompletedProcess:
    return subprocess.run([console(tool), *map(str, args)], cwd=cwd, env=script_env(), capture_output=True,
                          text=True, timeout=300)

def _wide_csv(path: Path, n: int = 500, assets: int = 5) -> Path:
    "A wide table of closes: a date column and one column per symbol."
    synthetic_panel(n, assets, seed=4).close.round(4).to_csv(path)
    return path


def test_wide_csv_end_to_end(tmp_path):
    out = tmp_path / "run"
    r = _run(["--algo", "baselines", "--data", _wide_csv(tmp_path / "closes.csv"), *SIZES, "--out", out], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "| equal_weight |" in r.stdout and str(out) in r.stdout
    res = json.loads((out / "results.json").read_text())
    assert res["allocators"] == ["equal_weight", "buy_and_hold", "min_variance", "max_sharpe"]
    assert len(res["folds"]) == 2 and res["data"]["symbols"] == [f"S{a:02d}" for a in range(5)]
    assert res["settings"]["config"]["cost_bps"] == 10.0                      # PortfolioConfig's cost, on by default
    assert "| allocator | Sharpe [95% CI]" in (out / "report.md").read_text()
    for png in ("equity", "weights"): assert (out / "plots" / f"{png}.png").stat().st_size > 10_000


@pytest.mark.parametrize("case,args,message", [
    ("too_few_bars", ["--folds", "9"], "bars cannot hold 9 walk-forward fold(s)"),
    ("trainer_flag", ["--epochs", "3"], "nothing is trained: drop --epochs"),
    ("missing_file", ["--data", "nope.csv"], "nope.csv: no such panel file or folder"),
    ("one_symbol", ["--data", "one.csv"], "one.csv: a panel needs at least 2 symbols"),
])
def test_bad_input(case, args, message, tmp_path):
    _wide_csv(tmp_path / "closes.csv")
    (tmp_path / "one.csv").write_text("date,AAA\n2020-01-01,1\n2020-01-02,2\n")
    args = ["--data", "closes.csv", *SIZES, *args] if "--data" not in args else [*SIZES, *args]
    r = _run(["--algo", "baselines", *args, "--out", "run"], tmp_path)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and lines[0].startswith("gpurl_train: error: "), r.stderr
    assert not (tmp_path / "run").exists() and not list(tmp_path.glob(".run*"))      # nothing written


TINY_PPO = ('{"n_envs": 8, "n_steps": 16, "num_minibatches": 2, "update_epochs": 1, "hidden": 16, '
            '"portfolio": {"window": 2, "episode_len": 12}}')


@pytest.mark.parametrize("algo,config,name", [
    ("ppo", TINY_PPO, "portfolio_ppo"),                     # ppo on a panel file: the portfolio PPO
    ("mlp", '{"window": 3, "top_k": 2}', "mlp_topk"),       # a sequence model on a panel: its TopkDropout book
])
def test_model_on_a_panel_end_to_end(algo, config, name, tmp_path):
    out, cfg = tmp_path / "run", tmp_path / "config.json"
    cfg.write_text(config)
    r = _run(["--algo", algo, "--data", _wide_csv(tmp_path / "closes.csv"), *SIZES, "--epochs", "2", "--config", cfg,
              "--device", "cpu", "--out", out], tmp_path)
    assert r.returncode == 0, r.stderr
    res = json.loads((out / "results.json").read_text())
    assert res["allocators"][-1] == name and res["settings"]["model"]["name"] == name
    assert [t["epochs_run"] <= 2 for t in res["training"]] == [True, True]
    assert res["overall"][name]["n_bars"] == res["overall"]["equal_weight"]["n_bars"]   # scored on the same test bars
    assert f"## Training of {name}" in (out / "report.md").read_text()
    assert len(list((out / "checkpoints").glob("fold*_best.safetensors"))) == 2


def test_resume_end_to_end(tmp_path):
    "A panel run that lost its last fold and its results (a stop mid-run) is continued by --resume to the same results."
    out, cfg = tmp_path / "run", tmp_path / "config.json"
    cfg.write_text(TINY_PPO)
    r = _run(["--algo", "portfolio_ppo", "--data", _wide_csv(tmp_path / "closes.csv"), *SIZES, "--epochs", "2", "--config", cfg,
              "--device", "cpu", "--out", out], tmp_path)
    assert r.returncode == 0, r.stderr
    whole = json.loads((out / "results.json").read_text())
    (out / "results.json").unlink(); (out / "folds" / "fold1.safetensors").unlink()
    r = _run(["--resume", out, "--epochs", "3"], tmp_path)
    assert r.returncode == 2 and "drop --epochs" in r.stderr, r.stderr
    r = _run(["--resume", out, "--device", "cpu"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "results.json").read_text())["overall"] == whole["overall"]
    assert sorted(p.name for p in (out / "folds").iterdir()) == ["fold0.safetensors", "fold1.safetensors"]


@pytest.mark.parametrize("args,message", [
    (["--algo", "portfolio_ppo", "--resume", "somewhere"], "--resume somewhere: not a panel run directory"),
    (["--algo", "portfolio_ppo", "--config", "typo.json"], "unknown PortfolioPpoConfig key(s) ['gama']"),
    (["--algo", "mlp", "--config", "top0.json"], "CrossSectionConfig.top_k=0 is out of range"),
])
def test_bad_model_input(args, message, tmp_path):
    _wide_csv(tmp_path / "closes.csv")
    (tmp_path / "typo.json").write_text('{"gama": 0.9}'); (tmp_path / "top0.json").write_text('{"top_k": 0}')
    r = _run([*args, "--data", "closes.csv", *SIZES, "--out", "run"], tmp_path)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr
    assert not (tmp_path / "run").exists() and not list(tmp_path.glob(".run*"))


def test_panel_sweep_end_to_end(tmp_path):
    "gpurl_sweep on a panel file: trials on validation bars, the winner's run beside 1/N, its report; single-asset flags refused."
    cfg = tmp_path / "config.json"
    cfg.write_text(TINY_PPO)
    args = ["--algo", "ppo", "--data", _wide_csv(tmp_path / "closes.csv"), *SIZES, "--epochs", "1", "--config", cfg, "--device", "cpu"]
    r = _run([*args, "--trials", "2", "--markets", "1,2", "--out", "sw"], tmp_path, "gpurl_sweep")
    assert r.returncode == 2 and "a panel sweep takes no --markets" in r.stderr and not (tmp_path / "sw").exists(), r.stderr
    r = _run([*args, "--trials", "2", "--out", "sw", "--quiet"], tmp_path, "gpurl_sweep")
    assert r.returncode == 0, r.stderr
    res = json.loads((tmp_path / "sw" / "results.json").read_text())
    assert res["algo"] == "portfolio_ppo" and res["deflated"]["n_trials"] == 2 and "report: " in r.stdout
    assert json.loads((tmp_path / "sw" / "winner" / "results.json").read_text())["allocators"] == ["equal_weight", "portfolio_ppo"]
