"""The API reference (``book/api/``): one page per public module, built by Sphinx's autodoc.

The pages are small MyST files, one per module of :func:`public_modules`, each a heading and an
``automodule`` directive; Sphinx reads the docstrings when the book is built, so every function and
class gets a typeset signature, an anchor that a chapter can link to (``{py:func}`path_lib.impl.path_attention```)
and an entry in the site's search. This module writes those files and is also the Sphinx extension
that the book's ``_config.yml`` loads (:func:`setup`)::

    python -m path_lib.book.api          # rewrite book/api/*.md after a module was added or __all__ changed
    python -m path_lib.book.api --toc    # print the _toc.yml lines of the pages

* :func:`public_modules` walks ``path_lib`` and ``path_lib.kernels``: every module not named ``_private``
  and not under ``path_lib.book`` (the chapters' own helpers).
* :func:`module_page` is a page's text. A module documents the names of its ``__all__`` that it defines
  (or that come from a private module, such as the kernels' ``_api``); a name it re-exports from another
  public module is only listed, with a link to where it is documented, so each object has one anchor.
  A package's page also has a table of its modules.
* :func:`index_page` is the reference's first page: where to start for each task (:data:`START_HERE`), the
  three kinds of code, examples that run on a CPU (:data:`EXAMPLES`; tests/test_api_page.py runs them) and
  the modules by role (:data:`GROUPS`, :func:`module_groups`), each group a table of its modules.
* :func:`toc_lines` are the entries of the pages in ``_toc.yml`` (packages with their modules nested).
* :func:`setup` (the extension) adds Google-style docstrings (``napoleon``), lists every name of a
  module's ``__all__`` even when it has no docstring, leaves out values longer than
  :data:`MAX_VALUE_CHARS` characters, keeps ``napoleon`` from reading "text: more text" in a constant's
  comment as a type, shows a module docstring's indented blocks as written
  (:func:`preformatted_blocks`), and resolves a re-exported name (``path_lib.path_attention``) to where
  it is defined and a short name (``:func:`resolve_backend```) to the one documented object whose
  dotted name ends with it.
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
import re
import sys
import textwrap
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

__all__ = ["API_DIR", "ORDER", "MAX_VALUE_CHARS", "START_HERE", "EXAMPLES", "GROUPS", "public_modules",
           "module_entries", "page_docname", "reexports", "preformatted_blocks", "module_page", "module_groups",
           "index_page", "ordered_modules", "toc_lines", "write_pages", "setup"]

#: Where the pages live, relative to the repository root.
API_DIR = "book/api"
#: The order of the top-level modules in the table of contents (for a reader: the attention first,
#: then the layers, then training and experiments); a module not named here comes last.
ORDER = ("path_lib", "path_lib.impl", "path_lib.reference", "path_lib.blockwise", "path_lib.kernels",
         "path_lib.decoding", "path_lib.distributed", "path_lib.nn", "path_lib.hardware",
         "path_lib.training", "path_lib.ledger", "path_lib.experiments", "path_lib.theory",
         "path_lib.records", "path_lib.validation")
#: A constant whose value takes more characters than this is shown without its value.
MAX_VALUE_CHARS = 160

_SKIP = ("path_lib.book",)
_OPTIONAL = {"path_lib.nn.hf": ("transformers", "hf")}   # module: (what it needs, the pip extra)


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


def module_entries(name: str) -> List[dict]:
    """``[{"name", "kind", "doc"}]`` for every name in the module's ``__all__`` (empty when it has
    none); ``kind`` is "class", "function", "module" or "value", ``doc`` the cleaned docstring of a
    class or function ("" when it has none; a value's docstring would be its type's, so "")."""
    mod = importlib.import_module(name)
    out = []
    for attr in getattr(mod, "__all__", []):
        obj = getattr(mod, attr)
        kind = ("class" if inspect.isclass(obj) else "module" if inspect.ismodule(obj)
                else "function" if callable(obj) else "value")
        doc = (inspect.getdoc(obj) or "") if kind in ("class", "function") else ""
        out.append({"name": attr, "kind": kind, "doc": doc})
    return out


def page_docname(module: str) -> str:
    """The page of ``module`` (a dotted name) without suffix: ``"book/api/path_lib.impl"``."""
    if not isinstance(module, str) or not module.startswith("path_lib"):
        raise ValueError(f"module must be a dotted name under path_lib, got {module!r}")
    return f"{API_DIR}/{module}"


def reexports(module: str, public: Optional[Sequence[str]] = None) -> Dict[str, str]:
    """``{name: "where.it.is.documented"}`` for the names of ``module.__all__`` that are defined in
    another public module (a module object maps to itself)."""
    known = set(public if public is not None else public_modules())
    mod = importlib.import_module(module)
    out = {}
    for attr in getattr(mod, "__all__", []):
        obj = getattr(mod, attr)
        if inspect.ismodule(obj):
            if obj.__name__ in known:
                out[attr] = obj.__name__
            continue
        if not (inspect.isclass(obj) or inspect.isroutine(obj)):
            continue                       # a constant belongs to the module that exports it
        home = getattr(obj, "__module__", None)
        if home != module and home in known:
            out[attr] = f"{home}.{getattr(obj, '__qualname__', attr)}"
    return out


def _rst_block(lines: List[str]) -> str:
    return "```{eval-rst}\n" + "\n".join(lines) + "\n```"


def _summary_table(names: Sequence[str]) -> str:
    # after an automodule the current module is set; autosummary wants full names without it
    return _rst_block([".. py:currentmodule:: None", "", ".. autosummary::", "   :nosignatures:", ""]
                      + [f"   {n}" for n in names])


#: per module, the names it computes when they are read (a module ``__getattr__``), with what each means:
#: autodoc finds no object for them, so the page declares them (kept here so the kernels' hashed sources
#: stay as swept)
LAZY_ATTRIBUTES: Dict[str, Dict[str, str]] = {
    "path_lib.kernels": {
        "GPU_VERIFIED": "True when this kernel code passed the full GPU sweep named by ``VERIFIED`` and the "
                        "installed Triton is the version the sweep ran with (``verification()`` says why not). "
                        "Read lazily, so importing the kernels hashes nothing. While it is False, "
                        "``PaTHAttention(backend=\"auto\")`` runs the blockwise PyTorch path on CUDA with one "
                        "warning; ``backend=\"triton\"`` still asks for the kernels by name.",
    },
}


def module_page(module: str, public: Optional[Sequence[str]] = None) -> str:
    """The MyST text of ``module``'s page (see the module's docstring for what it holds)."""
    public = list(public if public is not None else public_modules())
    if module not in public:
        raise ValueError(f"module must be one of the public modules, got {module!r}")
    mod = importlib.import_module(module)
    parts = [f"# `{module}`"]
    if module in _OPTIONAL:
        needs, extra = _OPTIONAL[module]
        parts.append(f"This module needs the optional `{needs}` package "
                     f"(`pip install \"path-attention-book[{extra}]\"`).")
    directive = [f".. automodule:: {module}"]
    again = reexports(module, public)
    if hasattr(mod, "__all__"):
        directive.append("   :members:")
        if again:
            directive.append("   :exclude-members: " + ", ".join(again))
    parts.append(_rst_block(directive))
    # names the module computes when read (PEP 562 __getattr__): autodoc finds no object to document
    for name, doc in LAZY_ATTRIBUTES.get(module, {}).items():
        parts.append(_rst_block([f".. py:data:: {name}", f"   :module: {module}", "", *(
            "   " + line for line in textwrap.wrap(doc, 100))]))
    children = [m for m in public if m.rpartition(".")[0] == module]
    if children:
        parts += ["## Modules", _summary_table(children)]
    if again:
        parts += ["## Exported here, documented in their modules", _summary_table(list(again.values()))]
    return "\n\n".join(parts) + "\n"


#: The first page's "Start here": ``(task, entry point, when to use it)``, one row a task. An entry point
#: is a cross-reference to where its object is documented (tests/test_api_page.py checks that each resolves).
START_HERE: Tuple[Tuple[str, str, str], ...] = (
    ("Compute PaTH attention", "{py:func}`path_lib.impl.path_attention`",
     "You have q, k, v, w, beta (and g for PaTH-FoX). `impl` picks the implementation: `\"blockwise\"` "
     "(the default, any device), `\"explicit\"` or `\"parallel\"` (the references), `\"triton\"` (the "
     "kernels) or `\"auto\"` (the kernels on CUDA where they are verified, else blockwise). "
     "`from path_lib import path_attention` is the same function."),
    ("Put PaTH attention in your own model", "{py:class}`path_lib.nn.layers.PaTHAttention`",
     "You want a `torch.nn.Module` from `x [B, T, d_model]` to `[B, T, d_model]` that makes its own w, beta "
     "(and gate), with padding masks, packed sequences and a decoding cache. "
     "{py:func}`path_lib.nn.layers.make_attention` builds it, or a baseline layer, by name."),
    ("Build a whole model", "{py:class}`path_lib.nn.model.TinyLM`",
     "You want a small decoder-only language model whose only position information is its attention "
     "(`attention=\"path\"`, `\"path_fox\"` or a baseline), with `generate`, `prefill` and `step`."),
    ("Use Hugging Face `transformers`", "{py:class}`path_lib.nn.hf.PaTHForCausalLM`",
     "You want that model as a `transformers` causal LM (`labels`, `generate`, `save_pretrained`); it needs "
     "the `hf` extra. {py:func}`path_lib.nn.hf.path_attention_from_fla` builds a layer from fla's PaTH weights."),
    ("Decode token by token", "{py:func}`path_lib.decoding.prefill`",
     "You call the attention yourself: it runs the prompt in parallel and returns a "
     "{py:class}`path_lib.decoding.PaTHCache`, whose `step` adds one token at a time. The layers and models "
     "keep their states in a {py:class}`path_lib.nn.cache.StateCache` (`past_key_values`) instead."),
    ("Split one sequence across GPUs", "{py:func}`path_lib.distributed.context_parallel_path_attention`",
     "A sequence is too long for one device: each rank of a `torch.distributed` group holds a contiguous chunk. "
     "{py:func}`path_lib.distributed.chunked_path_attention` computes the same in one process."),
    ("Train a model", "{py:func}`path_lib.training.loop.train`",
     "You want the book's training loop (AdamW, warm-up then cosine decay, gradient clipping, resumable "
     "checkpoints) for any model that returns logits. `torchrun -m path_lib.training.cli` trains TinyLM "
     "data-parallel (DDP) or sharded (FSDP2)."),
    ("Check against the exact answer", "{py:func}`path_lib.reference.attention.path_attention`",
     "You need ground truth: the float64 references, clear and slow (`impl=\"explicit\"` multiplies the "
     "Householder products out, `\"parallel\"` uses the UT transform)."),
    ("Read the kernels' algorithm", "{py:func}`path_lib.blockwise.mirror.blockwise_path_attention`",
     "You want the Triton kernels' blocks and segments, phase by phase, in plain PyTorch on any device. "
     "It is what `path_attention` runs by default."),
    ("Run the Triton kernels", "{py:func}`path_lib.kernels.path_attention`",
     "You are on a CUDA GPU (or set `TRITON_INTERPRET=1`) with q in float16, bfloat16 or float32 and D in "
     "32, 64 or 128; forward and backward."),
    ("Read a recorded result", "{py:func}`path_lib.records.load_record`",
     "You want a current GPU or training record by its stable name (`\"bench\"`, `\"lm\"`, ...), with the "
     "provenance of the run that wrote it."),
    ("See where the papers' claims stand", "{py:data}`path_lib.ledger.claims.CLAIMS`",
     "You want each claim of the two papers with its status and the evidence that decides it "
     "(rendered in {doc}`../part4/13_claims`)."),
)

#: The first page's examples, each a whole program that runs on a CPU in seconds (tests/test_api_page.py
#: runs them): ``(sentence before it, code)``.
EXAMPLES: Tuple[Tuple[str, str], ...] = (
    ("PaTH attention of random inputs, checked against the float64 ground truth:", """\
