"""Float64-capable references: clear, slow, the ground truth every faster path is tested against.

    householder   Householder-like matrices, their products, the UT transform, boundary adjustments.
    attention     path_attention (explicit / parallel; blockwise dispatches to path_lib.blockwise) and the
                  NoPE, RoPE, ALiBi, FoX baselines.
    sba           stick-breaking attention (a baseline of paper A's flip-flop table).
    short_conv    PaTH's direction map w = L2norm(SiLU(causal depthwise conv(u))) in PyTorch (the layer's
                  map on every backend but Triton's, and the check of the fused Triton pass).

Import from the modules (``from path_lib.reference.householder import ut_transform``); this package
re-exports nothing, so ``path_lib.reference.householder`` is always the module.
"""
