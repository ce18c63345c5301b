"""The CUDA step kernel of gpurl.envs.trading (`_step_kernel`, Triton) run on the CPU through Triton's interpreter
(TRITON_INTERPRET=1, in a subprocess: the switch must be set before Triton is imported), against the eager kernels of
an identical env: states, episode ends, rewards, both end flags (terminated, truncated) and observations equal bit for
bit, over restarts, fold ends and episode ends, for fp32 and bf16 observations, `observe=False`, a window that is not a power of two (masked columns), one
longer than a program's block (several column chunks), an env count that leaves the last program part empty, and the
64-bit state arithmetic that folds too long for 32-bit states take. Observations are compared with their row padding
(the kernel writes the position and the zero padding as whole 32-byte sectors)."""
import os, subprocess, sys, textwrap
import pytest

pytest.importorskip("triton")

CHECK = textwrap.dedent("""
    import torch
    import gpurl.envs.trading as E
    from gpurl.data.folds import FoldData
    from gpurl.envs.trading import TradingEnv
    g = torch.Generator().manual_seed(0)
    def fold(T, F):
        return FoldData(torch.randn(T, F, generator=g), torch.randn(T, generator=g) * 0.01, torch.arange(T))
    cases = [dict(T=120, F=4, window=8), dict(T=120, F=4, window=6), dict(T=400, F=4, window=150, steps=6),
             dict(T=120, F=4, window=8, i64=True)]
    n_term = n_trunc = n_term_ep = 0
    for case in cases:
        steps = case.pop("steps", 30)
        E._I32_STATES = 0 if case.pop("i64", False) else 2**31   # the kernel's 64-bit state arithmetic (huge folds)
        fd = fold(case.pop("T"), case.pop("F"))
        for L in (None, 12):
            for dtype in (torch.float32, torch.bfloat16):
                for observe in (True, False):
                    kw = dict(case, seed=5, episode_len=L, obs_dtype=dtype, observe=observe)
                    eager, kern = TradingEnv(fd, 13, **kw), TradingEnv(fd, 13, **kw)
                    starts = torch.linspace(case["window"] - 1, fd.features.shape[0] - 2, 13).long()   # some cut short
                    eager.reset(starts); kern.reset(starts)                                     # by the fold's end
                    launch = kern._step_launch()             # the CUDA step's launch, here interpreted
                    for i in range(steps):
                        a = torch.randint(0, 3, (13,), generator=g)
                        eager.step(a)
                        kern.draw_restarts()
                        launch(a)
                        for k in ("_state", "_end", "reward", "terminated", "truncated") + (("_obs_buf",) if observe else ()):
                            assert torch.equal(getattr(eager, k), getattr(kern, k)), (case, L, dtype, observe, i, k)
                        assert not (kern.terminated & kern.truncated).any(), (case, L, dtype, observe, i)
                        n_term += int(eager.terminated.sum()); n_trunc += int(eager.truncated.sum())
                        n_term_ep += int(eager.terminated.sum()) if L else 0
                    if L is None: assert not kern.truncated.any()
    assert n_term > 20 and n_trunc > 50 and n_term_ep > 10, (n_term, n_trunc, n_term_ep)
    print("kernel == eager", n_term, n_trunc, n_term_ep)
""")


def test_step_kernel_equals_eager_in_the_triton_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1")
    r = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert "kernel == eager" in r.stdout


WIDE = textwrap.dedent("""
    import torch
    from gpurl.envs.trading import _step_kernel
    T, W, K = 2**30 + 5, 32, 3              # K * T >= 2**31: the 64-bit state path, with T itself a 32-bit argument
    for adt in (torch.int64, torch.int32, torch.uint8):
        state, actions = torch.tensor([7, 7]), torch.tensor([2, 1], dtype=adt)   # position 0, bar 7
        end, restart = torch.zeros(2, dtype=torch.int64), torch.zeros(2, dtype=torch.int64)
        reward_table, reward = torch.zeros(64), torch.zeros(2)
        term, trunc = torch.zeros(2, dtype=torch.uint8), torch.zeros(2, dtype=torch.uint8)
        _step_kernel[(1,)](state, end, restart, actions, reward_table, reward, term, trunc, reward, reward, reward, 1, 2,
                           0, T, T - W, T, OBSERVE=False, N_ACTIONS=K, EPISODE=False, ROW_LEN=0, WINDOW_LEN=0, STRIDE_MULT=1,
                           BLOCK=1, ROWS=2, PAD=1, PAD_BLOCK=1, I32=False)
        assert state.tolist() == [2 * T + 8, T + 8], (adt, state.tolist())
        assert term.tolist() == [0, 0] and trunc.tolist() == [0, 0], (adt, term.tolist(), trunc.tolist())
    print("wide states ok")
""")


def test_step_kernel_64bit_states_with_narrow_action_dtypes():
    "Next state a * T + bar + 1 beyond 2**31 for int64, int32 and uint8 actions (a narrow product would wrap)."
    env = dict(os.environ, TRITON_INTERPRET="1")
    r = subprocess.run([sys.executable, "-c", WIDE], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert "wide states ok" in r.stdout
