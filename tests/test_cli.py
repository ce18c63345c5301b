"""gpurl_train end to end, as a user runs it: through the installed console script and through `python -m gpurl.apps.cli`,
on CPU with tiny sizes, for both algorithms; a Yahoo-format CSV round trip; every bad input (one line on stderr, exit
code 2, no traceback, nothing written); and a real SIGINT in the middle of a run: every finished checkpoint and
metrics line intact, then `--resume` completes the run with exactly the results of an uninterrupted one."""
import json, signal, subprocess, sys, time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from gpurl.run.runner import TIMING_COLUMNS
from safetensors import safe_open
from safetensors.torch import load_file

from _cli import TINY, console, script_env


SHAPE = ["--folds", "2", "--train_bars", "150", "--val_bars", "50", "--test_bars", "50", "--device", "cpu"]


RUNNERS = {"script": lambda: [console("gpurl_train")], "module": lambda: [sys.executable, "-m", "gpurl.apps.cli"]}

def _run(args, cwd, runner="script", timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run(RUNNERS[runner]() + [str(a) for a in args], cwd=cwd, env=script_env(), capture_output=True,
                          text=True, timeout=timeout)

def _config(tmp_path: Path, algo: str, **extra) -> Path:
    p = tmp_path / f"{algo}-tiny.json"
    p.write_text(json.dumps({**TINY[algo], **extra}))
    return p

def _yahoo_csv(path: Path, n: int, drop=()) -> pd.DataFrame:
    "A synthetic market written the way Yahoo Finance exports daily bars."
    from gpurl.data.bars import synthetic_market
    m = synthetic_market(n, seed=7, ar1=-0.2)
    df = pd.DataFrame({"Date": m.index.strftime("%Y-%m-%d"), "Open": m.open.round(4), "High": m.high.round(4),
                       "Low": m.low.round(4), "Close": m.close.round(4),
                       "Adj Close": (m.close * np.exp(-2e-4 * np.arange(n)[::-1])).round(4),
                       "Volume": m.volume.round().astype("int64")})
    df.drop(columns=list(drop)).to_csv(path, index=False)
    return df

def _tree(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))

def _metric_rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("runner", ["script", "module"])
def test_help(runner, tmp_path):
    r = _run(["--help"], tmp_path, runner)
    assert r.returncode == 0, r.stderr
    for flag in ("--algo", "--data", "--config", "--train_bars", "--gpu_ids", "--resume", "--nproc_per_node", "--rdzv_endpoint"):
        assert flag in r.stdout, flag


