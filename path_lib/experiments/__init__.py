"""The experiments proper: what the book's second half trains, converts and measures.

    lm             the language-model runs (nine position encodings, length extrapolation).
    convert        RoPE -> PaTH conversion of a trained model (attention and logit distillation).
    convert_lm     the conversion experiment on a language model.
    constructions  the hand-built one-layer PaTH network for the S5 swap word problem.
    farmass        far attention mass measured inside trained models.

Built on :mod:`path_lib.training` (loop, data) and :mod:`path_lib.nn` (and :mod:`path_lib.theory`
for farmass); never imports :mod:`path_lib.book`.
"""
