"""The claims ledger: every claim has an allowed status, a reason unless reproduced, evidence that exists
(and a record with provenance for every number), snapshots that match their records, tests over seeds that
support its status, reasons whose numbers are recomputed from the records; and the rendering."""
import copy
import json
import math
import re
from pathlib import Path

import pytest

from path_lib.ledger import claims as C

ROOT = Path(__file__).resolve().parent.parent


def test_ledger_data_is_sound():
    assert C.validate() == []
    assert C.check_snapshots() == []
    assert C.check_statistics() == []


def test_statuses_reasons_and_evidence():
    assert len(C.CLAIMS) >= 30
    for c in C.CLAIMS:
        assert c["status"] in C.STATUSES, c["id"]
        if c["status"] == "not attempted":
            assert c["reason"].strip(), c["id"]
        if c["status"] in ("reproduced", "reproduced in direction only"):
            ev = c["ours"]["evidence"]
            assert ev and all((ROOT / e).exists() for e in ev), c["id"]
        for e in (c.get("ours") or {}).get("evidence", []):
            assert (ROOT / e).exists(), (c["id"], e)
        if c.get("awaits"):
            from path_lib.records import RECORDS
            assert c["awaits"] in RECORDS, c["id"]


def test_both_papers_and_the_topics_are_covered():
    ids = {c["id"] for c in C.CLAIMS}
    for need in ("A-thm2.1", "A-thmA.1", "A-ff-path", "A-ff-sba", "A-a5", "A-mqrar", "A-t2-path", "A-ruler",
                 "A-phonebook", "A-conv-smollm", "A-conv-qwen", "A-speed-fox", "B-gap-mixing",
                 "B-farmass-bound", "B-value-side", "B-exp-8k", "B-exp-qkv", "B-exp-alibi", "B-exp-learned"):
        assert need in ids
    # the trained comparisons resting on the unequal records are not claimed as reproduced
    for c in C.CLAIMS:
        ev = (c.get("ours") or {}).get("evidence", [])
        if any("lm_full_2026-12-01_unequal" in e or "flip_flop_2026-11-29" in e for e in ev):
            assert c["status"] == "not reproduced yet" and C.UNEQUAL in c["reason"], c["id"]


def test_a_trained_comparison_rests_only_on_an_equal_training_record():
    """A claim decided (reproduced, in direction only, not reproduced) by a trained run must point at a
    record that is complete and passed the equal-training test."""
    decided = ("reproduced", "reproduced in direction only", "not reproduced")
    for c in C.CLAIMS:
        ev = [e for e in (c.get("ours") or {}).get("evidence", []) if e.startswith(("results/lm/", "results/synthetic/"))]
        if c["status"] not in decided or not ev:
            continue
        rec = json.loads((C._root() / ev[0]).read_text())
        assert rec["complete"] and rec["equal_training"]["ok"], c["id"]


def test_validate_catches_bad_entries():
    bad = copy.deepcopy(C.CLAIMS[:3])
    bad[0]["status"] = "sort of"
    bad[1]["status"], bad[1]["reason"] = "not attempted", ""
    bad[2]["ours"] = {"scale": "x", "evidence": ["results/no_such_record.json"], "values": {}}
    problems = C.validate(bad)
    assert any("sort of" in p for p in problems)
    assert any("needs a reason" in p for p in problems)
    assert any("does not exist" in p for p in problems)
    no_ev = copy.deepcopy(C.CLAIMS[1])
    no_ev["ours"] = None
    assert any("must name" in p for p in C.validate([no_ev]))
    stale = copy.deepcopy([c for c in C.CLAIMS if c["id"] == "A-ff-rope"])
    stale[0]["ours"]["values"]["ID"]["value"] = 0.5
    assert C.check_snapshots(stale) and "0.5" in C.check_snapshots(stale)[0]


def test_value_at_selects_list_elements():
    data = {"rows": [{"a": 1, "b": "x", "ms": 2.0}, {"a": 1, "b": "y", "ms": 3.0}]}
    assert C.value_at(data, ["rows", {"a": 1, "b": "y"}, "ms"]) == 3.0
    with pytest.raises(ValueError, match="2 elements"):
        C.value_at(data, ["rows", {"a": 1}])


def test_rendering_and_counts():
    n = C.counts()
    assert list(n) == list(C.STATUSES) and sum(n.values()) == len(C.CLAIMS)
    md = C.ledger_markdown()
    rows = [ln for ln in md.splitlines() if ln.startswith("| **")]
    assert len(rows) == len(C.CLAIMS)
    # status first, six short columns
    assert all(r.split(" | ")[0].strip("| *") in C.STATUSES and r.count(" | ") == 5 for r in rows)
    assert "**Paper A" in md and "**Paper B" in md and "**Synthetic tasks** (" in md and "\n#" not in md
    for c in C.CLAIMS:   # every claim's long text is below its table
        assert f"`{c['id']}` ({c['where']})." in md, c["id"]
    table = C.counts_markdown()
    assert table.splitlines()[-1].endswith(f"| {len(C.CLAIMS)} |")
    assert C.format_value({"value": 0.0123, "format": "percent"}) == "1.23%"
    from path_lib.records import RECORDS
    assert set(C.pending()) <= set(RECORDS)


