"""The ledger of the two papers' claims and where this project stands on each.

Paper A: Yang et al. 2025, *PaTH Attention: Position Encoding via Accumulating Householder
Transformations*. Paper B: Godavarti 2026, *Why Do Accumulated Transformations Extrapolate?*

Every entry of :data:`CLAIMS` is a dict:

* ``id``: a short stable name; ``paper``: ``"A"`` or ``"B"``; ``section``: the topic it belongs to
  (the ledger page groups by paper, then section); ``where``: where in the paper;
* ``claim``: the claim in one sentence; ``paper_value``: the paper's number(s) or statement, as the
  paper's (never ours);
* ``ours``: None, or ``{"scale": what we ran, "evidence": [repository paths], "values": {label: {"select":
  [...], "value": snapshot, "format": "percent" | "float" | "int" | "text"}}}``. ``evidence`` names a
  recorded result (JSON with provenance, under ``results/`` or ``benchmarks/results/``) or, for the
  stylized simulations and constructions, the chapter whose cells assert the claim at every build
  and the test file that checks it. ``select`` is a path into the record's JSON: keys, list indices,
  or a dict meaning "the one element of this list whose fields equal these" (see :func:`value_at`);
  ``value`` is its value when the ledger was written (a test checks they still agree);
* ``status``: one of :data:`STATUSES`; ``reason``: why (required unless reproduced);
* ``awaits`` (optional): the stable record name (``path_lib.book.notebook.RECORDS``) of the run that will
  decide a claim that is ``"not reproduced yet"``.

The records the entries point to are the ones existing when the ledger was written, kept under
``results/*/history/`` so that the pointers stay valid when a new run replaces a current record.
"""
from __future__ import annotations

import json
import math
from collections import Counter, OrderedDict
from pathlib import Path
from typing import Dict, List, Optional, Sequence

__all__ = ["STATUSES", "CLAIMS", "REQUIRES_EVIDENCE", "value_at", "load_evidence", "validate", "check_snapshots",
           "counts", "ledger_markdown", "counts_markdown", "pending", "format_value", "UNEQUAL"]

STATUSES = ("reproduced", "reproduced in direction only", "not reproduced", "not reproduced yet",
            "quoted only", "not attempted")
#: statuses that rest on something we ran: they must name evidence that exists
REQUIRES_EVIDENCE = ("reproduced", "reproduced in direction only", "not reproduced", "not reproduced yet")

UNEQUAL = "record at unequal training, awaiting equal-steps runs"

_LM = "results/lm/history/lm_full_2026-12-01_unequal.json"
_FF = "results/synthetic/history/flip_flop_2026-11-29_dirty.json"
_A5 = "results/synthetic/history/a5_layers_2026-12-01.json"
_MQ = "results/synthetic/history/mqrar_2026-12-01.json"
_BENCH = "benchmarks/results/bench_path.json"
_CH5 = "book/part2/05_expressivity.ipynb"
_CH4 = "book/part1/04_path_attention.ipynb"
_CH11 = "book/part4/11_extrapolation_theory.ipynb"

_LM_SCALE = ("byte-level TinyLM, 4 layers x 256 wide, 4 heads, trained at 256 bytes on Python's standard library, "
             "planned 1,200 steps of 64 x 256 bytes; one seed; the nine models shared one H200 under a 400 s "
             "deadline, so they stopped after 340 (PaTH-FoX) to 1,200 (NoPE) steps")
_LM_B_SCALE = (_LM_SCALE + "; the rotation variants of this record took their angles from hidden states "
               "(today's HidRot-*), not from the tokens as paper B does")
_FF_SCALE = ("1 layer, 2 heads, d_model 64, length 512, batch 128, one seed; RoPE and FoX ran their 1,500 steps, "
             "PaTH 934 and PaTH-FoX 815 (schedules cut by a time budget); sparse test of 7,166 reads; "
             "made from a working tree with uncommitted changes; no SBA")


def _v(select, value, fmt="float"):
    return {"select": list(select), "value": value, "format": fmt}