@pytest.mark.parametrize("algo,runner", [("dqn", "script"), ("ppo", "module"), ("dqn", "module"), ("ppo", "script")])
def test_end_to_end(algo, runner, tmp_path):
    cfg = _config(tmp_path, algo)
    default_out = (algo, runner) == ("ppo", "script")           # one case takes the default runs/<algo>-<timestamp>
    r = _run(["--algo", algo, "--config", cfg, *SHAPE, "--epochs", 2, "--quiet"] + ([] if default_out else ["--out", "runs/t"]),
             tmp_path, runner)
    assert r.returncode == 0, r.stderr[-4000:]
    assert "Traceback" not in r.stderr
    runs = list((tmp_path / "runs").iterdir())
    assert len(runs) == 1 and (runs[0].name.startswith(f"{algo}-") if default_out else runs[0].name == "t"), runs
    run = runs[0]
    assert sorted(p.name for p in run.iterdir()) == ["checkpoints", "config.json", "folds", "hyperparams.json",
                                                     "metrics.jsonl", "plots", "report.md", "results.json"]
    # config.json: the full resolved config
    c = json.loads((run / "config.json").read_text())
    assert c["algo"] == algo and c["folds"] == 2 and c["device"] == "cpu"
    for k, v in TINY[algo].items():                              # the --config values, nested ones key by key
        assert ({kk: c["trainer"][k][kk] for kk in v} if isinstance(v, dict) else c["trainer"][k]) == v, k
    assert c["driver"]["epochs"] == 2 and c["trainer"]["env"]["cost_bps"] == 1.0
    # metrics.jsonl: one line per epoch per fold
    rows = _metric_rows(run)
    assert [(m["fold"], m["epoch"]) for m in rows] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(isinstance(m["val_sharpe"], float) and "lr" in m for m in rows)
    # checkpoints: best per fold and the last state, safetensors loadable alone
    for k in range(2):
        for kind in ("best", "last_state"):
            p = run / "checkpoints" / f"fold{k}_{kind}.safetensors"
            assert load_file(p), p
            with safe_open(p, "pt") as f: assert f.metadata()["kind"] == kind and f.metadata()["fold"] == str(k)
    # results.json: per fold and overall, val/test, vs buy-and-hold
    res = json.loads((run / "results.json").read_text())
    assert res["complete"] and len(res["table"]) == 2
    for row in res["table"]:
        for k in ("val_sharpe", "test_sharpe", "test_sortino", "test_max_drawdown", "test_turnover", "val_deflated_sharpe",
                  "test_bh_sharpe", "excess_sharpe", "excess_low", "excess_high", "excess_psr"):
            assert isinstance(row[k], float), (k, row)
    for k in ("sharpe", "sortino", "max_drawdown", "turnover"): assert isinstance(res["test"][k], float), k
    assert isinstance(res["test_buy_and_hold"]["sharpe"], float)
    assert {"mean_val_sharpe", "mean_test_sharpe", "mean_val_deflated_sharpe", "n_folds_sharpe_above_bh"} <= set(res["overall"])
    assert res["test_excess"]["verdict"] in ("beats", "indistinguishable", "trails") and res["trials"]["n_trials"] == 1
    assert res["bar_usage"][-1]["stop"] == c["data_info"]["n_bars"] and res["periods_per_year"] == 252.0
    # report.md and its plots
    report = (run / "report.md").read_text()
    assert "best of 1 trial(s)" in report and "## Tear sheet" in report and "## Bars used" in report
    for png in ("learning_curves", "equity", "drawdown", "tear_sheet"):
        assert f"plots/{png}.png" in report
        assert (run / "plots" / f"{png}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the one-screen summary
    assert "stitched test folds" in r.stdout and f"report: {Path('runs') / run.name / 'report.md'}" in r.stdout
    assert len(r.stdout.splitlines()) <= 30
    if runner == "module":       # read back in a fresh process by load_run alone: the summary and the plots are there
        code = (f"import matplotlib; matplotlib.use('Agg'); from gpurl.run.record import load_run; r = load_run({str(run)!r}); "
                "print(r.summary()); r.plot_equity()")
        back = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=script_env(), capture_output=True, text=True, timeout=300)
        assert back.returncode == 0, back.stderr[-2000:]
        assert "stitched test folds" in back.stdout


def test_tft_end_to_end(tmp_path):
    "--algo tft: its folds carry the bars' known-future calendar (TftTrainer.bar_splits); the run, report and checkpoints as every bar model's."
    r = _run(["--algo", "tft", "--folds", 1, "--train_bars", 400, "--val_bars", 150, "--test_bars", 150, "--epochs", 2,
              "--device", "cpu", "--quiet", "--out", "runs/t"], tmp_path, "module")
    assert r.returncode == 0, r.stderr[-4000:]
    run = tmp_path / "runs" / "t"
    res = json.loads((run / "results.json").read_text())
    assert res["complete"] and isinstance(res["test"]["sharpe"], float) and isinstance(res["test_buy_and_hold"]["sharpe"], float)
    assert json.loads((run / "config.json").read_text())["trainer"]["forecast_horizon"] == 4     # the quick-start horizon
    with safe_open(run / "checkpoints" / "fold0_best.safetensors", "pt") as f: assert f.metadata()["algo"] == "tft"
    assert "TFT" in r.stdout and (run / "plots" / "equity.png").exists()


