"""Converting a trained RoPE ``TinyLM`` into a PaTH (or PaTH-FoX) model, and the two distillation stages.

Paper A's recipe for a pretrained RoPE model: replace every RoPE attention by PaTH attention, keep all
weights the two share, then train briefly, first each layer's attention output against the teacher's
(mean-squared error), then the whole model's output distribution against the teacher's (KL):

    from path_lib.experiments.convert import convert_rope_to_path, distill_attention, distill_logits
    from path_lib.training.loop import TrainConfig

    student = convert_rope_to_path(teacher, attention="path")             # same weights, new PaTH parts
    distill_attention(student, teacher, sample, config=TrainConfig(steps=200, lr=2e-3, warmup=20))
    distill_logits(student, teacher, sample, config=TrainConfig(steps=300, lr=1e-3, warmup=20))

or the same three steps as one call, :func:`convert_and_distill`:

    student, stages = convert_and_distill(teacher, sample, stage1=TrainConfig(steps=200, lr=2e-3, warmup=20),
                                          stage2=TrainConfig(steps=300, lr=1e-3, warmup=20))

What is kept: the byte embedding (and the tied head), every LayerNorm, the q, k, v and output
projections, the MLPs and the final norm, bit for bit. What is new: per layer the low-rank
projection and short convolution that make ``w``, the ``beta`` projection and (PaTH-FoX) the
forget-gate projection. What is gone: RoPE's fixed rotations (they have no parameters).

The new parameters start, with ``init="nope"``, as the teacher's attention *without its rotations*
(NoPE with the teacher's weights) plus a controlled amount of PaTH:

* ``beta`` starts at ``beta_init`` for every token (bias ``logit(beta_init / 2)``, weight 0), so each
  Householder-like step ``H_t = I - beta_t w_t w_t^T`` is exactly ``beta_init`` from the identity in
  operator norm (``||H_t - I|| = beta_t`` for a unit ``w_t``), and the product over a distance ``n`` at
  most ``n * beta_init`` (telescoping, every ``||H_t|| <= 1``). A logit ``scale * q_i^T H_i ... H_{j+1} k_j``
  is therefore within ``scale * |q_i| |k_j| (i - j) * beta_init`` of NoPE's; as ``beta_init -> 0`` the
  converted model becomes the teacher without RoPE (:func:`remove_rope`), linearly in ``beta_init``.
* PaTH-FoX's forget gate starts at ``forget_init`` for every token (``g = log forget_init``, weight 0): a
  logit at distance ``n`` is shifted by ``n * log(forget_init)``.
* ``w`` keeps the layer's fresh initialisation (the low-rank projection, the near-identity convolution).

Why start from NoPE: a single Householder-like step per token cannot be a rotation (it takes two
reflections to make one) and ``w`` depends on the tokens, not on positions, so no setting of the new
parameters reproduces RoPE; the nearest model PaTH can express exactly is the identity transport,
i.e. the teacher's q, k, v and o without rotations. Why not ``beta`` exactly 0: ``beta = 2 sigmoid(b)``
would need ``b = -inf``, where no gradient reaches it. Why ``beta_init = 0.1`` by default and not
smaller: under AdamW a parameter moves by about the learning rate per step, so during a short
conversion ``beta``'s logit hardly moves and ``beta`` stays near where it starts; ``beta_init`` sets how
much data-dependent transport the student will use. In the toy experiment (:mod:`path_lib.experiments.convert_lm`,
tiny preset with ``init_ablation``, three seeds, CPU) 0.1 ended closer to the teacher (KL after both
stages) than 0.01, which stays NoPE-like, and than the fresh initialisation, in every seed (a one-seed
sweep put 0.3 about level with 0.1). At the full preset's size (three seeds, one H200) 0.1 again ended
closer than 0.01 in every seed, but only level with the fresh initialisation (KL 0.070 against 0.072
in the seed means, not in every seed).
``init="fresh"`` keeps the library's initialisation of a new PaTH layer (``beta`` near 1, the forget
gate near 1/2): a layer far from NoPE whose contractions already favour recent tokens.

Stage 1, :func:`distill_attention`: forward hooks on the teacher's attention layers capture each layer's
input and output; each student attention layer is applied to the *teacher's* input of that layer and
its output is compared with the teacher's (mean-squared error, averaged over layers), so the layers
learn independently and errors do not compound. Only the attention layers train (the rest would get
no gradient). Stage 2, :func:`distill_logits`: the whole student runs on the tokens and every
parameter trains to minimise ``KL(teacher || student)`` of the next-token distributions. Both run
through :func:`path_lib.training.loop.train` (AdamW, warm-up and cosine, clipping, seeded data, resumable
checkpoints), so a stage is recorded like any other run.
"""
from __future__ import annotations

