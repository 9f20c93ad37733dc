"""The stdlib byte corpus: deterministic, split by file, clear errors, windows that line up."""
import pytest
import torch

from path_lib.training.corpus import (decode, encode, is_validation_file, list_stdlib_files, load_stdlib_corpus,
                                         sample_windows, stdlib_root, SEPARATOR)


@pytest.fixture(scope="module")
def corpus():
    return load_stdlib_corpus(max_bytes=3_000_000)


def test_deterministic_and_capped(corpus):
    again = load_stdlib_corpus(max_bytes=3_000_000)
    assert torch.equal(corpus.train, again.train) and torch.equal(corpus.val, again.val)
    assert corpus.info["sha1"] == again.info["sha1"]
    n = corpus.info["bytes_train"] + corpus.info["bytes_val"]
    assert n == corpus.train.numel() + corpus.val.numel()
    assert 3_000_000 <= n <= 3_000_000 + 1 + corpus.info["files_train"] + corpus.info["files_val"]
    assert corpus.train.dtype == torch.uint8 and corpus.vocab_size == 256
    assert corpus.info["python"].count(".") == 2


def test_split_is_by_file_hash_and_disjoint(corpus):
    root = stdlib_root()
    files = list_stdlib_files()
    assert files == sorted(files, key=lambda p: p.relative_to(root).as_posix())
    rels = [p.relative_to(root).as_posix() for p in files]
    val = [r for r in rels if is_validation_file(r, 5.0)]
    frac = len(val) / len(rels)
    assert 0.02 < frac < 0.09, frac   # 5% of files, up to sampling noise of a hash
    # a file's split depends on its path only
    assert is_validation_file(rels[0], 5.0) == is_validation_file(rels[0], 5.0)
    # validation bytes are whole files: the first validation file's bytes open corpus.val
    first_val = next(p for p, r in zip(files, rels) if is_validation_file(r, 5.0))
    data = first_val.read_bytes()
    assert bytes(corpus.val[: len(data)].tolist()) == data
    assert int(corpus.val[len(data)]) == SEPARATOR


def test_windows_line_up(corpus):
    g = torch.Generator().manual_seed(0)
    x, y = sample_windows(corpus.train, 4, 32, generator=g)
    assert x.shape == y.shape == (4, 32) and x.dtype == torch.long
    assert torch.equal(x[:, 1:], y[:, :-1])
    g2 = torch.Generator().manual_seed(0)
    x2, _ = sample_windows(corpus.train, 4, 32, generator=g2)
    assert torch.equal(x, x2)


def test_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_stdlib_corpus(root=tmp_path / "nope")
    with pytest.raises(ValueError, match="missing"):
        load_stdlib_corpus(root=tmp_path)
    (tmp_path / "a.py").write_text("x = 1\n" * 10)
    with pytest.raises(ValueError, match="too small"):
        load_stdlib_corpus(root=tmp_path)
    with pytest.raises(ValueError, match="too few"):
        sample_windows(torch.zeros(10, dtype=torch.uint8), 1, 10)


def test_encode_decode_roundtrip():
    s = "def f(x):\n    return x  # é"
    assert decode(encode(s)) == s