def test_a_named_date_column_and_the_adjustment_in_the_report(tmp_path):
    raw = _yahoo_csv(tmp_path / "raw.csv", 300)
    raw.rename(columns={"Date": "Session"}).to_csv(tmp_path / "bars.csv", index=False)
    args = ["--algo", "ppo", "--data", "bars.csv", "--config", _config(tmp_path, "ppo"), "--folds", 1, "--train_bars", 150,
            "--val_bars", 50, "--test_bars", 50, "--epochs", 2, "--device", "cpu", "--quiet"]
    r = _run(args + ["--out", "runs/nodate"], tmp_path)
    assert r.returncode == 2 and "--date_col" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "runs" / "nodate").exists()
    r = _run(args + ["--date_col", "Session", "--out", "runs/dated"], tmp_path)
    assert r.returncode == 0, r.stderr[-4000:]
    run_dir = tmp_path / "runs" / "dated"
    assert json.loads((run_dir / "config.json").read_text())["date_col"] == "Session"
    assert "back-adjusted by its adj close" in (run_dir / "report.md").read_text()
    r = _run(["--resume", run_dir], tmp_path)                     # the run re-reads its file with the same column
    assert r.returncode == 0 and "already complete" in r.stdout, r.stderr

def test_yahoo_csv_round_trip(tmp_path):
    raw = _yahoo_csv(tmp_path / "SPY.csv", 300)
    cfg = _config(tmp_path, "ppo")
    r = _run(["--algo", "ppo", "--data", "SPY.csv", "--config", cfg, "--folds", 1, "--train_bars", 150, "--val_bars", 50,
              "--test_bars", 50, "--epochs", 2, "--device", "cpu", "--quiet", "--out", "runs/spy"], tmp_path)
    assert r.returncode == 0, r.stderr[-4000:]
    from gpurl.run.record import load_run
    run = load_run(tmp_path / "runs" / "spy")
    assert run.config.data == str((tmp_path / "SPY.csv").resolve()) and run.config.data_info["n_bars"] == 300
    days = (pd.Timestamp(raw.Date.iloc[249]) - pd.Timestamp(raw.Date.iloc[0])).days     # the 250 bars before the first test bar (250)
    assert run.config.data_info["adjusted"] and abs(run.config.data_info["periods_per_year"] - 249 / (days / 365.25)) < 1e-9
    assert "counted from the timestamps of the 250 bars before the first test bar" in r.stdout   # no full calendar year: per elapsed year
    # the folds end at the last bar; the 50 bars before the earliest fold are reported, with the reason
    assert run.config.fold_list()[0].test == (250, 300)
    assert f"bars 0..49 ({raw.Date.iloc[0]}..{raw.Date.iloc[49]}, 50 bars): NOT USED, before the earliest fold" in r.stdout, r.stdout
    bars = run.bars()                                          # the file re-read and checked against the fingerprint
    np.testing.assert_allclose(bars.close.values, raw["Adj Close"].values, rtol=1e-12)
    np.testing.assert_allclose((bars.open / bars.close).values, (raw.Open / raw.Close).values, rtol=1e-12)
    assert [str(d.date()) for d in bars.index[[0, -1]]] == [raw.Date.iloc[0], raw.Date.iloc[-1]]
    t = run.table()
    assert t.loc[0, "test_start"] > raw.Date.iloc[200] and t.loc[0, "test_end"] <= raw.Date.iloc[-1]
    # the best checkpoint and config.json alone reproduce the reported test Sharpe
    assert abs(run.backtest(0).metrics["sharpe"] - run.folds[0].test["sharpe"]) < 1e-4
    lines = (tmp_path / "SPY.csv").read_text().splitlines()
    *rest, volume = lines[-1].split(",")
    lines[-1] = ",".join(rest + [str(int(volume) + 1)])                # the file changed: one more share on the last bar
    (tmp_path / "SPY.csv").write_text("\n".join(lines) + "\n")
    r = _run(["--resume", "runs/spy"], tmp_path)
    assert r.returncode == 2 and "no longer holds the bars this run trained on" in r.stderr, r.stderr


