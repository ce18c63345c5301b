"""The persistent CUDA kernels (Triton) of gpurl.seq.liquid (CfC) and gpurl.seq.ltc (LTC) run on the CPU through Triton's
interpreter (TRITON_INTERPRET=1, in a subprocess: the switch must be set before Triton is imported). CfC: the forward and
backward-through-time kernels against the PyTorch loops of the fused path (states, backbone activations, backward
multipliers, every gradient), at widths that are not powers of two and batches that leave the last program part empty.
LTC: both kernels against the step-by-step cell and autograd (states and the gradients of every input and synapse
parameter), with irregular spans."""
import os, subprocess, sys, textwrap
import pytest

pytest.importorskip("triton")

CHECK = textwrap.dedent("""
    import torch
    import torch.nn.functional as F
    import gpurl.seq.liquid as L
    import gpurl.seq.ltc as LT
    torch.manual_seed(0)
    for B, T, H, NB in ((5, 3, 8, 12), (17, 4, 16, 32)):
        u, h0, ts = torch.randn(B, T, NB), torch.randn(B, H), torch.rand(B, T) + 0.1
        w_h, w_head, b_head = torch.randn(NB, H) * 0.3, torch.randn(4 * H, NB) * 0.3, torch.randn(4 * H)
        ref, kern = L._cfc_forward_loop(u, h0, ts, w_h, w_head, b_head), L._cfc_forward_triton(u, h0, ts, w_h, w_head, b_head)
        for a, b in zip(ref, kern): torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
        dY = torch.randn(B, T, H)
        ref, kern = L._cfc_backward_loop(dY, *ref[1:], w_h, w_head), L._cfc_backward_triton(dY, *kern[1:], w_h, w_head)
        for a, b in zip(ref, kern): torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
    print("cfc kernels == loops")

    B, T, H, S = 3, 4, 12, 5
    m = LT.LTC(S, H, ode_unfolds=3)
    x, ts = torch.randn(B, T, S), torch.rand(B, T, 1) + 0.5
    xm = (x * m.input_w + m.input_b).unsqueeze(-1)
    sensory = F.softplus(m.sensory_w) * torch.sigmoid(m.sensory_sigma * (xm - m.sensory_mu))
    gleak, w = F.softplus(m.gleak), F.softplus(m.w)
    leaves = [t.detach().clone().requires_grad_() for t in (torch.randn(B, H) * 0.3, (sensory * m.sensory_erev).sum(2),
              sensory.sum(2) + gleak, F.softplus(m.cm) * m.ode_unfolds / ts, gleak * m.vleak, w, w * m.erev)]
    v0, num_s, den_s, cm_t, leak, w_, w_erev = leaves
    vs, _ = L.unroll(m.cell, v0, list(zip(num_s.unbind(1), den_s.unbind(1), cm_t.unbind(1))), leak, w_, w_erev)
    dV = torch.randn(B, T, H)
    ref_grads = torch.autograd.grad((vs * dV).sum(), [*leaves, m.sigma, m.mu])
    d = [t.detach() for t in (*leaves, m.sigma, m.mu)]
    V, V_in = LT._ltc_forward_triton(*d, m.ode_unfolds, m.epsilon)
    torch.testing.assert_close(V, vs.detach(), rtol=1e-5, atol=1e-5)
    dv0, dns, dds, dcm, dsigma, dmu, dw, dw_erev = LT._ltc_backward_triton(dV, V_in, *d[1:], m.epsilon)
    for k, r in zip((dv0, dns, dds, dcm, dns.sum((0, 1)), dw, dw_erev, dsigma, dmu), ref_grads):
        torch.testing.assert_close(k, r, rtol=1e-4, atol=1e-5)
    print("ltc kernels == cell")
""")


def test_liquid_kernels_equal_the_torch_paths_in_the_triton_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1")
    r = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert "cfc kernels == loops" in r.stdout and "ltc kernels == cell" in r.stdout