import math
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union, cast

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..nn.layers import PaTHAttention, RoPEAttention
from ..nn.model import TinyLM
from ..training.loop import IGNORE_INDEX, TrainConfig, train
from ..validation import check_seed

__all__ = ["INITS", "NEW_PARAMETERS", "convert_rope_to_path", "remove_rope", "new_parameter_names",
           "attention_mse", "logit_kl", "distill_attention", "distill_logits", "convert_and_distill"]

#: initialisations of the new PaTH parameters (see the module docstring)
INITS = ("nope", "fresh")
#: the parameters a PaTH layer has and a RoPE layer does not (per attention module)
NEW_PARAMETERS = ("w_down.weight", "w_up.weight", "w_conv.weight", "beta_proj.weight", "beta_proj.bias",
                  "g_proj.weight", "g_proj.bias")
_INHERITED = ("n_kv_heads", "head_dim", "use_forget_gate")

Batch = Tuple[torch.Tensor, torch.Tensor]
Batches = Union[Callable[[int, torch.Generator], Batch], Sequence]


# ----------------------------------------------------------------------------------------------
# checks
# ----------------------------------------------------------------------------------------------

def _check_tinylm(model, name: str) -> TinyLM:
    if not isinstance(model, TinyLM):
        raise TypeError(f"{name} must be a path_lib.nn.model.TinyLM, got {type(model).__name__}")
    return model


def _check_rope_teacher(teacher) -> TinyLM:
    _check_tinylm(teacher, "teacher")
    bad = [f"{i}: {type(b.attn).__name__}" for i, b in enumerate(teacher.blocks) if not isinstance(b.attn, RoPEAttention)]
    if bad:
        raise ValueError("teacher must have RoPE attention in every layer (TinyLM(attention='rope')); layers "
                         + ", ".join(bad) + " are not RoPEAttention")
    return teacher


def _sizes(model: TinyLM) -> Dict:
    first = next(iter(model._each_block()))
    a = first.attn
    return {"vocab_size": model.embed.num_embeddings, "d_model": model.embed.embedding_dim,
            "n_layers": len(model.blocks), "n_heads": a.n_heads, "n_kv_heads": a.n_kv_heads, "head_dim": a.head_dim,
            "mlp_hidden": first.mlp[0].out_features}


def _check_pair(student, teacher, keys: Sequence[str]) -> None:
    _check_tinylm(student, "student")
    _check_tinylm(teacher, "teacher")
    if student is teacher:
        raise ValueError("student and teacher must be different models (got the same object twice)")
    s, t = _sizes(student), _sizes(teacher)
    diff = [f"{k} {s[k]} vs {t[k]}" for k in keys if s[k] != t[k]]
    if diff:
        raise ValueError("student and teacher sizes do not match (student vs teacher): " + ", ".join(diff))


