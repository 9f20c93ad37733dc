r"""The ledger of the two papers' claims and where this project stands on each.

Paper A: Yang et al. 2025, *PaTH Attention: Position Encoding via Accumulating Householder
Transformations*. Paper B: Godavarti 2026, *Why Do Accumulated Transformations Extrapolate?*

Every entry of :data:`CLAIMS` is a dict:

* ``id``: a short stable name; ``paper``: ``"A"`` or ``"B"``; ``section``: the group it belongs to
  (the ledger page has one section per paper and group); ``where``: where in the paper;
* ``claim``: the claim in one sentence, Markdown with the formulas in ``$...$``; ``paper_value``: the
  paper's number(s) or statement, as the paper's (never ours);
* ``ours``: None, or ``{"scale": what we ran, "evidence": [repository paths], "values": {label: {"select":
  [...], "value": snapshot, "format": "percent" | "float" | "int" | "text"}}}``. ``evidence`` names a
  recorded result (JSON with provenance, under ``results/`` or ``benchmarks/results/``) or, for the
  constructions and the stylized simulations, the chapter whose cells assert the claim at every build
  and the test file that checks it. ``select`` is a path into the record (see :func:`value_at`); ``value``
  is its value when the ledger was written (:func:`check_snapshots` checks they still agree);
* ``status``: one of :data:`STATUSES`; ``reason``: why (required unless reproduced), a text or a function
  of the claim's first record (:func:`reason_text`), so that its numbers follow the record;
* ``tests``: for a trained comparison or a timing, the tests that decide it (built by ``_t`` and
  ``_speed``, evaluated by :mod:`path_lib.ledger.evidence`). Each has a role: the **named** tests decide
  the status, **preconditions** must pass first, **supporting** tests are shown beside them. A test over
  seeds takes the paired difference of its two sides seed by seed in the paper's direction and the exact
  sign-flip p-value (exact under the null that each seed's difference is symmetric about zero); it holds
  only with at least :data:`MIN_SEEDS` seeds and ``p <= LEVEL`` (1/32). Most tests name a **control**:
  the same test on a model without the effect, which must fail; when it passes, the test cannot fail at
  this scale and is labelled certain. :func:`check_statistics` recomputes every status and kind of test
  from the named tests (:func:`path_lib.ledger.evidence.decide`) and reports where the ledger differs;
* ``test``: one of :data:`TEST_KINDS`; ``certain_why`` when certain and without tests;
* ``decide`` (undecided claims): what run would decide it, a function ``(record, rates)`` of the claim's
  first record and the step rates measured alone on the GPU (:func:`measured_rates`), with its cost;
  an undecided trained comparison without one gets the cost of the missing seeds (:func:`decide_text`);
* ``awaits`` (optional): the stable record name (``path_lib.records.RECORDS``) of the run that will
  decide an undecided claim.

The records the entries point to are kept under ``results/*/history/``, so that the pointers stay valid
when a new run replaces a current record; a record with more seeds is read as it is (every test reads
whatever seeds its record holds).
"""
from __future__ import annotations

import json
import math
from collections import Counter, OrderedDict
from functools import partial
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from ..validation import check_choice, check_mapping, check_number, check_path, check_str
from . import evidence as E, stats
from .evidence import LEVEL, MIN_SEEDS, value_at

__all__ = ["STATUSES", "TEST_KINDS", "LEVEL", "MIN_SEEDS", "CLAIMS", "REQUIRES_EVIDENCE", "PAPERS", "value_at",
           "load_evidence", "measured_rates", "validate", "check_snapshots", "check_statistics", "decided",
           "reason_text", "decide_text", "test_results", "counts", "test_counts", "counting_sentence",
           "counts_markdown", "section_markdown", "sections", "open_claims", "pending", "format_value",
           "test_line", "claim_by_id"]

STATUSES = ("reproduced", "not reproduced", "undecided", "quoted only", "not attempted")
#: statuses that rest on something we ran: they must name evidence that exists
REQUIRES_EVIDENCE = ("reproduced", "not reproduced", "undecided")
#: what a claim's outcome tells at this scale: a real test (it could have gone either way), an outcome
#: that was certain (a theorem checked numerically, a test its control passes too), or nothing run that decides
TEST_KINDS = ("real test", "certain at this scale", "untested")
# how a ledger value is shown (format_value)
_VALUE_FORMATS = ("percent", "float", "int", "text")
#: the two papers: bibliography key and title as the ledger page shows them
PAPERS = {"A": ("yang2025path", "Paper A: PaTH attention"),
          "B": ("godavarti2026extrapolate", "Paper B: why accumulated transforms extrapolate")}

_A5 = "results/synthetic/history/a5_layers_2026-12-01.json"
_MQ = "results/synthetic/history/mqrar_2026-12-01.json"
_LM_EQ = "results/lm/history/lm_full_2026-12-02_equal.json"
_FF_EQ = "results/synthetic/flip_flop.json"
_FF_DEEP = "results/synthetic/flip_flop_L2d128.json"
_BENCH = "benchmarks/results/bench_path.json"
_TIMING = ("results/calibration/timing_lm_single.json", "results/calibration/timing_tasks_single.json")
_CH5 = "book/part2/05_expressivity.ipynb"
_CH4 = "book/part1/04_path_attention.ipynb"
_CH11 = "book/part4/11_extrapolation_theory.ipynb"
_CONV = "results/lm/history/conversion_2026-12-02.json"
_CONV_SCALE = ("a byte-level TinyLM teacher (4 layers x 256 wide, 4 heads, RoPE) trained 1,500 steps at 256 bytes, "
               "then converted: 100 steps distilling each layer's attention output (MSE), 200 steps distilling "
               "the output distribution (KL); every other arm the same 300 further steps on the same batches, "
               "3 seeds")
_CONV_CLOSE = ("PaTH converted: after both stages its loss at the training length is within 2% of the teacher's, "
               "in every seed")
_CONV_LONG = "PaTH converted degrades less than RoPE continued at 16x the training length, in every seed"
_CONV_SCRATCH = "converted PaTH's loss at the training length is below PaTH from scratch's (equal steps), in every seed"

_LM_EQ_SCALE = ("byte-level TinyLM, 4 layers x 256 wide, 4 heads, trained at 256 bytes on Python's standard "
                "library; every model 500 steps of 64 x 256 bytes (warm-up 40, cosine to 0.1x), the same batches "
                "per seed, 3 seeds; evaluated on one fixed set of 8,192 bytes")
_FF_EQ_SCALE = ("the paper's size: 1 layer, 2 heads, width 64, length 512, batch 128; every model 1,500 steps on "
                "the same batches, 5 seeds (seeds 0-2 on an H200, 3-4 on an H100, each seed's models on one GPU); "
                "about 200,000 reads per in-distribution and dense test, $10^6$ sparse reads")
_FF_DEEP_SCALE = ("2 layers, 2 heads, width 128 (deeper and wider than the paper's models, because our one-layer "
                  "RoPE does not learn the task in distribution), otherwise as at the paper's size: length 512, "
                  "batch 128, 1,500 steps on the same batches, 5 seeds on an H100")


def _v(select, value, fmt="float"):
    return {"select": list(select), "value": value, "format": fmt}


_lm = E._lm    # one side of a test: (rows, model, path), see path_lib.ledger.evidence
_ff = E._ff


def _c(what, *, a=None, b=None):
    """A control: the test again with side ``a`` and/or ``b`` replaced (a model without the effect);
    ``what`` says which model and why it must fail."""
    out = {"what": what}
    if a is not None:
        out["a"] = a
    if b is not None:
        out["b"] = b
    return out


def _t(label, a, b, paper, *, margin=None, shift=0.0, relative=False, certain=None, control=None, role="named",
       points=None):
    """A test over seeds: the difference ``a - b`` per seed (``a / b - 1`` if ``relative``), minus
    ``shift``, is above zero (``paper`` ``">"``), below it (``"<"``) or inside ``margin`` (``"within"``);
    ``b`` is a side or a number. ``certain``: why the outcome was certain at this scale, if it was;
    ``control``: see :func:`_c`; ``role``: one of :data:`path_lib.ledger.evidence.ROLES`; ``points``: the
    sides are shares (error rates, attention mass), shown in percentage points (default: when a side reads
    flip-flop errors, far mass or passkey matches). Every test is stated in the paper's direction, so that
    "holds" means "agrees with the paper"."""
    if points is None:
        points = isinstance(a, tuple) and any(k in a[2] for k in (".error", "far_mass", "passkey"))
    return {"label": label, "a": a, "b": b, "paper": paper, "margin": margin, "shift": shift,
            "relative": relative, "certain": certain, "control": control, "role": role, "points": points}


def _speed(label, faster, slower, role="named"):
    """A timing test: method ``faster`` takes less time than ``slower``, shape by shape (no seeds)."""
    return {"kind": "speed", "label": label, "faster": faster, "slower": slower, "role": role}


_LOCAL = "a model that attends to nothing beyond a few hundred bytes cannot change with the context"
_THEOREM = "a proof checked numerically: the outcome follows from the mathematics, not from a run"
_NOPE = "NoPE, without any position encoding"
_SOLVE = "PaTH, which solves the task"


def _ff_fails(model: str) -> List[Dict]:
    """A-ff-rope, -fox, -sba: learned in distribution (precondition), then sparse error above it."""
    name = E._DISPLAY[model]
    return [_t(f"{name} learned the task in distribution: error below 15%", _ff(model, "id"), 0.15, "<",
               role="precondition"),
            _t(f"{name}'s sparse error above its in-distribution error", _ff(model, "ood_sparse"), _ff(model, "id"),
               ">", control=_c(_SOLVE, a=_ff("path", "ood_sparse"), b=_ff("path", "id")))]


def _ratio(model, mult):
    return _lm(model, f"ratio_{mult}x")


def _flat(model, mult, role="named", control=None):
    return _t(f"{model}'s ratio at {mult}x within 5% of 1", _ratio(model, mult), 1.0, "within", margin=(-0.05, 0.05),
              role=role, control=control or _c(_NOPE, a=_ratio("NoPE", mult)))


