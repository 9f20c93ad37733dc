"""One training loop for every chapter: AdamW, linear warm-up then cosine decay, gradient clipping,
periodic evaluation, optional checkpoints, a tqdm bar, seeds, JSON results with provenance.

    from path_lib.nn.model import TinyLM
    from path_lib.training.tasks import flip_flop
    from path_lib.training.loop import TrainConfig, train, task_preset, PRESETS

    p = task_preset("flip_flop")                 # this machine's preset (path_lib.hardware.preset_name)
    sample = lambda step, gen: flip_flop(p.batch_size, generator=gen, **p.task)[:2]
    model = TinyLM(5, attention="path", **p.model)
    result = train(model, sample, p.config, eval_sets={"id": [...]})

``sample(step, generator) -> (inputs [B, T] long, targets [B, T] long, -100 = no loss)`` draws the
training batch for ``step`` from the seeded ``torch.Generator``; ``eval_sets`` maps a name to a list
of ``(inputs, targets)`` batches (fixed, so every evaluation sees the same data).
"""
from __future__ import annotations

import dataclasses
import inspect
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..ledger.comparison import (UnequalTrainingError, check_equal_training, comparison_table, format_comparison,
                         json_key, paired_differences, run_record)
from ..hardware import complete_presets, compute_dtype, preset_name
from ..records import write_result
from ..validation import (as_device, check_bool, check_callable, check_choice, check_finite, check_instance,
                          check_int, check_mapping, check_number, check_numbers, check_path, check_seed, check_str,
                          check_tensor, values_checked)
from .state import Checkpoints, Progress, rng_state