def _unit_interval(value, name: str, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TypeError(f"{name} must be a finite float, got {value!r}")
    if not lo < value < hi:
        raise ValueError(f"{name} must lie strictly between {lo} and {hi}, got {value}")
    return float(value)


# ----------------------------------------------------------------------------------------------
# conversion
# ----------------------------------------------------------------------------------------------

def new_parameter_names(model: TinyLM) -> List[str]:
    """Names (in ``model.state_dict()``) of the parameters of ``model`` that a RoPE ``TinyLM`` of the same
    sizes does not have: the PaTH layers' ``w``, ``beta`` and forget-gate parameters."""
    _check_tinylm(model, "model")
    return [f"blocks.{i}.attn.{n}" for i, b in enumerate(model.blocks) if isinstance(b.attn, PaTHAttention)
            for n, _ in b.attn.named_parameters() if n in NEW_PARAMETERS]


def _student_like(teacher: TinyLM, attention: str, seed: int, **kw) -> TinyLM:
    sz = _sizes(teacher)
    tie = teacher.head.weight is teacher.embed.weight
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        student = TinyLM(sz["vocab_size"], sz["d_model"], sz["n_layers"], sz["n_heads"], attention=attention,
                         mlp_ratio=sz["mlp_hidden"] / sz["d_model"], tie_embeddings=tie,
                         n_kv_heads=sz["n_kv_heads"], head_dim=sz["head_dim"], **kw)
    if _sizes(student) != sz:
        raise ValueError(f"could not rebuild the teacher's sizes {sz}: got {_sizes(student)}")
    p = next(teacher.parameters())
    return student.to(device=p.device, dtype=p.dtype)


@torch.no_grad()
def convert_rope_to_path(teacher: TinyLM, *, attention: str = "path", init: str = "nope",
                         beta_init: float = 0.1, forget_init: float = 0.99, seed: int = 0,
                         **path_kwargs) -> TinyLM:
    """A PaTH (``attention="path"``) or PaTH-FoX (``"path_fox"``) ``TinyLM`` built from a RoPE teacher.

    Args:
        teacher: a ``TinyLM`` whose every attention layer is ``RoPEAttention`` (left unchanged).
        attention: ``"path"`` or ``"path_fox"``.
        init: ``"nope"``: the new parameters start so that the model computes the teacher without its
            rotations up to ``beta_init`` per step (every ``beta_t = beta_init``; module docstring);
            ``"fresh"``: the library's initialisation of a new PaTH layer.
        beta_init: with ``init="nope"``, every token's ``beta`` at the start, in ``(0, 2)`` (and at most
            ``beta_max`` when given).
        forget_init: with ``init="nope"`` and PaTH-FoX, every token's forget value ``exp(g)`` at the
            start, in ``(0, 1)``.
        seed: seeds the fresh parts (the ``w`` projections and convolution); the global RNG is untouched.
        **path_kwargs: ``PaTHAttention`` options: ``w_rank``, ``conv_size``, ``beta_max``, ``backend``,
            ``block_size`` (the head sizes are the teacher's).

    Returns:
        a new ``TinyLM`` on the teacher's device and dtype, in training mode: vocabulary, width, depth,
        heads, MLP width and embedding tying as the teacher; every shared parameter equal to the
        teacher's (a copy); ``forward(tokens [B, T]) -> logits [B, T, vocab_size]``.
    """
    _check_rope_teacher(teacher)
    if attention not in ("path", "path_fox"):
        raise ValueError(f"attention must be 'path' or 'path_fox', got {attention!r}")
    if init not in INITS:
        raise ValueError(f"init must be one of {INITS}, got {init!r}")
    beta_init = _unit_interval(beta_init, "beta_init", 0.0, 2.0)
    forget_init = _unit_interval(forget_init, "forget_init", 0.0, 1.0)
    check_seed(seed)
    clash = sorted(set(path_kwargs) & set(_INHERITED))
    if clash:
        raise ValueError(f"{', '.join(clash)} come from the teacher (or from attention=); do not pass them")
    bmax = path_kwargs.get("beta_max")
    if init == "nope" and isinstance(bmax, (int, float)) and not isinstance(bmax, bool) and beta_init > bmax:
        raise ValueError(f"beta_init ({beta_init}) must not exceed beta_max ({bmax})")
    student = _student_like(teacher, attention, seed, **path_kwargs)
    missing, unexpected = student.load_state_dict(teacher.state_dict(), strict=False)
    new = set(new_parameter_names(student))
    if unexpected or set(missing) != new:
        raise ValueError(f"teacher's parameters do not map onto the student: unexpected {sorted(unexpected)}, "
                         f"missing {sorted(set(missing) - new)}")
    if init == "nope":
        b0 = math.log(beta_init / (2.0 - beta_init))              # 2 sigmoid(b0) = beta_init
        f0 = math.log(forget_init / (1.0 - forget_init))          # sigmoid(f0) = forget_init
        for block in student._each_block():
            a = cast(PaTHAttention, block.attn)               # the student's layers are PaTH's
            a.beta_proj.weight.zero_()
            a.beta_proj.bias.fill_(b0)
            if a.g_proj is not None:
                a.g_proj.weight.zero_()
                a.g_proj.bias.fill_(f0)
    return student.train()


@torch.no_grad()
def remove_rope(teacher: TinyLM) -> TinyLM:
    """The teacher with its rotations removed: a NoPE ``TinyLM`` with every weight of ``teacher`` (a copy).

    What ``convert_rope_to_path(teacher, init="nope", beta_init=b)`` approaches as ``b -> 0``."""
    _check_rope_teacher(teacher)
    nope = _student_like(teacher, "nope", 0)
    nope.load_state_dict(teacher.state_dict(), strict=True)
    return nope.train(teacher.training)


# ----------------------------------------------------------------------------------------------
# the two losses
# ----------------------------------------------------------------------------------------------

class _Capture:
    """Forward hooks on every attention layer of a model: record each layer's input and output."""

    def __init__(self, model: TinyLM):
        self.inputs: List[torch.Tensor] = []
        self.outputs: List[torch.Tensor] = []
        self.handles = [b.attn.register_forward_hook(self._hook) for b in model._each_block()]

    def _hook(self, module, args, output):
        self.inputs.append(args[0])
        self.outputs.append(output)

    def remove(self):
        for h in self.handles:
            h.remove()


def _teacher_pass(teacher: TinyLM, x: torch.Tensor):
    """Teacher logits and per-layer attention inputs/outputs, without gradient."""
    cap = _Capture(teacher)
    try:
        with torch.no_grad():
            logits = teacher(x)
    finally:
        cap.remove()
    return logits, cap.inputs, cap.outputs


def _attention_mse(student: TinyLM, inputs, outputs) -> torch.Tensor:
    errs = [F.mse_loss(b.attn(h).float(), o.float()) for b, h, o in zip(student._each_block(), inputs, outputs)]
    return torch.stack(errs).mean()


def _masked_kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean over positions with ``targets != -100`` of ``KL(softmax(teacher) || softmax(student))``."""
    lt = F.log_softmax(teacher_logits.float(), dim=-1)
    ls = F.log_softmax(student_logits.float(), dim=-1)
    kl = (lt.exp() * (lt - ls)).sum(-1)                                # [B, T]
    mask = (targets != IGNORE_INDEX).to(kl.dtype)
    return (kl * mask).sum() / mask.sum().clamp(min=1.0)


def _check_tokens_arg(x, name: str, vocab_size: Optional[int] = None) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids [B, T], got {type(x).__name__}")
    if x.dim() != 2 or x.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"{name} must be token ids [B, T] (int64), got shape {tuple(x.shape)} and dtype {x.dtype}")
    if vocab_size is not None and x.numel() and (int(x.min()) < 0 or int(x.max()) >= vocab_size):
        raise ValueError(f"{name} must hold token ids in [0, {vocab_size}) (the models' vocabulary)")


@torch.no_grad()
def attention_mse(student: TinyLM, teacher: TinyLM, inputs: torch.Tensor) -> float:
    """Stage 1's loss on one batch ``inputs [B, T]``: mean over layers of the mean-squared error between
    the student's attention output on the teacher's layer input and the teacher's attention output."""
    _check_pair(student, teacher, ("d_model", "n_layers", "vocab_size"))
    _check_tokens_arg(inputs, "inputs", teacher.embed.num_embeddings)
    was = student.training, teacher.training
    student.eval(), teacher.eval()
    try:
        _, t_in, t_out = _teacher_pass(teacher, inputs)
        return float(_attention_mse(student, t_in, t_out))
    finally:
        student.train(was[0]), teacher.train(was[1])


@torch.no_grad()
def logit_kl(student: TinyLM, teacher: TinyLM, inputs: torch.Tensor, targets: Optional[torch.Tensor] = None) -> float:
    """Stage 2's loss on one batch: mean ``KL(teacher || student)`` of the next-token distributions over
    the positions of ``inputs [B, T]`` whose ``targets`` (optional ``[B, T]``, a mask) are not -100."""
    _check_pair(student, teacher, ("vocab_size",))
    _check_tokens_arg(inputs, "inputs", teacher.embed.num_embeddings)
    if targets is None:
        targets = torch.zeros_like(inputs)
    elif isinstance(targets, torch.Tensor) and targets.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"targets must be an integer mask (-100: not scored), got {targets.dtype}")
    elif not isinstance(targets, torch.Tensor) or targets.shape != inputs.shape:
        raise ValueError(f"targets must be None or a tensor of the shape of inputs {tuple(inputs.shape)}, got "
                         f"{tuple(targets.shape) if isinstance(targets, torch.Tensor) else type(targets).__name__}")
    was = student.training, teacher.training
    student.eval(), teacher.eval()
    try:
        return float(_masked_kl(student(inputs), teacher(inputs), targets))
    finally:
        student.train(was[0]), teacher.train(was[1])


