"""PaTH attention with Triton kernels: validation, padding, configuration (block length, segments,
warps, splits), the launches of the forward and backward kernels (``_triton_kernels.py``: all
per-block, per-segment and attention work is Triton) and the autograd Function; plus the float32 torch
code of ``transform_keys_to_end``.

Memory beyond inputs/outputs: O(T D) per head (per-block factors ``T``, ``T W``, ``K->``, ``Kseg``,
``Q0``, per-block ``D x D`` products during pre/post-processing, per-head float32 gradient buffers)
plus the segment-pair products ``Om`` (``NS (NS - 1) / 2`` matrices of ``D x D``; ``NS`` is chosen so
that this stays below ``T D``).
"""
from __future__ import annotations

import math
import os
from typing import Optional

import torch

from path_lib.validation import check_path_params, check_qkv, check_scale, check_tensor

HEAD_DIMS = (32, 64, 128)
_QDTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _interpret() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _triton():
    import triton  # noqa: F401
    from . import _triton_kernels
    return _triton_kernels


# ----------------------------------------------------------------------------------------------
# configuration
# ----------------------------------------------------------------------------------------------

# Shared memory (bytes) the largest of the kernels needs at one pipelining stage (``_launch`` lowers the
# stages of the attention loops when they do not fit; the other kernels run at one), read off the
# device-faithful AOT compiles for sm_90 (``benchmarks/results/compile_sm90.json``, triton 3.6 with
# the JIT's divisibility hints; v13): half-precision inputs at BT = 64 (``_bwd_block_kernel`` at
# D = 32 / 64, ``_seg_grad_kernel`` at D = 128), float32 inputs (tf32x3) at BT = 32 (the query side
# at D = 32 / 64, ``_seg_grad_kernel`` at D = 128). Other architectures may need a little more or
# less: the runtime fallback covers that.
_SMEM_HALF_BT64 = {32: 90112, 64: 102400, 128: 180224}
_SMEM_FP32_BT32 = {32: 32768, 64: 81920, 128: 229376}
_MAX_BT = {}  # (device, dtype, D) -> largest block length known to fit (after an out-of-resources retry)
_ONE_SEGMENT = set()  # (device, dtype, D) that need the single-segment mode


def _smem(device) -> int:
    props = torch.cuda.get_device_properties(device)
    return getattr(props, "shared_memory_per_block_optin", 0) or 48 * 1024


