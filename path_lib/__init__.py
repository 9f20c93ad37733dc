"""path_lib: PaTH attention from the mathematics to layers, decoding, tasks and experiments.

Modules:
    householder  Householder-like matrices, their products, the UT transform, boundary adjustments.
    attention    path_attention (explicit / parallel / blockwise) and the NoPE, RoPE, ALiBi, FoX baselines.
    decoding     a key cache kept transformed to the current position; prefill; token-by-token decoding.
    layers       PaTHAttention and baseline attention layers, and a small decoder-only TinyLM.
"""
from .attention import path_attention
from .householder import householder, householder_product, ut_transform

__version__ = "0.1.0"
__all__ = ["path_attention", "householder", "householder_product", "ut_transform"]