import torch
import torch.nn.functional as F
from path_lib import path_attention

torch.manual_seed(0)
B, T, H, D = 2, 16, 4, 32
q, k, v = (torch.randn(B, T, H, D) for _ in range(3))
w = F.normalize(torch.randn(B, T, H, D), dim=-1)  # unit Householder directions
beta = 2 * torch.sigmoid(torch.randn(B, T, H))    # strengths in [0, 2]
g = F.logsigmoid(torch.randn(B, T, H))            # log forget gates <= 0

o = path_attention(q, k, v, w, beta)              # PaTH, [B, T, H, D]
o_fox = path_attention(q, k, v, w, beta, g)       # PaTH-FoX
exact = path_attention(*(x.double() for x in (q, k, v, w, beta)),
                       impl="explicit")
torch.testing.assert_close(o, exact.float(), rtol=1e-4, atol=1e-4)
"""),
    ("The same attention as a layer, and a whole model that generates:", """\
import torch
from path_lib import PaTHAttention, TinyLM

layer = PaTHAttention(d_model=64, n_heads=2)      # makes w, beta from x
y = layer(torch.randn(2, 16, 64))                 # [2, 16, 64]

model = TinyLM(vocab_size=256, d_model=64, n_layers=2, n_heads=2,
               attention="path")
