"""The package layout's rules, read from the source (AST), so that a new module cannot break them quietly.

* The library (every module of ``path_lib`` outside ``path_lib/book``, and ``path_lib.kernels``) never imports
  ``path_lib.book``: the book's helpers need IPython / yaml / matplotlib / ipywidgets (the ``book``
  extra), the library does not.
* A private module (``path_lib.<...>._name``) is imported only from inside its own subpackage, by any
  code of the repository (library, kernels, tests, benchmarks, experiments, scripts, chapters).
* Imports point down the layers: book -> experiments -> training -> nn, distributed, ledger -> impl -> decoding /
  kernels -> blockwise -> reference -> validation (theory, hardware and records, like validation, import nothing of
  path_lib; the ledger imports nothing of the layers above it).
* No package attribute shadows a submodule (``path_lib.reference.householder`` is the module), no
  module is left at an old flat name, and pyproject lists every package and the ``book`` extra.
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import pkgutil
import subprocess
import sys
import tomllib
import types
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
SKIP_DIRS = {".git", ".venv", "_build", "__pycache__", ".variants", ".pytest_cache", ".hypothesis",
             ".jupyter_cache", "node_modules", ".ipynb_checkpoints"}
BOOK_ONLY = {"IPython": "ipython", "yaml": "pyyaml", "matplotlib": "matplotlib", "ipywidgets": "ipywidgets"}
#: top-level modules of the optional extras (book, hf, triton): a test skips what needs a missing one
EXTRAS_MODULES = set(BOOK_ONLY) | {"transformers", "triton"}


# ----------------------------------------------------------------------------------------------
# the installed layout, and reading imports
# ----------------------------------------------------------------------------------------------

def installed_layout() -> List[Tuple[str, Path]]:
    """``(package, folder)`` pairs of the installed layout, most specific first: ``pyproject.toml``'s
    ``package-dir`` (``path_lib.kernels`` -> ``kernels/path_lib/kernels``), then every other package at its
    own path (``path_lib`` -> ``path_lib``). What a wheel installs is what this test reads."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapped = {name: ROOT / folder for name, folder in setuptools.get("package-dir", {}).items() if name}
    pairs = [(name, mapped.get(name, ROOT.joinpath(*name.split(".")))) for name in setuptools["packages"]]
    return sorted(pairs, key=lambda pair: -len(pair[1].parts))


LAYOUT = installed_layout()


def module_name(path: Path) -> Tuple[Optional[str], bool]:
    """Dotted name of a file of ``path_lib`` or ``path_lib.kernels`` as installed (None for scripts and tests),
    and whether it is a package's ``__init__``."""
    path = path.resolve().with_suffix("")
    for package, folder in LAYOUT:
        if path.parent == folder:
            if path.name == "__init__":
                return package, True
            return f"{package}.{path.name}", False
    return None, False


def _source_dir(dotted: str) -> Path:
    """The folder or file stem of a dotted name in this repository, by the installed layout (``path_lib.kernels``
    lives in ``kernels/path_lib/kernels/``)."""
    for package, folder in LAYOUT:
        if dotted == package or dotted.startswith(package + "."):
            return folder.joinpath(*dotted[len(package):].split(".")[1:])
    return ROOT.joinpath(*dotted.split("."))


def _is_module(dotted: str) -> bool:
    """Whether ``dotted`` names a module or package file of this repository."""
    base = _source_dir(dotted)
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imported_modules(source: str, module: Optional[str], is_package: bool) -> Iterator[Tuple[int, str]]:
    """``(line, absolute module)`` for every import anywhere in ``source`` (also inside functions).

    ``from X import a`` yields ``X`` and, when ``X.a`` is a module of the repository, ``X.a``; relative
    imports are resolved against ``module`` (the importing module's dotted name)."""
    package = module if is_package else (module.rsplit(".", 1)[0] if module and "." in module else None)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                if package is None:
                    continue
                parts = package.split(".")
                if node.level - 1 >= len(parts):
                    continue
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module
            yield node.lineno, base
            for a in node.names:
                if a.name != "*" and _is_module(f"{base}.{a.name}"):
                    yield node.lineno, f"{base}.{a.name}"


def private_owner(dotted: str) -> Optional[str]:
    """For ``path_lib.x._y(.z)``: the package that owns the private module (``path_lib.x``); else None."""
    parts = dotted.split(".")
    if parts[0] != "path_lib" or parts[:2] == ["path_lib", "kernels"]:
        return None             # the kernels' internals (_config, _forward, _triton_*, ...) are the kernel chapter's subject
    for i, p in enumerate(parts[1:], start=1):
        if p.startswith("_") and not (p.startswith("__") and p.endswith("__")):
            return ".".join(parts[:i])
    return None