# ----------------------------------------------------------------------------------------------
# the two stages, through path_lib.training.loop.train
# ----------------------------------------------------------------------------------------------

class _Objective(nn.Module):
    """What :func:`path_lib.training.loop.train` trains during a stage: the student (its only submodule, so the
    optimiser, the clipping and the checkpoints see exactly the student's parameters) and the stage's
    loss. The teacher is held outside the module tree and never trained.

    In training mode, ``forward(x)`` runs the teacher and the student and stores the loss pieces; it
    returns logits ``[B, T, V]`` for the loop's target check (stage 2: the student's; stage 1, which
    never runs the student's head: the teacher's). In eval mode it is the student alone."""

    teacher: TinyLM                              # set in __init__ outside the module tree

    def __init__(self, student: TinyLM, teacher: TinyLM, stage: str):
        super().__init__()
        self.student = student
        self.__dict__["teacher"] = teacher       # not a submodule: not trained, not checkpointed
        self.stage = stage
        self.mse: Optional[torch.Tensor] = None
        self.teacher_logits: Optional[torch.Tensor] = None

    def forward(self, x):
        if not self.training:
            return self.student(x)
        self.teacher.eval()
        logits, t_in, t_out = _teacher_pass(self.teacher, x)
        if self.stage == "attention":
            self.mse = _attention_mse(self.student, t_in, t_out)
            return logits
        self.teacher_logits = logits
        return self.student(x)

    def loss(self, logits, targets):
        if self.stage == "attention":
            return self.mse
        if self.teacher_logits is None:
            raise RuntimeError("_Objective.loss: the stage-2 forward has not run in training mode yet")
        return _masked_kl(logits, self.teacher_logits, targets)


