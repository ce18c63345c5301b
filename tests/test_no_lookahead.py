"""No look-ahead, end to end, through the path a user runs: bars in a CSV file, `gpurl.train` (what `gpurl_train`
runs), the run directory read back with `gpurl.run.record.load_run`, and the folds rebuilt by `gpurl.run.rundir` / `gpurl.data.folds`.

The design rules under test: features are causal and normalised on the training fold only; a trainer never sees test
bars, and model selection (best checkpoint, early stopping) reads validation bars only; targets never cross a split
boundary; costs are always on in backtests. The check is a perturbation: the same tiny walk-forward (CPU, seed 3) on
the same bars and on bars changed from bar `p` on; what was decided before `p` must be bit-identical, what reads bars
from `p` on must change. One model of each family: `dqn`, `ppo` (RL), `mlp` (supervised), `tft` (supervised with a
known-future calendar), `cfc` (recurrent).

Two folds of 120 train, 40 val and 40 test bars over 240 bars (the last test window ends at the last bar):
fold 0 trains on 0..119, validates on 120..159, tests on 160..199; fold 1 is the same 40 bars later. Changing the
bars from 200 on (fold 1's test bars) must leave fold 0 whole and fold 1 up to its choice of weights unchanged;
changing them from 160 on (fold 1's val bars, fold 0's test bars) must leave fold 1's scaler and training epochs
and fold 0's selection unchanged."""
import math

import numpy as np
import pandas as pd
import pytest
import torch

from _cli import TINY
from gpurl import resolve, train
from gpurl.run.resolve import resolve
from gpurl.data.bars import calendar_features, load_ohlcv, synthetic_market
from gpurl.core.metrics import IGNORE_INDEX
from gpurl.data.lob import DOWN, STATIONARY, UP
from gpurl.run.record import Run
from gpurl.train.walkforward import backtest_trainer

pytestmark = pytest.mark.xdist_group("no_lookahead")   # one worker builds the module fixture its tests share

N_BARS, FOLD = 240, dict(folds=2, train_bars=120, val_bars=40, test_bars=40)
COST_BPS, SEED, EPOCHS = 5.0, 3, 4      # seed 3: every tiny model trades on its test bars (seed 0's DQN stays flat there)
DRIVER = {"patience": 1, "plateau_patience": 0}    # early stopping on: an epoch without a better val Sharpe ends the fold
CONFIGS = {"dqn": TINY["dqn"], "ppo": TINY["ppo"],
           "mlp": {"env": {"window": 4}, "hidden": [16, 16], "batch_size": 32, "task": "regression", "horizon": 2},
           "tft": {"env": {"window": 8}, "forecast_horizon": 3, "hidden": 8, "heads": 2, "batch_size": 32},
           "cfc": {"env": {"window": 4}, "units": 8, "backbone_units": 16, "batch_size": 32}}
ALGOS = list(CONFIGS)


def _bars() -> pd.DataFrame:
    "The bars every run starts from: 240 business days of the synthetic market, as a CSV file would hold them."
    return synthetic_market(N_BARS, seed=3, ar1=-0.2).drop(columns="regime")

def _changed_from(bars: pd.DataFrame, p: int, seed: int = 11) -> pd.DataFrame:
    "The bars with every bar from `p` on moved: prices times a random walk (new returns from bar p-1 to p on), volume rescaled."
    g, out = np.random.default_rng(seed), bars.copy()
    walk = np.exp(np.cumsum(g.normal(0.0, 0.03, len(out) - p)))
    for c in ("open", "high", "low", "close"): out.iloc[p:, out.columns.get_loc(c)] *= walk
    out.iloc[p:, out.columns.get_loc("volume")] *= g.uniform(0.5, 2.0, len(out) - p)
    return out

def _csv(bars: pd.DataFrame, path) -> str:
    "Write `bars` as a CSV of bars (a timestamp column, OHLCV) and return its path."
    bars.to_csv(path, index_label="timestamp")
    return str(path)

def _train(algo: str, csv: str, out) -> Run:
    "`gpurl_train` of `algo` on the bars of `csv`, two folds, early stopping on, into `out`."
    plan = resolve(algo=algo, data=csv, config={**CONFIGS[algo], "driver": DRIVER}, **FOLD, epochs=EPOCHS, seed=SEED,
                   cost_bps=COST_BPS, device="cpu")
    return train(*plan, out=out, progress=False, summary=False)

