"""The state a :func:`path_lib.training.loop.train` run carries from step to step and, through a
resumable checkpoint, from call to call: :class:`Progress`, and :class:`Checkpoints` (load with the checks
that name a damaged file or one of another model, save atomically, finish), with the RNG-state helpers.

Faults lose nothing that was saved. A checkpoint is written to ``PATH.tmp`` (flushed and ``fsync``-ed),
the checkpoint it replaces is kept as ``PATH.prev``, and the new file is renamed to ``PATH`` (an atomic
``os.replace``; the folder is ``fsync``-ed too). So a process killed while writing, a write that fails
(a full disk: ``OSError``), and a checkpoint found truncated or corrupted later each leave a complete
earlier checkpoint, and :meth:`Checkpoints.load` resumes from the newest one that reads, saying so in a
warning (the unusable file is set aside as ``PATH.bad``).
"""
from __future__ import annotations

import dataclasses
import errno as _errno
import io
import os
import random
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn

from ..validation import (as_device, check_instance, check_int, check_mapping, check_number, check_path,
                          check_seed)

__all__ = ["Progress", "Checkpoints", "read_checkpoint", "check_same_model", "schedule_key", "rng_state",
           "set_rng_state", "save_atomically", "discard_checkpoint", "CHECKPOINT_KEYS"]


def _aside(path, suffix: str) -> Path:
    """``PATH.tmp`` (being written), ``PATH.prev`` (the checkpoint before), ``PATH.bad`` (set aside)."""
    return Path(str(path) + suffix)


def rng_state(device: torch.device) -> Dict:
    """Python's and torch's RNG states (and the CUDA generator's of ``device``)."""
    device = as_device(device)
    st = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if device.type == "cuda":
        st["cuda"] = torch.cuda.get_rng_state(device)
    return st


def set_rng_state(st: Dict, device: torch.device) -> None:
    """Restore what :func:`rng_state` returned."""
    check_mapping(st, "st", keys=("torch", "python"))
    device = as_device(device)
    if not isinstance(st["torch"], torch.Tensor) or st["torch"].dtype != torch.uint8:
        raise TypeError(f"st['torch'] must be torch's RNG state (a uint8 tensor), got {type(st['torch']).__name__}")
    if not isinstance(st["python"], tuple):
        raise TypeError(f"st['python'] must be Python's RNG state (a tuple), got {type(st['python']).__name__}")
    try:
        torch.set_rng_state(st["torch"])
        random.setstate(st["python"])
    except (RuntimeError, ValueError, TypeError) as e:
        raise ValueError(f"st is not an RNG state of rng_state() ({type(e).__name__}: {e})") from None
    if device.type == "cuda" and "cuda" in st:
        torch.cuda.set_rng_state(st["cuda"], device)


def schedule_key(cfg) -> Dict:
    """The parts of a config (a ``TrainConfig``) a resumed run must share with its checkpoint (all but the final checkpoint path)."""
    if not dataclasses.is_dataclass(cfg) or isinstance(cfg, type) or not hasattr(cfg, "betas"):
        raise TypeError(f"cfg must be a TrainConfig, got {type(cfg).__name__}")
    d = dataclasses.asdict(cfg)
    d.pop("checkpoint", None)
    d["betas"] = list(d["betas"])
    return d


def _write_bytes(f, data: memoryview) -> None:
    """Write ``data`` to the open file ``f`` in pieces of 1 MiB (a full disk raises ``OSError`` here)."""
    for start in range(0, len(data), 1 << 20):
        f.write(data[start:start + (1 << 20)])


