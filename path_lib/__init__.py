"""path_lib: PaTH attention from the mathematics to layers, decoding, tasks and experiments.

Modules:
    householder   Householder-like matrices, their products, the UT transform, boundary adjustments.
    attention     path_attention (explicit / parallel / blockwise) and the NoPE, RoPE, ALiBi, FoX baselines.
    decoding      a key cache kept transformed to the current position; prefill; token-by-token decoding.
    layers        PaTHAttention and baseline attention layers, and a small decoder-only TinyLM.
    rotations     accumulated SO(2) rotation attention (paper B's variants), registered with TinyLM.
    constructions the hand-built one-layer PaTH network for the S5 swap word problem.
    tasks, train  flip-flop, A5, MQRAR-N data; one training loop with recorded, provenance-stamped results.
    theory        simulations of the decoherence / far-mass analysis of length extrapolation.
    corpus, lm    the offline byte-level corpus (Python's standard library) and the LM experiments.
    costs         operation and memory counts; widgets, viz, notebook: helpers for the book.
    provenance    where and how a recorded result was produced.
"""
from .attention import path_attention
from .householder import householder, householder_product, ut_transform
from . import rotations  # noqa: F401  registers "rand_rot_qk", "rand_rot_qkv", "learned_rot" with TinyLM

__version__ = "0.1.0"
__all__ = ["path_attention", "householder", "householder_product", "ut_transform"]