prompt = torch.randint(0, 256, (2, 8))
logits = model(prompt)                            # [2, 8, 256]
tokens = model.generate(prompt, 4)                # [2, 12]: 4 tokens more
"""),
)

#: The modules by role, for the first page: ``(title, what the group is for, names)``. A name covers that
#: module and, for a package other than ``path_lib`` itself, every module under it; a module goes to the
#: group of the longest name that covers it, and one that no group covers is listed last ("Other modules").
GROUPS: Tuple[Tuple[str, str, Tuple[str, ...]], ...] = (
    ("The top level", "The names most callers import (`from path_lib import path_attention, PaTHAttention, TinyLM`) "
     "and the one rule that picks an implementation for each call.", ("path_lib", "path_lib.impl")),
    ("Float64 references", "Clear, slow and float64-capable: the Householder products, the UT transform and PaTH "
     "attention as the ground truth, and the baselines' attention (NoPE, RoPE, ALiBi, FoX, stick-breaking). "
     "In the book: {doc}`../part1/02_householder`, {doc}`../part1/03_ut_transform`, "
     "{doc}`../part1/04_path_attention`.", ("path_lib.reference",)),
    ("The blockwise mirror", "The Triton kernels' algorithm in plain PyTorch, on any device: blocks and segments "
     "as the kernels run them, and chapter 6's scan. In the book: {doc}`../part3/06_blockwise`.",
     ("path_lib.blockwise",)),
    ("Triton kernels", "Forward and backward on the GPU, the decoding and context-parallel paths, the fused short "
     "convolution, and a small kernel written to be read. In the book: {doc}`../part3/07_kernel`.",
     ("path_lib.kernels",)),
    ("Layers and models", "`torch.nn` modules with one interface: PaTH and the baseline layers, paper B's rotation "
     "variants, padding and packed sequences, TinyLM and its Hugging Face model.", ("path_lib.nn",)),
    ("Decoding", "Keys kept transformed to the current position, a model's states layer by layer, and the choice of "
     "the next token. In the book: {doc}`../part3/08_decoding`.",
     ("path_lib.decoding", "path_lib.nn.cache", "path_lib.nn.sampling")),
    ("Scale-out", "Context parallelism over a `torch.distributed` group, and what it costs per rank. In the book: "
     "{doc}`../part3/10b_scale_out`.", ("path_lib.distributed",)),
    ("Training and data", "The training loop, its checkpoints and command line, the synthetic tasks and the "
     "byte-level corpora.", ("path_lib.training",)),
    ("Experiments and theory", "What the book trains, converts and measures (language models, the RoPE to PaTH "
     "conversion, hand-built networks, attention mass), and the analysis that needs no training (simulations, "
     "operation and memory counts).", ("path_lib.experiments", "path_lib.theory")),
    ("Records and the claims ledger", "Recorded results with their provenance, and the papers' claims with the "
     "evidence and statistics that decide them. In the book: {doc}`../part4/13_claims`.",
     ("path_lib.records", "path_lib.ledger")),
    ("The machine and the argument checks", "The device, the preset it runs and its floating-point format, and the "
     "checks every public entry point makes of its arguments.", ("path_lib.hardware", "path_lib.validation")),
)


def _covers(name: str, module: str) -> bool:
    return module == name or (name != "path_lib" and module.startswith(name + "."))


def module_groups(public: Optional[Sequence[str]] = None) -> List[Tuple[str, str, List[str]]]:
    """:data:`GROUPS` with their modules: ``[(title, purpose, modules)]``, each public module in exactly one
    group (in the order of the group's names, then in the reference's order, :func:`ordered_modules`), groups
    without a module left out, and the modules no group covers last, as "Other modules"."""
    public = list(public if public is not None else public_modules())
    found: Dict[str, List[Tuple[int, str]]] = {title: [] for title, _, _ in GROUPS}
    other = []
    for m in ordered_modules(public):
        best = max(((len(name), title, names.index(name)) for title, _, names in GROUPS for name in names
                    if _covers(name, m)), default=None)
        if best is None:
            other.append(m)
        else:
            found[best[1]].append((best[2], m))
    out = [(title, purpose, [m for _, m in sorted(found[title], key=lambda e: e[0])])
           for title, purpose, _ in GROUPS if found[title]]
    if other:
        out.append(("Other modules", "Modules not yet placed in a group above.", other))
    return out


def index_page(public: Optional[Sequence[str]] = None) -> str:
    """The MyST text of the reference's first page: where to start for each task (:data:`START_HERE`), the
    three kinds of code, examples that run (:data:`EXAMPLES`) and the modules by role (:func:`module_groups`)."""
    public = list(public if public is not None else public_modules())
    parts = [
        "# API reference",
        "The library is `path_lib`; its Triton kernels are `path_lib.kernels`. This page says where to start\n"
        "for each task, shows a first call that runs on a CPU, and lists every public module by its role.\n"
        "A module's page documents every name the module exports (its `__all__`) with its signature, and the\n"
        "search box finds every documented name. The chapters' own helpers (`path_lib.book`) are left out.",
        "Shapes follow the book's layout: q, k, v, w `[B, T, H, D]`; beta, g `[B, T, H]`; w, beta, g float32.\n"
        "With grouped-query heads, k, v, w and beta have `Hk` heads and q and g have `Hq`, a multiple of `Hk`.\n"
        "w has unit rows, beta lies in [0, 2] and g (the log forget gate of PaTH-FoX) is at most 0.",
        "## Start here",
        "\n".join(f"- **{task}**: {entry}.\n  {when}" for task, entry, when in START_HERE),
        "### Three kinds of code",
        "PaTH attention is written three times, from clear to fast: the float64 references\n"
        "(`path_lib.reference`), the blockwise mirror (`path_lib.blockwise`), which runs the Triton kernels'\n"
        "algorithm in plain PyTorch, and the kernels (`path_lib.kernels`). The mirror is tested against the\n"
        "references, and the kernels against the references and the mirror.\n"
        "{py:func}`path_lib.impl.path_attention` reaches all three through its `impl` argument, and\n"
        "{py:func}`path_lib.impl.resolve_backend` is the one rule that decides what `\"auto\"` runs.",
        "## A first call",
    ]
    for sentence, code in EXAMPLES:
        parts += [sentence, "```python\n" + code.rstrip("\n") + "\n```"]
    parts.append("## Modules by role")
    for title, purpose, modules in module_groups(public):
        parts += [f"### {title}", purpose, _summary_table(modules)]
    return "\n\n".join(parts) + "\n"


def _top(module: str) -> str:
    return ".".join(module.split(".")[:2])


def ordered_modules(public: Optional[Sequence[str]] = None) -> List[str]:
    """The public modules in the reference's order: :data:`ORDER` by top-level module, each package
    followed by its modules (alphabetical), anything :data:`ORDER` does not name at the end."""
    public = list(public if public is not None else public_modules())
    rank = {name: i for i, name in enumerate(ORDER)}
    return sorted(public, key=lambda m: (m != "path_lib", rank.get(_top(m), len(ORDER)), _top(m), m))


def toc_lines(public: Optional[Sequence[str]] = None, indent: int = 8) -> List[str]:
    """The ``_toc.yml`` lines of the module pages, to go under ``book/api/index``'s ``sections:``
    (a package's modules nested under the package's page)."""
    public = list(public if public is not None else public_modules())
    pad = " " * indent
    lines = []
    for m in ordered_modules(public):
        parent = m.rpartition(".")[0]
        if m != "path_lib" and parent != "path_lib" and parent in public:
            continue                                          # listed under its package below
        lines.append(f"{pad}- file: {page_docname(m)}")
        kids = [k for k in ordered_modules(public) if k.rpartition(".")[0] == m and m != "path_lib"]
        if kids:
            lines.append(f"{pad}  sections:")
            lines += [f"{pad}    - file: {page_docname(k)}" for k in kids]
    return lines


def write_pages(root: Path, public: Optional[Sequence[str]] = None) -> List[Path]:
    """Write ``index.md`` and every module's page under ``root / API_DIR``; remove pages of modules that
    are gone. Returns the files written."""
    public = list(public if public is not None else public_modules())
    folder = Path(root) / API_DIR
    folder.mkdir(parents=True, exist_ok=True)
    wanted = {folder / "index.md": index_page(public)}
    wanted.update({Path(root) / f"{page_docname(m)}.md": module_page(m, public) for m in public})
    for old in folder.glob("path_lib*.md"):
        if old not in wanted:
            old.unlink()
    for path, text in wanted.items():
        path.write_text(text)
    return sorted(wanted)


# --- the Sphinx extension ------------------------------------------------------------------------

def _napoleon_only_for_code(app) -> None:
    """Keep napoleon's Google-style sections for modules, classes and functions, but not for a
    constant's ``#:`` comment, whose first "words: more words" napoleon would take for a type."""
    from sphinx.ext.napoleon import _process_docstring

    listeners = app.events.listeners["autodoc-process-docstring"]
    for listener in list(listeners):
        if listener.handler is _process_docstring:
            app.disconnect(listener.id)

            def process(app, what, name, obj, options, lines, _napoleon=listener.handler):
                if what not in ("data", "attribute", "property"):
                    _napoleon(app, what, name, obj, options, lines)
            app.connect("autodoc-process-docstring", process, priority=listener.priority)