CLAIMS: List[Dict] = [
    # ------------------------------------------------------------------ paper A: expressivity
    {"id": "A-tc0", "paper": "A", "section": "Expressivity", "where": "Section 2",
     "claim": "Transformers with fixed (data-independent) position encodings, RoPE included, and log precision "
              "are in uniform TC0, so they cannot solve NC1-complete problems unless TC0 = NC1.",
     "paper_value": "a theorem resting on TC0 != NC1",
     "ours": {"scale": "explained in chapter 5; the RoPE version of the construction is shown to see only the "
                       "distances, not the swaps (checked numerically)",
              "evidence": [_CH5, "tests/test_constructions.py"], "values": {}},
     "status": "quoted only",
     "reason": "a complexity-class separation cannot be checked numerically; we check only that the PaTH "
               "recipe has no RoPE counterpart"},
    {"id": "A-thm2.1", "paper": "A", "section": "Expressivity", "where": "Section 2, Theorem 2.1",
     "claim": "A one-layer PaTH transformer with two heads and O(log n) precision solves an NC1-complete problem: "
              "whether n swaps of 5 elements compose to the identity.",
     "paper_value": "a construction (proof)",
     "ours": {"scale": "the construction built by hand and checked on random, identity-composing and adversarial "
                       "swap sequences (tests: float64, and float32 at n = 1,000); chapter 5 runs it to n = 4,000 "
                       "swaps and measures the float32 rounding drift",
              "evidence": [_CH5, "tests/test_constructions.py"], "values": {}},
     "status": "reproduced", "reason": ""},
    {"id": "A-thmA.1", "paper": "A", "section": "Expressivity", "where": "Appendix A, Theorem A.1",
     "claim": "A two-layer PaTH transformer solves flip-flop language modelling with accuracy > 1 - 1/n^100.",
     "paper_value": "a construction (proof)",
     "ours": {"scale": "a hand-built two-layer PaTH network reads the last write exactly at length 512 on the ID, "
                       "sparse and dense test sets (float64 and float32)",
              "evidence": [_CH5, "tests/test_constructions.py"], "values": {}},
     "status": "reproduced", "reason": ""},
    {"id": "A-deltanet", "paper": "A", "section": "Expressivity", "where": "Section 2 (relation to DeltaNet)",
     "claim": "Without the softmax, PaTH is the linear RNN S_t = S_{t-1} H_t + v_t k_t^T "
              "(o_t = sum_j v_j k_j^T H_{j+1}...H_t q_t); with w = k it is DeltaNet's delta rule.",
     "paper_value": "an identity",
     "ours": {"scale": "the recurrence run against the definition, float64", "evidence": [_CH4], "values": {}},
     "status": "reproduced", "reason": ""},
    # ------------------------------------------------------------------ paper A: synthetic tasks
    {"id": "A-ff-path", "paper": "A", "section": "Synthetic tasks", "where": "flip-flop table",
     "claim": "One-layer PaTH (2 heads, 64 dims) solves flip-flop: error ID / OOD sparse / OOD dense.",
     "paper_value": "0% / 0.0001% / 0%",
     "ours": {"scale": _FF_SCALE, "evidence": [_FF],
              "values": {"ID": _v(["table", "path", "id_error"], 0.0, "percent"),
                         "sparse": _v(["table", "path", "ood_sparse_error"], 0.0, "percent"),
                         "dense": _v(["table", "path", "ood_dense_error"], 0.0, "percent"),
                         "steps": _v(["table", "path", "steps"], 934, "int")}},
     "status": "not reproduced yet",
     "reason": UNEQUAL + "; the run stopped at 934 of its steps, the tree was dirty, and 7,166 sparse reads "
               "cannot resolve 0.0001% (awaits >= 10^6 reads)", "awaits": "flip_flop"},
    {"id": "A-ff-rope", "paper": "A", "section": "Synthetic tasks", "where": "flip-flop table",
     "claim": "RoPE fails flip-flop out of distribution: error ID / OOD sparse / OOD dense.",
     "paper_value": "6.9% / 40.3% / 0.01%",
     "ours": {"scale": _FF_SCALE, "evidence": [_FF],
              "values": {"ID": _v(["table", "rope", "id_error"], 0.3173573219289191, "percent"),
                         "sparse": _v(["table", "rope", "ood_sparse_error"], 0.4607870499581357, "percent"),
                         "dense": _v(["table", "rope", "ood_dense_error"], 0.2750705677534946, "percent")}},
     "status": "not reproduced yet", "reason": UNEQUAL + "; one seed, dirty tree", "awaits": "flip_flop"},
    {"id": "A-ff-fox", "paper": "A", "section": "Synthetic tasks", "where": "flip-flop table",
     "claim": "FoX fails flip-flop out of distribution: error ID / OOD sparse / OOD dense.",
     "paper_value": "8.3% / 36.3% / 0%",
     "ours": {"scale": _FF_SCALE, "evidence": [_FF],
              "values": {"ID": _v(["table", "fox", "id_error"], 0.08367128742073437, "percent"),
                         "sparse": _v(["table", "fox", "ood_sparse_error"], 0.3566843427295563, "percent"),
                         "dense": _v(["table", "fox", "ood_dense_error"], 4.225613981723164e-06, "percent")}},
     "status": "not reproduced yet", "reason": UNEQUAL + "; one seed, dirty tree", "awaits": "flip_flop"},
    {"id": "A-ff-sba", "paper": "A", "section": "Synthetic tasks", "where": "flip-flop table",
     "claim": "Stick-breaking attention (SBA) fails flip-flop out of distribution: error ID / OOD sparse / OOD dense.",
     "paper_value": "9.6% / 38.9% / 0%",
     "ours": None, "status": "not attempted",
     "reason": "no SBA run recorded yet; SBA is now in the library (path_lib.reference.sba) and in the planned "
               "equal-steps flip-flop run", "awaits": "flip_flop"},
    {"id": "A-a5", "paper": "A", "section": "Synthetic tasks", "where": "A5 word problem figure",
     "claim": "On the A5 word problem PaTH needs fewer layers than RoPE, SBA and FoX to reach 90% accuracy.",
     "paper_value": "fewer layers (exact counts only in the paper's figure)",
     "ours": {"scale": "length 16, d_model 128, 1-4 layers, one seed, each run fitted into 405 s (1,156 to 8,283 "
                       "steps depending on model and depth); no SBA",
              "evidence": [_A5],
              "values": {"fewest layers, PaTH": _v(["fewest_layers_90", "path"], None, "text"),
                         "fewest layers, RoPE": _v(["fewest_layers_90", "rope"], None, "text")}},
     "status": "not reproduced yet",
     "reason": UNEQUAL + "; no model reached 90% in its time slot", "awaits": "a5"},
    {"id": "A-mqrar", "paper": "A", "section": "Synthetic tasks", "where": "Figure 2 (MQRAR-N)",
     "claim": "On MQRAR-N (2 layers, width 256, 2 heads, 32 pairs, length 768) PaTH is strong for N < 4 and "
              "degrades at N = 4.",
     "paper_value": "strong for N < 4, degrades at N = 4",
     "ours": {"scale": "the paper's sizes; one seed; PaTH about 115 steps, RoPE about 550 in the same time slot",
              "evidence": [_MQ],
              "values": {"PaTH, N=1": _v(["table", "path", "1", "accuracy"], 0.07068014705882353, "percent"),
                         "RoPE, N=1": _v(["table", "rope", "1", "accuracy"], 0.08792892156862746, "percent")}},
     "status": "not reproduced yet",
     "reason": UNEQUAL + "; no model learned the task (chance 3.1%)", "awaits": "mqrar"},
    # ------------------------------------------------------------------ paper A: language modelling
    {"id": "A-t2-rope", "paper": "A", "section": "Language modelling", "where": "Table 2",
     "claim": "760M RoPE model, 50B tokens: WikiText ppl, LAMBADA ppl / acc, PIQA, HellaSwag, WinoGrande, "
              "ARC-e, ARC-c, average.",
     "paper_value": "19.01, 19.77 / 40.4, 70.2, 50.3, 54.9, 67.2, 33.3, avg 52.7", "ours": None,
     "status": "not attempted",
     "reason": "760M parameters x 50B tokens (8 H100 for 2-3 days) is far beyond our budget of minutes on one GPU"},
    {"id": "A-t2-fox", "paper": "A", "section": "Language modelling", "where": "Table 2",
     "claim": "760M FoX model: the same benchmarks.",
     "paper_value": "18.33, 18.28 / 41.7, 70.8, 50.9, 57.1, 65.7, 32.6, avg 53.1", "ours": None,
     "status": "not attempted", "reason": "760M parameters x 50B tokens, beyond our budget"},
    {"id": "A-t2-path", "paper": "A", "section": "Language modelling", "where": "Table 2",
     "claim": "760M PaTH model: the same benchmarks.",
     "paper_value": "18.03, 16.79 / 44.0, 70.5, 51.5, 56.0, 68.9, 34.4, avg 54.2", "ours": None,
     "status": "not attempted", "reason": "760M parameters x 50B tokens, beyond our budget"},
    {"id": "A-t2-pathfox", "paper": "A", "section": "Language modelling", "where": "Table 2",
     "claim": "760M PaTH-FoX model: the same benchmarks.",
     "paper_value": "17.35, 16.23 / 44.1, 70.8, 52.2, 57.1, 67.3, 33.9, avg 54.2", "ours": None,
     "status": "not attempted", "reason": "760M parameters x 50B tokens, beyond our budget"},
    {"id": "A-t2-order", "paper": "A", "section": "Language modelling", "where": "Table 2",
     "claim": "Perplexity ordering at the training length: RoPE worst, then FoX, PaTH, PaTH-FoX best.",
     "paper_value": "WikiText ppl 19.01 > 18.33 > 18.03 > 17.35",
     "ours": {"scale": _LM_SCALE + "; byte-level perplexity at the training length", "evidence": [_LM],
              "values": {"RoPE": _v(["models", "RoPE", "eval", "ppl", 0], 2.7308402518183597),
                         "FoX": _v(["models", "FoX", "eval", "ppl", 0], 2.74351556374068),
                         "PaTH": _v(["models", "PaTH", "eval", "ppl", 0], 3.619876450756168),
                         "PaTH-FoX": _v(["models", "PaTH-FoX", "eval", "ppl", 0], 3.705417639788939)}},
     "status": "not reproduced yet",
     "reason": UNEQUAL + " (PaTH and PaTH-FoX got the fewest steps)", "awaits": "lm"},
    {"id": "A-ext-rope", "paper": "A", "section": "Length extrapolation", "where": "Figure 3",
     "claim": "Trained at 4K, RoPE fails just past the training length.",
     "paper_value": "fails just past 4K",
     "ours": {"scale": _LM_SCALE + "; ppl(L) / ppl(256) on the same target bytes", "evidence": [_LM],
              "values": {"ratio at 2x": _v(["models", "RoPE", "eval", "ratio", 1], 1.6412132818593377),
                         "ratio at 4x": _v(["models", "RoPE", "eval", "ratio", 2], 8.029620557978328)}},
     "status": "not reproduced yet", "reason": UNEQUAL, "awaits": "lm"},
    {"id": "A-ext-path", "paper": "A", "section": "Length extrapolation", "where": "Figure 3",
     "claim": "PaTH is stable to about 32K (8x its training length), then degrades (most on code).",
     "paper_value": "stable to ~8x, then degrades",
     "ours": {"scale": _LM_SCALE, "evidence": [_LM],
              "values": {"ratio at 8x": _v(["models", "PaTH", "eval", "ratio", 3], 1.1261184882633346),
                         "ratio at 64x": _v(["models", "PaTH", "eval", "ratio", 6], 3.1934520092911796)}},
     "status": "not reproduced yet", "reason": UNEQUAL + " (PaTH did 395 of 1,200 steps)", "awaits": "lm"},
    {"id": "A-ext-gates", "paper": "A", "section": "Length extrapolation", "where": "Figure 3",
     "claim": "FoX and PaTH-FoX stay stable to 64K (16x); PaTH-FoX has the lower perplexity.",
     "paper_value": "flat to 16x; PaTH-FoX below FoX",
     "ours": {"scale": _LM_SCALE, "evidence": [_LM],
              "values": {"FoX ratio at 64x": _v(["models", "FoX", "eval", "ratio", 6], 0.9258073127236551),
                         "PaTH-FoX ratio at 64x": _v(["models", "PaTH-FoX", "eval", "ratio", 6], 0.9726183204849679),
                         "FoX ppl": _v(["models", "FoX", "eval", "ppl", 0], 2.74351556374068),
                         "PaTH-FoX ppl": _v(["models", "PaTH-FoX", "eval", "ppl", 0], 3.705417639788939)}},
     "status": "not reproduced yet", "reason": UNEQUAL + " (PaTH-FoX did 340 steps, FoX 844)", "awaits": "lm"},
    {"id": "A-ruler", "paper": "A", "section": "Length extrapolation", "where": "Table 3 (RULER)",
     "claim": "RULER at 8K: RoPE 1.3, FoX 29.5, PaTH 34.8, PaTH-FoX 34.0; at 16K PaTH 18.7, PaTH-FoX 22.6.",
     "paper_value": "8K: 1.3 / 29.5 / 34.8 / 34.0; 16K: 18.7 / 22.6", "ours": None, "status": "not attempted",
     "reason": "RULER needs models trained at 4K that follow its prompts; we run only a single-needle passkey "
               "probe in code, RULER's simplest task, on tiny byte models"},
    {"id": "A-phonebook", "paper": "A", "section": "Length extrapolation", "where": "Table 3 (PhoneBook)",
     "claim": "PhoneBook: PaTH / PaTH-FoX 20.8 vs 93.8 at 4K, 0 vs 66.6 at 8K.",
     "paper_value": "4K: 20.8 vs 93.8; 8K: 0 vs 66.6", "ours": None, "status": "not attempted",
     "reason": "needs 760M-scale models trained at 4K; beyond our budget"},
    {"id": "A-retrieval", "paper": "A", "section": "Length extrapolation", "where": "Section on long context",
     "claim": "Good long-text perplexity is not reliable retrieval.",
     "paper_value": "qualitative",
     "ours": {"scale": _LM_SCALE + "; passkey exact match at 1x and 16x", "evidence": [_LM],
              "values": {"ALiBi passkey at 1x": _v(["models", "ALiBi", "probe", "exact", 0], 0.984375, "percent"),
                         "ALiBi passkey at 16x": _v(["models", "ALiBi", "probe", "exact", 4], 0.15625, "percent"),
                         "ALiBi ratio at 64x": _v(["models", "ALiBi", "eval", "ratio", 6], 0.8970849419596257)}},
     "status": "not reproduced yet", "reason": UNEQUAL, "awaits": "lm"},
    {"id": "A-conv-smollm", "paper": "A", "section": "Conversion of RoPE models", "where": "conversion experiments",
     "claim": "A trained RoPE model (SmolLM2-1.7B before its decay stage) converted to PaTH by distillation "
              "(MSE on attention outputs, 100M tokens; KL on outputs, 3B tokens) and 21B further tokens scores "
              "HumanEval 25.6 vs 23.1 and MBPP+ 51.3 vs 47.1.",
     "paper_value": "HumanEval 25.6 vs 23.1; MBPP+ 51.3 vs 47.1", "ours": None, "status": "not attempted",
     "reason": "needs a pretrained 1.7B model and 21B tokens of training; beyond our budget"},
    {"id": "A-conv-qwen", "paper": "A", "section": "Conversion of RoPE models", "where": "Table 5",
     "claim": "Qwen2.5-7B-Instruct converted without the extra stage: GSM8K 80.29 -> 80.67, MATH 69.10 -> 65.38, "
              "HumanEval 82.32 -> 77.44 (improvement not guaranteed).",
     "paper_value": "GSM8K +0.38, MATH -3.72, HumanEval -4.88", "ours": None, "status": "not attempted",
     "reason": "needs a 7B model and its evaluation suites; beyond our budget"},
    {"id": "A-speed-sdpa", "paper": "A", "section": "Speed", "where": "Figure 1",
     "claim": "PaTH is slower than RoPE with FlashAttention (one H100, batch 32, 32 heads, head dim 64).",
     "paper_value": "slower",
     "ours": {"scale": "one H200, bf16, D 64, 32 heads, T 4096, batch 8, forward, median ms",
              "evidence": [_BENCH],
              "values": {"SDPA (FlashAttention backend)": _v(
                             ["rows", {"D": 64, "T": 4096, "method": "sdpa", "mode": "fwd"}, "ms"], 1.2593),
                         "our PaTH kernel": _v(
                             ["rows", {"D": 64, "T": 4096, "method": "ours_path", "mode": "fwd"}, "ms"], 4.1682),
                         "fla PaTH": _v(
                             ["rows", {"D": 64, "T": 4096, "method": "fla_path", "mode": "fwd"}, "ms"], 10.7796)}},
     "status": "reproduced", "reason": ""},
    {"id": "A-speed-fox", "paper": "A", "section": "Speed", "where": "Figure 1",
     "claim": "PaTH is faster than FoX (the authors' kernels at the time).",
     "paper_value": "faster",
     "ours": {"scale": "one H200, bf16, D 64, 32 heads, T 4096, batch 8, forward, median ms; fla-core 0.6.0",
              "evidence": [_BENCH],
              "values": {"fla FoX": _v(["rows", {"D": 64, "T": 4096, "method": "fla_fox", "mode": "fwd"}, "ms"],
                                       2.4737),
                         "fla PaTH": _v(["rows", {"D": 64, "T": 4096, "method": "fla_path", "mode": "fwd"}, "ms"],
                                        10.7796),
                         "our PaTH kernel": _v(
                             ["rows", {"D": 64, "T": 4096, "method": "ours_path", "mode": "fwd"}, "ms"], 4.1682)}},
     "status": "not reproduced",
     "reason": "with today's kernels (fla-core 0.6.0) FoX's forward is faster than both fla's and our PaTH "
               "kernels on an H200; the paper compared the kernels of its time on an H100"},
    # ------------------------------------------------------------------ paper B: analysis
    {"id": "B-gap-mixing", "paper": "B", "section": "Analysis (stylized model)", "where": "score-side decoherence",
     "claim": "Random orthogonal steps with a spectral gap ||E[M]|| < 1 mix within a window independent of the "
              "context length: E[P_n] = E[M]^n decays geometrically, products approach Haar.",
     "paper_value": "a theorem in a stylized single-layer model",
     "ours": {"scale": "Monte Carlo with error bars against closed forms (Haar, SO(2) blocks, Householder steps), "
                       "KS distance to the Haar law, d = 8",
              "evidence": [_CH11, "tests/test_theory.py"], "values": {}},
     "status": "reproduced", "reason": ""},
    {"id": "B-concentration", "paper": "B", "section": "Analysis (stylized model)", "where": "score-side decoherence",
     "claim": "For Haar-random transport q^T P k concentrates at 0 with width ||q|| ||k|| / sqrt(d) (Levy; "
              "Hoeffding for SO(2) blocks): a score gap between near and far routes.",
     "paper_value": "concentration bounds",
     "ours": {"scale": "tails against both bounds and the 1/sqrt(d) width, d = 4 to 64",
              "evidence": [_CH11, "tests/test_theory.py"], "values": {}},
     "status": "reproduced", "reason": ""},
    {"id": "B-rope-nogap", "paper": "B", "section": "Analysis (stylized model)", "where": "score-side decoherence",
     "claim": "Fixed RoPE angles have no gap (|E e^{i theta}| = 1): the mean transport never decays.",
     "paper_value": "no gap",
     "ours": {"scale": "closed form and simulation", "evidence": [_CH11, "tests/test_theory.py"], "values": {}},
     "status": "reproduced", "reason": ""},
    {"id": "B-farmass-bound", "paper": "B", "section": "Analysis (stylized model)", "where": "far-mass lower bound",
     "claim": "With logits in [-lambda, lambda] the far mass is at least M_L / (M_L + K e^{2 lambda}) -> 1: "
              "rotation alone must eventually fail.",
     "paper_value": "a theorem",
     "ours": {"scale": "proof written out and checked in simulation at contexts 64 to 65,536; the bound is also "
                       "evaluated row by row inside trained models (path_lib.experiments.farmass, chapter 12)",
              "evidence": [_CH11, "tests/test_theory.py", "tests/test_farmass.py"], "values": {}},
     "status": "reproduced", "reason": ""},
    {"id": "B-farmass-trained", "paper": "B", "section": "Analysis (stylized model)", "where": "far-mass lower bound",
     "claim": "In trained models, rotation-only attention puts growing mass on far tokens as the context grows, "
              "while a distance bias (ALiBi) or a forget gate keeps it bounded.",
     "paper_value": "the mechanism behind the experiments (not a measured table)",
     "ours": None, "status": "not attempted",
     "reason": "measured so far only in the book's tiny CPU models (chapter 12, not a record); the far mass of "
               "the GPU-trained models is part of the planned equal-steps run", "awaits": "lm"},
    {"id": "B-bias-escape", "paper": "B", "section": "Analysis (stylized model)", "where": "far-mass lower bound",
     "claim": "An explicit distance bias (ALiBi) or a forget gate (FoX) bounds the far mass at every context "
              "length, which is why they stay flat.",
     "paper_value": "a proposition",
     "ours": {"scale": "an upper bound proved and checked in simulation at every context length",
              "evidence": [_CH11, "tests/test_theory.py"], "values": {}},
     "status": "reproduced", "reason": ""},
    {"id": "B-value-side", "paper": "B", "section": "Analysis (stylized model)", "where": "value-side protection",
     "claim": "Transporting values along the route (SO(2) blocks) makes residual far contributions add "
              "incoherently, bounding their energy.",
     "paper_value": "a proposition",
     "ours": {"scale": "closed form of the far energy checked by Monte Carlo; O(1/M) with transport, O(1) without",
              "evidence": [_CH11, "tests/test_theory.py"], "values": {}},
     "status": "reproduced", "reason": ""},
    # ------------------------------------------------------------------ paper B: experiments
    {"id": "B-exp-8k", "paper": "B", "section": "Experiments (16 layers, 768 wide, OpenWebText, trained at 512)",
     "where": "experiments",
     "claim": "At 8K (16x) the perplexity ratio of random accumulated rotations is 1.60x against RoPE's 16.2x.",
     "paper_value": "1.60x vs 16.2x",
     "ours": {"scale": _LM_B_SCALE + "; ratio at 16x (4,096 bytes)", "evidence": [_LM],
              "values": {"HidRot-QK (then rand_rot_qk)": _v(["models", "rand_rot_qk", "eval", "ratio", 4],
                                                            20.465219604358346),
                         "RoPE": _v(["models", "RoPE", "eval", "ratio", 4], 11.914576127407956)}},
     "status": "not reproduced yet",
     "reason": UNEQUAL + "; and the recorded rotations were not paper B's (angles from hidden states)",
     "awaits": "lm"},
    {"id": "B-exp-qkv", "paper": "B", "section": "Experiments (16 layers, 768 wide, OpenWebText, trained at 512)",
     "where": "experiments",
     "claim": "At 65K (128x) rotating Q/K/V degrades 1.59x, rotating Q/K only 7.49x.",
     "paper_value": "1.59x vs 7.49x",
     "ours": {"scale": _LM_B_SCALE + "; ratio at 64x (16,384 bytes), our longest", "evidence": [_LM],
              "values": {"HidRot-QKV (then rand_rot_qkv)": _v(["models", "rand_rot_qkv", "eval", "ratio", 6],
                                                              8.663633838595251),
                         "HidRot-QK (then rand_rot_qk)": _v(["models", "rand_rot_qk", "eval", "ratio", 6],
                                                            31.1892299696574)}},
     "status": "not reproduced yet",
     "reason": UNEQUAL + "; and the recorded rotations were not paper B's (angles from hidden states)",
     "awaits": "lm"},
    {"id": "B-exp-alibi", "paper": "B", "section": "Experiments (16 layers, 768 wide, OpenWebText, trained at 512)",
     "where": "experiments",
     "claim": "ALiBi stays flat: 0.96x at 65K.",
     "paper_value": "0.96x",
     "ours": {"scale": _LM_SCALE + "; ratio at 64x", "evidence": [_LM],
              "values": {"ALiBi": _v(["models", "ALiBi", "eval", "ratio", 6], 0.8970849419596257)}},
     "status": "not reproduced yet",
     "reason": UNEQUAL + " (ALiBi stopped at 1,042 of 1,200 steps)", "awaits": "lm"},
    {"id": "B-exp-learned", "paper": "B", "section": "Experiments (16 layers, 768 wide, OpenWebText, trained at 512)",
     "where": "experiments",
     "claim": "Learned token-dependent rotations stay near the training perplexity far past 512.",
     "paper_value": "near 1x far past the training length",
     "ours": {"scale": _LM_B_SCALE + "; ratio at 64x", "evidence": [_LM],
              "values": {"HidRot-learned (then learned_rot)": _v(["models", "learned_rot", "eval", "ratio", 6],
                                                                 12.421205073271377)}},
     "status": "not reproduced yet",
     "reason": UNEQUAL + "; and the recorded rotations were not paper B's (angles from hidden states)",
     "awaits": "lm"},
]


