"""Data-parallel training through torchrun on the CPU (gloo): two workers on one machine and two local "nodes" meeting
at a c10d rendezvous. Synced gradients equal the one-process big-batch gradients; every trainer's replicas hold
identical parameters after training; a killed rank ends the whole job within 60 s, named in torchrun's report; a job
restarted by torchrun after a killed worker finishes with exactly the results of an uninterrupted run."""
import json, os, re, socket, subprocess, sys, time
from pathlib import Path

import pytest
import torch

from gpurl.systems.launch import torchrun_command

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1"}
TINY = ["--folds", "2", "--epochs", "4", "--train_bars", "240", "--val_bars", "80", "--test_bars", "80", "--quiet"]

# Shared by the worker scripts: a small fold, and tiny configs of every trainer.
COMMON = r'''
import json, os, sys, torch
import torch.distributed as dist
torch.set_num_threads(1)
from gpurl.systems.distributed import init_worker, data_parallel, MultiGpuConfig, NcclGradientSync
from gpurl.data.bars import synthetic_market, make_features, bar_log_returns
from gpurl.data.folds import walk_forward_folds, build_fold
from gpurl.rl.dqn import DqnTrainer, DqnConfig
from gpurl.rl.ppo import PpoTrainer, PpoConfig
from gpurl.seq.supervised import SupervisedTrainer, MlpConfig
bars = synthetic_market(700, seed=1, ar1=-0.3)
feats, rets = make_features(bars), bar_log_returns(bars)
FOLD = walk_forward_folds(len(feats), train=300, val=100, test=100, n_folds=1)[0]
MLP = MlpConfig(hidden=(16,), batch_size=32, horizon=1, steps_per_epoch=6)
CONFIGS = {"mlp": (SupervisedTrainer, MLP),
           "ppo": (PpoTrainer, PpoConfig(n_envs=8, n_steps=16, hidden=(16, 16), env=dict(window=4))),
           "dqn": (DqnTrainer, DqnConfig(n_envs=4, batch_size=16, warmup=32, replay_capacity=2000,
                                                steps_per_epoch=20, env=dict(window=2),
                                                rainbow=dict(hidden=(16, 16), iqn_n=8, iqn_n_prime=8, iqn_k=4,
                                                             iqn_embedding_dim=8)))}
SPLITS = build_fold(feats, rets, FOLD, **SupervisedTrainer.bar_targets(MLP, rets))
'''


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); return s.getsockname()[1]


def _script(tmp_path: Path, name: str, body: str) -> Path:
    p = tmp_path / name
    p.write_text(COMMON + body)
    return p


def _two_nodes(args: list[str], tmp_path: Path, timeout: float = 240) -> list[subprocess.CompletedProcess]:
    "Two torchrun agents of one worker each (two local 'nodes') meeting at a c10d rendezvous; both outputs."
    cmd = torchrun_command(args, nproc_per_node=1, nnodes="2", rdzv_endpoint=f"127.0.0.1:{_port()}",
                           rdzv_id=f"t{os.getpid()}{time.time_ns()}")
    procs = [subprocess.Popen(cmd, env=ENV, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=timeout)[0] for p in procs]
    return [subprocess.CompletedProcess(cmd, p.returncode, o) for p, o in zip(procs, outs)]


GRADS = r'''
import copy
w = init_worker("cpu")
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))
ref = copy.deepcopy(net)
g = torch.Generator().manual_seed(1)
x, y = torch.randn(16, 5, generator=g), torch.randn(16, 3, generator=g)
half = slice(8 * w.rank, 8 * (w.rank + 1))                          # strong scaling: the global batch split in two
torch.nn.functional.mse_loss(net(x[half]), y[half]).backward()
grads = [p.grad for p in net.parameters()]
local = torch.cat([t.flatten() for t in grads])
NcclGradientSync()(grads)                                           # the copy path: many tensors, one flat buffer
flat = local.clone()
NcclGradientSync()([flat])                                          # the in-place path: one flat tensor (DQN)
torch.nn.functional.mse_loss(ref(x), y).backward()                  # one process, the whole batch
big = torch.cat([p.grad.flatten() for p in ref.parameters()])
json.dump({"copy": (torch.cat([t.flatten() for t in grads]) - big).abs().max().item(),
           "flat": (flat - big).abs().max().item(), "local": (local - big).abs().max().item()},
          open(f"grads{w.rank}.json", "w"))
w.close()
'''


