"""Real-browser checks of the built book (_build/html), one test per page of the toc.

Serves the site on 127.0.0.1 and drives Debian's Chromium through Playwright, with every request
to any other host aborted and recorded: the site must work offline. Per page it checks that
MathJax typeset all math without TeX errors, that no Markdown is left unrendered in the visible
text (a table's `|---|` rule, `$...$` TeX, `--` turned into a dash), that no cell output shows an
error, that the Colab link points at a notebook that exists in the repository, that static widgets
respond to their sliders, and that no JavaScript error or failed local request happened. The speed
page must show its Markdown tables as real tables. At the width a reader's laptop gives (a 1280 px
window, where the content column is about 684 px, some 80 characters of code), nothing may be clipped
or need a sideways scroll: no code block, cell output or table is wider than its box, nor is any of
their containers (`overflow_problems`, which names the page's section and the element), and every
display equation fits its column (`equation_problems`). At a phone's width (390 px) a display
equation may be wider than the column, but only inside a box that scrolls sideways, never cut off.

The text checks are plain functions (`raw_markdown_problems`) with unit tests that need no browser,
fed text of the old, broken rendering.

Without a build: skipped locally, failed when $CI is set (`make test` always builds first).
"""
from __future__ import annotations

import functools
import http.server
import os
import re
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest
from path_lib.book.notebook import toc_files
from site_helpers import HTML, built_html