# ----------------------------------------------------------------------------------------------
# reading the records
# ----------------------------------------------------------------------------------------------

def _root(root=None) -> Path:
    return Path(root) if root is not None else Path(__file__).resolve().parents[2]


def value_at(data, select: Sequence):
    """Follow ``select`` into ``data``: a str/int step is a key or index; a dict step picks the one
    element of a list whose fields equal the dict's (ValueError if none or several)."""
    cur = data
    for step in select:
        if isinstance(step, dict):
            hits = [x for x in cur if all(x.get(k) == v for k, v in step.items())]
            if len(hits) != 1:
                raise ValueError(f"{len(hits)} elements match {step}, expected exactly one")
            cur = hits[0]
        else:
            cur = cur[step]
    return cur


def load_evidence(path: str, root=None):
    """A JSON record of the repository (dict), or None for a notebook / test (live evidence)."""
    p = _root(root) / path
    return json.loads(p.read_text()) if p.suffix == ".json" else None


# ----------------------------------------------------------------------------------------------
# checks (tests/test_claims.py) and rendering (the ledger page)
# ----------------------------------------------------------------------------------------------

def validate(claims: Sequence[Dict] = None, root=None) -> List[str]:
    """Problems with the ledger's data (an empty list when it is sound): unknown status, a missing
    reason, evidence that does not exist, a claim resting on a run without evidence, a record without
    provenance, duplicate ids."""
    claims = CLAIMS if claims is None else claims
    root = _root(root)
    out = []
    ids = Counter(c.get("id") for c in claims)
    out += [f"duplicate id {i}" for i, n in ids.items() if n > 1]
    for c in claims:
        cid = c.get("id", "?")
        for key in ("id", "paper", "section", "where", "claim", "paper_value", "status"):
            if not c.get(key):
                out.append(f"{cid}: missing {key}")
        if c.get("paper") not in ("A", "B"):
            out.append(f"{cid}: paper must be 'A' or 'B'")
        st = c.get("status")
        if st not in STATUSES:
            out.append(f"{cid}: status {st!r} is not one of {STATUSES}")
        if st != "reproduced" and not c.get("reason"):
            out.append(f"{cid}: status {st!r} needs a reason")
        ours = c.get("ours")
        ev = (ours or {}).get("evidence") or []
        if st in REQUIRES_EVIDENCE and not ev:
            out.append(f"{cid}: status {st!r} must name the record or chapter it rests on")
        if st in ("reproduced", "reproduced in direction only") and ours and ours.get("values"):
            if not any(e.endswith(".json") for e in ev):
                out.append(f"{cid}: a reproduced number must come from a recorded result")
        for e in ev:
            p = root / e
            if not p.exists():
                out.append(f"{cid}: evidence {e} does not exist")
            elif p.suffix == ".json" and "provenance" not in json.loads(p.read_text()):
                out.append(f"{cid}: record {e} has no provenance")
        if ours is not None and not ours.get("scale"):
            out.append(f"{cid}: ours needs a scale")
        for label, v in ((ours or {}).get("values") or {}).items():
            if not any(e.endswith(".json") for e in ev):
                out.append(f"{cid}: value {label!r} needs a recorded result to come from")
            if v.get("format") not in ("percent", "float", "int", "text"):
                out.append(f"{cid}: value {label!r} has an unknown format")
    return out