def _fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable (where the platform allows opening a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save_atomically(path, *, keep_previous: bool = True, **state) -> None:
    """``torch.save(state)`` to ``path`` so that no fault loses the checkpoint already there.

    The state is serialised in memory, written to ``path.tmp``, flushed and ``fsync``-ed; then the checkpoint
    at ``path`` (if any) is kept as ``path.prev`` (``keep_previous``) and ``path.tmp`` renamed to ``path``
    (``os.replace``: atomic), and the folder ``fsync``-ed. A reader sees the old file or the new one, never
    half a file; a process killed at any point leaves a complete checkpoint at ``path`` or ``path.prev``. A
    failed write (e.g. ``OSError`` ENOSPC, a full disk) removes ``path.tmp``, leaves ``path`` as it was and
    raises an ``OSError`` naming ``path``."""
    path = check_path(path, "path", kind="file")
    if not isinstance(keep_previous, bool):
        raise TypeError(f"keep_previous must be a bool, got {type(keep_previous).__name__}")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp, prev = _aside(path, ".tmp"), _aside(path, ".prev")
    buffer = io.BytesIO()
    torch.save(state, buffer)
    try:
        with open(tmp, "wb") as f:
            _write_bytes(f, buffer.getbuffer())
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        tmp.unlink(missing_ok=True)
        kept = "; the checkpoint already there is kept, and a run resumes from it" if path.exists() else ""
        raise OSError(e.errno or _errno.EIO, f"checkpoint {path}: writing failed "
                      f"({os.strerror(e.errno) if e.errno else e}){kept}") from e
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if keep_previous and path.exists():
        link = _aside(path, ".prev.tmp")
        try:                                  # a second name for the old file: PATH itself never vanishes
            link.unlink(missing_ok=True)
            os.link(path, link)
            os.replace(link, prev)
        except OSError:                       # no hard links here: move it (a crash now leaves PATH.prev)
            os.replace(path, prev)
    os.replace(tmp, path)
    _fsync_folder(path.parent)


def discard_checkpoint(path) -> None:
    """Remove the checkpoint at ``path`` with its ``.prev``, ``.tmp`` and ``.bad`` companions (a fresh run)."""
    path = check_path(path, "path", kind="file")
    for p in (path, _aside(path, ".prev"), _aside(path, ".tmp"), _aside(path, ".prev.tmp"), _aside(path, ".bad")):
        p.unlink(missing_ok=True)


@dataclass
class Progress:
    """What a run carries from step to step and, through its checkpoint, from call to call."""
    history: List[Dict] = field(default_factory=list)     # {"step", "loss", "lr"} at the logged steps
    evals: List[Dict] = field(default_factory=list)       # {"step", name: metrics}
    recent: List = field(default_factory=list)            # the last losses (for final_train_loss)
    skipped: List[Dict] = field(default_factory=list)     # {"step", "reason"}
    steps_done: int = 0
    tokens_seen: int = 0
    wall_before: float = 0.0                              # seconds spent by earlier calls
    calls: int = 1

    def __post_init__(self):
        for name in ("history", "evals", "recent", "skipped"):
            check_instance(getattr(self, name), name, list, "a list")
        check_int(self.steps_done, "steps_done", minimum=0)
        check_int(self.tokens_seen, "tokens_seen", minimum=0)
        check_number(self.wall_before, "wall_before", minimum=0.0)
        check_int(self.calls, "calls", minimum=1)


CHECKPOINT_KEYS = ("model", "optimizer", "generator", "rng", "history", "evals", "recent_losses", "steps_done",
                    "tokens_seen", "wall_seconds", "calls", "schedule")


def read_checkpoint(path) -> Dict:
    """The resumable checkpoint at ``path``, or a ValueError naming the file (unreadable, not one of ours)."""
    path = check_path(path, "path", kind="file")
    if not path.exists():
        raise ValueError(f"path {str(path)!r}: no checkpoint there")
    try:
        ck = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:                  # torch.load raises many types for a damaged file
        raise ValueError(f"checkpoint {path} cannot be read, the file is corrupted or truncated "
                         f"({type(e).__name__}: {str(e)[:200]}); delete it to start over") from e
    if not isinstance(ck, dict) or not isinstance(ck.get("model"), dict):
        raise ValueError(f"checkpoint {path} is not a checkpoint of train() (it holds a {type(ck).__name__})")
    missing = [k for k in CHECKPOINT_KEYS if k not in ck]
    if missing:
        raise ValueError(f"checkpoint {path} is not a resumable checkpoint of train(): it lacks {missing}")
    return ck


def check_same_model(path, saved: Dict, model: nn.Module) -> None:
    """A ValueError naming ``path`` and what differs unless the saved model state has ``model``'s parameter
    and buffer names and shapes (DDP's ``module.`` prefix ignored)."""
    check_mapping(saved, "saved")
    check_instance(model, "model", nn.Module, "an nn.Module")
    strip = lambda k: k[len("module."):] if k.startswith("module.") else k
    mine = {strip(k): tuple(v.shape) for k, v in model.state_dict().items() if isinstance(v, torch.Tensor)}
    theirs = {strip(k): tuple(v.shape) for k, v in saved.items() if isinstance(v, torch.Tensor)}
    diffs = [f"missing {sorted(set(mine) - set(theirs))[:5]}" if set(mine) - set(theirs) else "",
             f"unexpected {sorted(set(theirs) - set(mine))[:5]}" if set(theirs) - set(mine) else ""]
    diffs += [f"{k} is {theirs[k]} in the file but {mine[k]} in the model"
              for k in sorted(set(mine) & set(theirs)) if mine[k] != theirs[k]][:5]
    diffs = [d for d in diffs if d]
    if diffs:
        raise ValueError(f"checkpoint {path} was written for another model: " + "; ".join(diffs)
                         + " (the saved state does not fit model)")


#: what :meth:`Checkpoints.snapshot` keeps: the data generator's state, :func:`rng_state`, the tokens seen
_Snapshot = Tuple[torch.Tensor, Dict, int]


class Checkpoints:
    """The resumable checkpoint at ``path`` (None: none): :meth:`load` at the start of a call, :meth:`save`
    when a call stops before the schedule ends or is interrupted, :meth:`finish` after the last step. Full
    states (``distributed.state_dicts`` on a data-parallel run), written by the writer rank only."""

    def __init__(self, path, config, data_seed, distributed):
        check_path(path, "path", optional=True, kind="file")
        if not dataclasses.is_dataclass(config) or isinstance(config, type) or not hasattr(config, "betas"):
            raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
        check_seed(data_seed, "data_seed", optional=True)
        if distributed is not None and not hasattr(distributed, "state_dicts"):
            raise TypeError(f"distributed must be None or a data-parallel run's hooks, got {type(distributed).__name__}")
        self.path, self.schedule, self.data_seed, self.distributed = path, schedule_key(config), data_seed, distributed

    def states(self, model, opt):
        if self.distributed is not None:
            return self.distributed.state_dicts(model, opt)
        return model.state_dict(), opt.state_dict()

    def _usable(self, notes: List[str]) -> Optional[Tuple[Path, Dict]]:
        """The newest checkpoint that reads, ``PATH`` then ``PATH.prev`` (None: neither exists). A leftover
        ``PATH.tmp`` (a write that was stopped) is removed, an unreadable ``PATH`` set aside as ``PATH.bad``;
        ``notes`` says what happened. A ValueError when files exist but none reads."""
        path = Path(self.path)
        tmp, prev = _aside(path, ".tmp"), _aside(path, ".prev")
        if tmp.exists():
            tmp.unlink()
            notes.append(f"an incomplete checkpoint {tmp} (a process stopped while writing it) was removed")
        problems = []
        for candidate in (path, prev):
            if not candidate.exists():
                continue
            try:
                return candidate, read_checkpoint(candidate)
            except ValueError as e:
                problems.append(str(e))
                if candidate == path and prev.exists():
                    os.replace(path, _aside(path, ".bad"))
                    notes.append(f"{e}; it was set aside as {_aside(path, '.bad')}")
        if problems:
            raise ValueError("no usable checkpoint: " + " | ".join(problems) + f"; remove {path} and {prev} "
                             "(path_lib.training.state.discard_checkpoint) to start over")
        return None

    def load(self, model, opt, gen, device) -> Optional[Progress]:
        """Restore model, optimizer, data generator and RNG states; the run's progress (None: no file).
        Resumes from ``PATH``, or from ``PATH.prev`` where ``PATH`` is missing or damaged, with a warning
        that says which file and step it resumes from and why."""
        if self.path is None:
            return None
        notes: List[str] = []
        found = self._usable(notes)
        if found is None:
            if notes:
                warnings.warn("; ".join(notes) + "; no earlier checkpoint: starting from step 0", stacklevel=3)
            return None
        where, ck = found
        if ck["schedule"] != self.schedule or ck.get("data_seed") != self.data_seed:
            raise ValueError(f"checkpoint {where} was written for another configuration "
                             f"({ck['schedule']}, data_seed {ck.get('data_seed')}): refusing to resume")
        check_same_model(where, ck["model"], model)
        try:
            if self.distributed is not None:
                self.distributed.load_state_dicts(model, opt, ck["model"], ck["optimizer"])
            else:
                model.load_state_dict(ck["model"])
                model.to(device)
                opt.load_state_dict(ck["optimizer"])
            gen.set_state(ck["generator"])
            set_rng_state(ck["rng"], device)
        except (RuntimeError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"checkpoint {where} does not fit this run ({type(e).__name__}: "
                             f"{str(e)[:300]})") from e
        if notes or where != Path(self.path):
            if where != Path(self.path) and not any(str(Path(self.path)) in n for n in notes):
                notes.append(f"checkpoint {self.path} is missing (a process stopped while replacing it)")
            warnings.warn("; ".join(notes) + f"; resuming from {where} at step {ck['steps_done']}", stacklevel=3)
        return Progress(ck["history"], ck["evals"], ck["recent_losses"], list(ck.get("skipped_steps", [])),
                        ck["steps_done"], ck["tokens_seen"], ck["wall_seconds"], ck["calls"] + 1)

    def save(self, model, opt, prog: Progress, gen_state, rng, tokens_seen: int, wall: float) -> None:
        """Write the state after ``prog.steps_done`` steps (atomically: a temporary file renamed)."""
        model_sd, opt_sd = self.states(model, opt)
        if self.distributed is not None and not self.distributed.is_writer:
            return
        save_atomically(self.path, model=model_sd, optimizer=opt_sd, generator=gen_state, rng=rng,
                         history=prog.history, evals=prog.evals, recent_losses=[float(v) for v in prog.recent],
                         steps_done=prog.steps_done, tokens_seen=tokens_seen, wall_seconds=wall, calls=prog.calls,
                         schedule=self.schedule, data_seed=self.data_seed, skipped_steps=prog.skipped)

    def snapshot(self, gen, device, tokens_seen: int) -> Optional[_Snapshot]:
        """The state to roll back to if the step about to start is interrupted (None without a path)."""
        return None if self.path is None else (gen.get_state(), rng_state(device), tokens_seen)

    def on_interrupt(self, model, opt, prog: Progress, phase: str, snap: Optional[_Snapshot], gen, device,
                     wall: float) -> None:
        """Save after a ``KeyboardInterrupt``: the step in progress rolled back (``phase`` "pre", ``snap``
        from :meth:`snapshot`); nothing from inside the optimizer step (``"update"``) or on a
        data-parallel run (the other ranks are not at this point)."""
        if self.path is None or phase == "update" or self.distributed is not None:
            return
        state: _Snapshot = snap if phase == "pre" and snap is not None else (gen.get_state(), rng_state(device),
                                                                             prog.tokens_seen)
        self.save(model, opt, prog, *state, wall)

    def finish(self, model, opt, config, steps_done: int, complete: bool, resumable: bool) -> None:
        """Remove the resumable checkpoint of a complete run; write ``config.checkpoint`` (the final model
        and optimizer) unless the run paused to be resumed."""
        writer = self.distributed is None or self.distributed.is_writer
        if self.distributed is not None:
            self.distributed.mean(torch.zeros(()))   # every rank is past its last read of the checkpoint
        if writer and complete and self.path is not None:
            discard_checkpoint(self.path)
        if config.checkpoint and not resumable:
            model_sd, opt_sd = self.states(model, opt)
            if writer:
                save_atomically(config.checkpoint, keep_previous=False, model=model_sd, optimizer=opt_sd,
                                step=steps_done, config=dataclasses.asdict(config))
