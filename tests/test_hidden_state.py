"""Building and training a trainer leaves the caller's process-global state alone: the torch / NumPy / Python RNG
streams continue exactly where the caller left them, the TF32 flags of `torch.backends` and the intra-op thread count
are unchanged. And the trainer's own run is still a function of `config.seed` alone: the same seed gives the same run
whatever the caller draws between its calls (on CPU; the CUDA path swaps the same generator states)."""
import random

import numpy as np
import pytest
import torch

from gpurl.data.bars import bar_log_returns, make_features, synthetic_market
from gpurl.data.folds import build_fold, walk_forward_folds
from gpurl.rl.dqn import DqnTrainer, DqnConfig
from gpurl.rl.ppo import PpoTrainer, PpoConfig

from _cli import TINY

pytestmark = pytest.mark.xdist_group("hidden_state")   # one worker builds the module fixture its tests share

CONFIGS = {"dqn": (DqnTrainer, lambda seed: DqnConfig.from_dict({**TINY["dqn"], "seed": seed})),
           "ppo": (PpoTrainer, lambda seed: PpoConfig.from_dict({**TINY["ppo"], "seed": seed}))}


@pytest.fixture(scope="module")
def splits():
    bars = synthetic_market(400, seed=0, ar1=-0.3)
    feats, rets = make_features(bars), bar_log_returns(bars)
    return build_fold(feats, rets, walk_forward_folds(len(feats), 200, 60, 60)[0])


@pytest.fixture
def caller_state():
    "Put the process in a caller's distinctive state (TF32 opposite to torch's defaults, 1 thread); restore afterwards."
    saved = (torch.get_rng_state(), np.random.get_state(), random.getstate(), torch.backends.cuda.matmul.allow_tf32,
             torch.backends.cudnn.allow_tf32, torch.get_num_threads())
    torch.backends.cuda.matmul.allow_tf32 = not saved[3]
    torch.backends.cudnn.allow_tf32 = not saved[4]
    torch.set_num_threads(1)
    yield
    torch.set_rng_state(saved[0]); np.random.set_state(saved[1]); random.setstate(saved[2])
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[3], saved[4]
    torch.set_num_threads(saved[5])


def _flags():
    return (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.get_num_threads())


def _draws():
    "Next values of the three global streams (advances them)."
    return torch.rand(4), np.random.rand(4), [random.random() for _ in range(4)]


def _reference_draws(seed: int = 1234):
    "What the caller's streams give right after seeding them to `seed`, with nothing in between."
    torch.manual_seed(seed); np.random.seed(seed); random.seed(seed)
    return _draws()


def _assert_same_draws(got, want, what):
    assert torch.equal(got[0], want[0]), f"{what} moved the caller's torch RNG stream"
    assert np.array_equal(got[1], want[1]), f"{what} moved the caller's numpy RNG stream"
    assert got[2] == want[2], f"{what} moved the caller's `random` stream"


def _exercise(trainer):
    "The calls a user and the walk-forward driver make: epochs, validation, a full-state round trip."
    trainer.train_epoch(); trainer.train_epoch()
    trainer.load_state_dict(trainer.state_dict())
    trainer.train_epoch()


@pytest.mark.parametrize("algo", ["dqn", "ppo"])
def test_construct_and_train_leave_caller_state_alone(algo, splits, caller_state):
    cls, make_cfg = CONFIGS[algo]
    want = _reference_draws()
    flags = _flags()
    torch.manual_seed(1234); np.random.seed(1234); random.seed(1234)
    trainer = cls(make_cfg(7), splits.train)
    assert _flags() == flags, f"constructing {cls.__name__} changed TF32 flags / num_threads: {flags} -> {_flags()}"
    _exercise(trainer)
    trainer.validate(splits.val)
    assert _flags() == flags, f"training {cls.__name__} changed TF32 flags / num_threads: {flags} -> {_flags()}"
    _assert_same_draws(_draws(), want, f"constructing and training {cls.__name__}")


@pytest.mark.parametrize("algo", ["dqn", "ppo"])
def test_same_seed_same_run_whatever_the_caller_draws(algo, splits, caller_state):
    cls, make_cfg = CONFIGS[algo]

    def run(disturb: bool):
        torch.manual_seed(0)
        t = cls(make_cfg(3), splits.train)
        out = []
        for _ in range(3):
            if disturb: torch.rand(97); torch.manual_seed(int(torch.randint(0, 10**6, (1,))))
            out.append({k: v.clone() for k, v in t.train_epoch().items()})
        return out, {k: v.clone() for k, v in t.named_tensors().items()}

    (m1, w1), (m2, w2) = run(False), run(True)
    for a, b in zip(m1, m2):
        for k in a: assert torch.equal(a[k], b[k]), f"{cls.__name__} metric {k!r} depends on the caller's draws"
    for k in w1: assert torch.equal(w1[k], w2[k]), f"{cls.__name__} weight {k!r} depends on the caller's draws"
    init3, init4 = (cls(make_cfg(s), splits.train).named_tensors() for s in (3, 4))
    assert any(not torch.equal(init3[k], init4[k]) for k in init3), f"{cls.__name__}: seeds 3 and 4 gave the same init"


def test_two_trainers_interleaved_equal_one_after_the_other(splits, caller_state):
    "Two DQN trainers of one seed, stepped alternately, give what each gives alone (no shared global stream)."
    cls, make_cfg = CONFIGS["dqn"]
    solo = cls(make_cfg(5), splits.train)
    ref = [solo.train_epoch()["loss"].clone() for _ in range(2)]
    a, b = cls(make_cfg(5), splits.train), cls(make_cfg(5), splits.train)
    got_a, got_b = [], []
    for _ in range(2):
        got_a.append(a.train_epoch()["loss"].clone()); got_b.append(b.train_epoch()["loss"].clone())
    for r, x, y in zip(ref, got_a, got_b):
        assert torch.equal(r, x) and torch.equal(r, y), "interleaved trainers share a random stream"
