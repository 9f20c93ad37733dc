"""No page of the built site (_build/html) shows a reader the project's working notes.

A reader sees the chapters' prose, code and outputs. What belongs to the people who make the book
must not be there: internal commands (the experiment scripts, the device runner,
``PATH_BOOK_COMMIT=``), temporary paths and the device's output folder (``/tmp/``, ``/root/out``),
commit hashes (7 to 40 hexadecimal digits), plans and budgets ("GPU-hour", "the CPU budget",
``--budget-s``, "awaiting", "not yet run", "TODO"). One test per page of the toc lists every such
passage with its context. Text a reader has to open is allowed: collapsed dropdowns and
``<details>`` (exercise solutions, provenance notes, hidden cell inputs and outputs); so are scripts
and styles.

The text checks are plain functions (`visible_text`, `status_words`) with tests that need no build.
Without a build: skipped locally, failed when $CI is set (`make test` builds first).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from path_lib.book.notebook import toc_files
from site_helpers import built_html

ROOT = Path(__file__).resolve().parent.parent

#: What a reader must not see, by kind.
STATUS_WORDS = {
    "internal command": re.compile(r"scripts/experiments/|\bpython3?\s+experiments/|run_device\.sh|PATH_BOOK_COMMIT="),
    "temporary path": re.compile(r"/tmp/|/root/out\b"),
    # 7 to 40 hexadecimal digits with at least one digit and one letter: not a word ("deadbeef"), a
    # number (1234567), the digits of a float (8.881784197001252e-16) or a 64-digit SHA-256
    "commit hash": re.compile(r"(?<![\w.])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?!\w|\.\w|[-+]\d)"),
    # "budget" as a plan ("the CPU budget of the book build", "--budget-s 420"), not as a technical
    # term ("a register budget", "a wall-clock budget that cuts the schedule")
    "plan or budget": re.compile(r"\bGPU[- ]hours?\b|\b(?:GPU|CPU|device|compute)[- ]budget|--budget|\bawaiting\b"
                                 r"|\bnot yet run\b|\bTODO\b|\bFIXME\b", re.IGNORECASE),
}
#: A hash right after one of these names the content of data (a corpus's SHA-1), not a commit.
CONTENT_HASH = re.compile(r"\bSHA-?(?:1|256)\s*$", re.IGNORECASE)

#: Elements whose text a reader sees only after opening them (or never): removed before the scan.
#: <details> covers myst-nb's hidden cells and sphinx-design dropdowns; sphinx-togglebutton's
#: dropdown admonitions ({admonition} with :class: dropdown) keep their title visible.
HIDDEN = "script, style, noscript, template, details, .toggle-hidden, [hidden], [aria-hidden='true']"


#: Block elements: a line break after each, so that words of two blocks do not run together.
BLOCKS = "p, li, dt, dd, td, th, tr, h1, h2, h3, h4, h5, h6, caption, figcaption, blockquote, div, section, table, pre, br"


def visible_text(html: str) -> str:
    """The text of a built page's article as a reader sees it without opening anything: hidden and
    collapsed elements removed, the body of a dropdown admonition removed (its title kept), a line
    break after each block element (inline code stays one run of text: "python experiments/x.py")."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "html.parser")
    root = soup.select_one("main article") or soup.find("article") or soup.body or soup
    for el in root.select(HIDDEN):
        el.decompose()
    for box in root.select(".admonition.dropdown, .dropdown.admonition"):
        for child in list(box.children):
            if getattr(child, "get", None) is None or "admonition-title" not in (child.get("class") or []):
                child.extract()
    for el in root.select(BLOCKS):
        el.append("\n")
    return root.get_text("")


def status_words(text: str, context: int = 50) -> list[str]:
    """Every passage of ``text`` that matches :data:`STATUS_WORDS`, as ``kind: 'match' in '...context...'``."""
    found = []
    for kind, pattern in STATUS_WORDS.items():
        for m in pattern.finditer(text):
            if kind == "commit hash" and CONTENT_HASH.search(text[max(0, m.start() - 12):m.start()]):
                continue
            around = text[max(0, m.start() - context):m.end() + context]
            around = re.sub(r"\s+", " ", around).strip()
            found.append(f"{kind}: {m.group(0)!r} in '...{around}...'")
    return found


# --- the checks on made-up pages -----------------------------------------------------------------

BAD = [
    "Run it with `python scripts/experiments/run_lm.py --preset full`.",
    "The record was written to /tmp/lm_full.json on the device.",
    "Measured at commit 1a6ac47 with the split kernels.",
    "f5d52010bd59ed64b617f878b2a5bbcb22c9a82e is where it ran.",
    "This costs about 2 GPU-hours.",
    "It trains six of the nine models (the CPU budget of the book build).",
    "python3 bench.py --budget-s 444 --out /root/out/bench_path.json",
    "Results awaiting the H200 run.",
    "The full preset was not yet run.",
    "bash benchmarks/run_device.sh",
    "PATH_BOOK_COMMIT=$(git rev-parse HEAD) bash benchmarks/run_colab.sh",
    "TODO: rerun on a T4",
    "then python experiments/run_conversion.py",
]

GOOD = [
    "The kernel is 1.95x faster at T = 4096; 1234567 tokens; the word deadbeef; colour #1f77b4.",
    "A SHA-256 of 64 digits: " + "ab12" * 16 + ".",
    "It runs in /home/reader/work and writes to results/lm/lm_full.json.",
    "The experiments of chapter 12 train in about 70 s.",
    "GPU: not measured.",
    "online vs full softmax: 8.881784197001252e-16 and 1.5e-07.",
    "Python 3.11.7 standard library, SHA-1 ddef21c27114: 137 files.",
    "Exercise: Register budget. Floating point is a different budget. A wall-clock budget cuts it.",
]


@pytest.mark.parametrize("text", BAD)
def test_status_words_are_found(text):
    assert status_words(text), f"not flagged: {text!r}"


@pytest.mark.parametrize("text", GOOD)
def test_reader_text_passes(text):
    assert status_words(text) == []


def test_only_visible_text_is_scanned():
    page = """<html><body><nav>awaiting in the sidebar</nav><main><article>
      <p>Visible: measured at commit 1a6ac47.</p>
      <details class="hide above-input"><summary>Show code</summary><pre>/tmp/hidden_input</pre></details>
      <div class="admonition dropdown"><p class="admonition-title">Solution</p><p>TODO in a dropdown</p></div>
      <script>var budget = 1;</script>
      <div class="cell_output"><pre>written to /tmp/out.json</pre></div>
      <p>command: <code><span>python</span> <span>experiments/run_lm.py</span></code></p>
    </article></main></body></html>"""
    text = visible_text(page)
    assert "Solution" in text and "Visible" in text
    assert "hidden_input" not in text and "TODO" not in text and "budget" not in text and "sidebar" not in text
    found = status_words(text)
    assert [f.split(":")[0] for f in found] == ["internal command", "temporary path", "commit hash"], found


# --- the built site ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def site():
    return built_html()


@pytest.mark.parametrize("docname", toc_files(ROOT))
def test_no_status_words_on_the_page(site, docname):
    path = site / f"{docname}.html"
    assert path.exists(), f"{path} was not built"
    found = status_words(visible_text(path.read_text()))
    assert not found, f"{docname}: {len(found)} passages a reader should not see:\n  " + "\n  ".join(found)
