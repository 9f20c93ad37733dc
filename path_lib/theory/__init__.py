"""Analysis without training: simulations and counts.

    decoherence   simulations of the decoherence / far-mass analysis of length extrapolation (paper B).
    costs         operation and memory counts of the references, the blockwise mirror and the kernels.

Depends on numpy (scipy for one distribution function) and no other part of path_lib.
"""