def check_snapshots(claims: Sequence[Dict] = None, root=None) -> List[str]:
    """Values whose snapshot no longer matches the record they come from (an empty list when all do)."""
    claims = CLAIMS if claims is None else claims
    out = []
    for c in claims:
        ours = c.get("ours") or {}
        recs = [e for e in ours.get("evidence") or [] if e.endswith(".json")]
        for label, v in (ours.get("values") or {}).items():
            try:
                got = value_at(load_evidence(recs[0], root), v["select"])
            except (KeyError, IndexError, ValueError, TypeError, OSError) as e:
                out.append(f"{c['id']} / {label}: cannot read {v['select']} from {recs[0]}: {e}")
                continue
            same = got == v["value"] or (isinstance(got, float) and isinstance(v["value"], float)
                                         and math.isclose(got, v["value"], rel_tol=1e-12))
            if not same:
                out.append(f"{c['id']} / {label}: ledger says {v['value']!r}, {recs[0]} has {got!r}")
    return out


def counts(claims: Sequence[Dict] = None) -> "OrderedDict[str, int]":
    """Number of claims per status, in the order of :data:`STATUSES`."""
    claims = CLAIMS if claims is None else claims
    n = Counter(c["status"] for c in claims)
    return OrderedDict((s, n.get(s, 0)) for s in STATUSES)


