"""The CUDA step kernel of gpurl.env (`_step_kernel`, Triton) run on the CPU through Triton's interpreter
(TRITON_INTERPRET=1, in a subprocess: the switch must be set before Triton is imported), against the eager kernels of
an identical env: states, episode ends, rewards, done flags and observations equal bit for bit, over restarts and
episode ends, for fp32 and bf16 observations, `observe=False`, a window that is not a power of two (masked columns), one
longer than a program's block (several column chunks), an env count that leaves the last program part empty, and the
64-bit state arithmetic that folds too long for 32-bit states take. Observations are compared with their row padding
(the kernel writes the position and the zero padding as whole 32-byte sectors)."""
import os, subprocess, sys, textwrap
import pytest

pytest.importorskip("triton")

CHECK = textwrap.dedent("""
    import torch
    import gpurl.env as E
    from gpurl.data import FoldData
    from gpurl.env import TradingEnv
    g = torch.Generator().manual_seed(0)
    def fold(T, F):
        return FoldData(torch.randn(T, F, generator=g), torch.randn(T, generator=g) * 0.01, torch.arange(T))
    cases = [dict(T=120, F=4, window=8), dict(T=120, F=4, window=6), dict(T=400, F=4, window=150, steps=6),
             dict(T=120, F=4, window=8, i64=True)]
    n_done = 0
    for case in cases:
        steps = case.pop("steps", 30)
        E._I32_STATES = 0 if case.pop("i64", False) else 2**31   # the kernel's 64-bit state arithmetic (huge folds)
        fd = fold(case.pop("T"), case.pop("F"))
        for L in (None, 12):
            for dtype in (torch.float32, torch.bfloat16):
                for observe in (True, False):
                    kw = dict(case, seed=5, episode_len=L, obs_dtype=dtype, observe=observe)
                    eager, kern = TradingEnv(fd, 13, **kw), TradingEnv(fd, 13, **kw)
                    launch = kern._step_launch()             # the CUDA step's launch, here interpreted
                    for i in range(steps):
                        a = torch.randint(0, 3, (13,), generator=g)
                        eager.step(a)
                        kern.draw_restarts()
                        launch(a)
                        for k in ("_state", "_end", "reward", "done") + (("_obs_buf",) if observe else ()):   # padding too
                            assert torch.equal(getattr(eager, k), getattr(kern, k)), (case, L, dtype, observe, i, k)
                        n_done += int(eager.done.sum())
    assert n_done > 50, n_done
    print("kernel == eager", n_done)
""")


def test_step_kernel_equals_eager_in_the_triton_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1")
    r = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert "kernel == eager" in r.stdout


WIDE = textwrap.dedent("""
    import torch
    from gpurl.env import _step_kernel
    T, W, K = 2**30 + 5, 32, 3              # K * T >= 2**31: the 64-bit state path, with T itself a 32-bit argument
    for adt in (torch.int64, torch.int32, torch.uint8):
        state, actions = torch.tensor([7, 7]), torch.tensor([2, 1], dtype=adt)   # position 0, bar 7
        end, restart = torch.zeros(2, dtype=torch.int64), torch.zeros(2, dtype=torch.int64)
        reward_table, reward, done = torch.zeros(64), torch.zeros(2), torch.zeros(2, dtype=torch.uint8)
        _step_kernel[(1,)](state, end, restart, actions, reward_table, reward, done, reward, reward, reward, 1, 2, 0, T,
                           T - W, T, OBSERVE=False, N_ACTIONS=K, EPISODE=False, ROW_LEN=0, WINDOW_LEN=0, STRIDE_MULT=1,
                           BLOCK=1, ROWS=2, PAD=1, PAD_BLOCK=1, I32=False)
        assert state.tolist() == [2 * T + 8, T + 8], (adt, state.tolist())
        assert done.tolist() == [0, 0], (adt, done.tolist())
    print("wide states ok")
""")


def test_step_kernel_64bit_states_with_narrow_action_dtypes():
    "Next state a * T + bar + 1 beyond 2**31 for int64, int32 and uint8 actions (a narrow product would wrap)."
    env = dict(os.environ, TRITON_INTERPRET="1")
    r = subprocess.run([sys.executable, "-c", WIDE], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert "wide states ok" in r.stdout
