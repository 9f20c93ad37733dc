"""Experiments: data, training, the LM runs, the hand-built construction, far mass and claims.

    tasks          flip-flop, A5 word problems, MQRAR-N data.
    train          one training loop (equal-steps comparisons), presets, provenance-stamped results
                   (written by :mod:`path_lib.records`).
    hardware       the tiny (CPU) / full (CUDA) preset rule.
    corpus, lm     the offline byte-level corpus (Python's standard library) and the language-model runs.
    constructions  the hand-built one-layer PaTH network for the S5 swap word problem.
    farmass        far attention mass measured inside trained models.
    claims         the papers' claims ledger, checked against the records.

Built on :mod:`path_lib.nn` (and :mod:`path_lib.theory` for farmass); never imports :mod:`path_lib.book`.
"""
