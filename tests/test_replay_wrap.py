"""Prioritized replay through its first wrap-around in `gpurl_train`'s default DQN run: the training loss of the epoch
in which the ring first overwrites a row, and of the first epoch wholly after it, stays below 1.3x the epoch before,
in every default fold (with IS weights normalised by the buffer's minimum priority it rose 1.4-2.6x; gpurl.envs.replay)."""
import json

from gpurl import resolve, train
from gpurl.infer.policy import get_model

EPOCHS = 14      # the default run's ring (20,000 transitions, 1,600 an epoch after a 368-transition warm-up) wraps in epoch 12


def test_loss_through_first_wrap(tmp_path):
    capacity = get_model("dqn").quickstart["replay_capacity"]
    # early stopping and LR plateaus off (every fold reaches the wrap, at the default learning rate); no resume states
    plan = resolve(algo="dqn", device="cpu", epochs=EPOCHS,
                   config={"driver": {"patience": 0, "plateau_patience": 0, "last_state_every": 0, "periodic_every": 0}})
    run = train(*plan, out=tmp_path / "run", progress=False, summary=False)
    rows = [json.loads(line) for line in (run.path / "metrics.jsonl").read_text().splitlines()]
    folds = sorted({r["fold"] for r in rows})
    assert folds == [0, 1, 2], folds
    for fold in folds:
        ep = sorted((r for r in rows if r["fold"] == fold), key=lambda r: r["epoch"])
        assert len(ep) == EPOCHS, f"fold {fold} stopped after {len(ep)} epochs"
        wrap = next(i for i, r in enumerate(ep) if r["train_step"] > capacity)   # transitions so far > capacity
        assert 0 < wrap < EPOCHS - 1, f"fold {fold}: the ring wraps in epoch {wrap}"
        for e in (wrap, wrap + 1):
            ratio = ep[e]["train_loss"] / ep[e - 1]["train_loss"]
            assert ratio < 1.3, f"fold {fold}: epoch {e} loss {ep[e]['train_loss']:.3f} is {ratio:.2f}x epoch {e - 1}'s"
