"""Language-modelling experiments on length extrapolation: train short, evaluate long, probe retrieval.

    from path_lib.lm import PRESETS, run_experiment
    results = run_experiment(PRESETS["tiny"], models=["NoPE", "RoPE", "PaTH"])

The pieces, usable on their own:

* :data:`MODELS`: name -> TinyLM keyword arguments (NoPE, RoPE, ALiBi, FoX, PaTH, PaTH-FoX and the
  accumulated-rotation variants of :mod:`path_lib.rotations`).
* :class:`LMConfig` and :data:`PRESETS` (``"tiny"``: CPU, the book build; ``"full"``: one H200).
* :func:`train_model`: AdamW, warmup + cosine, gradient clipping, fixed number of steps; a fraction
  ``probe_mix`` of each batch is a passkey example at the training length (so the probe measures how
  a skill learned at the training length survives longer contexts).
* :func:`evaluate_lengths`: next-byte loss on the *same* validation bytes with contexts of growing
  length (so the ratio changes only through the context).
* :func:`make_passkey`, :func:`probe_retrieval`: a passkey hidden at a random depth in real code and
  asked for at the end (RULER's single needle); exact match of the 5 digits under teacher forcing,
  which equals exact match of greedy generation (the first wrong digit is the first place where they
  could differ).
* :func:`run_model`: train, evaluate and probe one model; :func:`run_experiment` runs them all.
* :data:`PAPER_B_RATIOS`, :data:`PAPER_A_CURVES`: the papers' numbers and statements, for side-by-side
  tables, always labelled as the papers'.
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F

from . import rotations  # noqa: F401  (registers rand_rot_qk, rand_rot_qkv, learned_rot)
from .corpus import Corpus, encode, load_stdlib_corpus, sample_windows
from .layers import TinyLM

__all__ = ["MODELS", "LMConfig", "PRESETS", "PAPER_B_RATIOS", "PAPER_A_CURVES", "build_model",
           "path_backend", "pick_backend", "time_step", "train_model", "evaluate_lengths", "make_passkey",
           "passkey_batch", "probe_retrieval", "run_model", "run_experiment", "summary_line", "ratio_table"]

MODELS: Dict[str, dict] = {
    "NoPE": dict(attention="nope"),
    "RoPE": dict(attention="rope"),
    "ALiBi": dict(attention="alibi"),
    "FoX": dict(attention="fox"),
    "PaTH": dict(attention="path"),
    "PaTH-FoX": dict(attention="path_fox"),
    "rand_rot_qk": dict(attention="rand_rot_qk"),
    "rand_rot_qkv": dict(attention="rand_rot_qkv"),
    "learned_rot": dict(attention="learned_rot"),
}

# Paper B (Godavarti 2026), trained at 512 on OpenWebText, 16 layers x 768: ppl(L) / ppl(512).
# From the paper's summary (PATH_NOTES section 10). "random rotations" does not say Q/K or Q/K/V.
PAPER_B_RATIOS: List[dict] = [
    {"model": "RoPE", "length": 8192, "train_len": 512, "ratio": 16.2},
    {"model": "random accumulated rotations", "length": 8192, "train_len": 512, "ratio": 1.60},
    {"model": "rand_rot_qkv", "length": 65536, "train_len": 512, "ratio": 1.59},
    {"model": "rand_rot_qk", "length": 65536, "train_len": 512, "ratio": 7.49},
    {"model": "ALiBi", "length": 65536, "train_len": 512, "ratio": 0.96},
]
# Paper A (Yang et al. 2025), 760M params trained at 4096: qualitative extrapolation curves.
PAPER_A_CURVES: Dict[str, str] = {
    "RoPE": "fails just past the training length (4K)",
    "PaTH": "stable to about 32K (8x), then degrades (most on code)",
    "FoX": "stable to 64K (16x)",
    "PaTH-FoX": "stable to 64K (16x), lower perplexity than FoX",
    "learned_rot": "(paper B) stays near training perplexity far past 512",
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


PRESETS: Dict[str, LMConfig] = {
    # CPU, the book build: a few seconds per model on 2 cores.
    "tiny": LMConfig(d_model=64, n_layers=2, n_heads=2, train_len=64, batch=16, steps=120, lr=3e-3,
                     warmup=15, eval_mults=(1, 2, 4, 8), eval_tokens=2048, probe_mults=(1, 2, 4),
                     probe_examples=12, corpus_bytes=2_000_000),
    # One H200, the nine models in parallel processes (experiments/run_lm.py --workers 9): 1200 equal
    # steps (a time limit stops a model early only as a safety, and the record says so).
    "full": LMConfig(d_model=256, n_layers=4, n_heads=4, train_len=256, batch=64, steps=1200, lr=2e-3,
                     warmup=60, eval_mults=(1, 2, 4, 8, 16, 32, 64), eval_tokens=16384,
                     eval_chunk_tokens=16384, probe_mults=(1, 2, 4, 8, 16), probe_examples=64,
                     corpus_bytes=32_000_000, path_block_size_train=128, path_block_size_eval=256),
}


# ----------------------------------------------------------------------------------------------
# models
# ----------------------------------------------------------------------------------------------

def path_backend(device) -> str:
    """``"triton"`` when ``kernels.is_available()`` says so on a CUDA device, else ``"blockwise"``."""
    if torch.device(device).type != "cuda":
        return "blockwise"
    try:
        import kernels
        return "triton" if kernels.is_available() else "blockwise"
    except (ImportError, AttributeError):
        return "blockwise"


def build_model(name: str, cfg: LMConfig, *, device="cpu", path_backend_name: str = "blockwise",
                seed: Optional[int] = None) -> TinyLM:
    """A byte-level ``TinyLM`` (vocab 256) with the attention of ``MODELS[name]``, seeded."""
    if name not in MODELS:
        raise ValueError(f"model must be one of {sorted(MODELS)}, got {name!r}")
    torch.manual_seed(cfg.seed if seed is None else seed)
    kw = dict(MODELS[name])
    if kw["attention"] in ("path", "path_fox"):
        kw["backend"] = path_backend_name
        kw["block_size"] = cfg.path_block_size_train
    return TinyLM(256, cfg.d_model, cfg.n_layers, cfg.n_heads, **kw).to(device)


def _set_path_block_size(model: TinyLM, block_size: int) -> None:
    for m in model.modules():
        if hasattr(m, "block_size") and hasattr(m, "backend"):
            m.block_size = block_size


# ----------------------------------------------------------------------------------------------
# the passkey probe (RULER's single needle in a haystack, in code)
# ----------------------------------------------------------------------------------------------

PASSKEY_CUE = "\n# the passkey is "


def make_passkey(length: int, filler: torch.Tensor, generator: torch.Generator):
    """One passkey example of exactly ``length`` bytes: real code as the haystack, one needle line
    ``# the passkey is 48213`` at a uniformly random depth, and the same cue at the very end::

        <code> \n# the passkey is 48213\n <code> \n# the passkey is 48213

    Args:
        length: bytes in the example (at least 64).
        filler: 1-D ``uint8`` bytes to cut the haystack from (a corpus split).
        generator: a seeded CPU ``torch.Generator``.
    Returns:
        ``(tokens [length] int64, depth)``: the answer's 5 digits are the last 5 bytes; ``depth`` is the
        needle's start as a fraction of the length (0 = the beginning).
    """
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
    return torch.stack([make_passkey(length, filler, generator)[0] for _ in range(n)])


@torch.no_grad()
def probe_retrieval(model: TinyLM, lengths: Sequence[int], n_examples: int, filler: torch.Tensor, *,
                    seed: int = 1234, device="cpu", chunk_tokens: int = 32768) -> dict:
    """Exact-match and per-digit accuracy of the passkey at each context length.

    Teacher-forced argmax on the 5 answer digits; all 5 right = greedy generation exact match. The
    examples at each length are seeded (the same for every model); ``filler`` should be held-out bytes.
    Returns ``{"lengths": [...], "exact": [...], "digit_acc": [...], "n": n_examples}``.
    """
    model.eval()
    out = {"lengths": [], "exact": [], "digit_acc": [], "n": n_examples}
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
        out["lengths"].append(L)
        out["exact"].append(float(c.all(-1).float().mean()))
        out["digit_acc"].append(float(c.float().mean()))
    return out


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
                deadline: Optional[float] = None) -> dict:
    """Train ``model`` for ``steps`` (default ``cfg.steps``) AdamW steps on ``corpus.train``.

    ``deadline``: a ``time.time()`` value at which training stops early (a safety for time-limited runs).
    Returns ``{"steps", "steps_planned", "stopped_early", "seconds", "tokens", "loss_curve": [[step, loss],
    ...], "final_loss"}`` (``final_loss``: mean of the last 10% of steps' training losses, nats per byte).
    """
    steps = cfg.steps if steps is None else steps
    model.train()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))
    g = torch.Generator().manual_seed(cfg.seed + 1)
    curve, losses = [], []
    t0 = time.perf_counter()
    planned, done = steps, 0
    for step in range(steps):
        if deadline is not None and time.time() > deadline:
            break
        done = step + 1
        for group in opt.param_groups:
            group["lr"] = _lr(step, cfg, steps)
        x, y = _batch(corpus, cfg, g, device)
        loss = F.cross_entropy(model(x).flatten(0, 1).float(), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
        opt.step()
        if step % log_every == 0 or step == steps - 1:
            lv = float(loss.detach())
            curve.append([step, lv])
            if callback is not None:
                callback(step, lv)
        losses.append(loss.detach())
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    return {"steps": done, "steps_planned": planned, "stopped_early": done < planned, "seconds": seconds,
            "tokens": done * cfg.batch * cfg.train_len, "loss_curve": curve,
            "final_loss": float(torch.stack(losses[-max(1, done // 10):]).mean()) if losses else float("nan")}


def time_step(name: str, cfg: LMConfig, corpus: Corpus, *, device="cpu", path_backend_name="blockwise",
              n: int = 6) -> float:
    """Seconds per training step of a fresh model ``name`` (median of ``n`` after 2 warm-up steps)."""
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
    if data.dim() != 1 or data.numel() <= max(lengths):
        raise ValueError(f"data must be 1-D with more than max(lengths) = {max(lengths)} bytes, "
                         f"got shape {tuple(data.shape)}")
    model.eval()
    n = max(1, math.ceil(tokens_per_length / train_len))
    g = torch.Generator().manual_seed(seed)
    ends = torch.randint(max(lengths) + 1, data.numel() + 1, (n,), generator=g)   # exclusive ends
    out = {"lengths": [], "loss": [], "ppl": [], "windows": [], "scored_bytes": []}
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


def run_model(name: str, cfg: LMConfig, corpus: Corpus, *, steps: int, device="cpu",
              path_backend_name: str = "blockwise", seed: Optional[int] = None,
              deadline: Optional[float] = None) -> dict:
    """Train model ``name`` for ``steps`` steps, evaluate it at ``cfg.eval_mults`` x ``train_len`` and
    probe it at ``cfg.probe_mults`` x ``train_len``.

    ``deadline`` (a ``time.time()`` value) is a safety stop: training ends there even if fewer steps
    were done (``train["steps"]`` then says how many; the run is flagged ``stopped_early``).
    Returns ``{"params", "seed", "train", "eval" (with "ratio": ppl(L) / ppl(train_len)), "probe",
    "eval_seconds"}``.
    """
    seed = cfg.seed if seed is None else seed
    model = build_model(name, cfg, device=device, path_backend_name=path_backend_name, seed=seed)
    tr = train_model(model, corpus, dataclasses.replace(cfg, seed=seed), steps=steps, device=device,
                     deadline=deadline)
    _set_path_block_size(model, cfg.path_block_size_eval)
    cap = cfg.eval_max_len.get(name)
    t0 = time.perf_counter()
    ev = evaluate_lengths(model, corpus.val, [m * cfg.train_len for m in cfg.eval_mults
                                              if cap is None or m * cfg.train_len <= cap],
                          train_len=cfg.train_len, tokens_per_length=cfg.eval_tokens,
                          chunk_tokens=cfg.eval_chunk_tokens, device=device)
    pr = probe_retrieval(model, [m * cfg.train_len for m in cfg.probe_mults if cap is None or m * cfg.train_len <= cap],
                         cfg.probe_examples, corpus.val, device=device, chunk_tokens=cfg.eval_chunk_tokens)
    ev["ratio"] = [p / ev["ppl"][0] for p in ev["ppl"]]
    return {"params": model.num_parameters(), "seed": seed, "train": tr, "eval": ev, "probe": pr,
            "eval_seconds": time.perf_counter() - t0}


def pick_backend(cfg: LMConfig, device, verbose: bool = False) -> str:
    """The PaTH backend for these runs: the Triton kernels if they run forward and backward here."""
    backend = path_backend(device)
    if backend == "triton":
        try:
            m = build_model("PaTH", cfg, device=device, path_backend_name="triton")
            m(torch.zeros(1, 64, dtype=torch.long, device=device)).sum().backward()
        except Exception as e:  # noqa: BLE001 - any kernel failure means: use the PyTorch mirror
            if verbose:
                print(f"triton backend failed ({type(e).__name__}: {e}); using blockwise")
            backend = "blockwise"
    return backend


def _model_job(name: str, cfg: LMConfig, steps: int, device, backend: str, deadline: Optional[float]):
    """One model in a worker process (reads the corpus itself)."""
    torch.set_num_threads(1)
    if torch.device(device).type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    corpus = load_stdlib_corpus(max_bytes=cfg.corpus_bytes)
    return name, run_model(name, cfg, corpus, steps=steps, device=device, path_backend_name=backend,
                           deadline=deadline), corpus.info


def run_experiment(cfg: LMConfig, models: Optional[Sequence[str]] = None, *, device=None,
                   corpus: Optional[Corpus] = None, on_model_done: Optional[Callable[[dict], None]] = None,
                   verbose: bool = True, workers: int = 1, deadline_s: Optional[float] = None) -> dict:
    """Train every model at ``cfg.train_len``, evaluate at ``cfg.eval_mults`` x it, probe; return all.

    Every model trains for the same number of steps on the same batches. With ``cfg.train_seconds``
    set (one process only), that number is ``min(cfg.steps, train_seconds / slowest step time)``
    (timed first); otherwise ``cfg.steps``.
    ``workers > 1`` trains the models in that many parallel processes sharing the device (small models
    are launch-bound, so a GPU is used several times better); ``deadline_s`` then stops training after
    that many seconds as a safety (the model's ``train["stopped_early"]`` says so).
    ``on_model_done(results_so_far)`` is called after each model (to save partial results).
    Returns ``{"config", "corpus", "device", "path_backend", "steps", "step_seconds", "workers",
    "models": {...}}``, models in the order asked for.
    """
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    models = list(MODELS) if models is None else list(models)
    if torch.device(device).type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    backend = pick_backend(cfg, device, verbose)
    step_seconds = {}
    steps = cfg.steps
    if workers > 1 and cfg.train_seconds is not None:
        raise ValueError("train_seconds (steps from a timed step) needs workers=1; give steps instead")
    if workers == 1:
        corpus = corpus or load_stdlib_corpus(max_bytes=cfg.corpus_bytes)
    if cfg.train_seconds is not None:
        for name in models:
            step_seconds[name] = time_step(name, cfg, corpus, device=device, path_backend_name=backend)
        steps = max(cfg.warmup + 1, min(cfg.steps, int(cfg.train_seconds / max(step_seconds.values()))))
        if verbose:
            print("step seconds:", {k: round(v, 4) for k, v in step_seconds.items()}, "-> steps", steps, flush=True)
    res = {"config": asdict(cfg), "corpus": corpus.info if corpus is not None else None, "device": str(device),
           "path_backend": backend, "steps": steps, "step_seconds": step_seconds, "workers": workers, "models": {}}
    deadline = time.time() + deadline_s if deadline_s else None

    def done(name, r):
        res["models"][name] = r
        if verbose:
            print(summary_line(name, r, cfg.train_len), flush=True)
        if on_model_done is not None:
            on_model_done(res)

    if workers > 1:
        import concurrent.futures as cf
        import multiprocessing as mp
        with cf.ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
            futs = [pool.submit(_model_job, name, cfg, steps, device, backend, deadline) for name in models]
            for fut in cf.as_completed(futs):
                name, r, res["corpus"] = fut.result()
                done(name, r)
        res["models"] = {n: res["models"][n] for n in models}
        return res
    for name in models:
        done(name, run_model(name, cfg, corpus, steps=steps, device=device, path_backend_name=backend,
                             deadline=deadline))
        if torch.device(device).type == "cuda":
            torch.cuda.empty_cache()
    return res


def summary_line(name: str, r: dict, train_len: int) -> str:
    """One line per model: training loss and time, ppl at the training length, ratios, probe."""
    ev, tr = r["eval"], r["train"]
    ratios = " ".join(f"{L}:{x:.2f}" for L, x in zip(ev["lengths"], ev["ratio"]))
    return (f"{name:13s} loss {tr['final_loss']:.3f} steps {tr['steps']} train {tr['seconds']:.1f}s "
            f"eval {r['eval_seconds']:.1f}s ppl@{train_len} {ev['ppl'][0]:.3f} ratios {ratios} "
            f"passkey {[round(x, 2) for x in r['probe']['exact']]}")


def ratio_table(res: dict, *, which: str = "ratio") -> str:
    """A markdown table: one row per model, ``ppl(L) / ppl(train_len)`` per evaluated length."""
    lengths = sorted({L for m in res["models"].values() for L in m["eval"]["lengths"]})
    tl = res["config"]["train_len"]
    head = "| model | ppl@" + str(tl) + " | " + " | ".join(f"{L // tl}x ({L})" for L in lengths) + " |"
    sep = "|---" * (len(lengths) + 2) + "|"
    rows = [head, sep]
    for name, m in res["models"].items():
        ev = m["eval"]
        vals = dict(zip(ev["lengths"], ev[which]))
        cells = [f"{vals[L]:.2f}" if L in vals else "-" for L in lengths]
        rows.append(f"| {name} | {ev['ppl'][0]:.3f} | " + " | ".join(cells) + " |")
    return "\n".join(rows)
