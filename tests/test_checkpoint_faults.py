"""Faults while training lose nothing that was saved: a process killed in the middle of a checkpoint
write, a checkpoint truncated or corrupted afterwards, and a full disk each leave the last good
checkpoint, and the next ``train`` call resumes from it (with a warning saying which file and step) and
ends bit-identical to a run that was never interrupted (CPU)."""
from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from path_lib.nn.model import TinyLM
from path_lib.training import state as S
from path_lib.training.loop import TrainConfig, train
from path_lib.training.tasks import flip_flop

torch.set_num_threads(1)
CFG = TrainConfig(steps=8, lr=3e-3, warmup=2, seed=1)


def _model():
    torch.manual_seed(0)
    return TinyLM(5, d_model=8, n_layers=1, n_heads=2, attention="rope")


def _sample(step, gen):
    return flip_flop(4, 8, generator=gen)[:2]


def _run(**kw):
    model = _model()
    return model, train(model, _sample, CFG, progress=False, device="cpu", log_every=1, **kw)


@pytest.fixture(scope="module")
def uninterrupted():
    return _run()


def _same(uninterrupted, model, result):
    ref_model, ref = uninterrupted
    for (name, a), b in zip(ref_model.state_dict().items(), model.state_dict().values()):
        assert torch.equal(a, b), name
    assert result["history"] == ref["history"] and result["tokens_seen"] == ref["tokens_seen"]
    assert result["complete"] and result["steps_done"] == CFG.steps


