"""Modules (``torch.nn``): attention layers with one interface, the rotation variants, and TinyLM.

    layers        PaTHAttention and the NoPE, RoPE, ALiBi, FoX, SBA layers; the ATTENTION_LAYERS registry.
    model         TinyLM, a small decoder-only model whose position information is its attention.
    rotations     accumulated SO(2) rotation attention (paper B's variants), registered with the layers.

Built on :mod:`path_lib.reference`, :mod:`path_lib.decoding` and (``backend="triton"``) ``path_lib.kernels``.
"""
