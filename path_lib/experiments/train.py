"""One training loop for every chapter: AdamW, linear warm-up then cosine decay, gradient clipping,
periodic evaluation, optional checkpoints, a tqdm bar, seeds, JSON results with provenance.

    from path_lib.nn.model import TinyLM
    from path_lib.experiments.tasks import flip_flop
    from path_lib.experiments.train import TrainConfig, train, task_preset, PRESETS

    p = task_preset("flip_flop")                 # tiny on CPU, full on a GPU (hardware())
    sample = lambda step, gen: flip_flop(p.batch_size, generator=gen, **p.task)[:2]
    model = TinyLM(5, attention="path", **p.model)
    result = train(model, sample, p.config, eval_sets={"id": [...]})

``sample(step, generator) -> (inputs [B, T] long, targets [B, T] long, -100 = no loss)`` draws the
training batch for ``step`` from the seeded ``torch.Generator``; ``eval_sets`` maps a name to a list
of ``(inputs, targets)`` batches (fixed, so every evaluation sees the same data).
"""
from __future__ import annotations

import dataclasses
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .hardware import compute_dtype, hardware
from .provenance import write_result

__all__ = [
    "TrainConfig", "Preset", "PRESETS", "task_preset", "hardware", "set_seed", "lr_at", "masked_loss",
    "evaluate", "train", "save_result", "train_task", "task_eval_sets", "FLIP_FLOP_EVAL",
    "GeneratedEval", "run_record", "UnequalTrainingError", "check_equal_training", "comparison_table",
    "format_comparison", "paired_differences",
]

IGNORE_INDEX = -100


@dataclass
class TrainConfig:
    """Optimisation settings. ``warmup`` steps of linear warm-up to ``lr``, then cosine decay to
    ``lr * min_lr_ratio`` at ``steps``. ``eval_every=0`` evaluates only at the end."""
    steps: int = 200
    lr: float = 1e-3
    warmup: int = 20
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.01
    betas: Tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    eval_every: int = 0
    seed: int = 0
    autocast_bf16: bool = False          # bf16 autocast on CUDA (PaTH keeps w, beta, g in float32)
    checkpoint: Optional[str] = None     # path of a final checkpoint (model + optimiser state)

    def __post_init__(self):
        for name in ("steps", "warmup", "eval_every", "seed"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"{name} must be an int, got {type(v).__name__}")
            if v < (1 if name == "steps" else 0):
                raise ValueError(f"{name} must be >= {1 if name == 'steps' else 0}, got {v}")
        if self.warmup > self.steps:
            raise ValueError(f"warmup ({self.warmup}) must not exceed steps ({self.steps})")
        for name in ("lr", "weight_decay", "grad_clip", "min_lr_ratio"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise TypeError(f"{name} must be a finite float, got {v!r}")
            if v < 0 or (name == "lr" and v == 0):
                raise ValueError(f"{name} must be {'> 0' if name == 'lr' else '>= 0'}, got {v}")
        if self.min_lr_ratio > 1:
            raise ValueError(f"min_lr_ratio must lie in [0, 1], got {self.min_lr_ratio}")


@dataclass
class Preset:
    """Everything one synthetic experiment needs: optimisation, model sizes, task parameters,
    batch sizes, and (for length generalisation) evaluation lengths."""
    config: TrainConfig
    batch_size: int
    model: Dict = field(default_factory=dict)        # TinyLM kwargs: d_model, n_layers, n_heads, ...
    task: Dict = field(default_factory=dict)         # task kwargs: length, p_ignore, ...
    eval_batch_size: int = 256
    eval_batches: int = 4

    def replace(self, **kw) -> "Preset":
        return dataclasses.replace(self, **kw)


def _preset(steps, lr, warmup, batch_size, model, task, eval_batch_size=256, eval_batches=4, eval_every=0):
    return Preset(TrainConfig(steps=steps, lr=lr, warmup=warmup, eval_every=eval_every), batch_size,
                  dict(model), dict(task), eval_batch_size, eval_batches)


# tiny: a CPU run inside the book build (seconds to a minute); full: the recorded GPU runs.
PRESETS: Dict[str, Dict[str, Preset]] = {
    "flip_flop": {
        "tiny": _preset(300, 3e-3, 30, 32, dict(d_model=32, n_layers=1, n_heads=2), dict(length=64, p_ignore=0.8),
                        eval_batch_size=128, eval_batches=2),
        "full": _preset(1500, 3e-3, 100, 128, dict(d_model=64, n_layers=1, n_heads=2), dict(length=512, p_ignore=0.8),
                        eval_batch_size=256, eval_batches=8),
    },
    "a5": {
        "tiny": _preset(300, 3e-3, 30, 32, dict(d_model=32, n_layers=1, n_heads=2), dict(length=16),
                        eval_batch_size=128, eval_batches=2),
        # GPU: large batches cost no extra wall time (small models are launch-bound); the step cap is
        # far above what a run's time budget allows (the budget sets the steps), curves every 1000 steps
        "full": _preset(50000, 2e-3, 100, 512, dict(d_model=128, n_layers=1, n_heads=2), dict(length=16),
                        eval_batch_size=256, eval_batches=4, eval_every=1000),
    },
    "mqrar": {
        "tiny": _preset(300, 3e-3, 30, 32, dict(d_model=64, n_layers=2, n_heads=2),
                        dict(length=80, n_keys=8, n_pairs=32), eval_batch_size=128, eval_batches=2),
        "full": _preset(2000, 1e-3, 100, 64, dict(d_model=256, n_layers=2, n_heads=2),
                        dict(length=768, n_keys=32, n_pairs=256), eval_batch_size=128, eval_batches=4),
    },
}


def task_preset(task: str, which: Optional[str] = None) -> Preset:
    """The preset for ``task`` (a key of :data:`PRESETS`): ``which`` = "tiny" / "full", or by hardware."""
    if task not in PRESETS:
        raise ValueError(f"task must be one of {tuple(PRESETS)}, got {task!r}")
    which = hardware() if which is None else which
    if which not in ("tiny", "full"):
        raise ValueError(f"which must be 'tiny', 'full' or None, got {which!r}")
    return dataclasses.replace(PRESETS[task][which])


def set_seed(seed: int) -> None:
    """Seed Python, torch (CPU and CUDA)."""
    random.seed(seed)
    torch.manual_seed(seed)


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Learning rate at ``step`` (0-based): linear warm-up over ``cfg.warmup`` steps, then cosine to
    ``cfg.lr * cfg.min_lr_ratio`` at ``cfg.steps``."""
    if cfg.warmup and step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    span = max(cfg.steps - cfg.warmup, 1)
    progress = min(max(step - cfg.warmup, 0) / span, 1.0)
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + (cfg.lr - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def masked_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over positions with ``targets != -100``. logits ``[B, T, V]``, targets ``[B, T]``."""
    if logits.shape[:2] != targets.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and targets {tuple(targets.shape)} disagree on [B, T]")
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1),
                           ignore_index=IGNORE_INDEX)