ROOT = Path(__file__).resolve().parent.parent
# The built site; PATH_BOOK_HTML points the tests at another build (e.g. an older one, to compare).
CHROMIUM = os.environ.get("PATH_BOOK_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
LOCAL_HOSTS = {"127.0.0.1"}
#: The reader's window: a 1280 px wide laptop screen (the content column is then about 684 px).
VIEWPORT = {"width": 1280, "height": 900}

browser_test = pytest.mark.browser

#: Pages whose cell outputs must contain real <table> elements (tables built with display(Markdown)).
PAGES_WITH_OUTPUT_TABLES = {"book/part3/10_speed"}

# --- Markdown left unrendered in the visible text -----------------------------------------------
#: The rule row of a Markdown table, e.g. "|---|:--:|". Sphinx's smartquotes turns "---" into an
#: em dash and "--" into an en dash, so an unrendered table may also read "|—|—|".
TABLE_RULE = re.compile(r"\|[ \t]*:?(?:-{3,}|[\u2013\u2014][-\u2013\u2014]*):?[ \t]*\|")
#: "$...$" left as text (pandoc's rule for inline math: no space just inside either dollar, no digit
#: right after the closing one, so "$5 and $10" is not math) and "$$...$$" (may span lines).
RAW_INLINE_MATH = re.compile(r"(?<![\\$])\$(?=[^\s$])[^$\n]{1,300}?(?<=[^\s$\\])\$(?![\d$])")
RAW_DISPLAY_MATH = re.compile(r"(?<!\\)\$\$[^$]{1,2000}?\$\$")
#: An option "--flag" whose "--" smartquotes turned into a dash ("–rep 25"): a dash glued to the
#: start of a word.
DASHED_OPTION = re.compile(r"(?<![\w\u2013\u2014-])[\u2013\u2014](?=[A-Za-z])")

#: Internal project documents, which no page may show, not even in a cell's output (the sources
#: are checked by tests/test_book_structure.py; this catches text that cells print).
INTERNAL_DOCUMENTS = re.compile(r"(?i:PATH[_ ]NOTES|\bNOTES\.md\b|\bdesign[ -]notes?\b)|\bCONTRIBUTING\b"
                                r"|\b(?:DESIGN|HISTORY)\.md\b")

#: The article's text, as {prose, all}. "prose" leaves out what may legitimately hold "$" or "|---|"
#: (code cells' source, literal blocks and inline code, typeset math); "all" keeps everything but
#: scripts and styles. Taken from a clone of the article with a line break after every block element,
#: so that collapsed dropdowns (exercise solutions) are included, which innerText would skip.
ARTICLE_TEXT_JS = """() => {
    const root = document.querySelector("main article") || document.querySelector("article") || document.body;
    const text = (skip) => {
        const clone = root.cloneNode(true);
        clone.querySelectorAll(skip).forEach(e => e.remove());
        clone.querySelectorAll("p, li, dt, dd, td, th, tr, h1, h2, h3, h4, h5, h6, caption, " +
                               "figcaption, blockquote, div, section, table, br, pre")
             .forEach(e => e.appendChild(document.createTextNode("\\n")));
        return clone.textContent;
    };
    return {prose: text("div.cell_input, pre, code, kbd, samp, script, style, textarea, " +
                        ".math, mjx-container, .MathJax"),
            all: text("script, style, mjx-container")};
}"""


def raw_markdown_problems(text: str) -> list[str]:
    """What in a page's visible ``text`` is Markdown that was not rendered (empty list: none)."""
    problems = []
    lines = text.splitlines()
    for line in lines:
        if TABLE_RULE.search(line):
            problems.append(f"unrendered Markdown table: {line.strip()[:120]!r}")
    for pattern in (RAW_DISPLAY_MATH, RAW_INLINE_MATH):
        for m in pattern.finditer(text):
            problems.append(f"unrendered math: {m.group(0)[:120]!r}")
    for line in lines:
        if DASHED_OPTION.search(line):
            problems.append(f'"--" shown as a dash (smartquotes?): {line.strip()[:120]!r}')
    return problems


# Text of the old rendering (myst-nb's default "commonmark" for cell outputs, smartquotes on), as
# the speed page showed it: the checks must flag every line of it.
OLD_RENDERING = [
    "| D | T | FlashAttention (GFLOP) | blockwise scan | Triton kernel (segmented) | segments x blocks |\n"
    "|\u2014|\u2014|\u2014|\u2014|\u2014|\u2014|\n| 64 | 1024 | 146 | 2.62x | 1.95x | 4 x 4 |",
    "| D | T | ratio |\n|---|---|:---:|\n| 64 | 1024 | 1.95x |",
    "At $T \\ge 4096$ the kernel's forward needs 1.13 to 1.47 times FlashAttention's operations.",
    "the error grows like $\\lVert \\hat w \\rVert^2$ here",
    "a display\n$$\nS = QK^\\top\n$$\nend",
    "Recorded run: NVIDIA H200, 2026-12-01; command: python3 benchmarks/bench_path.py \u2013rep 25",
]

# Rendered text that must pass: what a table, math and prose look like once rendered.
GOOD_RENDERING = [
    "D\tT\tFlashAttention (GFLOP)\n64\t1024\t146",
    "It costs $5 to $10 per run, and 2 - 3 = -1; a range 1\u20132; a pause \u2014 then more.",
    "x | y | z (a plain sentence with pipes)",
    "Recorded run: NVIDIA H200; command: python3 benchmarks/bench_path.py --rep 25",
]


@pytest.mark.parametrize("text", OLD_RENDERING)
def test_raw_markdown_is_detected(text):
    assert raw_markdown_problems(text), f"not flagged: {text!r}"


@pytest.mark.parametrize("text", GOOD_RENDERING)
def test_rendered_text_passes(text):
    assert raw_markdown_problems(text) == []

# --- Nothing wider than its box at a 1280 px window ----------------------------------------------
#: Every shown code block, cell output and table of the article, and each of their containers up to
#: the article, whose content is wider than its box (scrollWidth > clientWidth + 1, the 1 px for rounding):
#: a reader sees it clipped or has to scroll sideways. Each element is reported once (the innermost
#: first), with where it sits (the nearest section's id and heading), its tag and classes, how wide its
#: content is against its box, and the start of its text.
OVERFLOW_JS = """() => {
    const article = document.querySelector("main article") || document.querySelector("article")
                    || document.body;
    const seen = new Set(), out = [];
    const describe = (el) => {
        const cls = (typeof el.className === "string" && el.className.trim())
                    ? "." + el.className.trim().split(/\\s+/).join(".") : "";
        return el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") + cls;
    };
    for (const el of article.querySelectorAll("pre, div.cell_output, table")) {
        for (let box = el; box && box !== article.parentElement; box = box.parentElement) {
            if (seen.has(box)) continue;
            seen.add(box);
            // not shown: display none, or inside a closed <details> (a hidden cell input)
            if (box.clientWidth === 0 || (box.checkVisibility && !box.checkVisibility())) continue;
            if (box.scrollWidth > box.clientWidth + 1) {
                const section = box.closest("section");
                const heading = section && section.querySelector("h1, h2, h3, h4, h5, h6");
                out.push({element: describe(box),
                          section: section ? section.id : "",
                          heading: heading ? heading.textContent.replace("#", "").trim() : "",
                          scroll: box.scrollWidth, client: box.clientWidth,
                          text: (box.innerText || "").trim().split("\\n")[0].slice(0, 80)});
            }
        }
    }
    return out;
}"""


def overflow_problems(page) -> list[str]:
    """One line per element of the open page whose content is wider than its box (see OVERFLOW_JS)."""
    return [f"wider than its box ({o['scroll']} px of content in {o['client']} px): {o['element']} "
            f"in section #{o['section']} ({o['heading'][:60]!r}), text {o['text']!r}"
            for o in page.evaluate(OVERFLOW_JS)]


#: A page with one too-wide element of each kind (code block, cell output, table in its scrolling
#: container) and the same elements at a width that fits: the check must flag the first three only.
OVERFLOW_PAGE = """<!doctype html><html><body><main><article style="width: 684px">
<section id="wide"><h2>Wide</h2>
<div class="cell"><div class="cell_input"><pre id="wide-code">{long_code}</pre></div>
<div class="cell_output"><pre id="wide-output" style="overflow: visible">{long_code}</pre></div></div>
<div class="pst-scrollable-table-container" style="overflow: auto">
<table id="wide-table"><tr>{wide_row}</tr></table></div>
</section>
<section id="narrow"><h2>Narrow</h2>
<div class="cell"><div class="cell_input"><pre id="short-code">{short_code}</pre></div>
<div class="cell_output"><pre id="short-output">{short_code}</pre></div></div>
<div class="pst-scrollable-table-container" style="overflow: auto">
<table id="narrow-table"><tr>{narrow_row}</tr></table></div>
<details><summary>hidden</summary><pre id="hidden-code">{long_code}</pre></details>
</section></article></main></body></html>""".format(
    long_code="x = " + " + ".join(f"term_{i}" for i in range(40)),
    short_code="x = term_0 + term_1",
    wide_row="".join(f"<td>column_number_{i}</td>" for i in range(12)),
    narrow_row="".join(f"<td>c{i}</td>" for i in range(3)))


@browser_test
def test_overflow_check_finds_wide_elements(page):
    page.set_content(OVERFLOW_PAGE)
    found = overflow_problems(page)
    text = "\n".join(found)
    for name in ("pre#wide-code", "div.cell_output", "div.pst-scrollable-table-container"):
        assert any(line.split(": ", 1)[1].startswith(name) and "#wide" in line for line in found), \
            f"{name} in section #wide not flagged:\n{text}"
    assert not any("#narrow" in line for line in found), f"a fitting element was flagged:\n{text}"
    assert "term_0" in text and "'Wide'" in text, text


# --- Display equations: fit the column at 1280 px, scroll (never cut) on a phone ----------------
#: The reader's phone: 390 px wide. Display equations may be wider than the column there, but only
#: inside a box that scrolls sideways (book/_static/path_book.css), never cut off.
PHONE_VIEWPORT = {"width": 390, "height": 844}

#: Every display equation of the article (``mjx-container[display]``) measured against its boxes:
#: the typeset formula's rectangle (its ``svg``) is followed outwards through every container up to
#: the article. A container whose ``overflow-x`` is not ``visible`` and that the formula runs past
#: either scrolls (``auto``/``scroll``: the formula can be reached) or cuts it (``hidden``/``clip``);
#: from then on the container's own rectangle is what must fit further out. A formula that runs
#: past the article with no such container runs off the page. Per equation: its TeX (start), label
#: (the equation's id), rendered width, and the list of {how, where, box width} found.
EQUATIONS_JS = """() => {
    const article = document.querySelector("main article") || document.querySelector("article")
                    || document.body;
    const describe = (el) => {
        const cls = (typeof el.className === "string" && el.className.trim())
                    ? "." + el.className.trim().split(/\\s+/).join(".") : "";
        return el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") + cls;
    };
    const out = [];
    for (const mjx of article.querySelectorAll('mjx-container[display="true"]')) {
        if (mjx.checkVisibility && !mjx.checkVisibility()) continue;
        const svg = mjx.querySelector("svg") || mjx;
        let left = svg.getBoundingClientRect().left, right = svg.getBoundingClientRect().right;
        const width = right - left, found = [];
        for (let box = mjx; box; box = box.parentElement) {
            const r = box.getBoundingClientRect();
            const boxLeft = r.left + box.clientLeft, boxRight = boxLeft + box.clientWidth;
            const past = right > boxRight + 1 || left < boxLeft - 1;
            const ox = getComputedStyle(box).overflowX;
            if (past && box === article) {
                found.push({how: "runs past the article", where: describe(box), box: box.clientWidth});
            } else if (past && ox !== "visible") {
                const scrolls = ox === "auto" || ox === "scroll";
                found.push({how: scrolls ? "scrolls" : "cut", where: describe(box), box: box.clientWidth});
                left = r.left;        // what shows from here on: the box itself
                right = r.right;
            }
            if (box === article) break;
        }
        const holder = mjx.closest("div.math");
        const typeset = (typeof MathJax !== "undefined" && MathJax.startup && MathJax.startup.document)
                        ? Array.from(MathJax.startup.document.math) : [];
        const tex = typeset.find(m => m.typesetRoot === mjx);
        out.push({label: holder && holder.id ? holder.id : "", width: Math.round(width),
                  tex: tex ? tex.math.trim().slice(0, 70) : "", found: found});
    }
    return out;
}"""


def equation_problems(page, *, phone: bool = False) -> list[str]:
    """One line per display equation of the open page that does not fit (see EQUATIONS_JS): at the
    laptop width any equation wider than a box it sits in; at a phone width (``phone``) only one
    that is cut or runs off the page (scrolling inside its box is fine there)."""
    problems = []
    for eq in page.evaluate(EQUATIONS_JS):
        bad = [f for f in eq["found"] if not (phone and f["how"] == "scrolls")]
        if bad:
            where = "; ".join(f"{f['how']} in {f['where']} ({f['box']} px)" for f in bad)
            problems.append(f"display equation {eq['label'] or eq['tex']!r}, {eq['width']} px wide: "
                            f"{where}")
    return problems


def wait_for_math(page, timeout: int = 30_000) -> None:
    """Wait until MathJax has typeset the open page."""
    page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise",
                           timeout=timeout)
    page.evaluate("() => MathJax.startup.promise")


