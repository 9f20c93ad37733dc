"""Reader notebooks: every notebook page of the book as Colab or a plain JupyterLab shows it, with the
site's text in place of the MyST markup that only the site renders.

    python -m path_lib.book.reader            # rewrite notebooks/ from the sources (every book build does)
    python -m path_lib.book.reader --check    # exit 1 if notebooks/ is not a fresh conversion

The chapters are written in MyST Markdown: ``{cite:p}`key```, ``{prf:ref}`label```, ``{eq}`label```,
``{doc}`page```, ``:::{prf:theorem}`` and ``:::{admonition}`` blocks, ``$$ ... $$ (label)``. Only
Sphinx renders them; a notebook reader sees them as written. The copy of ``book/<page>.ipynb`` in
``notebooks/book/<page>.ipynb`` has the same cells, code unchanged and no outputs, and Markdown that
reads as the site does:

* citations: the site's author-year text (``[Yang et al., 2025]``; textual ``Yang et al. [2025]``),
  each linked to its entry on the site's bibliography page;
* cross-references: ``Theorem 2.1``, ``(6.3)`` and page titles, linked to the site's anchor, with the
  numbers Sphinx gives them (per chapter in ``_toc.yml`` order, a section page continuing its
  chapter's counters); headings carry the site's section numbers;
* theorem, definition, proof, admonition and dropdown blocks: a bold title and a quoted body;
* labelled equations: the equation with its number as ``\\tag{...}``; all other math and all code as
  written.

The site's address is :func:`site_url` (``html.baseurl`` of ``_config.yml`` if set, else the GitHub
Pages address of ``repository.url``). A role or directive the converter does not know raises
``ValueError``: the reader copy never shows raw markup silently. Needs pyyaml and pybtex (installed
with the book's build, by sphinxcontrib-bibtex).
"""
from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

__all__ = ["READER_DIR", "site_url", "Bibliography", "ReaderBook", "write_reader_notebooks",
           "stale_reader_notebooks", "myst_markup", "PROOF_TYPES", "setup", "main"]

#: The folder (relative to the repository root) that holds the reader copies, mirroring the sources'
#: paths: ``notebooks/book/part1/02_householder.ipynb``. ``_config.yml`` sets ``repository.path_to_book``
#: to it, so that the site's launch buttons (Colab) open these copies.
READER_DIR = "notebooks"

#: sphinx-proof's numbered directives (each its own counter); ``prf:proof`` is unnumbered.
PROOF_TYPES = ("axiom", "theorem", "lemma", "algorithm", "definition", "remark", "conjecture", "corollary",
               "criterion", "example", "property", "observation", "proposition", "assumption", "notation")
#: Admonition directives and their default titles (``admonition`` and ``dropdown`` take theirs as argument).
ADMONITIONS = {"note": "Note", "tip": "Tip", "hint": "Hint", "important": "Important", "warning": "Warning",
               "caution": "Caution", "attention": "Attention", "danger": "Danger", "error": "Error",
               "seealso": "See also", "admonition": "", "dropdown": ""}

#: MyST markup as a reader would see it raw (a code span is matched first, and skipped): a role, a
#: directive's opening fence, an equation label, a label target.
_MARKUP_SCAN = re.compile(r"(?P<fence>^[ \t]*(?::{3,}|`{3,}|~{3,})[ \t]*\{[A-Za-z][\w:+.-]*\}.*$)"
                          r"|(?P<role>\{[A-Za-z][\w:+.-]*\}`[^`]*`)"
                          r"|(?P<code>(?<!`)(?P<ticks>`+)(?!`)[\s\S]*?(?<!`)(?P=ticks)(?!`))"
                          r"|(?P<label>\$\$[ \t]*\([^()\s]+\)[ \t]*$|^\([^()\s]+\)=[ \t]*$)", re.M)


def myst_markup(text: str) -> List[str]:
    """The MyST roles, directives and labels in Markdown ``text``, outside code spans and code fences (an
    example written as code is no markup). A directive counts once, then its body is searched too."""
    found: List[str] = []
    for block in _blocks(text.split("\n")):
        if isinstance(block, Directive):
            found.append("{" + block.name + "}")
            found += myst_markup("\n".join([block.argument] + block.body))
        elif block[0] == "text":
            found += [m.group(0).strip() for m in _MARKUP_SCAN.finditer("\n".join(block[1]))
                      if not m.group("code")]
    return found


