"""The state a :func:`path_lib.training.loop.train` run carries from step to step and, through a
resumable checkpoint, from call to call: :class:`Progress`, and :class:`Checkpoints` (load with the checks
that name a damaged file or one of another model, save atomically, finish), with the RNG-state helpers.
"""
from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn

__all__ = ["Progress", "Checkpoints", "read_checkpoint", "check_same_model", "schedule_key", "rng_state",
           "set_rng_state", "save_atomically", "CHECKPOINT_KEYS"]


def rng_state(device: torch.device) -> Dict:
    """Python's and torch's RNG states (and the CUDA generator's of ``device``)."""
    st = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if device.type == "cuda":
        st["cuda"] = torch.cuda.get_rng_state(device)
    return st


def set_rng_state(st: Dict, device: torch.device) -> None:
    """Restore what :func:`rng_state` returned."""
    torch.set_rng_state(st["torch"])
    random.setstate(st["python"])
    if device.type == "cuda" and "cuda" in st:
        torch.cuda.set_rng_state(st["cuda"], device)


def schedule_key(cfg) -> Dict:
    """The parts of a config (a ``TrainConfig``) a resumed run must share with its checkpoint (all but the final checkpoint path)."""
    d = dataclasses.asdict(cfg)
    d.pop("checkpoint", None)
    d["betas"] = list(d["betas"])
    return d


def save_atomically(path, **state) -> None:
    """``torch.save(state)`` to a temporary file renamed to ``path``: a reader never sees half a file."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = str(path) + ".tmp"
    torch.save(state, tmp)
    Path(tmp).replace(path)


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


CHECKPOINT_KEYS = ("model", "optimizer", "generator", "rng", "history", "evals", "recent_losses", "steps_done",
                    "tokens_seen", "wall_seconds", "calls", "schedule")


def read_checkpoint(path) -> Dict:
    """The resumable checkpoint at ``path``, or a ValueError naming the file (unreadable, not one of ours)."""
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
    strip = lambda k: k[len("module."):] if k.startswith("module.") else k
    mine = {strip(k): tuple(v.shape) for k, v in model.state_dict().items() if isinstance(v, torch.Tensor)}
    theirs = {strip(k): tuple(v.shape) for k, v in saved.items() if isinstance(v, torch.Tensor)}
    diffs = [f"missing {sorted(set(mine) - set(theirs))[:5]}" if set(mine) - set(theirs) else "",
             f"unexpected {sorted(set(theirs) - set(mine))[:5]}" if set(theirs) - set(mine) else ""]
    diffs += [f"{k} is {theirs[k]} in the file but {mine[k]} in the model"
              for k in sorted(set(mine) & set(theirs)) if mine[k] != theirs[k]][:5]
    diffs = [d for d in diffs if d]
    if diffs:
        raise ValueError(f"checkpoint {path} was written for another model: " + "; ".join(diffs))


#: what :meth:`Checkpoints.snapshot` keeps: the data generator's state, :func:`rng_state`, the tokens seen
_Snapshot = Tuple[torch.Tensor, Dict, int]


class Checkpoints:
    """The resumable checkpoint at ``path`` (None: none): :meth:`load` at the start of a call, :meth:`save`
    when a call stops before the schedule ends or is interrupted, :meth:`finish` after the last step. Full
    states (``distributed.state_dicts`` on a data-parallel run), written by the writer rank only."""

    def __init__(self, path, config, data_seed, distributed):
        self.path, self.schedule, self.data_seed, self.distributed = path, schedule_key(config), data_seed, distributed

    def states(self, model, opt):
        if self.distributed is not None:
            return self.distributed.state_dicts(model, opt)
        return model.state_dict(), opt.state_dict()

    def load(self, model, opt, gen, device) -> Optional[Progress]:
        """Restore model, optimizer, data generator and RNG states; the run's progress (None: no file)."""
        if self.path is None or not Path(self.path).exists():
            return None
        ck = read_checkpoint(self.path)
        if ck["schedule"] != self.schedule or ck.get("data_seed") != self.data_seed:
            raise ValueError(f"checkpoint {self.path} was written for another configuration "
                             f"({ck['schedule']}, data_seed {ck.get('data_seed')}): refusing to resume")
        check_same_model(self.path, ck["model"], model)
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
            raise ValueError(f"checkpoint {self.path} does not fit this run ({type(e).__name__}: "
                             f"{str(e)[:300]})") from e
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
        if writer and complete and self.path is not None and Path(self.path).exists():
            Path(self.path).unlink()
        if config.checkpoint and not resumable:
            model_sd, opt_sd = self.states(model, opt)
            if writer:
                Path(config.checkpoint).parent.mkdir(parents=True, exist_ok=True)
                torch.save({"model": model_sd, "optimizer": opt_sd, "step": steps_done,
                            "config": dataclasses.asdict(config)}, config.checkpoint)