#: Three display equations as MathJax leaves them (an ``svg`` in an ``mjx-container``): one that
#: fits, one wider than the column in a box that scrolls, one wider than the column and cut off.
EQUATIONS_PAGE = """<!doctype html><html><body><main><article style="width: 300px">
<div class="math" id="equation-fits"><mjx-container display="true" style="display: block">
<svg width="200" height="20"></svg></mjx-container></div>
<div class="math" id="equation-scrolls"><mjx-container display="true"
 style="display: block; overflow-x: auto"><svg width="500" height="20"></svg></mjx-container></div>
<div class="math" id="equation-cut" style="overflow: hidden"><mjx-container display="true"
 style="display: block"><svg width="500" height="20"></svg></mjx-container></div>
</article></main></body></html>"""


@browser_test
def test_equation_check_finds_wide_equations(page):
    page.set_content(EQUATIONS_PAGE)
    laptop = "\n".join(equation_problems(page))
    phone = "\n".join(equation_problems(page, phone=True))
    assert "equation-scrolls" in laptop and "equation-cut" in laptop, laptop
    assert "equation-fits" not in laptop, laptop
    assert "equation-cut" in phone and "cut in div#equation-cut" in phone, phone
    assert "runs past" not in phone, phone
    assert "equation-scrolls" not in phone and "equation-fits" not in phone, phone


