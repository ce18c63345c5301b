"""`gpurl_export RUN_DIR` as a user runs it: a trained run's best checkpoint to ONNX and to a torch.export program, read
back with onnxruntime / torch.export.load and compared with the torch policy on held-out observations (1e-5, fp32);
bad input is one line on stderr, exit 2, nothing written."""
import json, subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from _cli import TINY, console, script_env

pytestmark = pytest.mark.xdist_group("export_cli")   # one worker builds the module fixture its tests share

SHAPE = ["--folds", "2", "--train_bars", "150", "--val_bars", "50", "--test_bars", "50", "--epochs", "2", "--device", "cpu",
         "--quiet"]


def _run(cmd: str, args, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([console(cmd), *map(str, args)], cwd=cwd, env=script_env(), capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    "A tiny trained run per model kind: DQN and PPO policies, the bar MLP predictor."
    d = tmp_path_factory.mktemp("runs")
    out = {}
    for algo in ("dqn", "ppo", "mlp"):
        cfg = d / f"{algo}.json"; cfg.write_text(json.dumps(TINY.get(algo, {})))
        r = _run("gpurl_train", ["--algo", algo, *SHAPE, "--config", cfg, "--out", d / algo], d)
        assert r.returncode == 0, r.stderr[-3000:]
        out[algo] = d / algo
    return out


def _held_out(run_dir: Path, fold: int, n_obs: int) -> torch.Tensor:
    "Observations of the fold's test bars (the exporter traced on validation bars), held positions cycling through the env's."
    from gpurl import load_policy, load_run
    env = load_policy(run_dir / "checkpoints" / f"fold{fold}_best.safetensors").env_config
    windows = load_run(run_dir).splits(fold).test.features.unfold(0, env.window, 1).transpose(1, 2)[:n_obs]
    pos = torch.tensor(env.positions).repeat(len(windows))[:len(windows)]
    return torch.cat([windows.reshape(len(windows), -1), pos[:, None]], 1)


@pytest.mark.parametrize("algo", ["dqn", "ppo", "mlp"])
def test_onnx_equals_torch(runs, algo):
    import onnxruntime
    from gpurl import load_policy
    r = _run("gpurl_export", [runs[algo], "--format", "onnx"], runs[algo])
    assert r.returncode == 0 and "gpurl_export: " in r.stdout, r.stderr[-3000:]
    path = runs[algo] / "export" / "fold1_best.onnx"
    spec = json.loads(path.with_suffix(".json").read_text())
    assert spec["opset"] == 18 and spec["fold"] == 1 and spec["input"]["shape"][1] == spec["window"] * spec["n_features"] + 1
    obs = _held_out(runs[algo], 1, 40)
    got = onnxruntime.InferenceSession(str(path)).run(None, {"obs": obs.numpy()})[0]
    want = load_policy(runs[algo] / "checkpoints" / "fold1_best.safetensors")(obs).numpy()
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_torch_export_program(runs):
    from gpurl import load_policy
    r = _run("gpurl_export", [runs["ppo"], "--format", "torch_export", "--fold", "0", "--out", runs["ppo"] / "x" / "p.pt2"],
             runs["ppo"])
    assert r.returncode == 0, r.stderr[-3000:]
    from gpurl.infer.export import load_program
    program = load_program(runs["ppo"] / "x" / "p.pt2")
    spec = json.loads((runs["ppo"] / "x" / "p.json").read_text())
    assert spec["format"] == "torch_export" and spec["fold"] == 0
    obs = _held_out(runs["ppo"], 0, 30)
    torch.testing.assert_close(program(obs), load_policy(runs["ppo"] / "checkpoints" / "fold0_best.safetensors")(obs),
                               atol=1e-5, rtol=0)


def test_bad_input(runs, tmp_path):
    bare = tmp_path / "bare"; bare.mkdir()
    (bare / "config.json").write_text((runs["ppo"] / "config.json").read_text())
    (bare / "checkpoints").mkdir()
    cases = [([runs["ppo"], "--format", "tflite"], "--format 'tflite' is not one of onnx, torch_export"),
             ([tmp_path / "nothing"], "not a gpurl_train run directory"),
             ([runs["ppo"], "--fold", "7"], "--fold 7: ppo has folds 0..1"),
             ([bare], "bare has no best checkpoint for fold 1 to export")]
    for args, msg in cases:
        before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
        r = _run("gpurl_export", args, tmp_path, timeout=120)
        err = r.stderr.strip()
        assert r.returncode == 2 and len(err.splitlines()) == 1 and err.startswith("gpurl_export: error: ") and msg in err, err
        assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before        # nothing written
