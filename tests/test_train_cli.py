"""Data-parallel (DDP) and sharded (FSDP2) training through path_lib.training.cli on CPU with gloo and 2
processes: the loss trajectory equals the single-process run with the same global batch, a run stopped
and resumed (in the same or the other mode) continues identically, rank 0 writes a record naming the
world size; and the command line's errors."""
from __future__ import annotations

import math

import pytest

import dist_workers
from path_lib.book.gloo_group import run_gloo_group
from path_lib.records import read_result
from path_lib.training.cli import run, shard_rows


def losses(history):
    return [h["loss"] for h in history]


def close(a, b, rel=2e-5):
    return len(a) == len(b) and all(math.isclose(x, y, rel_tol=rel, abs_tol=0) for x, y in zip(a, b))


def test_two_ranks_ddp_and_fsdp(tmp_path):
    """One 2-process group runs everything (a single test, so that pytest-xdist starts it once)."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)                    # as the workers (tiny ops: threads only cost time)
    try:
        single = run(dist_workers.TRAIN_ARGS + ["--out", str(tmp_path / "single.json")])
    finally:
        torch.set_num_threads(threads)
    try:
        r0, r1 = run_gloo_group(dist_workers.run_train, 2, str(tmp_path), timeout=120.0)
    except TimeoutError as e:
        pytest.fail(str(e))
    ref = losses(single["history"])
    assert len(ref) == 6 and len(set(ref)) > 1                # every step logged, the loss moves
    for mode in ("ddp", "fsdp"):
        for r in (r0, r1):                                     # both ranks log the global mean
            assert close(losses(r[mode]["history"]), ref), (mode, losses(r[mode]["history"]), ref)
            assert math.isclose(r[mode]["final"]["val"]["loss"], single["final"]["val"]["loss"], rel_tol=2e-5)
            assert r[mode]["tokens_seen"] == single["tokens_seen"]  # both ranks' tokens counted
        # rank 0 writes the record, naming the world size
        rec = read_result(tmp_path / f"{mode}.json")
        assert rec["distributed"] == {"world_size": 2, "parallel": mode, "rank_batch": 2, "global_batch": 4,
                                      "backend": "gloo"}
        assert "torchrun --nproc_per_node=2" in rec["provenance"]["command"]
        assert "world_size=2" in rec["provenance"]["command"] and rec["corpus"]["source"] == "python-stdlib"
    # stopped after 3 steps and resumed: the same run (bit-identical in the same mode)
    for saved_in, resumed_in in (("ddp", "ddp"), ("fsdp", "fsdp"), ("ddp", "fsdp")):
        for r in (r0, r1):
            res = r[f"{saved_in}_{resumed_in}"]
            assert res["first_steps"] == 3 and not res["first_complete"] and res["calls"] == 2
            uninterrupted = losses(r[resumed_in]["history"])
            if saved_in == resumed_in:
                assert losses(res["history"]) == uninterrupted
                assert res["final"] == r[resumed_in]["final"]
            else:
                assert close(losses(res["history"]), uninterrupted)
        assert r0[f"{saved_in}_{resumed_in}"]["checkpoint_left"] is False   # rank 0 removed the finished state
    for r in (r0, r1):                                         # every rank refuses, before any collective
        assert r["odd_batch"]["type"] == "_UsageError" and "multiple" in r["odd_batch"]["msg"]   # a ValueError


def test_cli_errors():
    with pytest.raises(ValueError, match="argv: --parallel ddp needs more than one process"):
        run(["--parallel", "ddp", "--steps", "1"])
    with pytest.raises(ValueError, match="argv: --stop-after .* give --checkpoint-dir"):
        run(["--stop-after", "2", "--steps", "4"])


def test_shard_rows():
    import torch
    x = torch.arange(12).view(6, 2)
    assert torch.equal(torch.cat([shard_rows(x, r, 3) for r in range(3)]), x)
    assert torch.equal(shard_rows(x, 1, 2), x[3:])
    with pytest.raises(ValueError, match="multiple of the world size"):
        shard_rows(x, 0, 4)