def _bad_inputs(tmp_path: Path) -> dict:
    _yahoo_csv(tmp_path / "novol.csv", 300, drop=["Volume"])
    _yahoo_csv(tmp_path / "short.csv", 300)
    (tmp_path / "typo.json").write_text('{"learning_rat": 0.001}')   # the message names the key (checked below)
    (tmp_path / "type.json").write_text('{"gamma": "high"}')
    (tmp_path / "broken.json").write_text('{"gamma": 0.9,}')
    (tmp_path / "driver.json").write_text('{"driver": {"patiense": 3}}')
    (tmp_path / "horizon.json").write_text('{"horizon": 200}')
    (tmp_path / "taken").mkdir(); (tmp_path / "taken" / "keep.txt").write_text("mine")
    (tmp_path / "notarun").mkdir()
    return {
        "missing data file": (["--data", "prices.csv"], "--data prices.csv: no such file"),
        "csv without volume": (["--data", "novol.csv"], "missing column(s) ['volume']"),
        "too few bars": (["--data", "short.csv"], "300 bars cannot hold one walk-forward fold"),
        "unknown algo": (["--algo", "a2c"], "--algo 'a2c' is not an algorithm: use one of cfc, cfclob, deeplob, dqn, ltc, ltclob, mamba2, mlp, mlplob, ppo, tft, tlob"),
        "unknown config key": (["--config", "typo.json"], "DqnConfig"),
        "wrong config type": (["--algo", "ppo", "--config", "type.json"], "gamma must be float"),
        "broken json": (["--config", "broken.json"], "not valid JSON"),
        "unknown driver key": (["--config", "driver.json"], "unknown DriverConfig key(s) ['patiense']"),
        "missing config": (["--config", "nope.json"], "--config nope.json: no such file"),
        "bad fold count": (["--folds", "0"], "--folds must be >= 1"),
        "window too long": (["--val_bars", "2"], "--val_bars 2 is too short"),
        "out exists": (["--out", "taken"], "--out taken already exists"),
        "resume not a run": (["--resume", "notarun"], "not a gpurl_train run directory"),
        "resume with flags": (["--resume", "notarun", "--epochs", "5"], "drop --epochs"),
        "bad gpu ids": (["--gpu_ids", "x"], "--gpu_ids must list CUDA device numbers"),
        "bad device": (["--device", "tpu"], "--device 'tpu' is not a device"),
        "horizon beyond the splits": (["--algo", "mlp", "--config", "horizon.json", "--folds", "1", "--train_bars", "150",
                                       "--val_bars", "50", "--test_bars", "50"], "horizon 200 leaves no labelled row"),
    }

BAD = [
    "missing data file", "csv without volume", "too few bars", "unknown algo", "unknown config key", "wrong config type",
    "broken json", "unknown driver key", "missing config", "bad fold count", "window too long", "out exists",
    "resume not a run", "resume with flags", "bad gpu ids", "bad device", "horizon beyond the splits"]

@pytest.mark.parametrize("case", BAD)
def test_bad_input(case, tmp_path):
    args, msg = _bad_inputs(tmp_path)[case]
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    r = _run(args, tmp_path, "module" if BAD.index(case) % 2 else "script", timeout=120)
    assert r.returncode == 2, (r.returncode, r.stderr[-3000:])
    err = r.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("gpurl_train: error: ") and msg in err, err
    if case == "unknown config key": assert "unknown" in err and "['learning_rat']" in err, err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before       # nothing written
    assert not (tmp_path / "runs").exists() and sorted(p.name for p in (tmp_path / "taken").iterdir()) == ["keep.txt"]


def test_no_cuda_is_a_usage_error(tmp_path):
    import torch
    if torch.cuda.is_available(): pytest.skip("this machine has CUDA")
    r = _run(["--device", "cuda"], tmp_path)
    assert r.returncode == 2 and "CUDA is not available on this machine" in r.stderr and "use --device cpu" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "runs").exists()


def _strip(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in m.items() if k not in TIMING_COLUMNS} for m in rows]

def _fold_results(run: Path) -> list[dict]:
    return [{k: v for k, v in f.items() if k not in ("seconds", "checkpoints")}
            for f in json.loads((run / "results.json").read_text())["folds"]]