CLAIMS: List[Dict] = [
    # ------------------------------------------------------------------ paper A: expressivity
    {"id": "A-tc0", "paper": "A", "section": "Expressivity", "where": "Section 2",
     "claim": r"Transformers with fixed (data-independent) position encodings, RoPE included, and $O(\log n)$ "
              r"precision lie in uniform $\mathsf{TC}^0$, so they cannot solve $\mathsf{NC}^1$-complete problems "
              r"unless $\mathsf{TC}^0 = \mathsf{NC}^1$.",
     "paper_value": r"a theorem resting on $\mathsf{TC}^0 \ne \mathsf{NC}^1$",
     "ours": {"scale": "explained in chapter 5; the RoPE version of the construction is shown to see only the "
                       "distances, not the swaps (checked numerically)",
              "evidence": [_CH5, "tests/test_constructions.py"], "values": {}},
     "status": "quoted only", "test": "untested",
     "reason": "a complexity-class separation cannot be checked numerically; we check only that the PaTH "
               "recipe has no RoPE counterpart"},
    {"id": "A-thm2.1", "paper": "A", "section": "Expressivity", "where": "Section 2, Theorem 2.1",
     "claim": r"A one-layer PaTH transformer with two heads and $O(\log n)$ precision solves an "
              r"$\mathsf{NC}^1$-complete problem: whether $n$ swaps of 5 elements compose to the identity.",
     "paper_value": "a construction (proof)",
     "ours": {"scale": "the construction built by hand and checked on random, identity-composing and adversarial "
                       "swap sequences (in float64, and in float32 at $n = 1{,}000$); chapter 5 runs it to "
                       "$n = 4{,}000$ swaps and measures the float32 rounding drift",
              "evidence": [_CH5, "tests/test_constructions.py"], "values": {}},
     "status": "reproduced", "reason": "", "test": "certain at this scale", "certain_why": _THEOREM},
    {"id": "A-thmA.1", "paper": "A", "section": "Expressivity", "where": "Appendix A, Theorem A.1",
     "claim": r"A two-layer PaTH transformer solves flip-flop language modelling {cite:p}`liu2023flipflop` with "
              r"accuracy above $1 - 1/n^{100}$.",
     "paper_value": "a construction (proof)",
     "ours": {"scale": "a hand-built two-layer PaTH network reads the last write exactly at length 512 on the "
                       "in-distribution, sparse and dense test sets (float64 and float32)",
              "evidence": [_CH5, "tests/test_constructions.py"], "values": {}},
     "status": "reproduced", "reason": "", "test": "certain at this scale", "certain_why": _THEOREM},
    {"id": "A-deltanet", "paper": "A", "section": "Expressivity", "where": "Section 2 (relation to DeltaNet)",
     "claim": r"Without the softmax, PaTH is the linear recurrence $S_t = S_{t-1} H_t + v_t k_t^\top$, whose "
              r"output is $o_t = \sum_{j \le t} v_j k_j^\top H_{j+1} \cdots H_t\, q_t$; with $w = k$ it is "
              r"DeltaNet's delta rule {cite:p}`yang2024deltanet`.",
     "paper_value": "an identity",
     "ours": {"scale": "the recurrence run against the definition, float64", "evidence": [_CH4], "values": {}},
     "status": "reproduced", "reason": "", "test": "certain at this scale", "certain_why": _THEOREM},
    # ------------------------------------------------------------------ paper A: synthetic tasks
    {"id": "A-ff-path", "paper": "A", "section": "Synthetic tasks", "where": "flip-flop table",
     "claim": "One-layer PaTH (2 heads, width 64) solves flip-flop: its error in distribution, on sparse "
              "strings and on dense strings is about zero.",
     "paper_value": "0% / 0.0001% / 0%",
     "ours": {"scale": _FF_EQ_SCALE, "evidence": [_FF_EQ],
              "values": {"in distribution": _v(["summary", "path", "id_error", "mean"], 0.0, "percent"),
                         "sparse": _v(["summary", "path", "ood_sparse_error", "mean"], 4.198526317256146e-06,
                                      "percent"),
                         "dense": _v(["summary", "path", "ood_dense_error", "mean"], 0.0, "percent")}},
     "tests": [_t("PaTH's sparse error below 0.1%", _ff("path", "ood_sparse"), 0.001, "<",
                  control=_c("FoX, which fails out of distribution", a=_ff("fox", "ood_sparse"))),
               _t("PaTH's in-distribution error below 0.1%", _ff("path", "id"), 0.001, "<",
                  control=_c("FoX", a=_ff("fox", "id"))),
               _t("PaTH's dense error below 0.1%", _ff("path", "ood_dense"), 0.001, "<",
                  control=_c("RoPE, which did not learn the task", a=_ff("rope", "ood_dense")))],
     "status": "reproduced", "test": "real test", "reason": E.reason_ff_path},
    {"id": "A-ff-rope", "paper": "A", "section": "Synthetic tasks", "where": "flip-flop table",
     "claim": "RoPE learns flip-flop in distribution but fails on sparse strings, longer gaps than it was "
              "trained on.",
     "paper_value": "6.9% / 40.3% / 0.01% (in distribution / sparse / dense)",
     "ours": {"scale": _FF_DEEP_SCALE, "evidence": [_FF_DEEP],
              "values": {"in distribution": _v(["summary", "rope", "id_error", "mean"], 0.03855807585276281,
                                               "percent"),
                         "sparse": _v(["summary", "rope", "ood_sparse_error", "mean"], 0.28257341673072756, "percent"),
                         "dense": _v(["summary", "rope", "ood_dense_error", "mean"], 0.019090860788963982,
                                     "percent")}},
     "tests": _ff_fails("rope"),
     "status": "reproduced", "test": "real test", "reason": E.reason_ff_rope},
    {"id": "A-ff-fox", "paper": "A", "section": "Synthetic tasks", "where": "flip-flop table",
     "claim": "FoX {cite:p}`lin2025fox` learns flip-flop in distribution but fails on sparse strings.",
     "paper_value": "8.3% / 36.3% / 0% (in distribution / sparse / dense)",
     "ours": {"scale": _FF_EQ_SCALE, "evidence": [_FF_EQ],
              "values": {"in distribution": _v(["summary", "fox", "id_error", "mean"], 0.08690889858783171,
                                               "percent"),
                         "sparse": _v(["summary", "fox", "ood_sparse_error", "mean"], 0.36138275465311676, "percent"),
                         "dense": _v(["summary", "fox", "ood_dense_error", "mean"], 2.8981167071506774e-06,
                                     "percent")}},
     "tests": _ff_fails("fox"),
     "status": "reproduced", "test": "real test", "reason": partial(E.reason_ff_fails, "fox")},
    {"id": "A-ff-sba", "paper": "A", "section": "Synthetic tasks", "where": "flip-flop table",
     "claim": "Stick-breaking attention (SBA) {cite:p}`tan2025sba` learns flip-flop in distribution but fails "
              "on sparse strings.",
     "paper_value": "9.6% / 38.9% / 0% (in distribution / sparse / dense)",
     "ours": {"scale": _FF_EQ_SCALE, "evidence": [_FF_EQ],
              "values": {"in distribution": _v(["summary", "sba", "id_error", "mean"], 0.10543464829249727, "percent"),
                         "sparse": _v(["summary", "sba", "ood_sparse_error", "mean"], 0.4047315392297303, "percent"),
                         "dense": _v(["summary", "sba", "ood_dense_error", "mean"], 1.7388700242970678e-05,
                                     "percent")}},
     "tests": _ff_fails("sba"),
     "status": "reproduced", "test": "real test", "reason": partial(E.reason_ff_fails, "sba")},
    {"id": "A-a5", "paper": "A", "section": "Synthetic tasks", "where": "A5 word problem figure",
     "claim": r"On the $A_5$ word problem PaTH needs fewer layers than RoPE, SBA and FoX to reach 90% accuracy.",
     "paper_value": "fewer layers (exact counts only in the paper's figure)",
     "ours": {"scale": "length 16, width 128, 1-4 layers, one seed, each run fitted into a fixed time (1,156 to "
                       "8,283 steps depending on model and depth); no SBA",
              "evidence": [_A5],
              "values": {"fewest layers, PaTH": _v(["fewest_layers_90", "path"], None, "text"),
                         "fewest layers, RoPE": _v(["fewest_layers_90", "rope"], None, "text")}},
     "status": "undecided", "reason": E.reason_a5, "awaits": "a5", "test": "untested", "decide": E.decide_a5},
    {"id": "A-mqrar", "paper": "A", "section": "Synthetic tasks", "where": "Figure 2",
     "claim": "On multi-query repeated associative recall with $N$ steps back (MQRAR-$N$; 2 layers, width 256, "
              "2 heads, 32 pairs, length 768) PaTH is strong for $N < 4$ and degrades at $N = 4$.",
     "paper_value": "strong for $N < 4$, degrades at $N = 4$",
     "ours": {"scale": "the paper's sizes; one seed; PaTH about 115 steps, RoPE about 550, each run fitted into "
                       "the same fixed time",
              "evidence": [_MQ],
              "values": {"PaTH, N = 1": _v(["table", "path", "1", "accuracy"], 0.07068014705882353, "percent"),
                         "RoPE, N = 1": _v(["table", "rope", "1", "accuracy"], 0.08792892156862746, "percent")}},
     "status": "undecided", "reason": E.reason_mqrar, "awaits": "mqrar", "test": "untested",
     "decide": E.decide_mqrar},
    # ------------------------------------------------------------------ paper A: language modelling
    {"id": "A-t2-rope", "paper": "A", "section": "Language modelling at 760M parameters", "where": "Table 2",
     "claim": "A 760M-parameter RoPE model trained on 50B tokens reaches these WikiText and LAMBADA perplexities "
              "and LAMBADA, PIQA, HellaSwag, WinoGrande, ARC-e and ARC-c accuracies.",
     "paper_value": "19.01, 19.77 / 40.4, 70.2, 50.3, 54.9, 67.2, 33.3, average 52.7", "ours": None,
     "status": "not attempted", "test": "untested",
     "reason": "760M parameters x 50B tokens (8 H100 for 2-3 days) is far beyond the minutes of one GPU this "
               "book's runs use"},
    {"id": "A-t2-fox", "paper": "A", "section": "Language modelling at 760M parameters", "where": "Table 2",
     "claim": "The 760M FoX model on the same benchmarks.",
     "paper_value": "18.33, 18.28 / 41.7, 70.8, 50.9, 57.1, 65.7, 32.6, average 53.1", "ours": None,
     "status": "not attempted", "test": "untested", "reason": "760M parameters x 50B tokens, beyond our runs"},
    {"id": "A-t2-path", "paper": "A", "section": "Language modelling at 760M parameters", "where": "Table 2",
     "claim": "The 760M PaTH model on the same benchmarks.",
     "paper_value": "18.03, 16.79 / 44.0, 70.5, 51.5, 56.0, 68.9, 34.4, average 54.2", "ours": None,
     "status": "not attempted", "test": "untested", "reason": "760M parameters x 50B tokens, beyond our runs"},
    {"id": "A-t2-pathfox", "paper": "A", "section": "Language modelling at 760M parameters", "where": "Table 2",
     "claim": "The 760M PaTH-FoX model on the same benchmarks.",
     "paper_value": "17.35, 16.23 / 44.1, 70.8, 52.2, 57.1, 67.3, 33.9, average 54.2", "ours": None,
     "status": "not attempted", "test": "untested", "reason": "760M parameters x 50B tokens, beyond our runs"},
    {"id": "A-t2-order", "paper": "A", "section": "Language modelling at 760M parameters", "where": "Table 2",
     "claim": "At the training length the perplexities are ordered: RoPE worst, then FoX, PaTH, and PaTH-FoX best.",
     "paper_value": "WikiText perplexity 19.01 > 18.33 > 18.03 > 17.35",
     "ours": {"scale": _LM_EQ_SCALE + "; byte-level perplexity at the training length", "evidence": [_LM_EQ],
              "values": {"RoPE": _v(["summary", "RoPE", "ppl_1x", "mean"], 3.092908543283628),
                         "FoX": _v(["summary", "FoX", "ppl_1x", "mean"], 3.182581987212241),
                         "PaTH": _v(["summary", "PaTH", "ppl_1x", "mean"], 3.180577627795689),
                         "PaTH-FoX": _v(["summary", "PaTH-FoX", "ppl_1x", "mean"], 3.104285474641068)}},
     "tests": [_t(f"{a}'s perplexity above {b}'s", _lm(a, "ppl_1x"), _lm(b, "ppl_1x"), ">",
                  control=_c(f"{_NOPE}, in {b}'s place", b=_lm("NoPE", "ppl_1x")))
               for a, b in (("RoPE", "FoX"), ("FoX", "PaTH"), ("PaTH", "PaTH-FoX"))],
     "status": "not reproduced", "test": "real test", "reason": E.reason_t2_order, "decide": E.decide_t2_order},
    # ------------------------------------------------------------------ paper A: length extrapolation
    {"id": "A-ext-rope", "paper": "A", "section": "Length extrapolation and retrieval", "where": "Figure 3",
     "claim": "Trained at 4K tokens, RoPE fails just past its training length.",
     "paper_value": "fails just past 4K",
     "ours": {"scale": _LM_EQ_SCALE + "; the ratio of perplexities at length $L$ and at 256 bytes on the same "
                                      "target bytes", "evidence": [_LM_EQ],
              "values": {"ratio at 2x": _v(["summary", "RoPE", "ratio_2x", "mean"], 1.375976272030778),
                         "ratio at 4x": _v(["summary", "RoPE", "ratio_4x", "mean"], 3.0701264667207533)}},
     "tests": [_t("RoPE's ratio at 2x above 1.05", _ratio("RoPE", 2), 1.0, ">", shift=0.05,
                  control=_c("ALiBi, flat by construction", a=_ratio("ALiBi", 2)),
                  certain="past the training length RoPE meets rotation angles it was never trained on: its "
                          "rise there is the expected outcome at any scale"),
               _t("RoPE's ratio at 2x above NoPE's", _ratio("RoPE", 2), _ratio("NoPE", 2), ">", role="supporting",
                  control=_c("ALiBi in RoPE's place", a=_ratio("ALiBi", 2)))],
     "status": "undecided", "test": "certain at this scale", "reason": E.reason_ext_rope},
    {"id": "A-ext-path", "paper": "A", "section": "Length extrapolation and retrieval", "where": "Figure 3",
     "claim": "PaTH stays stable to about 32K tokens, 8 times its training length, then degrades (most on code).",
     "paper_value": "stable to about 8x, then degrades",
     "ours": {"scale": _LM_EQ_SCALE, "evidence": [_LM_EQ],
              "values": {"ratio at 4x": _v(["summary", "PaTH", "ratio_4x", "mean"], 1.0259035645918997),
                         "ratio at 8x": _v(["summary", "PaTH", "ratio_8x", "mean"], 1.192635489635501),
                         "ratio at 64x": _v(["summary", "PaTH", "ratio_64x", "mean"], 3.7433519629223455)}},
     "tests": [_flat("PaTH", 8),
               _flat("PaTH", 4, role="supporting"),
               _t("then degrades: PaTH's ratio at 64x above 1.05", _ratio("PaTH", 64), 1.0, ">", shift=0.05,
                  role="supporting", control=_c("ALiBi, flat by construction", a=_ratio("ALiBi", 64))),
               _t("PaTH's ratio at 64x below RoPE's", _ratio("PaTH", 64), _ratio("RoPE", 64), "<", role="supporting",
                  control=_c(f"{_NOPE}, in PaTH's place", a=_ratio("NoPE", 64)))],
     "status": "not reproduced", "test": "real test", "reason": E.reason_ext_path},
    {"id": "A-ext-gates", "paper": "A", "section": "Length extrapolation and retrieval", "where": "Figure 3",
     "claim": "FoX and PaTH-FoX stay stable to 64K tokens (16 times the training length), and PaTH-FoX has the "
              "lower perplexity.",
     "paper_value": "flat to 16x; PaTH-FoX below FoX",
     "ours": {"scale": _LM_EQ_SCALE, "evidence": [_LM_EQ],
              "values": {"FoX ratio at 64x": _v(["summary", "FoX", "ratio_64x", "mean"], 0.9781803093493654),
                         "PaTH-FoX ratio at 64x": _v(["summary", "PaTH-FoX", "ratio_64x", "mean"], 0.9792661955636645),
                         "FoX perplexity": _v(["summary", "FoX", "ppl_1x", "mean"], 3.182581987212241),
                         "PaTH-FoX perplexity": _v(["summary", "PaTH-FoX", "ppl_1x", "mean"], 3.104285474641068)}},
     "tests": [_t(f"{m}'s ratio at 64x below 1.05", _ratio(m, 64), 1.0, "<", shift=0.05, certain=_LOCAL,
                  control=_c("RoPE in its place", a=_ratio("RoPE", 64))) for m in ("FoX", "PaTH-FoX")]
     + [_t("PaTH-FoX's perplexity below FoX's at the training length", _lm("PaTH-FoX", "ppl_1x"), _lm("FoX", "ppl_1x"),
           "<", control=_c(f"{_NOPE}, in PaTH-FoX's place", a=_lm("NoPE", "ppl_1x")))],
     "status": "undecided", "test": "real test", "reason": E.reason_ext_gates},
    {"id": "A-ruler", "paper": "A", "section": "Length extrapolation and retrieval", "where": "Table 3",
     "claim": "On RULER {cite:p}`hsieh2024ruler` at 8K: RoPE 1.3, FoX 29.5, PaTH 34.8, PaTH-FoX 34.0; at 16K "
              "PaTH 18.7, PaTH-FoX 22.6.",
     "paper_value": "8K: 1.3 / 29.5 / 34.8 / 34.0; 16K: 18.7 / 22.6", "ours": None, "status": "not attempted",
     "test": "untested",
     "reason": "RULER needs models trained at 4K that follow its prompts; we run only a single-needle passkey "
               "probe in code, RULER's simplest task, on tiny byte models"},
    {"id": "A-phonebook", "paper": "A", "section": "Length extrapolation and retrieval", "where": "Table 3",
     "claim": "On PhoneBook lookup PaTH scores 20.8 and PaTH-FoX 93.8 at 4K; at 8K 0 and 66.6.",
     "paper_value": "4K: 20.8 vs 93.8; 8K: 0 vs 66.6", "ours": None, "status": "not attempted", "test": "untested",
     "reason": "needs 760M-scale models trained at 4K, beyond our runs"},
    {"id": "A-retrieval", "paper": "A", "section": "Length extrapolation and retrieval",
     "where": "section on long context",
     "claim": "A good perplexity on long texts is not the same as reliable retrieval from them.",
     "paper_value": "qualitative",
     "ours": {"scale": _LM_EQ_SCALE + "; passkey exact match on 32 examples at 1x to 16x", "evidence": [_LM_EQ],
              "values": {"ALiBi passkey at 1x": _v(["summary", "ALiBi", "passkey_1x", "mean"], 0.0, "percent"),
                         "PaTH passkey at 1x": _v(["summary", "PaTH", "passkey_1x", "mean"], 0.0, "percent"),
                         "ALiBi ratio at 64x": _v(["summary", "ALiBi", "ratio_64x", "mean"], 0.9507891860009545)}},
     "tests": [_t("PaTH retrieves the passkey at the training length: exact match above 0", _lm("PaTH", "passkey_1x"),
                  0.0, ">", role="precondition"),
               _t("ALiBi, flat in perplexity, retrieves less at 16x than at 1x", _lm("ALiBi", "passkey_16x"),
                  _lm("ALiBi", "passkey_1x"), "<", control=_c("PaTH, which degrades in perplexity, in ALiBi's place",
                                                               a=_lm("PaTH", "passkey_16x"), b=_lm("PaTH", "passkey_1x")))],
     "status": "undecided", "test": "untested", "decide": E.decide_retrieval, "reason": E.reason_retrieval},
    # ------------------------------------------------------------------ paper A: conversion
    {"id": "A-conv-smollm", "paper": "A", "section": "Converting trained RoPE models", "where": "conversion experiments",
     "claim": "A trained RoPE model (SmolLM2-1.7B before its decay stage) converted to PaTH by distillation "
              "(MSE on attention outputs, 100M tokens; KL on outputs, 3B tokens) and 21B further tokens scores "
              "HumanEval 25.6 against 23.1 and MBPP+ 51.3 against 47.1.",
     "paper_value": "HumanEval 25.6 vs 23.1; MBPP+ 51.3 vs 47.1", "ours": None, "status": "not attempted",
     "test": "untested", "reason": "needs a pretrained 1.7B model and 21B tokens of training, beyond our runs"},
    {"id": "A-conv-toy", "paper": "A", "section": "Converting trained RoPE models", "where": "conversion recipe",
     "claim": "A trained RoPE model becomes a PaTH model with little extra training: its shared weights kept, "
              "attention outputs distilled (MSE) layer by layer, then output distributions (KL).",
     "paper_value": "the recipe (numbers only at 1.7B and 7B)",
     "ours": {"scale": _CONV_SCALE, "evidence": [_CONV, "book/part4/12b_conversion.ipynb"],
              "values": {"within 2% of the teacher after both stages": _v(["claims", _CONV_CLOSE], True, "text"),
                         "degrades less than RoPE continued at 16x": _v(["claims", _CONV_LONG], True, "text"),
                         "below PaTH from scratch at equal steps": _v(["claims", _CONV_SCRATCH], False, "text"),
                         "PaTH converted, ratio at 16x (seed 0)": _v(
                             ["records", {"model": "PaTH converted", "seed": 0}, "metrics", "ratio_16x"],
                             1.0271663973256682),
                         "RoPE continued, ratio at 16x (seed 0)": _v(
                             ["records", {"model": "RoPE continued", "seed": 0}, "metrics", "ratio_16x"],
                             13.237747715753358)}},
     "tests": [_t("converted PaTH's loss within 2% of the teacher's", _lm("PaTH converted", "loss_id"),
                  _lm("RoPE teacher", "loss_id"), "<", relative=True, shift=0.02,
                  control=_c("the converted model before any training", a=_lm("PaTH converted", "converted_loss_id"))),
               _t("converted PaTH degrades less than RoPE continued at 16x", _lm("PaTH converted", "ratio_16x"),
                  _lm("RoPE continued", "ratio_16x"), "<", role="supporting",
                  control=_c("PaTH trained from scratch, not converted", a=_lm("PaTH scratch", "ratio_16x"))),
               _t("converted PaTH's loss below RoPE continued's (equal steps)", _lm("PaTH converted", "loss_id"),
                  _lm("RoPE continued", "loss_id"), "<", relative=True, role="supporting",
                  control=_c("the converted model before any training", a=_lm("PaTH converted", "converted_loss_id")))],
     "status": "undecided", "test": "real test", "reason": E.reason_conv_toy},
    {"id": "A-conv-qwen", "paper": "A", "section": "Converting trained RoPE models", "where": "Table 5",
     "claim": r"Qwen2.5-7B-Instruct converted without the extra stage: GSM8K $80.29 \to 80.67$, MATH "
              r"$69.10 \to 65.38$, HumanEval $82.32 \to 77.44$ (an improvement is not guaranteed).",
     "paper_value": "GSM8K +0.38, MATH -3.72, HumanEval -4.88", "ours": None, "status": "not attempted",
     "test": "untested", "reason": "needs a 7B model and its evaluation suites, beyond our runs"},
    # ------------------------------------------------------------------ paper A: speed
    {"id": "A-speed-sdpa", "paper": "A", "section": "Speed", "where": "Figure 1",
     "claim": "PaTH is slower than RoPE attention with FlashAttention {cite:p}`dao2023flashattention2` (one "
              "H100, batch 32, 32 heads, head dimension 64).",
     "paper_value": "slower",
     "ours": {"scale": "one H200, bf16, 32 heads, head dimension 64 and 128, $T$ from 1K to 64K with $BT$ = 32K "
                       "tokens, forward and forward + backward, median time; values at $D = 64$, $T = 4096$, forward",
              "evidence": [_BENCH],
              "values": {"SDPA, FlashAttention backend (ms)": _v(
                             ["rows", {"D": 64, "T": 4096, "method": "sdpa_flash", "mode": "fwd"}, "ms"], 1.9187),
                         "SDPA, default dispatch: cuDNN (ms)": _v(
                             ["rows", {"D": 64, "T": 4096, "method": "sdpa", "mode": "fwd"}, "ms"], 1.2758),
                         "our PaTH kernel (ms)": _v(
                             ["rows", {"D": 64, "T": 4096, "method": "ours_path", "mode": "fwd"}, "ms"], 3.6224),
                         "fla's PaTH kernel (ms)": _v(
                             ["rows", {"D": 64, "T": 4096, "method": "fla_path", "mode": "fwd"}, "ms"], 10.6375)}},
     "tests": [_speed("fla's PaTH kernel slower than SDPA's FlashAttention backend", "sdpa_flash", "fla_path"),
               _speed("our PaTH kernel slower than SDPA's FlashAttention backend", "sdpa_flash", "ours_path",
                      role="supporting"),
               _speed("our PaTH kernel slower than SDPA's default dispatch", "sdpa", "ours_path", role="supporting")],
     "status": "reproduced", "reason": E.reason_speed_sdpa, "test": "real test"},
    {"id": "A-speed-fox", "paper": "A", "section": "Speed", "where": "Figure 1",
     "claim": "PaTH is faster than FoX (the authors' kernels at the time, from the flash-linear-attention "
              "library {cite:p}`yang2024fla`).",
     "paper_value": "faster",
     "ours": {"scale": "one H200, bf16, 32 heads, head dimension 64 and 128, $T$ from 1K to 64K with $BT$ = 32K "
                       "tokens, forward and forward + backward, median time; fla-core 0.6.0; values at $D = 64$, "
                       "$T = 4096$, forward",
              "evidence": [_BENCH],
              "values": {"fla's FoX kernel (ms)": _v(
                             ["rows", {"D": 64, "T": 4096, "method": "fla_fox", "mode": "fwd"}, "ms"], 2.4772),
                         "fla's PaTH kernel (ms)": _v(
                             ["rows", {"D": 64, "T": 4096, "method": "fla_path", "mode": "fwd"}, "ms"], 10.6375),
                         "our PaTH kernel (ms)": _v(
                             ["rows", {"D": 64, "T": 4096, "method": "ours_path", "mode": "fwd"}, "ms"], 3.6224)}},
     "tests": [_speed("fla's PaTH kernel faster than fla's FoX", "fla_path", "fla_fox"),
               _speed("our PaTH kernel faster than fla's FoX", "ours_path", "fla_fox", role="supporting")],
     "status": "not reproduced", "test": "real test", "reason": E.reason_speed_fox},
    # ------------------------------------------------------------------ paper B: analysis
    {"id": "B-gap-mixing", "paper": "B", "section": "Analysis in a stylized model", "where": "score-side decoherence",
     "claim": r"Random orthogonal steps with a spectral gap, $\|\mathbb{E}[M]\| < 1$, mix within a window that does "
              r"not depend on the context length: $\mathbb{E}[P_n] = \mathbb{E}[M]^n$ decays geometrically and the "
              r"products approach the Haar law.",
     "paper_value": "a theorem in a stylized single-layer model",
     "ours": {"scale": "Monte Carlo with error bars against closed forms (Haar, $SO(2)$ blocks, Householder steps), "
                       "and the Kolmogorov-Smirnov distance to the Haar law, $d = 8$",
              "evidence": [_CH11, "tests/test_theory.py"], "values": {}},
     "status": "reproduced", "reason": "", "test": "certain at this scale", "certain_why": _THEOREM},
    {"id": "B-concentration", "paper": "B", "section": "Analysis in a stylized model", "where": "score-side decoherence",
     "claim": r"For Haar-random transport $P$ the score $q^\top P k$ concentrates at 0 with width "
              r"$\|q\|\,\|k\| / \sqrt{d}$ (Lévy's inequality; Hoeffding's for $SO(2)$ blocks): a score gap between "
              r"near and far routes.",
     "paper_value": "concentration bounds",
     "ours": {"scale": r"tails against both bounds and the $1/\sqrt{d}$ width, $d$ from 4 to 64",
              "evidence": [_CH11, "tests/test_theory.py"], "values": {}},
     "status": "reproduced", "reason": "", "test": "certain at this scale", "certain_why": _THEOREM},
    {"id": "B-rope-nogap", "paper": "B", "section": "Analysis in a stylized model", "where": "score-side decoherence",
     "claim": r"Fixed RoPE angles have no gap, $|\mathbb{E}\, e^{i\theta}| = 1$: the mean transport never decays.",
     "paper_value": "no gap",
     "ours": {"scale": "closed form and simulation", "evidence": [_CH11, "tests/test_theory.py"], "values": {}},
     "status": "reproduced", "reason": "", "test": "certain at this scale", "certain_why": _THEOREM},
    {"id": "B-farmass-bound", "paper": "B", "section": "Analysis in a stylized model", "where": "far-mass lower bound",
     "claim": r"With logits in $[-\lambda, \lambda]$ the attention mass on far tokens is at least "
              r"$M_L / (M_L + K e^{2\lambda})$, which tends to 1 as the context grows: rotation alone must "
              r"eventually fail.",
     "paper_value": "a theorem",
     "ours": {"scale": "the proof written out and checked in simulation at contexts from 64 to 65,536; the bound is "
                       "also evaluated row by row inside the trained models (chapter 12)",
              "evidence": [_CH11, "tests/test_theory.py", "tests/test_farmass.py"], "values": {}},
     "status": "reproduced", "reason": "", "test": "certain at this scale", "certain_why": _THEOREM},
    {"id": "B-farmass-trained", "paper": "B", "section": "Analysis in a stylized model", "where": "far-mass lower bound",
     "claim": "In trained models, rotation-only attention puts more and more mass on far tokens as the context "
              "grows, while a distance bias (ALiBi {cite:p}`press2022alibi`) or a forget gate keeps it bounded.",
     "paper_value": "the mechanism behind the experiments (not a measured table)",
     "ours": {"scale": _LM_EQ_SCALE + "; attention mass beyond 128 tokens of the last query, mean over layers, "
                                      "heads and 8 windows", "evidence": [_LM_EQ],
              "values": {"RoPE at 1x": _v(["summary", "RoPE", "far_mass_1x", "mean"], 0.08106688674691635),
                         "RoPE at 64x": _v(["summary", "RoPE", "far_mass_64x", "mean"], 0.9587522040819749),
                         "PaTH at 1x": _v(["summary", "PaTH", "far_mass_1x", "mean"], 0.1818942015706734),
                         "PaTH at 64x": _v(["summary", "PaTH", "far_mass_64x", "mean"], 0.8335546211026402),
                         "ALiBi at 1x": _v(["summary", "ALiBi", "far_mass_1x", "mean"], 0.12072051478550087),
                         "ALiBi at 64x": _v(["summary", "ALiBi", "far_mass_64x", "mean"], 0.1813111501409539),
                         "PaTH-FoX at 64x": _v(["summary", "PaTH-FoX", "far_mass_64x", "mean"],
                                               0.00046538431438064495)}},
     "tests": [_t(f"{m}'s far mass rises by more than 10 percentage points from 1x to 64x", _lm(m, "far_mass_64x"),
                  _lm(m, "far_mass_1x"), ">", shift=0.1,
                  control=_c(f"{c}, in {m}'s place", a=_lm(c, "far_mass_64x"), b=_lm(c, "far_mass_1x")))
               for m, c in (("PaTH", "ALiBi"), ("RoPE", "PaTH-FoX"))]
     + [_t("ALiBi's far mass at 64x below PaTH's", _lm("ALiBi", "far_mass_64x"), _lm("PaTH", "far_mass_64x"), "<",
           certain="ALiBi's distance bias bounds its far mass at every length (chapter 11)",
           control=_c("RoPE in ALiBi's place", a=_lm("RoPE", "far_mass_64x")))],
     "status": "undecided", "test": "real test", "reason": E.reason_farmass_trained},
    {"id": "B-bias-escape", "paper": "B", "section": "Analysis in a stylized model", "where": "far-mass lower bound",
     "claim": "An explicit distance bias (ALiBi) or a forget gate (FoX) bounds the far mass at every context "
              "length, which is why they stay flat.",
     "paper_value": "a proposition",
     "ours": {"scale": "an upper bound proved and checked in simulation at every context length",
              "evidence": [_CH11, "tests/test_theory.py"], "values": {}},
     "status": "reproduced", "reason": "", "test": "certain at this scale", "certain_why": _THEOREM},
    {"id": "B-value-side", "paper": "B", "section": "Analysis in a stylized model", "where": "value-side protection",
     "claim": r"Transporting the values along the route ($SO(2)$ blocks) makes the residual far contributions add "
              r"incoherently, which bounds their energy.",
     "paper_value": "a proposition",
     "ours": {"scale": "closed form of the far energy checked by Monte Carlo: $O(1/M)$ with transport, $O(1)$ "
                       "without", "evidence": [_CH11, "tests/test_theory.py"], "values": {}},
     "status": "reproduced", "reason": "", "test": "certain at this scale", "certain_why": _THEOREM},
    # ------------------------------------------------------------------ paper B: experiments
    {"id": "B-exp-8k", "paper": "B", "section": "Experiments: 16-layer models trained at 512 tokens",
     "where": "experiments",
     "claim": "At 8K tokens (16 times the training length) the perplexity ratio of random accumulated rotations "
              "is 1.60, against RoPE's 16.2.",
     "paper_value": "1.60 vs 16.2",
     "ours": {"scale": _LM_EQ_SCALE + "; ratio at 16x (4,096 bytes)", "evidence": [_LM_EQ],
              "values": {"TokRot-QK": _v(["summary", "TokRot-QK", "ratio_16x", "mean"], 1.2926410995213955),
                         "RoPE": _v(["summary", "RoPE", "ratio_16x", "mean"], 8.2825355259184)}},
     "tests": [_t("TokRot-QK's ratio at 16x at most 1.60, the paper's value", _ratio("TokRot-QK", 16), 1.60, "<",
                  control=_c(f"{_NOPE}, in TokRot-QK's place", a=_ratio("NoPE", 16))),
               _t("TokRot-QK's ratio at 16x below RoPE's", _ratio("TokRot-QK", 16), _ratio("RoPE", 16), "<",
                  role="supporting", control=_c(f"{_NOPE}, in TokRot-QK's place", a=_ratio("NoPE", 16))),
               _t("TokRot-QK's ratio at 16x below NoPE's", _ratio("TokRot-QK", 16), _ratio("NoPE", 16), "<",
                  role="supporting", control=_c("RoPE in TokRot-QK's place", a=_ratio("RoPE", 16)))],
     "status": "undecided", "test": "real test", "reason": E.reason_exp_8k},
    {"id": "B-exp-qkv", "paper": "B", "section": "Experiments: 16-layer models trained at 512 tokens",
     "where": "experiments",
     "claim": "At 65K tokens (128 times the training length) rotating queries, keys and values degrades by 1.59, "
              "rotating queries and keys only by 7.49.",
     "paper_value": "1.59 vs 7.49",
     "ours": {"scale": _LM_EQ_SCALE + "; ratio at 64x (16,384 bytes), our longest", "evidence": [_LM_EQ],
              "values": {"TokRot-QKV": _v(["summary", "TokRot-QKV", "ratio_64x", "mean"], 2.7375019890363164),
                         "TokRot-QK": _v(["summary", "TokRot-QK", "ratio_64x", "mean"], 2.2109253151241184)}},
     "tests": [_t("TokRot-QKV's ratio at 64x below TokRot-QK's", _ratio("TokRot-QKV", 64), _ratio("TokRot-QK", 64), "<",
                  control=_c(f"{_NOPE}, in TokRot-QKV's place", a=_ratio("NoPE", 64)))],
     "status": "not reproduced", "test": "real test",
     "reason": lambda rec: E.reason_ratio_below("TokRot-QKV", "TokRot-QK", 64, rec)
     + "; paper B reports its gap at 128x in 16-layer models, beyond our longest evaluation"},
    {"id": "B-exp-alibi", "paper": "B", "section": "Experiments: 16-layer models trained at 512 tokens",
     "where": "experiments",
     "claim": "ALiBi stays flat: its perplexity ratio at 65K tokens is 0.96.",
     "paper_value": "0.96",
     "ours": {"scale": _LM_EQ_SCALE + "; ratio at 64x", "evidence": [_LM_EQ],
              "values": {"ALiBi": _v(["summary", "ALiBi", "ratio_64x", "mean"], 0.9507891860009545)}},
     "tests": [_t("ALiBi's ratio at 64x below 1.05", _ratio("ALiBi", 64), 1.0, "<", shift=0.05,
                  control=_c("RoPE in ALiBi's place", a=_ratio("RoPE", 64)),
                  certain="ALiBi's distance bias confines attention to a window, so longer contexts add "
                          "nothing it reads (its ratio is the same from 8x on)")],
     "status": "undecided", "test": "certain at this scale", "reason": E.reason_exp_alibi},
    {"id": "B-exp-learned", "paper": "B", "section": "Experiments: 16-layer models trained at 512 tokens",
     "where": "experiments",
     "claim": "Learned token-dependent rotations stay near the training perplexity far past 512 tokens.",
     "paper_value": "a ratio near 1 far past the training length",
     "ours": {"scale": _LM_EQ_SCALE + "; ratio at 4x and 16x", "evidence": [_LM_EQ],
              "values": {"TokRot-learned at 4x": _v(["summary", "TokRot-learned", "ratio_4x", "mean"],
                                                    1.0178608007328789),
                         "TokRot-learned at 16x": _v(["summary", "TokRot-learned", "ratio_16x", "mean"],
                                                     1.3112631298420085)}},
     "tests": [_flat("TokRot-learned", 16),
               _flat("TokRot-learned", 4, role="supporting"),
               _t("TokRot-learned's ratio at 16x below RoPE's", _ratio("TokRot-learned", 16), _ratio("RoPE", 16), "<",
                  role="supporting", control=_c(f"{_NOPE}, in TokRot-learned's place", a=_ratio("NoPE", 16)))],
     "status": "not reproduced", "test": "real test", "reason": E.reason_exp_learned},
]


