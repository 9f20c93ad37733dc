"""``transform_keys_to_end``'s two computations: on the forward's kernels (``_precompute``, then
the segment products chained in torch) and block by block in float32 torch (any device; its block
helpers are also the oracle of the factor kernels' tests).
"""

from __future__ import annotations

import math

import torch

from ._config import _segments, kernel_config
from ._precompute import _pad_time, _precompute


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
        full[kc][kc - 1] = eye.expand(B, H, D, D)  # type: ignore[call-overload]  # None: not yet known
    for dist in range(1, NS - 1):  # Om(kc, kc-1-dist) = Om(kc, kc-dist) Seg_{kc-dist}
        kcs = list(range(dist + 1, NS))
        prev = torch.stack([full[kc][kc - dist] for kc in kcs], dim=2)  # type: ignore[misc]
        new = prev @ Seg[:, :, [kc - dist for kc in kcs]]
        for i, kc in enumerate(kcs):
            full[kc][kc - 1 - dist] = new[:, :, i]
    out = [full[kc][k] for kc in range(1, NS) for k in range(kc)]
    return torch.stack(out, dim=2).contiguous()  # type: ignore[arg-type]  # every entry set above


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
    BT = kernel_config(k.device, k.dtype, D, T).block
    NB = -(-T // BT)
    Tp = NB * BT
    kp = _pad_time(k, Tp)
    wf, bf = _pad_time(w.float(), Tp), _pad_time(beta.float(), Tp)
    if NB == 1:  # one block: its keys at the block's end are at the sequence's end
        SB = 1
    else:
        SB = min(_segments(NB, BT, D), -(-NB // 2))
    pre = _precompute(kp, wf, bf, kernel_config(k.device, k.dtype, D, T, block_size=BT, seg_blocks=SB))
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

