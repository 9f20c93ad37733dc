"""Shared test helpers: random PaTH inputs and an independent NumPy ground truth."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F


def random_path_inputs(B=2, T=9, Hq=2, Hk=None, D=8, Dv=None, *, dtype=torch.float64, param_dtype=None,
                       gate=False, beta_mode="uniform", seed=None, requires_grad=False):
    """Fresh random q, k, v, w, beta, g in the public layout.

    beta_mode: "uniform" (U[0, 2]), "zero", "one", "two", "mixed" (0, 1, 2 and values near 2 mixed in),
    "near2" (in [1.99, 2]).
    """
    gen = torch.Generator().manual_seed(seed if seed is not None else int(torch.randint(0, 2**31 - 1, ()).item()))
    Hk = Hq if Hk is None else Hk
    Dv = D if Dv is None else Dv
    param_dtype = dtype if param_dtype is None else param_dtype
    q = torch.randn(B, T, Hq, D, generator=gen, dtype=torch.float64).to(dtype)
    k = torch.randn(B, T, Hk, D, generator=gen, dtype=torch.float64).to(dtype)
    v = torch.randn(B, T, Hk, Dv, generator=gen, dtype=torch.float64).to(dtype)
    w = F.normalize(torch.randn(B, T, Hk, D, generator=gen, dtype=torch.float64), dim=-1).to(param_dtype)
    u = torch.rand(B, T, Hk, generator=gen, dtype=torch.float64)
    if beta_mode == "uniform":
        beta = 2 * u
    elif beta_mode == "zero":
        beta = torch.zeros_like(u)
    elif beta_mode == "one":
        beta = torch.ones_like(u)
    elif beta_mode == "two":
        beta = 2 * torch.ones_like(u)
    elif beta_mode == "near2":
        beta = 1.99 + 0.01 * u
    elif beta_mode == "mixed":
        choices = torch.tensor([0.0, 1.0, 2.0, 1.999, 0.5, 1.5], dtype=torch.float64)
        beta = choices[torch.randint(0, len(choices), u.shape, generator=gen)]
    else:
        raise ValueError(beta_mode)
    beta = beta.to(param_dtype)
    g = F.logsigmoid(2 * torch.randn(B, T, Hq, generator=gen, dtype=torch.float64)).to(param_dtype) if gate else None
    tensors = [q, k, v, w, beta, g]
    if requires_grad:
        for t in tensors:
            if t is not None:
                t.requires_grad_(True)
    return tensors


def numpy_path_attention(q, k, v, w, beta, g=None, scale=None):
    """An independent ground truth: plain NumPy loops over the definition (no shared code).

    logit(i, j) = scale * q_i^T H_i ... H_{j+1} k_j + sum_{s=j+1}^{i} g_s;  o_i = sum_j softmax_j * v_j.
    """
    q, k, v, w, beta = (np.asarray(x.detach().double().cpu()) for x in (q, k, v, w, beta))
    g = None if g is None else np.asarray(g.detach().double().cpu())
    B, T, Hq, D = q.shape
    Hk = k.shape[2]
    rep = Hq // Hk
    scale = D ** -0.5 if scale is None else scale
    out = np.zeros((B, T, Hq, v.shape[-1]))
    for b in range(B):
        for h in range(Hq):
            hk = h // rep
            for i in range(T):
                logits = np.empty(i + 1)
                vec = q[b, i, h].copy()          # row vector q_i^T H_i ... H_{j+1}, built right to left
                gate_sum = 0.0
                for j in range(i, -1, -1):
                    logits[j] = scale * vec @ k[b, j, hk] + gate_sum
                    wj = w[b, j, hk]
                    vec = vec - beta[b, j, hk] * (vec @ wj) * wj   # vec <- vec H_j
                    if g is not None:
                        gate_sum += g[b, j, h]
                p = np.exp(logits - logits.max())
                p /= p.sum()
                out[b, i, h] = p @ v[b, : i + 1, hk]
    return torch.from_numpy(out)


def run_module_under_interpreter(test_file: str, what: str, timeout: float = 900) -> None:
    """Run the pytest module ``test_file`` in a subprocess with ``TRITON_INTERPRET=1`` (it must be set
    before triton is imported, and setting it here would turn this session's GPU tests into interpreted
    ones) and no visible GPU; fail with its output unless it passed."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONDONTWRITEBYTECODE="1", CUDA_VISIBLE_DEVICES="")
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run([sys.executable, "-m", "pytest", test_file, "-q", "-p", "no:cacheprovider"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
    out = proc.stdout[-6000:] + proc.stderr[-2000:]
    print(out)
    assert proc.returncode == 0, f"interpreted {what} cases failed:\n{out}"
    assert " passed" in proc.stdout, out


#: whether this process runs the Triton kernels under the interpreter (TRITON_INTERPRET=1 set at start)
INTERPRETED = __import__("os").environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def interpreter_markers():
    """``(needs_interpreter, outside_interpreter)`` pytest marks for a module that runs itself under the
    interpreter: its cases run only there, its self-launching test only outside."""
    import pytest
    return (pytest.mark.skipif(not INTERPRETED, reason="runs in the TRITON_INTERPRET=1 subprocess"),
            pytest.mark.skipif(INTERPRETED, reason="TRITON_INTERPRET is set: the cases run in this process"))


def decode_by_steps(layer, x: torch.Tensor):
    """An attention layer's outputs ``[B, T, d_model]`` for ``x`` ``[B, T, d_model]`` computed token by token
    through ``layer.step`` (its decoding path), and the state after the last token (None where T = 0)."""
    state, ys = None, []
    for t in range(x.shape[1]):
        y, state = layer.step(x[:, t], state)
        ys.append(y)
    return (torch.stack(ys, 1) if ys else x.new_zeros(x.shape)), state