_RECORDS = {}


def _rec(path):
    if path not in _RECORDS:
        _RECORDS[path] = json.loads((ROOT / path).read_text())
    return _RECORDS[path]


def _claim(cid):
    return next(c for c in C.CLAIMS if c["id"] == cid)


def test_every_trained_comparison_states_its_tests_and_kind():
    for c in C.CLAIMS:
        assert c["test"] in C.TEST_KINDS, c["id"]
        if c["status"] in ("reproduced", "reproduced in direction only", "not reproduced") and any(
                e.startswith(("results/lm/", "results/synthetic/")) for e in c["ours"]["evidence"]):
            res = C.test_results(c)
            assert res, c["id"]
            for r in res:   # three paired seeds: p is a multiple of 1/8, never below it
                assert r["smallest_p"] == 1 / 8 and r["p"] >= 1 / 8 and (8 * r["p"]) == round(8 * r["p"])
                lo, hi = r["interval"]
                assert min(r["diffs"]) <= lo <= r["mean"] <= hi <= max(r["diffs"]) + 1e-12, c["id"]
    assert C.LEVEL == 1 / 8


def test_tests_over_seeds_against_raw_values():
    """The paired test of A-t2-order's PaTH-FoX step, recomputed here from the record's rows."""
    rec = _rec(_claim("A-t2-order")["ours"]["evidence"][0])
    ppl = {(r["model"], r["seed"]): r["metrics"]["ppl_1x"] for r in rec["records"]}
    diffs = [ppl[("PaTH", s)] - ppl[("PaTH-FoX", s)] for s in rec["seeds"]]
    res = {r["label"]: r for r in C.test_results(_claim("A-t2-order"))}
    step = res["PaTH above PaTH-FoX"]
    assert step["diffs"] == diffs and step["holds"] == all(d > 0 for d in diffs)
    rope = res["RoPE above FoX"]
    assert rope["holds"] == all(ppl[("RoPE", s)] > ppl[("FoX", s)] for s in rec["seeds"])


def test_statuses_that_their_tests_contradict_are_caught():
    wrong = copy.deepcopy([_claim("A-t2-order"), _claim("B-exp-qkv"), _claim("A-ff-path")])
    wrong[0]["status"] = "reproduced"                    # one of its three steps fails in every seed
    wrong[1]["status"] = "reproduced in direction only"  # its only test fails
    wrong[2]["status"] = "not reproduced"                # its only test holds
    problems = C.check_statistics(wrong)
    assert [p.split(":")[0] for p in problems] == ["A-t2-order", "B-exp-qkv", "A-ff-path"]


def test_validate_catches_a_bad_test_kind():
    a = copy.deepcopy(_claim("B-exp-8k"))
    a["tests"] = []                         # a trained comparison without its tests
    b = copy.deepcopy(_claim("B-exp-alibi"))
    b["tests"][0]["certain"] = None         # a certain claim whose test was a real one
    d = copy.deepcopy(_claim("A-ff-fox"))
    d["test"] = "untested"                  # decided by a run, yet untested
    e = copy.deepcopy(_claim("A-a5"))
    del e["decide"]                         # open, but nothing says what would decide it
    problems = " ".join(C.validate([a, b, d, e]))
    for needle in ("B-exp-8k: a trained comparison needs", "B-exp-alibi: a certain claim", "A-ff-fox: a claim "
                   "decided", "A-a5: an open claim"):
        assert needle in problems


