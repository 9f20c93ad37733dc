"""Progress bars for the chapters' long cells, with the time such a cell is expected to take on a T4.

    from path_lib.book.progress import progress_bar, training_work, t4_seconds, expected_time_note

    work = [training_work(64, 1, 32, 128, 300, path=True)]
    print(expected_time_note(t4_seconds(work)))    # "Expected on a T4 (small preset): about 9 s ..."
    with progress_bar(6, "training") as bar:
        for run in runs:
            ...
            bar.update()

**The bar** (:func:`progress_bar`): ``tqdm.auto`` in Jupyter and Colab (a widget where ipywidgets
works, text otherwise). In the static site's build (``PATH_BOOK_STATIC=1``, or ``static=True``) a
widget would be saved as state that a static page cannot show, so :class:`TextBar` prints a few plain
lines instead (the start, every quarter and the end, each with the elapsed seconds).

**The expected time** (:func:`t4_seconds`, :func:`expected_time_note`): a cell's counted work, its
matrix-product operations, bytes moved and kernel launches (:func:`training_work`,
:func:`evaluation_work`), turned into seconds on a T4 by :func:`path_lib.hardware.estimate_seconds`.
No float16 GPU cell times have been measured for these cells yet, so the note says that the number is
an estimate from counted operations, not a measurement.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any, Iterable, Optional, Sequence, TextIO, Tuple

from ..hardware import estimate_seconds

__all__ = ["Work", "static_build", "TextBar", "progress_bar", "training_work", "evaluation_work",
           "t4_seconds", "expected_time_note"]

#: (matrix-product operations, bytes of memory traffic, kernel launches) of a piece of work.
Work = Tuple[float, float, float]


def static_build() -> bool:
    """Whether this runs in the static site's build (``PATH_BOOK_STATIC=1``)."""
    return os.environ.get("PATH_BOOK_STATIC", "").strip() not in ("", "0")


