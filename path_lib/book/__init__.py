"""Helpers for the book's chapters only: they need IPython, pyyaml, matplotlib or ipywidgets
(``pip install path-attention-book[book]``). The library never imports them (chapters and tests do).

    notebook         device, pick_preset, optional_record (from path_lib.records), show_provenance, toc.
    widgets          interactive_figure: ipywidgets sliders live, static HTML sliders in the built book.
    viz              attention heat maps and small plotting helpers.
    speed            the speed chapter's tables and figures from the benchmark records (a package).
    kernel_diagrams  the kernel chapter's tile and segment diagrams.
    gloo_group       a CPU process group (gloo) and the scale-out chapter's context-parallel self-check.
    reader           the reader copies in notebooks/ (MyST markup as the site's text), a Sphinx hook.
    style            the book's one figure style (150 dpi, font sizes), applied on import of this
                     package, so that every chapter gets it from the helper it imports first.
    chapter_times    how long each chapter runs, measured on a CPU and on GPUs: the intro's table, notes.
    api              the API reference's pages (book/api/) and their Sphinx extension.
    progress         progress bars of long cells (text in the static build) and their expected T4 time.
"""
from . import style as _style

_style.apply()