# ----------------------------------------------------------------------------------------------
# reading the records
# ----------------------------------------------------------------------------------------------

def _root(root=None) -> Path:
    """The repository folder records are read from: ``root`` (an existing folder) or this checkout."""
    if root is None:
        return Path(__file__).resolve().parents[2]
    root = check_path(root, "root", exists=True, kind="dir")
    if not root.is_dir():
        raise ValueError(f"root {str(root)!r} is not a folder")
    return root


#: what every claim holds (:func:`validate` reports a claim without them; the other functions refuse it)
_CLAIM_KEYS = ("id", "paper", "section", "where", "claim", "paper_value", "status", "test")


def _check_claim(c, name: str, keys=_CLAIM_KEYS) -> Dict:
    """``c``: a claim dict holding ``keys``, with a known status and test kind where ``keys`` name them; a
    TypeError / ValueError naming ``name`` otherwise."""
    check_mapping(c, name, keys=keys)
    if "status" in keys:
        check_choice(c["status"], f"{name}['status']", STATUSES)
    if "test" in keys:
        check_choice(c["test"], f"{name}['test']", TEST_KINDS)
    return c


def _claims(claims, *, keys=_CLAIM_KEYS) -> Sequence[Dict]:
    """``claims`` (None: :data:`CLAIMS`): a list of claim dicts holding ``keys``, with a known status and
    test kind; a TypeError / ValueError naming ``claims`` otherwise. ``keys=()``: dicts, nothing more
    (for :func:`validate`, which reports what they lack)."""
    if claims is None:
        return CLAIMS
    if not isinstance(claims, (list, tuple)):
        raise TypeError(f"claims must be a list of claim dicts (like CLAIMS), got {type(claims).__name__}")
    for i, c in enumerate(claims):
        _check_claim(c, f"claims[{i}]", keys)
    return claims