def _as_sample(batches) -> Callable[[int, torch.Generator], Batch]:
    """``sample(step, generator)`` from a callable (returned as is) or a non-empty sequence of batches
    (step ``s`` uses batch ``s % len``); a batch is ``(inputs, targets)`` or ``inputs`` alone (every
    position distilled)."""
    if callable(batches):
        return batches
    if isinstance(batches, (torch.Tensor, str, bytes)) or not isinstance(batches, Sequence):
        raise TypeError("batches must be a callable sample(step, generator) -> (inputs, targets) or a list of "
                        f"batches, got {type(batches).__name__}")
    if not batches:
        raise ValueError("batches must not be empty")
    fixed = []
    for i, b in enumerate(batches):
        if isinstance(b, torch.Tensor):
            b = (b, torch.zeros_like(b))
        if not (isinstance(b, (tuple, list)) and len(b) == 2 and all(isinstance(t, torch.Tensor) for t in b)):
            raise TypeError(f"batches[{i}] must be a tensor of token ids or an (inputs, targets) pair of tensors")
        if b[0].dim() != 2 or b[0].shape != b[1].shape:
            raise ValueError(f"batches[{i}] must hold inputs and targets of one shape [B, T], got "
                             f"{tuple(b[0].shape)} and {tuple(b[1].shape)}")
        fixed.append((b[0], b[1]))
    return lambda step, gen: fixed[step % len(fixed)]


def _run_stage(stage: str, student, teacher, batches, config, trainable, device, **train_kwargs) -> Dict:
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a path_lib.training.loop.TrainConfig, got {type(config).__name__}")
    sample = _as_sample(batches)
    device = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    teacher.to(device)
    objective = _Objective(student, teacher, stage)
    frozen = []
    if stage == "attention":
        keep = {id(p) for b in student.blocks for p in b.attn.parameters()}
        if trainable == "new":
            names = set(new_parameter_names(student))
            keep = {id(p) for n, p in student.named_parameters() if n in names}
        for p in student.parameters():
            if id(p) not in keep and p.requires_grad:
                p.requires_grad_(False)
                frozen.append(p)
    try:
        result = train(objective, sample, config, device=device, loss_fn=objective.loss, **train_kwargs)
    finally:
        for p in frozen:
            p.requires_grad_(True)
    result["stage"] = stage
    result["trainable"] = trainable
    return result


_STAGE_DOC = """

    Args:
        student: the ``TinyLM`` to train (e.g. from :func:`convert_rope_to_path`); trained in place.
        teacher: the ``TinyLM`` to imitate (never changed; moved to ``device``).
        batches: ``sample(step, generator) -> (inputs [B, T] long, targets [B, T] long)`` as for
            :func:`path_lib.training.loop.train` (targets only mask positions: -100 is not distilled), or a list of
            such pairs or of ``inputs`` tensors (step ``s`` uses ``batches[s % len(batches)]``).
        config: a :class:`path_lib.training.loop.TrainConfig` (steps, schedule, seed).
        device: default cuda if available, else cpu.
        **train_kwargs: passed to :func:`path_lib.training.loop.train`: ``data_seed``, ``checkpoint_path``,
            ``deadline``, ``stop_after_steps``, ``eval_sets`` (evaluated on the student's own loss),
            ``progress``, ``log_every``, ...
    Returns:
        :func:`path_lib.training.loop.train`'s dict (its losses are this stage's), plus ``"stage"`` and ``"trainable"``.
"""