KILLED_WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import torch
    from path_lib.nn.model import TinyLM
    from path_lib.training import state as S
    from path_lib.training.loop import TrainConfig, train
    from path_lib.training.tasks import flip_flop

    torch.set_num_threads(1)
    ck, marker = sys.argv[1], Path(sys.argv[2])
    writes = []
    real_write = S._write_bytes

    def pausing_write(f, data):            # the second checkpoint: half its bytes, then wait to be killed
        writes.append(len(data))
        if len(writes) < 2:
            return real_write(f, data)
        f.write(data[:len(data) // 2])
        f.flush()
        marker.write_text("half written")
        time.sleep(600)

    S._write_bytes = pausing_write
    torch.manual_seed(0)
    model = TinyLM(5, d_model=8, n_layers=1, n_heads=2, attention="rope")
    train(model, lambda step, gen: flip_flop(4, 8, generator=gen)[:2],
          TrainConfig(steps=8, lr=3e-3, warmup=2, seed=1), progress=False, device="cpu", log_every=1,
          checkpoint_path=ck, checkpoint_every=2)
""")


def test_a_process_killed_while_writing_resumes_from_the_last_checkpoint(tmp_path, uninterrupted):
    """A real training process checkpoints every 2 steps; inside the second write (step 4, half the bytes
    on disk) it is killed with SIGKILL. The step-2 checkpoint is intact; the next call removes the half
    file, says so, resumes from step 2 and ends as the uninterrupted run."""
    ck, marker = tmp_path / "ck.pt", tmp_path / "paused"
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(ck), str(marker)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()[0].decode()[-2000:]
            assert time.time() < deadline, "the training process never reached its second checkpoint"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    tmp = Path(str(ck) + ".tmp")
    assert tmp.exists() and 0 < tmp.stat().st_size       # the write it was killed in
    assert S.read_checkpoint(ck)["steps_done"] == 2       # the checkpoint before it
    with pytest.warns(UserWarning, match=r"incomplete checkpoint .*ck\.pt\.tmp.* removed.*resuming from .*ck\.pt "
                                         r"at step 2"):
        model, result = _run(checkpoint_path=str(ck), checkpoint_every=2)
    assert result["calls"] == 2
    _same(uninterrupted, model, result)
    assert not any(tmp_path.glob("ck.pt*"))               # a complete run leaves no checkpoint behind


def _pause(ck, steps, **kw):
    _, r = _run(checkpoint_path=str(ck), stop_after_steps=steps, **kw)
    assert r["steps_done"] == steps and not r["complete"]


@pytest.mark.parametrize("damage", ["truncated", "overwritten", "empty"])
def test_a_damaged_checkpoint_resumes_from_the_previous_one(tmp_path, uninterrupted, damage):
    """The newest checkpoint (step 5) is damaged after it was written; the one before it (step 4, kept as
    ``.prev``) resumes the run, with a warning naming both; the damaged file is set aside as ``.bad``."""
    ck = tmp_path / "ck.pt"
    _pause(ck, 5, checkpoint_every=2)                     # writes at steps 2, 4, then 5 (the pause)
    assert S.read_checkpoint(ck)["steps_done"] == 5
    assert S.read_checkpoint(str(ck) + ".prev")["steps_done"] == 4
    data = ck.read_bytes()
    ck.write_bytes({"truncated": data[:len(data) // 2], "overwritten": b"\0" * 64 + data[64:],
                    "empty": b""}[damage])
    with pytest.warns(UserWarning, match=r"ck\.pt cannot be read.*set aside as .*ck\.pt\.bad.*resuming from "
                                         r".*ck\.pt\.prev at step 4"):
        model, result = _run(checkpoint_path=str(ck))
    _same(uninterrupted, model, result)


def test_damaged_without_a_previous_checkpoint_is_a_named_error(tmp_path):
    ck = tmp_path / "ck.pt"
    ck.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match=r"ck\.pt cannot be read.*discard_checkpoint"):
        _run(checkpoint_path=str(ck))


def test_a_full_disk_keeps_the_previous_checkpoint(tmp_path, uninterrupted, monkeypatch):
    """Writing the step-4 checkpoint fails with ENOSPC half-way: the call raises an OSError naming the
    file, the step-2 checkpoint is untouched and no temporary file is left; once there is room again the
    run resumes from step 2 and ends as the uninterrupted run."""
    ck = tmp_path / "ck.pt"
    _pause(ck, 2)
    before = ck.read_bytes()

    def full_disk(f, data):
        f.write(data[:len(data) // 3])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(S, "_write_bytes", full_disk)
    with pytest.raises(OSError, match=r"ck\.pt: writing failed \(No space left on device\); the checkpoint "
                                      r"already there is kept") as info:
        _run(checkpoint_path=str(ck), checkpoint_every=2)
    assert info.value.errno == errno.ENOSPC
    assert ck.read_bytes() == before and not Path(str(ck) + ".tmp").exists()
    monkeypatch.undo()
    model, result = _run(checkpoint_path=str(ck), checkpoint_every=2)
    assert result["calls"] == 2
    _same(uninterrupted, model, result)


def test_killed_between_the_renames_resumes_from_the_previous_file(tmp_path, uninterrupted):
    """Where hard links are missing the old checkpoint is moved to ``.prev`` before the new one takes its
    name; a process killed between the two leaves only ``.prev``, which resumes the run."""
    ck = tmp_path / "ck.pt"
    _pause(ck, 3)
    os.replace(ck, str(ck) + ".prev")
    with pytest.warns(UserWarning, match=r"ck\.pt is missing.*resuming from .*ck\.pt\.prev at step 3"):
        model, result = _run(checkpoint_path=str(ck))
    _same(uninterrupted, model, result)


def test_save_atomically_replaces_and_keeps_one_previous(tmp_path):
    p = tmp_path / "sub" / "x.pt"
    for i in range(3):
        S.save_atomically(p, value=i)
    assert torch.load(p)["value"] == 2 and torch.load(str(p) + ".prev")["value"] == 1
    assert sorted(f.name for f in p.parent.iterdir()) == ["x.pt", "x.pt.prev"]
    S.save_atomically(p, keep_previous=False, value=3)
    assert torch.load(p)["value"] == 3 and torch.load(str(p) + ".prev")["value"] == 1
    S.discard_checkpoint(p)
    assert not any(p.parent.iterdir())
