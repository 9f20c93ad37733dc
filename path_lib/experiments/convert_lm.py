"""The toy conversion experiment: a RoPE byte model trained at a fixed length, converted to PaTH and
PaTH-FoX (:mod:`path_lib.experiments.convert`), compared with the teacher and with PaTH trained from scratch for
the same total steps.

    from path_lib.experiments.convert_lm import PRESETS, run_conversion, conversion_claims
    res = run_conversion(PRESETS["tiny"], seeds=[0, 1, 2])
    conversion_claims(res["records"])

Data: random windows of Python's standard library (:mod:`path_lib.training.corpus`, bytes, the language-model
chapter's corpus); optionally (``ff_mix``) part of every batch is flip-flop strings written in bytes.

Every arm runs three phases on the same batches (per seed) with the same schedules:

======================  ===========================  ==========================  ===========================
arm                     phase 0 (``teacher_steps``)  phase 1 (``stage1_steps``)  phase 2 (``stage2_steps``)
======================  ===========================  ==========================  ===========================
``RoPE teacher``        language modelling           (none: the reference)       (none)
``RoPE continued``      the teacher's                language modelling          language modelling
``PaTH scratch``        language modelling           language modelling          language modelling
``PaTH converted``      the teacher's                attention MSE (stage 1)     KL to the teacher (stage 2)
``PaTH-FoX converted``  the teacher's                attention MSE (stage 1)     KL to the teacher (stage 2)
======================  ===========================  ==========================  ===========================

(``scratch_fox`` adds ``PaTH-FoX scratch``.) Every arm but the teacher thus has ``teacher_steps +
stage1_steps + stage2_steps`` optimiser steps on the same batches with the same three-phase schedule:
an equal-training comparison (:func:`path_lib.training.loop.check_equal_training` on their records). The
teacher is the reference the students imitate. Converted students are also measured right after
conversion (with the ``"nope"`` and, for comparison, the ``"fresh"`` initialisation) and after stage 1.

Metrics of every arm:

* ``loss_id``: next-byte loss (nats per byte) on validation windows of the training length;
* ``ppl_<m>x``, ``ratio_<m>x``: :func:`path_lib.experiments.lm.evaluate_lengths` (the same target bytes read with
  contexts of ``m`` x the training length), as in the language-model chapter;
* ``kl_teacher``, ``attn_mse``: the two stages' losses against the teacher on validation windows;
* ``ff_error_id``, ``ff_error_sparse``, ``ff_error_<m>x``: the state-tracking probe. A copy of the final
  model is fine-tuned on flip-flop strings in bytes (Liu et al. 2023; ``w``, ``r``, ``i``, ``0``, ``1``,
  loss on the read bits) for ``probe_steps`` steps, the same batches and schedule for every arm, and its
  read error is measured in distribution (``p_ignore`` 0.8), on sparse strings (0.98) and on strings of
  ``m`` x the training length. The probe asks how readily each model's attention learns a
  state-tracking task; its fine-tuning is not part of the compared training.
"""
from __future__ import annotations

import concurrent.futures as cf
import copy
import json
import multiprocessing as mp
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, TypedDict, Union

import torch

from .convert import attention_mse, convert_rope_to_path, distill_attention, distill_logits, logit_kl, remove_rope
from ..hardware import complete_presets
from ..training.corpus import Corpus, load_stdlib_corpus, sample_windows
from ..nn.layers import PaTHAttention
from ..nn.model import TinyLM
from .lm import evaluate_lengths
from ..training.tasks import flip_flop
from ..impl import CHOICES
from ..validation import (as_device, check_bool, check_choice, check_generator, check_instance, check_int,
                          check_ints, check_mapping, check_number, check_probability, check_seed)
from ..training.loop import (IGNORE_INDEX, TrainConfig, check_equal_training, comparison_table, evaluate,
                    paired_differences, run_record, train)

__all__ = ["ConvConfig", "PRESETS", "ARMS", "STUDENTS", "ABLATION", "SCRATCH", "PHASES", "PAPER_A_CONVERSION", "FF_BYTES",
           "flip_flop_bytes", "conversion_batch", "phase_config", "phase_data_seed", "schedule_key",
           "path_statistics", "light_metrics", "evaluate_arm", "flip_flop_probe", "run_arm", "run_conversion", "conversion_records",
           "conversion_claims", "stage_table"]

#: flip-flop's symbols as bytes, in the id order of :func:`path_lib.training.tasks.flip_flop` (w, r, i, 0, 1)
FF_BYTES = torch.tensor([ord(c) for c in "wri01"], dtype=torch.long)

class _Conversion(TypedDict, total=False):
    """Keywords of :func:`path_lib.experiments.convert.convert_rope_to_path` for a converted arm."""
    attention: str
    init: str
    beta_init: float
    forget_init: float
    seed: int
    backend: str
    block_size: int


class _PhaseRun(TypedDict):
    """Keywords of every phase's training call (:func:`path_lib.training.loop.train`'s)."""
    data_seed: int
    device: Union[str, torch.device]
    deadline: Optional[float]
    stop_after_steps: Optional[int]
    checkpoint_path: Optional[str]


ARMS = ["RoPE teacher", "RoPE continued", "PaTH scratch", "PaTH converted", "PaTH-FoX converted"]
#: converted arm -> the student's attention and initialisation (None: the config's)
STUDENTS: Dict[str, _Conversion] = {"PaTH converted": {"attention": "path"},
                                    "PaTH-FoX converted": {"attention": "path_fox"}}