def distill_attention(student: TinyLM, teacher: TinyLM, batches: Batches, *, config: TrainConfig,
                      trainable: str = "attention", device=None, progress: bool = False, **train_kwargs) -> Dict:
    """Stage 1: per-layer mean-squared error of attention outputs, the student's layer fed the teacher's
    layer input (captured by forward hooks). ``trainable``: ``"attention"`` (every attention parameter:
    q, k, v, o and the PaTH parts; default) or ``"new"`` (only the PaTH parts); everything else is frozen
    for the stage. Student and teacher need the same ``d_model``, layers and vocabulary.
    """
    _check_pair(student, teacher, ("d_model", "n_layers", "vocab_size"))
    if trainable not in ("attention", "new"):
        raise ValueError(f"trainable must be 'attention' or 'new', got {trainable!r}")
    if trainable == "new" and not new_parameter_names(student):
        raise ValueError("trainable='new' needs a student with PaTH attention (it has no new parameters)")
    return _run_stage("attention", student, teacher, batches, config, trainable, device, progress=progress,
                      **train_kwargs)


def distill_logits(student: TinyLM, teacher: TinyLM, batches: Batches, *, config: TrainConfig, device=None,
                   progress: bool = False, **train_kwargs) -> Dict:
    """Stage 2: ``KL(teacher || student)`` of the next-token distributions at every scored position, the
    whole student trained end to end. Student and teacher need the same vocabulary."""
    _check_pair(student, teacher, ("vocab_size",))
    return _run_stage("logits", student, teacher, batches, config, "all", device, progress=progress,
                      **train_kwargs)


distill_attention.__doc__ = (distill_attention.__doc__ or "") + _STAGE_DOC
distill_logits.__doc__ = (distill_logits.__doc__ or "") + _STAGE_DOC


def convert_and_distill(teacher: TinyLM, batches: Batches, *, stage1: TrainConfig, stage2: TrainConfig,
                        attention: str = "path", init: str = "nope", beta_init: float = 0.1,
                        forget_init: float = 0.99, seed: int = 0, device=None, stage2_batches: Optional[Batches] = None,
                        progress: bool = False, **path_kwargs) -> Tuple[TinyLM, Dict[str, Dict]]:
    """The whole conversion in one call: :func:`convert_rope_to_path`, then stage 1
    (:func:`distill_attention`, ``stage1``'s steps), then stage 2 (:func:`distill_logits`, ``stage2``'s steps).

    Args:
        teacher: a trained ``TinyLM`` with RoPE attention in every layer (never changed).
        batches: the stages' data, as for :func:`distill_attention` (a callable ``sample(step, generator)
            -> (inputs [B, T], targets [B, T])`` or a list of batches); ``stage2_batches``, if given, feeds
            stage 2 instead (paper A used far more data in stage 2 than in stage 1).
        stage1, stage2: :class:`path_lib.training.loop.TrainConfig` of each stage.
        attention, init, beta_init, forget_init, seed: as for :func:`convert_rope_to_path`.
        **path_kwargs: as for :func:`convert_rope_to_path`.
        device: where the stages train (default cuda if available, else cpu).

    Returns:
        ``(student, {"stage1": result, "stage2": result})``: the trained student ``TinyLM`` and each
        stage's :func:`path_lib.training.loop.train` result.
    """
    for name, cfg in (("stage1", stage1), ("stage2", stage2)):
        if not isinstance(cfg, TrainConfig):
            raise TypeError(f"{name} must be a path_lib.training.loop.TrainConfig, got {type(cfg).__name__}")
    student = convert_rope_to_path(teacher, attention=attention, init=init, beta_init=beta_init,
                                   forget_init=forget_init, seed=seed, **path_kwargs)
    first = distill_attention(student, teacher, batches, config=stage1, device=device, progress=progress)
    second = distill_logits(student, teacher, batches if stage2_batches is None else stage2_batches,
                            config=stage2, device=device, progress=progress)
    return student, {"stage1": first, "stage2": second}