# ------------------------------------------------------------------------------------------------
# the site
# ------------------------------------------------------------------------------------------------

def site_url(config: dict) -> str:
    """The address of the built site, ending in "/": ``html.baseurl`` of ``_config.yml`` when set, else
    the GitHub Pages address of ``repository.url`` (``https://github.com/ORG/REPO`` ->
    ``https://ORG.github.io/REPO/``). The one place the reader notebooks' links get their base."""
    if not isinstance(config, dict):
        raise TypeError(f"config must be a dict (the parsed _config.yml), got {type(config).__name__}")
    base = str((config.get("html") or {}).get("baseurl") or "").strip()
    if base:
        return base.rstrip("/") + "/"
    repo = str((config.get("repository") or {}).get("url") or "").strip().rstrip("/")
    m = re.fullmatch(r"https://github\.com/([^/]+)/([^/]+?)(?:\.git)?", repo)
    if not m:
        raise ValueError(f"config: repository.url must be https://github.com/ORG/REPO (or set html.baseurl), got {repo!r}")
    return f"https://{m.group(1).lower()}.github.io/{m.group(2)}/"


# ------------------------------------------------------------------------------------------------
# the bibliography
# ------------------------------------------------------------------------------------------------

class Bibliography:
    """``book/references.bib`` formatted as the site's citations: sphinxcontrib-bibtex's author-year
    style (last names, "and" for two authors, "et al." from three, the year), several keys in the order
    of the bibliography page (pybtex's "alpha" sorting, the site's default style)."""

    def __init__(self, path: Union[str, Path], page_url: str, anchor_format: str = "cite-{key}"):
        from pybtex.database import parse_file
        from pybtex.plugin import find_plugin

        self.path = Path(path)
        self.page_url = page_url
        self.anchor_format = anchor_format
        self.data = parse_file(str(self.path))
        self.style = find_plugin("pybtex.style.formatting", "alpha")()
        self.order = [e.key for e in self.style.sort(self.data.entries.values())]

    def anchor(self, key: str) -> str:
        """The citation's id on the bibliography page (``bibtex_cite_id`` of ``_config.yml``, through
        docutils' ``make_id``)."""
        from docutils.nodes import make_id

        return make_id(self.anchor_format.format(key=key, bibliography_count=1))

    def _entry(self, key: str, where: str):
        if key not in self.data.entries:
            raise ValueError(f"{where}: citation key {key!r} is not in {self.path.name}")
        return self.data.entries[key]

    def authors(self, key: str, where: str = "citation", full: bool = False) -> str:
        """``Yang *et al.*``, ``Merrill and Sabharwal``, ``Barrington`` (Markdown); editors, else the title,
        when an entry has no authors."""
        entry = self._entry(key, where)
        persons = entry.persons.get("author") or entry.persons.get("editor")
        if not persons:
            return f"*{_plain(entry.fields.get('title', key))}*"
        names = [" ".join(_plain(str(p)) for p in person.rich_prelast_names + person.rich_last_names)
                 for person in persons]
        if len(names) == 1:
            return names[0]
        if len(names) == 2:
            return f"{names[0]} and {names[1]}"
        return ", ".join(names[:-1]) + ", and " + names[-1] if full else f"{names[0]} *et al.*"

    def year(self, key: str, where: str = "citation") -> str:
        return _plain(self._entry(key, where).fields.get("year", "n.d."))

    def cite(self, keys: Sequence[str], textual: bool, where: str = "citation", full: bool = False) -> str:
        """One citation of ``keys`` in Markdown, as the site prints it: ``[[Yang *et al.*, 2025](url)]``
        (parenthetical) or ``Yang *et al.* [[2025](url)]`` (textual), every key linked to its entry."""
        keys = [k.strip() for k in keys if k.strip()]
        if not keys:
            raise ValueError(f"{where}: a citation needs at least one key")
        for k in keys:
            if "{" in k or "}" in k:
                raise ValueError(f"{where}: citation pre/post text ({k!r}) is not supported by the reader notebooks")
            self._entry(k, where)
        keys = sorted(dict.fromkeys(keys), key=self.order.index)
        link = lambda key, text: f"[{text}]({self.page_url}#{self.anchor(key)})"
        if textual:
            return ", ".join(f"{self.authors(k, where, full)} [{link(k, self.year(k, where))}]" for k in keys)
        return "[" + ", ".join(link(k, f"{self.authors(k, where, full)}, {self.year(k, where)}") for k in keys) + "]"

    def markdown_list(self) -> str:
        """Every entry, formatted by pybtex's "alpha" style, as a Markdown list in bibliography order."""
        from pybtex.plugin import find_plugin

        backend = find_plugin("pybtex.backends", "markdown")()
        entries = self.style.format_entries(self.style.sort(self.data.entries.values()))
        return "\n".join(f"- [{e.label}] " + " ".join(e.text.render(backend).split()) for e in entries)


