"""The built site (``make book``) as the tests that read it find it: its folder, or a skip locally and a
failure under CI when it was not built."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: the built HTML (``PATH_BOOK_HTML`` points the tests at another build)
HTML = Path(os.environ.get("PATH_BOOK_HTML", ROOT / "_build" / "html"))


def built_html() -> Path:
    """:data:`HTML` when the book is built; else skip the test (fail it when ``$CI`` is set, where
    ``make test`` builds first, so a missing build is an error)."""
    if not (HTML / "index.html").exists():
        msg = f"{HTML / 'index.html'} does not exist: run `make book` first"
        if os.environ.get("CI"):
            pytest.fail(msg + " (CI is set, so a missing build is a failure)")
        pytest.skip(msg)
    return HTML
