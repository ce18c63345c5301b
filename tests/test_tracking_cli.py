"""`gpurl_train --log tensorboard | mlflow` end to end on the CPU: each epoch's metrics.jsonl row, the settings and the
report's plots read back with each tracker's own reader; a report that fails closes the tracked run as stopped; bad
--log / --log_dir input is one line, exit 2, nothing written."""
import json, os, subprocess
from pathlib import Path

import pytest

from _cli import TINY, console, script_env

SHAPE = ["--algo", "ppo", "--folds", "2", "--train_bars", "150", "--val_bars", "50", "--test_bars", "50", "--epochs", "3",
         "--device", "cpu", "--quiet"]


def _train(args, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([console("gpurl_train"), *map(str, args)], cwd=cwd, env=script_env(), capture_output=True,
                          text=True, timeout=timeout)


def _rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture
def tiny(tmp_path) -> Path:
    p = tmp_path / "ppo.json"
    p.write_text(json.dumps(TINY["ppo"]))
    return p


def test_tensorboard(tmp_path, tiny):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    r = _train([*SHAPE, "--config", tiny, "--log", "tensorboard", "--out", tmp_path / "run"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = _rows(tmp_path / "run")
    ea = EventAccumulator(str(tmp_path / "run" / "tensorboard"), size_guidance={"images": 0, "scalars": 0}); ea.Reload()
    for fold in (0, 1):
        mine = [m for m in rows if m["fold"] == fold]
        for key in ("val_sharpe", "train_loss", "train_grad_norm", "lr", "epoch_s"):
            got = [(s.step, s.value) for s in ea.Scalars(f"fold{fold}/{key}")]
            assert got == [(m["epoch"], pytest.approx(m[key], rel=1e-6)) for m in mine], (fold, key, got)
    assert "fold0/steps_per_s" in ea.Tags()["scalars"]
    assert {f"plots/{p.stem}" for p in (tmp_path / "run" / "plots").glob("*.png")} == set(ea.Tags()["images"])
    assert "settings/text_summary" in ea.Tags()["tensors"]


def test_mlflow(tmp_path, tiny):
    from mlflow.tracking import MlflowClient
    r = _train([*SHAPE, "--config", tiny, "--log", "mlflow", "--log_dir", tmp_path / "ml", "--out", tmp_path / "run"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    kept = json.loads((tmp_path / "run" / "tracking.json").read_text())
    assert kept["mlflow_tracking_uri"] == f"sqlite:///{(tmp_path / 'ml' / 'mlflow.db').resolve()}"
    c = MlflowClient(tracking_uri=kept["mlflow_tracking_uri"])
    run = c.get_run(kept["mlflow_run_id"])
    assert run.info.status == "FINISHED" and run.info.run_name == "run"
    p = run.data.params
    assert p["algo"] == "ppo" and p["precision"] == "fp32" and p["n_envs"] == "8" and p["driver.epochs"] == "3", p
    rows = [m for m in _rows(tmp_path / "run") if m["fold"] == 1]
    hist = c.get_metric_history(run.info.run_id, "fold1/val_sharpe")
    assert [(h.step, h.value) for h in hist] == [(m["epoch"], pytest.approx(m["val_sharpe"], rel=1e-6)) for m in rows]
    arts = {a.path for a in c.list_artifacts(run.info.run_id, "plots")}
    assert arts == {f"plots/{p.name}" for p in (tmp_path / "run" / "plots").glob("*.png")}, arts


def test_log_none_writes_no_tracker_files(tmp_path, tiny):
    r = _train([*SHAPE, "--config", tiny, "--out", tmp_path / "run"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert not {"tensorboard", "mlflow", "tracking.json"} & {p.name for p in (tmp_path / "run").iterdir()}
    assert json.loads((tmp_path / "run" / "config.json").read_text())["log"] == "none"


@pytest.mark.parametrize("args, msg", [
    (["--log", "wandb"], "--log 'wandb' is not a tracker: use one of none, tensorboard, mlflow"),
    (["--log_dir", "tb"], "--log_dir needs a tracker: add --log tensorboard or --log mlflow"),
    (["--log", "tensorboard", "--log_dir", "afile/tb"], "--log_dir afile/tb cannot be written"),
])
def test_bad_log_input(tmp_path, args, msg):
    (tmp_path / "afile").write_text("x")
    r = _train([*SHAPE, *args], tmp_path, timeout=120)
    err = r.stderr.strip()
    assert r.returncode == 2 and len(err.splitlines()) == 1 and err.startswith("gpurl_train: error: ") and msg in err, err
    assert sorted(os.listdir(tmp_path)) == ["afile"]                   # nothing written


def test_failed_report_marks_the_tracked_run_stopped(tmp_path, tiny, monkeypatch):
    "A report that fails after training closes the tracker as stopped (MLflow: KILLED), with every epoch's row sent, and raises."
    from mlflow.tracking import MlflowClient
    from gpurl.run.record import Run
    from gpurl.run.resolve import resolve
    from gpurl.run.runner import train
    def full_disk(self): raise OSError("No space left on device")
    monkeypatch.setattr(Run, "write_report", full_disk)
    rc, data = resolve(algo="ppo", folds=2, train_bars=150, val_bars=50, test_bars=50, epochs=3, device="cpu",
                       config=str(tiny), log="mlflow", log_dir=str(tmp_path / "ml"))
    with pytest.raises(OSError, match="No space left"): train(rc, data, out=tmp_path / "run", progress=False, summary=False)
    kept = json.loads((tmp_path / "run" / "tracking.json").read_text())
    c = MlflowClient(tracking_uri=kept["mlflow_tracking_uri"])
    assert c.get_run(kept["mlflow_run_id"]).info.status == "KILLED"
    rows = [m for m in _rows(tmp_path / "run") if m["fold"] == 1]
    assert [h.step for h in c.get_metric_history(kept["mlflow_run_id"], "fold1/val_sharpe")] == [m["epoch"] for m in rows] != []
