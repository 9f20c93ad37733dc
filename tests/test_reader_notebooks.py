"""The reader notebooks (path_lib/book/reader.py, notebooks/): what Colab and JupyterLab open from the
site's launch buttons, with the site's text in place of MyST markup.

Every page of the toc converts with no MyST role, directive or label left; notebooks/ is exactly a fresh
conversion (same cells, code unchanged, no outputs); citations, cross-references and numbers read as the
site prints them (checked against the built site when _build/html exists); one converted chapter runs
top to bottom on the CPU in a Jupyter kernel, as a reader would run it.
"""
from __future__ import annotations

import html as html_lib
import json
import os
import re
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from path_lib.book.reader import PROOF_TYPES, READER_DIR, Bibliography, ReaderBook, myst_markup, site_url, stale_reader_notebooks

ROOT = Path(__file__).resolve().parent.parent
SITE_HTML = ROOT / "_build" / "html"


@pytest.fixture(scope="module")
def book() -> ReaderBook:
    return ReaderBook(ROOT)


def _source(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


# --- the real book ------------------------------------------------------------------------------

def test_every_toc_page_converts_with_no_myst_markup_left(book):
    before = after = 0
    left = {}
    for page in book.pages:
        sources = book.source_markdown(page.docname)
        converted = book.converted_markdown(page.docname)
        before += sum(len(myst_markup(s)) for s in sources)
        found = [m for s in converted for m in myst_markup(s)]
        after += len(found)
        if found:
            left[page.docname] = found[:5]
    print(f"MyST roles, directives and labels over the toc's pages: {before} before, {after} after")
    assert before > 200, "the counter finds the chapters' markup (roles, directives, equation labels)"
    assert not left, f"MyST markup left in the reader copies: {left}"


def test_the_markup_counter_sees_roles_directives_and_labels_but_not_code():
    text = textwrap.dedent("""\
        A {cite:p}`k` and {eq}`e`, but not ``{cite:p}`code` `` or `{doc}`x``.

        $$
        x
        $$ (lbl)

        :::{prf:theorem} Title {cite:t}`k2`
        Body {prf:ref}`t`.
        :::

        ```python
        s = "{cite:p}`in code`"
        ```
        """)
    assert myst_markup(text) == ["{cite:p}`k`", "{eq}`e`", "$$ (lbl)", "{prf:theorem}", "{cite:t}`k2`",
                                 "{prf:ref}`t`"]


def test_notebooks_folder_is_a_fresh_conversion():
    stale = stale_reader_notebooks(ROOT)
    assert not stale, ("notebooks/ differs from a fresh conversion of the chapters (never edit it by hand; "
                       f"run `python -m path_lib.book.reader` and commit the result): {stale}")


def test_committed_reader_notebooks_are_a_fresh_conversion():
    """The build rewrites notebooks/ before the tests run, so the working tree is always fresh there; the
    copies Colab opens are the committed ones: compare a fresh conversion with the last commit."""
    import subprocess

    from path_lib.book.reader import ReaderBook, _expected
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if head.returncode:
        pytest.skip("not a git checkout")
    stale = []
    for path, text in _expected(ReaderBook(ROOT)).items():
        rel = path.relative_to(ROOT).as_posix()
        shown = subprocess.run(["git", "show", f"HEAD:{rel}"], cwd=ROOT, capture_output=True, text=True)
        if shown.returncode or shown.stdout != text:
            stale.append(rel)
    assert not stale, ("the committed notebooks/ differ from a fresh conversion (run `python -m "
                       f"path_lib.book.reader` and commit the result): {stale}")


def test_reader_copies_keep_every_cell_and_all_code(book):
    pages = book.notebook_pages()
    assert "book/part1/02_householder" in pages and all(d.startswith("book/") for d in pages)
    for docname in pages:
        source = json.loads((ROOT / f"{docname}.ipynb").read_text())
        reader = json.loads((ROOT / READER_DIR / f"{docname}.ipynb").read_text())
        assert [(c["cell_type"], c.get("id")) for c in reader["cells"]] == \
               [(c["cell_type"], c.get("id")) for c in source["cells"]], docname
        for src, out in zip(source["cells"], reader["cells"]):
            if src["cell_type"] == "code":
                assert _source(out) == _source(src) and out["metadata"] == src["metadata"], docname
                assert out["outputs"] == [] and out["execution_count"] is None, docname
        assert reader["metadata"]["kernelspec"] == source["metadata"]["kernelspec"]
        assert "jupytext" not in reader["metadata"]     # no pairing with a .md file in a reader's folder
        assert reader["metadata"]["path_book"]["page"] == book.site + docname + ".html"


def test_launch_buttons_open_the_reader_copies():
    """jupyter-book builds the Colab URL as <colab>/github/ORG/REPO/blob/<branch>/<path_to_book>/<page>.ipynb."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["repository"]["path_to_book"] == READER_DIR
    assert config["launch_buttons"]["colab_url"]
    assert READER_DIR in config["exclude_patterns"]          # the copies are no pages of the site
    assert (ROOT / READER_DIR / "book" / "part1" / "02_householder.ipynb").is_file()


def test_citations_and_cross_references_read_as_text_with_links(book):
    site = "https://path-attention.github.io/path-book/"
    assert book.site == site
    ch2 = "\n\n".join(book.converted_markdown("book/part1/02_householder"))
    assert ch2.startswith("# 2. Householder-like transformations")
    assert f"PaTH attention [[Yang *et al.*, 2025]({site}book/bibliography.html#cite-yang2025path)]" in ch2
    assert f"[Definition 2.1]({site}book/part1/02_householder.html#ch2-def-householder)" in ch2
    assert "> **Theorem 2.1 (Eigenstructure)**" in ch2 and "> **Proof.**" in ch2
    ch6 = "\n\n".join(book.converted_markdown("book/part3/06_blockwise"))
    assert f"[Theorem 3.1]({site}book/part1/03_ut_transform.html#ch3-thm-wy)" in ch6
    assert f"[The UT transform]({site}book/part1/03_ut_transform.html)" in ch6
    # a section page continues its chapter: 10b's first equation follows chapter 10's (it has none)
    ch10b = "\n\n".join(book.converted_markdown("book/part3/10b_scale_out"))
    assert "\\tag{10.1}" in ch10b and ch10b.startswith("# 10.9. Scale-out")


def test_converted_markdown_renders_as_links_in_commonmark(book):
    """Jupyter and Colab render Markdown with CommonMark parsers: the citation's outer brackets stay text,
    the author-year inside is a link, the quote of a theorem is a blockquote with its math on one line."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark")
    html = md.render("\n\n".join(book.converted_markdown("book/part1/02_householder")))
    assert ('PaTH attention [<a href="https://path-attention.github.io/path-book/book/bibliography.html'
            '#cite-yang2025path">Yang <em>et al.</em>, 2025</a>]') in html
    quote = html[html.index("<blockquote>"):html.index("</blockquote>")]
    assert "<strong>Definition 2.1 (Householder-like matrix)</strong>" in quote
    assert re.search(r"<p>\$\$ H\(w, [^\n]* \$\$</p>", quote)      # (CommonMark, unlike Jupyter, unescapes \,)
    assert "{" + "cite" not in html and ":::" not in html