def toc_pages() -> list[str]:
    """Document names (no suffix) in _toc.yml order."""
    return toc_files(ROOT)


@pytest.fixture(scope="session")
def site():
    """Base URL of the built site served on 127.0.0.1 (a free port), for the whole session."""
    built_html()

    handler = functools.partial(_QuietHandler, directory=str(HTML))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest output readable
        pass


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists():
        msg = f"{CHROMIUM} not found (apt-get install chromium; `make test` does it)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture()
def page(browser):
    """A fresh page whose non-local requests are aborted and recorded in page.problems."""
    context = browser.new_context(viewport=VIEWPORT)
    pg = context.new_page()
    problems: list[str] = []

    def route(r):
        host = urlparse(r.request.url).hostname
        if r.request.url.startswith(("data:", "blob:", "about:")) or host in LOCAL_HOSTS:
            r.continue_()
        else:
            problems.append(f"non-local request: {r.request.url}")
            r.abort()

    context.route("**/*", route)
    pg.on("pageerror", lambda exc: problems.append(f"JavaScript error: {exc}"))
    pg.on("response", lambda resp: resp.status >= 400 and problems.append(
        f"HTTP {resp.status}: {resp.url}"))
    pg.on("requestfailed", lambda req: urlparse(req.url).hostname in LOCAL_HOSTS and problems.append(
        f"failed request: {req.url} ({req.failure})"))
    pg.problems = problems
    try:
        yield pg
    finally:
        context.close()


