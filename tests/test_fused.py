"""gpurl.systems.fused's CUDA kernel (the fused stacked layers of gpurl.infer.ensemble) runs on the CPU through Triton's interpreter (TRITON_INTERPRET=1, in a
subprocess: the switch must be set before Triton is imported), against the batched path it replaces: runs of three and
two layers, widths that are not powers of two, every fused activation, a chain cut into two runs, batches that leave
the last program part empty, one input shared by every member (a stride-0 view), a float64 input cast in the kernel,
the middle layer split across 2, 3 and 4 programs whose partial sums the last to arrive adds up, and runs of three on
the transposed kernel (TF32's at large batches). Float32 only: the interpreter multiplies bfloat16 tiles wrongly, so
bf16 is checked on CUDA by the notebook's GPU cells."""
import os, subprocess, sys, textwrap
import pytest

pytest.importorskip("triton")

CHECK = textwrap.dedent("""
    import torch
    from torch import nn
    import gpurl.infer.ensemble as E
    from gpurl.systems.fused import FusedRun
    torch.manual_seed(0)
    def mlp(widths, acts):
        layers = []
        for (a, b), act in zip(zip(widths[:-1], widths[1:]), acts): layers += [nn.Linear(a, b)] + ([act()] if act else [])
        return nn.Sequential(*layers).eval()
    CASES = [((64, 256, 256, 3), (nn.ReLU, nn.ReLU, None), 5, ["3"]),
             ((20, 48, 37, 5), (nn.Tanh, nn.Sigmoid, nn.ReLU), 70, ["3"]),
             ((64, 512, 64, 8, 4), (nn.ReLU, nn.Tanh, None, nn.Sigmoid), 17, ["2", "2"]),
             ((7, 19, 3), (nn.Sigmoid, None), 1, ["2"])]
    for widths, acts, B, runs in CASES:
        plans = [E.member_steps(mlp(widths, acts)) for _ in range(3)]
        batched = E._Stacked(plans, torch.float32, torch.device("cpu"))
        fused = E._Stacked(plans, torch.float32, torch.device("cpu"), fused=True)
        assert [str(len(run.acts)) for run, *_ in fused.steps] == runs and all(isinstance(r, FusedRun) for r, *_ in fused.steps)
        x = torch.randn(B, widths[0])
        want, got = batched(x), fused(x)
        assert got.shape == want.shape == (3, B, widths[-1]) and got.dtype == torch.float32
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6 * want.abs().max().item())
        assert torch.equal(fused(x.double()), got)     # the kernel casts a float64 input as it loads it: the same bits
        run, h = fused.steps[0][0], x.expand(3, *x.shape)
        for split in (2, 3, 4):                 # the middle layer split across programs, partials added by the last
            cfg = dict(BM=16, BN=16, SPLIT=split, num_warps=4, num_stages=2, precision="ieee")
            out = run.launch(h, **cfg)
            assert torch.equal(out, run.launch(h, **cfg))        # counters reset by the kernel: a second call is the same
            ref = E._Stacked(plans, torch.float32, torch.device("cpu"))
            ref.steps = ref.steps[:len(run.acts)]
            torch.testing.assert_close(out, ref(x), rtol=1e-5, atol=1e-6 * want.abs().max().item())
        cfg = dict(BM=16, BN=16, SPLIT=1, num_warps=4, num_stages=1, precision="ieee", transposed=True)
        if len(run.acts) == 3:                  # the transposed kernel: h^T = wm^T a^T, the same sums
            torch.testing.assert_close(run.launch(h, **cfg), ref(x), rtol=1e-5, atol=1e-6 * want.abs().max().item())
        else:
            try: run.launch(h, **cfg); raise AssertionError("a run of two took the transposed kernel")
            except ValueError as e: assert "three layers unsplit" in str(e), e
    print("fused kernel == batched layers")
""")


def test_fused_kernel_equals_the_batched_layers_in_the_triton_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1")
    r = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert "fused kernel == batched layers" in r.stdout
