"""gpurl_train --ensemble K end to end on CPU with tiny sizes: a DQN and a bar-MLP ensemble through the console script
and `python -m gpurl.apps.cli` (the run directory, the members, the report's rows), every bad --ensemble input (one line,
exit code 2, nothing written), and an interrupted ensemble continued by the same command without retraining its
finished member."""
import json, subprocess, sys
from pathlib import Path

import pytest

from _cli import TINY, console, script_env

SHAPE = ["--folds", "2", "--train_bars", "150", "--val_bars", "50", "--test_bars", "50", "--device", "cpu", "--epochs", "2"]
MLP = {"hidden": [16, 16], "batch_size": 32, "steps_per_epoch": 4}
RUNNERS = {"script": lambda: [console("gpurl_train")], "module": lambda: [sys.executable, "-m", "gpurl.apps.cli"]}

def _run(args, cwd, runner="script", timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run(RUNNERS[runner]() + [str(a) for a in args], cwd=cwd, env=script_env(), capture_output=True,
                          text=True, timeout=timeout)

def _config(tmp_path: Path, name: str, cfg: dict) -> Path:
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps(cfg))
    return p


@pytest.mark.parametrize("algo,runner,aggregation", [("dqn", "script", "mean"), ("mlp", "module", "probs")])
def test_ensemble_end_to_end(algo, runner, aggregation, tmp_path):
    cfg = _config(tmp_path, algo, TINY.get(algo, MLP))
    r = _run(["--algo", algo, "--config", cfg, *SHAPE, "--ensemble", 2, "--seed", 3, "--quiet", "--out", "runs/e"], tmp_path, runner)
    assert r.returncode == 0, r.stderr[-4000:]
    run = tmp_path / "runs" / "e"
    assert sorted(p.name for p in run.iterdir()) == ["ensemble.json", "folds", "plots", "report.md", "results.json", "seed3", "seed4"]
    spec = json.loads((run / "ensemble.json").read_text())
    assert (spec["k"], spec["seeds"], spec["aggregation"]) == (2, [3, 4], aggregation)
    for s in (3, 4):                                                  # each member: a complete run of its seed
        c = json.loads((run / f"seed{s}" / "config.json").read_text())
        assert c["seed"] == s and c["trainer"]["seed"] == s and (run / f"seed{s}" / "report.md").is_file()
    res = json.loads((run / "results.json").read_text())
    assert [row["model"] for row in res["table"]] == ["seed3", "seed4", "ensemble"]
    assert all(isinstance(row["test_sharpe"], float) and row["verdict"] for row in res["table"])
    report = (run / "report.md").read_text()
    for name in ("seed3", "seed4", "ensemble"): assert f"| {name} |" in report, name
    assert (run / "plots" / "equity.png").is_file()
    assert "ensemble" in r.stdout and "excess Sharpe [95% CI]" in r.stdout, r.stdout


def _bad(tmp_path: Path) -> dict:
    (tmp_path / "taken").mkdir(); (tmp_path / "taken" / "keep.txt").write_text("mine")
    allowed = "--ensemble must be an integer K >= 2 (K seeds per fold and their ensemble), got {}; omit --ensemble to train a single model"
    return {"zero": (["--ensemble", "0"], allowed.format("'0'")),
            "negative": (["--ensemble", "-2"], allowed.format("'-2'")),
            "one": (["--ensemble", "1"], allowed.format("'1'")),
            "not an int": (["--ensemble", "2.5"], allowed.format("'2.5'")),
            "torchrun workers": (["--ensemble", "2", "--nproc_per_node", "2"], "--ensemble trains its members one after another on one device: drop --nproc_per_node"),
            "order book": (["--ensemble", "2", "--algo", "mlplob"], "--algo mlplob is scored on order-book events"),
            "out exists": (["--ensemble", "2", "--out", "taken"], "--out taken already exists")}

@pytest.mark.parametrize("case", ["zero", "negative", "one", "not an int", "torchrun workers", "order book", "out exists"])
def test_bad_ensemble_input(case, tmp_path):
    args, msg = _bad(tmp_path)[case]
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    r = _run(args + ["--device", "cpu"], tmp_path, "module" if case in ("one", "order book") else "script", timeout=120)
    err = r.stderr.strip()
    assert r.returncode == 2 and "Traceback" not in err and len(err.splitlines()) == 1, (r.returncode, err[-3000:])
    assert err.startswith("gpurl_train: error: ") and msg in err, err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before and not (tmp_path / "runs").exists()


def test_interrupted_ensemble_continues(tmp_path, monkeypatch, capsys):
    "Ctrl-C after the second member's first fold; the same call again trains the rest of that member alone, then the ensemble."
    import gpurl.apps.cli as cli
    import gpurl.run.runner as runner
    from gpurl.run.runensemble import load_ensemble
    real = runner.save_fold_result
    def stop_after_fold0(run_dir, fr, times):
        real(run_dir, fr, times)
        if run_dir.name == "seed1": raise KeyboardInterrupt
    args = dict(algo="dqn", config=TINY["dqn"], folds=2, train_bars=150, val_bars=50, test_bars=50, epochs=2, device="cpu",
                out=tmp_path / "e", ensemble=2, progress=False, summary=False)
    monkeypatch.setattr(runner, "save_fold_result", stop_after_fold0)
    with pytest.raises(KeyboardInterrupt): cli.main(**args)
    assert f"Continue the ensemble with: gpurl_train --resume {tmp_path / 'e'}" in capsys.readouterr().err
    done = {p: p.stat().st_mtime_ns for p in (tmp_path / "e" / "seed0").rglob("*") if p.is_file()}
    assert (tmp_path / "e" / "seed1" / "folds" / "fold0.json").is_file() and not (tmp_path / "e" / "results.json").exists()
    monkeypatch.setattr(runner, "save_fold_result", real)
    ens = cli.main(**args)                                           # the same command again
    assert ens.complete and list(ens.table().index) == ["seed0", "seed1", "ensemble"]
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "e" / "seed0").rglob("*") if p.is_file()} == done   # not retrained
    assert [(m["fold"], m["epoch"]) for m in map(json.loads, (tmp_path / "e" / "seed1" / "metrics.jsonl").read_text().splitlines())] \
        == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert cli.main(resume=tmp_path / "e", progress=False, summary=False).table().equals(load_ensemble(tmp_path / "e").table())