#: Lines that do not end a paragraph: a directive, a list item, a field, a section title's underline.
_NOT_A_PARAGRAPH = re.compile(r"\.\. |[*+-] |:|(\d+|#)\. |(?P<rule>[-=~^\"'`#*+])(?P=rule)+\s*$")


def preformatted_blocks(lines: List[str]) -> List[str]:
    """A module docstring's indented blocks as literal blocks (the library's plain-text convention:
    an indented block after a paragraph is code, a formula or an aligned table, never a quotation).

    reST would read such a block as a block quote and reflow it. Each block that follows a blank line
    and a paragraph at the left margin not ending in ``::`` (a literal block already) and not a
    directive (``.. note::``), list item, field or title underline is marked literal: a paragraph ending in
    ``:`` ends in ``::`` (shown as ``:``); before any other block a paragraph of its own, ``::``, is
    inserted (reST shows nothing for it), so that the paragraph's text, which autosummary may take as
    the module's summary, stays as written."""
    out = list(lines)
    i = 1
    while i < len(out):
        if not out[i].startswith(" ") or not out[i].strip() or out[i - 1].strip():
            i += 1
            continue
        j = i - 1
        while j >= 0 and not out[j].strip():
            j -= 1
        prev = out[j] if j >= 0 else ""
        if j < 0 or prev.startswith(" ") or prev.rstrip().endswith("::") or _NOT_A_PARAGRAPH.match(prev):
            i += 1
            continue
        if prev.rstrip().endswith(":"):
            out[j] = prev.rstrip() + ":"
            i += 1
        else:
            out[i:i] = ["::", ""]
            i += 3
    return out