def violations(source: str, module: Optional[str], is_package: bool, *, library: bool) -> List[str]:
    """Broken layout rules in one module's source (``library``: it may not import path_lib.book)."""
    out = []
    for line, target in imported_modules(source, module, is_package):
        if library and (target == "path_lib.book" or target.startswith("path_lib.book.")):
            out.append(f"line {line}: imports {target} (the library may not import the book's helpers)")
        owner = private_owner(target)
        if owner is not None and not (module or "").startswith(owner + "."):
            out.append(f"line {line}: imports the private module {target} from outside {owner}")
        if library and target.split(".")[0] in BOOK_ONLY:
            out.append(f"line {line}: imports {target}, a dependency of the book extra only")
    return out


# ----------------------------------------------------------------------------------------------
# the files
# ----------------------------------------------------------------------------------------------

def _files(suffix: str) -> List[Path]:
    return sorted(p for p in ROOT.rglob(f"*{suffix}")
                  if not (set(p.relative_to(ROOT).parts) & SKIP_DIRS) and p.is_file())


def library_files() -> List[Path]:
    """The library's files as installed (every package of the layout but ``path_lib.book``)."""
    return [p for p in _files(".py") if module_name(p)[0] is not None
            and not (module_name(p)[0] or "").startswith("path_lib.book")]


def notebook_code(path: Path) -> str:
    """A chapter's code cells as one Python source (IPython magics blanked)."""
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    lines = "\n".join("".join(c["source"]) for c in cells).split("\n")
    return "\n".join("pass" if ln.lstrip().startswith(("%", "!")) else ln for ln in lines)


def test_the_layout_the_test_reads_is_the_one_python_imports():
    """Every library file's dotted name (by ``pyproject.toml``'s packages and ``package-dir``) is the module
    Python imports from that file, ``path_lib.kernels`` included."""
    files = library_files()
    assert ("path_lib.kernels", ROOT / "kernels" / "path_lib" / "kernels") in LAYOUT
    wrong = []
    for p in files:
        dotted, _ = module_name(p)
        assert dotted is not None, p
        spec = importlib.util.find_spec(dotted)
        if spec is None or spec.origin is None or Path(spec.origin).resolve() != p.resolve():
            wrong.append(f"{p.relative_to(ROOT)}: {dotted} imports from {spec and spec.origin}")
    assert not wrong, "\n".join(wrong)
    assert _source_dir("path_lib.kernels._config").with_suffix(".py").is_file()


def test_the_checker_finds_what_it_must():
    """The rules' checker itself, on small sources (each case would pass if the checker were broken)."""
    assert violations("from path_lib.book import notebook\n", "path_lib.nn.layers", False, library=True)
    assert violations("from ..book.notebook import pick_preset\n", "path_lib.training.loop", False,
                      library=True)
    assert violations("def f():\n    import path_lib.book.speed\n", "path_lib.kernels.teaching", False, library=True)
    assert violations("import matplotlib.pyplot as plt\n", "path_lib.theory.costs", False, library=True)
    assert not violations("from path_lib.book import notebook\n", None, False, library=False)
    # private modules: path_lib.kernels._config is kernels' own; path_lib's would be refused from outside
    assert private_owner("path_lib.blockwise._segments") == "path_lib.blockwise"
    assert private_owner("path_lib.reference.householder") is None
    assert private_owner("path_lib.__init__") is None
    assert violations("from path_lib.blockwise._segments import x\n", "path_lib.nn.layers", False, library=True)
    assert violations("from path_lib.blockwise._segments import x\n", None, False, library=False)
    assert not violations("from ._segments import x\n", "path_lib.blockwise.mirror", False, library=True)
    assert not violations("from .validation import check_tensor\nfrom .nn import layers\n", "path_lib", True,
                          library=True)
    # relative imports resolve against the importing module
    assert [t for _, t in imported_modules("from ..validation import check_int\n", "path_lib.nn.model", False)] \
        == ["path_lib.validation"]
    assert ("path_lib.nn.layers" in
            [t for _, t in imported_modules("from . import layers\n", "path_lib.nn.model", False)])


def test_library_imports_neither_the_book_nor_private_modules_of_other_subpackages():
    files = library_files()
    assert len(files) >= 25 and any(p.name == "validation.py" for p in files)
    bad = []
    for p in files:
        mod, pkg = module_name(p)
        bad += [f"{p.relative_to(ROOT)}: {v}" for v in violations(p.read_text(), mod, pkg, library=True)]
    assert not bad, "\n".join(bad)


