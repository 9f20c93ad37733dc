"""Helpers for the book's chapters only: they need IPython, pyyaml, matplotlib or ipywidgets
(``pip install path-attention-book[book]``). Nothing outside ``path_lib/book`` imports them.

    notebook         device, pick_preset, recorded results (RECORDS, load_record, show_provenance), toc.
    widgets          interactive_figure: ipywidgets sliders live, static HTML sliders in the built book.
    viz              attention heat maps and small plotting helpers.
    speed            the speed chapter's tables and figures from the benchmark records.
    kernel_diagrams  the kernel chapter's tile and segment diagrams.
    chapter_times    how long each page runs (CPU, GPU measured or estimated): notes and the table.
"""
