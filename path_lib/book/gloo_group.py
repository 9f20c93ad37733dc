"""A process group of CPU processes on this machine, joined by gloo over the loopback interface, and the
context-parallel self-check the scale-out chapter runs in it (the tests start their groups here too).

    ranks = run_gloo_group(self_check_rank, 2, timeout=90.0)   # [rank 0's result, rank 1's result]

:func:`run_gloo_group` starts ``world_size`` processes that each call ``fn(rank, world_size, *args)``,
collects their results, and turns a failed rank into a ``RuntimeError`` with its traceback and a hang into
a ``TimeoutError`` (every process killed). :func:`self_check_rank` compares one rank's rows of
:func:`path_lib.distributed.context_parallel_path_attention` (output and six gradients) with the explicit
definition on the whole sequence.
"""
from __future__ import annotations

from typing import Dict

import torch

from ..distributed import context_parallel_path_attention, summary_numel
from ..impl import path_attention
from ..validation import check_int

__all__ = ["run_gloo_group", "self_check_rank", "free_port"]


def free_port() -> int:
    """A free TCP port on the loopback interface (for a process group's rendezvous)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _gloo_worker(fn, rank, world, port, args, results, timeout):
    import datetime
    import traceback
    import torch.distributed as dist
    torch.set_num_threads(1)
    try:
        # the group's own timeout comes after the parent's, which kills a hung group first
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=timeout + 30))
        results.put((rank, True, fn(rank, world, *args)))
    except BaseException:                                  # noqa: BLE001  reported to the parent
        results.put((rank, False, traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_gloo_group(fn, world_size: int, *args, timeout: float = 60.0) -> list:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` CPU processes joined in a gloo group on this
    machine; returns their results (picklable values) in rank order.

    The processes are forked from a forkserver that imports torch once. ``fn`` must live in an importable
    module (not ``__main__`` or a notebook). A rank that raises makes this raise a ``RuntimeError`` with
    its traceback; if the group has not finished after ``timeout`` seconds (a hang), every process is
    killed and a ``TimeoutError`` raised, so a caller never blocks.
    """
    import multiprocessing as mp
    import queue
    import time
    check_int(world_size, "world_size", minimum=1)
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    module = getattr(fn, "__module__", None)
    if module in (None, "__main__") or "<locals>" in getattr(fn, "__qualname__", "<locals>"):
        raise TypeError("fn must be a module-level function of an importable module (the processes import it "
                        f"by name), got {getattr(fn, '__qualname__', fn)!r} in {module!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
    ctx = mp.get_context("forkserver") if method == "forkserver" else mp.get_context("spawn")
    if method == "forkserver":
        ctx.set_forkserver_preload(["torch", "torch.distributed", __name__, module])
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_gloo_worker, args=(fn, r, world_size, port, args, results, timeout), daemon=True)
             for r in range(world_size)]
    for p in procs:
        p.start()
    got: Dict[int, tuple] = {}                                   # rank -> (ok, value)
    end = time.monotonic() + timeout
    try:
        while len(got) < world_size:
            try:
                rank, ok, value = results.get(timeout=0.2)
                got[rank] = (ok, value)
                continue
            except queue.Empty:
                pass
            dead = [r for r, p in enumerate(procs) if r not in got and p.exitcode is not None]
            if dead:
                raise RuntimeError(f"rank {dead[0]} exited with status {procs[dead[0]].exitcode} before reporting")
            if time.monotonic() > end:
                raise TimeoutError(f"the {world_size}-process gloo group running {fn.__qualname__} did not finish "
                                   f"within {timeout} s (a hang?); its processes were killed")
    finally:
        for p in procs:
            p.join(timeout=5.0 if len(got) == world_size else 0.0)
            if p.is_alive():
                p.kill()
                p.join()
    failed = [(r, v) for r, (ok, v) in sorted(got.items()) if not ok]
    if failed:
        raise RuntimeError(f"rank {failed[0][0]} of the gloo group failed:\n{failed[0][1]}")
    return [got[r][1] for r in range(world_size)]


def self_check_rank(rank: int, world_size: int, *, chunk_len: int = 6, n_heads: int = 4, n_kv_heads: int = 2,
                    head_dim: int = 8, gate: bool = True, block_size: int = 4, seed: int = 0) -> Dict:
    """Inside a process group: this rank's :func:`context_parallel_path_attention` against
    ``path_attention(impl="explicit")`` on the whole sequence (float64, the same random inputs on every
    rank), outputs and the six gradients. Returns ``{"rank", "max_error" (largest absolute error of the
    output and all gradients), "errors" (per tensor), "seconds" (the call with its backward),
    "sent_numbers" (this rank's summary), "seq_len"}``."""
    import time
    gen = torch.Generator().manual_seed(seed)
    B, L, T = 1, chunk_len, chunk_len * world_size
    f64 = torch.float64
    q, k, v = (torch.randn(B, T, h, head_dim, generator=gen, dtype=f64) for h in (n_heads, n_kv_heads, n_kv_heads))
    w = torch.nn.functional.normalize(torch.randn(B, T, n_kv_heads, head_dim, generator=gen, dtype=f64), dim=-1)
    beta = 2 * torch.rand(B, T, n_kv_heads, generator=gen, dtype=f64)
    g = torch.nn.functional.logsigmoid(torch.randn(B, T, n_heads, generator=gen, dtype=f64)) if gate else None
    full = [x.requires_grad_(True) for x in (q, k, v, w, beta, g) if x is not None]
    do = torch.randn(B, T, n_heads, head_dim, generator=gen, dtype=f64)
    ref = path_attention(*full, *([] if gate else [None]), impl="explicit")
    ref_grads = torch.autograd.grad(ref, full, do)
    mine = [x.detach()[:, rank * L:(rank + 1) * L].clone().requires_grad_(True) for x in full]
    t0 = time.perf_counter()
    out = context_parallel_path_attention(*mine, *([] if gate else [None]), block_size=block_size)
    grads = torch.autograd.grad(out, mine, do[:, rank * L:(rank + 1) * L])
    seconds = time.perf_counter() - t0
    names = ["o", "dq", "dk", "dv", "dw", "dbeta", "dg"][:1 + len(full)]
    pairs = [(out, ref)] + list(zip(grads, ref_grads))
    errors = {n: float((a - b[:, rank * L:(rank + 1) * L]).detach().abs().max()) for n, (a, b) in zip(names, pairs)}
    return {"rank": rank, "max_error": max(errors.values()), "errors": errors, "seconds": seconds,
            "sent_numbers": summary_numel(B, L, n_heads, n_kv_heads, head_dim, gate=gate), "seq_len": T}