def load_evidence(path: str, root=None):
    """A JSON record of the repository (dict), or None for a notebook / test (live evidence)."""
    check_str(path, "path")
    p = _root(root) / path
    if p.suffix != ".json":
        return None
    if not p.is_file():
        raise ValueError(f"path {path!r}: no record at {p}")
    try:
        return json.loads(p.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"path {path!r} is not a JSON record: {e}") from None


def measured_rates(root=None) -> Optional[Dict]:
    """The step rates measured with one run alone on the GPU (:func:`path_lib.ledger.evidence.measured_rates`
    of the timing records under ``results/calibration/``), or None when this installation has none."""
    paths = [_root(root) / p for p in _TIMING]
    if not all(p.exists() for p in paths):
        return None
    return E.measured_rates(*(json.loads(p.read_text()) for p in paths))


def claim_by_id(cid: str, claims: Optional[Sequence[Dict]] = None) -> Dict:
    """The entry of :data:`CLAIMS` (or ``claims``) with id ``cid``; ValueError naming it if none."""
    for c in CLAIMS if claims is None else claims:
        if c["id"] == cid:
            return c
    raise ValueError(f"cid must be the id of a claim, got {cid!r}")


def _record_path(c: Dict) -> Optional[str]:
    recs = [e for e in (c.get("ours") or {}).get("evidence") or [] if e.endswith(".json")]
    return recs[0] if recs else None