# --- the converter on a small book --------------------------------------------------------------

BIB = """\
@article{solo2001, author = {Solo, Han}, title = {One}, journal = {J}, year = {2001}}
@article{pair2002, author = {Pair, Ann and Other, Bob}, title = {Two}, journal = {J}, year = {2002}}
@article{many2003, author = {Many, Cy and Two, D. and Three, E.}, title = {Three}, journal = {J}, year = {2003}}
"""


def _small_book(tmp_path: Path, pages: dict, toc: dict, config: dict | None = None) -> ReaderBook:
    cfg = {"repository": {"url": "https://github.com/Org/repo"}, "bibtex_bibfiles": ["refs.bib"],
           "sphinx": {"config": {"bibtex_cite_id": "cite-{key}"}}}
    cfg.update(config or {})
    (tmp_path / "_config.yml").write_text(yaml.safe_dump(cfg))
    (tmp_path / "_toc.yml").write_text(yaml.safe_dump(toc))
    (tmp_path / "refs.bib").write_text(BIB)
    for name, cells in pages.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name.endswith(".md"):
            path.write_text(cells)
            continue
        nb_cells = [dict(cell_type=kind, id=f"c{i}", metadata={}, source=src,
                         **({"outputs": [], "execution_count": None} if kind == "code" else {}))
                    for i, (kind, src) in enumerate(cells)]
        path.write_text(json.dumps(dict(cells=nb_cells, metadata={"kernelspec": {"name": "python3"}},
                                        nbformat=4, nbformat_minor=5)))
    return ReaderBook(tmp_path)


