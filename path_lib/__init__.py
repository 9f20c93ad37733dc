"""path_lib: PaTH attention from the mathematics to layers, decoding, tasks and experiments.

Layout (one subpackage per kind of code; an arrow is "imports"):

    path_lib/
      __init__.py     the public API below
      validation.py   the argument checks every public entry point (and kernels/) uses
      reference/      float64 references: householder (products, UT transform, boundary adjustments),
                      attention (path_attention explicit / parallel, NoPE / RoPE / ALiBi / FoX), sba
      blockwise/      mirror: the Triton kernels' algorithm in plain PyTorch (impl="blockwise");
                      scan: chapter 6's segment-free scan (impl="blockwise_scan")
      decoding.py     a key cache kept transformed to the current position; prefill; token-by-token decoding
      distributed.py  context-parallel PaTH attention over a torch.distributed group
      nn/             layers (PaTHAttention and the baselines), model (TinyLM), rotations (paper B's variants),
                      padding, cache, sampling, hf (the transformers model)
      experiments/    tasks, train, train_cli, hardware, corpus, lm, constructions, farmass, claims, provenance,
                      convert, convert_lm (RoPE -> PaTH conversion)
      theory/         decoherence (length-extrapolation simulations), costs (operation and memory counts)
      book/           the chapters' helpers only: notebook, widgets, viz, speed, kernel_diagrams

    book -> experiments -> nn -> decoding, distributed, kernels -> reference / blockwise -> validation
    (theory imports nothing of path_lib; reference.attention hands impl="blockwise" to blockwise.mirror)

The Triton kernels are ``path_lib.kernels``. Their source lives beside ``path_lib`` in the repository's
``kernels/`` folder (the design keeps the three kinds of code apart in the tree); a wheel installs that
folder as ``path_lib/kernels`` (``pyproject.toml``'s ``package-dir``), so no top-level module named
``kernels`` is installed to collide with another distribution's (Hugging Face's ``kernels``, which
``transformers`` >= 5.25 requires and imports). In a checkout, the finders below resolve ``path_lib.kernels``
to the ``kernels/`` folder, and the top-level name ``kernels`` to that other distribution even when the
checkout's root is on ``sys.path`` (``python -m``, ``python -c`` or a notebook started there), where the
folder would otherwise shadow it.

Nothing outside ``path_lib/book`` imports ``path_lib.book`` (its IPython / yaml / matplotlib needs are the
``book`` extra); tests/test_layout.py checks the rules.
"""
import importlib.abc as _abc
import importlib.machinery as _machinery
import importlib.util as _util
import sys as _sys
from pathlib import Path as _Path

_CHECKOUT_KERNELS = _Path(__file__).resolve().parent.parent / "kernels"


class _CheckoutKernelsFinder(_abc.MetaPathFinder):
    """``path_lib.kernels`` -> the checkout's ``kernels/`` folder (installed wheels have the real subpackage)."""

    def find_spec(self, name, path=None, target=None):
        if name != "path_lib.kernels":
            return None
        return _util.spec_from_file_location(name, _CHECKOUT_KERNELS / "__init__.py",
                                             submodule_search_locations=[str(_CHECKOUT_KERNELS)])


class _TopLevelKernelsFinder(_abc.MetaPathFinder):
    """``kernels`` -> the first ``kernels`` on ``sys.path`` outside the checkout's root (Hugging Face's), or
    the default search (which then meets the folder's guard) when there is none."""

    def find_spec(self, name, path=None, target=None):
        if name != "kernels" or path is not None:
            return None
        root = _CHECKOUT_KERNELS.parent
        elsewhere = [p for p in _sys.path if isinstance(p, str) and _Path(p or ".").resolve() != root]
        return _machinery.PathFinder.find_spec(name, elsewhere)


if (not (_Path(__file__).resolve().parent / "kernels").is_dir() and (_CHECKOUT_KERNELS / "__init__.py").is_file()
        and not any(isinstance(f, _CheckoutKernelsFinder) for f in _sys.meta_path)):
    _sys.meta_path[:0] = [_CheckoutKernelsFinder(), _TopLevelKernelsFinder()]

from .nn import rotations  # noqa: E402,F401  registers the rotation variants ("tok_rot_qk", ...) with the layers
from .nn.layers import (ALiBiAttention, FoXAttention, NoPEAttention, PaTHAttention, RoPEAttention,  # noqa: E402
                        SBAAttention, make_attention)
from .nn.model import TinyLM  # noqa: E402
from .reference.attention import path_attention  # noqa: E402
from .reference.householder import householder, householder_product, ut_transform  # noqa: E402

__version__ = "0.3.0"
__all__ = [
    "path_attention", "householder", "householder_product", "ut_transform",
    "PaTHAttention", "NoPEAttention", "RoPEAttention", "ALiBiAttention", "FoXAttention", "SBAAttention",
    "make_attention", "TinyLM",
]