def _autocast(device: torch.device, enabled: bool):
    if enabled and device.type == "cuda":
        return torch.autocast("cuda", dtype=compute_dtype(device))   # bfloat16, float16 before Ampere
    return torch.autocast(device.type, enabled=False)


@torch.no_grad()
def evaluate(model: nn.Module, batches: Sequence[Tuple[torch.Tensor, torch.Tensor]], *,
             device=None, autocast_bf16: bool = False, per_position: bool = False) -> Dict:
    """Loss and accuracy on the scored positions of ``batches`` (a list of ``(inputs, targets)``).

    Returns ``{"loss", "accuracy" (fraction of scored tokens right), "error" (1 - accuracy),
    "sequence_accuracy" (all scored tokens of a sequence right), "n_tokens"}``; with
    ``per_position=True`` also ``"accuracy_by_position"`` (a list over t, NaN where nothing is scored).
    """
    device = torch.device(device) if device is not None else next(model.parameters()).device
    was_training = model.training
    model.eval()
    loss_sum, right, total, seq_right, seq_total = 0.0, 0, 0, 0, 0
    pos_right = pos_total = None
    for x, y in batches:
        x, y = x.to(device), y.to(device)
        with _autocast(device, autocast_bf16):
            logits = model(x)
        mask = y != IGNORE_INDEX
        n = int(mask.sum())
        if n:
            loss_sum += float(masked_loss(logits, y)) * n
        ok = (logits.argmax(-1) == y) & mask
        right += int(ok.sum())
        total += n
        seq_right += int(((ok | ~mask).all(dim=1) & mask.any(dim=1)).sum())
        seq_total += int(mask.any(dim=1).sum())
        if per_position:
            pr, pt = ok.sum(0).double().cpu(), mask.sum(0).double().cpu()
            pos_right = pr if pos_right is None else pos_right + pr
            pos_total = pt if pos_total is None else pos_total + pt
    model.train(was_training)
    acc = right / total if total else float("nan")
    out = {"loss": loss_sum / total if total else float("nan"), "accuracy": acc, "error": 1 - acc,
           "sequence_accuracy": seq_right / seq_total if seq_total else float("nan"), "n_tokens": total}
    if per_position:
        out["accuracy_by_position"] = (pos_right / pos_total).tolist()
    return out


def _rng_state(device: torch.device) -> Dict:
    st = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if device.type == "cuda":
        st["cuda"] = torch.cuda.get_rng_state(device)
    return st


def _set_rng_state(st: Dict, device: torch.device) -> None:
    torch.set_rng_state(st["torch"])
    random.setstate(st["python"])
    if device.type == "cuda" and "cuda" in st:
        torch.cuda.set_rng_state(st["cuda"], device)


def _schedule_key(cfg: TrainConfig) -> Dict:
    """The parts of a config a resumed run must share with its checkpoint (all but the final checkpoint path)."""
    d = dataclasses.asdict(cfg)
    d.pop("checkpoint", None)
    d["betas"] = list(d["betas"])
    return d