@pytest.fixture(scope="module", params=ALGOS)
def family(request, tmp_path_factory):
    "One model's three runs: on the bars, on them changed after fold 1's val end (200), and after its train end (160)."
    algo, d = request.param, tmp_path_factory.mktemp(request.param)
    bars = _bars()
    base = _train(algo, _csv(bars, d / "bars.csv"), d / "base")
    f1 = base.config.fold_list()[1]
    assert (f1.train[1], f1.val[1], f1.test[1]) == (160, 200, N_BARS)
    runs = {"algo": algo, "bars": load_ohlcv(d / "bars.csv"), "base": base}     # the bars as the run read them
    for name, p in (("after_val", f1.val[1]), ("after_train", f1.train[1])):
        runs[name] = _train(algo, _csv(_changed_from(bars, p), d / f"{name}.csv"), d / name)
    return runs


def _same(x, y) -> bool:
    "Bit-identical tensors (NaN equal to NaN), or both None."
    if x is None or y is None: return x is None and y is None
    if x.dtype != y.dtype or x.shape != y.shape: return False
    return torch.equal(x.isnan(), y.isnan()) and torch.equal(x.nan_to_num(0.0), y.nan_to_num(0.0)) if x.is_floating_point() \
        else torch.equal(x, y)


SELECTION = ("epochs_run", "stop_reason", "best_epoch", "best_metric", "lr_reductions", "history", "config_hash", "val",
             "val_buy_and_hold", "deflated_sharpe")

def _assert_selection_equal(a, b, k: int) -> None:
    "Fold k of runs a and b: every epoch's train and val metrics, the best epoch, the best checkpoint and its val backtest bit-identical."
    fa, fb = a.folds[k], b.folds[k]
    for name in SELECTION: assert getattr(fa, name) == getattr(fb, name), (k, name)
    assert fa.checkpoints == fb.checkpoints, k
    (ta, ma), (tb, mb) = a.best_tensors(k), b.best_tensors(k)
    assert ma == mb and set(ta) == set(tb), k
    for name, t in ta.items(): assert torch.equal(t, tb[name]), (k, name)

def _assert_test_differs(a, b, k: int) -> None:
    "Fold k's test backtest of runs a and b: the bars differ (buy-and-hold) and so do the strategy's results."
    sa, sb = a.series[k], b.series[k]
    assert torch.equal(sa["bar_index"], sb["bar_index"])
    assert not torch.equal(sa["buy_and_hold"], sb["buy_and_hold"]), "the perturbation did not reach the test bars"
    assert not torch.equal(sa["returns"], sb["returns"]) and a.folds[k].test != b.folds[k].test


def test_test_bars_decide_nothing(family):
    """A trainer never sees test bars; model selection uses validation bars only; targets never cross the val/test
    boundary. Changing every bar after fold 1's val end leaves fold 0 whole (its test bars end where the change begins:
    their last return, into bar 200, is zeroed) and fold 1's training metrics, validation metrics, best epoch, stop
    reason and best checkpoint bit-identical, while fold 1's test results change. Changing every bar after fold 0's val
    end does the same for fold 0."""
    base, moved = family["base"], family["after_val"]
    _assert_selection_equal(base, moved, 0)
    assert base.folds[0].test == moved.folds[0].test and base.folds[0].test_buy_and_hold == moved.folds[0].test_buy_and_hold
    for key, t in base.series[0].items(): assert torch.equal(t, moved.series[0][key]), key
    _assert_selection_equal(base, moved, 1)
    _assert_test_differs(base, moved, 1)
    _assert_selection_equal(base, family["after_train"], 0)        # fold 0's test bars are 160..199
    _assert_test_differs(base, family["after_train"], 0)


def test_bars_after_training_leave_scaler_and_training_unchanged(family):
    """Features are normalised on the training fold only; targets never cross the train/val boundary. Changing every
    bar after fold 1's train end (its val and test bars) leaves that fold's FeatureScaler, its train split (features,
    returns, targets) and the training metrics of every epoch both runs reach bit-identical (the val bars may end the
    fold sooner: early stopping reads them); its validation metrics change."""
    base, moved = family["base"], family["after_train"]
    sa, sb = base.splits(1), moved.splits(1)
    assert torch.equal(sa.scaler.mean, sb.scaler.mean) and torch.equal(sa.scaler.std, sb.scaler.std)
    for name in ("features", "log_returns", "bar_index", "labels", "calendar"):
        assert _same(getattr(sa.train, name), getattr(sb.train, name)), name
    assert not torch.equal(sa.val.features, sb.val.features)
    ha, hb = base.folds[1].history, moved.folds[1].history
    assert min(len(ha), len(hb)) >= 2 and all(h["lr"] == ha[0]["lr"] for h in ha + hb)   # no plateau: the lr is untouched
    train_keys = [k for k in ha[0] if k.startswith("train_")]
    assert train_keys, ha[0]
    for ea, eb in zip(ha, hb): assert {k: ea[k] for k in train_keys} == {k: eb[k] for k in train_keys}
    assert any(ea[k] != eb[k] for ea, eb in zip(ha, hb) for k in ea if k.startswith("val_")), "val bars changed, val metrics did not"