@pytest.mark.parametrize("algo,sig", [("ppo", signal.SIGINT), ("dqn", signal.SIGINT), ("ppo", signal.SIGKILL)],
                         ids=["ppo-sigint", "dqn-sigint", "ppo-sigkill"])
def test_interrupt_mid_run_then_resume(algo, sig, tmp_path):
    "SIGINT (Ctrl-C): a clean stop with the resume hint; SIGKILL: a crash with no chance to clean up. Both resume exactly."
    epochs = 12
    slower = {"steps_per_epoch": 32} if algo == "dqn" else {}      # epochs long enough for the signal to land mid-fold
    cfg = _config(tmp_path, algo, driver={"patience": 0, "plateau_patience": 0, "periodic_every": 5}, **slower)
    args = ["--algo", algo, "--config", cfg, *SHAPE, "--epochs", epochs, "--quiet"]
    run = tmp_path / "runs" / "int"
    child = subprocess.Popen(RUNNERS["script"]() + [str(a) for a in args] + ["--out", "runs/int"], cwd=tmp_path, env=script_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))   # Ctrl-C even under a background job
    try:
        deadline = time.time() + 300
        while True:                                               # fold 0 finished and fold 1 two epochs in
            lines = (run / "metrics.jsonl").read_text().splitlines() if (run / "metrics.jsonl").exists() else []
            if sum('"fold": 1' in line for line in lines) >= 2: break
            assert child.poll() is None, f"gpurl_train ended before the interrupt:\n{child.communicate()[1][-3000:]}"
            assert time.time() < deadline, "fold 1 never started"
            time.sleep(0.01)
        child.send_signal(sig)
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None: child.kill(); child.wait()
    if sig == signal.SIGINT:
        assert child.returncode == 130, (child.returncode, err[-3000:])
        assert "Traceback" not in err and f"Continue with: gpurl_train --resume {Path('runs') / 'int'}" in err, err[-2000:]
        assert not [p for p in run.rglob("*") if p.name.endswith(".tmp")], _tree(run)   # every pending write landed
    else: assert child.returncode == -signal.SIGKILL

    # everything finished is intact: metrics lines, checkpoints (safetensors alone), fold 0's results
    rows = _metric_rows(run)                                      # every line parses
    assert [(m["fold"], m["epoch"]) for m in rows if m["fold"] == 0] == [(0, e) for e in range(epochs)]
    interrupted = [m["epoch"] for m in rows if m["fold"] == 1]
    assert interrupted == list(range(len(interrupted))) and 2 <= len(interrupted) < epochs, interrupted
    for p in (run / "checkpoints").glob("*.safetensors"): assert load_file(p), p
    names = {p.name for p in (run / "checkpoints").iterdir()}
    assert {"fold0_best.safetensors", "fold0_last_state.safetensors", "fold0_periodic.safetensors",
            "fold1_best.safetensors", "fold1_last_state.safetensors"} <= names, names
    assert (run / "folds" / "fold0.json").exists() and not (run / "folds" / "fold1.json").exists()
    assert not (run / "results.json").exists()

    r = _run(["--resume", "runs/int", "--quiet"], tmp_path, "module")
    assert r.returncode == 0, r.stderr[-4000:]
    assert not [p for p in run.rglob("*") if p.name.endswith(".tmp")], _tree(run)       # a crash's orphans removed
    rows = _metric_rows(run)
    assert [(m["fold"], m["epoch"]) for m in rows] == [(k, e) for k in range(2) for e in range(epochs)]

    # the same run uninterrupted ends with the same metrics and results
    r = _run(args + ["--out", "runs/full"], tmp_path)
    assert r.returncode == 0, r.stderr[-4000:]
    full = tmp_path / "runs" / "full"
    assert _strip(_metric_rows(run)) == _strip(_metric_rows(full))
    assert _fold_results(run) == _fold_results(full)
    r = _run(["--resume", "runs/full"], tmp_path)              # resuming a finished run only reports it
    assert r.returncode == 0 and "already complete" in r.stdout, r.stderr[-2000:]