def _plain(latex: str) -> str:
    """A BibTeX field without its braces and the few accents of the book's bibliography."""
    from pybtex.richtext import Text

    try:
        return str(Text.from_latex(latex))
    except Exception:                       # pragma: no cover - pybtex's parser accepts every .bib field
        return latex.replace("{", "").replace("}", "")


# ------------------------------------------------------------------------------------------------
# the book's structure: pages, their numbers
# ------------------------------------------------------------------------------------------------

@dataclass
class Page:
    """One page of ``_toc.yml``: its document name, source file, whether its part is numbered, and the
    page it is a section of (``book/part3/10b_scale_out`` is a section of ``book/part3/10_speed``)."""
    docname: str
    path: Path
    numbered: bool
    parent: Optional[str] = None
    chapter: Optional[int] = None           # the chapter number of a numbered top-level page
    number: Tuple[int, ...] = ()            # its section number, set while the book is read
    children: List[str] = field(default_factory=list)


def toc_pages(root: Path, toc: dict) -> List[Page]:
    """The pages of a jupyter-book ``_toc.yml`` (format jb-book) in reading order. Chapters of numbered
    parts are numbered on across parts, as ``use_multitoc_numbering`` does."""
    pages: List[Page] = []
    chapter = 0

    def source(docname: str) -> Path:
        docname = re.sub(r"\.(ipynb|md)$", "", docname)
        for ext in (".ipynb", ".md"):
            if (root / f"{docname}{ext}").exists():
                return root / f"{docname}{ext}"
        raise ValueError(f"_toc.yml lists {docname!r}, which has no .ipynb or .md file")

    def add(entry: dict, numbered: bool, parent: Optional[Page]) -> None:
        nonlocal chapter
        docname = re.sub(r"\.(ipynb|md)$", "", entry["file"])
        page = Page(docname, source(docname), numbered, parent.docname if parent else None)
        if numbered and parent is None:
            chapter += 1
            page.chapter = chapter
        if parent is not None:
            parent.children.append(docname)
        pages.append(page)
        for sub in entry.get("sections") or []:
            add(sub, numbered, page)

    pages.append(Page(re.sub(r"\.(ipynb|md)$", "", toc["root"]), source(toc["root"]), False))
    for entry in toc.get("chapters") or []:
        add(entry, bool(toc.get("numbered")), None)
    for part in toc.get("parts") or []:
        for entry in part.get("chapters") or []:
            add(entry, bool(part.get("numbered")), None)
    return pages


# ------------------------------------------------------------------------------------------------
# Markdown blocks: text, code fences, directives
# ------------------------------------------------------------------------------------------------

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,}|:{3,})(?P<info>.*)$")
_DIRECTIVE = re.compile(r"^\{(?P<name>[A-Za-z][\w:+.-]*)\}[ \t]*(?P<arg>.*)$")
_OPTION = re.compile(r"^:(?P<key>[\w-]+):[ \t]*(?P<value>.*)$")
_HEADING = re.compile(r"^(?P<hashes>#{1,6})[ \t]+(?P<text>.*?)[ \t]*#*[ \t]*$")
#: Where the API reference's pages live (Sphinx autodoc, path_lib.book.api): no reader copies there.
API_DIR = "book/api/"
_INLINE = re.compile(
    r"(?P<code>(?<!`)(?P<ticks>`+)(?!`)[\s\S]*?(?<!`)(?P=ticks)(?!`))"
    r"|(?P<role>\{(?P<name>[A-Za-z][\w:+.-]*)\}`(?P<content>[^`]*)`)"
    r"|(?P<math>\$\$(?P<body>[\s\S]+?)\$\$(?:[ \t]*\((?P<label>[^()\s]+)\)[ \t]*(?=\n|$))?)")