def test_backtests_charge_costs_when_positions_change(family):
    """Costs are always on: every stored test return is the position times the bar's log return (from the CSV's
    closes) minus cost x |position change| from a flat start; a cost-0 backtest of the same best weights takes the same
    positions and differs from the run's exactly on the bars where the position changes."""
    run, bars = family["base"], family["bars"]
    cost = COST_BPS * 1e-4
    assert run.config.trainer["env"]["cost_bps"] == COST_BPS
    close = np.log(bars["close"].to_numpy(np.float64))
    for k in range(2):
        s = run.series[k]
        b, p, r = s["bar_index"].numpy(), s["positions"].numpy(), s["returns"].numpy()
        lr = close[b + 1] - close[b]                               # what holding over bar b earns
        dp = np.abs(np.diff(p, prepend=0.0))
        np.testing.assert_allclose(r, p * lr - cost * dp, rtol=0, atol=2e-6)
        np.testing.assert_allclose(s["buy_and_hold"].numpy(), lr - cost * (np.arange(len(lr)) == 0), rtol=0, atol=2e-6)
        trader = run.trainer(k)
        test = run.splits(k).test
        with_cost, free = backtest_trainer(trainer=trader, data=test), backtest_trainer(trainer=trader, data=test, cost_bps=0.0)
        assert torch.equal(with_cost.returns.double(), s["returns"]), "the stored test returns are not the run's backtest"
        assert torch.equal(with_cost.positions, free.positions)
        moved = (free.positions - torch.cat([free.positions.new_zeros(1), free.positions[:-1]])).abs()
        assert (moved > 0).any() and (moved == 0).any(), "a position never changes (or always does): the check is empty"
        torch.testing.assert_close(free.returns - with_cost.returns, cost * moved, rtol=0, atol=2e-7)
        assert torch.equal(free.returns[moved == 0], with_cost.returns[moved == 0])


def _expected_labels(algo: str, close: np.ndarray, a: int, b: int, cfg) -> np.ndarray | None:
    "Targets of split [a, b) from the closes alone: NaN (or IGNORE_INDEX) wherever the target would read a bar >= b."
    lr = np.diff(np.log(close))                                 # lr[t]: bar t to t+1
    if algo in ("dqn", "ppo"): return None
    if algo == "tft":                                           # next_returns: column j holds r[t + j]
        H = cfg.forecast_horizon
        return np.array([[lr[t + j] if t + j + 1 < b else np.nan for j in range(H)] for t in range(a, b)])
    k = cfg.horizon
    fwd = np.array([np.log(close[t + k] / close[t]) if t + k < b else np.nan for t in range(a, b)])
    if cfg.task == "regression": return fwd[:, None]
    return np.where(np.isnan(fwd), IGNORE_INDEX, np.where(fwd > 0, UP, np.where(fwd < 0, DOWN, STATIONARY)))[:, None]