def _record(c: Dict, root=None):
    """The first JSON record a claim's evidence names (dict), or None when it names none or this
    installation has no records (path_lib installed without its repository, e.g. on Colab)."""
    path = _record_path(c)
    return load_evidence(path, root) if path and (_root(root) / path).exists() else None


def _missing(c: Dict) -> str:
    return f"computed from `{_record_path(c)}`, which this installation does not have"


def reason_text(c: Dict, root=None) -> str:
    """A claim's reason: its text, or the text computed from its record when the reason is a function.
    ``c``: an entry of :data:`CLAIMS`; ``root``: the folder the records are read from (None: this checkout)."""
    _check_claim(c, "c")
    _root(root)
    f = c.get("reason") or ""
    if not callable(f):
        return f
    rec = _record(c, root)
    return f(rec) if rec is not None else _missing(c)


def _models(c: Dict) -> List[str]:
    """The model names of every side of a claim's tests and controls, in order of appearance."""
    out: List[str] = []
    for t in c.get("tests") or []:
        sides = [t.get("a"), t.get("b")] + [(t.get("control") or {}).get(k) for k in ("a", "b")]
        out += [s[1] for s in sides if isinstance(s, tuple)]
    return list(dict.fromkeys(out))


def _more_seeds(c: Dict, rec: Dict, rates: Optional[Dict], n: int) -> str:
    """What decides an undecided comparison that lacks only seeds: the missing seeds, at their cost."""
    extra = MIN_SEEDS - n
    what = f"the same runs with {MIN_SEEDS} seeds ({extra} more) would decide it"
    models = _models(c)
    if "config" in rec and "steps" in rec["config"] and rates is not None:      # a language-model record
        steps = rec["config"]["steps"]
        per = sum(E._lm_rate(rec, rates, m) for m in models)
        return (f"{what}: {len(models)} models x {extra} seeds x {steps} steps, about "
                f"{E._gpu_time(per * steps * extra)} of training {E._alone(rates)} (evaluation not included)")
    if rec.get("phase") == "flip_flop" and rates is not None:
        steps = max(r["steps_done"] for r in rec["runs"])
        per = sum(rates["tasks"][f"flip_flop/{m}"] for m in models)
        return (f"{what}: {len(models)} models x {extra} seeds x {steps:,} steps, about "
                f"{E._gpu_time(per * steps * extra)} of training {E._alone(rates)} (evaluation not included)")
    if "wall_seconds" in rec and "seeds" in rec:
        per_seed = rec["wall_seconds"] / len(rec["seeds"])
        return (f"{what}: its {len(rec['seeds'])} seeds ran in {E._gpu_time(rec['wall_seconds'])} of one "
                f"{rec['provenance']['device']}, so {extra} more take about {E._gpu_time(per_seed * extra)}")
    return what