_LABEL_LINE = re.compile(r"^\((?P<label>[^()\s]+)\)=[ \t]*$")


def _fence_end(lines: List[str], start: int, fence: str) -> int:
    """Index of the line that closes the fence opened at ``lines[start]`` (the same character, at least as
    many); the last line if none does (Markdown's rule: an unclosed fence runs to the end)."""
    char, n = fence[0], len(fence)
    for j in range(start + 1, len(lines)):
        s = lines[j].strip()
        if len(s) >= n and set(s) == {char}:
            return j
    return len(lines) - 1


@dataclass
class Directive:
    name: str
    argument: str
    options: Dict[str, str]
    body: List[str]
    indent: str
    line: int


Block = Union[Tuple[str, List[str]], Directive]


def _blocks(lines: List[str]) -> List[Block]:
    """``lines`` as ("text", lines), ("code", lines) and :class:`Directive` blocks (a directive's line is
    counted from 1 in ``lines``)."""
    out: List[Block] = []
    text: List[str] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m or (m.group("fence")[0] == ":" and not m.group("info").lstrip().startswith("{")):
            text.append(lines[i])
            i += 1
            continue
        if text:
            out.append(("text", text))
            text = []
        end = _fence_end(lines, i, m.group("fence"))
        closed = end > i and set(lines[end].strip()) == {m.group("fence")[0]}
        d = _DIRECTIVE.match(m.group("info").strip())
        if d is None:
            out.append(("code", lines[i:end + 1]))
        else:
            indent = m.group("indent")
            body = [ln[len(indent):] if ln.startswith(indent) else ln.lstrip()
                    for ln in lines[i + 1:end if closed else end + 1]]
            options: Dict[str, str] = {}
            while body and _OPTION.match(body[0]):
                o = _OPTION.match(body[0])
                assert o is not None
                options[o.group("key")] = o.group("value").strip()
                body = body[1:]
            while body and not body[0].strip():
                body = body[1:]
            while body and not body[-1].strip():
                body = body[:-1]
            out.append(Directive(d.group("name"), d.group("arg").strip(), options, body, indent, i + 1))
        i = end + 1
    if text:
        out.append(("text", text))
    return out


def _quote(markdown: str) -> str:
    """``markdown`` as a block quote. Display math goes on one line first: Jupyter and Colab find math
    before they parse Markdown, so the quote's ``>`` would otherwise land inside the equation."""
    out = []
    for block in _blocks(markdown.split("\n")):
        if isinstance(block, Directive):   # pragma: no cover - bodies are converted before they are quoted
            raise AssertionError(f"an unconverted directive {{{block.name}}} in a quoted block")
        chunk = "\n".join(block[1])
        out.append(_MATH_SCAN.sub(_one_line_math, chunk) if block[0] == "text" else chunk)
    lines = "\n".join(out).strip("\n").split("\n")
    return "\n".join(">" + (" " + ln if ln.strip() else "") for ln in lines)


_MATH_SCAN = re.compile(r"(?P<code>(?<!`)(?P<ticks>`+)(?!`)[\s\S]*?(?<!`)(?P=ticks)(?!`))"
                        r"|\$\$(?P<body>[\s\S]+?)\$\$")


def _one_line_math(m: re.Match) -> str:
    if m.group("code"):
        return m.group(0)
    body = m.group("body")
    if re.search(r"(?<!\\)%", body):
        raise ValueError(f"a TeX comment (%) in display math inside a quoted block cannot go on one line: {body!r}")
    return "$$ " + " ".join(ln.strip() for ln in body.split("\n") if ln.strip()) + " $$"


# ------------------------------------------------------------------------------------------------
# the converter
# ------------------------------------------------------------------------------------------------

@dataclass
class _OpenHeading:
    level: int
    number: Tuple[int, ...]
    children: int = 0


@dataclass
class Target:
    """What a cross-reference to a label shows and where it leads."""
    docname: str
    anchor: str
    text: str


