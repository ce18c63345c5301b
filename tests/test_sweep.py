"""gpurl_sweep as a user runs it (`python -m gpurl.apps.sweep`, on CPU, tiny markets): a sweep end to end (SQLite file,
best.json, report, the winner's run); a real SIGINT mid-sweep, then --resume keeps every finished trial and continues
to N; two worker processes on one SQLite study share N trials with no duplicate trial numbers; on a market without
signal the winner's deflated Sharpe falls as the trials grow; --markets scores each trial by the mean over synthetic
markets; bad input is one line, exit 2, nothing written."""
import json, signal, sqlite3, subprocess, sys, time
from pathlib import Path

import optuna
import pytest

from _cli import ROOT, script_env

SHAPE = ["--algo", "mlp", "--folds", "1", "--train_bars", "150", "--val_bars", "50", "--test_bars", "50", "--epochs", "2",
         "--device", "cpu", "--quiet"]
SLOW_TRIAL = {"steps_per_epoch": 60}           # a fraction of a second a trial: time to interrupt, room for two workers


def _cmd(*args) -> list[str]:
    return [sys.executable, "-m", "gpurl.apps.sweep", *map(str, args)]

def _run(args, cwd, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run(_cmd(*args), cwd=cwd, env=script_env(), capture_output=True, text=True, timeout=timeout)

def _counted(url: str, name: str) -> list:
    from gpurl.run.sweep import counted
    return [t for t in optuna.load_study(study_name=name, storage=url).trials if counted(t)]

def _finished_in(db: Path) -> int:
    "Finished or pruned trials in a study file, read with sqlite3 while another process writes it."
    if not db.is_file(): return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as c:
            return c.execute("select count(*) from trials where state in ('COMPLETE', 'PRUNED')").fetchone()[0]
    except sqlite3.OperationalError: return 0          # tables not created yet, or locked for a moment


def test_sweep_end_to_end(tmp_path):
    out = tmp_path / "sw"
    r = _run([*SHAPE, "--trials", "6", "--out", out], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "deflated Sharpe ratio" in r.stdout and str(out / "best.json") in r.stdout
    for f in ("study.db", "sweep.json", "best.json", "results.json", "report.md", "plots/history.png",
              "plots/importance.png", "winner/report.md", "winner/results.json"):
        assert (out / f).is_file(), f
    trials = _counted(f"sqlite:///{out / 'study.db'}", "sw")
    assert len(trials) == 6
    res = json.loads((out / "results.json").read_text())
    assert res["deflated"]["n_trials"] == 6 and 0 <= res["deflated"]["dsr"] <= 1
    best = max((t for t in trials if t.state == optuna.trial.TrialState.COMPLETE), key=lambda t: t.value)
    assert json.loads((out / "best.json").read_text()) == best.user_attrs["config"] == res["best_config"]
    from gpurl.run.resolve import resolve   # gpurl_train --config takes best.json
    rc, _ = resolve(algo="mlp", folds=1, train_bars=150, val_bars=50, test_bars=50, epochs=2, device="cpu",
                    config=str(out / "best.json"))
    assert rc.trainer == json.loads((out / "winner" / "config.json").read_text())["trainer"]
    report = (out / "report.md").read_text()
    assert "planted rule" in report and "| trial | state |" in report


def test_resume_after_interrupt(tmp_path):
    out, cfg = tmp_path / "sw", tmp_path / "slow.json"
    cfg.write_text(json.dumps(SLOW_TRIAL))
    p = subprocess.Popen(_cmd(*SHAPE, "--config", cfg, "--trials", "6", "--out", out), cwd=tmp_path,
                         env={**script_env(), "PYTHONFAULTHANDLER": "1"},     # SIGABRT prints every thread's stack
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))   # Ctrl-C even under a background job
    deadline = time.time() + 240
    while _finished_in(out / "study.db") < 2 and p.poll() is None and time.time() < deadline: time.sleep(0.1)
    assert p.poll() is None, "the sweep ended before it could be interrupted: " + p.stderr.read()
    p.send_signal(signal.SIGINT)
    try: _, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:                                # a hang: where each thread of the sweep waits
        p.send_signal(signal.SIGABRT)
        pytest.fail("the sweep did not exit within 120 s of Ctrl-C; its stderr and stacks:\n" + p.communicate(timeout=60)[1][-12000:])
    assert p.returncode == 130, err
    assert f"gpurl_sweep --resume {out}" in err
    url = f"sqlite:///{out / 'study.db'}"
    before = {t.number: (t.state, t.value, t.params) for t in _counted(url, "sw")}
    assert 2 <= len(before) < 6 and not (out / "best.json").exists()
    r = _run(["--resume", out, "--quiet"], tmp_path)
    assert r.returncode == 0, r.stderr
    after = _counted(url, "sw")
    assert len(after) == 6                                           # continued to N, not to N + the finished ones
    assert {t.number: (t.state, t.value, t.params) for t in after if t.number in before} == before   # kept, never re-run
    assert (out / "report.md").is_file()


def test_two_workers_share_one_study(tmp_path):
    cfg, db = tmp_path / "slow.json", tmp_path / "shared.db"
    cfg.write_text(json.dumps(SLOW_TRIAL))
    url, args = f"sqlite:///{db}", [*SHAPE, "--config", cfg, "--trials", "6", "--storage", f"sqlite:///{db}", "--study", "s"]
    workers = [subprocess.Popen(_cmd(*args, "--worker"), cwd=tmp_path, env=script_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for w in workers:
        _, err = w.communicate(timeout=300)
        assert w.returncode == 0, err
    trials = optuna.load_study(study_name="s", storage=url).trials
    numbers = [t.number for t in trials]
    assert len(numbers) == len(set(numbers))                         # no duplicate trial numbers
    counted = _counted(url, "s")
    assert len(counted) == 6
    ran = {t.user_attrs["worker"] for t in counted}
    assert len(ran) == 2, ran                                        # both workers ran trials
    r = _run([*args, "--out", tmp_path / "report"], tmp_path)        # the reporting process: N done, the winner only
    assert r.returncode == 0, r.stderr
    assert len(_counted(url, "s")) == 6 and (tmp_path / "report" / "report.md").is_file()
    assert not (tmp_path / "report" / "study.db").exists()           # the shared study lives in --storage


def test_dsr_falls_with_trials_without_signal(tmp_path):
    "On a market with no planted signal, the best of 20 is not called skill; the same returns as the best of 1 score higher."
    from gpurl.run.sweep import sweep, deflate_trials
    sw = sweep(algo="mlp", trials=20, config={"synthetic": {"ar1": 0.0}}, folds=1, train_bars=150, val_bars=50,
               test_bars=50, epochs=2, device="cpu", out=tmp_path / "noise", progress=False)
    d20 = sw.deflated
    ret, ppy = sw.winner.stitched()["returns"], sw.winner.config.annualisation()[0]
    d1 = deflate_trials(sw.study, ret, ppy, first=1)
    assert d20["n_trials"] == 20 and d1["n_trials"] == 1
    assert d1["sr_star"] == 0 < d20["sr_star"]
    assert d20["dsr"] < d1["dsr"] and d20["dsr"] < 0.95
    assert "not distinguishable" in json.loads((sw.path / "results.json").read_text())["verdict"]


def test_markets_end_to_end(tmp_path):
    "--markets 1,3: each trial's objective is the mean of its two markets' validation Sharpes, the winner runs on each market."
    out = tmp_path / "sw"
    r = _run([*SHAPE, "--trials", "4", "--markets", "1,3", "--out", out], tmp_path)
    assert r.returncode == 0, r.stderr
    trials = _counted(f"sqlite:///{out / 'study.db'}", "sw")
    done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(trials) == 4 and done
    for t in done:
        per = t.user_attrs["market_val_sharpe"]
        assert set(per) == {"1", "3"} and t.value == pytest.approx((per["1"] + per["3"]) / 2, abs=1e-12)
        assert {b.split(":")[0] for b in t.user_attrs["val_bars"]} == {"1", "3"}     # each market's validation bars
    res = json.loads((out / "results.json").read_text())
    assert set(res["markets"]) == {"1", "3"} and res["deflated"]["n_trials"] == 4
    assert res["test_sharpe"] == pytest.approx(sum(m["test_sharpe"] for m in res["markets"].values()) / 2)
    best = json.loads((out / "best.json").read_text())
    assert "synthetic" not in best                                    # the settings, not a market
    for seed in (1, 3):
        run = json.loads((out / "winner" / f"market-{seed}" / "config.json").read_text())
        assert run["synthetic"]["seed"] == seed and res["markets"][str(seed)]["run"].endswith(f"market-{seed}")
    report = (out / "report.md").read_text()
    assert "| market (seed) |" in report and "val_sharpe_seed3" in report
    assert json.loads((out / "sweep.json").read_text())["settings"]["markets"] == [1, 3]

def test_bad_markets_are_one_line_exit_2(tmp_path):
    "A market list with a non-integer or a repeat, or with a --data file: one line on stderr, exit 2, nothing written."
    from gpurl.data.bars import synthetic_market
    m = synthetic_market(300, seed=7, ar1=-0.2)
    m[["open", "high", "low", "close", "volume"]].to_csv(tmp_path / "bars.csv")
    cases = {("--markets", "1,x"): "integers >= 0 separated by commas", ("--markets", "1,3,1"): "seed(s) [1] listed twice",
             ("--markets", "1,3", "--data", "bars.csv"): "is one real series: drop --markets or --data"}
    for extra, msg in cases.items():
        r = _run([*SHAPE, *extra, "--out", tmp_path / "sw"], tmp_path)
        assert r.returncode == 2 and msg in r.stderr, r.stderr
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("gpurl_sweep: error: ") and "Traceback" not in r.stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == ["bars.csv"]       # nothing written


BAD_SPACES = {"unknown.json": ({"learning_rate": {"type": "float", "low": 1e-4, "high": 1e-2}}, "unknown parameter(s) ['learning_rate']"),
              "dist.json": ({"lr": {"type": "uniform", "low": 1e-4, "high": 1e-2}}, "\"type\" one of"),
              "empty.json": ({"lr": {"type": "float", "low": 1e-2, "high": 1e-4}}, "empty range"),
              "text.json": ("{lr: 1", "not valid JSON")}
BAD_STORAGE = {"nosuchdb://host/db": "--storage nosuchdb://host/db: cannot open it",
               "sqlite:////no/such/dir/s.db": "--storage sqlite:////no/such/dir/s.db: cannot open it"}

def test_bad_input_is_one_line_exit_2(tmp_path):
    "The command: a bad space file and a storage URL that cannot be opened: one line on stderr, exit 2, nothing written."
    (tmp_path / "bad.json").write_text(json.dumps(BAD_SPACES["unknown.json"][0]))
    for extra, msg in ((["--space", tmp_path / "bad.json"], BAD_SPACES["unknown.json"][1]),
                       (["--storage", "nosuchdb://host/db", "--study", "s"], BAD_STORAGE["nosuchdb://host/db"])):
        r = _run([*SHAPE, *extra, "--out", tmp_path / "sw"], tmp_path)
        assert r.returncode == 2 and msg in r.stderr, r.stderr
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("gpurl_sweep: error: ") and "Traceback" not in r.stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json"]       # nothing written

def test_every_bad_input_names_it(tmp_path):
    "Each bad space file and storage URL (in process, as the command checks them): a one-line UsageError, nothing written."
    from gpurl.run.resolve import UsageError
    from gpurl.run.sweep import sweep
    kw = dict(algo="mlp", folds=1, train_bars=150, val_bars=50, test_bars=50, epochs=2, device="cpu", out=tmp_path / "sw")
    cases = [(dict(space=str(tmp_path / name)), msg) for name, (_, msg) in BAD_SPACES.items()]
    cases += [(dict(storage=url, study="s"), msg) for url, msg in BAD_STORAGE.items()]
    from gpurl.run.sweep import open_storage, open_study
    other = f"sqlite:///{tmp_path / 'other.db'}"                   # a study started with other settings
    open_study(open_storage(other), "s", {"flags": {"algo": "ppo"}, "config": {}, "space": {}, "trials": 3, "epochs": 2}, other)
    cases += [(dict(storage=other, study="s"), "--study s in " + other + " was started with other settings")]
    for name, (space, _) in BAD_SPACES.items(): (tmp_path / name).write_text(space if isinstance(space, str) else json.dumps(space))
    for extra, msg in cases:
        with pytest.raises(UsageError) as e: sweep(**kw, **extra)
        assert msg in str(e.value) and "\n" not in str(e.value), str(e.value)
        assert not (tmp_path / "sw").exists()


def test_console_script_declared():
    ini = (ROOT / "settings.ini").read_text()
    assert "gpurl_sweep=gpurl.apps.sweep:gpurl_sweep" in ini