def test_the_six_redecided_reasons_follow_the_records():
    six = ("A-ff-rope", "A-ext-gates", "A-conv-toy", "A-t2-order", "A-speed-fox", "B-exp-learned")
    assert all(callable(_claim(i)["reason"]) for i in six)
    # every reason that rests on a record is computed from it
    for c in C.CLAIMS:
        if c.get("reason") and any(e.endswith(".json") for e in (c.get("ours") or {}).get("evidence", [])):
            assert callable(c["reason"]), c["id"]
    # A-conv-toy: converted PaTH against RoPE continued, per seed, recomputed from the raw rows
    rec = _rec(_claim("A-conv-toy")["ours"]["evidence"][0])
    loss = {(r["model"], r["seed"]): r["metrics"]["loss_id"] for r in rec["records"]}
    behind = " / ".join(f"{loss[('PaTH converted', s)] / loss[('RoPE continued', s)] - 1:+.1%}" for s in rec["seeds"])
    assert behind in C.reason_text(_claim("A-conv-toy"))
    # A-ff-rope: the range of RoPE's logged training loss from a tenth of the run on
    ff = _rec(_claim("A-ff-rope")["ours"]["evidence"][0])
    late = [h["loss"] for r in ff["runs"] if r["attention"] == "rope" for h in r["history"]
            if h["step"] >= r["steps_done"] // 10]
    assert f"between {min(late):.2f} and {max(late):.2f}" in C.reason_text(_claim("A-ff-rope"))
    # A-ext-gates: the ranges of FoX's and PaTH-FoX's perplexity over seeds
    lm = _rec(_claim("A-ext-gates")["ours"]["evidence"][0])
    ppl = {m: [r["metrics"]["ppl_1x"] for r in lm["records"] if r["model"] == m] for m in ("FoX", "PaTH-FoX")}
    assert f"{min(ppl['FoX']):.3f}-{max(ppl['FoX']):.3f}" in C.reason_text(_claim("A-ext-gates"))
    # A-speed-fox: the shapes where our kernel beats fla's FoX
    bench = _rec(_claim("A-speed-fox")["ours"]["evidence"][0])
    ms = {(r["D"], r["T"], r["mode"], r["method"]): r["ms"] for r in bench["rows"] if "ms" in r}
    wins = [k for k in ms if k[3] == "ours_path" and ms[k] < ms[k[:3] + ("fla_fox",)]]
    assert f"faster than fla's FoX at {len(wins)} of " in C.reason_text(_claim("A-speed-fox"))
    # B-exp-learned: the mean ratio at 8x
    r8 = [r["metrics"]["ratio_8x"] for r in lm["records"] if r["model"] == "TokRot-learned"]
    assert f"{sum(r8) / len(r8):.2f} at 8x" in C.reason_text(_claim("B-exp-learned"))
    # no typed number stands in for them: a reason function's text changes with its record
    fake = copy.deepcopy(lm)
    for r in fake["records"]:
        r["metrics"]["ratio_8x"] *= 2
    assert f"{2 * sum(r8) / len(r8):.2f} at 8x" in C.E.reason_exp_learned(fake)


def test_counting_separates_real_tests_from_certain_outcomes():
    n = C.test_counts()
    assert list(n) == list(C.TEST_KINDS)
    assert sum(sum(v.values()) for v in n.values()) == len(C.CLAIMS)
    assert sum(n["untested"][s] for s in ("reproduced", "reproduced in direction only", "not reproduced")) == 0
    sentence = C.counting_sentence()
    numbers = [int(x) for x in re.findall(r"\d+", sentence)]
    assert numbers[0] == len(C.CLAIMS) and numbers[1] == sum(n["real test"].values())
    # a certain claim stays out of the real tests' count
    flipped = copy.deepcopy(C.CLAIMS)
    next(c for c in flipped if c["id"] == "B-exp-alibi")["test"] = "real test"
    assert sum(C.test_counts(flipped)["real test"].values()) == numbers[1] + 1


def test_open_claims_say_what_would_decide_them():
    opened = {o["id"]: o for o in C.open_claims()}
    for c in C.CLAIMS:
        if c["status"] == "not reproduced yet":
            assert c["id"] in opened
    for o in opened.values():
        assert re.search(r"\d[\d,.]* GPU-(hours|minutes)", o["decide"]), o["id"]
    # the cost follows the record's step rate
    rec = _rec(_claim("A-mqrar")["ours"]["evidence"][0])
    steps = max(r["steps_planned"] for r in rec["runs"])
    hours = 3 * sum(r["train_seconds"] / r["steps_done"] * steps for r in rec["runs"]) / 3600
    assert f"{hours:.1f} GPU-hours" in opened["A-mqrar"]["decide"] and math.isfinite(hours)


def test_evaluate_on_a_small_record():
    rec = {"records": [{"model": m, "seed": s, "metrics": {"x": v}}
                       for m, vals in (("a", (3.0, 2.0, 4.0)), ("b", (1.0, 1.0, 1.0))) for s, v in enumerate(vals)],
           "runs": [{"model": {"n_layers": 1}, "attention": "a", "seed": 0,
                     "history": [{"step": 0, "loss": 2.0}, {"step": 10, "loss": 1.0}, {"step": 20, "loss": 0.5}]}]}
    t = C._t("a above b", C._lm("a", "x"), C._lm("b", "x"), ">")
    r = C.E.evaluate(t, rec)
    assert r["diffs"] == [2.0, 1.0, 3.0] and r["p"] == 1 / 8 and r["holds"]
    rel = C.E.evaluate(C._t("a within 250% of b", C._lm("a", "x"), C._lm("b", "x"), "<", relative=True, shift=2.5), rec)
    # the test sees (2, 1, 3) - 2.5 = (-0.5, -1.5, 0.5): sums at or below -1.5 are -1.5, -2.5, -1.5 -> 3 of 8
    assert rel["diffs"] == [2.0, 1.0, 3.0] and rel["p"] == 3 / 8 and not rel["holds"]
    assert C.E.per_seed(rec, ("runs", "a", "history@10:20")) == {0: 0.75}
    assert C.E.evaluate(C._t("b near 1", C._lm("b", "x"), 1.0, "within", margin=(-0.1, 0.1)), rec)["p"] == 1 / 8
    with pytest.raises(ValueError, match="named 'c'"):
        C.E.per_seed(rec, C._lm("c", "x"))
    assert C.E.p_text(1 / 8) == "1/8" and C.E.p_text(2 / 20) == "1/10" and C.E.p_text(1.0) == "1"