class ReaderBook:
    """The whole book read once for its numbers and labels, then converted page by page.

    ``ReaderBook(root)`` reads ``_config.yml``, ``_toc.yml``, the bibliography and every page, numbering
    as Sphinx does: sections from the toc (chapters on across numbered parts, a section page after its
    chapter's own sections), and per chapter one counter for labelled equations and one per
    sphinx-proof type, on through the chapter's section pages. :meth:`notebook` gives a page's reader
    copy, :meth:`converted_markdown` any page's converted Markdown."""

    def __init__(self, root: Union[str, Path, None] = None):
        import yaml

        from .notebook import repo_root

        found = Path(root) if root is not None else repo_root()
        if found is None:
            raise ValueError("root: no book checkout found (pass the repository root)")
        self.root = found.resolve()
        self.config = yaml.safe_load((self.root / "_config.yml").read_text())
        self.site = site_url(self.config)
        self.pages = toc_pages(self.root, yaml.safe_load((self.root / "_toc.yml").read_text()))
        self.by_name = {p.docname: p for p in self.pages}
        bib_page = next((p.docname for p in self.pages if p.path.suffix == ".md"
                         and re.search(r"^[ \t]*(```|:::)\{bibliography\}", p.path.read_text(), re.M)), None)
        if bib_page is None:
            raise ValueError("_toc.yml: no page holds the {bibliography} directive")
        bibfiles = self.config.get("bibtex_bibfiles") or []
        if len(bibfiles) != 1:
            raise ValueError(f"_config.yml: bibtex_bibfiles must name one file, got {bibfiles!r}")
        cite_id = str(((self.config.get("sphinx") or {}).get("config") or {}).get("bibtex_cite_id") or "")
        if "{key}" not in cite_id:
            raise ValueError("_config.yml: sphinx.config.bibtex_cite_id must contain {key} (the citations' anchors)")
        self.bib = Bibliography(self.root / bibfiles[0], self.page_url(bib_page), cite_id)
        self.titles: Dict[str, str] = {}
        self.targets: Dict[str, Target] = {}
        #: every page's citations as written into its copy, in order (the tests hold them against the site)
        self.citations: Dict[str, List[str]] = {}
        self._resolve = False
        self._read_all()                    # first reading: numbers, labels and titles
        first = dict(self.targets)
        self._resolve = True
        self._converted = self._read_all()  # second reading: the references resolved
        if self.targets != first:           # pragma: no cover - both readings number alike
            raise AssertionError("reader notebooks: the two readings of the book numbered differently")

    # -- structure --------------------------------------------------------------------------------

    def page_url(self, docname: str) -> str:
        return f"{self.site}{docname}.html"

    def _read_all(self) -> Dict[str, List[str]]:
        self._counters: Dict[Tuple[str, Tuple[int, ...]], int] = {}
        self._top_children: Dict[str, int] = {}
        return {p.docname: self._convert_page(p) for p in self.pages}

    def source_markdown(self, docname: str) -> List[str]:
        """The Markdown cells of a page as written, in order (a Markdown page is one cell)."""
        if docname not in self.by_name:
            raise ValueError(f"docname must be a page of _toc.yml, got {docname!r}")
        page = self.by_name[docname]
        if page.path.suffix == ".md":
            return [page.path.read_text()]
        nb = json.loads(page.path.read_text())
        return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
                for c in nb["cells"] if c["cell_type"] == "markdown"]

    def _convert_page(self, page: Page) -> List[str]:
        """The page's Markdown cells, converted (numbers and labels recorded on the way)."""
        if page.parent is not None:
            parent = self.by_name[page.parent]
            own = self._top_children.get(page.parent, 0)
            page.number = parent.number + (own + parent.children.index(page.docname) + 1,) if parent.number else ()
        elif page.chapter is not None:
            page.number = (page.chapter,)
        else:
            page.number = ()
        self._page = page
        self.citations[page.docname] = []
        self._stack: List[_OpenHeading] = []
        if page.docname.startswith(API_DIR):           # the API reference: Sphinx's autodoc pages, no
            return []                                  # reader copy (Markdown pages get none anyway)
        self._h1 = False
        cells = [self._lines(src.split("\n"), top=True) for src in self.source_markdown(page.docname)]
        self._top_children[page.docname] = self._stack[0].children if self._stack else 0
        return cells

    def _next(self, kind: str) -> str:
        key = (kind, self._page.number[:1])
        self._counters[key] = self._counters.get(key, 0) + 1
        return ".".join(map(str, self._page.number[:1] + (self._counters[key],)))

    # -- Markdown -----------------------------------------------------------------------------------

    def _lines(self, lines: List[str], top: bool) -> str:
        parts: List[Tuple[str, str]] = []
        for block in _blocks(lines):
            if isinstance(block, Directive):
                out = self._directive(block)
                parts.append(("block", "\n".join(block.indent + ln if ln else ln for ln in out.split("\n"))))
            elif block[0] == "code":
                parts.append(("text", "\n".join(block[1])))
            else:
                parts.append(("text", self._text(block[1], top)))
        out_lines: List[str] = []
        for i, (kind, chunk) in enumerate(parts):
            if kind == "block" and out_lines and out_lines[-1].strip():
                out_lines.append("")        # a quote needs a blank line before ...
            out_lines += chunk.split("\n")
            if kind == "block" and i + 1 < len(parts) and parts[i + 1][1].split("\n")[0].strip():
                out_lines.append("")        # ... and after it, or the next paragraph joins it
        return "\n".join(out_lines)

    def _text(self, lines: List[str], top: bool) -> str:
        kept = []
        for ln in lines:
            if _LABEL_LINE.match(ln):
                raise ValueError(f"{self._page.docname}: label targets such as {ln.strip()!r} are not supported "
                                 "by the reader notebooks (use a heading anchor or a prf/equation label)")
            h = _HEADING.match(ln) if top else None
            if h:
                ln = h.group("hashes") + " " + self._heading(len(h.group("hashes")), h.group("text"))
            kept.append(ln)
        return _INLINE.sub(self._inline, "\n".join(kept))

    def _heading(self, level: int, text: str) -> str:
        """A heading with its section number (on a numbered page): the page's number for its title, the
        enclosing heading's number and a count below it."""
        while self._stack and self._stack[-1].level >= level:
            self._stack.pop()
        if not self._stack:
            if self._page.docname in self.titles and self._h1:
                raise ValueError(f"{self._page.docname}: a page has one top-level heading; found a second: {text!r}")
            self._h1 = True
            self.titles[self._page.docname] = text.strip()
            number = self._page.number
        else:
            parent = self._stack[-1]
            parent.children += 1
            number = parent.number + (parent.children,) if self._page.number else ()
        self._stack.append(_OpenHeading(level, number))
        return f"{'.'.join(map(str, number))}. {text}" if number else text

    def _inline(self, m: re.Match) -> str:
        if m.group("code"):
            return m.group(0)
        if m.group("math"):
            if not m.group("label"):
                return m.group(0)
            number = self._next("displaymath")
            label = m.group("label")
            self._define(label, "equation-" + label, f"({number})")
            body = m.group("body").rstrip()
            return f"$${body}\n\\tag{{{number}}}\n$$" if "\n" in body else f"$${body} \\tag{{{number}}}$$"
        return self._role(m.group("name"), m.group("content"))

    def _define(self, label: str, anchor: str, text: str) -> None:
        from docutils.nodes import make_id

        if anchor.startswith("equation-"):
            anchor = make_id(anchor)
        target = Target(self._page.docname, anchor, text)
        if not self._resolve and label in self.targets and self.targets[label] != target:
            raise ValueError(f"{self._page.docname}: label {label!r} is defined twice "
                             f"(also in {self.targets[label].docname})")
        self.targets[label] = target

    # -- roles --------------------------------------------------------------------------------------

    def _role(self, name: str, content: str) -> str:
        where = f"{self._page.docname}: {{{name}}}`{content}`"
        if name in ("cite", "cite:p", "cite:ps", "cite:t", "cite:ts"):
            text = self.bib.cite(content.split(","), textual=name.startswith("cite:t"), where=where,
                                 full=name.endswith("s"))
            self.citations[self._page.docname].append(text)
            return text
        if name == "math":
            return f"${content}$"
        title, target = _explicit_title(content)
        if name == "doc":
            docname = _resolve_doc(self._page.docname, target)
            if docname not in self.by_name:
                raise ValueError(f"{where}: no page {docname!r} in _toc.yml")
            if not self._resolve:
                return content
            return f"[{title or self.titles.get(docname, docname)}]({self.page_url(docname)})"
        if name in ("eq", "prf:ref"):
            if not self._resolve:
                return content
            if target not in self.targets:
                raise ValueError(f"{where}: no {'equation' if name == 'eq' else 'theorem-like block'} "
                                 f"labelled {target!r}")
            t = self.targets[target]
            if (name == "eq") != t.anchor.startswith("equation-"):
                raise ValueError(f"{where}: {target!r} is a{' block' if name == 'eq' else 'n equation'}, "
                                 f"use {{{'prf:ref' if name == 'eq' else 'eq'}}}")
            return f"[{title or t.text}]({self.page_url(t.docname)}#{t.anchor})"
        if name.startswith("py:"):                     # a name of the API reference: code, linked there
            if not self._resolve:
                return content
            return self._api_link(title, target.lstrip("~"), where)
        raise ValueError(f"{where}: the role {{{name}}} is not supported by the reader notebooks")

    def _api_link(self, title: Optional[str], dotted: str, where: str) -> str:
        """``dotted`` as inline code linking to its anchor on the API page of the module that holds it."""
        parts = dotted.split(".")
        for n in range(len(parts), 0, -1):
            docname = API_DIR + ".".join(parts[:n])
            if docname in self.by_name:
                return f"[`{title or dotted}`]({self.page_url(docname)}#{dotted})"
        raise ValueError(f"{where}: no page of the API reference holds {dotted!r}")

    # -- directives -----------------------------------------------------------------------------------

    def _directive(self, d: Directive) -> str:
        where = f"{self._page.docname}, line {d.line}: {{{d.name}}}"
        name = d.name
        if name.startswith("prf:") and name[4:] in PROOF_TYPES:
            kind = name[4:]
            title = kind.title()
            if "nonumber" not in d.options:
                title += " " + self._next(kind)
                if "label" in d.options:
                    self._define(d.options["label"], d.options["label"], title)
            if d.argument:
                title += f" ({self._inline_text(d.argument)})"
            return _quote(f"**{title}**\n\n" + self._lines(d.body, top=False))
        if name == "prf:proof":
            return _quote("**Proof.**\n\n" + self._lines(d.body, top=False))
        if name in ADMONITIONS:
            title = ADMONITIONS[name]
            body = d.body
            if name in ("admonition", "dropdown"):
                if not d.argument and name == "admonition":
                    raise ValueError(f"{where}: an admonition needs a title")
                title = self._inline_text(d.argument)
            elif d.argument:
                body = [d.argument] + body
            head = f"**{title}**\n\n" if title else ""
            return _quote(head + self._lines(body, top=False))
        if name == "math":
            tex = "\n".join(d.body).strip("\n")
            if "label" in d.options:
                number = self._next("displaymath")
                self._define(d.options["label"], "equation-" + d.options["label"], f"({number})")
                tex += f"\n\\tag{{{number}}}"
            return f"$$\n{tex}\n$$"
        if name == "bibliography":
            return self.bib.markdown_list()
        raise ValueError(f"{where}: this directive is not supported by the reader notebooks "
                         f"(supported: {', '.join(['prf:' + t for t in PROOF_TYPES] + ['prf:proof', 'math', 'bibliography'] + list(ADMONITIONS))})")

    def _inline_text(self, text: str) -> str:
        return _INLINE.sub(self._inline, text)

    # -- notebooks ----------------------------------------------------------------------------------

    def converted_markdown(self, docname: str) -> List[str]:
        """The converted Markdown cells of a page, in order (a Markdown page is one cell)."""
        if docname not in self._converted:
            raise ValueError(f"docname must be a page of _toc.yml, got {docname!r}")
        return list(self._converted[docname])

    def notebook(self, docname: str) -> dict:
        """The reader copy of notebook page ``docname``: its Markdown cells converted, code cells as they
        are with no outputs, the jupytext pairing left out."""
        page = self.by_name.get(docname)
        if page is None or page.path.suffix != ".ipynb":
            raise ValueError(f"docname must be a notebook page of _toc.yml, got {docname!r}")
        nb = json.loads(page.path.read_text())
        out = copy.deepcopy(nb)
        out["metadata"].pop("jupytext", None)
        out["metadata"]["path_book"] = {"reader_copy_of": str(page.path.relative_to(self.root)),
                                        "page": self.page_url(docname)}
        markdown = iter(self._converted[docname])
        for cell in out["cells"]:
            if cell["cell_type"] == "markdown":
                cell["source"] = _source_lines(next(markdown))
            elif cell["cell_type"] == "code":
                cell["outputs"] = []
                cell["execution_count"] = None
        return out

    def notebook_pages(self) -> List[str]:
        return [p.docname for p in self.pages if p.path.suffix == ".ipynb"]

    def reader_path(self, docname: str) -> Path:
        """Where the reader copy of ``docname`` lives: ``notebooks/<docname>.ipynb``."""
        return self.root / READER_DIR / f"{docname}.ipynb"


