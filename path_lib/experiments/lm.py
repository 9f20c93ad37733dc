"""Language-modelling experiments on length extrapolation: train short, evaluate long, probe retrieval.

    from path_lib.experiments.lm import PRESETS, run_experiment
    results = run_experiment(PRESETS["tiny"], models=["NoPE", "RoPE", "PaTH"])

The pieces, usable on their own:

* :data:`MODELS`: name -> TinyLM keyword arguments (NoPE, RoPE, ALiBi, FoX, PaTH, PaTH-FoX and the
  accumulated-rotation variants of :mod:`path_lib.nn.rotations`: paper B's token-angle ``TokRot-*`` and
  the earlier hidden-state ``HidRot-*``); :data:`COMPARISON_MODELS`: the nine of the recorded comparison.
* :class:`LMConfig` and :data:`PRESETS` (``"tiny"``: CPU, the book build; ``"full"``: one H200).
* :func:`train_model`: :func:`path_lib.training.loop.train` (AdamW, warmup + cosine, gradient clipping, a fixed
  number of steps, resumable from a checkpoint); a fraction ``probe_mix`` of each batch is a passkey
  example at the training length (so the probe measures how a skill learned at the training length
  survives longer contexts). Every model with seed ``s`` sees the same batches.
* :func:`evaluate_lengths`: next-byte loss on the *same* validation bytes with contexts of growing
  length (so the ratio changes only through the context).
* :func:`make_passkey`, :func:`probe_retrieval`: a passkey hidden at a random depth in real code and
  asked for at the end (RULER's single needle); exact match of the 5 digits under teacher forcing,
  which equals exact match of greedy generation (the first wrong digit is the first place where they
  could differ).
* :func:`run_model`: train, evaluate, probe one model (and measure its far attention mass,
  :mod:`path_lib.experiments.farmass`); :func:`run_experiment` runs them all, for one or several seeds, and returns
  per-run records for :func:`path_lib.training.loop.comparison_table`.
* :data:`PAPER_B_RATIOS`, :data:`PAPER_A_CURVES`: the papers' numbers and statements, for side-by-side
  tables, always labelled as the papers'.
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Set

import torch
import torch.nn.functional as F

from ..nn import rotations  # noqa: F401  (registers the rotation variants)
from ..training.corpus import Corpus, encode, load_corpus, sample_windows
from ..nn.model import TinyLM
from ..hardware import complete_presets
from ..impl import resolve_backend
from ..training.loop import TrainConfig, run_record, train
from ..validation import (as_device, check_bool, check_callable, check_choice, check_generator, check_instance, check_int, check_ints,
                          check_mapping, check_number, check_seed, check_str, check_tensor)

__all__ = ["MODELS", "COMPARISON_MODELS", "LEGACY_MODEL_NAMES", "LMConfig", "PRESETS", "PAPER_B_RATIOS",
           "PAPER_A_CURVES", "build_model", "token_sigma_min", "path_backend", "pick_backend", "time_step",
           "train_model", "evaluate_lengths", "make_passkey", "passkey_batch", "probe_retrieval", "run_model",
           "run_experiment", "summary_line", "ratio_table", "lm_metrics", "seed_curves", "record_inequality",
           "steps_table", "paper_checks", "flat_and_degrading"]

MODELS: Dict[str, dict] = {
    "NoPE": dict(attention="nope"),
    "RoPE": dict(attention="rope"),
    "ALiBi": dict(attention="alibi"),
    "FoX": dict(attention="fox"),
    "PaTH": dict(attention="path"),
    "PaTH-FoX": dict(attention="path_fox"),
    # paper B's variants: step angles from the token ids (a per-token table), a spread of block scales
    "TokRot-QK": dict(attention="tok_rot_qk"),
    "TokRot-QKV": dict(attention="tok_rot_qkv"),
    "TokRot-learned": dict(attention="tok_rot_learned"),
    # this project's first instantiation: angles from the hidden state of every layer (scales up to pi)
    "HidRot-QK": dict(attention="hid_rot_qk"),
    "HidRot-QKV": dict(attention="hid_rot_qkv"),
    "HidRot-learned": dict(attention="hid_rot_learned"),
}
#: the models of the recorded comparison (the hidden-state rotations are kept for the older records)
COMPARISON_MODELS = ["NoPE", "RoPE", "ALiBi", "FoX", "PaTH", "PaTH-FoX", "TokRot-QK", "TokRot-QKV", "TokRot-learned"]
#: names used in records made before the token-angle variants existed -> today's names
LEGACY_MODEL_NAMES = {"rand_rot_qk": "HidRot-QK", "rand_rot_qkv": "HidRot-QKV", "learned_rot": "HidRot-learned"}

# Paper B (Godavarti 2026), trained at 512 on OpenWebText, 16 layers x 768: ppl(L) / ppl(512).
# From the paper's summary; "random accumulated rotations" at 8K does not say Q/K or Q/K/V.
# "ours": the closest of our models (paper B's form: token-angle rotations).
PAPER_B_RATIOS: List[dict] = [
    {"model": "RoPE", "ours": "RoPE", "length": 8192, "train_len": 512, "ratio": 16.2},
    {"model": "random accumulated rotations", "ours": "TokRot-QK", "length": 8192, "train_len": 512, "ratio": 1.60},
    {"model": "random rotations, Q/K/V", "ours": "TokRot-QKV", "length": 65536, "train_len": 512, "ratio": 1.59},
    {"model": "random rotations, Q/K only", "ours": "TokRot-QK", "length": 65536, "train_len": 512, "ratio": 7.49},
    {"model": "ALiBi", "ours": "ALiBi", "length": 65536, "train_len": 512, "ratio": 0.96},
]
# Paper A (Yang et al. 2025), 760M params trained at 4096: qualitative extrapolation curves.
PAPER_A_CURVES: Dict[str, str] = {
    "RoPE": "fails just past the training length (4K)",
    "PaTH": "stable to about 32K (8x), then degrades (most on code)",
    "FoX": "stable to 64K (16x)",
    "PaTH-FoX": "stable to 64K (16x), lower perplexity than FoX",
    "TokRot-learned": "(paper B, learned token-dependent rotations) stays near training perplexity far past 512",
}


@dataclass
class LMConfig:
    """Everything one experiment needs. ``eval_mults`` and ``probe_mults`` are multiples of ``train_len``."""

    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 2
    train_len: int = 64
    batch: int = 16
    steps: int = 150
    lr: float = 3e-3
    weight_decay: float = 0.01
    warmup: int = 20
    clip: float = 1.0
    probe_mix: float = 0.125
    eval_mults: Sequence[int] = (1, 2, 4, 8)
    eval_tokens: int = 4096          # validation tokens per length (at least one window)
    eval_chunk_tokens: int = 8192    # windows per forward pass: batch * length <= this (>= one window)
    eval_max_len: Dict[str, int] = field(default_factory=dict)   # per-model cap on the eval length
    probe_mults: Sequence[int] = (1, 2, 4)
    probe_examples: int = 16
    corpus_bytes: int = 4_000_000
    seed: int = 0
    train_seconds: Optional[float] = None   # if set: steps = min(steps, budget / slowest model's step)
    path_block_size_train: int = 64
    path_block_size_eval: int = 64
    far_mass_windows: int = 0                # > 0: measure far attention mass (path_lib.experiments.farmass) after training
    far_mass_distance: Optional[int] = None  # M (default train_len // 2)
    eval_sets: int = 1               # independent draws of the scored spans (eval_tokens split among them)
    corpus: str = "stdlib"           # path_lib.training.corpus.load_corpus: "stdlib" (code) or "brown" (prose)
    autocast_bf16: bool = False      # train under bfloat16 autocast on CUDA (evaluation stays float32)

    def __post_init__(self):
        """Check every field (a TypeError / ValueError naming it); the multiples become tuples of ints."""
        for name in ("d_model", "n_layers", "n_heads", "train_len", "batch", "steps", "eval_tokens",
                     "eval_chunk_tokens", "probe_examples", "corpus_bytes", "path_block_size_train",
                     "path_block_size_eval"):
            check_int(getattr(self, name), name, minimum=1)
        for name in ("warmup", "far_mass_windows"):
            check_int(getattr(self, name), name, minimum=0)
        check_int(self.far_mass_distance, "far_mass_distance", minimum=0, optional=True)
        check_seed(self.seed)
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be a multiple of n_heads ({self.n_heads})")
        check_number(self.lr, "lr", positive=True)
        check_number(self.weight_decay, "weight_decay", minimum=0.0)
        check_number(self.clip, "clip", minimum=0.0)
        check_number(self.probe_mix, "probe_mix", minimum=0.0, maximum=1.0)
        check_number(self.train_seconds, "train_seconds", positive=True, optional=True)
        check_bool(self.autocast_bf16, "autocast_bf16")
        self.eval_mults = tuple(check_ints(self.eval_mults, "eval_mults", minimum=1))
        self.probe_mults = tuple(check_ints(self.probe_mults, "probe_mults", minimum=1))
        for model, cap in check_mapping(self.eval_max_len, "eval_max_len").items():
            check_str(model, "eval_max_len's keys")
            check_int(cap, f"eval_max_len[{model!r}]", minimum=1)


# Every preset of path_lib.hardware.PRESET_TABLE not given here (small: a T4-class GPU) lies between tiny and
# full (path_lib.hardware.complete_presets), as the chapters pick it.
PRESETS: Dict[str, LMConfig] = complete_presets({
    # CPU, the book build: a few seconds per model on 2 cores.
    "tiny": LMConfig(d_model=64, n_layers=2, n_heads=2, train_len=64, batch=16, steps=120, lr=3e-3,
                     warmup=15, eval_mults=(1, 2, 4, 8), eval_tokens=2048, probe_mults=(1, 2, 4),
                     probe_examples=12, corpus_bytes=2_000_000),
    # One H200, the nine models in parallel processes (scripts/experiments/run_lm.py --workers 9): 1200 equal
    # steps (a time limit stops a model early only as a safety, and the record says so).
    "full": LMConfig(d_model=256, n_layers=4, n_heads=4, train_len=256, batch=64, steps=1200, lr=2e-3,
                     warmup=60, eval_mults=(1, 2, 4, 8, 16, 32, 64), eval_tokens=16384,
                     eval_chunk_tokens=16384, probe_mults=(1, 2, 4, 8, 16), probe_examples=64,
                     corpus_bytes=32_000_000, path_block_size_train=128, path_block_size_eval=256),
    # One H200, equal training by construction (scripts/experiments/run_equal.py): every model and seed the same
    # steps on the same batches; sizes chosen in scripts/experiments/gpu_plan.md from measured step rates.
    "equal": LMConfig(d_model=256, n_layers=4, n_heads=4, train_len=256, batch=64, steps=500, lr=2e-3,
                      warmup=40, eval_mults=(1, 2, 4, 8, 16, 64), eval_tokens=8192,
                      eval_chunk_tokens=16384, probe_mults=(1, 2, 4, 8, 16), probe_examples=32,
                      corpus_bytes=32_000_000, path_block_size_train=128, path_block_size_eval=256,
                      far_mass_windows=8),
    # One GPU, the runs that decide the claims (issue: 2,000 steps, 5 seeds, two corpora, 64K scored bytes
    # per evaluation length in 4 independent evaluation sets of 16K).
    "decide": LMConfig(d_model=256, n_layers=4, n_heads=4, train_len=256, batch=64, steps=2000, lr=2e-3,
                       warmup=100, eval_mults=(1, 2, 4, 8, 16, 64), eval_tokens=65536, eval_sets=4,
                       eval_chunk_tokens=16384, probe_mults=(1, 2, 4, 8, 16), probe_examples=32,
                       corpus_bytes=32_000_000, path_block_size_train=128, path_block_size_eval=256,
                       far_mass_windows=8),
    # The same at a second size (26M parameters: 512 wide, 8 layers, 8 heads of 64), for RoPE, PaTH,
    # FoX and PaTH-FoX: does each direction hold as the models grow?
    "decide_large": LMConfig(d_model=512, n_layers=8, n_heads=8, train_len=256, batch=64, steps=2000,
                             lr=1e-3, warmup=100, eval_mults=(1, 2, 4, 8, 16, 64), eval_tokens=65536,
                             eval_sets=4, eval_chunk_tokens=16384, probe_mults=(1, 2, 4, 8, 16),
                             probe_examples=32, corpus_bytes=32_000_000, path_block_size_train=128,
                             path_block_size_eval=256, far_mass_windows=8),
})


# ----------------------------------------------------------------------------------------------
# models
# ----------------------------------------------------------------------------------------------

def path_backend(device, head_dim: int = 64, dtype: torch.dtype = torch.bfloat16) -> str:
    """The PaTH backend the experiments run on ``device``: :func:`path_lib.impl.resolve_backend`'s choice
    for ``"auto"`` (the Triton kernels on CUDA once their code passed the GPU sweep, else the blockwise
    mirror), for heads of ``head_dim`` in ``dtype``."""
    device = as_device(device)
    check_int(head_dim, "head_dim", minimum=1)
    check_instance(dtype, "dtype", torch.dtype, "a torch.dtype")
    return resolve_backend("auto", device=device, dtype=dtype, head_dim=head_dim)


def build_model(name: str, cfg: LMConfig, *, device="cpu", path_backend_name: str = "blockwise",
                seed: Optional[int] = None) -> TinyLM:
    """A byte-level ``TinyLM`` (vocab 256) with the attention of ``MODELS[name]``, seeded (a legacy name of
    :data:`LEGACY_MODEL_NAMES` builds today's model of that name)."""
    from ..impl import CHOICES
    name = LEGACY_MODEL_NAMES.get(check_str(name, "name"), name)
    if name not in MODELS:
        raise ValueError(f"name must be a model of {sorted(MODELS)}, got {name!r}")
    check_instance(cfg, "cfg", LMConfig)
    device = as_device(device)
    check_choice(path_backend_name, "path_backend_name", CHOICES["path_layer"])
    torch.manual_seed(cfg.seed if check_seed(seed, optional=True) is None else seed)
    kw = dict(MODELS[name])
    if kw["attention"] in ("path", "path_fox"):
        kw["backend"] = path_backend_name
        kw["block_size"] = cfg.path_block_size_train
    if kw["attention"].startswith("tok_rot"):
        kw.setdefault("sigma_min", token_sigma_min(cfg.train_len))
    return TinyLM(256, cfg.d_model, cfg.n_layers, cfg.n_heads, **kw).to(device)


def token_sigma_min(train_len: int) -> float:
    """The slowest block's angle scale for the token-angle rotations: its mixing window
    ``2 / sigma^2`` (:func:`path_lib.nn.rotations.mixing_windows`) is half the training length, so every
    block has mixed within the contexts seen in training (the fastest, ``sigma = 1``, in 2 tokens)."""
    check_int(train_len, "train_len", minimum=1)
    return min(1.0, math.sqrt(2.0 / max(1.0, train_len / 2)))


def _set_path_block_size(model: TinyLM, block_size: int) -> None:
    for m in model.modules():
        if hasattr(m, "block_size") and hasattr(m, "backend"):
            setattr(m, "block_size", block_size)             # (a plain attribute, not a tensor or module)


# ----------------------------------------------------------------------------------------------
# the passkey probe (RULER's single needle in a haystack, in code)
# ----------------------------------------------------------------------------------------------

PASSKEY_CUE = "\n# the passkey is "


def make_passkey(length: int, filler: torch.Tensor, generator: torch.Generator):
    """One passkey example of exactly ``length`` bytes: real code as the haystack, one needle line
    ``# the passkey is 48213`` at a uniformly random depth, and the same cue at the very end::

        <code> \\n# the passkey is 48213\\n <code> \\n# the passkey is 48213

    Args:
        length: bytes in the example (at least 64).
        filler: 1-D ``uint8`` bytes to cut the haystack from (a corpus split).
        generator: a seeded CPU ``torch.Generator``.
    Returns:
        ``(tokens [length] int64, depth)``: the answer's 5 digits are the last 5 bytes; ``depth`` is the
        needle's start as a fraction of the length (0 = the beginning).
    """
    check_int(length, "length", minimum=64)
    check_tensor(filler, "filler", ndim=1, dtypes=(torch.uint8, torch.int64, torch.int32), finite=False)
    check_generator(generator)
    key = int(torch.randint(10000, 100000, (1,), generator=generator))
    needle, query = encode(f"{PASSKEY_CUE}{key}\n"), encode(f"{PASSKEY_CUE}{key}")
    n_hay = length - needle.numel() - query.numel()
    if length < 64 or n_hay < 1:
        raise ValueError(f"a passkey example needs length >= 64, got {length}")
    if filler.dim() != 1 or filler.numel() < n_hay + 1:
        raise ValueError(f"filler must be 1-D with more than {n_hay} bytes, got shape {tuple(filler.shape)}")
    s0 = int(torch.randint(0, filler.numel() - n_hay, (1,), generator=generator))
    hay = filler[s0:s0 + n_hay].long()
    at = int(torch.randint(0, n_hay + 1, (1,), generator=generator))
    tok = torch.cat([hay[:at], needle, hay[at:], query])
    assert tok.numel() == length
    return tok, at / length


def passkey_batch(n: int, length: int, filler: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """``n`` passkey examples of ``length`` bytes stacked: ``[n, length]`` int64."""
    check_int(n, "n", minimum=1)
    return torch.stack([make_passkey(length, filler, generator)[0] for _ in range(n)])


@torch.no_grad()
def probe_retrieval(model: TinyLM, lengths: Sequence[int], n_examples: int, filler: torch.Tensor, *,
                    seed: int = 1234, device="cpu", chunk_tokens: int = 32768) -> dict:
    """Exact-match and per-digit accuracy of the passkey at each context length.

    Teacher-forced argmax on the 5 answer digits; all 5 right = greedy generation exact match. The
    examples at each length are seeded (the same for every model); ``filler`` should be held-out bytes.
    Returns ``{"lengths": [...], "exact": [...], "digit_acc": [...], "n": n_examples}``.
    """
    check_instance(model, "model", torch.nn.Module, "a torch.nn.Module (bytes [B, T] -> logits [B, T, 256])")
    lengths = check_ints(lengths, "lengths", minimum=64)
    check_int(n_examples, "n_examples", minimum=1)
    check_tensor(filler, "filler", ndim=1, dtypes=(torch.uint8, torch.int64, torch.int32), finite=False)
    check_seed(seed)
    check_seed(seed + max(lengths), "seed + the longest length")
    device = as_device(device)
    check_int(chunk_tokens, "chunk_tokens", minimum=1)
    model.eval()
    done: List[int] = []
    exact: List[float] = []
    digit_acc: List[float] = []
    for L in lengths:
        g = torch.Generator().manual_seed(seed + L)
        toks = passkey_batch(n_examples, L, filler, g)
        per = max(1, chunk_tokens // L)
        correct = []
        for s in range(0, n_examples, per):
            x = toks[s:s + per].to(device)
            logits = model(x[:, :-1])
            pred = logits[:, L - 6:L - 1].argmax(-1)         # predictions of the last 5 bytes
            correct.append((pred == x[:, L - 5:]).cpu())
        c = torch.cat(correct)
        done.append(L)
        exact.append(float(c.all(-1).float().mean()))
        digit_acc.append(float(c.float().mean()))
    return {"lengths": done, "exact": exact, "digit_acc": digit_acc, "n": n_examples}


# ----------------------------------------------------------------------------------------------
# training and evaluation
# ----------------------------------------------------------------------------------------------

def _batch(corpus: Corpus, cfg: LMConfig, g: torch.Generator, device):
    x, y = sample_windows(corpus.train, cfg.batch, cfg.train_len, generator=g)
    n_pb = int(round(cfg.probe_mix * cfg.batch))
    if n_pb:
        pb = passkey_batch(n_pb, cfg.train_len + 1, corpus.train, g)
        x[:n_pb], y[:n_pb] = pb[:, :-1], pb[:, 1:]
    return x.to(device), y.to(device)


def _lr(step: int, cfg: LMConfig, steps: int) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    t = (step - cfg.warmup) / max(1, steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def train_model(model: TinyLM, corpus: Corpus, cfg: LMConfig, *, steps: Optional[int] = None, device="cpu",
                log_every: int = 10, callback: Optional[Callable[[int, float], None]] = None,
                deadline: Optional[float] = None, checkpoint_path: Optional[str] = None,
                stop_after_steps: Optional[int] = None) -> dict:
    """Train ``model`` for ``steps`` (default ``cfg.steps``) AdamW steps on ``corpus.train`` with
    :func:`path_lib.training.loop.train` (warm-up, cosine to 0.1 x lr, clipping; data generator seeded
    ``cfg.seed + 1``, so every model with the same seed sees the same batches).

    ``deadline`` (a ``time.time()`` value) / ``stop_after_steps``: stop without changing the schedule;
    with ``checkpoint_path`` the run resumes from there in a later call (bit-identically on CPU).
    Returns ``{"steps", "steps_planned", "stopped_early", "complete", "seconds", "wall_seconds", "tokens",
    "final_lr", "loss_curve": [[step, loss], ...], "final_loss", "config", ...}`` (``final_loss``: mean of
    the last 10% of steps' training losses, nats per byte).
    """
    check_instance(model, "model", TinyLM)
    check_instance(corpus, "corpus", Corpus)
    check_instance(cfg, "cfg", LMConfig)
    check_int(steps, "steps", minimum=1, optional=True)
    steps = cfg.steps if steps is None else steps
    device = as_device(device)
    tc = TrainConfig(steps=steps, lr=cfg.lr, warmup=min(cfg.warmup, steps), min_lr_ratio=0.1,
                     weight_decay=cfg.weight_decay, betas=(0.9, 0.95), grad_clip=cfg.clip, seed=cfg.seed,
                     autocast_bf16=cfg.autocast_bf16)
    r = train(model, lambda step, g: _batch(corpus, cfg, g, device), tc, device=device, progress=False,
              log_every=log_every, callback=callback, deadline=deadline, checkpoint_path=checkpoint_path,
              stop_after_steps=stop_after_steps, data_seed=cfg.seed + 1)
    return {"steps": r["steps_done"], "steps_planned": r["steps_requested"], "stopped_early": r["stopped_early"],
            "complete": r["complete"], "seconds": r["train_seconds"], "wall_seconds": r["wall_seconds"],
            "calls": r["calls"], "tokens": r["tokens_seen"], "final_lr": r["final_lr"],
            "loss_curve": [[h["step"], h["loss"]] for h in r["history"]], "final_loss": r["final_train_loss"],
            "config": r["config"], "steps_requested": r["steps_requested"], "steps_done": r["steps_done"],
            "tokens_seen": r["tokens_seen"], "data_seed": r["data_seed"]}


def time_step(name: str, cfg: LMConfig, corpus: Corpus, *, device="cpu", path_backend_name="blockwise",
              n: int = 6) -> float:
    """Seconds per training step of a fresh model ``name`` (median of ``n`` after 2 warm-up steps)."""
    check_instance(corpus, "corpus", Corpus)
    check_int(n, "n", minimum=1)
    model = build_model(name, cfg, device=device, path_backend_name=path_backend_name)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    ts = []
    for i in range(n + 2):
        x, y = _batch(corpus, cfg, g, device)
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(x).flatten(0, 1).float(), y.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize()
        if i >= 2:
            ts.append(time.perf_counter() - t0)
    return sorted(ts)[len(ts) // 2]


@torch.no_grad()
def evaluate_lengths(model: TinyLM, data: torch.Tensor, lengths: Sequence[int], *, train_len: int,
                     tokens_per_length: int = 4096, chunk_tokens: int = 8192, seed: int = 4321,
                     device="cpu") -> dict:
    """Validation loss on the **same target bytes** with contexts of growing length.

    ``ceil(tokens_per_length / train_len)`` target spans of ``train_len`` bytes are drawn once (seeded,
    the same for every length and every model). At context length ``L`` each span is scored as the last
    ``min(train_len, L)`` positions of the window of ``L`` bytes that ends with it, so a change of loss
    with ``L`` comes only from the longer context, never from other, easier or harder, bytes.

    Args:
        data: 1-D uint8 validation bytes (longer than ``max(lengths)``).
        lengths: context lengths to evaluate.
        train_len: the training length (the span scored).
        tokens_per_length: scored bytes per length.
        chunk_tokens: windows per forward pass, ``max(1, chunk_tokens // L)``.
    Returns:
        ``{"lengths", "loss", "ppl", "windows", "scored_bytes"}`` (loss in nats per byte).
    """
    check_instance(model, "model", torch.nn.Module, "a torch.nn.Module (bytes [B, T] -> logits [B, T, 256])")
    lengths = check_ints(lengths, "lengths", minimum=1)
    check_int(train_len, "train_len", minimum=1)
    check_int(tokens_per_length, "tokens_per_length", minimum=1)
    check_int(chunk_tokens, "chunk_tokens", minimum=1)
    check_seed(seed)
    device = as_device(device)
    check_tensor(data, "data", ndim=1, dtypes=(torch.uint8, torch.int64, torch.int32), finite=False)
    if data.numel() <= max(lengths):
        raise ValueError(f"data must be 1-D with more than max(lengths) = {max(lengths)} bytes, "
                         f"got shape {tuple(data.shape)}")
    model.eval()
    n = max(1, math.ceil(tokens_per_length / train_len))
    g = torch.Generator().manual_seed(seed)
    ends = torch.randint(max(lengths) + 1, data.numel() + 1, (n,), generator=g)   # exclusive ends
    out: Dict[str, List[float]] = {"lengths": [], "loss": [], "ppl": [], "windows": [], "scored_bytes": []}
    for L in lengths:
        span = min(train_len, L)
        w = data[ends[:, None] - (L + 1) + torch.arange(L + 1)].long()          # [n, L + 1]
        per = max(1, chunk_tokens // L)
        tot = 0.0
        for s in range(0, n, per):
            xb, yb = w[s:s + per, :-1].to(device), w[s:s + per, 1:].to(device)
            logits = model(xb)[:, -span:].float()
            tot += float(F.cross_entropy(logits.flatten(0, 1), yb[:, -span:].flatten(), reduction="sum"))
        loss = tot / (n * span)
        out["lengths"].append(L)
        out["windows"].append(n)
        out["scored_bytes"].append(n * span)
        out["loss"].append(loss)
        out["ppl"].append(math.exp(loss))
    return out


def evaluate_sets(model: TinyLM, data: torch.Tensor, lengths: Sequence[int], *, train_len: int,
                  tokens_per_length: int, n_sets: int = 1, chunk_tokens: int = 8192, seed: int = 4321,
                  device="cpu") -> dict:
    """:func:`evaluate_lengths` on ``n_sets`` independent draws of scored spans (seeds ``seed``,
    ``seed + 1``, ...), ``tokens_per_length // n_sets`` scored bytes each. The pooled loss at each length
    is the mean over the sets (equal sizes); ``"by_set"`` keeps each set's ``loss`` and ``ppl``, so the
    spread over evaluation sets can be read beside the spread over seeds. ``n_sets = 1`` is
    :func:`evaluate_lengths` itself (seed ``seed``)."""
    if isinstance(n_sets, bool) or not isinstance(n_sets, int) or n_sets < 1:
        raise ValueError(f"n_sets must be a positive int, got {n_sets!r}")
    if n_sets == 1:
        return evaluate_lengths(model, data, lengths, train_len=train_len, tokens_per_length=tokens_per_length,
                                chunk_tokens=chunk_tokens, seed=seed, device=device)
    per_set = max(1, tokens_per_length // n_sets)
    sets = [evaluate_lengths(model, data, lengths, train_len=train_len, tokens_per_length=per_set,
                             chunk_tokens=chunk_tokens, seed=seed + i, device=device) for i in range(n_sets)]
    loss = [sum(s["loss"][j] for s in sets) / n_sets for j in range(len(lengths))]
    return {"lengths": list(sets[0]["lengths"]), "loss": loss, "ppl": [math.exp(v) for v in loss],
            "windows": [sum(s["windows"][j] for s in sets) for j in range(len(lengths))],
            "scored_bytes": [sum(s["scored_bytes"][j] for s in sets) for j in range(len(lengths))],
            "by_set": [{"seed": seed + i, "loss": s["loss"], "ppl": s["ppl"]} for i, s in enumerate(sets)]}


def lm_metrics(ev: dict, probe: dict, train_len: int, final_loss: float) -> Dict[str, float]:
    """The per-run numbers a comparison is built from: ``ppl_train``, ``ratio_<m>x``, ``ppl_<m>x``,
    ``passkey_<m>x`` (exact match) and ``final_loss``."""
    check_mapping(ev, "ev", keys=("lengths", "ppl", "ratio"))
    if not ev["lengths"] or not len(ev["lengths"]) == len(ev["ppl"]) == len(ev["ratio"]):
        raise ValueError("ev must hold one ppl and one ratio per length, at least one length")
    check_mapping(probe, "probe", keys=("lengths", "exact"))
    check_int(train_len, "train_len", minimum=1)
    check_number(final_loss, "final_loss", finite=False)
    out = {"ppl_train": ev["ppl"][0], "final_loss": final_loss}
    for L, r, pp in zip(ev["lengths"], ev["ratio"], ev["ppl"]):
        out[f"ratio_{L // train_len}x"], out[f"ppl_{L // train_len}x"] = r, pp
    for L, e in zip(probe["lengths"], probe["exact"]):
        out[f"passkey_{L // train_len}x"] = e
    return out


def run_model(name: str, cfg: LMConfig, corpus: Corpus, *, steps: int, device="cpu",
              path_backend_name: str = "blockwise", seed: Optional[int] = None,
              deadline: Optional[float] = None, checkpoint_path: Optional[str] = None,
              stop_after_steps: Optional[int] = None, eval_guard: Optional[Callable] = None) -> dict:
    """Train model ``name`` for ``steps`` steps, evaluate it at ``cfg.eval_mults`` x ``train_len``, probe
    it at ``cfg.probe_mults`` x ``train_len`` and (``cfg.far_mass_windows > 0``) measure its far
    attention mass at the evaluation lengths (:func:`path_lib.experiments.farmass.far_mass_by_length`).

    ``deadline`` / ``stop_after_steps`` stop training without changing the schedule; with
    ``checkpoint_path`` a later call resumes there. An incomplete run is returned without evaluation.
    ``eval_guard``: a context-manager factory held around the evaluation (e.g. a slot lock that keeps
    the memory-hungry long-context evaluations of parallel processes from running all at once).
    Returns ``{"model", "params", "seed", "complete", "train", "eval" (with "ratio": ppl(L) / ppl(train_len)),
    "probe", "far_mass", "eval_seconds", "record"}`` (``record``: :func:`path_lib.training.loop.run_record`).
    """
    check_instance(cfg, "cfg", LMConfig)
    check_instance(corpus, "corpus", Corpus)
    check_int(steps, "steps", minimum=1)
    check_callable(eval_guard, "eval_guard", optional=True)
    check_seed(seed, optional=True)
    seed = cfg.seed if seed is None else seed
    model = build_model(name, cfg, device=device, path_backend_name=path_backend_name, seed=seed)
    run_cfg = dataclasses.replace(cfg, seed=seed)
    tr = train_model(model, corpus, run_cfg, steps=steps, device=device, deadline=deadline,
                     checkpoint_path=checkpoint_path, stop_after_steps=stop_after_steps)
    data_key = (f"{corpus.info.get('source', 'stdlib')}:{corpus.info.get('sha1')}|train_len={cfg.train_len}|batch={cfg.batch}|"
                f"probe_mix={cfg.probe_mix}|data_seed={seed + 1}")
    out = {"model": name, "params": model.num_parameters(), "seed": seed, "complete": tr["complete"], "train": tr}
    if not tr["complete"]:
        out["record"] = run_record(tr, model=name, seed=seed, data_key=data_key, batch_size=cfg.batch)
        return out
    _set_path_block_size(model, cfg.path_block_size_eval)
    cap = cfg.eval_max_len.get(name)
    import contextlib
    with (eval_guard() if eval_guard is not None else contextlib.nullcontext()):
        out.update(_evaluate_model(name, model, cfg, corpus, tr, cap, device, seed, data_key))
    return out


def _evaluate_model(name, model, cfg, corpus, tr, cap, device, seed, data_key) -> dict:
    t0 = time.perf_counter()
    lengths = [m * cfg.train_len for m in cfg.eval_mults if cap is None or m * cfg.train_len <= cap]
    ev = evaluate_sets(model, corpus.val, lengths, train_len=cfg.train_len, tokens_per_length=cfg.eval_tokens,
                       n_sets=cfg.eval_sets, chunk_tokens=cfg.eval_chunk_tokens, device=device)
    pr = probe_retrieval(model, [m * cfg.train_len for m in cfg.probe_mults if cap is None or m * cfg.train_len <= cap],
                         cfg.probe_examples, corpus.val, device=device, chunk_tokens=cfg.eval_chunk_tokens)
    ev["ratio"] = [p / ev["ppl"][0] for p in ev["ppl"]]
    fm = None
    if cfg.far_mass_windows > 0:
        from .farmass import far_mass_by_length
        M = cfg.far_mass_distance if cfg.far_mass_distance is not None else cfg.train_len // 2
        fm = far_mass_by_length(model, corpus.val, lengths, distance=M, n_windows=cfg.far_mass_windows,
                                chunk_tokens=cfg.eval_chunk_tokens, device=device)
        fm = {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in fm.items()}
    metrics = lm_metrics(ev, pr, cfg.train_len, tr["final_loss"])
    if fm is not None:
        for L, v in zip(fm["lengths"], fm["mean_far_mass"]):
            metrics[f"far_mass_{L // cfg.train_len}x"] = v
    return {"eval": ev, "probe": pr, "far_mass": fm, "eval_seconds": time.perf_counter() - t0,
            "record": run_record(tr, model=name, seed=seed, metrics=metrics, data_key=data_key,
                                 batch_size=cfg.batch)}


def pick_backend(cfg: LMConfig, device, verbose: bool = False) -> str:
    """The PaTH backend for these runs: the Triton kernels if they run forward and backward here."""
    check_instance(cfg, "cfg", LMConfig)
    check_bool(verbose, "verbose")
    backend = path_backend(device, head_dim=cfg.d_model // cfg.n_heads)
    if backend == "triton":
        try:
            m = build_model("PaTH", cfg, device=device, path_backend_name="triton")
            m(torch.zeros(1, 64, dtype=torch.long, device=device)).sum().backward()
        except Exception as e:  # noqa: BLE001 - any kernel failure means: use the PyTorch mirror
            if verbose:
                print(f"triton backend failed ({type(e).__name__}: {e}); using blockwise")
            backend = "blockwise"
    return backend


def _model_job(name: str, cfg: LMConfig, steps: int, device, backend: str, deadline: Optional[float],
               seed: Optional[int] = None):
    """One model in a worker process (reads the corpus itself)."""
    torch.set_num_threads(1)
    if torch.device(device).type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    corpus = load_corpus(cfg.corpus, max_bytes=cfg.corpus_bytes)
    return name, run_model(name, cfg, corpus, steps=steps, device=device, path_backend_name=backend,
                           deadline=deadline, seed=seed), corpus.info


def run_experiment(cfg: LMConfig, models: Optional[Sequence[str]] = None, *, device=None,
                   corpus: Optional[Corpus] = None, on_model_done: Optional[Callable[[dict], None]] = None,
                   verbose: bool = True, workers: int = 1, deadline_s: Optional[float] = None,
                   seeds: Optional[Sequence[int]] = None) -> dict:
    """Train every model at ``cfg.train_len``, evaluate at ``cfg.eval_mults`` x it, probe; return all.

    Every model trains for the same number of steps on the same batches (per seed) with the same
    schedule. With ``cfg.train_seconds`` set (one process only), that number is ``min(cfg.steps,
    train_seconds / slowest step time)`` (timed first, then the same for all); otherwise ``cfg.steps``.
    ``seeds``: train each model once per seed (default ``[cfg.seed]``).
    ``workers > 1`` trains the runs in that many parallel processes sharing the device; ``deadline_s``
    then stops training after that many seconds as a safety (the run's record is then incomplete and
    :func:`path_lib.training.loop.comparison_table` refuses it).
    ``on_model_done(results_so_far)`` is called after each run (to save partial results).
    Returns ``{"config", "corpus", "device", "path_backend", "steps", "seeds", "step_seconds", "workers",
    "models": {name: run of the first seed}, "runs": [every run], "records": [every run's record]}``.
    """
    check_instance(cfg, "cfg", LMConfig)
    device = as_device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if models is not None:
        if isinstance(models, str) or not isinstance(models, (list, tuple)) or not models:
            raise TypeError(f"models must be None or a non-empty list of model names, got {models!r}")
        unknown = [m for m in models if LEGACY_MODEL_NAMES.get(m, m) not in MODELS]
        if unknown:
            raise ValueError(f"models {unknown} are not among {sorted(MODELS)}")
    models = list(COMPARISON_MODELS) if models is None else list(models)
    seeds = [cfg.seed] if seeds is None else check_ints(seeds, "seeds", minimum=0)
    check_instance(corpus, "corpus", Corpus, optional=True)
    check_callable(on_model_done, "on_model_done", optional=True)
    check_bool(verbose, "verbose")
    check_int(workers, "workers", minimum=1)
    check_number(deadline_s, "deadline_s", positive=True, optional=True)
    if torch.device(device).type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    backend = pick_backend(cfg, device, verbose)
    step_seconds = {}
    steps = cfg.steps
    if workers > 1 and cfg.train_seconds is not None:
        raise ValueError("train_seconds (steps from a timed step) needs workers=1; give steps instead")
    if workers == 1:
        corpus = corpus or load_corpus(cfg.corpus, max_bytes=cfg.corpus_bytes)
        if cfg.train_seconds is not None:
            for name in models:
                step_seconds[name] = time_step(name, cfg, corpus, device=device, path_backend_name=backend)
            steps = max(cfg.warmup + 1, min(cfg.steps, int(cfg.train_seconds / max(step_seconds.values()))))
            if verbose:
                print("step seconds:", {k: round(v, 4) for k, v in step_seconds.items()}, "-> steps", steps,
                      flush=True)
    runs: List[dict] = []                                # filled in place, as are records and by_model
    records: List[dict] = []
    by_model: Dict[str, dict] = {}
    res = {"config": asdict(cfg), "corpus": corpus.info if corpus is not None else None, "device": str(device),
           "path_backend": backend, "steps": steps, "seeds": seeds, "step_seconds": step_seconds,
           "workers": workers, "models": by_model, "runs": runs, "records": records}
    deadline = time.time() + deadline_s if deadline_s else None

    def done(name, r):
        runs.append(r)
        records.append(r["record"])
        if r["seed"] == seeds[0]:
            by_model[name] = r
        if verbose and r["complete"]:
            print(summary_line(name, r, cfg.train_len) + f" seed {r['seed']}", flush=True)
        if on_model_done is not None:
            on_model_done(res)

    jobs = [(name, sd) for sd in seeds for name in models]
    if workers > 1:
        import concurrent.futures as cf
        import multiprocessing as mp
        with cf.ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
            futs = [pool.submit(_model_job, name, cfg, steps, device, backend, deadline, sd) for name, sd in jobs]
            for fut in cf.as_completed(futs):
                name, r, res["corpus"] = fut.result()
                done(name, r)
        res["models"] = {n: by_model[n] for n in models if n in by_model}
        order = {j: i for i, j in enumerate(jobs)}
        runs.sort(key=lambda r: order[(r["model"], r["seed"])])
        res["records"] = [r["record"] for r in runs]
        return res
    if corpus is None:                                   # workers < 1: nothing was loaded
        raise ValueError(f"workers must be an int >= 1, got {workers!r}")
    for name, sd in jobs:
        done(name, run_model(name, cfg, corpus, steps=steps, device=device, path_backend_name=backend,
                             deadline=deadline, seed=sd))
        if torch.device(device).type == "cuda":
            torch.cuda.empty_cache()
    return res


def summary_line(name: str, r: dict, train_len: int) -> str:
    """One line per model: training loss and time, ppl at the training length, ratios, probe."""
    check_str(name, "name")
    check_mapping(r, "r", keys=("train",))
    check_int(train_len, "train_len", minimum=1)
    if "eval" not in r:
        return f"{name:13s} INCOMPLETE: {r['train']['steps']} of {r['train']['steps_planned']} steps"
    ev, tr = r["eval"], r["train"]
    ratios = " ".join(f"{L}:{x:.2f}" for L, x in zip(ev["lengths"], ev["ratio"]))
    return (f"{name:13s} loss {tr['final_loss']:.3f} steps {tr['steps']} train {tr['seconds']:.1f}s "
            f"eval {r['eval_seconds']:.1f}s ppl@{train_len} {ev['ppl'][0]:.3f} ratios {ratios} "
            f"passkey {[round(x, 2) for x in r['probe']['exact']]}")


def ratio_table(res: dict, *, which: str = "ratio") -> str:
    """A markdown table: one row per model, ``ppl(L) / ppl(train_len)`` per evaluated length."""
    check_mapping(res, "res", keys=("models", "config"))
    check_choice(which, "which", ("ratio", "ppl", "loss"))
    lengths = sorted({L for m in res["models"].values() if "eval" in m for L in m["eval"]["lengths"]})
    tl = res["config"]["train_len"]
    head = "| model | ppl@" + str(tl) + " | " + " | ".join(f"{L // tl}x ({L})" for L in lengths) + " |"
    sep = "|---" * (len(lengths) + 2) + "|"
    rows = [head, sep]
    for name, m in res["models"].items():
        if "eval" not in m:
            continue
        ev = m["eval"]
        vals = dict(zip(ev["lengths"], ev[which]))
        cells = [f"{vals[L]:.2f}" if L in vals else "-" for L in lengths]
        rows.append(f"| {name} | {ev['ppl'][0]:.3f} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


# ----------------------------------------------------------------------------------------------
# across seeds: curves with their spread; whether a recorded run is an equal-training comparison
# ----------------------------------------------------------------------------------------------

def seed_curves(records: Sequence[dict], prefix: str = "ratio", *, min_seeds: int = 3,
                models: Optional[Sequence[str]] = None) -> Dict[str, dict]:
    """``{model: {"mults", "mean", "std", "min", "max"}}`` of the metrics ``<prefix>_<m>x`` across seeds,
    through :func:`path_lib.training.loop.comparison_table` (so it refuses unequal runs the same way)."""
    from ..training.loop import comparison_table
    _check_records(records)
    check_str(prefix, "prefix")
    keys = sorted({k for r in records for k in r["metrics"] if k.startswith(prefix + "_") and k.endswith("x")},
                  key=lambda k: int(k[len(prefix) + 1:-1]))
    if not keys:
        raise ValueError(f"prefix {prefix!r}: the records hold no metric {prefix}_<m>x")
    out: Dict[str, dict] = {}
    for k in keys:
        t = comparison_table(records, k, min_seeds=min_seeds, models=models)
        for m, st in t.items():
            c = out.setdefault(m, {"mults": [], "mean": [], "std": [], "min": [], "max": []})
            c["mults"].append(int(k[len(prefix) + 1:-1]))
            for f in ("mean", "std", "min", "max"):
                c[f].append(st[f])
    return out


def _check_records(records) -> None:
    """A list of run records (dicts with model, seed and metrics), or a named TypeError / ValueError."""
    if not isinstance(records, (list, tuple)):
        raise TypeError(f"records must be a list of run records, got {type(records).__name__}")
    for i, r in enumerate(records):
        check_mapping(r, f"records[{i}]", keys=("model", "seed", "metrics"))


def _records_of(rec: dict) -> List[dict]:
    """Per-run records of a recorded LM result; a record made before run records existed gets them
    rebuilt from its per-model training summaries (one seed, steps done and planned)."""
    check_mapping(rec, "rec")
    if not (rec.get("records") or isinstance(rec.get("models"), dict)):
        raise ValueError("rec must be an LM result: it holds neither 'records' nor 'models'")
    if rec.get("records"):
        return rec["records"]
    out = []
    for name, m in rec["models"].items():
        tr = m["train"]
        out.append({"model": name, "seed": m.get("seed", rec["config"].get("seed", 0)), "steps_done": tr["steps"],
                    "steps_planned": tr["steps_planned"], "tokens_seen": tr.get("tokens", 0),
                    "complete": tr["steps"] == tr["steps_planned"] and not tr.get("stopped_early", False),
                    "schedule": {"steps": tr["steps_planned"]}, "data_key": "", "metrics": {}})
    return out


def record_inequality(rec: dict, *, min_seeds: int = 3) -> Optional[str]:
    """None when a recorded LM result is an equal-training comparison (every run complete, the same
    steps, schedule and data per seed, at least ``min_seeds`` seeds); otherwise a plain sentence or two
    saying what is unequal (how many runs stopped short, their steps, the number of seeds)."""
    from ..training.loop import check_equal_training
    recs = _records_of(rec)
    why = check_equal_training(recs, min_seeds=min_seeds)
    if why is None and rec.get("complete", False):
        return None
    short = [r for r in recs if not r["complete"]]
    seeds: Dict[str, Set[int]] = {}
    for r in recs:
        seeds.setdefault(r["model"], set()).add(r["seed"])
    n_seeds = sorted({len(v) for v in seeds.values()})
    parts = []
    if short:
        planned = sorted({r["steps_planned"] for r in recs})
        parts.append(f"{len(short)} of {len(recs)} runs stopped before their planned "
                     f"{'/'.join(f'{x:,}' for x in planned)} steps (after {min(r['steps_done'] for r in short):,} to "
                     f"{max(r['steps_done'] for r in short):,} steps)")
    if n_seeds and n_seeds[0] < min_seeds:
        parts.append(f"each model has {n_seeds[0]} seed{'s' if n_seeds[0] != 1 else ''} (a comparison needs "
                     f"{min_seeds})")
    if not parts:
        parts.append(why[0].lower() + why[1:].rstrip(".") if why else "the record is not complete")
    return "The recorded runs did not get equal training: " + " and ".join(parts) + "."


def steps_table(rec: dict) -> str:
    """A Markdown table of what each run of a result (recorded, or :func:`run_experiment`'s) actually
    did: steps done of planned, tokens, final learning rate and wall time (when recorded), complete."""
    recs = _records_of(rec)
    full = all("final_lr" in r for r in recs)
    head = "| model | seed | steps done | steps planned | tokens | " + ("final lr | wall s | " if full else "")
    rows = [head + "complete |", "|---" * (8 if full else 6) + "|"]
    for r in recs:
        extra = f"{r['final_lr']:.2e} | {r['wall_seconds']:.1f} | " if full else ""
        rows.append(f"| {r['model']} | {r['seed']} | {r['steps_done']:,} | {r['steps_planned']:,} | "
                    f"{r['tokens_seen']:,} | {extra}{'yes' if r['complete'] else 'no'} |")
    return "\n".join(rows)


def flat_and_degrading(records: Sequence[dict], key: str, *, tol: float = 0.05):
    """Models whose metric ``key`` (a ratio) stays within ``tol`` of 1 in every seed, and those above
    ``1 + tol`` in every seed: ``(flat, degrading)``, in the records' order (equal runs only)."""
    from ..training.loop import comparison_table
    check_number(tol, "tol", minimum=0.0)
    _check_records(records)
    check_str(key, "key")
    if records and key not in records[0]["metrics"]:
        raise ValueError(f"key {key!r} is not among the records' metrics {sorted(records[0]['metrics'])}")
    t = comparison_table(records, key)
    flat = [m for m, v in t.items() if 1 - tol < v["min"] and v["max"] < 1 + tol]
    worse = [m for m, v in t.items() if v["min"] > 1 + tol]
    return flat, worse


def paper_checks(records: Sequence[dict]) -> "Dict[str, bool]":
    """The papers' predictions tested on an equal-training set of LM records, each statement -> True
    (agrees) / False (differs), paired seed by seed where two models are compared. Statements whose
    models are missing from the records are left out. Uses the longest evaluated multiple ``L``."""
    from ..training.loop import comparison_table, paired_differences
    _check_records(records)
    if not records:
        raise ValueError("records must hold at least one run record")
    models = {r["model"] for r in records}
    mults = sorted(int(k[6:-1]) for k in records[0]["metrics"] if k.startswith("ratio_") and k.endswith("x"))
    L, key = mults[-1], f"ratio_{mults[-1]}x"
    t = comparison_table(records, key)
    has = lambda *ms: all(m in models for m in ms)
    less = lambda a, b, k=key: paired_differences(records, k, a, b)["all_negative"]
    out: Dict[str, bool] = {}
    if has("RoPE") and len(mults) > 1:
        k2 = f"ratio_{mults[1]}x"
        out[f"(A) RoPE degrades just past the training length: ratio at {mults[1]}x above 1.1 in every seed"] = \
            comparison_table(records, k2, models=["RoPE"])["RoPE"]["min"] > 1.1
    if has("PaTH", "RoPE"):
        out[f"(A) PaTH degrades less than RoPE at {L}x, in every seed"] = less("PaTH", "RoPE")
        out["(A, Table 2) PaTH's perplexity at the training length is below RoPE's, in every seed"] = \
            less("PaTH", "RoPE", "ppl_1x")
    for m in ("FoX", "PaTH-FoX"):
        if has(m):
            out[f"(A) {m} stays flat: ratio at {L}x within 10% of 1 in every seed"] = \
                0.9 < t[m]["min"] and t[m]["max"] < 1.1
    if has("PaTH-FoX", "FoX"):
        out["(A) PaTH-FoX's perplexity at the training length is below FoX's, in every seed"] = \
            less("PaTH-FoX", "FoX", "ppl_1x")
    if has("TokRot-QK", "RoPE"):
        out[f"(B) token-angle rotations (Q/K) degrade less than RoPE at {L}x, in every seed"] = less("TokRot-QK", "RoPE")
    if has("TokRot-QKV", "TokRot-QK"):
        out[f"(B) rotating values too degrades less than Q/K only at {L}x, in every seed"] = \
            less("TokRot-QKV", "TokRot-QK")
    if has("ALiBi"):
        out[f"(B) ALiBi stays flat: ratio at {L}x within 10% of 1 in every seed"] = 0.9 < t["ALiBi"]["min"] and \
            t["ALiBi"]["max"] < 1.1
    if has("TokRot-learned"):
        out[f"(B) learned token rotations stay near the training perplexity: ratio at {L}x below 1.5 in every seed"] = \
            t["TokRot-learned"]["max"] < 1.5
    far = [k for k in records[0]["metrics"] if k.startswith("far_mass_")]
    if far:
        kf = sorted(far, key=lambda k: int(k[9:-1]))
        lo = comparison_table(records, kf[0])
        hi = comparison_table(records, kf[-1])
        bounded = [m for m in ("NoPE", "RoPE", "PaTH", "TokRot-QK", "TokRot-QKV", "TokRot-learned") if m in models]
        gated = [m for m in ("ALiBi", "FoX", "PaTH-FoX") if m in models]
        if bounded:
            out["(B) far mass grows with the context for the models with bounded logits: " + ", ".join(bounded)] = \
                all(hi[m]["mean"] > lo[m]["mean"] for m in bounded)
        if bounded and gated:
            out["(B) a distance bias or a gate keeps far mass below every bounded-logit model at the longest "
                "context: " + ", ".join(gated)] = max(hi[m]["mean"] for m in gated) < min(hi[m]["mean"] for m in bounded)
    return out