@browser_test
@pytest.mark.parametrize("docname", toc_pages())
def test_page(site, page, docname):
    url = f"{site}/{docname}.html"
    resp = page.goto(url, wait_until="load")
    assert resp is not None and resp.ok, f"{url}: HTTP {resp and resp.status}"
    failures: list[str] = []

    # --- math: every .math element typeset by MathJax, without TeX errors --------------------
    n_math = page.locator(".math").count()
    if n_math:
        wait_for_math(page)
        if page.locator("mjx-container").count() == 0:
            failures.append(f"{n_math} math elements but no mjx-container: MathJax did not typeset")
        raw = page.locator(".math:not(:has(mjx-container))").count()
        if raw:
            failures.append(f"{raw} of {n_math} math elements were not typeset")
        # TeX errors render as <merror>; undefined macros (noundefined) as red <mtext>.
        bad_tex = page.evaluate("""() => Array.from(MathJax.startup.document.math)
            .filter(m => { const mml = MathJax.startup.toMML(m.root);
                           return mml.includes("<merror") || mml.includes('mathcolor="red"'); })
            .map(m => m.math)""")
        failures += [f"TeX error in: {tex!r}" for tex in bad_tex]
        failures += equation_problems(page)

    # --- no Markdown left unrendered in the visible text (outside code) --------------------------
    text = page.evaluate(ARTICLE_TEXT_JS)
    failures += raw_markdown_problems(text["prose"])
    failures += [f"mentions an internal document: ...{text['all'][max(0, m.start() - 40):m.end() + 40]!r}..."
                 for m in INTERNAL_DOCUMENTS.finditer(text["all"])]
    if docname in PAGES_WITH_OUTPUT_TABLES:
        n_tables = page.locator("div.cell_output table").count()
        if n_tables == 0:
            failures.append("no <table> in any cell output: display(Markdown(...)) tables not rendered")

    # --- cell outputs: no errors, no tracebacks ------------------------------------------------
    n_tb = page.locator(".output.traceback").count()
    if n_tb:
        failures.append(f"{n_tb} cell output(s) show a traceback")
    stderr = page.locator(".output.stderr")
    for i in range(stderr.count()):
        text = stderr.nth(i).inner_text()
        if "Traceback" in text:
            failures.append(f"stderr output shows a traceback: {text[:300]!r}")

    # --- Colab launch links open the page's reader copy (notebooks/, path_lib/book/reader.py) -----
    colab = [a for a in page.locator("a").evaluate_all("els => els.map(e => e.href)")
             if "colab.research.google.com" in a]
    is_notebook = (ROOT / f"{docname}.ipynb").exists()
    if is_notebook and not colab:
        failures.append("notebook page without a Colab launch link")
    for href in colab:
        m = re.search(r"/github/[^/]+/[^/]+/blob/[^/]+/(.+)$", href)
        if not m:
            failures.append(f"unexpected Colab link {href}")
            continue
        target = m.group(1)
        if not (target == f"notebooks/{docname}.ipynb" and (ROOT / target).is_file()):
            failures.append(f"Colab link to {target}, not to this page's reader copy notebooks/{docname}.ipynb")

    # --- static widgets: moving a slider swaps the image ---------------------------------------
    widgets = page.locator(".path-widget")
    for w in range(widgets.count()):
        widget = widgets.nth(w)
        sliders = widget.locator("input.path-widget-slider")
        frames = int(widget.get_attribute("data-frames"))
        sizes = [int(sliders.nth(i).get_attribute("max")) + 1 for i in range(sliders.count())]
        if frames != _prod(sizes):
            failures.append(f"widget {w}: data-frames={frames} but sliders span {sizes}")
        img = widget.locator("img.path-widget-frame")
        for i in range(sliders.count()):
            slider = sliders.nth(i)
            if int(slider.get_attribute("max")) == 0:
                continue
            before = img.get_attribute("src")
            label_before = widget.locator(".path-widget-value").nth(i).inner_text()
            at_max = slider.evaluate("el => el.value === el.max")
            slider.focus()
            page.keyboard.press("ArrowLeft" if at_max else "ArrowRight")
            after = img.get_attribute("src")
            label_after = widget.locator(".path-widget-value").nth(i).inner_text()
            if before == after:
                failures.append(f"widget {w}: moving slider {slider.get_attribute('data-param')} "
                                "did not change the image")
            if label_before == label_after:
                failures.append(f"widget {w}: slider {slider.get_attribute('data-param')} label did not change")

    # --- nothing clipped at a 1280 px window -----------------------------------------------------
    failures += overflow_problems(page)

    failures += page.problems
    assert not failures, f"{docname}:\n  " + "\n  ".join(failures)


@browser_test
@pytest.mark.parametrize("docname", toc_pages())
def test_equations_on_a_phone(site, browser, docname):
    """At a phone's width a display equation may be wider than the column, but it must then scroll
    inside its own box: none may be cut or run off the page."""
    context = browser.new_context(viewport=PHONE_VIEWPORT)
    try:
        page = context.new_page()
        page.route("**/*", lambda r: r.continue_() if urlparse(r.request.url).hostname in LOCAL_HOSTS
                   or r.request.url.startswith(("data:", "blob:", "about:")) else r.abort())
        page.goto(f"{site}/{docname}.html", wait_until="load")
        if page.locator("div.math").count() == 0:
            pytest.skip("no display math on this page")
        wait_for_math(page)
        problems = equation_problems(page, phone=True)
    finally:
        context.close()
    assert not problems, f"{docname} at {PHONE_VIEWPORT['width']} px:\n  " + "\n  ".join(problems)


def _prod(xs):
    out = 1
    for x in xs:
        out *= x
    return out


@browser_test
def test_toc_pages_were_built(site):
    missing = [d for d in toc_pages() if not (HTML / f"{d}.html").exists()]
    assert not missing, f"pages in _toc.yml missing from the build (stale build?): {missing}"