def format_value(v: Dict) -> str:
    x, fmt = v["value"], v["format"]
    if x is None:
        return "none"
    if fmt == "percent":
        return f"{100 * x:.4g}%"
    if fmt == "int":
        return f"{int(x):,}"
    if fmt == "float":
        return f"{x:.3g}"
    return str(x)


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def ledger_markdown(paper: Optional[str] = None, claims: Sequence[Dict] = None) -> str:
    """The ledger as Markdown: for each paper (or one), a bold line per section and a table with the
    claim, where it is in the paper, the paper's value, ours (values, scale, evidence) and the status.
    No headings (the output of a notebook cell should not add sections to the page)."""
    claims = CLAIMS if claims is None else claims
    titles = {"A": "Paper A: PaTH attention (Yang et al.)",
              "B": "Paper B: why accumulated transforms extrapolate (Godavarti)"}
    parts = []
    for pp in ("A", "B"):
        if paper is not None and pp != paper:
            continue
        sub = [c for c in claims if c["paper"] == pp]
        if not sub:
            continue
        if paper is None:
            parts.append(f"**{titles[pp]}**")
        for section in dict.fromkeys(c["section"] for c in sub):
            n = sum(1 for c in sub if c["section"] == section)
            parts.append(f"**{section}** ({n} claim{'s' if n != 1 else ''})")
            rows = ["| claim | where | paper | ours | status |", "|---|---|---|---|---|"]
            for c in (c for c in sub if c["section"] == section):
                ours = c.get("ours")
                if ours is None:
                    o = "-"
                else:
                    vals = "; ".join(f"{k}: {format_value(v)}" for k, v in (ours.get("values") or {}).items())
                    o = (vals + ". " if vals else "") + ours["scale"] + ". Evidence: " + ", ".join(
                        f"`{e}`" for e in ours["evidence"])
                st = f"**{c['status']}**" + (f": {c['reason']}" if c.get("reason") else "")
                rows.append("| " + " | ".join(_cell(x) for x in (c["claim"], c["where"], c["paper_value"], o, st))
                            + " |")
            parts.append("\n".join(rows))
    return "\n\n".join(parts)


def counts_markdown(claims: Sequence[Dict] = None) -> str:
    """A Markdown table of the number of claims per status, per paper and in all."""
    claims = CLAIMS if claims is None else claims
    ca, cb, call = counts([c for c in claims if c["paper"] == "A"]), counts([c for c in claims if c["paper"] == "B"]), \
        counts(claims)
    rows = ["| status | paper A | paper B | all |", "|---|---|---|---|"]
    for s in STATUSES:
        rows.append(f"| {s} | {ca[s]} | {cb[s]} | {call[s]} |")
    rows.append(f"| **all** | {sum(ca.values())} | {sum(cb.values())} | {sum(call.values())} |")
    return "\n".join(rows)


def pending(claims: Sequence[Dict] = None) -> Dict[str, List[str]]:
    """Claim ids waiting for a new run, by the stable record name that will decide them."""
    claims = CLAIMS if claims is None else claims
    out: Dict[str, List[str]] = {}
    for c in claims:
        if c.get("awaits"):
            out.setdefault(c["awaits"], []).append(c["id"])
    return out