def decide_text(c: Dict, root=None) -> str:
    """What would decide an undecided claim (the run, its size, its cost at the measured rates), or ''.
    A claim's own ``decide`` when it has one; for an undecided comparison that lacks only seeds, the
    cost of the missing seeds."""
    _check_claim(c, "c")
    f = c.get("decide")
    rec, rates = _record(c, root), measured_rates(root)
    if f:
        if rec is None:
            return _missing(c)
        return f(rec, rates) if rates is not None else "its cost needs the measured step rates of results/calibration"
    if c["status"] != "undecided" or rec is None or not c.get("tests"):
        return ""
    res = test_results(c, root)
    n = [r["n"] for r in res if r["kind"] == "seeds" and r["role"] == "named"]
    if n and min(n) < MIN_SEEDS:
        return _more_seeds(c, rec, rates, min(n))
    return ""


def _evaluate(t: Dict, rec: Dict) -> Dict:
    return E.evaluate_speed(t, rec) if t.get("kind") == "speed" else E.evaluate(t, rec)


def test_results(c: Dict, root=None) -> List[Dict]:
    """The claim's tests evaluated on its record (:func:`path_lib.ledger.evidence.evaluate`, or
    ``evaluate_speed`` for timings); empty when the claim has none or the record is not installed here."""
    _check_claim(c, "c")
    _root(root)
    rec = _record(c, root) if c.get("tests") else None
    return [_evaluate(t, rec) for t in c["tests"]] if rec is not None else []


def decided(c: Dict, root=None) -> Optional[Dict]:
    """``{"status", "why", "kind"}`` as the claim's named tests decide them on its record
    (:func:`path_lib.ledger.evidence.decide`), or None for a claim without tests or without its record."""
    res = test_results(c, root)
    if not res:
        return None
    status, why = E.decide(res)
    return {"status": status, "why": why, "kind": E.claim_kind(res)}


# ----------------------------------------------------------------------------------------------
# checks (tests/test_claims.py)
# ----------------------------------------------------------------------------------------------

def _trained(c: Dict) -> bool:
    ev = (c.get("ours") or {}).get("evidence") or []
    return any(e.startswith(("results/lm/", "results/synthetic/")) for e in ev)


def _validate_test(cid: str, t: Dict) -> List[str]:
    label, out = t.get("label"), []
    if t.get("role", "named") not in E.ROLES:
        out.append(f"{cid}: test {label!r} has role {t.get('role')!r}, not one of {E.ROLES}")
    if t.get("kind") == "speed":
        return out + ([] if t.get("faster") and t.get("slower") else [f"{cid}: speed test {label!r} needs both methods"])
    if t.get("paper") not in (">", "<", "within") or (t["paper"] == "within") != (t.get("margin") is not None):
        out.append(f"{cid}: test {label!r} needs paper '>', '<', or 'within' with a margin")
    ctl = t.get("control")
    if ctl is not None and (not ctl.get("what") or not (ctl.get("a") or ctl.get("b"))):
        out.append(f"{cid}: the control of {label!r} needs a side and says what it is")
    if t.get("role", "named") == "named" and ctl is None and not t.get("certain"):
        out.append(f"{cid}: the named test {label!r} needs a control that must fail")
    return out


def _validate_tests(c: Dict) -> List[str]:
    cid, st, kind, tests = c.get("id", "?"), c.get("status"), c.get("test"), c.get("tests") or []
    out = []
    if kind not in TEST_KINDS:
        out.append(f"{cid}: test {kind!r} is not one of {TEST_KINDS}")
    if kind == "untested" and st not in ("quoted only", "not attempted", "undecided"):
        out.append(f"{cid}: a claim decided by a run ({st}) cannot be untested")
    if st in ("reproduced", "not reproduced") and _trained(c) and not tests:
        out.append(f"{cid}: a trained comparison needs its tests over seeds")
    if tests and not any(t.get("role", "named") == "named" for t in tests):
        out.append(f"{cid}: its tests need at least one named test, the one that decides it")
    for t in tests:
        out += _validate_test(cid, t)
    if kind == "certain at this scale" and not tests and not c.get("certain_why"):
        out.append(f"{cid}: a certain claim says why")
    if st == "undecided" and _trained(c) and not (c.get("decide") or tests):
        out.append(f"{cid}: an undecided claim says what would decide it")
    return out


def validate(claims: Optional[Sequence[Dict]] = None, root=None) -> List[str]:
    """Problems with the ledger's data (an empty list when it is sound): unknown status, a missing
    reason, evidence that does not exist, a claim resting on a run without evidence, a record without
    provenance, duplicate ids, a trained comparison without tests, a named test without a control.
    ``claims`` must be a list of dicts (a TypeError naming it otherwise); what they hold is reported."""
    claims = _claims(claims, keys=())
    root = _root(root)
    out = []
    ids = Counter(c.get("id") for c in claims)
    out += [f"duplicate id {i}" for i, n in ids.items() if n > 1]
    for c in claims:
        cid = c.get("id", "?")
        for key in ("id", "paper", "section", "where", "claim", "paper_value", "status"):
            if not c.get(key):
                out.append(f"{cid}: missing {key}")
        if c.get("paper") not in PAPERS:
            out.append(f"{cid}: paper must be one of {sorted(PAPERS)}")
        st = c.get("status")
        if st not in STATUSES:
            out.append(f"{cid}: status {st!r} is not one of {STATUSES}")
        if st != "reproduced" and not c.get("reason"):
            out.append(f"{cid}: status {st!r} needs a reason")
        ours = c.get("ours")
        ev = (ours or {}).get("evidence") or []
        if st in REQUIRES_EVIDENCE and not ev:
            out.append(f"{cid}: status {st!r} must name the record or chapter it rests on")
        if st == "reproduced" and ours and ours.get("values") and not any(e.endswith(".json") for e in ev):
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
            if v.get("format") not in _VALUE_FORMATS:
                out.append(f"{cid}: value {label!r} has an unknown format")
        out += _validate_tests(c)
    return out