#: the initialisation ablation (``init_ablation``): the same conversion from other starting points
ABLATION: Dict[str, _Conversion] = {
    "PaTH converted, fresh init": {"attention": "path", "init": "fresh"},
    "PaTH converted, beta_init 0.01": {"attention": "path", "init": "nope", "beta_init": 0.01}}
#: arm trained from scratch -> attention
SCRATCH = {"PaTH scratch": "path", "PaTH-FoX scratch": "path_fox"}
PHASES = ("teacher", "stage1", "stage2")

# Paper A (Yang et al. 2025), conversion of pretrained RoPE models: the paper's numbers, never ours.
PAPER_A_CONVERSION: Dict = {
    "recipe": "stage 1: MSE between the attention outputs of the PaTH and the RoPE model, 100M tokens; "
              "stage 2: KL between their output distributions, 3B tokens",
    "rows": [
        {"model": "SmolLM2-1.7B converted before its decay stage, then 21B tokens of text/code/math (1:1:1)",
         "benchmark": "HumanEval", "RoPE": 23.1, "PaTH": 25.6},
        {"model": "SmolLM2-1.7B converted before its decay stage, then 21B tokens of text/code/math (1:1:1)",
         "benchmark": "MBPP+", "RoPE": 47.1, "PaTH": 51.3},
        {"model": "Qwen2.5-7B-Instruct converted without the extra data stage", "benchmark": "GSM8K",
         "RoPE": 80.29, "PaTH": 80.67},
        {"model": "Qwen2.5-7B-Instruct converted without the extra data stage", "benchmark": "MATH",
         "RoPE": 69.10, "PaTH": 65.38},
        {"model": "Qwen2.5-7B-Instruct converted without the extra data stage", "benchmark": "HumanEval",
         "RoPE": 82.32, "PaTH": 77.44},
    ],
}


@dataclass
class ConvConfig:
    """Everything the conversion experiment needs. Lengths in bytes; ``*_mults`` are multiples of
    ``train_len``. Three phases (teacher, stage 1, stage 2), each with its own steps, learning rate and
    warm-up, cosine decay to ``min_lr_ratio`` x lr within each phase, AdamW as in every experiment."""

    d_model: int = 32
    n_layers: int = 2
    n_heads: int = 2
    train_len: int = 32
    batch: int = 16
    ff_mix: float = 0.0              # fraction of every training batch that is flip-flop strings
    teacher_steps: int = 200
    teacher_lr: float = 1e-2
    teacher_warmup: int = 20
    stage1_steps: int = 20
    stage1_lr: float = 5e-3
    stage1_warmup: int = 4
    stage2_steps: int = 40
    stage2_lr: float = 2e-3
    stage2_warmup: int = 4
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.01
    clip: float = 1.0
    init: str = "nope"               # convert_rope_to_path(init=...)
    beta_init: float = 0.1
    forget_init: float = 0.99
    eval_mults: Sequence[int] = (1, 2, 4, 8)
    eval_tokens: int = 512
    eval_chunk_tokens: int = 8192
    id_batches: int = 2              # validation batches (of ``batch`` windows) for loss_id, KL, MSE
    probe_steps: int = 50
    probe_batch: int = 32
    probe_lr: float = 1e-2
    probe_warmup: int = 6
    probe_p_ignore: float = 0.8
    probe_mults: Sequence[int] = (1, 4)
    probe_eval_seqs: int = 256
    corpus_bytes: int = 2_000_000
    path_block_size_train: int = 64
    path_block_size_eval: int = 64
    scratch_fox: bool = False        # also train PaTH-FoX from scratch
    init_ablation: bool = False      # also convert with the other initialisations of ABLATION

    def __post_init__(self):
        """Check every field (a TypeError / ValueError naming it); the multiples become tuples of ints."""
        from .convert import INITS
        for name in ("d_model", "n_layers", "n_heads", "train_len", "batch", "teacher_steps", "stage1_steps",
                     "stage2_steps", "eval_tokens", "eval_chunk_tokens", "id_batches", "probe_steps", "probe_batch",
                     "probe_eval_seqs", "corpus_bytes", "path_block_size_train", "path_block_size_eval"):
            check_int(getattr(self, name), name, minimum=1)
        for name in ("teacher_warmup", "stage1_warmup", "stage2_warmup", "probe_warmup"):
            check_int(getattr(self, name), name, minimum=0)
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be a multiple of n_heads ({self.n_heads})")
        for name in ("teacher_lr", "stage1_lr", "stage2_lr", "probe_lr"):
            check_number(getattr(self, name), name, positive=True)
        check_probability(self.ff_mix, "ff_mix")
        check_probability(self.min_lr_ratio, "min_lr_ratio")
        check_number(self.weight_decay, "weight_decay", minimum=0.0)
        check_number(self.clip, "clip", minimum=0.0)
        check_choice(self.init, "init", tuple(INITS))
        check_number(self.beta_init, "beta_init", minimum=0.0, maximum=2.0, open_min=True, open_max=True)
        check_number(self.forget_init, "forget_init", minimum=0.0, maximum=1.0, open_min=True, open_max=True)
        check_probability(self.probe_p_ignore, "probe_p_ignore", open_max=True)
        self.eval_mults = tuple(check_ints(self.eval_mults, "eval_mults", minimum=1))
        self.probe_mults = tuple(check_ints(self.probe_mults, "probe_mults", minimum=1))
        check_bool(self.scratch_fox, "scratch_fox")
        check_bool(self.init_ablation, "init_ablation")

    def arms(self) -> List[str]:
        return (ARMS + (["PaTH-FoX scratch"] if self.scratch_fox else [])
                + (list(ABLATION) if self.init_ablation else []))