def _check_int(name: str, v, lo: int, *, optional: bool = False) -> None:
    if optional and v is None:
        return
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{name} must be an int{' or None' if optional else ''}, got {type(v).__name__}")
    if v < lo:
        raise ValueError(f"{name} must be >= {lo}, got {v}")


def _check_targets(y: torch.Tensor, vocab: int, step: int) -> bool:
    """Raise if ``y`` holds a value outside ``[0, vocab)`` other than -100; return False if nothing is
    scored. One elementwise pass and one reduction (``.min()``) on ``y``'s device."""
    if y.dtype.is_floating_point or y.dtype.is_complex or y.dtype == torch.bool:
        raise TypeError(f"step {step}: targets must be an integer tensor, got {y.dtype}")
    if y.numel() == 0:
        return False
    ok = (y >= 0) & (y < vocab)
    code = torch.where(ok, y, torch.where(y == IGNORE_INDEX, vocab, -1))
    m = int(code.min())
    if m < 0:
        bad = torch.unique(y[code < 0])[:5].tolist()
        raise ValueError(f"step {step}: targets must lie in [0, {vocab}) (the model's logit size) or be "
                         f"{IGNORE_INDEX} (not scored); got {bad}")
    return m < vocab


def _save_checkpoint(path, **state) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = str(path) + ".tmp"
    torch.save(state, tmp)
    Path(tmp).replace(path)