def check_snapshots(claims: Optional[Sequence[Dict]] = None, root=None) -> List[str]:
    """Values whose snapshot no longer matches the record they come from (an empty list when all do)."""
    claims = _claims(claims)
    _root(root)
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


def check_statistics(claims: Optional[Sequence[Dict]] = None, root=None) -> List[str]:
    """Claims whose status or kind of test differs from what their named tests decide on their record
    (:func:`decided`), one line each (an empty list when all agree). Supporting tests never decide."""
    claims = _claims(claims)
    _root(root)
    out = []
    for c in claims:
        if not c.get("tests"):
            continue
        try:
            d = decided(c, root)
        except (KeyError, IndexError, ValueError, TypeError, OSError) as e:
            out.append(f"{c['id']}: cannot evaluate its tests: {e}")
            continue
        if d is None:
            out.append(f"{c['id']}: its record {_record_path(c)} is missing")
        elif (c["status"], c["test"]) != (d["status"], d["kind"]):
            out.append(f"{c['id']}: the ledger says {c['status']!r} ({c['test']}), its named tests decide "
                       f"{d['status']!r} ({d['kind']}): {d['why']}")
    return out


# ----------------------------------------------------------------------------------------------
# counting and rendering (the ledger page)
# ----------------------------------------------------------------------------------------------

def counts(claims: Optional[Sequence[Dict]] = None) -> "OrderedDict[str, int]":
    """Number of claims per status, in the order of :data:`STATUSES`."""
    claims = _claims(claims)
    n = Counter(c["status"] for c in claims)
    return OrderedDict((s, n.get(s, 0)) for s in STATUSES)


def test_counts(claims: Optional[Sequence[Dict]] = None) -> "OrderedDict[str, OrderedDict[str, int]]":
    """Claims per kind of test (:data:`TEST_KINDS`), each split by status: the real tests are counted
    apart from the outcomes that were certain at this scale."""
    claims = _claims(claims)
    return OrderedDict((k, counts([c for c in claims if c["test"] == k])) for k in TEST_KINDS)


def counting_sentence(claims: Optional[Sequence[Dict]] = None) -> str:
    """Two sentences counting the claims apart: real tests (by status), certain outcomes, untested."""
    claims = CLAIMS if claims is None else claims
    n = test_counts(claims)
    real, cert = n["real test"], n["certain at this scale"]
    return (f"Of the {len(claims)} claims, {sum(real.values())} rest on a real test, one that could have failed "
            f"here: {real['reproduced']} reproduced, {real['not reproduced']} not reproduced and "
            f"{real['undecided']} undecided. {sum(cert.values())} have an outcome that was certain at this scale "
            f"({cert['reproduced']} reproduced, {cert['undecided']} undecided) and count as no evidence; "
            f"{sum(n['untested'].values())} are untested here.")


def counts_markdown(claims: Optional[Sequence[Dict]] = None) -> str:
    """A Markdown table of the number of claims per status, per paper, and per kind of test."""
    claims = _claims(claims)
    per = {f"paper {p}": counts([c for c in claims if c["paper"] == p]) for p in PAPERS}
    per.update((k, v) for k, v in test_counts(claims).items())
    per["all"] = counts(claims)
    rows = ["| status | " + " | ".join(per) + " |", "|---" * (len(per) + 1) + "|"]
    for s in STATUSES:
        rows.append(f"| {s} | " + " | ".join(str(v[s]) for v in per.values()) + " |")
    rows.append("| **all** | " + " | ".join(str(sum(v.values())) for v in per.values()) + " |")
    return "\n".join(rows)


#: the overview table's row of each claim: a short name, the labels of the values shown in the table
#: (None: all of them) and a shorter form of the paper's value (None: the claim's own)
_OVERVIEW: Dict[str, tuple] = {
    "A-tc0": ("fixed encodings lie in $\\mathsf{TC}^0$", None, "a theorem"),
    "A-thm2.1": ("one-layer PaTH tracks swaps of 5 elements", None, None),
    "A-thmA.1": ("two-layer PaTH solves flip-flop", None, None),
    "A-deltanet": ("PaTH without softmax is DeltaNet's recurrence", None, None),
    "A-ff-path": ("PaTH solves flip-flop", None, None),
    "A-ff-rope": ("RoPE fails flip-flop on sparse strings (ours at 2 layers of width 128, where RoPE learns)",
                  None, "6.9% / 40.3% / 0.01%"),
    "A-ff-fox": ("FoX fails flip-flop on sparse strings", None, "8.3% / 36.3% / 0%"),
    "A-ff-sba": ("SBA fails flip-flop on sparse strings", None, "9.6% / 38.9% / 0%"),
    "A-a5": ("$A_5$: PaTH needs fewer layers", None, "fewer layers"),
    "A-mqrar": ("MQRAR: PaTH strong for $N < 4$", None, None),
    "A-t2-rope": ("760M RoPE: perplexities and accuracies", None, "WikiText 19.01, average 52.7"),
    "A-t2-fox": ("760M FoX: the same", None, "WikiText 18.33, average 53.1"),
    "A-t2-path": ("760M PaTH: the same", None, "WikiText 18.03, average 54.2"),
    "A-t2-pathfox": ("760M PaTH-FoX: the same", None, "WikiText 17.35, average 54.2"),
    "A-t2-order": ("perplexity order RoPE > FoX > PaTH > PaTH-FoX", None, "19.01 > 18.33 > 18.03 > 17.35"),
    "A-ext-rope": ("RoPE fails just past its training length", None, None),
    "A-ext-path": ("PaTH stable to about 8x, then degrades", ("ratio at 4x", "ratio at 8x"), None),
    "A-ext-gates": ("FoX and PaTH-FoX flat to 16x, PaTH-FoX lower",
                    ("FoX perplexity", "PaTH-FoX perplexity"), None),
    "A-ruler": ("RULER scores", None, "PaTH 34.8 at 8K"),
    "A-phonebook": ("PhoneBook lookup", None, None),
    "A-retrieval": ("good perplexity is not retrieval", ("PaTH passkey at 1x",), None),
    "A-conv-smollm": ("SmolLM2-1.7B converted to PaTH", None, None),
    "A-conv-toy": ("a trained RoPE model converts to PaTH", ("within 2% of the teacher after both stages",), None),
    "A-conv-qwen": ("Qwen2.5-7B converted to PaTH", None, None),
    "A-speed-sdpa": ("PaTH slower than FlashAttention",
                     ("SDPA, FlashAttention backend (ms)", "fla's PaTH kernel (ms)"), None),
    "A-speed-fox": ("PaTH faster than FoX", ("fla's FoX kernel (ms)", "fla's PaTH kernel (ms)"), None),
    "B-gap-mixing": ("a spectral gap mixes in a fixed window", None, "a theorem"),
    "B-concentration": ("scores concentrate under random transport", None, None),
    "B-rope-nogap": ("fixed RoPE angles have no gap", None, None),
    "B-farmass-bound": ("far mass tends to 1 with bounded logits", None, None),
    "B-farmass-trained": ("far mass grows in trained rotation models",
                          ("PaTH at 1x", "PaTH at 64x", "ALiBi at 64x"), "a mechanism"),
    "B-bias-escape": ("a distance bias or gate bounds the far mass", None, None),
    "B-value-side": ("transported values add incoherently", None, None),
    "B-exp-8k": ("rotations degrade less than RoPE at 16x", None, None),
    "B-exp-qkv": ("rotating values too degrades less", None, "1.59 vs 7.49 at 128x"),
    "B-exp-alibi": ("ALiBi stays flat", None, None),
    "B-exp-learned": ("learned rotations stay near 1", ("TokRot-learned at 16x",), "near 1"),
}


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _seed_counts(res: Sequence[Dict]) -> List[int]:
    """The numbers of seeds of a claim's named tests over seeds."""
    return sorted({r["n"] for r in res if r["kind"] == "seeds" and r["role"] == "named"})


def _ours_cell(c: Dict, root, labels) -> str:
    """What the overview shows as ours: the chosen values read from the record, with the seeds (or
    shapes) the deciding tests rest on; or what was done when nothing was measured."""
    ours = c.get("ours")
    if ours is None:
        return "not run"
    vals = _live_values(c, root)
    shown = [f"{k}: {format_value(v)}" for k, v in vals.items() if labels is None or k in labels]
    res = test_results(c, root)
    n = _seed_counts(res)
    shapes = [r["shapes"] for r in res if r["kind"] == "shapes" and r["role"] == "named"]
    if n:
        shown.append(" / ".join(map(str, n)) + f" seed{'s' * (n != [1])}")
    elif shapes:
        shown.append(f"{shapes[0]} shapes")
    if not shown:
        return "checked numerically" if c["status"] == "reproduced" else "explained, not checked"
    return "; ".join(shown)


