"""The API reference page (book/api.ipynb), generated from the docstrings of the public modules.

:func:`public_modules` walks ``path_lib`` and ``path_lib.kernels`` (every module not named ``_private`` and not
under ``path_lib.book``, whose helpers are the chapters' own); :func:`api_markdown` writes, per module,
its one-paragraph summary and, for every name in its ``__all__``, the signature and the docstring as
preformatted text (so no docstring's markup can break the page's build).
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import List, Optional, Sequence

__all__ = ["public_modules", "module_entries", "api_markdown"]

_SKIP = ("path_lib.book",)
_OPTIONAL = {"path_lib.nn.hf": "transformers"}       # modules that need an optional extra


def public_modules(packages: Sequence[str] = ("path_lib", "path_lib.kernels")) -> List[str]:
    """Dotted names of the public modules of ``packages``, sorted (packages themselves included)."""
    out = []
    for name in packages:
        pkg = importlib.import_module(name)
        out.append(name)
        for info in pkgutil.walk_packages(pkg.__path__, prefix=name + "."):
            parts = info.name.split(".")
            if any(p.startswith("_") for p in parts) or info.name.startswith(_SKIP):
                continue
            out.append(info.name)
    return sorted(set(out))


def _summary(doc: Optional[str]) -> str:
    doc = inspect.cleandoc(doc or "").strip()
    return doc.split("\n\n")[0].replace("\n", " ") if doc else "(no docstring)"


def module_entries(name: str) -> List[dict]:
    """``[{"name", "kind", "signature", "doc"}]`` for every name in the module's ``__all__`` (empty
    when it has none); ``doc`` is the cleaned docstring (or "(no docstring)"), for a constant its value."""
    mod = importlib.import_module(name)
    out = []
    for attr in getattr(mod, "__all__", []):
        obj = getattr(mod, attr)
        kind = "class" if inspect.isclass(obj) else "function" if callable(obj) else "value"
        try:
            sig = str(inspect.signature(obj)) if kind != "value" else ""
        except (TypeError, ValueError):
            sig = "(...)"
        if kind == "value":
            text = repr(obj)
            doc = f"= {text}" if len(text) <= 300 else f"a {type(obj).__name__} (its repr is {len(text)} characters)"
        else:
            doc = inspect.getdoc(obj) or "(no docstring)"
        out.append({"name": attr, "kind": kind, "signature": sig, "doc": doc})
    return out


def api_markdown(modules: Optional[Sequence[str]] = None) -> str:
    """The reference as Markdown: per module a bold title and its summary, then each public name with its
    signature and docstring in a fenced text block. Modules needing a missing optional extra are listed
    with what to install."""
    parts = []
    for name in modules or public_modules():
        try:
            mod = importlib.import_module(name)
        except ImportError as e:
            extra = _OPTIONAL.get(name)
            if extra is None:
                raise
            parts.append(f"**`{name}`**: needs `{extra}` (not installed here: {e})")
            continue
        parts.append(f"**`{name}`**: {_summary(mod.__doc__)}")
        for entry in module_entries(name):
            body = entry["doc"].replace("```", "'''")
            parts.append(f"- `{name}.{entry['name']}` ({entry['kind']})\n\n```text\n{entry['name']}{entry['signature']}\n\n{body}\n```")
    return "\n\n".join(parts)
