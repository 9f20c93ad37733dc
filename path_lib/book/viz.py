"""Small plotting helpers shared by the book's chapters (matplotlib only, no styling magic).

    from path_lib.book.viz import attention_heatmap, attention_grid, plot_complex, causal_softmax

    fig = attention_grid({"NoPE": P0, "PaTH": P1}, ncols=2)     # P: [T, T] attention weights
    fig, ax = plt.subplots(); plot_complex(ax, torch.linalg.eigvals(M))

Every function draws on axes it is given (or returns a new ``Figure``) and never calls ``plt.show``.
"""
from __future__ import annotations

import math
from typing import Mapping, Optional

import torch

__all__ = ["causal_softmax", "attention_heatmap", "attention_grid", "plot_complex"]


def causal_softmax(logits: torch.Tensor) -> torch.Tensor:
    """Row-wise softmax of ``[..., T, T]`` logits with the entries above the diagonal masked out."""
    T = logits.shape[-1]
    mask = torch.ones(T, T, dtype=torch.bool, device=logits.device).tril()
    return torch.softmax(logits.masked_fill(~mask, float("-inf")), dim=-1)


def _as_matrix(x) -> torch.Tensor:
    x = torch.as_tensor(x).detach().to("cpu", torch.float64)
    if x.dim() != 2:
        raise ValueError(f"expected a [T, T] matrix, got shape {tuple(x.shape)}")
    return x


def attention_heatmap(ax, weights, *, title: Optional[str] = None, causal: bool = True,
                      cmap: str = "viridis", vmin: Optional[float] = 0.0, vmax: Optional[float] = None,
                      colorbar: bool = False, ticks: bool = False):
    """Draw a ``[T, T]`` attention map (rows: queries i, columns: keys j) on ``ax``.

    With ``causal`` the entries above the diagonal are left blank (they do not exist).
    Returns the ``AxesImage``.
    """
    M = _as_matrix(weights).clone()
    if causal:
        M = M.masked_fill(~torch.ones_like(M, dtype=torch.bool).tril(), float("nan"))
    im = ax.imshow(M.numpy(), cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest")
    if title:
        ax.set_title(title, fontsize=9)
    if ticks:
        ax.set_xlabel("key j", fontsize=8)
        ax.set_ylabel("query i", fontsize=8)
        ax.tick_params(labelsize=7)
    else:
        ax.set_xticks([])
        ax.set_yticks([])
    if colorbar:
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return im


def attention_grid(maps: Mapping[str, torch.Tensor], *, ncols: int = 3, size: float = 2.0,
                   suptitle: Optional[str] = None, **heatmap_kwargs):
    """One heatmap per entry of ``maps`` (``title -> [T, T]``), side by side. Returns the Figure."""
    import matplotlib.pyplot as plt

    n = len(maps)
    if n == 0:
        raise ValueError("maps is empty")
    ncols = min(ncols, n)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(size * ncols, size * nrows + 0.3), squeeze=False)
    for ax, (name, M) in zip(axes.flat, maps.items()):
        attention_heatmap(ax, M, title=name, **heatmap_kwargs)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    if suptitle:
        fig.suptitle(suptitle, fontsize=10)
    fig.tight_layout()
    return fig


def plot_complex(ax, values, *, unit_circle: bool = True, lim: float = 1.25, **scatter_kwargs):
    """Scatter complex ``values`` (e.g. eigenvalues) in the complex plane, with the unit circle."""
    z = torch.as_tensor(values).detach().to("cpu")
    if not z.is_complex():
        z = z.to(torch.float64) + 0j
    z = z.to(torch.complex128).flatten()
    if unit_circle:
        s = torch.linspace(0, 2 * math.pi, 200, dtype=torch.float64)
        ax.plot(s.cos().numpy(), s.sin().numpy(), color="0.75", lw=1)
    ax.axhline(0, color="0.85", lw=0.8)
    ax.axvline(0, color="0.85", lw=0.8)
    kw = dict(s=18, color="C0", zorder=3)
    kw.update(scatter_kwargs)
    ax.scatter(z.real.numpy(), z.imag.numpy(), **kw)
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    ax.set_aspect("equal")
    ax.set_xlabel("Re", fontsize=8)
    ax.set_ylabel("Im", fontsize=8)
    ax.tick_params(labelsize=7)
    return ax