def _module_blocks(app, what: str, name: str, obj: Any, options: Any, lines: List[str]) -> None:
    if what == "module":
        lines[:] = preformatted_blocks(lines)


def _keep_exported(app, what: str, name: str, obj: Any, skip: bool, options: Any) -> Optional[bool]:
    """Every name of a module's ``__all__`` is shown, with or without a docstring (unless the page
    excludes it: a name re-exported from another public module)."""
    if what != "module" or not skip:
        return None
    module = sys.modules.get(app.env.temp_data.get("autodoc:module") or "")
    excluded = getattr(options, "exclude_members", None) or ()
    if module is not None and name in getattr(module, "__all__", ()) and name not in excluded:
        return False
    return None


def _documented_name(target: str) -> Optional[str]:
    """Where the object ``target`` names (such as ``path_lib.path_attention``, a re-export) is defined:
    ``"path_lib.impl.path_attention"``; None when it cannot be imported."""
    home, _, attr = target.rpartition(".")
    try:
        obj = getattr(importlib.import_module(home), attr)
    except (ImportError, AttributeError, ValueError):
        return None
    if inspect.ismodule(obj):
        return obj.__name__
    where, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    return f"{where}.{qualname}" if isinstance(where, str) and isinstance(qualname, str) else None


def _resolve_elsewhere(app, env, node, contnode):
    """A Python cross-reference that Sphinx did not find goes to the documented object it means: a
    re-exported name (``path_lib.path_attention``) to where it is defined, a short name written in
    another module (``:func:`resolve_backend```) to the one documented object whose dotted name ends
    with it. Anything else stays unresolved (and is a warning in a nitpicky build)."""
    if node.get("refdomain") != "py" or not node.get("reftarget"):
        return None
    target = node["reftarget"].lstrip("~.")
    domain = env.get_domain("py")
    found = [name for name in [_documented_name(target)] if name in domain.objects]
    if not found:
        found = [full for full in domain.objects if full.endswith("." + target)]
    if len(found) != 1:
        return None
    return domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], found[0], node, contnode)


