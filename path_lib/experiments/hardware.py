"""Which size of an experiment this machine runs: the ``tiny`` preset on a CPU, the ``full`` one on CUDA.

    from path_lib.experiments.hardware import pick_preset
    cfg = pick_preset(tiny=dict(T=64, steps=200), full=dict(T=1024, steps=5000))

One rule for the library's experiment presets (:func:`path_lib.experiments.train.task_preset`) and the
book's chapters (which read it through :mod:`path_lib.book.notebook`): ``PATH_BOOK_PRESET=tiny`` or
``=full`` forces a choice (e.g. a quick look on a GPU), otherwise a visible CUDA device picks ``full``.
"""
from __future__ import annotations

import os
from typing import TypeVar

__all__ = ["device", "pick_preset", "hardware"]

P = TypeVar("P")


def device() -> str:
    """``"cuda"`` when a CUDA device is visible, else ``"cpu"``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def pick_preset(tiny: P, full: P) -> P:
    """The ``full`` preset on a CUDA machine, the ``tiny`` one on CPU (the book build, laptops).

    ``PATH_BOOK_PRESET=tiny`` or ``=full`` forces a choice; any other non-empty value is a ValueError.
    """
    forced = os.environ.get("PATH_BOOK_PRESET", "").strip().lower()
    if forced in ("tiny", "full"):
        return tiny if forced == "tiny" else full
    if forced:
        raise ValueError(f"PATH_BOOK_PRESET must be 'tiny' or 'full', got {forced!r}")
    return full if device() == "cuda" else tiny


def hardware() -> str:
    """``"full"`` on a CUDA machine, ``"tiny"`` otherwise (:func:`pick_preset`'s rule, by name)."""
    return pick_preset(tiny="tiny", full="full")