# Every preset of path_lib.hardware.PRESET_TABLE not given here (small: a T4-class GPU) lies between tiny and
# full (path_lib.hardware.complete_presets), as the chapters pick it.
PRESETS: Dict[str, ConvConfig] = complete_presets({
    # CPU, the book build: about a minute for three seeds on one core.
    "tiny": ConvConfig(),
    # One H200 (scripts/experiments/run_conversion.py --preset full --workers 3): the language-model chapter's
    # model sizes; about 7 to 8 minutes predicted from the measured step rates (scripts/experiments/gpu_plan.md).
    "full": ConvConfig(d_model=256, n_layers=4, n_heads=4, train_len=256, batch=64,
                       teacher_steps=1500, teacher_lr=2e-3, teacher_warmup=60,
                       stage1_steps=100, stage1_lr=2e-3, stage1_warmup=10,
                       stage2_steps=200, stage2_lr=1e-3, stage2_warmup=10,
                       eval_mults=(1, 2, 4, 8, 16), eval_tokens=8192, eval_chunk_tokens=16384, id_batches=4,
                       probe_steps=200, probe_batch=64, probe_lr=3e-3, probe_warmup=20, probe_mults=(1, 4),
                       probe_eval_seqs=1024, corpus_bytes=32_000_000, path_block_size_train=128,
                       path_block_size_eval=256, init_ablation=True),
})


# ----------------------------------------------------------------------------------------------
# data and schedules
# ----------------------------------------------------------------------------------------------

def flip_flop_bytes(n: int, length: int, p_ignore: float, generator: torch.Generator):
    """``n`` flip-flop strings of ``length`` bytes (:func:`path_lib.training.tasks.flip_flop` written with the bytes
    ``w r i 0 1``): ``(inputs [n, length], targets [n, length])`` int64; targets are the read bit at each
    ``r`` and -100 elsewhere (next-byte aligned: ``targets[t] = inputs[t + 1]`` where ``inputs[t]`` is ``r``)."""
    check_int(n, "n", minimum=1)
    check_generator(generator)
    x, y, _ = flip_flop(n, length=length, p_ignore=p_ignore, generator=generator)
    yb = torch.where(y == IGNORE_INDEX, torch.full_like(y, IGNORE_INDEX), FF_BYTES[y.clamp(min=0)])
    return FF_BYTES[x], yb


def conversion_batch(data: torch.Tensor, cfg: ConvConfig, generator: torch.Generator):
    """One batch: ``cfg.batch`` windows of ``cfg.train_len`` bytes of ``data`` (a corpus split), the first
    ``round(ff_mix * batch)`` replaced by flip-flop strings. ``(inputs, targets)`` ``[batch, train_len]``."""
    check_instance(cfg, "cfg", ConvConfig)
    x, y = sample_windows(data, cfg.batch, cfg.train_len, generator=generator)
    n = int(round(cfg.ff_mix * cfg.batch))
    if n:
        x, y = x.clone(), y.clone()          # views of one buffer: writing one would change the other
        x[:n], y[:n] = flip_flop_bytes(n, cfg.train_len, cfg.probe_p_ignore, generator)
    return x, y


def phase_config(cfg: ConvConfig, phase: str, seed: int) -> TrainConfig:
    """The optimiser schedule of one phase (``"teacher"``, ``"stage1"``, ``"stage2"``), the same for every arm."""
    check_instance(cfg, "cfg", ConvConfig)
    check_choice(phase, "phase", PHASES)
    check_seed(seed)
    steps = getattr(cfg, f"{phase}_steps")
    return TrainConfig(steps=steps, lr=getattr(cfg, f"{phase}_lr"), warmup=min(getattr(cfg, f"{phase}_warmup"), steps),
                       min_lr_ratio=cfg.min_lr_ratio, weight_decay=cfg.weight_decay, grad_clip=cfg.clip, seed=seed)


def phase_data_seed(phase: str, seed: int) -> int:
    """The data generator's seed of a phase: the same for every arm of a seed, different per phase."""
    check_choice(phase, "phase", PHASES)
    check_seed(seed, "seed", optional=False)
    check_seed(seed + 1000 * len(PHASES), "seed + the phases' offsets")
    return 1000 * PHASES.index(phase) + seed + 1


def schedule_key(cfg: ConvConfig, phases: Sequence[str] = PHASES) -> Dict:
    """The schedule of ``phases`` (for a run record): batch size, total steps, each phase's settings."""
    check_instance(cfg, "cfg", ConvConfig)
    if isinstance(phases, str) or not isinstance(phases, (list, tuple)) or not phases:
        raise TypeError(f"phases must be a non-empty list of phases {PHASES}, got {phases!r}")
    for ph in phases:
        check_choice(ph, "phases' entries", PHASES)
    out = {"batch_size": cfg.batch, "steps": sum(getattr(cfg, f"{p}_steps") for p in phases), "phases": []}
    for ph in phases:
        c = asdict(phase_config(cfg, ph, 0))
        out["phases"].append({k: (list(v) if isinstance(v, tuple) else v) for k, v in c.items()
                              if k not in ("seed", "checkpoint", "eval_every", "autocast_bf16")})
    return out


# ----------------------------------------------------------------------------------------------
# models and evaluation
# ----------------------------------------------------------------------------------------------

