"""Helpers for the book's chapters only: they need IPython, pyyaml, matplotlib or ipywidgets
(``pip install path-attention-book[book]``). The library never imports them (chapters and tests do).

    notebook         device, pick_preset, optional_record (from path_lib.records), show_provenance, toc.
    widgets          interactive_figure: ipywidgets sliders live, static HTML sliders in the built book.
    viz              attention heat maps and small plotting helpers.
    speed            the speed chapter's tables and figures from the benchmark records (a package).
    kernel_diagrams  the kernel chapter's tile and segment diagrams.
    gloo_group       a CPU process group (gloo) and the scale-out chapter's context-parallel self-check.
    chapter_times    how long each page runs (CPU, GPU measured or estimated): notes and the table.
    progress         progress bars of long cells (text in the static build) and their expected T4 time.
"""
