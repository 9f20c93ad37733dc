"""Data-parallel and sharded training of TinyLM on the offline stdlib corpus, from the command line.

    torchrun --nproc_per_node=2 -m path_lib.training.cli --model path --steps 200 --batch 16 \\
        --parallel fsdp --checkpoint-dir runs/lm                      # ... later, the same with --resume

Each rank builds the same model (same seed), wraps it in DDP or FSDP2 (``fully_shard`` on every block,
then on the whole model, which keeps the tied embedding and output head together), and trains it with
:func:`path_lib.training.loop.train` on its shard of every global batch: all ranks draw the same ``--batch``
windows from one seeded generator and rank ``r`` keeps rows ``[r b, (r + 1) b)``, ``b = batch / world``.
Gradients are averaged over the ranks, so the run follows the single-process run with the same global
batch (to float rounding). Rank 0 writes the resumable checkpoint (full states, whatever the wrapping)
and the result JSON, whose provenance names the world size. Without torchrun (no ``WORLD_SIZE`` in the
environment) it runs in one process, unwrapped.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import io
import os
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import torch
import torch.nn as nn

from ..validation import as_device, check_choice, check_instance, check_int, check_tensor

__all__ = ["DistributedHooks", "wrap_model", "shard_rows", "build_parser", "run", "main"]

PARALLEL = ("auto", "none", "ddp", "fsdp")


class _UsageError(ValueError):
    """A command line :func:`run` cannot run (a ValueError naming ``argv``; :func:`main` prints it as usage)."""


class DistributedHooks:
    """What :func:`path_lib.training.loop.train` needs to know about a data-parallel run (its ``distributed``
    argument): the world size, which rank writes, a scalar mean over the ranks, and full state dicts.

    ``mode``: ``"ddp"`` (model is a ``DistributedDataParallel``) or ``"fsdp"`` (FSDP2 ``fully_shard``).
    Full states have the unwrapped model's keys, so a checkpoint resumes in any mode and world size.
    """

    def __init__(self, mode: str, group=None):
        import torch.distributed as dist
        check_choice(mode, "mode", ("ddp", "fsdp"))
        if group is not None and not isinstance(group, dist.ProcessGroup):
            raise TypeError(f"group must be a torch.distributed.ProcessGroup or None, got {type(group).__name__}")
        if not dist.is_initialized():
            raise ValueError("DistributedHooks: torch.distributed is not initialised (run under torchrun)")
        self.mode, self.group = mode, group
        self.world_size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.is_writer = self.rank == 0
        backend = str(dist.get_backend(group))
        self._device = (torch.device("cuda", torch.cuda.current_device())
                        if "nccl" in backend and torch.cuda.is_available() else torch.device("cpu"))

    def mean(self, value: torch.Tensor) -> float:
        """The mean of a scalar over the ranks (a collective: every rank calls it at the same point)."""
        import torch.distributed as dist
        t = value.detach().reshape(1).to(self._device, torch.float64)
        dist.all_reduce(t, group=self.group)
        return float(t) / self.world_size

    def _inner(self, model):
        return model.module if self.mode == "ddp" else model

    def state_dicts(self, model, opt):
        """Full (unsharded) model and optimiser state dicts on CPU (a collective under FSDP2)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
        return get_state_dict(self._inner(model), opt,
                              options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    def load_state_dicts(self, model, opt, model_sd, opt_sd) -> None:
        """Load full state dicts (every rank passes the whole checkpoint) into the wrapped model."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict
        set_state_dict(self._inner(model), opt, model_state_dict=model_sd, optim_state_dict=opt_sd,
                       options=StateDictOptions(full_state_dict=True))


def wrap_model(model: nn.Module, mode: str, device=None) -> nn.Module:
    """``"ddp"``: ``DistributedDataParallel``; ``"fsdp"``: FSDP2, ``fully_shard`` on each of ``model.blocks``
    (when it has them) and then on the model; ``"none"``: unchanged."""
    check_instance(model, "model", nn.Module, "an nn.Module")
    check_choice(mode, "mode", ("none", "ddp", "fsdp"))
    if device is not None:
        as_device(device)
    if mode == "none":
        return model
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        dev = torch.device(device) if device is not None else next(model.parameters()).device
        return DDP(model.to(dev), device_ids=[dev.index] if dev.type == "cuda" else None)
    if mode == "fsdp":
        from torch.distributed.fsdp import fully_shard
        if device is not None:
            model.to(device)
        for block in getattr(model, "blocks", []):
            fully_shard(block)
        fully_shard(model)
        return model
    raise ValueError(f"mode must be 'none', 'ddp' or 'fsdp', got {mode!r}")


def shard_rows(x: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Rows ``[r b, (r + 1) b)`` of a global batch ``x [world_size * b, ...]``."""
    check_tensor(x, "x", dtypes=(x.dtype,) if isinstance(x, torch.Tensor) else (), finite=False)
    if x.dim() == 0:
        raise ValueError("x must have a batch dimension, got a 0-d tensor")
    check_int(world_size, "world_size", minimum=1)
    check_int(rank, "rank", minimum=0, maximum=world_size - 1)
    if x.shape[0] % world_size:
        raise ValueError(f"the global batch ({x.shape[0]}) must be a multiple of the world size ({world_size})")
    b = x.shape[0] // world_size
    return x[rank * b:(rank + 1) * b]


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m path_lib.training.cli`` (model, sizes, steps, batch, data
    parallelism ``--parallel ddp|fsdp``, checkpoint and resume; ``--help`` lists them)."""
    from ..nn.layers import ATTENTION_LAYERS
    p = argparse.ArgumentParser(prog="python -m path_lib.training.cli",
                                description="Train TinyLM on the stdlib byte corpus (under torchrun: DDP or FSDP2).")
    p.add_argument("--model", default="path", choices=sorted(ATTENTION_LAYERS), help="attention of every layer")
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=128, help="training window length (bytes)")
    p.add_argument("--batch", type=int, default=16, help="GLOBAL batch (windows per step, over all ranks)")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--parallel", default="auto", choices=PARALLEL,
                   help="auto: ddp when launched with more than one process, else none")
    p.add_argument("--corpus-bytes", type=int, default=2_000_000, help="cap on the stdlib corpus read")
    p.add_argument("--eval-batches", type=int, default=2, help="validation batches (of --batch windows) at the end")
    p.add_argument("--checkpoint-dir", default=None,
                   help="folder of the resumable checkpoint (train_state.pt) and of result.json")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint-dir's checkpoint if present")
    p.add_argument("--stop-after", type=int, default=None,
                   help="stop after this many steps in all, leaving a resumable checkpoint")
    p.add_argument("--out", default=None, help="result JSON (default: CHECKPOINT_DIR/result.json)")
    p.add_argument("--device", default=None, help="default: this rank's GPU under NCCL, else cpu")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--progress", action="store_true", help="show a progress bar on rank 0")
    return p


def _init_distributed(device_arg: Optional[str]):
    """(world_size, rank, device) for this process. Uses an initialised process group as it is; under
    torchrun (``WORLD_SIZE`` > 1) initialises one (NCCL with CUDA, else gloo)."""
    import torch.distributed as dist
    if not dist.is_initialized():
        if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
            return 1, 0, torch.device(device_arg or ("cuda" if torch.cuda.is_available() else "cpu"))
        use_cuda = torch.cuda.is_available() and (device_arg is None or device_arg.startswith("cuda"))
        if use_cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl" if use_cuda else "gloo", timeout=datetime.timedelta(minutes=10))
    if "nccl" in str(dist.get_backend()):
        return dist.get_world_size(), dist.get_rank(), torch.device("cuda", torch.cuda.current_device())
    return dist.get_world_size(), dist.get_rank(), torch.device(device_arg or "cpu")


def run(argv: Optional[Sequence[str]] = None) -> Dict:
    """Parse ``argv``, train, write the result (rank 0) and return :func:`path_lib.training.loop.train`'s dict plus
    ``"distributed"``, ``"corpus"`` and ``"model"`` entries."""
    from .corpus import sample_windows
    from ..nn.model import TinyLM
    from .loop import TrainConfig, save_result, set_seed, train
    from .state import discard_checkpoint

    args = _parse(argv)
    if args.batch < 1 or args.steps < 1 or args.seq_len < 1:
        raise _UsageError("argv: --batch, --steps and --seq-len must be positive")
    world, rank, device = _init_distributed(args.device)
    mode = args.parallel if args.parallel != "auto" else ("ddp" if world > 1 else "none")
    if mode != "none" and world == 1:
        raise _UsageError(f"argv: --parallel {mode} needs more than one process: launch with torchrun "
                          "--nproc_per_node=N")
    if mode == "none" and world > 1:
        raise _UsageError("argv: --parallel none with several processes would train independent copies; use ddp "
                          "or fsdp")
    if args.batch % world:
        raise _UsageError(f"argv: --batch ({args.batch}) is the global batch and must be a multiple of the "
                          f"number of processes ({world})")
    if args.stop_after is not None and args.checkpoint_dir is None:
        raise _UsageError("argv: --stop-after leaves a resumable checkpoint: give --checkpoint-dir")
    corpus = _corpus(args.corpus_bytes)
    cfg = TrainConfig(steps=args.steps, lr=args.lr, warmup=min(args.warmup, args.steps), seed=args.seed)
    set_seed(args.seed)                                   # the same initialisation on every rank
    sizes = dict(d_model=args.d_model, n_layers=args.layers, n_heads=args.heads)
    model = wrap_model(TinyLM(corpus.vocab_size, attention=args.model, **sizes).to(device), mode, device)
    hooks = DistributedHooks(mode) if mode != "none" else None

    def sample(step, gen):
        x, y = sample_windows(corpus.train, args.batch, args.seq_len, generator=gen)
        return shard_rows(x, rank, world), shard_rows(y, rank, world)

    g_eval = torch.Generator().manual_seed(12345)
    eval_sets = {"val": [sample_windows(corpus.val, args.batch, args.seq_len, generator=g_eval)
                         for _ in range(args.eval_batches)]} if args.eval_batches else None
    ck = str(Path(args.checkpoint_dir, "train_state.pt")) if args.checkpoint_dir else None
    if ck is not None and not args.resume and rank == 0:
        discard_checkpoint(ck)                            # a fresh run: no stale state to resume from
    if hooks is not None:
        hooks.mean(torch.zeros(()))                       # rank 0 has cleared the old state
    result = train(model, sample, cfg, eval_sets=eval_sets, device=device, progress=args.progress and rank == 0,
                   desc=f"{args.model} x{world}", log_every=args.log_every, checkpoint_path=ck,
                   resume=args.resume, stop_after_steps=args.stop_after, distributed=hooks)
    command = (f"torchrun --nproc_per_node={world} -m path_lib.training.cli " if world > 1
               else "python -m path_lib.training.cli ") + " ".join(sys.argv[1:] if argv is None else argv)
    result.update({"distributed": {"world_size": world, "parallel": mode, "rank_batch": args.batch // world,
                                   "global_batch": args.batch,
                                   "backend": _backend_name() if world > 1 else None},
                   "corpus": corpus.info, "model": dict(sizes, attention=args.model, seq_len=args.seq_len)})
    out = args.out or (str(Path(args.checkpoint_dir, "result.json")) if args.checkpoint_dir else None)
    if out is not None and rank == 0:
        save_result(out, result, command=f"{command}  [world_size={world}, {mode}]")
    return result


def _parse(argv) -> argparse.Namespace:
    """``argv`` (None: ``sys.argv[1:]``) parsed; a bad command line is a :class:`_UsageError` naming ``argv``
    with argparse's own message (``--help`` still prints the help and exits)."""
    if argv is not None and (isinstance(argv, (str, bytes)) or not isinstance(argv, (list, tuple))
                             or not all(isinstance(a, str) for a in argv)):
        raise TypeError(f"argv must be None or a list of str (the command line's words), got {argv!r:.80}")
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = build_parser().parse_args(argv)
    except SystemExit as e:
        if e.code in (0, None):
            raise
        raise _UsageError(f"argv: {err.getvalue().strip().splitlines()[-1]}") from None
    for flag, value, low in (("--d-model", args.d_model, 1), ("--layers", args.layers, 1), ("--heads", args.heads, 1),
                             ("--corpus-bytes", args.corpus_bytes, 1), ("--eval-batches", args.eval_batches, 0),
                             ("--log-every", args.log_every, 1), ("--warmup", args.warmup, 0),
                             ("--stop-after", 0 if args.stop_after is None else args.stop_after, 0),
                             ("--seed", args.seed, 0)):
        if value < low:
            raise _UsageError(f"argv: {flag} must be >= {low}, got {value}")
    if not args.lr > 0 or args.lr == float("inf"):
        raise _UsageError(f"argv: --lr must be a positive finite number, got {args.lr}")
    return args


@functools.lru_cache(maxsize=2)
def _corpus(max_bytes: int):
    """The stdlib corpus, read once per process and size (runs in one process share it)."""
    from .corpus import load_stdlib_corpus
    return load_stdlib_corpus(max_bytes=max_bytes)


def _backend_name() -> str:
    import torch.distributed as dist
    return str(dist.get_backend())


def main(argv: Optional[List[str]] = None) -> None:
    """Entry point: train as ``argv`` says (:func:`build_parser`), under torchrun or in one process, print
    the last logged step on rank 0, and close the process group."""
    import torch.distributed as dist
    try:
        try:
            r = run(argv)
        except _UsageError as e:
            build_parser().error(str(e).removeprefix("argv: "))     # usage and the message, exit status 2
        if r["history"] and (not dist.is_initialized() or dist.get_rank() == 0):
            h = r["history"][-1]
            print(f"step {h['step']}: train loss {h['loss']:.4f}; steps done {r['steps_done']} of "
                  f"{r['steps_requested']} on {r['distributed']['world_size']} process(es) "
                  f"({r['distributed']['parallel']})")
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