def test_strong_scaling_gradients_equal_the_big_batch(tmp_path):
    script = _script(tmp_path, "grads.py", GRADS)
    r = subprocess.run(torchrun_command([str(script)], nproc_per_node=2), env=ENV, cwd=tmp_path, capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in (0, 1):
        d = json.loads((tmp_path / f"grads{rank}.json").read_text())
        print(f"rank {rank}: max |synced - big batch| copy {d['copy']:.1e}, flat {d['flat']:.1e}; one half alone {d['local']:.1e}")
        assert d["local"] > 1e-3                                      # one half alone is not the big batch
        assert d["copy"] < 1e-6 and d["flat"] < 1e-6, d


REPLICAS = r'''
w = init_worker("cpu", MultiGpuConfig(scaling=sys.argv[1], sync_every_n_steps=int(sys.argv[2])))
out = {}
for name, (cls, cfg) in CONFIGS.items():
    if name == "ppo" and w.config.sync_every_n_steps > 1: continue
    tr = data_parallel(cls, cfg, w)(SPLITS.train)
    losses = [float(tr.train_epoch()["loss"]) for _ in range(2)]
    val = float(tr.validate(SPLITS.val)["sharpe"])
    mine = SPLITS.val if w.rank == 0 else SPLITS.test           # each rank validates other bars: rank 0's figure wins
    agreed, own = (float(v.validate(mine)["bh_sharpe"]) for v in (tr, tr.trainer))   # buy and hold: the bars alone
    bh = float(tr.validate(SPLITS.val)["bh_sharpe"])
    params = torch.cat([t.detach().double().flatten() for t in tr.named_tensors().values()])
    every = [torch.zeros_like(params) for _ in range(w.world_size)]
    dist.all_gather(every, params)
    vals = [torch.zeros(1, dtype=torch.float64) for _ in range(w.world_size)]
    dist.all_gather(vals, torch.tensor([val], dtype=torch.float64))
    out[name] = {"param_diff": (every[0] - every[1]).abs().max().item(), "moved": (params.abs().sum()).item(),
                 "losses": losses, "seed": tr.trainer.config.seed, "val_diff": abs(vals[0] - vals[1]).item(),
                 "bh": bh, "agreed": agreed, "own": own}
json.dump(out, open(f"replicas{w.rank}.json", "w"))
w.close()
'''


@pytest.mark.parametrize("scaling,every", [("strong", 1), ("weak", 2)])
def test_replicas_identical_on_two_nodes(tmp_path, scaling, every):
    script = _script(tmp_path, "replicas.py", REPLICAS)
    rs = _two_nodes([str(script), scaling, str(every)], tmp_path)
    assert all(r.returncode == 0 for r in rs), "\n".join(r.stdout for r in rs)
    a, b = (json.loads((tmp_path / f"replicas{k}.json").read_text()) for k in (0, 1))
    assert set(a) == ({"mlp", "ppo", "dqn"} if every == 1 else {"mlp", "dqn"})
    for name in a:
        assert a[name]["param_diff"] == 0.0, (name, a[name])          # identical weights on both ranks
        assert a[name]["val_diff"] == 0.0, (name, a[name])            # so identical validation
        assert b[name]["agreed"] == a[name]["bh"] != b[name]["own"], (name, a[name], b[name])    # rank 0's figure
        assert a[name]["seed"] + 1 == b[name]["seed"]                 # ... though each rank drew its own data:
        assert a[name]["losses"] != b[name]["losses"], (name, a[name], b[name])


KILLED = r'''
import signal, time
w = init_worker("cpu", MultiGpuConfig(timeout_s=20))
tr = data_parallel(SupervisedTrainer, MLP, w)(SPLITS.train)
for epoch in range(1000):
    tr.train_epoch(); tr.validate(SPLITS.val)
    if epoch == 2 and w.rank == 1:
        open("killed", "w").write(str(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)
'''


def test_killed_rank_ends_every_rank(tmp_path):
    script = _script(tmp_path, "killed.py", KILLED)
    rs = _two_nodes([str(script)], tmp_path, timeout=180)
    end = time.time()
    killed_at = float((tmp_path / "killed").read_text())
    assert all(r.returncode != 0 for r in rs), [r.returncode for r in rs]
    print(f"the job ended {end - killed_at:.1f} s after rank 1 was killed")
    assert end - killed_at < 60, f"the job ended {end - killed_at:.0f} s after the kill"
    text = "\n".join(r.stdout for r in rs)
    assert re.search(r"rank\s*:\s*1 \(local_rank: 0\)\s*\n\s*exitcode\s*:\s*-9", text), text[-3000:]


KILL_ONCE = r'''
import os, signal, sys, threading, time
from pathlib import Path
if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0" and os.environ["RANK"] == "1":
    ckpt = Path(sys.argv[sys.argv.index("--out") + 1]) / "checkpoints" / "fold1_last_state.safetensors"
    def kill_when_fold1_started():
        while not ckpt.is_file(): time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGKILL)
    threading.Thread(target=kill_when_fold1_started, daemon=True).start()
from gpurl.apps.cli import gpurl_train
gpurl_train()
'''


def _folds(run: Path) -> list[dict]:
    res = json.loads((run / "results.json").read_text())
    return [{k: f[k] for k in ("history", "test", "val", "best_epoch", "stop_reason")} for f in res["folds"]]


def test_restart_finishes_with_the_uninterrupted_result(tmp_path):
    whole = subprocess.run([sys.executable, "-m", "gpurl.apps.cli", "--algo", "mlp", *TINY, "--nproc_per_node", "2",
                            "--device", "cpu", "--out", str(tmp_path / "whole")], env=ENV, cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
    assert whole.returncode == 0, whole.stdout + whole.stderr
    script = tmp_path / "kill_once.py"
    script.write_text(KILL_ONCE)
    cut = subprocess.run(torchrun_command([str(script), "--algo", "mlp", *TINY, "--device", "cpu", "--out",
                                           str(tmp_path / "cut")], nproc_per_node=2, max_restarts=1),
                         env=ENV, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert cut.returncode == 0, cut.stdout + cut.stderr
    assert "exitcode: -9" in cut.stderr.replace("exitcode  ", "exitcode") or "Restarting" in cut.stderr, cut.stderr[-3000:]
    assert _folds(tmp_path / "cut") == _folds(tmp_path / "whole")
    listing = lambda run: sorted(str(p.relative_to(run)) for p in run.rglob("*") if "plots" not in p.parts)
    assert listing(tmp_path / "cut") == listing(tmp_path / "whole")


def test_trainers_have_no_hook_by_default():
    from gpurl.data.bars import synthetic_market, make_features, bar_log_returns
    from gpurl.data.folds import walk_forward_folds, build_fold
    from gpurl.rl.dqn import DqnTrainer, DqnConfig
    from gpurl.rl.ppo import PpoTrainer, PpoConfig
    from gpurl.seq.supervised import SupervisedTrainer, MlpConfig
    import torch.distributed as dist
    bars = synthetic_market(600, seed=1); f, r = make_features(bars), bar_log_returns(bars)
    mlp = MlpConfig(hidden=(16,), batch_size=32, horizon=1)
    sp = build_fold(f, r, walk_forward_folds(len(f), train=300, val=100, test=100, n_folds=1)[0],
                    **SupervisedTrainer.bar_targets(mlp, r))
    assert SupervisedTrainer(mlp, sp.train).grad_sync is None
    assert PpoTrainer(PpoConfig(n_envs=8, n_steps=16), sp.train).grad_sync is None
    assert DqnTrainer(DqnConfig(n_envs=4, batch_size=16, warmup=32, replay_capacity=2000), sp.train).learner.grad_sync is None
    assert not dist.is_initialized()


@pytest.mark.parametrize("kw,message", [
    (dict(nnodes=2), "--rdzv_endpoint HOST:PORT"),
    (dict(nnodes=2, rdzv_endpoint="host0:29500", out=None), "add --out DIR"),
    (dict(nnodes="two", rdzv_endpoint="host0:29500"), "--nnodes must be a number"),
    (dict(nproc_per_node=0, device="cpu"), "--nproc_per_node must be >= 1"),
    (dict(nproc_per_node=2, device="cpu", config={"distributed": {"scaling": "fast"}}), "'distributed' section"),
    (dict(nproc_per_node=3, device="cpu", algo="mlp", config={"batch_size": 64}), "multiple of 3"),
    (dict(gpu_ids="0,1", device="cpu"), "CUDA"),
])
def test_launch_usage_errors(kw, message, tmp_path):
    from gpurl.apps.cli import main
    from gpurl.run.resolve import UsageError
    with pytest.raises(UsageError, match=re.escape(message)):
        main(**{"out": str(tmp_path / "r"), "progress": False, **kw})
    assert not (tmp_path / "r").exists()                         # checked before anything is written or started
