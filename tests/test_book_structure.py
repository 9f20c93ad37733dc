"""Fast checks of the book's sources (no build needed): toc, notebooks, first cells, citations.

These catch, in a second, what would otherwise surface as a broken page or a silently
unbuilt chapter after a long build.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from path_lib.book.notebook import toc_files as _toc_files

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
REPO_URL = CONFIG["repository"]["url"]


def toc_files() -> list[str]:
    return _toc_files(ROOT)


def notebooks() -> list[Path]:
    skip = {"_build", "_templates", ".ipynb_checkpoints"}
    return sorted(p for p in BOOK.rglob("*.ipynb") if not skip & set(p.relative_to(BOOK).parts))


def source(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


NOTEBOOKS = notebooks()
NB_IDS = [str(p.relative_to(ROOT)) for p in NOTEBOOKS]


def test_toc_files_exist():
    missing = [f for f in toc_files()
               if not any((ROOT / f"{re.sub(r'[.](ipynb|md)$', '', f)}{ext}").exists() for ext in (".ipynb", ".md"))]
    assert not missing, f"_toc.yml lists files that do not exist: {missing}"


def test_every_notebook_is_in_the_toc():
    listed = {re.sub(r"[.](ipynb|md)$", "", f) for f in toc_files()}
    orphans = [n for n in NB_IDS if n.removesuffix(".ipynb") not in listed]
    assert not orphans, f"notebooks not in _toc.yml (they would not be built): {orphans}"


def test_repository_url_is_consistent():
    from path_lib import records

    assert records.REPOSITORY == REPO_URL
    assert records.BRANCH == CONFIG["repository"]["branch"]
    assert f"git+{REPO_URL}" in (BOOK / "_templates" / "first_cell.py").read_text()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NB_IDS)
def test_notebook_is_stored_clean(path):
    nb = json.loads(path.read_text())
    assert nb.get("metadata", {}).get("kernelspec", {}).get("name") == "python3", \
        "kernelspec must be python3 (the build executes with it)"
    dirty = [i for i, c in enumerate(nb["cells"])
             if c["cell_type"] == "code" and (c.get("outputs") or c.get("execution_count") is not None)]
    assert not dirty, (f"cells {dirty} have stored outputs: commit notebooks without outputs "
                       "(jupyter nbconvert --clear-output --inplace, or jupytext --to ipynb)")
    widget_state = nb.get("metadata", {}).get("widgets")
    assert not widget_state, "saved widget state would pull ipywidgets JS from a CDN: clear it"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NB_IDS)
def test_first_code_cell_installs_path_lib_on_colab(path):
    nb = json.loads(path.read_text())
    code = [source(c) for c in nb["cells"] if c["cell_type"] == "code"]
    if not code:
        pytest.skip("no code cells")
    template = [ln.strip() for ln in (BOOK / "_templates" / "first_cell.py").read_text().splitlines()
                if ln.strip() and not ln.lstrip().startswith("#")]
    first = {ln.strip() for ln in code[0].splitlines()}
    missing = [ln for ln in template if ln not in first]
    assert not missing, ("the first code cell must be book/_templates/first_cell.py verbatim "
                         f"(missing lines: {missing})")


def test_cited_keys_exist():
    keys = set(re.findall(r"^@\w+\{([^,]+),", (BOOK / "references.bib").read_text(), re.M))
    used = {}
    for path in NOTEBOOKS + sorted(BOOK.rglob("*.md")):
        text = re.sub(r"``.*?``", "", path.read_text())  # examples in literal code spans
        for group in re.findall(r"\{cite(?::\w+)?\}`([^`]+)`", text):
            for key in group.split(","):
                used.setdefault(key.strip(), str(path.relative_to(ROOT)))
    unknown = {k: where for k, where in used.items() if k not in keys}
    assert not unknown, f"citation keys not in book/references.bib: {unknown}"


# --- Chapters: short cells, no internal documents ------------------------------------------------

#: The longest code cell a chapter may have. Longer cells are split where the reader would pause
#: (set-up / computation / figure), or their book-only helpers move into path_lib (with tests).
MAX_CODE_CELL_LINES = 25

#: Internal project documents. A chapter explains in its own words and cites the papers
#: ({cite:p}`key`, book/references.bib); the reader has neither these files nor a reason to look.
INTERNAL_DOCUMENTS = {
    "PATH_NOTES": re.compile(r"PATH[_ ]NOTES", re.I),
    "NOTES.md": re.compile(r"\bNOTES\.md\b", re.I),
    "design notes": re.compile(r"\bdesign[ -]notes?\b", re.I),
    "CONTRIBUTING": re.compile(r"\bCONTRIBUTING\b"),   # case-sensitive: "contributing" is English
    # benchmarks/NOTES.md was split into these two; they are the same internal notes
    "DESIGN.md / HISTORY.md": re.compile(r"\b(DESIGN|HISTORY)\.md\b"),
}


def toc_pages() -> list[Path]:
    """The source file of every page in _toc.yml (.ipynb or .md), in toc order."""
    pages = []
    for f in toc_files():
        for ext in (".ipynb", ".md"):
            if (ROOT / f"{f}{ext}").exists():
                pages.append(ROOT / f"{f}{ext}")
                break
    return pages


TOC_PAGES = toc_pages()
TOC_NOTEBOOKS = [p for p in TOC_PAGES if p.suffix == ".ipynb"]


@pytest.mark.parametrize("path", TOC_NOTEBOOKS, ids=[str(p.relative_to(ROOT)) for p in TOC_NOTEBOOKS])
def test_code_cells_are_short(path):
    nb = json.loads(path.read_text())
    long_cells = [f"cell {i} (id {c.get('id')}): {n} lines"
                  for i, c in enumerate(nb["cells"])
                  if c["cell_type"] == "code" and (n := len(source(c).splitlines())) > MAX_CODE_CELL_LINES]
    assert not long_cells, (f"code cells longer than {MAX_CODE_CELL_LINES} lines (split them, or move "
                            "book-only helpers into path_lib):\n  " + "\n  ".join(long_cells))


#: The widest code line a chapter may have. At a 1280 px window the content column is about 684 px;
#: a code box pads 16 px on each side, and the book shows code at 13 px (book/_static/path_book.css),
#: about 7.8 px a character, so 80 characters fit (tests/test_book_browser.py measures it); the book keeps
#: one character to spare, as PEP 8's 79.
MAX_CODE_LINE_CHARS = 79


def wide_code_lines(nb: dict, limit: int = MAX_CODE_LINE_CHARS) -> list[str]:
    """Code lines longer than ``limit`` in a notebook, skipping the first code cell (the hidden Colab
    install, book/_templates/first_cell.py verbatim)."""
    code = [(i, c) for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"]
    return [f"cell {i} (id {c.get('id')}), line {n + 1}: {len(line)} characters: {line.strip()[:60]!r}"
            for i, c in code[1:] for n, line in enumerate(source(c).splitlines()) if len(line) > limit]


def test_wide_code_lines_are_found():
    cell = lambda text: {"cell_type": "code", "source": text}
    nb = {"cells": [cell("x" * 90), cell("ok = 1\n" + "y" * 80), cell("z" * 79)]}
    found = wide_code_lines(nb)
    assert len(found) == 1 and "cell 1" in found[0] and "line 2: 80 characters" in found[0]


@pytest.mark.parametrize("path", TOC_NOTEBOOKS, ids=[str(p.relative_to(ROOT)) for p in TOC_NOTEBOOKS])
def test_code_lines_fit_the_page(path):
    wide = wide_code_lines(json.loads(path.read_text()))
    assert not wide, (f"code lines wider than {MAX_CODE_LINE_CHARS} characters (they scroll sideways at "
                      "a 1280 px window):\n  " + "\n  ".join(wide))


def internal_document_mentions(text: str) -> list[str]:
    """Every mention of an internal document in ``text``, with a little context."""
    found = []
    for name, pattern in INTERNAL_DOCUMENTS.items():
        for m in pattern.finditer(text):
            context = text[max(0, m.start() - 40):m.end() + 40].replace("\n", " ")
            found.append(f"{name}: ...{context}...")
    return found


@pytest.mark.parametrize("text", ["see PATH_NOTES section 4", "(`benchmarks/NOTES.md`, v10)",
                                  "the project's design notes", "Design notes say", "CONTRIBUTING.md: w is float32",
                                  "quoted in PATH NOTES", "see `benchmarks/DESIGN.md`", "(HISTORY.md, v16)"])
def test_internal_document_mentions_are_found(text):
    assert internal_document_mentions(text)


def test_ordinary_words_are_not_internal_documents():
    assert not internal_document_mentions("each token contributing its own matrix; notes on the design "
                                          "of the kernel; footnotes.md; the design of the kernel; "
                                          "benchmarks/results/history/README.md")


@pytest.mark.parametrize("path", TOC_PAGES, ids=[str(p.relative_to(ROOT)) for p in TOC_PAGES])
def test_pages_do_not_cite_internal_documents(path):
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text())["cells"]
        texts = [(f"cell {i} ({c['cell_type']}, id {c.get('id')})", source(c)) for i, c in enumerate(cells)]
    else:
        texts = [("page", path.read_text())]
    found = [f"{where}: {hit}" for where, text in texts for hit in internal_document_mentions(text)]
    assert not found, ("pages must explain in their own words and cite the papers, not internal "
                       "documents:\n  " + "\n  ".join(found))