def overview_markdown(paper: Optional[str] = None, claims: Optional[Sequence[Dict]] = None, root=None) -> str:
    """A compact Markdown table of the claims (of one paper if given): a short name, the paper's value,
    ours read from the records with the number of seeds behind it, the status and the kind of test.
    No internal ids: the name comes from the ledger's overview entries."""
    claims = _claims(claims)
    if paper is not None:
        check_choice(paper, "paper", tuple(PAPERS))
    rows = ["| claim | the paper | ours | status | kind of test |", "|---|---|---|---|---|"]
    for c in claims:
        if paper not in (None, c["paper"]):
            continue
        name, labels, short = _OVERVIEW.get(c["id"], (c["claim"], None, None))
        cells = (name, short or c["paper_value"], _ours_cell(c, root, labels), f"**{c['status']}**", c["test"])
        rows.append("| " + " | ".join(_cell(x) for x in cells) + " |")
    return "\n".join(rows)


def format_value(v: Dict) -> str:
    """A ledger value ``{"value", "format"}`` as text: percent, float (3 significant digits), int or text.
    ``format``: one of ``"percent"``, ``"float"``, ``"int"``, ``"text"``; ``value``: None (``"none"``), or a
    finite number unless the format is text. A TypeError or ValueError naming ``v`` otherwise."""
    check_mapping(v, "v", keys=("value", "format"))
    x, fmt = v["value"], check_choice(v["format"], "v['format']", _VALUE_FORMATS)
    if x is None:
        return "none"
    if fmt != "text":
        check_number(x, "v['value']")
    if fmt == "percent":
        return f"{100 * x:.4g}%"
    if fmt == "int":
        return f"{int(x):,}"
    if fmt == "float":
        return f"{x:.3g}"
    return {True: "yes", False: "no"}.get(x, str(x)) if isinstance(x, bool) else str(x)


def _num(x: float, unit: str) -> str:
    if x == 0:
        return "0"
    if unit == "relative":
        return f"{x:+.2%}"
    return f"{100 * x:+.3g}" if unit == "points" else f"{x:+.3g}"


def _unit(r: Dict) -> str:
    return "relative" if r["relative"] else ("points" if r.get("points") else "plain")


def _agrees(r: Dict) -> str:
    if r["kind"] == "shapes":
        return f"{r['agree']} of {r['shapes']} shapes"
    return f"{r['agree']} of {r['n']} seed{'s' * (r['n'] != 1)}"


def test_line(r: Dict) -> str:
    """One evaluated test in words: how many seeds agree, the mean difference with its exact interval and
    the coverage it has, the exact p-value and its floor, the outcome, and the control beside it."""
    if r["kind"] == "shapes":
        return (f"{r['label']}: holds at {_agrees(r)} (one median timing per shape, no seeds; the order must "
                f"hold at every shape)")
    (lo, hi), unit = r["interval"], _unit(r)
    what = {"relative": "relative difference", "points": "difference in percentage points",
            "plain": "difference"}[unit]
    if r["holds"]:
        outcome = f"holds at {E.p_text(LEVEL)}"
    elif r["tied"]:
        outcome = "no seed differs at all"
    elif r["against"]:
        outcome = f"points the other way (the other way $p$ = {E.p_text(r['p_against'])})"
    elif r["n"] < MIN_SEEDS:
        outcome = f"undecided: {r['n']} seeds cannot reach {E.p_text(LEVEL)}"
    else:
        outcome = f"undecided: $p$ above {E.p_text(LEVEL)}"
    text = (f"{r['label']}: agrees in {_agrees(r)}; mean {what} {_num(r['mean'], unit)}, "
            f"{100 * r['coverage']:.4g}% interval of the centre [{_num(lo, unit)}, {_num(hi, unit)}]; exact sign-flip "
            f"$p$ = {E.p_text(r['p'])} (the smallest {r['n']} seeds allow: {E.p_text(r['smallest_p'])}); {outcome}")
    ctl = r["control"]
    if ctl:
        text += (f". Control, {ctl['what']}: agrees in {ctl['agree']} of {ctl['n']} seeds, $p$ = {E.p_text(ctl['p'])}, "
                 + ("passes too, so the test cannot fail here" if ctl["passes_available"] else "fails, as it must"))
    if r["certain"]:
        text += f". Certain at this scale: {r['certain']}"
    return text


_ROLE_WORDS = {"named": "Deciding test", "precondition": "Precondition", "supporting": "Also measured (does not decide)"}


def _status_lines(c: Dict, root) -> List[str]:
    """The status with what decided it, then the reason computed from the record."""
    d = decided(c, root)
    text = f"*Status:* **{c['status']}**"
    if c["test"] == "certain at this scale":
        text += " (certain at this scale, so not counted as evidence)"
    if d is not None and d["status"] != "reproduced":
        text += f": {d['why']}"
    text += "." + _few_seeds_sentence(c, test_results(c, root))
    why = reason_text(c, root)
    return [text] + ([f"*Why:* {why[0].upper()}{why[1:]}."] if why else [])


def _few_seeds_sentence(c: Dict, res: Sequence[Dict]) -> str:
    """For a claim not reproduced on too few seeds: how many it has, the smallest p they allow against
    the level, and that the outcome is therefore no proof of the claim's opposite ('' otherwise)."""
    n = _seed_counts(res)
    if c["status"] != "not reproduced" or not n or n[0] >= MIN_SEEDS:
        return ""
    floor = stats.smallest_p_paired(n[0])
    return (f" The record has {n[0]} seed{'s' * (n[0] != 1)}; the smallest $p$ they allow is {E.p_text(floor)}, "
            f"above the level {E.p_text(LEVEL)}, so no test on them can reach it in either direction: our runs "
            "point away from the claim, which is no proof of its opposite.")


def _provenance(rec: Dict) -> str:
    p = rec["provenance"]
    return (f"recorded on {p['device']} with torch {p['torch']}, triton {p.get('triton')}, Python "
            f"{p.get('python')}, at commit {str(p['commit'])[:10]} on {str(p['date'])[:10]}; command: "
            f"`{E.public_command(p['command'])}`")


def _details(c: Dict, root, supporting: Sequence[Dict] = ()) -> str:
    """The collapsed part of a claim: the tests shown beside the deciding ones (they decide nothing), the
    ledger id, the evidence with its provenance, what would decide it."""
    ours = c.get("ours") or {}
    lines = [f"- *{_ROLE_WORDS['supporting']}:* {test_line(r)}." for r in supporting]
    lines.append(f"- Ledger entry `{c['id']}`; kind of test: {c['test']}.")
    for e in ours.get("evidence") or []:
        rec = load_evidence(e, root) if (_root(root) / e).exists() else None
        lines.append(f"- Evidence `{e}`" + (f": {_provenance(rec)}." if rec and "provenance" in rec else "."))
    dec = decide_text(c, root)
    if dec:
        lines.append(f"- What would decide it: {dec}.")
    title = "Other measurements, records and provenance" if supporting else "Records and provenance"
    return f":::{{dropdown}} {title}\n" + "\n".join(lines) + "\n:::"


def _live_values(c: Dict, root) -> Dict[str, Dict]:
    """The claim's values read from its record now (the snapshot only where the record is missing)."""
    rec, out = _record(c, root), {}
    for k, v in ((c.get("ours") or {}).get("values") or {}).items():
        out[k] = dict(v, value=value_at(rec, v["select"])) if rec is not None else v
    return out


def _claim_markdown(c: Dict, root) -> str:
    key = PAPERS[c["paper"]][0]
    ours = c.get("ours")
    head = f"**{c['claim']}** ({c['where']} of {{cite:p}}`{key}`)"
    items = [f"*The paper:* {c['paper_value']}."]
    if ours:
        items.append(f"*What we ran:* {ours['scale']}.")
        vals = _live_values(c, root)
        if vals:
            items.append("*Ours:* " + "; ".join(f"{k}: {format_value(v)}" for k, v in vals.items()) + ".")
    else:
        items.append("*What we ran:* nothing.")
    res = test_results(c, root)
    items += [f"*{_ROLE_WORDS[r['role']]}:* {test_line(r)}." for r in res if r["role"] != "supporting"]
    if c["test"] == "certain at this scale" and c.get("certain_why") and not res:
        items.append(f"*Certain at this scale:* {c['certain_why']}.")
    items += _status_lines(c, root)
    more = [r for r in res if r["role"] == "supporting"]
    return "\n".join([head, ""] + [f"- {x}" for x in items] + ["", _details(c, root, more)])


def sections(paper: Optional[str] = None, claims: Optional[Sequence[Dict]] = None) -> List[tuple]:
    """The ``(paper, section)`` pairs of the ledger in order (those of one paper if given)."""
    claims = CLAIMS if claims is None else claims
    return list(dict.fromkeys((c["paper"], c["section"]) for c in claims if paper in (None, c["paper"])))


def section_markdown(paper: str, section: str, claims: Optional[Sequence[Dict]] = None, root=None) -> str:
    """The claims of one section as Markdown, one block per claim: the claim in words with its paper,
    the paper's value, what we ran, our values, every test in words (agreeing seeds, mean difference with
    its exact interval and coverage, exact p, control), the status with its reason, and a collapsed
    dropdown with the ledger id, the records' provenance and what would decide it. No headings."""
    claims = CLAIMS if claims is None else claims
    sub = [c for c in claims if c["paper"] == paper and c["section"] == section]
    if not sub:
        raise ValueError(f"no claim of paper {paper!r} is in section {section!r}")
    return "\n\n".join(_claim_markdown(c, root) for c in sub)


def open_claims(claims: Optional[Sequence[Dict]] = None, root=None) -> List[Dict]:
    """The undecided claims and what would decide each: ``[{"id", "status", "claim", "decide"}]``,
    the decide text computed from the records and the measured step rates."""
    claims = _claims(claims)
    _root(root)
    return [{"id": c["id"], "status": c["status"], "claim": c["claim"], "decide": decide_text(c, root)}
            for c in claims if c["status"] == "undecided" or c.get("decide")]


def pending(claims: Optional[Sequence[Dict]] = None) -> Dict[str, List[str]]:
    """Claim ids waiting for a new run, by the stable record name that will decide them."""
    claims = _claims(claims)
    out: Dict[str, List[str]] = {}
    for c in claims:
        if c.get("awaits"):
            out.setdefault(c["awaits"], []).append(c["id"])
    return out