TOC = {"format": "jb-book", "root": "intro",
       "parts": [{"caption": "P", "numbered": True,
                  "chapters": [{"file": "a"}, {"file": "b", "sections": [{"file": "c"}]}]},
                 {"caption": "Back", "chapters": [{"file": "bib"}]}]}


def _pages(**overrides):
    pages = {
        "intro.ipynb": [("markdown", "# Intro\n\n$$ x $$ (eq-intro)\n\nSee {doc}`a` and {eq}`eq-c`.")],
        "a.ipynb": [("markdown", "# Alpha\n\n:::{prf:definition} Thing\n:label: def-a\n\nA thing "
                                 "{cite:p}`many2003,solo2001`.\n:::\n\n## One\n\n$$\ny\n$$ (eq-a)"),
                    ("code", "x = 1  # {cite:p}`not-converted`")],
        "b.ipynb": [("markdown", "# Beta\n\n## First\n\n## Second\n\n:::{prf:theorem}\nNo label.\n:::\n\n"
                                 ":::{prf:theorem} Named\n:label: thm-b\nBody.\n:::")],
        "c.ipynb": [("markdown", "# Gamma\n\n$$ z $$ (eq-c)\n\n{cite:t}`pair2002` and {prf:ref}`thm-b`, "
                                 "{prf:ref}`the definition <def-a>`, {eq}`eq-a`.")],
        "bib.md": "# References\n\n```{bibliography}\n:all:\n```\n",
    }
    pages.update(overrides)
    return pages


def test_numbers_follow_the_toc_like_sphinx(tmp_path):
    b = _small_book(tmp_path, _pages(), TOC)
    site = "https://org.github.io/repo/"
    assert [(p.docname, p.number) for p in b.pages] == [("intro", ()), ("a", (1,)), ("b", (2,)), ("c", (2, 3)),
                                                        ("bib", ())]
    intro, = b.converted_markdown("intro")
    assert intro.startswith("# Intro\n") and "$$ x \\tag{1}$$" in intro       # unnumbered page: (1)
    assert f"[Alpha]({site}a.html)" in intro and f"[(2.1)]({site}c.html#equation-eq-c)" in intro
    a, = b.converted_markdown("a")
    assert a.startswith("# 1. Alpha") and "## 1.1. One" in a and "y\n\\tag{1.1}\n$$" in a
    assert "> **Definition 1.1 (Thing)**" in a
    bm, = b.converted_markdown("b")
    assert "> **Theorem 2.1**" in bm and "> **Theorem 2.2 (Named)**" in bm   # unlabelled blocks count too
    assert "## 2.2. Second" in bm
    c, = b.converted_markdown("c")
    assert c.startswith("# 2.3. Gamma") and "$$ z \\tag{2.1}$$" in c         # after b's two sections
    assert f"Pair and Other [[2002]({site}bib.html#cite-pair2002)]" in c
    assert f"[Theorem 2.2]({site}b.html#thm-b)" in c and f"[the definition]({site}a.html#def-a)" in c
    assert f"[(1.1)]({site}a.html#equation-eq-a)" in c


def test_citations_sort_like_the_bibliography_and_code_stays(tmp_path):
    b = _small_book(tmp_path, _pages(), TOC)
    a = b.notebook("a")
    assert ("A thing [[Many *et al.*, 2003](https://org.github.io/repo/bib.html#cite-many2003), "
            "[Solo, 2001](https://org.github.io/repo/bib.html#cite-solo2001)]") in _source(a["cells"][0])
    assert _source(a["cells"][1]) == "x = 1  # {cite:p}`not-converted`"
    bib, = b.converted_markdown("bib")
    assert "- [MTT03] Cy Many, D\\. Two, and E\\. Three\\. Three\\. *J*, 2003\\.\n" in bib and not myst_markup(bib)
    with pytest.raises(ValueError, match="notebook page"):
        b.notebook("bib")