def _check_count(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


class TextBar:
    """A plain-text progress bar that prints at most ``lines + 1`` lines: one when it starts, one each
    time the count passes another ``1 / lines`` of ``total``, and one at the end, e.g.
    ``training: 3/6 (50%), 12 s``. Works wherever ``print`` does (a static page's cell output)."""

    def __init__(self, total: int, desc: str = "", *, lines: int = 4, file: Optional[TextIO] = None):
        self.total = _check_count("total", total, 1)
        self.lines = _check_count("lines", lines, 1)
        if not isinstance(desc, str):
            raise TypeError(f"desc must be a str, got {type(desc).__name__}")
        self.desc, self.file, self.n = desc, file, 0
        self._shown = 0                          # quarters (1 / lines) already printed
        self._t0 = time.perf_counter()
        self._closed = False
        self._print()

    def _print(self) -> None:
        elapsed = time.perf_counter() - self._t0
        head = f"{self.desc}: " if self.desc else ""
        print(f"{head}{self.n}/{self.total} ({100 * self.n / self.total:.0f}%), {elapsed:.0f} s",
              file=self.file if self.file is not None else sys.stdout, flush=True)

    def update(self, n: int = 1) -> None:
        """Count ``n`` more finished items (printing a line when another step of the bar is passed)."""
        _check_count("n", n, 0)
        self.n = min(self.total, self.n + n)
        step = self.n * self.lines // self.total
        if step > self._shown and self.n < self.total:
            self._shown = step
            self._print()
        elif self.n == self.total and not self._closed:
            self.close()

    def close(self) -> None:
        """Print the last line (once)."""
        if not self._closed:
            self._closed = True
            self._print()

    def __enter__(self) -> "TextBar":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def progress_bar(total: int, desc: str = "", *, static: Optional[bool] = None, file: Optional[TextIO] = None):
    """A progress bar over ``total`` items (``bar.update()`` after each, ``bar.close()`` or a ``with``
    block at the end): ``tqdm.auto.tqdm`` interactively, a :class:`TextBar` in the static build
    (``static``: default :func:`static_build`) or when tqdm is missing."""
    _check_count("total", total, 1)
    if not isinstance(desc, str):
        raise TypeError(f"desc must be a str, got {type(desc).__name__}")
    if static is None:
        static = static_build()
    if not static:
        try:
            from tqdm.auto import tqdm
        except ImportError:
            pass
        else:
            return tqdm(total=total, desc=desc, file=file)
    return TextBar(total, desc, file=file)


def _check_sizes(**sizes) -> None:
    for name, v in sizes.items():
        _check_count(name, v, 1)


def training_work(d_model: int, n_layers: int, batch: int, length: int, steps: int, *, vocab: int = 256,
                  path: bool = False) -> Work:
    """The counted work of ``steps`` AdamW steps of a TinyLM (width ``d_model``, ``n_layers`` layers,
    batches of ``batch`` sequences of ``length`` tokens): ``6 * params * tokens`` for the dense layers,
    ``3 * 4 * batch * length^2 * d_model`` per layer for attention (forward and backward; twice that for
    PaTH's transforms, ``path``), 60 activations of ``d_model`` float32 numbers per token and layer moved,
    the parameters 16 times per step (AdamW's state), 150 kernel launches per layer and 100 more per step."""
    _check_sizes(d_model=d_model, n_layers=n_layers, batch=batch, length=length, steps=steps, vocab=vocab)
    params = 12 * n_layers * d_model ** 2 + 2 * vocab * d_model
    tokens = batch * length
    flops = 6 * params * tokens + 12 * batch * length ** 2 * d_model * n_layers * (2 if path else 1)
    nbytes = 4 * (60 * n_layers * tokens * d_model + 16 * params)
    return float(steps * flops), float(steps * nbytes), float(steps * (150 * n_layers + 100))


def evaluation_work(d_model: int, n_layers: int, tokens: int, length: int, *, vocab: int = 256,
                    path: bool = False) -> Work:
    """The counted work of forward passes over ``tokens`` tokens in windows of ``length``: ``2 * params``
    operations per token plus ``4 * length * d_model`` per token and layer for attention (twice that for
    PaTH), 20 activations per token and layer moved, 50 launches per layer per 8192 tokens."""
    _check_sizes(d_model=d_model, n_layers=n_layers, tokens=tokens, length=length, vocab=vocab)
    params = 12 * n_layers * d_model ** 2 + 2 * vocab * d_model
    flops = 2 * params * tokens + 4 * tokens * length * d_model * n_layers * (2 if path else 1)
    return float(flops), float(4 * 20 * n_layers * tokens * d_model), float(max(1, tokens // 8192) * 50 * n_layers)


def t4_seconds(works: Iterable[Sequence[float]], *, precision: str = "fp32") -> float:
    """Estimated seconds of the summed ``works`` (each ``(flops, bytes, launches)``) on a T4, by
    :func:`path_lib.hardware.estimate_seconds` with the products at ``precision``."""
    total = [0.0, 0.0, 0.0]
    for w in works:
        if len(w) != 3:
            raise ValueError(f"works must hold (flops, bytes, launches) triples, got {w!r}")
        for i in range(3):
            total[i] += w[i]
    return estimate_seconds(total[0], total[1], total[2], gpu="t4", precision=precision)


def _about(seconds: float) -> str:
    return f"about {max(1, round(seconds))} s" if seconds < 99.5 else f"about {max(2, round(seconds / 60))} min"


def expected_time_note(t4_s: float, *, preset: str = "small", width: int = 78) -> str:
    """One sentence for beside a long cell's bar: its expected time on a T4 with the ``preset`` it runs
    there, labelled as an estimate from counted operations (no measured T4 time exists for it), in
    lines of at most ``width`` characters (a printed line must fit the page's code box)."""
    import textwrap

    if isinstance(t4_s, bool) or not isinstance(t4_s, (int, float)) or not t4_s >= 0 or t4_s == float("inf"):
        raise ValueError(f"t4_s must be a finite number of seconds >= 0, got {t4_s!r}")
    if not isinstance(preset, str):
        raise TypeError(f"preset must be a str, got {type(preset).__name__}")
    _check_count("width", width, 20)
    return textwrap.fill(f"Expected on a T4 ({preset} preset): {_about(t4_s)}, estimated from counted "
                         "operations (not a measurement).", width)