def _segments(n: int, BT: int, D: int) -> int:
    """Blocks per segment: about sqrt(2 T / D) segments, so the ``D x D`` pair products cost <~ T D."""
    ns_max = max(1, int(math.sqrt(2.0 * n * BT / D)))
    return max(2, -(-n // ns_max))


# blocks per segment at least, for a forward that records no gradient, with half-precision inputs at
# D = 128 and BT = 64 (v11, H200, benchmarks/HISTORY.md: the D x D segment products cost the forward
# more than the longer own-segment loops save: 1024-token segments were the fastest forward, 2.54 ms
# against 3.16 at the default 4 blocks for T = 1024, 4.47 against 4.57 at 8 for T = 4096; at T = 16384
# the default is 16 blocks already)
_FWD_ONLY_SEG_BLOCKS = {128: 16}


def _config(D: int, T: int, dtype: torch.dtype, device: torch.device, block_size: Optional[int],
            seg_blocks: Optional[int], forward_only: bool = False):
    """Block length BT, blocks per segment SB and num_warps, from the device's shared memory;
    ``forward_only`` (no gradient will be asked for) may lengthen the segments
    (``_FWD_ONLY_SEG_BLOCKS``)."""
    warps = 4 if D <= 64 else 8
    if block_size is not None:
        BT = block_size
    elif device.type != "cuda":
        BT = 64 if dtype != torch.float32 else 32
    else:
        smem = _smem(device)
        if dtype == torch.float32:
            BT = 32 if smem >= _SMEM_FP32_BT32[D] else 16
        else:
            BT = 64 if smem >= _SMEM_HALF_BT64[D] else (32 if smem >= _SMEM_HALF_BT64[D] // 2 else 16)
        BT = min(BT, _MAX_BT.get((str(device), dtype, D), BT))
        if torch.cuda.get_device_capability(device)[0] < 8:
            warps = 4
    n = max(1, -(-T // BT))
    SB = seg_blocks if seg_blocks is not None else _segments(n, BT, D)
    if seg_blocks is None and forward_only and dtype != torch.float32 and BT == 64:
        SB = max(SB, min(n, _FWD_ONLY_SEG_BLOCKS.get(D, 0)))
    if seg_blocks is None and (str(device), dtype, D) in _ONE_SEGMENT:
        SB = n
    return BT, SB, warps


# ----------------------------------------------------------------------------------------------
# float32 block-level precomputation (torch)
# ----------------------------------------------------------------------------------------------

def _blocks(x: torch.Tensor, BT: int) -> torch.Tensor:
    """``[B, T, H, D]`` -> ``[B, H, NB, BT, D]`` (float32)."""
    B, T, H, D = x.shape
    return x.float().view(B, T // BT, BT, H, D).permute(0, 3, 1, 2, 4)


def _unblocks(x: torch.Tensor) -> torch.Tensor:
    """``[B, H, NB, BT, D]`` -> ``[B, NB*BT, H, D]``."""
    B, H, NB, BT, D = x.shape
    return x.permute(0, 2, 3, 1, 4).reshape(B, NB * BT, H, D)


def _ut(Wb, bb):
    """UT transform per block: returns N = (I + A)^-1, T = N diag(beta), and W W^T."""
    BT = Wb.shape[-2]
    eye = torch.eye(BT, dtype=Wb.dtype, device=Wb.device)
    WWt = Wb @ Wb.transpose(-1, -2)
    A = torch.tril(bb[..., :, None] * WWt, diagonal=-1)
    N = torch.linalg.solve_triangular(eye + A, eye.expand_as(A), upper=False, unitriangular=True)
    return N, N * bb[..., None, :], WWt


def _seg_view(x, BT, SB):
    """``[B, T, H, D]`` (T = NB * BT) -> ``[B, H, NS, SB, BT, D]`` float32, zero-padded to NS * SB blocks."""
    B, T, H, D = x.shape
    NB = T // BT
    NS = -(-NB // SB)
    xb = x.float().view(B, NB, BT, H, D).permute(0, 3, 1, 2, 4)
    if NS * SB > NB:
        xb = torch.cat([xb, xb.new_zeros(B, H, NS * SB - NB, BT, D)], dim=2)
    return xb.reshape(B, H, NS, SB, BT, D)


def _seg_unview(x, NB):
    """``[B, H, NS, SB, BT, D]`` -> ``[B, NB * BT, H, D]``."""
    B, H, NS, SB, BT, D = x.shape
    return x.reshape(B, H, NS * SB, BT, D)[:, :, :NB].permute(0, 2, 3, 1, 4).reshape(B, NB * BT, H, D)


def _suffix_products(Ws, TWs):
    """R_j = P_e ... P_{j+1} inside each segment (R_e = I), by thin updates R <- R - (R W^T)(T W).
    Ws, TWs: ``[B, H, NS, SB, BT, D]``. Returns the list R (``[B, H, NS, D, D]`` each) and Seg = R_0 P_0."""
    B, H, NS, SB, BT, D = Ws.shape
    eye = torch.eye(D, dtype=Ws.dtype, device=Ws.device)
    R = [None] * SB
    R[SB - 1] = eye.expand(B, H, NS, D, D).contiguous()
    for j in range(SB - 2, -1, -1):
        Rn = R[j + 1]
        R[j] = Rn - (Rn @ Ws[:, :, :, j + 1].transpose(-1, -2)) @ TWs[:, :, :, j + 1]
    Seg = R[0] - (R[0] @ Ws[:, :, :, 0].transpose(-1, -2)) @ TWs[:, :, :, 0]
    return R, Seg


def _pair_products(Seg):
    """Om(kc, k) = Seg_{kc-1} ... Seg_{k+1} for 0 <= k < kc < NS, stacked triangularly
    (index kc (kc - 1) / 2 + k): ``[B, H, max(1, NS (NS-1)/2), D, D]``."""
    B, H, NS, D, _ = Seg.shape
    eye = torch.eye(D, dtype=Seg.dtype, device=Seg.device)
    if NS <= 1:
        return eye.expand(B, H, 1, D, D).contiguous()
    full = [[None] * NS for _ in range(NS)]
    for kc in range(1, NS):
        full[kc][kc - 1] = eye.expand(B, H, D, D)
    for dist in range(1, NS - 1):  # Om(kc, kc-1-dist) = Om(kc, kc-dist) Seg_{kc-dist}
        kcs = list(range(dist + 1, NS))
        prev = torch.stack([full[kc][kc - dist] for kc in kcs], dim=2)
        new = prev @ Seg[:, :, [kc - dist for kc in kcs]]
        for i, kc in enumerate(kcs):
            full[kc][kc - 1 - dist] = new[:, :, i]
    out = [full[kc][k] for kc in range(1, NS) for k in range(kc)]
    return torch.stack(out, dim=2).contiguous()


def _precompute(k, w, beta, BT, SB, cdt, PREC, SOLVE_PREC, warps):
    """Per-block factors, per-segment products and the segment-pair products ``Om`` (``NS (NS-1)/2``
    matrices of ``D x D``), all in Triton. Inputs padded ``[B, T, Hk, D]``; w, beta float32 contiguous."""
    kern = _triton()
    B, T, HK, D = k.shape
    NB = T // BT
    NS = -(-NB // SB)
    dev = k.device
    f32 = dict(dtype=torch.float32, device=dev)
    TW = torch.empty(B, T, HK, D, **f32)
    KA = torch.empty(B, T, HK, D, dtype=cdt, device=dev)
    TM = torch.empty(B, HK, NB, BT, BT, **f32)
    MM = torch.empty(B, HK, NB, BT, BT, **f32)
    NM = torch.empty(B, HK, NB, BT, BT, **f32)
    _run(kern._ut_kernel, (NB, B * HK), (w, beta, TM, NM, T, NB),
         dict(HK=HK, D=D, BT=BT, SOLVE_PREC=SOLVE_PREC, num_warps=warps["ut"], num_stages=1))
    _run(kern._prep_kernel, (NB, B * HK), (k, w, TW, KA, TM, MM, T, NB),
         dict(HK=HK, D=D, BT=BT, PREC=PREC, num_warps=warps["prep"], num_stages=1))
    if NS == 1:  # one segment: no segment products (the kernels compile their segment loops out)
        OM = torch.eye(D, **f32).expand(B, HK, 1, D, D).contiguous()
        return dict(TW=TW, KA=KA, KS=KA, TM=TM, MM=MM, NM=NM, RS=OM, SEG=OM, OM=OM)
    KS = torch.empty(B, T, HK, D, dtype=cdt, device=dev)
    RS = torch.empty(B, HK, NB, D, D, **f32)
    Seg = torch.empty(B, HK, NS, D, D, **f32)
    _run(kern._seg_fwd_kernel, (NS, B * HK), (w, TW, KA, KS, RS, Seg, T, NB, NS, SB),
         dict(HK=HK, D=D, BT=BT, PREC=PREC, num_warps=warps["seg"], num_stages=1))
    OM = torch.empty(B, HK, NS * (NS - 1) // 2, D, D, **f32)
    _run(kern._pair_kernel, (NS - 1, B * HK), (Seg, OM, NS),
         dict(HK=HK, D=D, PREC=SOLVE_PREC, num_warps=warps["seg"], num_stages=1))
    return dict(TW=TW, KA=KA, KS=KS, TM=TM, MM=MM, NM=NM, RS=RS, SEG=Seg, OM=OM)


# ----------------------------------------------------------------------------------------------
# the autograd Function (padded inputs)
# ----------------------------------------------------------------------------------------------

_STAGES = {}
# PATH_KERNELS_SYNC=1: synchronize before and after every kernel launch and name the kernel in the
# error (a CUDA fault is otherwise reported asynchronously, at some later call)
_SYNC = os.environ.get("PATH_KERNELS_SYNC", "0") not in ("", "0")


def _sync_check(name, where, meta=None):
    if not _SYNC or not torch.cuda.is_available():
        return
    try:
        torch.cuda.synchronize()
    except Exception as e:  # pragma: no cover - GPU only
        what = f"before kernel {name} (an earlier torch op)" if where == "before" else f"in kernel {name}"
        cfg = {k: str(v) for k, v in (meta or {}).items()}
        raise RuntimeError(f"PaTH: CUDA error {what} {cfg}: {e}") from e


def _run(kernel, grid, args, meta):
    """Launch without the stage retry (prep, intra, block kernels), with the optional sync checks."""
    name = kernel.fn.__name__ if hasattr(kernel, "fn") else str(kernel)
    _sync_check(name, "before", meta)
    kernel[grid](*args, **meta)
    _sync_check(name, "after", meta)


def _launch(kernel, grid, args, meta, stages):
    """Launch with ``num_stages=stages``; on an out-of-resources error (less shared memory, e.g. a T4)
    retry with fewer stages and remember the choice for this kernel."""
    import triton
    key = (kernel.fn.__name__ if hasattr(kernel, "fn") else str(kernel), tuple(sorted(
        (k, str(v)) for k, v in meta.items())))
    stages = _STAGES.get(key, stages)
    _sync_check(key[0], "before", meta)
    while True:
        try:
            kernel[grid](*args, **meta, num_stages=stages)
            _STAGES[key] = stages
            _sync_check(key[0], "after", dict(meta, num_stages=stages))
            return
        except triton.runtime.errors.OutOfResources:
            if stages <= 1:
                raise
            stages -= 1


def _dtypes(q):
    """(compute dtype for logits/PV, dtype for the transport matmuls, fp32 dot precision, torch dtype)."""
    import triton.language as tl
    if q.dtype == torch.float32:
        # tf32x3 (three tf32 products) keeps float32 accuracy on tensor cores; "ieee" on the CPU
        # interpreter and before Ampere (no tf32 there)
        prec = "tf32x3" if q.device.type == "cuda" and torch.cuda.get_device_capability(q.device)[0] >= 8 else "ieee"
        return tl.float32, tl.float32, prec, torch.float32
    cdt = tl.float16 if q.dtype == torch.float16 else tl.bfloat16
    return cdt, tl.float16, "tf32", q.dtype


_STAGE_KEYS = ("fwd", "fwd_inter", "inter_q", "inter_kv")


def _stages(q, key: str) -> int:
    """Software-pipelining depth of attention loop ``key`` (``_STAGE_KEYS``): ``_STAGES_HALF`` for
    half-precision inputs where shared memory is plentiful, else 1;
    ``PATH_KERNELS_STAGES="fwd=1,inter_kv=3"`` overrides for tuning runs (a depth that does not fit is
    lowered at launch, ``_launch``)."""
    spec = os.environ.get("PATH_KERNELS_STAGES", "")
    for item in filter(None, spec.split(",")):
        name, _, val = item.partition("=")
        if name.strip() not in _STAGE_KEYS or val.strip() not in ("1", "2", "3", "4"):
            raise ValueError(f"PATH_KERNELS_STAGES: expected items like 'fwd=1' with keys {_STAGE_KEYS} and "
                             f"values 1 to 4, got {item!r}")
        if name.strip() == key:
            return int(val)
    if q.device.type != "cuda":
        return 1
    props = torch.cuda.get_device_properties(q.device)
    smem = getattr(props, "shared_memory_per_block_optin", 0) or 48 * 1024
    return _STAGES_HALF[key] if smem >= 160 * 1024 and q.dtype != torch.float32 else 1


# pipelining depth per attention loop for half-precision inputs where shared memory is plentiful
# (v10, H200, benchmarks/HISTORY.md): the forward kernel's own-segment loop runs shorter unpipelined
# (221440 -> 49152 bytes of shared memory at D = 128: two programs per SM, as registers allow, instead
# of one); the long loops over earlier segments gain from a third stage
_STAGES_HALF = dict(fwd=1, fwd_inter=3, inter_q=3, inter_kv=3)


# warps of the per-block / per-segment kernels, from the H200 measurements in benchmarks/HISTORY.md (v5:
# 4 warps halve the per-block kernels' time at D = 64: 255 registers and spills at 8); the override
# PATH_KERNELS_WARPS="ut=4,prep=4,block=4,intra=4,diag=4,seg=4,seg_bwd=4,fwd=8,fwd_inter=8,inter_q=8,inter_kv=8" is
# for tuning runs
_WARP_KEYS = ("ut", "prep", "block", "intra", "diag", "seg", "seg_bwd", "fwd", "fwd_inter", "inter_q", "inter_kv")


def _aux_warps(q, warps):
    """num_warps for the UT, prep, block chain-rule, intra-segment and segment-product kernels, and for
    the attention kernels (forward, inter-segment query and key sides: ``warps`` from ``_config``)."""
    cuda8 = q.device.type == "cuda" and torch.cuda.get_device_capability(q.device)[0] >= 8
    D = q.shape[-1]
    half = q.dtype != torch.float32
    if cuda8 and D >= 128 and half:
        # v7 (H200, benchmarks/HISTORY.md): one warpgroup per 64-row tile for the forward, the query
        # side and the intra kernel (forward 13.7 -> 10.0 ms, query side 18.1 -> 12.5 ms at T = 16384);
        # v8: two warpgroups for the 128-row tiles of the query side (12.5 -> 10.6 ms) and of the
        # forward's earlier segments (_fwd_inter_kernel at 4 warps: 10.7 ms, at 8: 5.9 ms)
        # v10: the backward's segment chain (_seg_bwd_kernel) at 4 warps (1.72 -> 1.16 ms at T = 1024)
        out = dict(ut=4, prep=4, block=4, intra=4, seg=8, seg_bwd=4, fwd=4, fwd_inter=8, inter_q=8, inter_kv=8)
    elif cuda8 and D >= 128:
        out = dict(ut=4, prep=4, block=4, intra=8, seg=8)
    elif cuda8 and D >= 64 and half:
        out = dict(ut=4, prep=4, block=4, intra=4, seg=4)
    elif cuda8 and D >= 64:  # float32 (tf32x3): at 4 warps ptxas gives the intra / block kernels a 10 KB stack
        out = dict(ut=4, prep=4, block=8, intra=8, seg=4)
    else:
        out = {key: warps for key in _WARP_KEYS}
    for key in ("fwd", "inter_q", "inter_kv"):
        out.setdefault(key, warps)
    out.setdefault("fwd_inter", out["fwd"])
    out.setdefault("diag", out["intra"])
    out.setdefault("seg_bwd", out["seg"])
    spec = os.environ.get("PATH_KERNELS_WARPS", "")
    for item in filter(None, spec.split(",")):
        key, _, val = item.partition("=")
        if key.strip() not in _WARP_KEYS or val.strip() not in ("1", "2", "4", "8", "16"):
            raise ValueError(f"PATH_KERNELS_WARPS: expected items like 'prep=4' with keys {_WARP_KEYS}, got {item!r}")
        out[key.strip()] = int(val)
    return out


def _block_prec(q):
    """Dot precision of the per-block products other than the UT solve: tf32 for half-precision inputs
    (the same 10-bit mantissa as the fp16 transports of the attention kernels), float32 accuracy
    (tf32x3 / ieee) for float32 inputs. v6: the backward's segment and block kernels work on row
    blocks / column chunks (``_seg_split``, ``_block_cols``), so tf32 fits at D = 128 too (v5 kept
    tf32x3 there: whole ``D x D`` float32 operands needed 320-360 KB of shared memory)."""
    if q.dtype == torch.float32:
        return _fp32_prec(q)
    return "tf32"


# how the backward splits its D x D segment matrices (rows of the carried gradient per program of
# _seg_bwd_kernel, columns per chunk in _seg_grad_kernel) and the head dim of _bwd_block_kernel (columns
# per chunk), by head dim; from the AOT compiles and H200 timings in benchmarks/HISTORY.md (v6).
# Module-level so that the CPU tests can split small head dims too; the override
# PATH_KERNELS_SPLIT="seg_split=32,block_cols=32,diag_cols=32,key_rows=128,query_rows=128,fwd_rows=128" is for
# tuning runs
_SEG_SPLIT = {128: 32}
_BLOCK_COLS = {64: 32, 128: 32}
# head-dim columns per chunk of _bwd_diag_kernel for half-precision inputs at BT = 64, by head dim; other
# configurations (float32, smaller blocks) take at most 64. v10, H200: 64 columns 1.88 ms at D = 128,
# T = 1024, 32 columns 1.93, 16 columns 2.67, whole 128-column tiles 2.49; v16, with W and T W in the
# transport dtype (v14): whole 128-column tiles are the faster, forward+backward 23.53 -> 23.25 ms at
# T = 4096, 15.34 -> 15.08 at T = 1024, 46.06 -> 45.77 at T = 16384 (benchmarks/HISTORY.md)
_DIAG_COLS = {64: 64, 128: 128}
# rows per program of _bwd_inter_kv_kernel (keys), _bwd_inter_q_kernel (queries) and _fwd_inter_kernel
# (the forward's earlier segments) for half-precision inputs (a multiple of BT whose blocks tile the
# segments and the sequence, else one block), by head dim (H200, benchmarks/HISTORY.md, v8: at D = 64
# 128 key rows doubled the key side's time and 128 query rows did not change the query side's)
_KEY_ROWS = {128: 128}
_QUERY_ROWS = {128: 128}
_FWD_ROWS = {64: 128, 128: 128}
_ROW_KEYS = ("key_rows", "query_rows", "fwd_rows")
_SPLIT_KEYS = ("seg_split", "block_cols", "diag_cols") + _ROW_KEYS


def _split_override(key: str, D: int):
    spec = os.environ.get("PATH_KERNELS_SPLIT", "")
    for item in filter(None, spec.split(",")):
        name, _, val = item.partition("=")
        val = val.strip()
        if name.strip() not in _SPLIT_KEYS or val not in ("16", "32", "64", "128"):
            raise ValueError("PATH_KERNELS_SPLIT: expected items like 'seg_split=32' with keys "
                             f"{_SPLIT_KEYS} and values 16, 32, 64 or 128, got {item!r}")
        if name.strip() == key:
            return int(val) if key in _ROW_KEYS else min(int(val), D)
    return None


def _rows(key: str, table: dict, D: int, BT: int, SB: int, NB: int, half: bool) -> int:
    """The table's rows at ``BT = 64`` (the big-shared-memory configuration they were measured at;
    smaller blocks, i.e. GPUs with less shared memory, keep one block per program), or the override."""
    rows = _split_override(key, D) or (table.get(D, BT) if half and BT == 64 else BT)
    nblk = rows // BT
    if rows % BT or nblk < 1 or SB % nblk or NB % nblk:
        return BT
    return rows


def _key_rows(D: int, BT: int, SB: int, NB: int, half: bool) -> int:
    """Key rows per program of ``_bwd_inter_kv_kernel``: ``_KEY_ROWS`` (half-precision inputs) when it is
    a multiple of ``BT`` whose blocks tile both the segment and the sequence, else ``BT``."""
    return _rows("key_rows", _KEY_ROWS, D, BT, SB, NB, half)


def _query_rows(D: int, BT: int, SB: int, NB: int, half: bool) -> int:
    """Query rows per program of ``_bwd_inter_q_kernel`` (``_QUERY_ROWS``), under the same rule."""
    return _rows("query_rows", _QUERY_ROWS, D, BT, SB, NB, half)


def _fwd_rows(D: int, BT: int, SB: int, NB: int, half: bool) -> int:
    """Query rows per program of ``_fwd_inter_kernel`` (``_FWD_ROWS``), under the same rule; ``BT``
    means no split (``_fwd_kernel`` does the earlier segments itself)."""
    return _rows("fwd_rows", _FWD_ROWS, D, BT, SB, NB, half)


def _seg_split(D: int) -> int:
    """Rows of the carried ``D x D`` gradient per program of ``_seg_bwd_kernel``, and columns per chunk
    in ``_seg_grad_kernel`` (divides D)."""
    return _split_override("seg_split", D) or _SEG_SPLIT.get(D, D)


def _block_cols(D: int) -> int:
    """Head-dim columns per chunk of ``_bwd_block_kernel`` (divides D)."""
    return _split_override("block_cols", D) or _BLOCK_COLS.get(D, D)


def _diag_cols(D: int, BT: int = 64, half: bool = True) -> int:
    """Head-dim columns per chunk of ``_bwd_diag_kernel`` (divides D): ``_DIAG_COLS`` for half-precision
    inputs at ``BT = 64``, at most 64 otherwise, or the override."""
    cols = _DIAG_COLS.get(D, D)
    return _split_override("diag_cols", D) or (cols if half and BT == 64 else min(cols, 64))


def _fp32_prec(q):
    return "tf32x3" if q.device.type == "cuda" and torch.cuda.get_device_capability(q.device)[0] >= 8 else "ieee"


def _forward_impl(q, k, v, w, beta, G, scale, BT, SB, warps):
    """Forward kernels; returns o and the tensors the backward needs."""
    kern = _triton()
    B, T, HQ, D = q.shape
    HK = k.shape[2]
    NB = T // BT
    NS = -(-NB // SB)
    CDT, TDT, PREC, cdt = _dtypes(q)
    wf, bf = w.float().contiguous(), beta.float().contiguous()
    aux = _aux_warps(q, warps)
    pre = _precompute(k, wf, bf, BT, SB, cdt, _block_prec(q), _fp32_prec(q), aux)
    o = torch.empty_like(q)
    lse = torch.empty(B, HQ, T, dtype=torch.float32, device=q.device)
    # the query states at their segment's start: the backward reads them only in the input dtype
    q0 = torch.empty(B, T, HQ, D, dtype=cdt, device=q.device)
    Gh = G.transpose(1, 2).contiguous() if G is not None else lse
    # earlier segments on FR query rows per program in a second kernel (v8), from the partial results
    # of the rows outside the first segment (float32, freed on return)
    FR = _fwd_rows(D, BT, SB, NB, q.dtype != torch.float32) if NS > 1 else BT
    op = torch.empty(B, T, HQ, D, dtype=torch.float32, device=q.device) if FR > BT else o
    meta = dict(HQ=HQ, HK=HK, D=D, BT=BT, HAS_G=G is not None, CDT=CDT, PREC=PREC)
    _launch(kern._fwd_kernel, (NB, B * HQ),
            (q, k, v, wf, pre["TW"], pre["KA"], pre["KS"], pre["TM"], pre["MM"], pre["OM"],
             Gh, o, lse, q0, op, scale, T, NB, NS, SB),
            dict(meta, TDT=TDT, SEGS=NS > 1, SPLIT=FR > BT, num_warps=aux["fwd"]), _stages(q, "fwd"))
    if FR > BT:
        _launch(kern._fwd_inter_kernel, (NB // (FR // BT), B * HQ),
                (q0, pre["KS"], v, pre["OM"], Gh, o, lse, op, scale, T, NB, NS, SB),
                dict(meta, QR=FR, num_warps=aux["fwd_inter"]), _stages(q, "fwd_inter"))
    del op
    saved = (q, k, v, wf, bf, Gh if G is not None else None, o, lse, q0,
             pre["TW"], pre["KA"], pre["KS"], pre["TM"], pre["MM"], pre["NM"], pre["RS"], pre["SEG"], pre["OM"])
    return o, saved


def _backward_impl(saved, do, scale, BT, SB, warps, has_g):
    """Backward kernels and the float32 segment chain; returns (dq, dk, dv, dw, dbeta, dG)."""
    kern = _triton()
    (q, k, v, wf, bf, Gh, o, lse, q0, TW, KA, KS, TM, MM, NM, RS, SEG, OM) = saved
    B, T, HQ, D = q.shape
    HK = k.shape[2]
    grp = HQ // HK
    NB = T // BT
    NS = -(-NB // SB)
    CDT, TDT, PREC, cdt = _dtypes(q)
    # gradients flow through the transport matmuls of the backward: keep them in the input dtype
    # (bf16's range), not the forward's fp16, where the ~1e-6 gradients of a mean-reduced loss would
    # be subnormal (relative precision lost)
    TDT = CDT
    dev = q.device
    do = do.contiguous()
    f32 = dict(dtype=torch.float32, device=dev)
    delta = torch.empty(B, HQ, T, **f32)  # do . o per query row
    _run(kern._delta_kernel, (NB, B * HQ), (do, o, delta, T), dict(HQ=HQ, D=D, BT=BT, num_warps=4, num_stages=1))
    dq0 = torch.empty(B, T, HQ, D, **f32)
    dseg = torch.zeros(B, HQ, NS, D, D, **f32)
    dg = torch.zeros(B, HQ, T, **f32)
    KR = _key_rows(D, BT, SB, NB, q.dtype != torch.float32)
    # gradient of Kseg (segment kernels only), written by the key side
    dks = torch.empty(B, T, HQ, D, **f32) if NS > 1 else None
    dv = torch.empty(B, T, HQ, D, **f32)
    dq = torch.empty(B, T, HQ, D, dtype=q.dtype, device=dev)  # written once, by the diagonal kernel
    dk = torch.empty(B, T, HQ, D, **f32)
    # dK->, dW and d(T W) (v13) of the own-segment pairs, accumulated by the intra kernel (zeroing them
    # there, at a block's first touch or before its loop, timed no faster: benchmarks/HISTORY.md, v13)
    dka = torch.zeros(B, T, HQ, D, **f32)
    dw = torch.zeros(B, T, HQ, D, **f32)
    dtwq = torch.zeros(B, T, HQ, D, **f32)
    dt = torch.empty(B, HQ, NB, BT, BT, **f32)  # written once, by the diagonal kernel
    # the intra kernel's query states, in the dtype of the products that read them
    scr = torch.empty(B, HQ, NS, SB * BT, D, dtype=q.dtype, device=dev)
    Garg = Gh if has_g else lse
    # W and T W for the intra and diagonal kernels in the backward's transport dtype (v14): each of
    # their products rounds them to it anyway, so the copies change no result and halve those loads
    wt, twt = (wf, TW) if q.dtype == torch.float32 else (wf.to(q.dtype), TW.to(q.dtype))
    meta = dict(HQ=HQ, HK=HK, D=D, BT=BT, HAS_G=has_g, CDT=CDT, TDT=TDT, PREC=PREC)
    aux = _aux_warps(q, warps)
    if NS > 1:
        # the segment and pair products likewise (v15): the inter kernels use them only rounded to the
        # transport dtype
        segt, omt = (SEG, OM) if q.dtype == torch.float32 else (SEG.to(q.dtype), OM.to(q.dtype))
        QR = _query_rows(D, BT, SB, NB, q.dtype != torch.float32)
        _launch(kern._bwd_inter_q_kernel, (NB // (QR // BT), B * HQ),
                (q0, KS, v, Garg, do, lse, delta, segt, omt, dq0, dseg, dg, scale, T, NB, NS, SB),
                dict(meta, DC=_seg_split(D), QR=QR, num_warps=aux["inter_q"]), _stages(q, "inter_q"))
        _launch(kern._bwd_inter_kv_kernel, (NB // (KR // BT), B * HQ),
                (q0, KS, v, Garg, do, lse, delta, omt, dks, dv, dg, scale, T, NB, NS, SB),
                dict(meta, KR=KR, DC=_seg_split(D), num_warps=aux["inter_kv"]), _stages(q, "inter_kv"))
        del segt, omt
    else:  # single segment: every pair is inside the segment (intra kernel)
        dq0.zero_()
        dv.zero_()
    meta.update(num_stages=1)
    _run(kern._bwd_intra_kernel, (NS, B * HQ),
         (q, v, wt, twt, KA, Garg, do, lse, delta, dq0, scr,
          dka, dv, dw, dtwq, dg, scale, T, NB, NS, SB), dict(meta, num_warps=aux["intra"]))
    del scr
    # the diagonal blocks, in parallel (v10; inside the intra kernel's sequential loop before)
    _run(kern._bwd_diag_kernel, (NB, B * HQ),
         (q, k, v, wt, twt, TM, MM, Garg, do, lse, delta, dq0, dq, dk, dv, dw, dt, dg, scale, T, NB),
         dict(meta, DC=_diag_cols(D, BT, q.dtype != torch.float32), num_warps=aux["diag"]))
    del dq0, wt, twt
    if grp > 1:
        dv = dv.view(B, T, HK, grp, D).sum(3)
        if NS > 1:
            dks = dks.view(B, T, HK, grp, D).sum(3)
            dseg = dseg.view(B, HK, grp, NS, D, D).sum(2)
    # chain through Kseg = K-> R^T and Seg = R_0 P_0 (segment suffix products); none for one segment
    bprec = _block_prec(q)
    if NS > 1:
        dks = dks.contiguous()
        XS = torch.empty(B, HK, NB, D, D, **f32)
        DR = _seg_split(D)
        _run(kern._seg_bwd_kernel, (NS, B * HK, D // DR),
             (wf, TW, KA, dks, dseg.contiguous(), XS, T, NB, NS, SB),
             dict(HK=HK, D=D, BT=BT, DR=DR, PREC=bprec, num_warps=aux["seg_bwd"], num_stages=1))
        dka_c = torch.empty(B, T, HK, D, **f32)
        dtw_c = torch.empty(B, T, HK, D, **f32)
        dw_c = torch.empty(B, T, HK, D, **f32)
        _run(kern._seg_grad_kernel, (NB, B * HK),
             (wf, TW, dks, RS, XS, dka_c, dtw_c, dw_c, T, NB),
             dict(HK=HK, D=D, BT=BT, DC=DR, PREC=bprec, num_warps=aux["seg"], num_stages=1))
        del XS
    else:
        dka_c = dtw_c = dw_c = dka  # not read (SEGS=False)
    dk_out = torch.empty_like(k)
    dw_out = torch.empty(B, T, HK, D, **f32)
    db_out = torch.empty(B, T, HK, **f32)
    _run(kern._bwd_block_kernel, (NB, B * HK),
         (k, wf, bf, TW, TM, MM, NM, dka_c, dtw_c, dw_c, dka, dk, dw, dt, dtwq, dk_out, dw_out, db_out, T, NB, grp),
         dict(HQ=HQ, HK=HK, D=D, BT=BT, DC=_block_cols(D), PREC=bprec, SEGS=NS > 1,
              num_warps=aux["block"], num_stages=1))
    dG = dg.transpose(1, 2) if has_g else None
    return dq, dk_out, dv.to(v.dtype), dw_out, db_out, dG


def _is_oor(e: Exception) -> bool:
    import triton
    return isinstance(e, triton.runtime.errors.OutOfResources)


def _next_config(q, BT, SB):
    """After an out-of-resources error at (BT, SB): half the block length down to 16, then a single
    segment (no ``D x D`` segment products in the kernels: less shared memory, less parallelism).
    Remembered per device/dtype/D. Returns None when nothing smaller is left."""
    T, D = q.shape[1], q.shape[-1]
    key = (str(q.device), q.dtype, D)
    if BT > 16:
        _MAX_BT[key] = BT // 2
        return BT // 2, _segments(T // (BT // 2), BT // 2, D)
    if -(-(T // BT) // SB) > 1:
        _ONE_SEGMENT.add(key)
        return BT, max(1, T // BT)
    return None


def _no_fit(q, e):
    D = q.shape[-1]
    dt = str(q.dtype).replace("torch.", "")
    return RuntimeError(f"PaTH kernels: head dim {D} in {dt} does not fit this GPU's shared memory even with "
                        f"16-token blocks and one segment ({e}); use float16 or a smaller head dim here")


def _retry_smaller(q, BT, SB, attempt):
    """Run ``attempt(BT, SB)``; if a kernel does not fit the device's shared memory (an
    ``OutOfResources`` at launch), retry with the next smaller configuration. Returns
    ``(result, BT, SB)`` with the configuration that ran."""
    while True:
        try:
            return attempt(BT, SB), BT, SB
        except Exception as e:
            if not _is_oor(e):
                raise
            nxt = _next_config(q, BT, SB)
            if nxt is None:
                raise _no_fit(q, e) from e
            BT, SB = nxt


class _PathAttnFn(torch.autograd.Function):
    """Autograd wrapper over padded inputs (T a multiple of BT). If a kernel does not fit the device's
    shared memory (an ``OutOfResources`` at launch, before any work), the block length is halved and the
    pass redone (the backward then recomputes the forward factors at the smaller block length)."""

    @staticmethod
    def forward(ctx, q, k, v, w, beta, G, scale, BT, SB, warps):
        (o, saved), BT, SB = _retry_smaller(
            q, BT, SB, lambda bt, sb: _forward_impl(q, k, v, w, beta, G, scale, bt, sb, warps))
        ctx.save_for_backward(*saved)
        ctx.cfg = (scale, BT, SB, warps, G is not None)
        return o

    @staticmethod
    def backward(ctx, do):
        saved = ctx.saved_tensors
        scale, BT, SB, warps, has_g = ctx.cfg
        q, k, v, wf, bf, Gh = saved[:6]
        def attempt(bt, sb):
            cur = saved
            if (bt, sb) != (BT, SB):  # a smaller block: recompute the forward factors at its size
                G = Gh.transpose(1, 2) if has_g else None
                cur = _forward_impl(q, k, v, wf, bf, G, scale, bt, sb, warps)[1]
            return _backward_impl(cur, do, scale, bt, sb, warps, has_g)

        grads, _, _ = _retry_smaller(q, BT, SB, attempt)
        return (*grads, None, None, None, None)


# ----------------------------------------------------------------------------------------------
# public entry points
# ----------------------------------------------------------------------------------------------

def _check_device(q: torch.Tensor):
    if q.device.type == "cuda":
        major, _ = torch.cuda.get_device_capability(q.device)
        if q.dtype == torch.bfloat16 and major < 8:
            raise TypeError("q, k, v in bfloat16 need a GPU of compute capability >= 8.0 "
                            f"(this one is {torch.cuda.get_device_name(q.device)}); use float16")
        return
    if q.device.type == "cpu" and _interpret():
        if q.dtype != torch.float32:
            raise TypeError("on the CPU (TRITON_INTERPRET=1) the kernels run in float32 only, "
                            f"got q in {str(q.dtype).replace('torch.', '')}")
        return
    raise ValueError(f"the Triton kernels need a CUDA tensor (or TRITON_INTERPRET=1 on the CPU), "
                     f"got q on {q.device}")


def _check_cu_seqlens(cu_seqlens, B, T, device):
    if not isinstance(cu_seqlens, torch.Tensor):
        raise TypeError(f"cu_seqlens must be a torch.Tensor, got {type(cu_seqlens).__name__}")
    if cu_seqlens.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"cu_seqlens must be int32 (or int64), got {str(cu_seqlens.dtype).replace('torch.', '')}")
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
        raise ValueError(f"cu_seqlens must be 1-D with N + 1 >= 2 entries, got shape {tuple(cu_seqlens.shape)}")
    if B != 1:
        raise ValueError(f"with cu_seqlens the batch size must be 1 (sequences packed along T), got B={B}")
    cs = cu_seqlens.detach().to("cpu", torch.int64)
    if int(cs[0]) != 0 or int(cs[-1]) != T:
        raise ValueError(f"cu_seqlens must start at 0 and end at T={T}, got {int(cs[0])} ... {int(cs[-1])}")
    if bool((cs[1:] < cs[:-1]).any()):
        raise ValueError("cu_seqlens must be non-decreasing")
    return cs


def _validate(q, k, v, w, beta, g, scale, check_values):
    check_tensor(q, "q", ndim=4, dtypes=_QDTYPES, finite=False)
    if check_values:
        B, T, Hq, Hk, D = check_qkv(q, k, v, head_dims=HEAD_DIMS)
    else:  # shapes and dtypes only (no device sync): check empty time slices, then the lengths
        for name, x in (("k", k), ("v", v)):
            if isinstance(x, torch.Tensor) and x.dim() == 4 and x.shape[1] != q.shape[1]:
                raise ValueError(f"{name} must have time length {q.shape[1]} like q, got {tuple(x.shape)}")
        B, T, Hq, Hk, D = check_qkv(q[:, :0], k[:, :0], v[:, :0], head_dims=HEAD_DIMS)
        T = q.shape[1]
    if v.shape[3] != D:
        raise ValueError(f"v must have head dim {D} like q (the kernels need Dv == D), got {v.shape[3]}")
    check_path_params(q, k, w, beta, g, param_dtypes=(torch.float32,), check_values=check_values)
    scale = check_scale(scale, D)
    _check_device(q)
    return B, T, Hq, Hk, D, scale


def _gate_cumsum(g):
    """``G = cumsum(g)`` over time, ``[B, T, H]`` float32 (a view), summed along the contiguous last dim
    of a ``[B, H, T]`` copy: torch's scan along the strided time dim of ``[B, T, H]`` runs only B * H
    scans in parallel (v10 profile: 5.6 ms of PaTH-FoX's 15.4 ms forward at D = 128, T = 16384, 8.5 ms
    with its backward), and the kernels read the gates as ``[B, H, T]`` anyway."""
    return torch.cumsum(g.float().transpose(1, 2).contiguous(), dim=-1).transpose(1, 2)


def _pad_time(x, Tp):
    T = x.shape[1]
    if Tp == T:
        return x.contiguous()
    pad = [0, 0] * (x.dim() - 2) + [0, Tp - T]
    return torch.nn.functional.pad(x, pad).contiguous()


def _pad_head_dim(q) -> bool:
    """Run head dim 32 as 64 (zero-padded q, k, v, w) on Hopper (compute capability 9.x).

    Triton 3.6's Hopper (wgmma) code for ``_bwd_intra_kernel`` at D = 32 (4 warps) faults with an
    illegal memory access on an H200 (sweep v2; located in v3 with ``PATH_KERNELS_SYNC=1``), while the
    kernels at D = 64 / 128 run clean and every access of the D = 32 kernels is in bounds under the
    interpreter's bounds checker (``tests/kernel_bounds.py``): a compiler-side fault (cf.
    triton-lang/triton#11366, an IMA on sm_90 for BLOCK_D = 32 with num_warps = 4 and several dots). Zero dims change nothing: ``q.k``, ``w``'s
    unit norm and the transforms act on the first 32 dims only, ``v``'s extra dims give zero outputs.
    ``PATH_KERNELS_PAD_D32=0`` / ``1`` forces it off / on (diagnosis, CPU tests)."""
    if q.shape[-1] != 32:
        return False
    env = os.environ.get("PATH_KERNELS_PAD_D32", "")
    if env != "":
        return env != "0"
    return q.device.type == "cuda" and torch.cuda.get_device_capability(q.device)[0] == 9


def path_attention(q, k, v, w, beta, g=None, *, scale=None, cu_seqlens=None, check_values: bool = True,
                   block_size: Optional[int] = None, seg_blocks: Optional[int] = None) -> torch.Tensor:
    """Causal PaTH attention (PaTH-FoX with a gate) with Triton kernels; differentiable in every input.

    Args:
        q: ``[B, T, Hq, D]`` float16 / bfloat16 / float32, ``D`` in {32, 64, 128}.
        k, v: ``[B, T, Hk, D]``, q's dtype; ``Hq % Hk == 0`` (query head h uses key head h // (Hq // Hk)).
        w: ``[B, T, Hk, D]`` float32, unit rows.  beta: ``[B, T, Hk]`` float32 in [0, 2].
        g: optional ``[B, T, Hq]`` float32 log forget gates (<= 0), added unscaled (``+ G_i - G_j``).
        scale: logit scale, default ``D ** -0.5``.
        cu_seqlens: optional int32 ``[N + 1]`` sequence offsets (FlashAttention convention, B == 1,
            sequences packed along T); neither attention nor transforms cross a boundary.
        check_values: check finiteness, beta range and unit w (a device sync); shapes/dtypes always.
        block_size, seg_blocks: override the block length and the blocks per segment (tests). Without
            them, a call that records no gradient (``torch.no_grad()``, inference) may use longer
            segments than one that does (``_FWD_ONLY_SEG_BLOCKS``): the same result, a faster forward.
    Returns:
        ``[B, T, Hq, D]`` in q's dtype.
    """
    B, T, Hq, Hk, D, scale = _validate(q, k, v, w, beta, g, scale, check_values)
    if T == 0:
        return q.new_zeros(B, 0, Hq, D)
    # no gradient will be asked for: the segment length may suit the forward alone (_config)
    fwd_only = not (torch.is_grad_enabled() and any(x is not None and x.requires_grad
                                                    for x in (q, k, v, w, beta, g)))
    if _pad_head_dim(q):  # D = 32 as D = 64 (see _pad_head_dim); scale stays 32 ** -0.5
        pad = lambda x: torch.nn.functional.pad(x, (0, 64 - D))  # noqa: E731
        o = path_attention(pad(q), pad(k), pad(v), pad(w), beta, g, scale=scale, cu_seqlens=cu_seqlens,
                           check_values=False, block_size=block_size, seg_blocks=seg_blocks)
        return o[..., :D].contiguous()
    if cu_seqlens is not None:
        cs = _check_cu_seqlens(cu_seqlens, B, T, q.device)
        lens = (cs[1:] - cs[:-1]).tolist()
        Tmax = max(max(lens), 1)
        BT, SB, warps = _config(D, Tmax, q.dtype, q.device, block_size, seg_blocks, fwd_only)
        Tp = -(-Tmax // BT) * BT
        Nseq = len(lens)
        # gather index into [N, Tp]: packed row, or T (a zero row appended) for padding
        idx = torch.full((Nseq, Tp), T, dtype=torch.long)
        for i, (s0, L) in enumerate(zip(cs[:-1].tolist(), lens)):
            idx[i, :L] = torch.arange(s0, s0 + L)
        idx = idx.to(q.device)

        def pack(x):
            ext = torch.cat([x[0], x.new_zeros(1, *x.shape[2:])], 0)
            return ext[idx].contiguous()
        qp, kp, vp, wp, bp = pack(q), pack(k), pack(v), pack(w), pack(beta)
        Gp = _gate_cumsum(pack(g)) if g is not None else None
        op = _PathAttnFn.apply(qp, kp, vp, wp, bp, Gp, scale, BT, SB, warps)
        valid = (idx < T).reshape(-1)
        return op.reshape(Nseq * Tp, Hq, D)[valid].unsqueeze(0)
    BT, SB, warps = _config(D, T, q.dtype, q.device, block_size, seg_blocks, fwd_only)
    Tp = -(-T // BT) * BT
    G = _gate_cumsum(g) if g is not None else None
    args = [_pad_time(x, Tp) for x in (q, k, v, w, beta)]
    Gp = _pad_time(G, Tp) if G is not None else None
    if G is not None and Tp > T:  # keep the padded tail's G finite (it only meets padded rows)
        Gp = Gp.clone()
        Gp[:, T:] = G[:, T - 1:T]
    o = _PathAttnFn.apply(*args, Gp, scale, BT, SB, warps)
    return o[:, :T] if Tp > T else o


def transform_keys_to_end(k, w, beta, cu_seqlens=None, *, check_values: bool = True) -> torch.Tensor:
    """Keys moved to the end of their sequence, ``k_j -> H_{T-1} ... H_{j+1} k_j`` (prefill before
    decoding: the cache then holds keys transformed to the current position).

    Args:
        k: ``[B, T, Hk, D]``; w: ``[B, T, Hk, D]`` float32 unit rows; beta: ``[B, T, Hk]`` float32 in [0, 2].
        cu_seqlens: optional int32 ``[N + 1]`` (B == 1): each key moves to the end of its own sequence.
    Returns:
        ``[B, T, Hk, D]`` in k's dtype; no gradient. On CUDA (and under ``TRITON_INTERPRET=1``) the
        forward's Triton kernels do the per-block and per-segment work (UT transforms, keys moved to
        their segment's end, segment products: O(T D^2 / BT) in float32 accuracy, the moved keys stored
        in k's dtype) and the ``NS`` segment products are chained in torch; elsewhere, or where a kernel
        does not fit the device, the same computation block by block in float32 torch.
    """
    check_tensor(k, "k", ndim=4, dtypes=_QDTYPES)
    check_path_params(k, k, w, beta, None, param_dtypes=(torch.float32,), check_values=check_values)
    B, T, H, D = k.shape
    if T == 0:
        return k.clone()
    with torch.no_grad():
        if cu_seqlens is not None:
            cs = _check_cu_seqlens(cu_seqlens, B, T, k.device)
            out = torch.empty_like(k)
            for s0, s1 in zip(cs[:-1].tolist(), cs[1:].tolist()):
                if s1 > s0:
                    out[:, s0:s1] = transform_keys_to_end(k[:, s0:s1], w[:, s0:s1], beta[:, s0:s1],
                                                          check_values=False)
            return out
        if k.device.type == "cuda" or (k.device.type == "cpu" and _interpret() and k.dtype == torch.float32):
            _check_device(k)
            try:
                return _keys_to_end_triton(k, w, beta)
            except Exception as e:  # a kernel that does not fit the device: the torch path below
                if not _is_oor(e):
                    raise
        return _keys_to_end_torch(k, w, beta)


def _suffix_chain(Seg):
    """``suf_s = Seg_{NS-1} ... Seg_{s+1}`` (identity for the last segment) from ``[B, H, NS, D, D]``."""
    B, H, NS, D, _ = Seg.shape
    suf = [None] * NS
    suf[NS - 1] = torch.eye(D, dtype=Seg.dtype, device=Seg.device).expand(B, H, D, D)
    for s in range(NS - 2, -1, -1):
        suf[s] = suf[s + 1] @ Seg[:, :, s + 1]
    return suf


def _keys_to_end_triton(k, w, beta):
    """``transform_keys_to_end`` on the forward's kernels: ``_precompute`` (at least two segments, so
    that it moves the keys to their segment's end), then each segment's keys times its suffix chain."""
    B, T, H, D = k.shape
    BT, _, warps = _config(D, T, k.dtype, k.device, None, None)
    Tp = -(-T // BT) * BT
    NB = Tp // BT
    kp = _pad_time(k, Tp)
    wf, bf = _pad_time(w.float(), Tp), _pad_time(beta.float(), Tp)
    if NB == 1:  # one block: its keys at the block's end are at the sequence's end
        SB = 1
    else:
        SB = min(_segments(NB, BT, D), -(-NB // 2))
    _, _, PREC, cdt = _dtypes(k)
    pre = _precompute(kp, wf, bf, BT, SB, cdt, _block_prec(k), _fp32_prec(k), _aux_warps(k, warps))
    if NB == 1:
        return pre["KA"][:, :T].to(k.dtype)
    suf = _suffix_chain(pre["SEG"])
    out = torch.empty(B, Tp, H, D, dtype=k.dtype, device=k.device)
    L = SB * BT
    for s, m in enumerate(suf):  # keys of segment s: Kseg (R^T applied) times suf_s^T
        rows = slice(s * L, min((s + 1) * L, Tp))
        out[:, rows] = torch.einsum("bthd,bhed->bthe", pre["KS"][:, rows].float(), m).to(k.dtype)
    return out[:, :T]


def _keys_to_end_torch(k, w, beta):
    """``transform_keys_to_end`` block by block in float32 torch (any device)."""
    B, T, H, D = k.shape
    BT = 64 if T >= 64 else 16
    Tp = -(-T // BT) * BT
    kp, wp, bp = _pad_time(k, Tp), _pad_time(w, Tp), _pad_time(beta, Tp)
    NB = Tp // BT
    SB = max(1, int(math.ceil(math.sqrt(NB))))
    Wb, Kb = _blocks(wp, BT), _blocks(kp, BT)
    bb = bp.float().view(B, NB, BT, H).permute(0, 3, 1, 2)
    _, Tm, _ = _ut(Wb, bb)
    TW = Tm @ Wb
    KA = Kb - (Tm @ torch.tril(Wb @ Kb.transpose(-1, -2), -1)).transpose(-1, -2) @ Wb
    Ws, TWs, KAs = _seg_view(wp, BT, SB), _seg_view(_unblocks(TW), BT, SB), _seg_view(_unblocks(KA), BT, SB)
    R, Seg = _suffix_products(Ws, TWs)
    Kseg = torch.stack([KAs[:, :, :, j] @ R[j].transpose(-1, -2) for j in range(SB)], dim=3)
    # then across the later segments: suf_s = Seg_{NS-1} ... Seg_{s+1}
    Kend = Kseg @ torch.stack(_suffix_chain(Seg), 2)[:, :, :, None].transpose(-1, -2)
    return _seg_unview(Kend, NB)[:, :T].to(k.dtype)