def setup(app) -> dict:
    """The Sphinx extension of the API pages (``_config.yml`` lists ``path_lib.book.api``)."""
    from sphinx.ext.autodoc import DataDocumenter, ModuleDocumenter
    from sphinx.util.inspect import object_description

    for ext in ("sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.autosummary"):
        app.setup_extension(ext)
    _napoleon_only_for_code(app)

    class ShortValueDocumenter(DataDocumenter):
        """Module constants: also those of ``__all__`` without a ``#:`` comment (autodoc's own
        documenter takes only commented ones), with their value only when it is short."""

        @classmethod
        def can_document_member(cls, member: Any, membername: str, isattr: bool, parent: Any) -> bool:
            exported = membername in (getattr(parent, "__all__", None) or ())
            plain = not (inspect.isclass(member) or inspect.isroutine(member) or inspect.ismodule(member))
            return super().can_document_member(member, membername, isattr, parent) or (
                isinstance(parent, ModuleDocumenter) and exported and plain)

        def get_doc(self) -> List[List[str]]:
            # only the constant's own ``#:`` comment: without one, autodoc would show its type's
            # docstring (a dict constant would read "dict() -> new empty dictionary ...")
            comment = self.get_module_comment(self.objpath[-1])
            return [comment] if comment else []

        def should_suppress_value_header(self) -> bool:
            try:
                too_long = len(object_description(self.object)) > MAX_VALUE_CHARS
            except Exception:           # a value whose repr fails is shown without it
                too_long = True
            return too_long or super().should_suppress_value_header()

    app.add_autodocumenter(ShortValueDocumenter, override=True)
    app.connect("autodoc-process-docstring", _module_blocks, priority=600)   # after napoleon (500)
    app.connect("autodoc-skip-member", _keep_exported)
    app.connect("missing-reference", _resolve_elsewhere)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description="Write the API reference pages (book/api/*.md).")
    ap.add_argument("--toc", action="store_true", help="print the _toc.yml lines instead")
    ap.add_argument("--root", default=str(Path(__file__).resolve().parents[2]), help="repository root")
    args = ap.parse_args(argv)
    if args.toc:
        print("\n".join(toc_lines()))
        return 0
    for path in write_pages(Path(args.root)):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
