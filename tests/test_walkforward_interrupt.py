"""A real SIGINT (KeyboardInterrupt) in the middle of a walk-forward fold: every checkpoint file written so far stays
intact and loadable by safetensors alone, no temp file is left behind, and resuming from the interrupted fold's
last-state checkpoint (with the finished folds' saved results) ends exactly like an uninterrupted run."""
import json, os, signal, subprocess, sys, time, types
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[1]

# Shared by the child process and this one: data, a tiny linear-policy BacktestableTrainer, the run settings.
COMMON = r'''
import json, time, torch
import torch.nn.functional as F
from gpurl.core.device import seed_everything
from gpurl.data.bars import synthetic_market, make_features, bar_log_returns
from gpurl.data.folds import walk_forward_folds, build_fold
from gpurl.envs.trading import make_observation
from gpurl.core.metrics import sharpe_ratio
from gpurl.envs.trading import EnvConfig
from gpurl.train.walkforward import DriverConfig, FoldResult, train_walk_forward, validation_metrics

torch.set_num_threads(1)                   # same float reductions in both processes

class Trainer:
    "Linear policy on env observations, trained to take the sign of the next return; `sleep` slows an epoch."
    def __init__(self, train, sleep=0.0, window=4):
        dev, self.window, self.sleep = train.features.device, window, sleep
        g = torch.Generator().manual_seed(int(train.bar_index[0]))     # one init per fold (its first bar)
        self.weight = (0.01 * torch.randn(3, window * train.n_features + 1, generator=g)).to(dev).requires_grad_()
        self.bias = torch.zeros(3, device=dev, requires_grad=True)
        self.lr = torch.tensor(0.3, device=dev)
        self.env_config = EnvConfig(window=window, cost_bps=1.0)
        rows = torch.arange(window - 1, len(train) - 1, device=dev)
        self.obs = make_observation(train.features, rows, torch.zeros(len(rows), device=dev), window)
        self.labels = torch.where(train.log_returns[rows] > 0, 2, 0)
    def act_scores(self, obs): return obs @ self.weight.T + self.bias
    def train_epoch(self):
        time.sleep(self.sleep)
        losses = []
        for idx in torch.randperm(len(self.obs)).split(128):        # global RNG: the resume must restore it
            loss = F.cross_entropy(self.act_scores(self.obs[idx]), self.labels[idx])
            gw, gb = torch.autograd.grad(loss, (self.weight, self.bias))
            with torch.no_grad(): self.weight.sub_(self.lr * gw); self.bias.sub_(self.lr * gb)
            losses.append(loss.detach())
        return {"loss": torch.stack(losses).mean()}
    def validate(self, data): return validation_metrics(self, data)
    def named_tensors(self): return {"weight": self.weight, "bias": self.bias}
    def state_dict(self): return {"weight": self.weight, "bias": self.bias, "lr": self.lr}
    def load_state_dict(self, s):
        with torch.no_grad():
            for k in ("weight", "bias", "lr"): getattr(self, k).copy_(s[k])

bars = synthetic_market(1200, seed=1, ar1=-0.3)
feats, rets = make_features(bars), bar_log_returns(bars)
SPLITS = [build_fold(feats, rets, f) for f in walk_forward_folds(len(feats), train=400, val=120, test=120, n_folds=3)]
KW = dict(driver=DriverConfig(epochs=8, patience=0, plateau_patience=3, max_lr_reductions=1, periodic_every=2),
          progress=False, device="cpu")
'''

CHILD = COMMON + r'''
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)   # KeyboardInterrupt even if started with SIGINT ignored
out = sys.argv[1]
def save(fr):
    with open(f"{out}/results.jsonl", "a") as f: f.write(json.dumps(fr.to_dict()) + "\n")
seed_everything(0)                                        # torch, numpy, random: all travel in last_state
train_walk_forward(lambda s: Trainer(s, sleep=0.3), SPLITS, f"{out}/fold{{fold}}_{{kind}}.safetensors",
                   on_fold_end=save, **KW)
print("FINISHED")
'''

def _common():
    mod = types.ModuleType("wf_interrupt_common")
    exec(COMMON, mod.__dict__)
    return mod

def _strip(fr) -> dict:
    d = fr.to_dict(); d.pop("seconds"); return d

def test_sigint_mid_fold_keeps_files_and_resume_completes(tmp_path):
    run = tmp_path / "run"; run.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(run)], cwd=tmp_path, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 240
        while not (run / "fold1_last_state.safetensors").exists():       # fold 0 done, fold 1 under way
            assert child.poll() is None, f"child ended early:\n{child.communicate()[1][-3000:]}"
            assert time.time() < deadline, "fold 1 never started"
            time.sleep(0.02)
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None: child.kill(); child.wait()
    assert child.returncode != 0 and "KeyboardInterrupt" in err and "FINISHED" not in out, (child.returncode, err[-3000:])

    # every file is a complete safetensors checkpoint; no temp file survived; fold 0 finished, fold 1 did not
    files = sorted(p.name for p in run.iterdir())
    assert not [f for f in files if f.endswith(".tmp")], files
    for name in ("fold0_best", "fold0_last_state", "fold0_periodic", "fold1_best", "fold1_last_state"):
        assert f"{name}.safetensors" in files, files
    for p in run.glob("*.safetensors"):
        tensors = load_file(p)
        with safe_open(p, "pt") as f: meta = f.metadata()
        assert tensors and meta["fold"] in ("0", "1") and p.name == f"fold{meta['fold']}_{meta['kind']}.safetensors", p
    done = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    assert [d["fold"] for d in done] == [0], done
    with safe_open(run / "fold1_last_state.safetensors", "pt") as f: interrupted_at = int(f.metadata()["epoch"])

    c = _common()
    threads = torch.get_num_threads()
    try:
        # the uninterrupted run, in this process, writing its own files
        full_dir = tmp_path / "full"
        c.seed_everything(0)
        full = c.train_walk_forward(c.Trainer, c.SPLITS, f"{full_dir}/fold{{fold}}_{{kind}}.safetensors", **c.KW)
        # resume: fold 0 from its saved result, fold 1 from its last state, fold 2 from scratch
        c.seed_everything(12345)                                          # must not matter: the RNG state is restored
        resumed = c.train_walk_forward(c.Trainer, c.SPLITS, f"{run}/fold{{fold}}_{{kind}}.safetensors",
                                       completed=[c.FoldResult.from_dict(done[0])],
                                       resume_state=run / "fold1_last_state.safetensors", **c.KW)
    finally:
        torch.set_num_threads(threads)
    assert interrupted_at < full.folds[1].epochs_run - 1, "the interrupt should fall inside fold 1"
    assert [_strip(f) for f in resumed.folds] == [_strip(f) for f in full.folds]
    # fold 0's files from the interrupted process equal the uninterrupted run's
    for kind in ("best", "periodic", "last_state"):
        a, b = load_file(run / f"fold0_{kind}.safetensors"), load_file(full_dir / f"fold0_{kind}.safetensors")
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), kind
    for kind in ("best", "last_state"):
        a, b = load_file(run / f"fold2_{kind}.safetensors"), load_file(full_dir / f"fold2_{kind}.safetensors")
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), kind
