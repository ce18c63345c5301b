"""gpurl_train on order-book events, as a user runs it: MLPLOB (and the liquid networks' twins, CfC and LTC) on the
simulated book and MLPLOB on a file in FI-2010's layout,
through the console script on CPU with tiny sizes. The run directory matches a bar run's (config, metrics, checkpoints,
folds, results, report) but is scored, not priced: macro-F1 against the majority class with its interval, no equity
plots. A crash mid-run resumes to exactly the uninterrupted results; data of the wrong kind is a one-line error."""
import json, signal, subprocess, time
from pathlib import Path

import numpy as np
import pytest

from _cli import console, script_env

SHAPE = ["--folds", "2", "--train_bars", "1200", "--val_bars", "300", "--test_bars", "300", "--device", "cpu"]
TINY = {"batch_size": 64, "hidden": 16, "horizon": 5}


def _run(args, cwd, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([console("gpurl_train"), *map(str, args)], cwd=cwd, env=script_env(), capture_output=True,
                          text=True, timeout=timeout)

def _config(tmp_path: Path, **extra) -> Path:
    p = tmp_path / "mlplob-tiny.json"
    p.write_text(json.dumps({**TINY, **extra}))
    return p

def _fi2010_file(path: Path, n: int = 2400, seed: int = 3) -> None:
    "A simulated book written as an FI-2010 text file: 149 rows (144 z-scored features, 5 label rows 1/2/3), a column per event."
    from gpurl.data.lob import synthetic_lob
    book = synthetic_lob(n, seed=seed)
    x = book.features.double().numpy()
    z = (x - x.mean(0)) / (x.std(0) + 1e-9)
    feats = np.concatenate([z, z ** 2, np.diff(z, axis=0, prepend=z[:1]), z[:, :24] ** 3], 1)   # 40 + 40 + 40 + 24 = 144
    labels = np.where(book.labels.numpy() < 0, 1, book.labels.numpy()) + 1                        # masked tail: stationary
    np.savetxt(path, np.concatenate([feats, labels], 1).T, fmt="%.6g")

def _results(run: Path) -> list[dict]:
    return [{k: v for k, v in f.items() if k not in ("seconds", "checkpoints")}
            for f in json.loads((run / "results.json").read_text())["folds"]]


def test_mlplob_on_the_simulated_book(tmp_path):
    r = _run(["--algo", "mlplob", "--config", _config(tmp_path), *SHAPE, "--epochs", "2", "--out", "book"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    run = tmp_path / "book"
    assert "scored, not priced" in r.stdout and "the majority class out of sample" in r.stdout, r.stdout
    cfg = json.loads((run / "config.json").read_text())
    assert (cfg["data"], cfg["trainer"]["priced"], cfg["driver"]["metric"]) == ("synthetic_lob", False, "f1")
    res = json.loads((run / "results.json").read_text())
    assert res["priced"] is False and "test_excess" not in res and "trials" not in res
    c = res["classification"]
    assert c["low"] <= c["margin"] <= c["high"] and c["verdict"] in ("beats", "trails", "indistinguishable"), c
    assert abs(c["margin"] - (c["f1"] - c["baseline_f1"])) < 1e-12 and len(c["confusion"]) == 3
    for fold in res["folds"]:                                     # scored on the test events: F1, majority F1, no Sharpe
        assert {"f1", "majority_f1", "accuracy"} <= set(fold["test"]) and "sharpe" not in fold["test"], fold["test"]
        assert fold["test_buy_and_hold"] == {} and fold["metric"] == "f1"
    from safetensors.torch import load_file
    t = load_file(run / "folds" / "fold0_test.safetensors")
    assert set(t) == {"bar_index", "scored_targets", "scored_predictions", "scored_baseline"}, set(t)
    assert len(t["bar_index"]) == len(t["scored_targets"]) > 250
    assert sorted(p.name for p in (run / "plots").iterdir()) == ["confusion.png", "learning_curves.png"]
    report = (run / "report.md").read_text()
    assert "No backtest" in report and "majority class" in report and "equity" not in report, report[:2000]
    from gpurl.run.record import load_run
    lr = load_run(run)
    assert lr.complete and list(lr.table().verdict) == [f["verdict"] for f in res["table"]]
    with pytest.raises(ValueError, match="scored, not priced"): lr.backtest(0)
    again = _run(["--resume", "book"], tmp_path)                  # a finished run says so
    assert again.returncode == 0 and "already complete" in again.stdout, again.stderr[-2000:]


def test_mlplob_on_an_fi2010_file_and_resume_after_a_crash(tmp_path):
    _fi2010_file(tmp_path / "Train_Dst_NoAuction_ZScore_CF_1.txt")
    args = ["--algo", "mlplob", "--data", "Train_Dst_NoAuction_ZScore_CF_1.txt", "--config",
            _config(tmp_path, steps_per_epoch=40), *SHAPE, "--epochs", "6", "--quiet"]
    whole = _run([*args, "--out", "whole"], tmp_path)
    assert whole.returncode == 0, whole.stderr[-3000:]
    cfg = json.loads((tmp_path / "whole" / "config.json").read_text())
    assert cfg["data_info"]["n_bars"] == 2400 and cfg["data"].endswith("CF_1.txt") and Path(cfg["data"]).is_absolute()
    assert "FI-2010 layout" in whole.stdout and "2,400 events" in whole.stdout, whole.stdout
    child = subprocess.Popen([console("gpurl_train"), *map(str, args), "--out", "crash"], cwd=tmp_path, env=script_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 300
        while not (tmp_path / "crash" / "folds" / "fold0.json").exists():     # fold 0 done: kill it in fold 1
            assert child.poll() is None, child.communicate()[1][-3000:]
            assert time.time() < deadline, "fold 0 never finished"
            time.sleep(0.01)
        child.send_signal(signal.SIGKILL); child.wait(timeout=60)
    finally:
        if child.poll() is None: child.kill(); child.wait()
    assert not (tmp_path / "crash" / "results.json").exists()
    r = _run(["--resume", "crash", "--quiet"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert _results(tmp_path / "crash") == _results(tmp_path / "whole")
    (tmp_path / "Train_Dst_NoAuction_ZScore_CF_1.txt").write_text("1 2\n3 4\n")    # the file changed under the run
    r = _run(["--resume", "whole"], tmp_path)
    assert r.returncode == 2 and "FI-2010 files have 149 rows" in r.stderr, r.stderr



@pytest.mark.parametrize("algo,sizes", [("cfclob", {"units": 16, "backbone_units": 32}), ("ltclob", {"units": 8})])
def test_liquid_twins_on_the_simulated_book(algo, sizes, tmp_path):
    p = tmp_path / f"{algo}-tiny.json"
    p.write_text(json.dumps({"batch_size": 64, "horizon": 5, "steps_per_epoch": 10, "env": {"window": 8}, **sizes}))
    r = _run(["--algo", algo, "--config", p, *SHAPE, "--epochs", "2", "--out", "book"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    run = tmp_path / "book"
    assert "scored, not priced" in r.stdout and "the majority class out of sample" in r.stdout, r.stdout
    cfg = json.loads((run / "config.json").read_text())
    assert (cfg["algo"], cfg["data"], cfg["trainer"]["priced"], cfg["driver"]["metric"]) == (algo, "synthetic_lob", False, "f1")
    assert cfg["trainer"]["bin"] is True and cfg["trainer"]["env"]["window"] == 8 and cfg["trainer"]["horizon"] == 5
    res = json.loads((run / "results.json").read_text())
    c = res["classification"]
    assert len(res["folds"]) == 2 and c["verdict"] in ("beats", "trails", "indistinguishable"), c
    assert sorted(q.name for q in (run / "plots").iterdir()) == ["confusion.png", "learning_curves.png"]
    assert "majority class" in (run / "report.md").read_text()
    from gpurl.infer.policy import load_policy
    from gpurl.run.record import load_run
    assert load_run(run).complete
    best = sorted((run / "checkpoints").glob("*best*.safetensors"))
    assert best and type(load_policy(best[-1]).model.model.net.norm).__name__ == "BiN", best

@pytest.mark.parametrize("args,msg", [
    (["--algo", "mlplob", "--data", "synthetic"], "--algo mlplob trains on order-book snapshots, and --data synthetic is OHLCV bars: use --data synthetic_lob or an FI-2010 text file, or a bar model (cfc, dqn, ltc, mamba2, mlp, ppo, tft)"),
    (["--algo", "mlplob", "--data", "prices.csv"], "use --data synthetic_lob or an FI-2010 text file"),
    (["--algo", "dqn", "--data", "synthetic_lob"], "--algo dqn trains on OHLCV bars, and synthetic_lob is an order book: use --data synthetic or a CSV/parquet of bars, or an order-book model (cfclob, deeplob, ltclob, mlplob, tlob)"),
    (["--algo", "cfc", "--data", "synthetic_lob"], "--algo cfc trains on OHLCV bars, and synthetic_lob is an order book: use --algo cfclob, its order-book twin, or --data synthetic or a CSV/parquet of bars"),
    (["--algo", "mlp", "--data", "synthetic_lob"], "use --algo mlplob, its order-book twin"),
    (["--algo", "mlplob", "--data", "book.txt"], "FI-2010 files have 149 rows"),
    (["--algo", "mlplob", "--data", "nosuch.txt"], "no such file; pass an FI-2010 text file"),
    (["--algo", "mlplob", "--date_col", "time"], "--date_col names a column of a bars file: drop it with --data synthetic_lob"),
    (["--algo", "mlplob", "--config", "synth.json"], "unknown 'synthetic' key(s) ['ar1']; valid keys: ['levels', 'n_events', 'seed']"),
    (["--algo", "mlplob", "--train_bars", "100", "--val_bars", "50", "--test_bars", "50", "--folds", "1",
      "--config", "horizon.json"], "horizon=7 is not among the split's label horizons"),
], ids=["bars-for-lob", "csv-for-lob", "book-for-dqn", "book-for-cfc", "book-for-mlp", "not-fi2010", "missing-file", "date-col", "synthetic-key", "horizon"])
def test_bad_order_book_input(args, msg, tmp_path):
    (tmp_path / "book.txt").write_text("1 2 3\n4 5 6\n")
    (tmp_path / "synth.json").write_text('{"synthetic": {"ar1": 0.1}}')
    (tmp_path / "horizon.json").write_text('{"horizon": 7}')
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    r = _run(args, tmp_path, timeout=120)
    err = r.stderr.strip()
    assert r.returncode == 2 and "Traceback" not in err and len(err.splitlines()) == 1, (r.returncode, err[-2000:])
    assert err.startswith("gpurl_train: error: ") and msg in err, err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before and not (tmp_path / "runs").exists()