def _new_model(attention: str, cfg: ConvConfig, seed: int, device, backend: str) -> TinyLM:
    torch.manual_seed(seed)
    if attention.startswith("path"):
        model = TinyLM(256, cfg.d_model, cfg.n_layers, cfg.n_heads, attention=attention, backend=backend,
                       block_size=cfg.path_block_size_train)
    else:
        model = TinyLM(256, cfg.d_model, cfg.n_layers, cfg.n_heads, attention=attention)
    return model.to(device)


def _set_block_size(model: TinyLM, block_size: int) -> None:
    for b in model.blocks:
        if hasattr(b.attn, "block_size"):
            b.attn.block_size = block_size


def _id_batches(corpus: Corpus, cfg: ConvConfig):
    g = torch.Generator().manual_seed(777)
    return [sample_windows(corpus.val, cfg.batch, cfg.train_len, generator=g) for _ in range(cfg.id_batches)]


@torch.no_grad()
def path_statistics(model: TinyLM, batches) -> Dict[str, float]:
    """Mean ``beta`` (``beta_mean``) and, for PaTH-FoX, mean forget value ``exp(g)`` (``forget_mean``) over
    every PaTH layer, head and position of ``batches`` (``(inputs, targets)`` pairs); empty for a model
    without PaTH layers. Each layer's input is captured by a forward hook."""
    check_instance(model, "model", TinyLM)
    _check_batches(batches)
    layers = [b.attn for b in model.blocks if isinstance(b.attn, PaTHAttention)]
    if not layers:
        return {}
    seen: List[Tuple[PaTHAttention, torch.Tensor]] = []      # (layer, its input)
    handles = [a.register_forward_hook(lambda m, args, out: seen.append((m, args[0]))) for a in layers]
    was = model.training
    model.eval()
    try:
        for x, _ in batches:
            model(x)
    finally:
        for h in handles:
            h.remove()
        model.train(was)
    betas, forgets = [], []
    for layer, inp in seen:
        _, beta, g = layer.path_params(inp)
        betas.append(beta.mean())
        if g is not None:
            forgets.append(g.exp().mean())
    out = {"beta_mean": float(torch.stack(betas).mean())}
    if forgets:
        out["forget_mean"] = float(torch.stack(forgets).mean())
    return out


@torch.no_grad()
def _check_arm(model, corpus, cfg, teacher, device) -> torch.device:
    check_instance(model, "model", TinyLM)
    check_instance(corpus, "corpus", Corpus)
    check_instance(cfg, "cfg", ConvConfig)
    check_instance(teacher, "teacher", TinyLM, optional=True)
    return as_device(device)


def _check_batches(batches) -> None:
    """A non-empty list of ``(inputs, targets)`` tensor pairs, or a TypeError / ValueError naming ``batches``."""
    if not isinstance(batches, (list, tuple)) or not batches:
        raise TypeError(f"batches must be a non-empty list of (inputs, targets) pairs, got {type(batches).__name__}")
    for b in batches:
        if not (isinstance(b, (list, tuple)) and len(b) == 2 and all(isinstance(t, torch.Tensor) for t in b)):
            raise ValueError(f"batches must hold (inputs, targets) pairs of tensors, got a {type(b).__name__}")


def light_metrics(model: TinyLM, corpus: Corpus, cfg: ConvConfig, *, teacher: Optional[TinyLM] = None,
                  device="cpu") -> Dict[str, float]:
    """``loss_id`` (validation windows of the training length), :func:`path_statistics` and, with a
    ``teacher``, ``kl_teacher`` and ``attn_mse`` on the same windows: what every stage is measured by."""
    device = _check_arm(model, corpus, cfg, teacher, device)
    vb = [(x.to(device), y.to(device)) for x, y in _id_batches(corpus, cfg)]
    out = {"loss_id": evaluate(model, vb, device=device)["loss"], **path_statistics(model, vb)}
    if teacher is not None:
        out["kl_teacher"] = sum(logit_kl(model, teacher, x, y) for x, y in vb) / len(vb)
        out["attn_mse"] = sum(attention_mse(model, teacher, x) for x, _ in vb) / len(vb)
    return out


