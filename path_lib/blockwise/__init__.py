"""The blockwise mirror: the Triton kernels' algorithm in plain PyTorch (``path_attention(impl="blockwise")``).

    mirror        blockwise_path: per-block UT transforms, keys moved to their block's end, a right-to-left
                  scan over key blocks with an online softmax.

It builds on :mod:`path_lib.reference.householder`; the layers (:mod:`path_lib.nn`) and the decoding
cache use it through :func:`path_lib.reference.attention.path_attention`.
"""