__all__ = [
    "TrainConfig", "Preset", "PRESETS", "task_preset", "set_seed", "lr_at", "masked_loss",
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
        """Check every field (a TypeError / ValueError naming it); ``betas`` becomes a tuple of floats."""
        check_int(self.steps, "steps", minimum=1)
        check_int(self.warmup, "warmup", minimum=0)
        check_int(self.eval_every, "eval_every", minimum=0)
        check_seed(self.seed, "seed")
        if self.warmup > self.steps:
            raise ValueError(f"warmup ({self.warmup}) must not exceed steps ({self.steps})")
        check_number(self.lr, "lr", positive=True)
        check_number(self.weight_decay, "weight_decay", minimum=0.0)
        check_number(self.grad_clip, "grad_clip", minimum=0.0)
        check_number(self.min_lr_ratio, "min_lr_ratio", minimum=0.0, maximum=1.0)
        b1, b2 = check_numbers(self.betas, "betas", min_len=2, max_len=2, minimum=0.0, maximum=1.0, open_max=True)
        self.betas = (b1, b2)
        check_bool(self.autocast_bf16, "autocast_bf16")
        if check_path(self.checkpoint, "checkpoint", optional=True, kind="file") is not None:
            self.checkpoint = str(self.checkpoint)


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

    def __post_init__(self):
        """Check every field (a TypeError / ValueError naming it)."""
        check_instance(self.config, "config", TrainConfig)
        self.config.__post_init__()
        check_int(self.batch_size, "batch_size", minimum=1)
        check_mapping(self.model, "model")
        check_mapping(self.task, "task")
        check_int(self.eval_batch_size, "eval_batch_size", minimum=1)
        check_int(self.eval_batches, "eval_batches", minimum=1)

    def replace(self, **kw) -> "Preset":
        return dataclasses.replace(self, **kw)


def _preset(steps, lr, warmup, batch_size, model, task, eval_batch_size=256, eval_batches=4, eval_every=0):
    return Preset(TrainConfig(steps=steps, lr=lr, warmup=warmup, eval_every=eval_every), batch_size,
                  dict(model), dict(task), eval_batch_size, eval_batches)


# tiny: a CPU run inside the book build (seconds to a minute); full: the recorded GPU runs; every other
# preset of path_lib.hardware.PRESET_TABLE (small: a T4-class GPU) is set where a task gives it, else
# between tiny and full (path_lib.hardware.complete_presets).
_TASK_PRESETS: Dict[str, Dict[str, Preset]] = {
    "flip_flop": {
        "tiny": _preset(300, 3e-3, 30, 32, dict(d_model=32, n_layers=1, n_heads=2), dict(length=64, p_ignore=0.8),
                        eval_batch_size=128, eval_batches=2),
        "full": _preset(1500, 3e-3, 100, 128, dict(d_model=64, n_layers=1, n_heads=2), dict(length=512, p_ignore=0.8),
                        eval_batch_size=256, eval_batches=8),
        # a T4: full's model and steps on half the length and batch
        "small": _preset(1500, 3e-3, 100, 64, dict(d_model=64, n_layers=1, n_heads=2), dict(length=256, p_ignore=0.8),
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
    # retrieval with a positive control: the book at the training size must be learned by some model
    "phonebook": {
        "tiny": _preset(300, 3e-3, 30, 32, dict(d_model=64, n_layers=2, n_heads=2),
                        dict(n_pairs=8, n_queries=8, n_keys=64, n_values=64), eval_batch_size=128, eval_batches=2),
        "full": _preset(3000, 1e-3, 100, 128, dict(d_model=128, n_layers=2, n_heads=2),
                        dict(n_pairs=32, n_queries=32, n_keys=256, n_values=256), eval_batch_size=256,
                        eval_batches=4),
    },
}
PRESETS: Dict[str, Dict[str, Preset]] = {task: complete_presets(p) for task, p in _TASK_PRESETS.items()}


def task_preset(task: str, which: Optional[str] = None) -> Preset:
    """The preset for ``task`` (a key of :data:`PRESETS`): ``which``, a preset's name
    (``path_lib.hardware.PRESET_NAMES``), or None for this machine's (:func:`path_lib.hardware.preset_name`)."""
    check_choice(task, "task", tuple(PRESETS))
    which = preset_name() if which is None else which
    check_choice(which, "which", tuple(PRESETS[task]))
    p = PRESETS[task][which]      # a copy whose dicts are its own: a caller's edit never reaches PRESETS
    return dataclasses.replace(p, config=dataclasses.replace(p.config), model=dict(p.model), task=dict(p.task))


def set_seed(seed: int) -> None:
    """Seed Python, torch (CPU and CUDA). ``seed``: an int in ``[0, 2**63 - 1]``."""
    check_seed(seed)
    random.seed(seed)
    torch.manual_seed(seed)


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Learning rate at ``step`` (0-based): linear warm-up over ``cfg.warmup`` steps, then cosine to
    ``cfg.lr * cfg.min_lr_ratio`` at ``cfg.steps`` (and after it)."""
    check_int(step, "step", minimum=0)
    check_instance(cfg, "cfg", TrainConfig)
    if cfg.warmup and step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    span = max(cfg.steps - cfg.warmup, 1)
    progress = min(max(step - cfg.warmup, 0) / span, 1.0)
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + (cfg.lr - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def masked_loss(logits: torch.Tensor, targets: torch.Tensor, *, check_values: Optional[bool] = None) -> torch.Tensor:
    """Mean cross-entropy over positions with ``targets != -100``. logits ``[B, T, V]`` (float), targets
    ``[B, T]`` (int64; each in ``[0, V)`` or -100). ``check_values`` (None: on CPU tensors only, no device
    sync): finite logits and targets in range, else a ValueError naming them; a batch with nothing scored
    is a ValueError always (its mean would be NaN)."""
    check_tensor(logits, "logits", ndim=3, finite=False)
    if not isinstance(targets, torch.Tensor):
        raise TypeError(f"targets must be a torch.Tensor, got {type(targets).__name__}")
    if targets.dtype not in (torch.int64,):
        raise TypeError(f"targets must be an int64 tensor, got {targets.dtype}")
    if logits.shape[:2] != targets.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and targets {tuple(targets.shape)} disagree on [B, T]")
    if targets.device != logits.device:
        raise ValueError(f"targets must be on logits' device ({logits.device}), got {targets.device}")
    if logits.shape[-1] == 0:
        raise ValueError("logits must have a vocabulary of at least one entry (V >= 1)")
    if values_checked(check_values, logits):
        check_finite(logits, "logits")
        if not _check_targets(targets, logits.shape[-1], None):
            raise ValueError(f"targets score no position (every target is {IGNORE_INDEX} or the batch is empty)")
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1),
                           ignore_index=IGNORE_INDEX)


def _autocast(device: torch.device, enabled: bool):
    if enabled and device.type == "cuda":
        return torch.autocast("cuda", dtype=compute_dtype(device))   # bfloat16, float16 before Ampere
    return torch.autocast(device.type, enabled=False)


def _check_batch(batch, where: str) -> Tuple[torch.Tensor, torch.Tensor]:
    """One evaluation batch: an ``(inputs, targets)`` pair of tensors, or a TypeError naming ``where``."""
    if not (isinstance(batch, (tuple, list)) and len(batch) == 2 and all(isinstance(t, torch.Tensor) for t in batch)):
        raise TypeError(f"{where} must hold (inputs, targets) pairs of tensors, got a {type(batch).__name__}")
    return batch[0], batch[1]


def _batches(batches, where: str):
    """A re-iterable of batches (a list, a tuple, a :class:`GeneratedEval`, ...), not a tensor or a str."""
    if isinstance(batches, (str, bytes, dict, torch.Tensor)) or not hasattr(batches, "__iter__"):
        raise TypeError(f"{where} must be a list (or other re-iterable) of (inputs, targets) batches, "
                        f"got {type(batches).__name__}")
    if isinstance(batches, (list, tuple)):
        for b in batches:
            _check_batch(b, where)
    return batches


@torch.no_grad()
def evaluate(model: nn.Module, batches: Sequence[Tuple[torch.Tensor, torch.Tensor]], *,
             device=None, autocast_bf16: bool = False, per_position: bool = False) -> Dict:
    """Loss and accuracy on the scored positions of ``batches`` (a list of ``(inputs, targets)``).

    Returns ``{"loss", "accuracy" (fraction of scored tokens right), "error" (1 - accuracy),
    "sequence_accuracy" (all scored tokens of a sequence right), "n_tokens"}``; with
    ``per_position=True`` also ``"accuracy_by_position"`` (a list over t, NaN where nothing is scored).
    Targets must be int64 in ``[0, V)`` or -100 (a ValueError naming ``batches`` otherwise).
    """
    check_instance(model, "model", nn.Module, "an nn.Module")
    return _evaluate(model, _batches(batches, "batches"), device=as_device(device) if device is not None else None,
                     autocast_bf16=check_bool(autocast_bf16, "autocast_bf16"),
                     per_position=check_bool(per_position, "per_position"), where="batches")


@torch.no_grad()
def _evaluate(model: nn.Module, batches, *, device, autocast_bf16: bool, per_position: bool, where: str) -> Dict:
    """:func:`evaluate` on checked arguments; a bad batch is an error naming ``where``."""
    first = next(model.parameters(), None)
    device = torch.device(device) if device is not None else (first.device if first is not None else torch.device("cpu"))
    was_training = model.training
    model.eval()
    loss_sum, right, total, seq_right, seq_total = 0.0, 0, 0, 0, 0
    pos_right: Optional[torch.Tensor] = None                 # per position, summed over the batches
    pos_total: Optional[torch.Tensor] = None
    for batch in batches:
        x, y = _check_batch(batch, where)
        x, y = x.to(device), y.to(device)
        with _autocast(device, autocast_bf16):
            logits = model(x)
        if not isinstance(logits, torch.Tensor) or logits.dim() != 3 or logits.shape[:2] != y.shape:
            raise ValueError(f"{where}: the model's logits {tuple(getattr(logits, 'shape', ()))} do not fit the "
                             f"targets {tuple(y.shape)} ([B, T, V] against [B, T])")
        if y.dtype != torch.int64:
            raise TypeError(f"{where}: targets must be int64, got {y.dtype}")
        try:
            _check_targets(y, logits.shape[-1], None)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
        mask = y != IGNORE_INDEX
        n = int(mask.sum())
        if n:
            loss_sum += float(masked_loss(logits, y, check_values=False)) * n
        ok = (logits.argmax(-1) == y) & mask
        right += int(ok.sum())
        total += n
        seq_right += int(((ok | ~mask).all(dim=1) & mask.any(dim=1)).sum())
        seq_total += int(mask.any(dim=1).sum())
        if per_position:
            pr, pt = ok.sum(0).double().cpu(), mask.sum(0).double().cpu()
            pos_right = pr if pos_right is None or pr.shape != pos_right.shape else pos_right + pr
            pos_total = pt if pos_total is None or pt.shape != pos_total.shape else pos_total + pt
    model.train(was_training)
    acc = right / total if total else float("nan")
    out: Dict[str, Union[float, List[float]]] = {
        "loss": loss_sum / total if total else float("nan"), "accuracy": acc, "error": 1 - acc,
        "sequence_accuracy": seq_right / seq_total if seq_total else float("nan"), "n_tokens": total}
    if per_position:                                         # (no batches: no positions)
        out["accuracy_by_position"] = [] if pos_right is None or pos_total is None else (pos_right / pos_total).tolist()
    return out


def _check_targets(y: torch.Tensor, vocab: int, step: Optional[int]) -> bool:
    """Raise if ``y`` holds a value outside ``[0, vocab)`` other than -100; return False if nothing is
    scored. One elementwise pass and one reduction (``.min()``) on ``y``'s device."""
    at = "" if step is None else f"step {step}: "
    if y.dtype.is_floating_point or y.dtype.is_complex or y.dtype == torch.bool:
        raise TypeError(f"{at}targets must be an integer tensor, got {y.dtype}")
    if y.numel() == 0:
        return False
    ok = (y >= 0) & (y < vocab)
    code = torch.where(ok, y, torch.where(y == IGNORE_INDEX, vocab, -1))
    m = int(code.min())
    if m < 0:
        bad = torch.unique(y[code < 0])[:5].tolist()
        raise ValueError(f"{at}targets must lie in [0, {vocab}) (the model's logit size) or be "
                         f"{IGNORE_INDEX} (not scored); got {bad}")
    return m < vocab


# ----------------------------------------------------------------------------------------------
# the training loop's parts: arguments, the time budget, bad batches, one step (checkpoints: train_state)
# ----------------------------------------------------------------------------------------------

def _accepts(fn, n_args: int) -> bool:
    """Whether ``fn`` can be called with ``n_args`` positional arguments (True where Python cannot tell)."""
    try:
        inspect.signature(fn).bind(*range(n_args))
    except TypeError:
        return False
    except ValueError:                     # no signature (some builtins): let the call decide
        return True
    return True


_HOOKS = ("world_size", "is_writer", "mean", "state_dicts", "load_state_dicts")


def _check_train_args(model, sample, config, *, eval_sets, device, progress, desc, log_every, time_limit_s,
                      calibrate_steps, per_position, checkpoint_path, resume, deadline, stop_after_steps,
                      callback, data_seed, on_nonfinite, distributed, loss_fn, checkpoint_every) -> None:
    """:func:`train`'s arguments, or a TypeError / ValueError naming the bad one."""
    check_instance(config, "config", TrainConfig)
    check_callable(sample, "sample")
    if not _accepts(sample, 2):
        raise TypeError("sample must take (step, generator), two positional arguments")
    check_instance(model, "model", nn.Module, "an nn.Module")
    if not any(True for _ in model.parameters()):
        raise ValueError("model has no parameters to train")
    config.__post_init__()                 # a config mutated after construction (p.config.steps = -1)
    check_mapping(eval_sets, "eval_sets", optional=True)
    for name, batches in (eval_sets or {}).items():
        check_str(name, "eval_sets' keys")
        _batches(batches, f"eval_sets[{name!r}]")
    if device is not None:
        as_device(device, "device")
    check_bool(progress, "progress")
    check_str(desc, "desc", empty=True)
    check_int(log_every, "log_every", minimum=1)
    check_int(calibrate_steps, "calibrate_steps", minimum=1)
    check_bool(per_position, "per_position")
    check_path(checkpoint_path, "checkpoint_path", optional=True, kind="file")
    check_bool(resume, "resume")
    check_number(deadline, "deadline", finite=False, optional=True)
    check_number(time_limit_s, "time_limit_s", positive=True, finite=False, optional=True)
    check_int(stop_after_steps, "stop_after_steps", minimum=0, optional=True)
    check_callable(callback, "callback", optional=True)
    if callback is not None and not _accepts(callback, 2):
        raise TypeError("callback must take (step, loss), two positional arguments")
    check_seed(data_seed, "data_seed", optional=True)
    check_choice(on_nonfinite, "on_nonfinite", ("raise", "skip"))
    check_callable(loss_fn, "loss_fn", optional=True)
    if loss_fn is not None and not _accepts(loss_fn, 2):
        raise TypeError("loss_fn must take (logits, targets), two positional arguments")
    if distributed is not None:
        missing = [h for h in _HOOKS if not hasattr(distributed, h)]
        if missing:
            raise TypeError(f"distributed must be None or a data-parallel run's hooks (DistributedHooks), "
                            f"got a {type(distributed).__name__} without {missing}")
        if deadline is not None or time_limit_s is not None:
            raise ValueError("deadline and time_limit_s read each rank's clock, so ranks could stop at different "
                             "steps: with distributed, use stop_after_steps")
    if check_int(checkpoint_every, "checkpoint_every", minimum=1, optional=True) is not None \
            and checkpoint_path is None:
        raise ValueError("checkpoint_every needs checkpoint_path (where to write the checkpoints)")
    if time_limit_s is not None and checkpoint_path is not None:
        raise ValueError("time_limit_s cuts the schedule to fit a budget; a resumable run (checkpoint_path) "
                         "keeps its schedule: pass deadline instead")


def _checked_batch(batch, step: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """``sample``'s ``(inputs, targets)``, or a named error (checked before the model sees them)."""
    if not (isinstance(batch, (tuple, list)) and len(batch) == 2
            and all(isinstance(t, torch.Tensor) for t in batch)):
        raise TypeError(f"step {step}: sample must return (inputs, targets), two tensors, got "
                        f"{type(batch).__name__}")
    x, y = batch
    if x.numel() == 0 or y.numel() == 0:
        raise ValueError(f"step {step}: sample returned an empty batch (inputs {tuple(x.shape)}, targets "
                         f"{tuple(y.shape)}); every batch needs at least one sequence of at least one token")
    return x, y


def _optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on the matrices (``dim >= 2``) only."""
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": config.weight_decay},
                              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                             lr=config.lr, betas=config.betas)


class _TimeBudget:
    """``time_limit_s`` (None: no budget) CUTS the schedule: steps ``2 .. 2 + calibrate_steps`` are timed,
    then ``config.steps`` is cut so that the whole warm-up + cosine schedule fits in the budget."""

    def __init__(self, limit_s: Optional[float], calibrate_steps: int, t0: float):
        self.limit_s, self.calibrate_steps, self.t0 = limit_s, calibrate_steps, t0
        self.t_cal: Optional[float] = None                   # when the timed steps began

    def fit(self, step: int, config: TrainConfig) -> TrainConfig:
        """``config`` as it stands at the start of ``step``: cut once, after the timed steps."""
        if self.limit_s is None:
            return config
        if step == 2:
            self.t_cal = time.perf_counter()
        elif step == 2 + self.calibrate_steps and self.t_cal is not None:
            per_step = max((time.perf_counter() - self.t_cal) / self.calibrate_steps, 1e-9)
            fit = int((self.limit_s - (time.perf_counter() - self.t0)) / per_step) + step
            if fit < config.steps:
                planned = max(fit, step + 1)
                return dataclasses.replace(config, steps=planned, warmup=min(config.warmup, planned))
        return config

    def spent(self) -> bool:
        return self.limit_s is not None and time.perf_counter() - self.t0 > self.limit_s


class _Step:
    """One optimisation step with its checks, in order: the targets (outside ``[0, V)`` and not -100: a
    ValueError, always; nothing scored), the loss (finite), the backward pass, the gradient's total norm
    (finite; one fused norm, the one clipping at ``grad_clip`` computes anyway), the optimizer step. A
    failed check is handled by ``on_nonfinite`` ("raise": the named error; "skip": recorded in
    ``skipped``), always before the optimizer step. ``phase``: "pre" (nothing of the step committed),
    "update" (committed or being committed), "post" (done); the loop reads it on an interrupt."""

    def __init__(self, model, opt, config: TrainConfig, device, loss_fn, distributed, on_nonfinite, skipped):
        self.model, self.opt, self.config, self.device = model, opt, config, device
        self.loss_fn, self.distributed, self.on_nonfinite, self.skipped = loss_fn, distributed, on_nonfinite, skipped
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.every_step = device.type != "cuda" or distributed is not None   # else: at logged steps (no sync)
        self.phase = "post"

    def _bad(self, step: int, reason: str, error: Exception) -> str:
        if self.on_nonfinite == "raise":
            raise error
        self.phase = "update"
        self.opt.zero_grad(set_to_none=True)             # a skipped step leaves no gradient behind
        self.skipped.append({"step": step, "reason": reason})
        return reason

    def _read(self, t: torch.Tensor) -> float:
        t = t.detach()
        t = t.full_tensor() if hasattr(t, "full_tensor") else t             # FSDP2: a DTensor norm
        return float(t) if self.distributed is None else self.distributed.mean(t)

    def __call__(self, step: int, lr: float, x, y, logged: bool):
        """Step ``step`` at learning rate ``lr``: ``(reason, loss value, loss)``, why the step was skipped
        (None: it was taken), the loss read to the host (None where not read) and the loss tensor."""
        for group in self.opt.param_groups:
            group["lr"] = lr
        y_host = y if y.device.type == "cpu" else None
        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        with _autocast(self.device, self.config.autocast_bf16):
            logits = self.model(x)
        check = self.every_step or logged
        if (y_host is not None or check) and not _check_targets(y if y_host is None else y_host,
                                                                 logits.shape[-1], step):
            return self._bad(step, "no scored position (all targets -100)", ValueError(
                f"step {step}: the batch has no scored position (every target is {IGNORE_INDEX}); model and "
                "optimizer are as before this step")), None, None
        loss = masked_loss(logits, y, check_values=False) if self.loss_fn is None else self.loss_fn(logits, y)
        lv = self._read(loss) if check else None
        if lv is not None and not math.isfinite(lv):
            return self._bad(step, f"loss {lv}", FloatingPointError(
                f"training loss became {lv} at step {step} (before the optimizer step: model and optimizer "
                "are as before this step)")), None, None
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        grads = [p.grad for p in self.params if p.grad is not None]
        norm: Optional[torch.Tensor]
        if self.config.grad_clip:
            norm = torch.nn.utils.clip_grad_norm_(self.params, self.config.grad_clip)
        else:
            norm = torch.nn.utils.get_total_norm(grads) if grads else None
        gv = self._read(norm) if check and norm is not None else None
        if gv is not None and not math.isfinite(gv):
            return self._bad(step, f"gradient norm {gv}", FloatingPointError(
                f"the gradient became non-finite (total norm {gv}) at step {step}, with a finite loss {lv} "
                "(before the optimizer step: model and optimizer are as before this step)")), None, None
        self.phase = "update"
        self.opt.step()
        return None, lv, loss


def _run_evals(model, eval_sets: Dict, config: TrainConfig, device, evals: List[Dict], at_step: int,
               by_position: bool = False) -> Dict:
    rec: Dict[str, Union[int, Dict]] = {"step": at_step}
    for name, batches in eval_sets.items():
        rec[name] = _evaluate(model, batches, device=device, autocast_bf16=config.autocast_bf16,
                              per_position=by_position, where=f"eval_sets[{name!r}]")
    evals.append(rec)
    return rec


def _bar(progress: bool, total: int, initial: int, desc: str):
    if not progress:
        return None
    from tqdm import tqdm        # plain text bar (no widget state)
    return tqdm(total=total, initial=initial, desc=desc, leave=False)


def _book(prog: Progress, step: int, lr: float, lv, loss, n_tokens: int, logged: bool, keep: int,
          distributed) -> None:
    """Count a step that was taken: its tokens, its loss among the ``keep`` recent ones, the history."""
    prog.tokens_seen += n_tokens
    prog.recent = (prog.recent + [loss.detach() if distributed is None else torch.tensor(lv)])[-keep:]
    if logged:
        prog.history.append({"step": step, "loss": lv, "lr": lr})


def _report(bar, callback, step: int, lv: Optional[float]) -> None:
    """The bar and the callback after ``step`` (``lv``: the logged loss, None when nothing is logged)."""
    if lv is not None:
        if bar is not None:
            bar.set_postfix(loss=f"{lv:.4f}")
        if callback is not None:
            callback(step, lv)
    if bar is not None:
        bar.update(1)


def _evaluation_due(prog: Progress, config: TrainConfig, eval_sets: Dict) -> bool:
    """A resumed run whose interrupt (checkpointed) came between a step and its evaluation."""
    first = prog.steps_done
    return bool(first and eval_sets and config.eval_every and first % config.eval_every == 0
                and first < config.steps and (not prog.evals or prog.evals[-1]["step"] != first))


def _result(model, config: TrainConfig, prog: Progress, final: Dict, lr: float, **counts) -> Dict:
    """:func:`train`'s dict (``counts``: steps_requested, train_seconds, stopped_early, complete, data_seed)."""
    recent = [float(v) for v in prog.recent]
    return {"config": dataclasses.asdict(config), "history": prog.history, "evals": prog.evals,
            "final": {k: v for k, v in final.items() if k != "step"}, "steps_done": prog.steps_done,
            "wall_seconds": prog.wall_before + counts["train_seconds"], "calls": prog.calls,
            "steps_planned": config.steps, "tokens_seen": prog.tokens_seen, "final_lr": lr,
            "final_train_loss": math.fsum(recent) / len(recent) if recent else float("nan"),
            "n_parameters": sum(p.numel() for p in model.parameters()), "skipped_steps": prog.skipped, **counts}


def train(model: nn.Module, sample: Callable[[int, torch.Generator], Tuple[torch.Tensor, torch.Tensor]],
          config: TrainConfig, *, eval_sets: Optional[Dict[str, List]] = None, device=None,
          progress: bool = True, desc: str = "train", log_every: int = 10,
          time_limit_s: Optional[float] = None, calibrate_steps: int = 20,
          per_position: bool = False, checkpoint_path: Optional[str] = None, resume: bool = True,
          deadline: Optional[float] = None, stop_after_steps: Optional[int] = None,
          callback: Optional[Callable[[int, float], None]] = None, data_seed: Optional[int] = None,
          on_nonfinite: str = "raise", distributed=None,
          loss_fn: Optional[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = None,
          checkpoint_every: Optional[int] = None) -> Dict:
    """Train ``model`` (``forward(inputs) -> logits [B, T, V]``) on batches from ``sample``.

    Args:
        model: an ``nn.Module``; moved to ``device`` (default: cuda if available, else cpu).
        sample: ``sample(step, generator) -> (inputs [B, T], targets [B, T])``, not empty; the generator is
            seeded by ``data_seed`` (default ``config.seed``): models trained with one seed see the same batches.
        config: a :class:`TrainConfig`.
        eval_sets: ``{name: [(inputs, targets), ...]}`` (any re-iterable of batches, e.g.
            :class:`GeneratedEval`) evaluated every ``config.eval_every`` steps and at the end.
        progress, desc: a tqdm bar and its label. log_every: record the training loss every this many steps.
        time_limit_s: a wall-clock budget that CUTS the schedule: after ``calibrate_steps`` timed steps
            ``config.steps`` is cut (``"steps_planned"``) so that the whole warm-up + cosine schedule fits;
            such a run is not ``complete``, so :func:`comparison_table` refuses it. Not with ``checkpoint_path``.
        per_position: the final evaluation also reports accuracy by position.
        checkpoint_path: a resumable checkpoint. If it exists (and ``resume``), training continues from it
            (model, optimiser, schedule position, data generator and RNG states, history: bit-identical on
            CPU to an uninterrupted run); a file of another model or a damaged one is a ValueError naming
            it. It is written whenever this call stops before the schedule ends, and every ``checkpoint_every``
            steps. Writes are atomic and keep the previous checkpoint (``path_lib.training.state``): a process
            killed while writing, a failed write (a full disk: ``OSError``) or a damaged file later leaves the
            last good checkpoint, and the next call resumes from it with a warning saying so.
        checkpoint_every: with ``checkpoint_path``, also write the checkpoint after every this many steps
            (a run killed outright, without a ``KeyboardInterrupt``, then loses at most that many steps).
        deadline: a ``time.time()`` value; training stops there WITHOUT changing the schedule (the run
            is then ``complete: False`` and resumes from ``checkpoint_path`` in a later call).
        stop_after_steps: stop once this many steps are done in all (same semantics as ``deadline``).
        callback: ``callback(step, loss)`` at every logged step.
        on_nonfinite: what a bad batch does, always BEFORE the optimizer step (targets outside ``[0, V)``
            other than -100 are a ValueError naming the step, always). ``"raise"`` (default): a batch with
            no scored position is a ``ValueError``, a NaN/inf loss or gradient (its total norm, after the
            backward pass) a ``FloatingPointError``, each naming the step, with model and optimizer as before
            that step. ``"skip"``: the step makes no optimizer step (its tokens not counted, no history entry)
            and is listed in ``"skipped_steps"``; step index, schedule and data stream advance as without it.
            Cost: on CPU the loss and the gradient norm are read every step, on CUDA at the logged steps only
            (no added host sync); targets on the host before the transfer (on the GPU: at the logged steps).
        loss_fn: ``loss_fn(logits, targets) -> scalar`` replacing :func:`masked_loss` (e.g. distillation).
        distributed: None, or the hooks of a data-parallel run (e.g. ``train_cli.DistributedHooks``, the model
            already wrapped in DDP or FSDP2, ``sample`` returning this rank's shard): ``world_size``,
            ``is_writer`` (the rank that writes files), ``mean(t) -> float`` (a scalar averaged over the ranks,
            so every rank decides alike), ``state_dicts(model, opt)`` (full states, a collective) and
            ``load_state_dicts(model, opt, model_sd, opt_sd)``. The loss is then read every step,
            ``tokens_seen`` counts all ranks, and ``deadline`` / ``time_limit_s`` are refused.

    A ``KeyboardInterrupt`` in the loop closes the bar, writes the resumable checkpoint (with
    ``checkpoint_path``; the step in progress rolled back, so resuming is bit-identical on CPU; none from
    inside the optimizer step) and re-raises.

    Returns:
        dict: ``config``; ``history``, ``[{"step", "loss", "lr"}]``; ``evals``, ``[{"step", name: metrics}]``;
        ``final``, ``{name: metrics}`` (not for a run paused to be resumed); ``steps_done``,
        ``steps_planned``, ``steps_requested``, ``complete``, ``stopped_early``, ``tokens_seen``,
        ``final_lr``, ``final_train_loss`` (mean of the last 10% of steps), ``train_seconds`` (this call),
        ``wall_seconds`` (all calls), ``calls``, ``data_seed``, ``n_parameters``; ``skipped_steps``,
        ``[{"step", "reason"}]``.
    """
    _check_train_args(model, sample, config, eval_sets=eval_sets, device=device, progress=progress, desc=desc,
                      log_every=log_every, time_limit_s=time_limit_s, calibrate_steps=calibrate_steps,
                      per_position=per_position, checkpoint_path=checkpoint_path, resume=resume, deadline=deadline,
                      stop_after_steps=stop_after_steps, callback=callback, data_seed=data_seed,
                      on_nonfinite=on_nonfinite, distributed=distributed, loss_fn=loss_fn,
                      checkpoint_every=checkpoint_every)
    eval_sets = dict(eval_sets or {})
    device = as_device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    steps_requested, world = config.steps, 1 if distributed is None else distributed.world_size
    set_seed(config.seed)
    gen = torch.Generator().manual_seed(config.seed if data_seed is None else data_seed)
    opt = _optimizer(model.to(device).train(), config)
    ckpt = Checkpoints(checkpoint_path, config, data_seed, distributed)
    prog = (ckpt.load(model, opt, gen, device) if resume else None) or Progress()
    keep, t0, bar = max(1, steps_requested // 10), time.perf_counter(), _bar(progress, config.steps, prog.steps_done, desc)
    budget = _TimeBudget(time_limit_s, calibrate_steps, t0)
    one_step = _Step(model, opt, config, device, loss_fn, distributed, on_nonfinite, prog.skipped)
    evaluate_at = lambda at, by_position=False: _run_evals(model, eval_sets, config, device, prog.evals, at,
                                                           by_position)
    if _evaluation_due(prog, config, eval_sets):
        evaluate_at(prog.steps_done)
    stopped_early = paused = False
    lr, snap, step = lr_at(max(prog.steps_done - 1, 0), config), None, prog.steps_done - 1
    saved_at = prog.steps_done
    try:
        while step + 1 < config.steps:
            if checkpoint_every and prog.steps_done % checkpoint_every == 0 and prog.steps_done != saved_at:
                ckpt.save(model, opt, prog, gen.get_state(), rng_state(device), prog.tokens_seen,
                          prog.wall_before + time.perf_counter() - t0)
                saved_at = prog.steps_done
            if (deadline is not None and time.time() > deadline) or \
                    (stop_after_steps is not None and step + 1 >= stop_after_steps):
                stopped_early = paused = True
                break
            snap = ckpt.snapshot(gen, device, prog.tokens_seen)
            one_step.phase, step = "pre", step + 1
            config = budget.fit(step, config)
            if bar is not None and bar.total != config.steps:
                bar.total = config.steps
            lr = lr_at(step, config)
            x, y = _checked_batch(sample(step, gen), step)
            logged = step % log_every == 0 or step == config.steps - 1
            reason, lv, loss = one_step(step, lr, x, y, logged)
            if reason is None:
                _book(prog, step, lr, lv, loss, x.numel() * world, logged, keep, distributed)
            prog.steps_done, one_step.phase = step + 1, "post"
            _report(bar, callback, step, lv if logged and reason is None else None)
            if config.eval_every and (step + 1) % config.eval_every == 0 and step + 1 < config.steps and eval_sets:
                evaluate_at(step + 1)
            if budget.spent():
                stopped_early = True
                break
    except BaseException as exc:
        if bar is not None:
            bar.close()
        if isinstance(exc, KeyboardInterrupt):
            ckpt.on_interrupt(model, opt, prog, one_step.phase, snap, gen, device,
                              prog.wall_before + time.perf_counter() - t0)
        raise
    if bar is not None:
        bar.close()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    train_seconds = time.perf_counter() - t0
    complete = prog.steps_done == steps_requested and config.steps == steps_requested
    if not complete and checkpoint_path is not None and prog.steps_done < config.steps:
        ckpt.save(model, opt, prog, gen.get_state(), rng_state(device), prog.tokens_seen,
                  prog.wall_before + train_seconds)
    resumable = paused and checkpoint_path is not None     # stopped to be resumed: no final evaluation
    final = evaluate_at(prog.steps_done, per_position) if eval_sets and not resumable else {"step": prog.steps_done}
    ckpt.finish(model, opt, config, prog.steps_done, complete, resumable)
    return _result(model, config, prog, final, lr, steps_requested=steps_requested, train_seconds=train_seconds,
                   stopped_early=stopped_early, complete=complete,
                   data_seed=config.seed if data_seed is None else data_seed)


def save_result(path, result: Dict, *, command: Optional[str] = None) -> Path:
    """Write a result dict as JSON with a provenance block (:func:`path_lib.records.write_result`)."""
    return write_result(path, check_mapping(result, "result"), command=command)


class GeneratedEval:
    """A fixed evaluation set generated on the fly, batch by batch, until at least ``min_scored``
    positions are scored (e.g. a million flip-flop reads without holding them in memory).

    Iterating yields the same ``(inputs, targets)`` batches every time (batch ``b`` uses seed
    ``seed + b``), so it can be passed to :func:`evaluate` or as one of :func:`train`'s ``eval_sets``.
    """

    def __init__(self, task: str, batch_size: int, *, min_scored: int, seed: int = 12345,
                 max_batches: int = 100_000, **task_kwargs):
        from .tasks import TASKS, make_task
        check_choice(task, "task", tuple(TASKS))
        check_int(batch_size, "batch_size", minimum=1)
        check_int(min_scored, "min_scored", minimum=1)
        check_seed(seed)
        check_int(max_batches, "max_batches", minimum=1)
        check_seed(seed + max_batches - 1, "seed + max_batches - 1")
        make_task(task, 1, seed=seed, **task_kwargs)          # the task's own checks of task_kwargs, now
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
# one call per synthetic experiment (used by the chapter and scripts/experiments/run_synthetic.py)
# ----------------------------------------------------------------------------------------------

FLIP_FLOP_EVAL = {"id": 0.8, "ood_sparse": 0.98, "ood_dense": 0.1}


def task_eval_sets(task: str, preset: Preset, *, seed: int = 12345, **task_overrides) -> Dict[str, List]:
    """Fixed evaluation batches for ``task`` (seeded apart from training):

    * flip_flop: ``id`` (the preset's p_ignore), ``ood_sparse`` (0.98), ``ood_dense`` (0.1), same length;
    * a5, mqrar: ``id`` at the preset's task parameters (with ``task_overrides``, e.g. ``length``).
    """
    from .tasks import TASKS, make_task

    check_choice(task, "task", tuple(TASKS))
    check_instance(preset, "preset", Preset)
    check_seed(seed)
    check_seed(seed + 1000 * len(FLIP_FLOP_EVAL) + preset.eval_batches, "seed + the evaluation batches")
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
    from ..nn.layers import ATTENTION_LAYERS
    from ..nn.model import TinyLM
    from .tasks import TASKS, make_task

    check_choice(task, "task", tuple(TASKS))
    check_choice(attention, "attention", tuple(ATTENTION_LAYERS))
    check_instance(preset, "preset", Preset)
    check_bool(return_model, "return_model")
    check_seed(seed, optional=True)
    check_mapping(eval_sets, "eval_sets", optional=True)
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
