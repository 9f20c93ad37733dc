"""Small plotting helpers shared by the book's chapters (matplotlib only; sizes from :mod:`.style`).

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


def _integer_ticks(ax) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(nbins=4, integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(nbins=4, integer=True))


def attention_heatmap(ax, weights, *, title: Optional[str] = None, causal: bool = True,
                      cmap: str = "viridis", vmin: Optional[float] = 0.0, vmax: Optional[float] = None,
                      colorbar: bool = True, label: str = "attention weight",
                      xlabel: Optional[str] = "key j", ylabel: Optional[str] = "query i"):
    """Draw a ``[T, T]`` attention map (rows: queries i, columns: keys j) on ``ax``, with labelled
    axes and, unless ``colorbar=False`` (a grid adds one for all panels), a colour bar named ``label``.

    With ``causal`` the entries above the diagonal are left blank (they do not exist). Font sizes
    come from the book's style (:mod:`path_lib.book.style`). Returns the ``AxesImage``.
    """
    M = _as_matrix(weights).clone()
    if causal:
        M = M.masked_fill(~torch.ones_like(M, dtype=torch.bool).tril(), float("nan"))
    im = ax.imshow(M.numpy(), cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest")
    if title:
        ax.set_title(title)
    if xlabel:
        ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    _integer_ticks(ax)
    if colorbar:
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label=label)
    return im


def attention_grid(maps: Mapping[str, torch.Tensor], *, ncols: int = 3, size: float = 2.4,
                   suptitle: Optional[str] = None, label: str = "attention weight", **heatmap_kwargs):
    """One heatmap per entry of ``maps`` (``title -> [T, T]``), side by side, on one colour scale
    (``vmin``/``vmax``, by default 0 and the largest entry of all maps) with one colour bar named
    ``label``; axes are labelled on the outer panels. Returns the Figure."""
    import matplotlib.pyplot as plt

    n = len(maps)
    if n == 0:
        raise ValueError("maps is empty")
    if "colorbar" in heatmap_kwargs:
        raise ValueError("attention_grid draws one colour bar for all panels: drop colorbar")
    ncols = min(ncols, n)
    nrows = math.ceil(n / ncols)
    kwargs = dict(heatmap_kwargs)
    if kwargs.get("vmax") is None:
        kwargs["vmax"] = max(float(torch.nan_to_num(_as_matrix(M)).max()) for M in maps.values())
    fig, axes = plt.subplots(nrows, ncols, figsize=(size * ncols + 1.0, (size + 0.35) * nrows + 0.3),
                             squeeze=False, layout="constrained")
    im = None
    for idx, (ax, (name, M)) in enumerate(zip(axes.flat, maps.items())):
        row, col = divmod(idx, ncols)
        last_row = row == nrows - 1 or idx + ncols >= n
        im = attention_heatmap(ax, M, title=name, colorbar=False,
                               xlabel="key j" if last_row else None,
                               ylabel="query i" if col == 0 else None, **kwargs)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    assert im is not None                  # maps is not empty
    fig.colorbar(im, ax=axes, shrink=0.8, label=label)
    if suptitle:
        fig.suptitle(suptitle)
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
    ax.set_xlabel("Re")
    ax.set_ylabel("Im")
    return ax
