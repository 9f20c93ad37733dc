"""The API reference (path_lib.book.api, book/api/*.md, built by Sphinx's autodoc).

Without a build: every public module of path_lib and path_lib.kernels has its page, written as
path_lib.book.api writes it, listed in _toc.yml; every exported function and class has a docstring;
the first page's examples run, its cross-references name documented objects and chapters of the book,
and its groups hold every module once; the extension's rules (indented blocks in module docstrings, re-exports, short names) are checked on
a small Sphinx build of their own. With the book built (_build/html): every module's page has its
heading and its objects' anchors, and the site's search index knows the documented names.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
import posixpath
import re
from pathlib import Path

import pytest

from path_lib.book import api
from path_lib.book.notebook import toc_files
from site_helpers import built_html

ROOT = Path(__file__).resolve().parent.parent
PUBLIC = api.public_modules()
REGENERATE = "run `python -m path_lib.book.api` (and `--toc` for _toc.yml)"


def test_public_modules_are_every_non_private_module():
    for pkg_name in ("path_lib", "path_lib.kernels"):
        pkg = importlib.import_module(pkg_name)
        for info in pkgutil.walk_packages(pkg.__path__, prefix=pkg_name + "."):
            private = any(p.startswith("_") for p in info.name.split("."))
            assert (info.name in PUBLIC) == (not private and not info.name.startswith("path_lib.book")), info.name
    for name in ("path_lib", "path_lib.impl", "path_lib.reference.attention", "path_lib.kernels",
                 "path_lib.training.loop", "path_lib.ledger.claims", "path_lib.theory.costs"):
        assert name in PUBLIC


@pytest.mark.parametrize("name", PUBLIC)
def test_every_exported_function_and_class_has_a_docstring(name):
    mod = importlib.import_module(name)
    undocumented = [e["name"] for e in api.module_entries(name) if e["kind"] in ("class", "function") and not e["doc"]]
    assert not undocumented, f"{name}: exported without a docstring: {undocumented}"
    assert [e["name"] for e in api.module_entries(name)] == list(getattr(mod, "__all__", []))


@pytest.mark.parametrize("name", PUBLIC)
def test_every_module_has_its_page(name):
    page = ROOT / f"{api.page_docname(name)}.md"
    assert page.exists(), f"{page.relative_to(ROOT)} is missing: {REGENERATE}"
    text = page.read_text()
    assert text == api.module_page(name, PUBLIC), f"{page.relative_to(ROOT)} is out of date: {REGENERATE}"
    assert text.startswith(f"# `{name}`\n") and f".. automodule:: {name}\n" in text


def test_no_page_without_a_module_and_the_index_is_current():
    pages = sorted(p.stem for p in (ROOT / api.API_DIR).glob("*.md"))
    assert pages == sorted(["index", *PUBLIC]), f"pages and modules differ: {REGENERATE}"
    assert (ROOT / api.API_DIR / "index.md").read_text() == api.index_page(PUBLIC), REGENERATE


def test_the_toc_lists_every_page_in_the_reference_order():
    listed = [f for f in toc_files(ROOT) if f.startswith(api.API_DIR + "/")]
    assert listed == [f"{api.API_DIR}/index"] + [api.page_docname(m) for m in api.ordered_modules(PUBLIC)], REGENERATE
    toc = (ROOT / "_toc.yml").read_text()
    block = "\n".join(line[2:] for line in api.toc_lines(PUBLIC, indent=10))
    assert block in "\n".join(line[2:] for line in toc.splitlines()), f"_toc.yml nests the pages otherwise: {REGENERATE}"


def test_order_and_nesting():
    order = api.ordered_modules(PUBLIC)
    assert order[:3] == ["path_lib", "path_lib.impl", "path_lib.reference"]
    assert order.index("path_lib.reference.householder") < order.index("path_lib.blockwise")
    lines = api.toc_lines(["path_lib", "path_lib.nn", "path_lib.nn.layers", "path_lib.zzz"], indent=0)
    assert lines == ["- file: book/api/path_lib", "- file: book/api/path_lib.nn", "  sections:",
                     "    - file: book/api/path_lib.nn.layers", "- file: book/api/path_lib.zzz"]


def test_reexports_point_at_where_a_name_is_defined():
    top = api.reexports("path_lib", PUBLIC)
    assert top["path_attention"] == "path_lib.impl.path_attention"
    assert top["TinyLM"] == "path_lib.nn.model.TinyLM"
    assert set(top) == set(importlib.import_module("path_lib").__all__)
    # a module's own names and its constants are its own; the kernels' names come from a private module
    assert api.reexports("path_lib.impl", PUBLIC) == {}
    assert "KernelConfig" not in api.reexports("path_lib.kernels", PUBLIC)
    page = api.module_page("path_lib", PUBLIC)
    assert ":exclude-members: path_attention," in page and "   path_lib.impl.path_attention\n" in page


def test_bad_names_are_refused():
    with pytest.raises(ValueError, match="module must be"):
        api.module_page("path_lib.book.api", PUBLIC)
    with pytest.raises(ValueError, match="module must be"):
        api.page_docname("torch.nn")


def test_indented_blocks_of_a_module_docstring_become_literal_blocks():
    doc = ["Summary.", "", "    from x import y", "", "Layout:", "", "    a   b", "", "* item", "",
           "    inside the item", "", "Title", "-----", "", "    quoted", "", "Code::", "", "    kept",
           "", ".. note::", "", "   a note"]
    out = api.preformatted_blocks(doc)
    # the summary sentence stays as written (autosummary shows it): a "::" paragraph of its own follows it
    assert out[:5] == ["Summary.", "", "::", "", "    from x import y"] and out[6] == "Layout::"
    assert out[10:] == doc[8:]                   # list items, titles, literal blocks, directives unchanged
    assert api.preformatted_blocks(["    only a block"]) == ["    only a block"]


# --- the first page: where to start, examples that run, the modules by role ----------------------

INDEX = api.index_page(PUBLIC)
ROLE = re.compile(r"\{py:(func|class|data|mod)\}`([^`]+)`")
EXAMPLE_BLOCKS = re.findall(r"^```python\n(.*?)^```$", INDEX, re.S | re.M)


def test_the_index_shows_every_example():
    assert len(EXAMPLE_BLOCKS) == len(api.EXAMPLES) >= 1
    assert [b.rstrip("\n") for b in EXAMPLE_BLOCKS] == [code.rstrip("\n") for _, code in api.EXAMPLES]


@pytest.mark.parametrize("i", range(len(EXAMPLE_BLOCKS)))
def test_the_index_examples_run(i):
    """Each code block of the first page, as a reader would copy it, runs on the CPU (tiny shapes)."""
    import torch

    with torch.random.fork_rng():
        exec(compile(EXAMPLE_BLOCKS[i], f"<book/api/index.md, example {i + 1}>", "exec"), {"__name__": "__example__"})


def _documented_as(target: str) -> str:
    """The role under which ``target`` has an anchor of its own: "mod", "class", "func" or "data" ("" when none:
    not a public module's own exported name)."""
    if target in PUBLIC:
        return "mod"
    module, _, name = target.rpartition(".")
    if module not in PUBLIC or name in api.reexports(module, PUBLIC):
        return ""
    if name in api.LAZY_ATTRIBUTES.get(module, {}):
        return "data"
    mod = importlib.import_module(module)
    if name not in getattr(mod, "__all__", ()):
        return ""
    obj = getattr(mod, name)
    return "class" if inspect.isclass(obj) else "func" if inspect.isroutine(obj) else "data"


def test_the_index_cross_references_name_documented_objects():
    refs = ROLE.findall(INDEX)
    assert len(refs) >= len(api.START_HERE)
    wrong = [(role, target) for role, target in refs if _documented_as(target) != role]
    assert not wrong, f"cross-references without an anchor of that kind: {wrong}"
    for task, entry, when in api.START_HERE:
        assert ROLE.fullmatch(entry), f"{task}: the entry point is one cross-reference, got {entry!r}"
        assert "|" not in task + when, f"{task}: a table cell holds a '|'"


def test_the_index_links_chapters_of_the_book():
    listed = set(toc_files(ROOT))
    docs = re.findall(r"\{doc\}`([^`]+)`", INDEX)
    assert docs
    missing = [d for d in docs if posixpath.normpath(posixpath.join(api.API_DIR, d)) not in listed]
    assert not missing, f"links to pages the book does not have: {missing}"


def test_the_index_groups_every_module_once():
    groups = api.module_groups(PUBLIC)
    listed = [m for _, _, modules in groups for m in modules]
    assert sorted(listed) == sorted(PUBLIC) and len(listed) == len(set(listed))
    assert "Other modules" not in [title for title, _, _ in groups], "a module has no group: add it to api.GROUPS"
    assert all(name in PUBLIC for _, _, names in api.GROUPS for name in names), "api.GROUPS names a module that is gone"
    for title, _, modules in groups:
        assert f"### {title}\n" in INDEX and "\n".join(f"   {m}" for m in modules) in INDEX, title
    # the longest name decides (path_lib.nn.cache is decoding, not layers); a new module goes to its
    # package's group, one outside every group to "Other modules", never to the top level
    extra = {m: title for title, _, modules in api.module_groups(PUBLIC + ["path_lib.nn.new", "path_lib.zzz"])
             for m in modules}
    assert extra["path_lib.nn.cache"] == extra["path_lib.decoding"] != extra["path_lib.nn"]
    assert extra["path_lib.nn.new"] == extra["path_lib.nn.layers"]
    assert extra["path_lib.zzz"] == "Other modules"


# --- a small build of its own: the extension's rules in Sphinx -----------------------------------

PAGE = """# Test page

Links: {py:func}`path_lib.householder` (re-exported), {py:data}`FULL_MIN_SMS` (a short name).

```{eval-rst}
.. automodule:: path_lib.hardware
   :members:
```

```{eval-rst}
.. automodule:: path_lib.reference.householder
   :members:
```
"""


@pytest.fixture(scope="module")
def small_build(tmp_path_factory):
    sphinx = pytest.importorskip("sphinx.application")
    src = tmp_path_factory.mktemp("api_src")
    out = tmp_path_factory.mktemp("api_html")
    (src / "conf.py").write_text(
        "extensions = ['myst_parser', 'path_lib.book.api']\n"
        "autodoc_inherit_docstrings = False\nnapoleon_numpy_docstring = False\n")
    (src / "index.md").write_text(PAGE)
    warnings = tmp_path_factory.mktemp("api_log") / "warnings.txt"
    with open(warnings, "w") as log:
        app = sphinx.Sphinx(str(src), str(src), str(out), str(out / ".doctrees"), "html",
                            status=None, warning=log, freshenv=True)
        app.build()
    return out, warnings.read_text()


def test_the_extension_in_a_small_build(small_build):
    out, warnings = small_build
    html = (out / "index.html").read_text()
    # the re-exported name links to its definition, the short name to the module's constant
    assert re.search(r'href="#path_lib\.reference\.householder\.householder"[^>]*><code[^>]*>'
                     r'<span class="pre">path_lib\.householder', html), "path_lib.householder did not resolve"
    assert 'href="#path_lib.hardware.FULL_MIN_SMS"' in html
    # every name of __all__: FULL_MIN_SMS has no #: comment, yet it is there, without int()'s docstring
    assert 'id="path_lib.hardware.FULL_MIN_SMS"' in html and "int([x]) -&gt; integer" not in html
    # a long value (the GPU table) is left out, a short one shown
    gpus = html[html.index('id="path_lib.hardware.GPUS"') + 1:]
    assert "NVIDIA H200" not in gpus[:gpus.index('id="path_lib.')]       # up to the next entry
    assert re.search(r'id="path_lib\.hardware\.PRESET_NAMES".{0,600}tiny', html, re.S)
    # the module docstring's example is a literal block, not a reflowed quotation
    assert re.search(r"<pre><span></span>.{0,80}from.{0,80}path_lib\.hardware", html, re.S)
    assert "WARNING" not in warnings and "ERROR" not in warnings, warnings


# --- the built site ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def site():
    return built_html()


@pytest.mark.parametrize("name", PUBLIC)
def test_each_module_page_is_built_with_its_heading_and_anchors(site, name):
    from bs4 import BeautifulSoup

    path = site / f"{api.page_docname(name)}.html"
    assert path.exists(), f"{path} was not built"
    soup = BeautifulSoup(path.read_text(), "html.parser")
    h1 = soup.select_one("article h1") or soup.find("h1")
    assert h1 is not None and name in h1.get_text(), f"{name}: no heading naming the module"
    assert soup.find(id=f"module-{name}") is not None, f"{name}: no module anchor"
    mod = importlib.import_module(name)
    own = [n for n in getattr(mod, "__all__", []) if n not in api.reexports(name, PUBLIC)]
    missing = [n for n in own if soup.find(id=f"{name}.{n}") is None]
    assert not missing, f"{name}: exported names without an anchor: {missing}"


def test_the_search_index_knows_the_api(site):
    index = (site / "searchindex.js").read_text()
    for word in ("path_attention", "path_lib.impl", "resolve_backend", "TinyLM", "PaTHAttention"):
        assert word in index, f"{word} is not in the site's search index"


def test_the_index_shows_each_modules_summary_as_written(site):
    """The index's table gives each module's first sentence, with no reST marker (a "::" that marks a
    literal block) left in it."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup((site / "book" / "api" / "index.html").read_text(), "html.parser")
    cells = [td.get_text(" ", strip=True) for td in soup.select("article table td")]
    assert len(cells) >= 2 * len(PUBLIC) - 2, len(cells)
    assert not [c for c in cells if "::" in c], [c for c in cells if "::" in c][:3]
