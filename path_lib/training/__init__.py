"""Training: the loop, its state and command line, and the data it trains on.

    loop    one training loop for every comparison (equal steps, batches and schedule), presets,
            evaluation, provenance-stamped results (written by :mod:`path_lib.records`).
    state   checkpoints (written atomically), progress, random-number-generator state.
    cli     ``torchrun -m path_lib.training.cli``: data-parallel (DDP) and sharded (FSDP2) training.
    tasks   flip-flop, A5 word problems, MQRAR-N: the synthetic tasks' data.
    corpus  the offline byte-level corpora for language modelling.

Built on :mod:`path_lib.nn`, :mod:`path_lib.hardware` and :mod:`path_lib.ledger` (the equal-training
check); never imports :mod:`path_lib.experiments` or :mod:`path_lib.book`.
"""