def flip_flop_probe(model: TinyLM, cfg: ConvConfig, seed: int, *, device="cpu") -> Dict[str, float]:
    """Fine-tune a copy of ``model`` on byte flip-flop strings of the training length (``probe_steps`` steps
    of ``probe_batch``, data seeded by ``seed``: the same batches for every model) and return its read error
    ``ff_error_id`` (``probe_p_ignore``), ``ff_error_sparse`` (0.98) and ``ff_error_<m>x`` (strings of ``m`` x
    the training length, ``m`` in ``probe_mults`` other than 1). ``model`` itself is not changed."""
    check_instance(model, "model", TinyLM)
    check_instance(cfg, "cfg", ConvConfig)
    check_seed(seed)
    device = as_device(device)
    probe = copy.deepcopy(model)
    tc = TrainConfig(steps=cfg.probe_steps, lr=cfg.probe_lr, warmup=min(cfg.probe_warmup, cfg.probe_steps),
                     min_lr_ratio=cfg.min_lr_ratio, weight_decay=cfg.weight_decay, grad_clip=cfg.clip, seed=seed)
    train(probe, lambda s, g: flip_flop_bytes(cfg.probe_batch, cfg.train_len, cfg.probe_p_ignore, g), tc,
          device=device, progress=False, data_seed=seed + 5001)
    _set_block_size(probe, cfg.path_block_size_eval)
    settings = [("ff_error_id", 1, cfg.probe_p_ignore), ("ff_error_sparse", 1, 0.98)]
    settings += [(f"ff_error_{m}x", m, cfg.probe_p_ignore) for m in cfg.probe_mults if m != 1]
    out = {}
    for i, (key, m, p) in enumerate(settings):
        g = torch.Generator().manual_seed(9000 + i)
        L = m * cfg.train_len
        per = max(1, min(cfg.probe_eval_seqs, cfg.eval_chunk_tokens // L))
        batches = [flip_flop_bytes(min(per, cfg.probe_eval_seqs - s), L, p, g) for s in range(0, cfg.probe_eval_seqs, per)]
        out[key] = evaluate(probe, batches, device=device)["error"]
    return out


def evaluate_arm(model: TinyLM, corpus: Corpus, cfg: ConvConfig, seed: int, *, teacher: Optional[TinyLM] = None,
                 device="cpu") -> Dict[str, float]:
    """Every metric of a final model: :func:`light_metrics`, ``ppl_<m>x`` and ``ratio_<m>x``
    (:func:`path_lib.experiments.lm.evaluate_lengths` at ``eval_mults`` x the training length) and
    :func:`flip_flop_probe`."""
    _check_arm(model, corpus, cfg, teacher, device)
    check_seed(seed)
    out = light_metrics(model, corpus, cfg, teacher=teacher, device=device)
    _set_block_size(model, cfg.path_block_size_eval)
    ev = evaluate_lengths(model, corpus.val, [m * cfg.train_len for m in cfg.eval_mults], train_len=cfg.train_len,
                          tokens_per_length=cfg.eval_tokens, chunk_tokens=cfg.eval_chunk_tokens, device=device)
    _set_block_size(model, cfg.path_block_size_train)
    for m, pp in zip(cfg.eval_mults, ev["ppl"]):
        out[f"ppl_{m}x"], out[f"ratio_{m}x"] = pp, pp / ev["ppl"][0]
    out.update(flip_flop_probe(model, cfg, seed, device=device))
    model.train()
    return out


# ----------------------------------------------------------------------------------------------
# one arm, one seed: resumable phase by phase
# ----------------------------------------------------------------------------------------------

def _phase_summary(r: Dict) -> Dict:
    return {"steps_done": r["steps_done"], "steps_planned": r["steps_requested"], "complete": r["complete"],
            "tokens_seen": r["tokens_seen"], "final_lr": r["final_lr"], "wall_seconds": r["wall_seconds"],
            "final_train_loss": r["final_train_loss"], "data_seed": r["data_seed"], "stage": r.get("stage", "lm"),
            "loss_curve": [[h["step"], h["loss"]] for h in r["history"]]}


def _tag(arm: str, seed: int) -> str:
    return f"{arm.replace(' ', '_')}-s{seed}"


def run_arm(arm: str, cfg: ConvConfig, corpus: Corpus, seed: int, *, device="cpu", backend: str = "blockwise",
            state_dir: Optional[str] = None, teacher: Optional[Dict] = None, deadline: Optional[float] = None,
            stop_after_steps: Optional[int] = None) -> Dict:
    """Train and evaluate one arm for one seed.

    With ``state_dir``, every finished phase's model is saved there (``<arm>-s<seed>-<phase>.pt``) and a
    phase interrupted by ``deadline`` / ``stop_after_steps`` keeps a resumable checkpoint: calling again
    continues (bit-identically on a CPU). The converted arms and ``RoPE continued`` start from the
    teacher's final model: ``teacher`` (``{"model": state dict, "summary": its phase summary}``, what the
    teacher's run returns under ``"teacher"``) or, without it, the teacher's phase file in ``state_dir``.

    Returns ``{"arm", "seed", "complete", "phases": [phase summaries], "stages": {stage: metrics}
    (converted arms: "fresh_init", "converted", "stage1", "stage2"), "metrics", "record"}`` and, for the
    teacher, ``"teacher"`` (tensors: drop it before saving JSON). An arm stopped before its last phase
    ends has ``complete: False`` and no metrics.
    """
    check_instance(cfg, "cfg", ConvConfig)
    check_choice(arm, "arm", tuple(cfg.arms()))
    check_instance(corpus, "corpus", Corpus)
    check_seed(seed)
    check_seed(seed + 1000 * len(PHASES) + 5001, "seed + the phases' offsets")
    device = as_device(device)
    check_choice(backend, "backend", CHOICES["path_layer"])
    sd = Path(state_dir) if state_dir is not None else None
    if sd is not None:
        sd.mkdir(parents=True, exist_ok=True)
    out: Dict = {"arm": arm, "seed": seed, "complete": False, "phases": [], "stages": {}}
    own_phase0 = arm == "RoPE teacher" or arm in SCRATCH
    tmodel = None
    if not own_phase0:
        f = sd / f"{_tag('RoPE teacher', seed)}-teacher.pt" if sd is not None else None
        if teacher is None and f is not None and f.exists():
            teacher = torch.load(f, map_location="cpu", weights_only=False)
        if teacher is None:
            raise FileNotFoundError(f"{arm} (seed {seed}) needs the teacher's model: pass teacher= or run "
                                    "'RoPE teacher' first with the same state_dir")
        tmodel = _new_model("rope", cfg, seed, device, backend)
        tmodel.load_state_dict(teacher["model"])
        out["phases"].append(teacher["summary"])         # phase 0 is the teacher's
    student = {**STUDENTS, **ABLATION}.get(arm)
    if student is not None and tmodel is not None:          # (a converted arm: its teacher is loaded above)
        kw = _Conversion(init=cfg.init, beta_init=cfg.beta_init, forget_init=cfg.forget_init, seed=seed,
                         backend=backend, block_size=cfg.path_block_size_train)
        kw.update(student)
        out["conversion"] = {k: kw[k] for k in ("attention", "init", "beta_init", "forget_init")}
        model = convert_rope_to_path(tmodel, **kw)
        out["stages"]["converted"] = light_metrics(model, corpus, cfg, teacher=tmodel, device=device)
        if arm in STUDENTS and kw["init"] != "fresh":        # where the library's fresh init would start
            fresh: _Conversion = {**kw, "init": "fresh"}
            alt = convert_rope_to_path(tmodel, **fresh)
            out["stages"]["fresh_init"] = light_metrics(alt, corpus, cfg, teacher=tmodel, device=device)
            del alt
    elif arm == "RoPE continued" and tmodel is not None:   # (its teacher is loaded above)
        model, tmodel = tmodel, None
    else:
        model = _new_model("rope" if arm == "RoPE teacher" else SCRATCH[arm], cfg, seed, device, backend)
    plan = ["teacher"] if arm == "RoPE teacher" else list(PHASES if own_phase0 else PHASES[1:])
    sample = lambda step, g: conversion_batch(corpus.train, cfg, g)     # noqa: E731
    for phase in plan:
        saved = sd / f"{_tag(arm, seed)}-{phase}.pt" if sd is not None else None
        if saved is not None and saved.exists():
            blob = torch.load(saved, map_location="cpu", weights_only=False)
            model.load_state_dict(blob["model"])
            out["phases"].append(blob["summary"])
            out["stages"].update(blob.get("stages", {}))
            continue
        run = _PhaseRun(data_seed=phase_data_seed(phase, seed), device=device, deadline=deadline,
                        stop_after_steps=stop_after_steps,
                        checkpoint_path=str(sd / f"{_tag(arm, seed)}-{phase}.ckpt") if sd is not None else None)
        tc = phase_config(cfg, phase, seed)
        # (tmodel is kept exactly for the converted arms, where student is not None)
        if tmodel is not None and phase == "stage1":
            r = distill_attention(model, tmodel, sample, config=tc, **run)
        elif tmodel is not None and phase == "stage2":
            r = distill_logits(model, tmodel, sample, config=tc, **run)
        else:
            r = train(model, sample, tc, progress=False, **run)
        out["phases"].append(_phase_summary(r))
        if not r["complete"]:
            return out
        if student is not None and phase == "stage1":
            out["stages"]["stage1"] = light_metrics(model, corpus, cfg, teacher=tmodel, device=device)
        if saved is not None:
            torch.save({"model": model.state_dict(), "summary": out["phases"][-1],
                        "stages": {k: v for k, v in out["stages"].items() if k == "stage1"}}, saved)
    metrics = evaluate_arm(model, corpus, cfg, seed, teacher=tmodel, device=device)
    if student is not None:
        out["stages"]["stage2"] = {k: metrics[k] for k in out["stages"]["converted"]}
        for st in ("fresh_init", "converted", "stage1"):
            for k, v in out["stages"].get(st, {}).items():
                metrics[f"{st}_{k}"] = v
    if arm == "RoPE teacher":
        nope = remove_rope(model)
        for k, v in light_metrics(nope, corpus, cfg, teacher=model, device=device).items():
            metrics[f"rope_removed_{k}"] = v
        out["teacher"] = {"model": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
                          "summary": out["phases"][0]}
    out["metrics"] = metrics
    out["complete"] = True
    out["record"] = _arm_record(arm, seed, cfg, corpus, out["phases"], metrics)
    return out


def _arm_record(arm, seed, cfg, corpus, phases, metrics) -> Dict:
    total = {"steps_done": sum(p["steps_done"] for p in phases), "steps_requested": sum(p["steps_planned"] for p in phases),
             "tokens_seen": sum(p["tokens_seen"] for p in phases), "final_lr": phases[-1]["final_lr"],
             "wall_seconds": sum(p["wall_seconds"] for p in phases), "complete": all(p["complete"] for p in phases),
             "config": {"steps": sum(p["steps_planned"] for p in phases)}}
    data_key = (f"stdlib:{corpus.info.get('sha1')}|train_len={cfg.train_len}|batch={cfg.batch}|ff_mix={cfg.ff_mix}|"
                f"data_seeds={','.join(str(p['data_seed']) for p in phases)}")
    rec = run_record(total, model=arm, seed=seed, metrics=metrics, data_key=data_key, batch_size=cfg.batch)
    rec["schedule"] = schedule_key(cfg, ["teacher"] if arm == "RoPE teacher" else PHASES)
    return rec


# ----------------------------------------------------------------------------------------------
# the whole experiment
# ----------------------------------------------------------------------------------------------

def _seed_job(cfg: ConvConfig, seed: int, device, backend: str, state_dir: Optional[str],
              deadline: Optional[float], stop_after_steps: Optional[int] = None, corpus: Optional[Corpus] = None,
              verbose: bool = False) -> List[Dict]:
    """Every arm of one seed, the teacher first; finished runs are kept in ``state_dir`` as JSON (and their
    phase models deleted; the teacher's once every arm of the seed is done)."""
    if corpus is None:
        torch.set_num_threads(1)
        corpus = load_stdlib_corpus(max_bytes=cfg.corpus_bytes)
    if torch.device(device).type == "cuda":            # as the language-model experiments
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    sd = Path(state_dir) if state_dir is not None else None
    runs, teacher = [], None
    for arm in cfg.arms():
        done = sd / f"{_tag(arm, seed)}.json" if sd is not None else None
        if done is not None and done.exists():
            runs.append(json.loads(done.read_text()))
            continue
        t0 = time.perf_counter()
        r = run_arm(arm, cfg, corpus, seed, device=device, backend=backend, state_dir=state_dir, teacher=teacher,
                    deadline=deadline, stop_after_steps=stop_after_steps)
        r["seconds"] = time.perf_counter() - t0
        teacher = r.pop("teacher", teacher)
        if verbose:
            print(f"{arm:20s} seed {seed}: " + (f"loss_id {r['metrics']['loss_id']:.4f} ({r['seconds']:.1f} s)"
                                                 if r["complete"] else "paused"), flush=True)
        runs.append(r)
        if not r["complete"]:
            break
        if done is not None and sd is not None:             # (done is set exactly when sd is)
            done.write_text(json.dumps(r))
            if arm != "RoPE teacher":                      # finished: its phase models are not needed again
                for f in sd.glob(f"{_tag(arm, seed)}-*.pt"):
                    f.unlink()
    if sd is not None and len(runs) == len(cfg.arms()) and all(r["complete"] for r in runs):
        for f in sd.glob(f"{_tag('RoPE teacher', seed)}-*.pt"):
            f.unlink()                                      # every arm of the seed is done
    return runs


def run_conversion(cfg: ConvConfig, seeds: Sequence[int] = (0, 1, 2), *, device=None,
                   corpus: Optional[Corpus] = None, backend: Optional[str] = None, state_dir: Optional[str] = None,
                   deadline: Optional[float] = None, stop_after_steps: Optional[int] = None, workers: int = 1,
                   on_seed_done: Optional[Callable[[Dict], None]] = None, verbose: bool = False) -> Dict:
    """Every arm for every seed (the teacher first within a seed; ``workers > 1``: seeds in parallel
    processes). With ``state_dir`` the experiment is resumable: finished runs (``<arm>-s<seed>.json``),
    finished phases and interrupted phases (``deadline``) are kept there and a later call with the same
    arguments continues. ``stop_after_steps`` pauses every phase after that many steps (as a deadline
    would; for tests). ``on_seed_done(result so far)`` after each seed.

    Returns ``{"config", "seeds", "arms", "corpus", "device", "path_backend", "paper", "runs", "records",
    "equal_training": {"ok", "reason"}, "complete", "claims"}`` (``claims``: :func:`conversion_claims`,
    empty unless complete and equal)."""
    from .lm import path_backend
    check_instance(cfg, "cfg", ConvConfig)
    seeds = check_ints(seeds, "seeds", minimum=0)
    device = as_device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    check_instance(corpus, "corpus", Corpus, optional=True)
    check_choice(backend, "backend", CHOICES["path_layer"], optional=True)
    check_int(workers, "workers", minimum=1)
    check_bool(verbose, "verbose")
    if on_seed_done is not None and not callable(on_seed_done):
        raise TypeError(f"on_seed_done must be callable or None, got {type(on_seed_done).__name__}")
    backend = backend or path_backend(device)
    if workers == 1:
        corpus = corpus or load_stdlib_corpus(max_bytes=cfg.corpus_bytes)
    res: Dict[str, Any] = {"config": asdict(cfg), "seeds": list(seeds), "arms": cfg.arms(), "corpus": corpus.info if corpus else None,
           "device": str(device), "path_backend": backend, "paper": PAPER_A_CONVERSION, "runs": []}

    def collect(runs):
        res["runs"].extend(runs)
        res["runs"].sort(key=lambda r: (list(seeds).index(r["seed"]), cfg.arms().index(r["arm"])))
        _finish(res)
        if on_seed_done is not None:
            on_seed_done(res)

    if workers == 1:
        for seed in seeds:
            collect(_seed_job(cfg, seed, device, backend, state_dir, deadline, stop_after_steps, corpus, verbose))
    else:
        with cf.ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
            futs = [pool.submit(_seed_job, cfg, seed, device, backend, state_dir, deadline, stop_after_steps)
                    for seed in seeds]
            for fut in cf.as_completed(futs):
                collect(fut.result())
        if res["corpus"] is None:
            res["corpus"] = load_stdlib_corpus(max_bytes=cfg.corpus_bytes).info
    return _finish(res)


def conversion_records(res: Dict) -> List[Dict]:
    """The per-run records of a result (finished runs only)."""
    check_mapping(res, "res", keys=("runs",))
    if not isinstance(res["runs"], list) or not all(isinstance(r, dict) for r in res["runs"]):
        raise TypeError("res['runs'] must be a list of run dicts")
    return [r["record"] for r in res["runs"] if r.get("complete")]


def _finish(res: Dict) -> Dict:
    recs = conversion_records(res)
    why = check_equal_training([r for r in recs if r["model"] != "RoPE teacher"])
    res["records"] = recs
    res["equal_training"] = {"ok": why is None, "reason": why}
    res["complete"] = len(recs) == len(res["arms"]) * len(res["seeds"])
    res["claims"] = conversion_claims(recs) if res["complete"] and why is None else {}
    return res


# ----------------------------------------------------------------------------------------------
# what the runs say: claims recomputable from the records alone
# ----------------------------------------------------------------------------------------------

def _every(records, arm, pred) -> bool:
    return all(pred(r["metrics"]) for r in records if r["model"] == arm)


def conversion_claims(records: Sequence[Dict]) -> Dict[str, bool]:
    """Statements about the conversion, each True (holds) or False, computed from the per-run records
    alone, so that a chapter can recompute a recorded result's claims. Comparisons between arms are
    paired seed by seed among equal-training runs (:func:`path_lib.training.loop.paired_differences`, which raises
    :class:`path_lib.training.loop.UnequalTrainingError` for unequal runs); "in every seed" means every seed.
    Statements about arms that are not in the records are left out."""
    if not isinstance(records, (list, tuple)):
        raise TypeError(f"records must be a list of run records, got {type(records).__name__}")
    recs = list(records)
    if not recs:
        raise ValueError("records must not be empty")
    for i, r in enumerate(recs):
        check_mapping(r, f"records[{i}]", keys=("model", "seed", "metrics"))
    arms = {r["model"] for r in recs}
    mults = sorted(int(k[6:-1]) for k in recs[0]["metrics"] if k.startswith("ratio_") and k.endswith("x"))
    top = f"ratio_{mults[-1]}x"
    less = lambda a, b, k: paired_differences(recs, k, a, b)["all_negative"]     # noqa: E731
    teacher = {r["seed"]: r["metrics"] for r in recs if r["model"] == "RoPE teacher"}
    out: Dict[str, bool] = {}
    out["every arm but the teacher trained equally (same steps, batches and schedule, 3+ seeds)"] = \
        check_equal_training([r for r in recs if r["model"] != "RoPE teacher"]) is None
    if teacher:
        out["removing RoPE alone raises the teacher's loss at the training length, in every seed"] = \
            all(m["rope_removed_loss_id"] > m["loss_id"] for m in teacher.values())
    for arm in (a for a in STUDENTS if a in arms):
        rs = [r for r in recs if r["model"] == arm]
        if teacher:
            out[f"{arm}: at conversion (no training) its loss is at most 1% above the teacher's without RoPE, "
                "in every seed"] = all(r["metrics"]["converted_loss_id"]
                                       <= 1.01 * teacher[r["seed"]]["rope_removed_loss_id"] for r in rs)
        out[f"{arm}: stage 1 lowers the attention-output MSE, in every seed"] = \
            _every(recs, arm, lambda m: m["stage1_attn_mse"] < m["converted_attn_mse"])
        out[f"{arm}: stage 2 lowers the KL to the teacher below its value after stage 1, in every seed"] = \
            _every(recs, arm, lambda m: m["kl_teacher"] < m["stage1_kl_teacher"])
        if teacher:
            out[f"{arm}: after both stages its loss at the training length is within 2% of the teacher's, "
                "in every seed"] = all(r["metrics"]["loss_id"] < 1.02 * teacher[r["seed"]]["loss_id"] for r in rs)
    if {"PaTH converted", "PaTH scratch"} <= arms:
        out["converted PaTH's loss at the training length is below PaTH from scratch's (equal steps), "
            "in every seed"] = less("PaTH converted", "PaTH scratch", "loss_id")
    if {"PaTH converted", "RoPE continued"} <= arms:
        out["converted PaTH's loss at the training length is below RoPE continued's (equal steps), "
            "in every seed"] = less("PaTH converted", "RoPE continued", "loss_id")
    for arm in (a for a in STUDENTS if a in arms and "RoPE continued" in arms):
        out[f"{arm} degrades less than RoPE continued at {mults[-1]}x the training length, in every seed"] = \
            less(arm, "RoPE continued", top)
    if {"PaTH converted", "RoPE continued"} <= arms:
        out["probe: converted PaTH makes fewer flip-flop errors on sparse strings than RoPE continued, "
            "in every seed"] = less("PaTH converted", "RoPE continued", "ff_error_sparse")
    if {"PaTH converted", "PaTH scratch"} <= arms:
        t = comparison_table(recs, "ff_error_sparse", models=["PaTH converted", "PaTH scratch"])
        out["probe: converted PaTH's sparse flip-flop error is at most PaTH from scratch's (seed means)"] = \
            t["PaTH converted"]["mean"] <= t["PaTH scratch"]["mean"]
    for arm in (a for a in ABLATION if a in arms and "PaTH converted" in arms):
        out[f"initialisation: PaTH converted ends closer to the teacher (KL) than '{arm}', in every seed"] = \
            less("PaTH converted", arm, "kl_teacher")
    return out


def stage_table(res: Dict, keys: Sequence[str] = ("loss_id", "kl_teacher", "attn_mse")) -> str:
    """A Markdown table, seed means: the teacher, the teacher without RoPE, and each converted student
    at every stage (both initialisations at conversion)."""
    if isinstance(keys, str) or not isinstance(keys, (list, tuple)) or not keys \
            or not all(isinstance(k, str) for k in keys):
        raise TypeError(f"keys must be a non-empty list of metric names, got {keys!r}")
    recs = conversion_records(res)

    def mean(arm, key):
        vals = [r["metrics"][key] for r in recs if r["model"] == arm and key in r["metrics"]]
        return f"{sum(vals) / len(vals):.4g}" if vals else "-"

    rows = ["| model | stage | " + " | ".join(keys) + " |", "|---|---|" + "---|" * len(keys),
            "| RoPE teacher | trained | " + " | ".join(mean("RoPE teacher", k) for k in keys) + " |",
            "| RoPE teacher, rotations removed | no training | "
            + " | ".join(mean("RoPE teacher", f"rope_removed_{k}") for k in keys) + " |"]
    for arm in (a for a in {**STUDENTS, **ABLATION} if any(r["model"] == a for r in recs)):
        for st, label in (("fresh_init_", "converted, had it the 'fresh' init"), ("converted_", "converted"),
                          ("stage1_", "after stage 1"), ("", "after stage 2")):
            if any(f"{st}{keys[0]}" in r["metrics"] for r in recs if r["model"] == arm):
                rows.append(f"| {arm} | {label} | " + " | ".join(mean(arm, st + k) for k in keys) + " |")
    return "\n".join(rows)
