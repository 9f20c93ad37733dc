"""The GPU correctness sweep's bookkeeping, on the CPU: shards cover every case exactly once, a
resumed shard skips what it has, the merge counts passes and failures. The GPU checks themselves are
replaced by stubs (the real ones need CUDA; their results are the recorded sweeps)."""
import importlib.util
import json
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture()
def sweep(monkeypatch):
    spec = importlib.util.spec_from_file_location("correctness_sweep", ROOT / "benchmarks" / "correctness_sweep.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ran = []

    def fake_case(name, gen, **kw):
        ran.append(name)
        return dict(name=name, ok=name != "no_gate_fp32", errors={"o": 1e-7})

    def fake_special(rec_name):
        def run(gen):
            ran.append(rec_name)
            return dict(name=rec_name, ok=True, errors={})
        return run
    monkeypatch.setattr(mod, "check_case", fake_case)
    monkeypatch.setattr(mod, "long_forward", fake_special("long_T_forward"))
    monkeypatch.setattr(mod, "keys_to_end_case", fake_special("transform_keys_to_end"))
    monkeypatch.setattr(mod, "short_conv_case", fake_special("short_conv_bf16"))
    real_gen = torch.Generator
    monkeypatch.setattr(mod.torch, "Generator", lambda device=None: real_gen())
    return mod, ran


def _main(mod, monkeypatch, *args):
    monkeypatch.setattr("sys.argv", ["correctness_sweep.py", *args])
    return mod.main()


def test_shards_cover_every_case_once_and_merge(sweep, monkeypatch, tmp_path):
    mod, ran = sweep
    files = []
    for k in range(3):
        out = tmp_path / f"shard_{k}.json"
        _main(mod, monkeypatch, "--shard", f"{k}/3", "--out", str(out))
        files.append(str(out))
    assert len(ran) == len(set(ran)) == 25
    assert {"long_T_forward", "transform_keys_to_end", "short_conv_bf16", "grid_float32_D128", "varlen_bf16",
            "forward_only_D128_bf16_T1700"} <= set(ran)
    rc = _main(mod, monkeypatch, "--merge", *files, "--out", str(tmp_path / "all.json"))
    rec = json.loads((tmp_path / "all.json").read_text())
    assert (rec["passed"], rec["total"], rc) == (24, 25, 1)      # the stub fails one case
    assert len(rec["shards"]) == 3 and rec["kernel_sources_sha256"]


def test_resume_skips_recorded_cases(sweep, monkeypatch, tmp_path):
    mod, ran = sweep
    out = tmp_path / "s.json"
    _main(mod, monkeypatch, "--shard", "1/4", "--out", str(out))
    first = list(ran)
    ran.clear()
    _main(mod, monkeypatch, "--shard", "1/4", "--resume", "--out", str(out))
    assert first and ran == []
    assert len(json.loads(out.read_text())["cases"]) == len(first)


def test_bad_shard_is_refused(sweep, monkeypatch, tmp_path):
    mod, _ = sweep
    with pytest.raises(SystemExit, match="shard"):
        _main(mod, monkeypatch, "--shard", "3/3", "--out", str(tmp_path / "x.json"))
