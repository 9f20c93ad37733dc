"""The API reference page (path_lib.book.api, book/api.ipynb): every public module of path_lib and path_lib.kernels
is on it, every name of every module's ``__all__`` with its signature, and no public name lacks a docstring."""
import importlib
import pkgutil

import pytest

from path_lib.book import api


def test_public_modules_are_every_non_private_module():
    found = api.public_modules()
    for pkg_name in ("path_lib", "path_lib.kernels"):
        pkg = importlib.import_module(pkg_name)
        for info in pkgutil.walk_packages(pkg.__path__, prefix=pkg_name + "."):
            private = any(p.startswith("_") for p in info.name.split("."))
            assert (info.name in found) == (not private and not info.name.startswith("path_lib.book")), info.name
    assert "path_lib.reference.attention" in found and "path_lib.kernels" in found


@pytest.mark.parametrize("name", [m for m in api.public_modules() if m != "path_lib.nn.hf"])
def test_every_exported_name_is_documented(name):
    mod = importlib.import_module(name)
    for e in api.module_entries(name):
        assert e["doc"] != "(no docstring)", f"{name}.{e['name']}"
        assert e["name"] in mod.__all__


def test_the_page_lists_every_exported_name_with_its_signature():
    md = api.api_markdown()
    for name in api.public_modules():
        assert f"**`{name}`**" in md
        for e in (api.module_entries(name) if name != "path_lib.nn.hf" or _has("transformers") else []):
            assert f"- `{name}.{e['name']}` ({e['kind']})" in md
            assert f"{e['name']}{e['signature']}" in md
    path_attention = importlib.import_module("path_lib.reference.attention").path_attention
    assert path_attention.__doc__.strip().splitlines()[0] in md


def _has(module):
    try:
        importlib.import_module(module)
        return True
    except ImportError:
        return False