def test_no_code_imports_a_private_path_lib_module_from_outside_its_subpackage():
    """Tests, benchmarks, experiments, scripts, the book's helpers and the chapters too."""
    sources = [(p, p.read_text()) for p in _files(".py")]
    sources += [(p, notebook_code(p)) for p in _files(".ipynb")]
    assert any(p.suffix == ".ipynb" for p, _ in sources)
    bad = []
    for p, src in sources:
        mod, pkg = module_name(p) if p.suffix == ".py" else (None, False)
        bad += [f"{p.relative_to(ROOT)}: {v}" for v in violations(src, mod, pkg, library=False)]
    assert not bad, "\n".join(bad)


#: each part's layer: a module imports only parts of lower layers or its own part; records (the registry,
#: provenance, schemas, loading) is at the bottom with validation, so that every layer may read and write records
LAYERS = {"validation": 0, "theory": 1, "records": 1, "hardware": 1, "reference": 1, "blockwise": 2, "decoding": 3,
          "kernels": 3, "impl": 4, "distributed": 5, "nn": 5, "ledger": 5, "training": 6, "experiments": 7, "book": 8}


def layer_chain() -> str:
    """The layers as the documents draw them: from the top down, the parts of one layer joined by commas
    (alphabetical), the layers by arrows (an arrow is "imports")."""
    levels = sorted(set(LAYERS.values()), reverse=True)
    return " -> ".join(", ".join(sorted(p for p in LAYERS if LAYERS[p] == level)) for level in levels)


#: the documents that draw the layers (a line beginning with the top layer and an arrow, continued on lines
#: that begin with an arrow)
CHAIN_DOCUMENTS = ("README.md", "CONTRIBUTING.md", "path_lib/__init__.py")


def test_the_documents_draw_the_layer_table():
    chain = layer_chain()
    assert chain.startswith("book -> experiments -> ") and chain.endswith("-> hardware, records, reference, theory -> validation")
    for doc in CHAIN_DOCUMENTS:
        drawn: List[str] = []
        for line in (ROOT / doc).read_text().splitlines():
            line = line.strip()
            if line.startswith(chain.split(" -> ")[0] + " -> "):
                drawn.append(line)
            elif line.startswith("-> ") and drawn:                 # a chain wrapped onto the next line
                drawn[-1] += " " + line
        assert drawn == [chain], (doc, drawn)


def part(dotted: str) -> Optional[str]:
    """``path_lib.nn.layers`` -> ``"nn"``, ``path_lib.kernels._config`` -> ``"kernels"``, ``path_lib`` -> ``"path_lib"``."""
    parts = dotted.split(".")
    if parts[0] != "path_lib":
        return None
    return parts[1] if len(parts) > 1 else "path_lib"


def layer_violations(source: str, module: str, is_package: bool) -> List[str]:
    here = part(module)
    out = []
    for line, target in imported_modules(source, module, is_package):
        there = part(target)
        if there is None or there == here or here == "path_lib":          # the package's face imports anything
            continue
        if there == "path_lib" or there not in LAYERS or LAYERS[there] >= LAYERS[here]:
            out.append(f"line {line}: {module} ({here}) imports {target} ({there}), not a lower layer")
    return out


def test_the_layer_checker_finds_what_it_must():
    assert layer_violations("from ..nn.model import TinyLM\n", "path_lib.reference.attention", False)
    assert layer_violations("from ..book import viz\n", "path_lib.experiments.lm", False)
    assert layer_violations("import path_lib\n", "path_lib.nn.layers", False)
    assert layer_violations("from path_lib.decoding import PaTHCache\n", "path_lib.kernels._config", False)
    assert not layer_violations("from ..theory import costs\n", "path_lib.book.speed", False)
    assert not layer_violations("from .householder import ut_transform\n", "path_lib.reference.attention", False)


def test_imports_point_down_the_layers():
    files = library_files() + [p for p in _files(".py") if p.relative_to(ROOT).parts[:2] == ("path_lib", "book")]
    bad = []
    for p in files:
        mod, pkg = module_name(p)
        bad += [f"{p.relative_to(ROOT)}: {v}" for v in layer_violations(p.read_text(), mod, pkg)]
    assert not bad, "\n".join(bad)
    assert {part(module_name(p)[0]) for p in files} - {"path_lib"} <= set(LAYERS), "a new part needs a layer"