def test_blocks_become_quotes_with_math_on_one_line(tmp_path):
    body = textwrap.dedent("""\
        # T

        Text before.
        :::{admonition} Exercise 1: $x$ {cite:p}`solo2001`
        :class: dropdown
        Show that

        $$
        a = b
          + c
        $$

        ```python
        s = "{cite:p}`keep`"
        ```

        - a list {eq}`eq-t`
        :::
        Text after.

        ::::{note}
        :::{prf:proof}
        Nested.
        :::
        ::::

        $$ t $$ (eq-t)
        """)
    toc = {"format": "jb-book", "root": "t", "parts": [{"caption": "B", "chapters": [{"file": "bib"}]}]}
    b = _small_book(tmp_path, _pages(**{"t.ipynb": [("markdown", body)]}), toc)
    out, = b.converted_markdown("t")
    expected = textwrap.dedent("""\
        # T

        Text before.

        > **Exercise 1: $x$ [[Solo, 2001](https://org.github.io/repo/bib.html#cite-solo2001)]**
        >
        > Show that
        >
        > $$ a = b + c $$
        >
        > ```python
        > s = "{cite:p}`keep`"
        > ```
        >
        > - a list [(1)](https://org.github.io/repo/t.html#equation-eq-t)

        Text after.

        > **Note**
        >
        > > **Proof.**
        > >
        > > Nested.

        $$ t \\tag{1}$$
        """)
    assert out == expected


def test_unknown_markup_and_bad_references_raise(tmp_path):
    toc = {"format": "jb-book", "root": "t", "parts": [{"caption": "B", "chapters": [{"file": "bib"}]}]}
    cases = {"{numref}`fig-x`": "role {numref}", ":::{figure} x.png\n:::": "directive is not supported",
             "{cite:p}`nobody`": "'nobody' is not in refs.bib", "{eq}`missing`": "no equation labelled 'missing'",
             "{doc}`nowhere`": "no page 'nowhere'", "(target)=\n# T": "label targets",
             "# One\n\n# Two": "one top-level heading"}
    for i, (text, message) in enumerate(cases.items()):
        folder = tmp_path / str(i)
        folder.mkdir()
        with pytest.raises(ValueError, match=re.escape(message)):
            _small_book(folder, _pages(**{"t.ipynb": [("markdown", text)]}), toc)


def test_site_url_from_the_config():
    assert site_url({"repository": {"url": "https://github.com/Path-Attention/path-book"}}) == \
        "https://path-attention.github.io/path-book/"
    assert site_url({"html": {"baseurl": "https://example.org/book"}, "repository": {}}) == "https://example.org/book/"
    with pytest.raises(ValueError, match="repository.url"):
        site_url({"repository": {"url": "https://gitlab.com/a/b"}})
    with pytest.raises(TypeError, match="config"):
        site_url("https://github.com/a/b")


def test_bibliography_names(tmp_path):
    (tmp_path / "r.bib").write_text(BIB + "@book{ed2004, editor = {Edit, Or}, title = {Ed}, year = {2004}}\n"
                                          "@misc{anon, title = {No {Author}}}\n")
    bib = Bibliography(tmp_path / "r.bib", "https://x/bib.html")
    assert [bib.authors(k) for k in ("solo2001", "pair2002", "many2003", "ed2004", "anon")] == \
        ["Solo", "Pair and Other", "Many *et al.*", "Edit", "*No Author*"]
    assert bib.authors("many2003", full=True) == "Many, Two, and Three" and bib.year("anon") == "n.d."
    assert bib.cite(["solo2001", "solo2001"], textual=False) == "[[Solo, 2001](https://x/bib.html#cite-solo2001)]"
    with pytest.raises(ValueError, match="pre/post text"):
        bib.cite(["{see}solo2001"], textual=False)


# --- against the built site ---------------------------------------------------------------------

def _plain_html(fragment: str) -> str:
    return re.sub(r"\s+", " ", html_lib.unescape(re.sub(r"<[^>]+>", "", fragment))).strip()


def _plain_md(fragment: str) -> str:
    return re.sub(r"\[([^\[\]]*)\]\([^)]*\)", r"\1", fragment).replace("*", "")


