"""The ledger: the papers' claims, the evidence for each, and the statistics that decide them.

    claims      every claim of the two papers the book tests, with its status, read from the records.
    evidence    how a claim's evidence is read from a record (per-seed values, intervals, tests).
    stats       exact paired permutation (sign-flip) tests over seeds and intervals with their coverage.
    comparison  equal-training checks and comparison tables of trained runs.

Imports nothing of the layers above it (training, experiments, book).
"""