@pytest.mark.parametrize("algo", ALGOS)
def test_fold_targets_stop_at_split_ends(algo, tmp_path):
    """Targets never cross a split boundary; the TFT's known-future calendar may. For the folds `gpurl_train` builds
    (`resolve` -> `RunConfig.fold_splits`), every split's targets equal the forward returns computed from the CSV's
    closes where they end inside the split and are masked where they would read a later bar; each split's last
    return is 0; the features and targets of the train (val) split are bit-identical when every bar after it changes,
    and so is the scaler. The TFT's calendar columns of a split's last rows are the next bars' calendar, across the
    boundary, as a calendar is known in advance."""
    bars = _bars()
    flags = dict(algo=algo, config=CONFIGS[algo], **FOLD, cost_bps=COST_BPS, device="cpu")
    rc, data = resolve(data=_csv(bars, tmp_path / "bars.csv"), **flags)
    cfg, close = rc.trainer_config(), load_ohlcv(tmp_path / "bars.csv")["close"].to_numpy(np.float64)
    for fold in rc.fold_list():
        splits = rc.fold_splits(data, fold)
        for name in ("train", "val", "test"):
            a, b = fold.split(name)
            part = getattr(splits, name)
            assert part.log_returns[-1].item() == 0.0
            np.testing.assert_allclose(part.log_returns[:-1].numpy(), np.diff(np.log(close[a:b])), rtol=0, atol=1e-6)
            want = _expected_labels(algo, close, a, b, cfg)
            if want is None: assert part.labels is None
            else:
                got = part.labels.double().numpy()
                np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
                np.testing.assert_allclose(np.nan_to_num(got), np.nan_to_num(want), rtol=0, atol=1e-6)
            if algo == "tft":                                   # row t: the calendar of bars t..t+H (past the series: the last)
                rows = np.minimum(np.arange(a, b)[:, None] + np.arange(cfg.forecast_horizon + 1), len(bars) - 1)
                cal = calendar_features(bars.index)[torch.from_numpy(rows)].flatten(1)
                assert torch.equal(part.calendar, cal) and torch.equal(part.features[:, -cal.shape[1]:], cal)
                if b < len(bars): assert rows[-1, -1] >= b      # the last row's known future lies past the split
        for name in ("train", "val"):
            p = fold.split(name)[1]
            rc2, data2 = resolve(data=_csv(_changed_from(bars, p), tmp_path / f"moved{p}.csv"), **flags)
            moved = rc2.fold_splits(data2, fold)
            assert torch.equal(moved.scaler.mean, splits.scaler.mean) and torch.equal(moved.scaler.std, splits.scaler.std)
            for kept in ("train", "val")[:1 + (name == "val")]:
                for t in ("features", "log_returns", "labels", "calendar"):
                    assert _same(getattr(getattr(splits, kept), t), getattr(getattr(moved, kept), t)), (p, kept, t)
            nxt = {"train": "val", "val": "test"}[name]
            assert not torch.equal(getattr(splits, nxt).features, getattr(moved, nxt).features)


def test_a_later_dividend_leaves_earlier_features(tmp_path):
    """Features are causal on real bars too: `load_ohlcv` back-adjusts prices by the file's adj_close, so a dividend at
    bar p rescales every price before p. The features of bars before p (log differences) stay equal to float32 rounding
    (not bit for bit: log(c * f) rounds), and bar p's one-bar return carries the dividend."""
    bars = _bars()
    plain = bars.assign(adj_close=bars["close"])
    paid = plain.copy()
    p = 150
    paid.iloc[:p, paid.columns.get_loc("adj_close")] *= 0.97              # a 3% dividend, ex-date bar p
    flags = dict(algo="mlp", config=CONFIGS["mlp"], **FOLD, cost_bps=COST_BPS, device="cpu")
    _, a = resolve(data=_csv(plain, tmp_path / "plain.csv"), **flags)
    _, b = resolve(data=_csv(paid, tmp_path / "paid.csv"), **flags)
    torch.testing.assert_close(b.features[:p], a.features[:p], rtol=0, atol=1e-6)
    assert b.log_returns[p - 1] - a.log_returns[p - 1] == pytest.approx(-math.log(0.97), abs=1e-6)


def test_test_bar_times_decide_nothing(tmp_path):
    """A trainer never sees test bars, their timestamps included: moving fold 1's test bars 90 days later (a gap in the
    file, prices unchanged) must leave both folds' training and validation metrics, selection and best checkpoints
    bit-identical. The bars per year, which scale every val Sharpe the driver compares (and `min_delta` with them), are
    counted from the bars before the first test bar only."""
    bars = _bars()
    later = bars.copy()
    later.index = pd.DatetimeIndex(np.r_[bars.index[:200], bars.index[200:] + pd.Timedelta(days=90)], name="timestamp")
    a = _train("mlp", _csv(bars, tmp_path / "bars.csv"), tmp_path / "a")
    b = _train("mlp", _csv(later, tmp_path / "later.csv"), tmp_path / "b")
    assert torch.equal(a.series[1]["returns"], b.series[1]["returns"])      # the same bars and prices: the same trades
    assert a.config.data_info["periods_per_year"] == b.config.data_info["periods_per_year"]
    for k in range(2): _assert_selection_equal(a, b, k)