def _explicit_title(content: str) -> Tuple[Optional[str], str]:
    m = re.fullmatch(r"\s*(.*?)\s*<([^<>]+)>\s*", content, re.S)
    return (m.group(1), m.group(2).strip()) if m and m.group(1) else (None, content.strip())


def _resolve_doc(current: str, target: str) -> str:
    target = re.sub(r"\.(ipynb|md)$", "", target.strip())
    if target.startswith("/"):
        return target.lstrip("/")
    parts = current.split("/")[:-1]
    for p in target.split("/"):
        if p == "..":
            parts = parts[:-1]
        elif p and p != ".":
            parts.append(p)
    return "/".join(parts)


def _source_lines(text: str) -> List[str]:
    lines = text.split("\n")
    return [ln + "\n" for ln in lines[:-1]] + ([lines[-1]] if lines[-1] else [])


def _dump(nb: dict) -> str:
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


# ------------------------------------------------------------------------------------------------
# writing and checking notebooks/
# ------------------------------------------------------------------------------------------------

def _expected(book: ReaderBook) -> Dict[Path, str]:
    return {book.reader_path(d): _dump(book.notebook(d)) for d in book.notebook_pages()}


def stale_reader_notebooks(root: Union[str, Path, None] = None) -> List[str]:
    """Paths under ``notebooks/`` that differ from a fresh conversion: missing, changed, or left over
    from a page that is gone (relative to the root). Empty when the folder is up to date."""
    book = ReaderBook(root)
    expected = _expected(book)
    stale = [str(p.relative_to(book.root)) for p, text in expected.items()
             if not p.is_file() or p.read_text() != text]
    folder = book.root / READER_DIR
    extra = [p for p in folder.rglob("*.ipynb") if p not in expected] if folder.is_dir() else []
    return sorted(stale + [str(p.relative_to(book.root)) for p in extra])