def train(model: nn.Module, sample: Callable[[int, torch.Generator], Tuple[torch.Tensor, torch.Tensor]],
          config: TrainConfig, *, eval_sets: Optional[Dict[str, List]] = None, device=None,
          progress: bool = True, desc: str = "train", log_every: int = 10,
          time_limit_s: Optional[float] = None, calibrate_steps: int = 20,
          per_position: bool = False, checkpoint_path: Optional[str] = None, resume: bool = True,
          deadline: Optional[float] = None, stop_after_steps: Optional[int] = None,
          callback: Optional[Callable[[int, float], None]] = None, data_seed: Optional[int] = None,
          on_nonfinite: str = "raise", distributed=None,
          loss_fn: Optional[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = None) -> Dict:
    """Train ``model`` (``forward(inputs) -> logits [B, T, V]``) on batches from ``sample``.

    Args:
        model: an ``nn.Module``; moved to ``device``.
        sample: ``sample(step, generator) -> (inputs, targets)``; the generator is seeded by ``data_seed``
            (default ``config.seed``), so models trained with the same seed see the same batches.
        config: a :class:`TrainConfig`.
        eval_sets: ``{name: [(inputs, targets), ...]}`` (any re-iterable of batches, e.g.
            :class:`GeneratedEval`) evaluated every ``config.eval_every`` steps and at the end.
        device: default: cuda if available, else cpu.
        progress: show a tqdm bar.
        log_every: record the training loss every this many steps.
        time_limit_s: a wall-clock budget that CUTS the schedule: after ``calibrate_steps`` steps the
            step time is measured and ``config.steps`` is cut (``"steps_planned"``) so that the whole
            warm-up + cosine schedule fits; such a run is not ``complete`` (its steps differ from the
            request), so :func:`comparison_table` refuses it. Not combinable with ``checkpoint_path``.
        calibrate_steps: steps timed before fitting the schedule into ``time_limit_s``.
        per_position: the final evaluation also reports accuracy by position.
        checkpoint_path: a resumable checkpoint. If it exists (and ``resume``), training continues from
            it: model, optimiser, schedule position, data generator and RNG states, history, so that the
            result is bit-identical (on CPU) to an uninterrupted run. It is written whenever this call
            stops before the schedule ends (``deadline`` / ``stop_after_steps``).
        deadline: a ``time.time()`` value; training stops there WITHOUT changing the schedule (the run
            is then ``complete: False`` and resumes from ``checkpoint_path`` in a later call).
        stop_after_steps: stop once this many steps are done in all (same semantics as ``deadline``).
        callback: ``callback(step, loss)`` at every logged step.
        data_seed: seed of the data generator (default ``config.seed``).
        on_nonfinite: what a bad batch does. Every step, BEFORE the backward pass and the optimizer step,
            the targets are checked against the logit size (a value outside ``[0, V)`` other than -100
            is a ValueError naming the step, always) and the loss is checked. ``"raise"`` (default): a
            NaN/inf loss raises ``FloatingPointError`` and a batch with no scored position (all targets
            -100) raises ``ValueError``, both naming the step, with model and optimizer exactly as before
            that step. ``"skip"``: such a batch is skipped (no backward, no optimizer step, its tokens
            not counted in ``tokens_seen``, no history entry); the step index, the learning-rate schedule
            and the data stream still advance, so the following steps use the same lr and batches as
            a run without the bad batch. Skipped steps are listed in ``"skipped_steps"``.
            Cost: on CPU the loss is read every step (``float(loss)``); on CUDA the loss is checked only
            at logged steps (``log_every``), where the loop already reads it, so no host sync is added;
            targets are checked every step where they live (on the host before the transfer: no GPU
            sync; targets that ``sample`` returns on the GPU are checked only at logged steps).
        loss_fn: ``loss_fn(logits, targets) -> scalar`` replacing :func:`masked_loss` (e.g. a
            distillation loss, :mod:`path_lib.experiments.convert`); every other part of the loop is unchanged.

    ``distributed``: None, or the hooks of a data-parallel run (e.g. :class:`path_lib.experiments.train_cli.DistributedHooks`,
    for a model already wrapped in DDP or FSDP2, ``sample`` returning this rank's shard): ``world_size``,
    ``is_writer`` (the rank that writes files), ``mean(t) -> float`` (a scalar averaged over the ranks:
    the logged loss, so every rank takes the same decisions), ``state_dicts(model, opt)`` (full state dicts,
    a collective) and ``load_state_dicts(model, opt, model_sd, opt_sd)``. Then the loss is read every step,
    ``tokens_seen`` counts all ranks' tokens, checkpoints hold the full states and are written by the
    writer only, and ``deadline`` / ``time_limit_s`` (per-rank clocks) are refused.

    A ``KeyboardInterrupt`` during the loop closes the progress bar, writes the resumable checkpoint
    (when ``checkpoint_path`` is given; the step in progress is rolled back, so resuming is
    bit-identical to an uninterrupted run on CPU; an interrupt inside the optimizer step itself
    writes none) and re-raises.

    Returns:
        ``{"config", "history": [{"step", "loss", "lr"}], "evals": [{"step", name: metrics}],
        "final": {name: metrics} (not for a run paused to be resumed), "steps_done", "steps_planned", "steps_requested",
        "complete", "stopped_early", "tokens_seen", "final_lr", "final_train_loss" (mean training loss
        of the last 10% of steps), "train_seconds" (this call), "wall_seconds" (all calls), "calls",
        "n_parameters", "skipped_steps": [{"step", "reason"}]}``.
    """
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    if not callable(sample):
        raise TypeError(f"sample must be callable, got {type(sample).__name__}")
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    config.__post_init__()                 # a config mutated after construction (p.config.steps = -1)
    _check_int("log_every", log_every, 1)
    _check_int("calibrate_steps", calibrate_steps, 1)
    _check_int("stop_after_steps", stop_after_steps, 0, optional=True)
    for name, v in (("time_limit_s", time_limit_s), ("deadline", deadline)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v)):
            raise TypeError(f"{name} must be a number or None, got {v!r}")
    if time_limit_s is not None and not time_limit_s > 0:
        raise ValueError(f"time_limit_s must be > 0 seconds, got {time_limit_s}")
    if on_nonfinite not in ("raise", "skip"):
        raise ValueError(f"on_nonfinite must be 'raise' or 'skip', got {on_nonfinite!r}")
    if distributed is not None and (deadline is not None or time_limit_s is not None):
        raise ValueError("deadline and time_limit_s read each rank's clock, so ranks could stop at different "
                         "steps: with distributed, use stop_after_steps")
    if loss_fn is not None and not callable(loss_fn):
        raise TypeError(f"loss_fn must be callable or None, got {type(loss_fn).__name__}")
    if time_limit_s is not None and checkpoint_path is not None:
        raise ValueError("time_limit_s cuts the schedule to fit a budget; a resumable run (checkpoint_path) "
                         "keeps its schedule: pass deadline instead")
    eval_sets = dict(eval_sets or {})
    device = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    steps_requested = config.steps
    set_seed(config.seed)
    gen = torch.Generator()
    gen.manual_seed(config.seed if data_seed is None else data_seed)
    model.to(device).train()
    decay = [p for n, p in model.named_parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.requires_grad and p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": config.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=config.lr, betas=config.betas)
    history, evals, recent = [], [], []
    keep = max(1, steps_requested // 10)
    first, tokens_seen, wall_before, calls = 0, 0, 0.0, 1
    skipped: List[Dict] = []
    if checkpoint_path is not None and resume and Path(checkpoint_path).exists():
        ck = torch.load(checkpoint_path, map_location="cpu", weights_only=False)
        if ck["schedule"] != _schedule_key(config) or ck.get("data_seed") != data_seed:
            raise ValueError(f"checkpoint {checkpoint_path} was written for another configuration "
                             f"({ck['schedule']}, data_seed {ck.get('data_seed')}): refusing to resume")
        if distributed is not None:
            distributed.load_state_dicts(model, opt, ck["model"], ck["optimizer"])
        else:
            model.load_state_dict(ck["model"])
            model.to(device)
            opt.load_state_dict(ck["optimizer"])
        gen.set_state(ck["generator"])
        _set_rng_state(ck["rng"], device)
        history, evals, recent = ck["history"], ck["evals"], ck["recent_losses"]
        first, tokens_seen, wall_before, calls = ck["steps_done"], ck["tokens_seen"], ck["wall_seconds"], ck["calls"] + 1
        skipped = list(ck.get("skipped_steps", []))
    bar = None
    if progress:
        from tqdm import tqdm        # plain text bar (no widget state)
        bar = tqdm(total=config.steps, initial=first, desc=desc, leave=False)
    t0 = time.perf_counter()
    stopped_early = paused = False
    steps_planned = config.steps
    t_cal = None
    lr = lr_at(max(first - 1, 0), config)

    def run_evals(at_step, by_position=False):
        rec = {"step": at_step}
        for name, batches in eval_sets.items():
            rec[name] = evaluate(model, batches, device=device, autocast_bf16=config.autocast_bf16,
                                 per_position=by_position)
        evals.append(rec)
        return rec

    if (first and eval_sets and config.eval_every and first % config.eval_every == 0 and first < config.steps
            and (not evals or evals[-1]["step"] != first)):
        run_evals(first)             # an interrupt (checkpointed) came between a step and its evaluation
    per_step_check = device.type != "cuda" or distributed is not None
    snap = None                      # (generator, RNG states, tokens_seen) at the start of the step in progress
    phase, n_done = "post", first    # "pre": nothing of this step committed; "update": optimizer step running

    def states():
        return distributed.state_dicts(model, opt) if distributed is not None else (model.state_dict(),
                                                                                   opt.state_dict())

    def checkpoint(steps_done, gen_state, rng, tokens, wall):
        model_sd, opt_sd = states()
        if distributed is not None and not distributed.is_writer:
            return
        _save_checkpoint(checkpoint_path, model=model_sd, optimizer=opt_sd, generator=gen_state,
                         rng=rng, history=history, evals=evals, recent_losses=[float(v) for v in recent],
                         steps_done=steps_done, tokens_seen=tokens, wall_seconds=wall, calls=calls,
                         schedule=_schedule_key(config), data_seed=data_seed, skipped_steps=skipped)

    step = first - 1
    try:
        while step + 1 < steps_planned:
            if (deadline is not None and time.time() > deadline) or \
                    (stop_after_steps is not None and step + 1 >= stop_after_steps):
                stopped_early = paused = True
                break
            if checkpoint_path is not None:
                snap = (gen.get_state(), _rng_state(device), tokens_seen)
            phase = "pre"
            step += 1
            if time_limit_s is not None:
                if step == 2:
                    t_cal = time.perf_counter()
                elif step == 2 + calibrate_steps and t_cal is not None:
                    per_step = (time.perf_counter() - t_cal) / calibrate_steps
                    fit = int((time_limit_s - (time.perf_counter() - t0)) / per_step) + step
                    if fit < steps_planned:
                        steps_planned = max(fit, step + 1)
                        config = dataclasses.replace(config, steps=steps_planned,
                                                     warmup=min(config.warmup, steps_planned))
                        if bar is not None:
                            bar.total = steps_planned
            lr = lr_at(step, config)
            for group in opt.param_groups:
                group["lr"] = lr
            x, y = sample(step, gen)
            y_host = y if y.device.type == "cpu" else None
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with _autocast(device, config.autocast_bf16):
                logits = model(x)
            logged = step % log_every == 0 or step == steps_planned - 1
            reason = None
            if y_host is not None or per_step_check or logged:
                if not _check_targets(y_host if y_host is not None else y, logits.shape[-1], step):
                    reason = "no scored position (all targets -100)"
                    if on_nonfinite == "raise":
                        raise ValueError(f"step {step}: the batch has no scored position (every target is "
                                         f"{IGNORE_INDEX}); model and optimizer are as before this step")
            if reason is None:
                loss = masked_loss(logits, y) if loss_fn is None else loss_fn(logits, y)
                lv = None
                if per_step_check or logged:
                    lv = float(loss.detach()) if distributed is None else distributed.mean(loss.detach())
                if lv is not None and not math.isfinite(lv):
                    reason = f"loss {lv}"
                    if on_nonfinite == "raise":
                        raise FloatingPointError(f"training loss became {lv} at step {step} (before the optimizer "
                                                 f"step: model and optimizer are as before this step)")
            if reason is None:
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if config.grad_clip:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
                phase = "update"
                opt.step()
                tokens_seen += x.numel() * (1 if distributed is None else distributed.world_size)
                recent.append(loss.detach() if distributed is None else torch.tensor(lv))
                if len(recent) > keep:
                    del recent[0]
                if logged:
                    history.append({"step": step, "loss": lv, "lr": lr})
            else:
                phase = "update"
                skipped.append({"step": step, "reason": reason})
            n_done = step + 1
            phase = "post"
            if logged and reason is None:
                if bar is not None:
                    bar.set_postfix(loss=f"{lv:.4f}")
                if callback is not None:
                    callback(step, lv)
            if bar is not None:
                bar.update(1)
            if config.eval_every and (step + 1) % config.eval_every == 0 and step + 1 < steps_planned and eval_sets:
                run_evals(step + 1)
            if time_limit_s is not None and time.perf_counter() - t0 > time_limit_s:
                stopped_early = True
                break
    except BaseException as exc:
        if bar is not None:
            bar.close()
        if (isinstance(exc, KeyboardInterrupt) and checkpoint_path is not None and phase != "update"
                and distributed is None):           # (distributed: the other ranks are not at this point)
            wall = wall_before + time.perf_counter() - t0
            if phase == "pre" and snap is not None:     # roll the step in progress back
                checkpoint(n_done, snap[0], snap[1], snap[2], wall)
            else:
                checkpoint(n_done, gen.get_state(), _rng_state(device), tokens_seen, wall)
        raise
    if bar is not None:
        bar.close()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    steps_done = step + 1
    recent = [float(v) for v in recent]
    train_seconds = time.perf_counter() - t0
    wall = wall_before + train_seconds
    complete = steps_done == steps_requested and steps_planned == steps_requested
    if not complete and checkpoint_path is not None and steps_done < steps_planned:
        checkpoint(steps_done, gen.get_state(), _rng_state(device), tokens_seen, wall)
    resumable = paused and checkpoint_path is not None     # stopped to be resumed: no final evaluation
    final = run_evals(steps_done, per_position) if (eval_sets and not resumable) else {"step": steps_done}
    writer = distributed is None or distributed.is_writer
    if distributed is not None:
        distributed.mean(torch.zeros(()))   # every rank is past its last read of the checkpoint
    if writer and complete and checkpoint_path is not None and Path(checkpoint_path).exists():
        Path(checkpoint_path).unlink()        # finished: the resumable state is no longer needed
    if config.checkpoint and not resumable:
        model_sd, opt_sd = states()
        if writer:
            Path(config.checkpoint).parent.mkdir(parents=True, exist_ok=True)
            torch.save({"model": model_sd, "optimizer": opt_sd, "step": steps_done,
                        "config": dataclasses.asdict(config)}, config.checkpoint)
    return {"config": dataclasses.asdict(config), "history": history, "evals": evals,
            "final": {k: v for k, v in final.items() if k != "step"}, "steps_done": steps_done,
            "train_seconds": train_seconds, "wall_seconds": wall, "calls": calls,
            "stopped_early": stopped_early, "steps_planned": steps_planned,
            "steps_requested": steps_requested, "complete": complete, "tokens_seen": tokens_seen,
            "final_lr": lr, "final_train_loss": (math.fsum(recent) / len(recent)) if recent else float("nan"),
            "data_seed": config.seed if data_seed is None else data_seed,
            "n_parameters": sum(p.numel() for p in model.parameters()), "skipped_steps": skipped}


def save_result(path, result: Dict, *, command: Optional[str] = None) -> Path:
    """Write a result dict as JSON with a provenance block (:func:`path_lib.experiments.provenance.write_result`)."""
    return write_result(path, result, command=command)


# ----------------------------------------------------------------------------------------------
# equal training: run records, the check, and comparisons that refuse unequal runs
# ----------------------------------------------------------------------------------------------

class UnequalTrainingError(ValueError):
    """Raised by :func:`comparison_table` when the runs do not form an equal-training comparison.
    The message is one plain sentence saying why."""


def run_record(result: Dict, *, model: str, seed: int, metrics: Optional[Dict[str, float]] = None,
               data_key: Optional[str] = None, batch_size: Optional[int] = None) -> Dict:
    """The compact per-(model, seed) record every comparison is built from.

    ``result`` is :func:`train`'s dict (or one with the same keys). ``data_key`` names the data stream
    (task, its parameters, batch size, data seed): runs of one seed must share it to have seen the same
    batches. Returns ``{"model", "seed", "steps_done", "steps_planned", "tokens_seen", "final_lr",
    "wall_seconds", "complete", "schedule", "data_key", "metrics"}`` (JSON-ready).
    """
    cfg = result["config"]
    schedule = {k: cfg[k] for k in ("lr", "warmup", "min_lr_ratio", "weight_decay", "grad_clip") if k in cfg}
    schedule["betas"] = list(cfg.get("betas", ()))
    schedule["steps"] = result.get("steps_requested", cfg["steps"])
    if batch_size is not None:
        schedule["batch_size"] = batch_size
    return {"model": model, "seed": int(seed), "steps_done": int(result["steps_done"]),
            "steps_planned": int(result.get("steps_requested", result.get("steps_planned"))),
            "tokens_seen": int(result.get("tokens_seen", 0)), "final_lr": float(result.get("final_lr", float("nan"))),
            "wall_seconds": float(result.get("wall_seconds", result.get("train_seconds", 0.0))),
            "complete": bool(result.get("complete", False)), "schedule": schedule,
            "data_key": data_key if data_key is not None else f"data_seed={result.get('data_seed', seed)}",
            "metrics": dict(metrics or {})}


def check_equal_training(records: Sequence[Dict], *, min_seeds: int = 3) -> Optional[str]:
    """None if ``records`` (from :func:`run_record`) form an equal-training comparison, else one plain
    sentence saying why not. Equal training means: every run complete; the same steps planned and done,
    the same tokens and the same schedule for all; every model with the same seeds, at least
    ``min_seeds`` of them; and, within a seed, the same data stream (``data_key``) for every model."""
    if not records:
        return "There are no runs to compare."
    for r in records:
        if not r.get("complete"):
            return (f"The run of {r['model']} (seed {r['seed']}) is incomplete: {r['steps_done']} of "
                    f"{r['steps_planned']} steps, so no comparison is shown.")
    for key, what in (("steps_planned", "planned steps"), ("steps_done", "steps done"),
                      ("tokens_seen", "training tokens")):
        vals = {r[key] for r in records}
        if len(vals) > 1:
            return f"The runs differ in {what} ({', '.join(map(str, sorted(vals)))}), so they are not comparable."
    sched = {json_key(r["schedule"]) for r in records}
    if len(sched) > 1:
        return "The runs used different optimiser schedules, so they are not comparable."
    seeds = {}
    for r in records:
        seeds.setdefault(r["model"], []).append(r["seed"])
    for m, ss in seeds.items():
        if len(set(ss)) != len(ss):
            return f"{m} has more than one run with the same seed."
    sets = {tuple(sorted(ss)) for ss in seeds.values()}
    if len(sets) > 1:
        return "The models were not all trained with the same seeds."
    n = len(next(iter(sets)))
    if n < min_seeds:
        return f"Each model has {n} seed{'s' if n != 1 else ''}; a comparison needs at least {min_seeds}."
    for seed in next(iter(sets)):
        keys = {r["data_key"] for r in records if r["seed"] == seed}
        if len(keys) > 1:
            return f"With seed {seed} the models did not see the same data, so they are not comparable."
    return None


def json_key(d) -> str:
    import json
    return json.dumps(d, sort_keys=True, default=str)


def _metric(r: Dict, metric) -> float:
    return float(metric(r)) if callable(metric) else float(r["metrics"][metric])


def comparison_table(records: Sequence[Dict], metric, *, min_seeds: int = 3,
                     models: Optional[Sequence[str]] = None) -> Dict[str, Dict]:
    """Mean and spread of ``metric`` across seeds, per model, from equal-training runs only.

    ``metric``: a key of ``record["metrics"]`` or a callable ``record -> float``. ``models``: a subset
    and order (default: order of first appearance). Raises :class:`UnequalTrainingError` (one plain
    sentence) when :func:`check_equal_training` finds the runs unequal. Returns ``{model: {"mean", "std"
    (sample, ddof 1), "min", "max", "n", "values", "seeds"}}``.
    """
    if models is not None:
        records = [r for r in records if r["model"] in models]
    why = check_equal_training(records, min_seeds=min_seeds)
    if why is not None:
        raise UnequalTrainingError(why)
    order = list(models) if models is not None else list(dict.fromkeys(r["model"] for r in records))
    out = {}
    for m in order:
        rs = sorted((r for r in records if r["model"] == m), key=lambda r: r["seed"])
        vals = [_metric(r, metric) for r in rs]
        mean = math.fsum(vals) / len(vals)
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else float("nan")
        out[m] = {"mean": mean, "std": std, "min": min(vals), "max": max(vals), "n": len(vals),
                  "values": vals, "seeds": [r["seed"] for r in rs]}
    return out


def paired_differences(records: Sequence[Dict], metric, a: str, b: str, *, min_seeds: int = 3) -> Dict:
    """``metric(a) - metric(b)`` seed by seed (the same batches per seed): ``{"diffs", "mean",
    "all_negative", "all_positive"}``. Refuses unequal runs like :func:`comparison_table`."""
    t = comparison_table(records, metric, min_seeds=min_seeds, models=[a, b])
    d = [x - y for x, y in zip(t[a]["values"], t[b]["values"])]
    return {"diffs": d, "mean": math.fsum(d) / len(d), "all_negative": all(x < 0 for x in d),
            "all_positive": all(x > 0 for x in d)}


def format_comparison(table: Dict[str, Dict], *, label: str = "value", fmt: str = "{:.3f}") -> str:
    """A Markdown table of :func:`comparison_table`'s result: mean ± sd, min – max, seeds."""
    rows = [f"| model | {label}: mean ± sd | min – max | seeds |", "|---|---|---|---|"]
    for m, t in table.items():
        sd = fmt.format(t["std"]) if math.isfinite(t["std"]) else "-"
        rows.append(f"| {m} | {fmt.format(t['mean'])} ± {sd} | {fmt.format(t['min'])} – {fmt.format(t['max'])} "
                    f"| {t['n']} |")
    return "\n".join(rows)


class GeneratedEval:
    """A fixed evaluation set generated on the fly, batch by batch, until at least ``min_scored``
    positions are scored (e.g. a million flip-flop reads without holding them in memory).

    Iterating yields the same ``(inputs, targets)`` batches every time (batch ``b`` uses seed
    ``seed + b``), so it can be passed to :func:`evaluate` or as one of :func:`train`'s ``eval_sets``.
    """

    def __init__(self, task: str, batch_size: int, *, min_scored: int, seed: int = 12345,
                 max_batches: int = 100_000, **task_kwargs):
        from .tasks import TASKS
        if task not in TASKS:
            raise ValueError(f"task must be one of {tuple(TASKS)}, got {task!r}")
        if min_scored < 1 or batch_size < 1:
            raise ValueError(f"min_scored and batch_size must be positive, got {min_scored}, {batch_size}")
        self.task, self.batch_size, self.min_scored, self.seed = task, batch_size, min_scored, seed
        self.max_batches, self.task_kwargs = max_batches, dict(task_kwargs)

    def __iter__(self):
        from .tasks import make_task
        scored = 0
        for b in range(self.max_batches):
            x, y, _ = make_task(self.task, self.batch_size, seed=self.seed + b, **self.task_kwargs)
            yield x, y
            scored += int((y != IGNORE_INDEX).sum())
            if scored >= self.min_scored:
                return
        raise RuntimeError(f"{self.max_batches} batches scored only {scored} < {self.min_scored} positions")


# ----------------------------------------------------------------------------------------------
# one call per synthetic experiment (used by the chapter and experiments/run_synthetic.py)
# ----------------------------------------------------------------------------------------------

FLIP_FLOP_EVAL = {"id": 0.8, "ood_sparse": 0.98, "ood_dense": 0.1}


def task_eval_sets(task: str, preset: Preset, *, seed: int = 12345, **task_overrides) -> Dict[str, List]:
    """Fixed evaluation batches for ``task`` (seeded apart from training):

    * flip_flop: ``id`` (the preset's p_ignore), ``ood_sparse`` (0.98), ``ood_dense`` (0.1), same length;
    * a5, mqrar: ``id`` at the preset's task parameters (with ``task_overrides``, e.g. ``length``).
    """
    from .tasks import make_task

    kw = dict(preset.task, **task_overrides)
    out: Dict[str, List] = {}
    if task == "flip_flop":
        for i, (name, p) in enumerate(FLIP_FLOP_EVAL.items()):
            kw_i = dict(kw, p_ignore=preset.task.get("p_ignore", 0.8) if name == "id" else p)
            out[name] = [make_task(task, preset.eval_batch_size, seed=seed + 1000 * i + b, **kw_i)[:2]
                         for b in range(preset.eval_batches)]
    else:
        out["id"] = [make_task(task, preset.eval_batch_size, seed=seed + b, **kw)[:2]
                     for b in range(preset.eval_batches)]
    return out


def train_task(task: str, attention: str, preset: Preset, *, device=None, progress: bool = True,
               eval_sets: Optional[Dict[str, List]] = None, time_limit_s: Optional[float] = None,
               per_position: bool = False, return_model: bool = False, seed: Optional[int] = None,
               checkpoint_path: Optional[str] = None, deadline: Optional[float] = None,
               stop_after_steps: Optional[int] = None, **attention_kwargs) -> Dict:
    """Build a ``TinyLM(attention=...)`` with ``preset.model`` sizes, train it on ``task`` with the
    preset, evaluate on :func:`task_eval_sets` (or ``eval_sets``). Returns :func:`train`'s dict plus
    ``"task", "attention", "model" (the sizes), "task_kwargs", "seed", "record"`` (:func:`run_record`,
    metrics ``"<set>_accuracy"`` and ``"<set>_error"``), and with ``return_model=True`` the trained
    ``TinyLM`` under ``"module"`` (not JSON: drop it before saving). For ``"path"``/``"path_fox"`` the
    backend defaults to ``"auto"`` (Triton kernels on CUDA when importable, else the blockwise mirror).

    ``seed`` (default ``preset.config.seed``) seeds the initialisation and the data: runs of different
    models with the same seed see the same batches. ``checkpoint_path``, ``deadline``,
    ``stop_after_steps``: a resumable run (see :func:`train`)."""
    from ..nn.model import TinyLM
    from .tasks import make_task

    if seed is not None:
        preset = preset.replace(config=dataclasses.replace(preset.config, seed=seed))
    _, _, vocab = make_task(task, 1, seed=0, **preset.task)
    set_seed(preset.config.seed)                      # the initialisation is seeded too
    model = TinyLM(len(vocab), attention=attention, **preset.model, **attention_kwargs)
    kw, bs = dict(preset.task), preset.batch_size

    def sample(step, gen):
        return make_task(task, bs, generator=gen, **kw)[:2]

    if eval_sets is None:
        eval_sets = task_eval_sets(task, preset)
    result = train(model, sample, preset.config, eval_sets=eval_sets, device=device, progress=progress,
                   desc=f"{task}/{attention}", time_limit_s=time_limit_s, per_position=per_position,
                   checkpoint_path=checkpoint_path, deadline=deadline, stop_after_steps=stop_after_steps)
    metrics = {}
    for name, m in result["final"].items():
        metrics[f"{name}_accuracy"], metrics[f"{name}_error"] = m["accuracy"], m["error"]
        metrics[f"{name}_scored"] = m["n_tokens"]
    data_key = f"{task}|{json_key(kw)}|batch={bs}|data_seed={preset.config.seed}"
    result.update({"task": task, "attention": attention, "model": dict(preset.model),
                   "task_kwargs": kw, "batch_size": bs, "seed": preset.config.seed,
                   "record": run_record(result, model=attention, seed=preset.config.seed, metrics=metrics,
                                        data_key=data_key, batch_size=bs)})
    if return_model:
        result["module"] = model
    return result