def test_no_import_cycle_between_modules():
    """Between the library's modules (imports inside functions included): e.g. impl imports blockwise.mirror
    and reference.attention, which import reference.householder, never impl."""
    files = library_files() + [p for p in _files(".py") if p.relative_to(ROOT).parts[:2] == ("path_lib", "book")]
    graph = {}
    for p in files:
        mod, pkg = module_name(p)
        graph[mod] = {t for _, t in imported_modules(p.read_text(), mod, pkg)
                      if t != mod and _is_module(t) and not (_source_dir(t) / "__init__.py").is_file()}
    state, cycles = {}, []

    def visit(m, stack):
        state[m] = "open"
        for t in sorted(graph.get(m, ())):
            if state.get(t) == "open":
                cycles.append(" -> ".join(stack[stack.index(t):] + [t]))
            elif t not in state:
                visit(t, stack + [t])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert len(graph) >= 30 and "path_lib.blockwise.mirror" in graph["path_lib.impl"]
    assert not cycles, "\n".join(cycles)


# ----------------------------------------------------------------------------------------------
# the packages
# ----------------------------------------------------------------------------------------------

def _packages() -> List[str]:
    """Every package folder under ``path_lib/`` and ``kernels/`` (whether pyproject lists it or not)."""
    found = []
    for p in _files("__init__.py"):
        rel = p.relative_to(ROOT)
        if rel.parts[0] == "path_lib":
            found.append(".".join(rel.parts[:-1]))
        elif rel.parts[0] == "kernels":
            found.append(".".join(rel.parts[1:-1]))               # kernels/ holds path_lib/kernels/ at its import path
    return sorted(found)


def test_reference_householder_is_the_module_and_its_ut_transform_works():
    import path_lib.reference.householder as hh

    assert isinstance(hh, types.ModuleType) and hh.__name__ == "path_lib.reference.householder"
    g = torch.Generator().manual_seed(7)
    W = torch.nn.functional.normalize(torch.randn(3, 5, 4, generator=g, dtype=torch.float64), dim=-1)
    beta = 2 * torch.rand(3, 5, generator=g, dtype=torch.float64)
    T = hh.ut_transform(W, beta)
    # the compact WY form: H_4 ... H_0 = I - W^T T W, against the product multiplied out one factor at a time
    P = torch.eye(4, dtype=torch.float64).expand(3, 4, 4)
    for t in range(5):
        P = (torch.eye(4, dtype=torch.float64) - beta[:, t, None, None] * W[:, t, :, None] * W[:, t, None, :]) @ P
    torch.testing.assert_close(torch.eye(4, dtype=torch.float64) - W.transpose(-1, -2) @ T @ W, P)


def test_no_package_attribute_shadows_a_submodule():
    """``pkg.name`` is the submodule ``pkg.name`` for every submodule (the old ``path_lib.householder``
    was the function ``householder``)."""
    checked = 0
    for pkg_name in _packages():
        pkg = importlib.import_module(pkg_name)
        for info in pkgutil.iter_modules(pkg.__path__):
            try:
                sub = importlib.import_module(f"{pkg_name}.{info.name}")
            except ImportError as e:       # a module of an extra (hf, book, triton) where it is not installed
                if (e.name or "").split(".")[0] in EXTRAS_MODULES:
                    continue
                raise
            if hasattr(pkg, info.name):
                assert getattr(pkg, info.name) is sub, f"{pkg_name}.{info.name} is not the submodule"
            checked += 1
    assert checked >= 25


@pytest.mark.parametrize("old", ["_checks", "householder", "attention", "sba", "layers", "rotations", "tasks",
                                 "train", "lm", "corpus", "constructions", "farmass", "claims", "provenance",
                                 "costs", "notebook", "widgets", "viz", "speed", "kernel_diagrams"])
def test_no_module_is_left_at_an_old_flat_name(old):
    """Pre-release (0.1.0): the flat modules moved into subpackages without compatibility shims. (Read
    from the files: an editable install of another checkout can still resolve the old names.)"""
    assert not (ROOT / "path_lib" / f"{old}.py").exists() and not (ROOT / "path_lib" / old).exists()


def test_theory_is_a_package_now():
    import path_lib.theory
    import path_lib.theory.decoherence as decoherence

    assert Path(path_lib.theory.__file__).parent == ROOT / "path_lib" / "theory"
    assert decoherence.__name__ == "path_lib.theory.decoherence" and callable(decoherence.far_mass_bound)


