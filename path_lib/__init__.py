"""path_lib: PaTH attention from the mathematics to layers, decoding, tasks and experiments.

Layout (one subpackage per kind of code; an arrow is "imports")::

    path_lib/
      __init__.py     the public API below
      validation.py   the argument checks every public entry point (and kernels/) uses
      impl.py         the one vocabulary of implementations and the one rule that picks one per call;
                      path_attention over every implementation
      records.py      recorded results: the registry of current records, provenance, schemas, loading
      reference/      float64 references: householder (products, UT transform, boundary adjustments),
                      attention (path_attention explicit / parallel, NoPE / RoPE / ALiBi / FoX), sba
      blockwise/      mirror: the Triton kernels' algorithm in plain PyTorch (impl="blockwise");
                      scan: chapter 6's segment-free scan (impl="blockwise_scan")
      decoding.py     a key cache kept transformed to the current position; prefill; token-by-token decoding
      distributed.py  context-parallel PaTH attention over a torch.distributed group
      nn/             layers (PaTHAttention and the baselines), model (TinyLM), rotations (paper B's variants),
                      padding, cache, sampling, hf (the transformers model)
      hardware.py     the device description (DeviceInfo, the kernels' too), its class, the preset table
                      (PRESET_TABLE) and the floating-point format
      training/       loop, state, cli (torchrun), tasks, corpus: training and its data
      ledger/         claims, evidence, stats, comparison: the papers' claims and what decides them
      experiments/    lm, constructions, farmass, convert, convert_lm (RoPE -> PaTH conversion)
      theory/         decoherence (length-extrapolation simulations), costs (operation and memory counts)
      book/           the chapters' helpers only: notebook, widgets, viz, speed, kernel_diagrams

    book -> experiments -> training -> distributed, ledger, nn -> impl -> decoding, kernels
      -> blockwise -> hardware, records, reference, theory -> validation
    (validation imports nothing of path_lib; the references only compute, impl chooses)

The Triton kernels are ``path_lib.kernels``. Their source lives beside ``path_lib`` in the repository's
``kernels/`` folder (the design keeps the three kinds of code apart in the tree), at its import path:
``kernels/path_lib/kernels/``. ``kernels/`` itself is no package, so it never shadows another distribution's
top-level ``kernels`` (Hugging Face's, which ``transformers`` >= 5.25 imports). ``pyproject.toml``'s
``package-dir`` installs the folder as ``path_lib/kernels`` in a wheel; in a checkout, the editable install
(``pip install -e .``, which ``make`` runs) maps the name to the folder, and static tools follow it with
``kernels`` on their search path (``mypy_path``).

Nothing outside ``path_lib/book`` imports ``path_lib.book`` (its IPython / yaml / matplotlib needs are the
``book`` extra); tests/test_layout.py checks the rules.
"""
import os as _os

# In a checkout without the editable install (a clone opened in Jupyter, a script run from the
# repository, the GPU machine), ``path_lib.kernels`` is found in ``kernels/path_lib/`` beside this
# package: the folder is added to this package's own search path (no change to sys.path or the
# import system). In an installed wheel the folder does not exist and nothing is added.
_CHECKOUT_KERNELS = _os.path.join(_os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))),
                                  "kernels", "path_lib")
if _os.path.isfile(_os.path.join(_CHECKOUT_KERNELS, "kernels", "__init__.py")) \
        and _CHECKOUT_KERNELS not in __path__:
    __path__.append(_CHECKOUT_KERNELS)

from .nn import rotations  # noqa: E402,F401  registers the rotation variants ("tok_rot_qk", ...) with the layers
from .nn.layers import (ALiBiAttention, FoXAttention, NoPEAttention,  # noqa: E402
                        PaTHAttention, RoPEAttention, SBAAttention, make_attention)
from .nn.model import TinyLM  # noqa: E402
from .impl import path_attention  # noqa: E402
from .reference.householder import householder, householder_product, ut_transform  # noqa: E402

__version__ = "0.3.0"
__all__ = [
    "path_attention", "householder", "householder_product", "ut_transform",
    "PaTHAttention", "NoPEAttention", "RoPEAttention", "ALiBiAttention", "FoXAttention", "SBAAttention",
    "make_attention", "TinyLM",
]
