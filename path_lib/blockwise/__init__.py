"""The blockwise algorithms in plain PyTorch, between the float64 references and the Triton kernels.

    mirror        blockwise_path_attention: the kernels' forward phase by phase (blocks and segments,
                  the split of earlier segments, the gate reference, GQA, packed sequences), named as in
                  the kernels; ``path_attention(impl="blockwise")``, the default.
    scan          blockwise_scan: chapter 6's algorithm without segments (per-block UT transforms, a
                  right-to-left scan over every earlier key block); ``path_attention(impl="blockwise_scan")``.

Built on :mod:`path_lib.validation`, :mod:`path_lib.reference.householder` and
:mod:`path_lib.theory.costs` (the kernels' default segment length); the layers (:mod:`path_lib.nn`) and
the decoding cache use them through :func:`path_lib.impl.path_attention`.
"""