def write_reader_notebooks(root: Union[str, Path, None] = None) -> List[Path]:
    """Write every notebook page's reader copy under ``notebooks/`` (only those that changed) and remove
    copies of pages no longer in the toc. Returns the files written."""
    book = ReaderBook(root)
    written = []
    for path, text in _expected(book).items():
        if not path.is_file() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            written.append(path)
    expected = {book.reader_path(d) for d in book.notebook_pages()}
    folder = book.root / READER_DIR
    for p in sorted(folder.rglob("*.ipynb")) if folder.is_dir() else []:
        if p not in expected:
            p.unlink()
    return written


def setup(app: Any) -> dict:
    """The Sphinx extension (``_config.yml`` lists ``path_lib.book.reader``): every build of the book
    first rewrites ``notebooks/`` from the sources, and the download button of a notebook page
    (``_sources/<page>.ipynb``) gives its reader copy too."""

    from sphinx.util import logging

    logger = logging.getLogger(__name__)

    def write_copies(app: Any) -> None:
        written = write_reader_notebooks(app.srcdir)
        logger.info(f"reader notebooks: {len(written)} rewritten under {READER_DIR}/"
                    + (" (commit them with the pages)" if written else ""))

    def copy_to_downloads(app: Any, exception: Optional[BaseException]) -> None:
        if exception is not None or getattr(app.builder, "format", "") != "html":
            return
        book = ReaderBook(app.srcdir)
        for docname in book.notebook_pages():
            download = Path(app.outdir) / "_sources" / f"{docname}.ipynb"
            if download.parent.is_dir():
                download.write_text(_dump(book.notebook(docname)))

    app.connect("builder-inited", write_copies)
    app.connect("build-finished", copy_to_downloads)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m path_lib.book.reader", description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="only report reader notebooks that are out of date")
    ap.add_argument("--root", default=None, help="the repository root (default: this checkout)")
    args = ap.parse_args(argv)
    if args.check:
        stale = stale_reader_notebooks(args.root)
        for s in stale:
            print(f"out of date: {s}")
        if stale:
            print("run: python -m path_lib.book.reader")
        return 1 if stale else 0
    written = write_reader_notebooks(args.root)
    print(f"reader notebooks: {len(written)} written under {READER_DIR}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