def site_mismatches(book: ReaderBook, html_dir: Path) -> list:
    """Where the reader copies' numbers, citations and link targets differ from a built site's."""
    problems = []
    pages = {}

    def page(docname):
        if docname not in pages:
            path = html_dir / f"{docname}.html"
            pages[docname] = path.read_text() if path.is_file() else None
        return pages[docname]

    link = re.compile(r"\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(" + re.escape(book.site) + r"([^)#]+)\.html(?:#([^)]+))?\)")
    for p in book.pages:
        site = page(p.docname)
        if site is None:
            problems.append(f"{p.docname}: no page in the built site")
            continue
        md = "\n\n".join(book.converted_markdown(p.docname))
        # section numbers of the headings, in order
        ours = re.findall(r"^#{1,6} (\d+(?:\.\d+)*)\. ", md, re.M)
        theirs = re.findall(r'<h[1-6]><span class="section-number">([\d.]+)\. </span>', site)
        if ours != theirs:
            problems.append(f"{p.docname}: headings {ours} on the site {theirs}")
        # equation numbers and theorem-like titles, in order
        ours = re.findall(r"\\tag\{([\d.]+)\}", md)
        theirs = re.findall(r'<span class="eqno">\(([\d.]+)\)', site)
        if ours != theirs:
            problems.append(f"{p.docname}: equations {ours} on the site {theirs}")
        kinds = "|".join(t.title() for t in PROOF_TYPES)
        ours = re.findall(rf"^> \*\*((?:{kinds}) [\d.]+)", md, re.M)
        theirs = [t.strip() for t in re.findall(r'<span class="caption-number">([A-Z][a-z]+ [\d.]+) </span>', site)]
        if ours != theirs:
            problems.append(f"{p.docname}: numbered blocks {ours} on the site {theirs}")
        # citations: the reader's, in order, appear in the site's (which also has those of cell outputs)
        theirs = iter(_plain_html(m) for m in re.findall(r'<span class="bibtex-citation"[^>]*>(.*?)</span>', site, re.S))
        missing = [c for c in map(_plain_md, book.citations[p.docname]) if not any(c == t for t in theirs)]
        if missing:
            problems.append(f"{p.docname}: citations not found in order on the site: {missing[:3]}")
        # every link to the site leads to an anchor that exists, with the text the site shows there
        for text, docname, anchor in link.findall(md):
            target = page(docname)
            if target is None:
                problems.append(f"{p.docname}: link to a missing page {docname}")
                continue
            if not anchor:
                h1 = re.search(r'<h1>(?:<span class="section-number">[\d.]+ </span>)?(.*?)<a class="headerlink"', target)
                if text == book.titles.get(docname) and "$" not in text and (not h1 or _plain_html(h1.group(1)) != text):
                    problems.append(f"{p.docname}: link text {text!r}, the page's title on the site "
                                    f"{_plain_html(h1.group(1)) if h1 else None!r}")
                continue
            if f'id="{anchor}"' not in target:
                problems.append(f"{p.docname}: {docname}.html has no anchor {anchor!r}")
            elif anchor.startswith("equation-"):
                m = re.search(f'id="{re.escape(anchor)}">\\s*<span class="eqno">(\\([\\d.]+\\))', target)
                if not m or m.group(1) != text:
                    problems.append(f"{p.docname}: {text} -> {anchor}, on the site {m.group(1) if m else None}")
            elif not anchor.startswith("cite-"):
                m = re.search(f'id="{re.escape(anchor)}">\\s*<p class="admonition-title"><span class="caption-number">'
                              r"([^<]+?) </span>", target)
                if m and re.fullmatch(r"[A-Z][a-z]+ [\d.]+", text) and m.group(1) != text:
                    problems.append(f"{p.docname}: {text} -> {anchor}, on the site {m.group(1)}")
    return problems


@pytest.mark.skipif(not (SITE_HTML / "book" / "bibliography.html").is_file(), reason="the book is not built")
def test_numbers_citations_and_anchors_match_the_built_site(book):
    problems = site_mismatches(book, SITE_HTML)
    assert not problems, "\n".join(problems[:30])
    # the download button of a page (its _sources copy) gives the reader copy as well (make book)
    for docname in book.notebook_pages():
        downloaded = SITE_HTML / "_sources" / f"{docname}.ipynb"
        assert downloaded.read_text() == book.reader_path(docname).read_text(), docname


# --- one chapter, run as a reader runs it ---------------------------------------------------------

def test_a_reader_notebook_runs_top_to_bottom_on_the_cpu(tmp_path):
    """The reader copy of chapter 2, executed in a Jupyter kernel from an empty folder (no
    PATH_BOOK_STATIC: live widgets, as in JupyterLab)."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(ROOT / READER_DIR / "book" / "part1" / "02_householder.ipynb", as_version=4)
    env = {k: v for k, v in os.environ.items() if k != "PATH_BOOK_STATIC"}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    saved = os.environ.copy()
    os.environ.clear()
    os.environ.update(env)
    try:
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code)
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors
    assert any(o.output_type == "display_data" and "image/png" in o.get("data", {}) for c in code for o in c.outputs)