def test_pyproject_lists_every_package_and_the_book_extra():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert sorted(project["tool"]["setuptools"]["packages"]) == _packages()
    extra = {d.split(">")[0].split("=")[0].split("<")[0].strip().lower()
             for d in project["project"]["optional-dependencies"]["book"]}
    book_imports = set()
    for p in _files(".py"):
        if p.relative_to(ROOT).parts[:2] == ("path_lib", "book"):
            book_imports |= {t.split(".")[0] for _, t in imported_modules(p.read_text(), None, False)}
    used = {BOOK_ONLY[m] for m in book_imports if m in BOOK_ONLY}
    assert used == set(BOOK_ONLY.values()) and used <= extra


def test_public_api_is_reexported():
    import path_lib
    from path_lib.nn.layers import PaTHAttention
    from path_lib.nn.model import TinyLM
    from path_lib.impl import path_attention
    from path_lib.reference.householder import householder_product, ut_transform

    assert (path_lib.path_attention, path_lib.ut_transform, path_lib.householder_product) == (
        path_attention, ut_transform, householder_product)
    assert path_lib.PaTHAttention is PaTHAttention and path_lib.TinyLM is TinyLM
    assert all(hasattr(path_lib, n) for n in path_lib.__all__)


def test_the_kernels_are_path_lib_kernels_and_no_code_imports_a_top_level_kernels():
    """The kernels' folder holds ``path_lib.kernels`` at its import path and installs under that name (a
    top-level ``kernels`` would collide with Hugging Face's ``kernels`` distribution); ``kernels/`` is no
    package, and no code imports a top-level ``kernels``."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["tool"]["setuptools"]["package-dir"] == {"path_lib.kernels": "kernels/path_lib/kernels"}
    assert "kernels" not in project["tool"]["setuptools"]["packages"]
    assert not (ROOT / "kernels" / "__init__.py").exists() and not (ROOT / "kernels" / "path_lib" / "__init__.py").exists()
    sources = [(p, p.read_text()) for p in _files(".py")] + [(p, notebook_code(p)) for p in _files(".ipynb")]
    bad = [f"{p.relative_to(ROOT)}: line {line}" for p, src in sources
           for line, target in imported_modules(src, *(module_name(p) if p.suffix == ".py" else (None, False)))
           if target == "kernels" or target.startswith("kernels.")]
    assert not bad, "\n".join(bad)
    import path_lib.kernels as kernels
    assert Path(kernels.__file__).resolve() == ROOT / "kernels" / "path_lib" / "kernels" / "__init__.py"
    assert kernels.__name__ == "path_lib.kernels"


def test_path_lib_installs_no_import_machinery():
    """``path_lib`` resolves its kernels through the installed package layout alone: importing it adds no
    finder to ``sys.meta_path`` and no entry to ``sys.path``."""
    run = _python_in_checkout_root(
        "import sys\n"
        "before = (list(sys.meta_path), list(sys.path))\n"
        "import path_lib, path_lib.kernels, path_lib.nn.layers\n"
        "print(before == (list(sys.meta_path), list(sys.path)))")
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split()[-1] == "True"


def _python_in_checkout_root(code: str, *flags: str) -> subprocess.CompletedProcess:
    """``python FLAGS -c CODE`` run in the checkout's root (which ``-c`` puts on ``sys.path``)."""
    return subprocess.run([sys.executable, *flags, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_the_checkout_root_on_sys_path_does_not_shadow_hugging_faces_kernels():
    """``python -c`` / ``python -m pytest`` in the checkout's root put the root on ``sys.path``; the folder
    ``kernels/`` is no package, so ``import kernels`` still reaches Hugging Face's distribution (which
    ``transformers`` >= 5.25 imports when ``PreTrainedModel`` loads), before or after ``path_lib``."""
    importlib.util.find_spec("transformers") or pytest.skip("transformers is not installed")
    run = _python_in_checkout_root(
        "import kernels, path_lib, pathlib, sys\n"
        "from transformers import PreTrainedModel\n"
        "import path_lib.kernels as ours\n"
        "print(pathlib.Path(kernels.__file__).resolve().parent)\n"
        "print(pathlib.Path(ours.__file__).resolve().parent)\n"
        "print(sys.modules['kernels'] is not ours)")
    assert run.returncode == 0, run.stderr[-2000:]
    theirs, ours, distinct = run.stdout.split()
    assert Path(ours) == ROOT / "kernels" / "path_lib" / "kernels" and not Path(theirs).is_relative_to(ROOT / "kernels")
    assert distinct == "True"
