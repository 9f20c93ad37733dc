"""The Triton decoding cache (kernels/path_lib/kernels/decode.py) against the PyTorch cache (path_lib.decoding.PaTHCache,
float64) on fresh random inputs: outputs at every step and the keys moved to the current position, with
deferred updates flushed at different periods, several splits of the cache, grouped-query heads, the
forget gate, a prefilled prompt with left padding, padding while decoding, beam reordering and growth.

As in ``tests/test_teaching_kernel.py``, TRITON_INTERPRET=1 must be set before triton is imported, so
without it this module runs itself in a subprocess that has it; the input checks launch nothing and run
in both. ``test_bf16_on_gpu`` runs on a CUDA device only (TRITON_INTERPRET unset).
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")

from helpers import INTERPRETED, interpreter_markers, run_module_under_interpreter  # noqa: E402

needs_interpreter, outside_interpreter = interpreter_markers()
ROOT = Path(__file__).resolve().parent.parent


@outside_interpreter
def test_under_triton_interpreter():
    run_module_under_interpreter(__file__, "decode-kernel")


def _token(gen, B, Hq, Hk, D, gate, dtype=torch.float32, device="cpu"):
    r = lambda *s: torch.randn(*s, generator=gen).to(device)                  # noqa: E731
    q, k, v = r(B, Hq, D).to(dtype), r(B, Hk, D).to(dtype), r(B, Hk, D).to(dtype)
    w = F.normalize(r(B, Hk, D), dim=-1)
    beta = 2 * torch.rand(B, Hk, generator=gen).to(device)
    g = -torch.rand(B, Hq, generator=gen).to(device) if gate else None
    return q, k, v, w, beta, g


def _d(x):
    return None if x is None else x.double()


@needs_interpreter
@pytest.mark.parametrize("Hq,Hk,gate,flush,splits", [(2, 2, False, 1, 1), (4, 2, True, 3, 2), (4, 1, True, 64, 3),
                                                      (2, 2, True, 5, None)])
def test_steps_match_the_pytorch_cache(Hq, Hk, gate, flush, splits):
    from path_lib.kernels.decode import TritonPaTHCache
    from path_lib.decoding import PaTHCache
    gen = torch.Generator().manual_seed(Hq * 100 + flush)
    B, D = 2, 16
    ref = PaTHCache(B, Hq, Hk, D, dtype=torch.float64)
    tri = TritonPaTHCache(B, Hq, Hk, D, value_dtype=torch.float32, device="cpu", capacity=4, flush_every=flush,
                          splits=splits)
    for t in range(9):
        q, k, v, w, beta, g = _token(gen, B, Hq, Hk, D, gate)
        want = ref.step(q.double(), k.double(), v.double(), w.double(), beta.double(), _d(g))
        got = tri.step(q, k, v, w, beta, g)
        assert got.shape == (B, Hq, D) and got.dtype == torch.float32
        torch.testing.assert_close(got.double(), want, atol=2e-5, rtol=2e-5, msg=f"step {t}")
        torch.testing.assert_close(tri.keys.double(), ref.keys, atol=2e-5, rtol=2e-5, msg=f"keys, step {t}")
    assert len(tri) == 9 and tri.capacity >= 9


@needs_interpreter
@pytest.mark.parametrize("Hq,Hk", [(4, 2), (2, 2)])
def test_prefilled_prompt_with_padding_then_padded_steps_and_beams(Hq, Hk):
    from path_lib.kernels.decode import TritonPaTHCache
    from path_lib.decoding import PaTHCache, keys_to_end
    gen = torch.Generator().manual_seed(7)
    B, T, D = 3, 6, 16
    k = torch.randn(B, T, Hk, D, generator=gen)
    v = torch.randn(B, T, Hk, D, generator=gen)
    w = F.normalize(torch.randn(B, T, Hk, D, generator=gen), dim=-1)
    beta = 2 * torch.rand(B, T, Hk, generator=gen)
    g = -torch.rand(B, T, Hq, generator=gen)
    valid = torch.ones(B, T, dtype=torch.bool)
    valid[1, 4:] = False                                  # row 1 ends in padding (beta = g = 0 there)
    beta, g = beta * valid[..., None], g * valid[..., None]
    k_end = keys_to_end(k, w, beta)
    ref = PaTHCache._from_prefix(k_end.double(), v.double(), g.double(), Hq, dtype=torch.float64, valid=valid)
    tri = TritonPaTHCache.from_prefix(k_end, v, g, n_q_heads=Hq, valid=valid, flush_every=2, splits=2, capacity=8)
    for t in range(5):
        q, kt, vt, wt, bt, gt = _token(gen, B, Hq, Hk, D, True)
        valid_t = torch.tensor([True, t != 2, True])
        want = ref.step(q.double(), kt.double(), vt.double(), wt.double(), bt.double(), gt.double(), valid_t=valid_t)
        got = tri.step(q, kt, vt, wt, bt, gt, valid_t=valid_t)
        keep = valid_t if t == 2 else torch.ones(B, dtype=torch.bool)        # a padding token's output is unspecified
        torch.testing.assert_close(got.double()[keep], want[keep], atol=2e-5, rtol=2e-5, msg=f"step {t}")
        if t == 3:                                         # beam search: reorder the batch
            index = torch.tensor([2, 0, 0])
            ref.select(index)
            tri.select(index)
    torch.testing.assert_close(tri.keys.double(), ref.keys, atol=2e-5, rtol=2e-5)


def test_bad_input_gets_named_errors():
    if not INTERPRETED and not torch.cuda.is_available():
        from path_lib.kernels.decode import TritonPaTHCache
        with pytest.raises(ValueError, match="device must be a CUDA device"):
            TritonPaTHCache(1, 2, 2, 16, device="cpu")
        return
    from path_lib.kernels.decode import TritonPaTHCache
    dev = "cpu" if INTERPRETED else "cuda"
    dt = torch.float32 if INTERPRETED else torch.bfloat16
    with pytest.raises(ValueError, match="head_dim must be a power of two"):
        TritonPaTHCache(1, 2, 2, 24, device=dev, value_dtype=dt)
    with pytest.raises(ValueError, match="multiple of n_kv_heads"):
        TritonPaTHCache(1, 3, 2, 16, device=dev, value_dtype=dt)
    with pytest.raises(TypeError, match="key_dtype"):
        TritonPaTHCache(1, 2, 2, 16, device=dev, value_dtype=dt, key_dtype=torch.float16)
    with pytest.raises(ValueError, match="flush_every"):
        TritonPaTHCache(1, 2, 2, 16, device=dev, value_dtype=dt, flush_every=0)
    cache = TritonPaTHCache(2, 2, 2, 16, device=dev, value_dtype=dt)
    q, k, v, w, beta, g = _token(torch.Generator().manual_seed(0), 2, 2, 2, 16, True, dt, dev)
    with pytest.raises(ValueError, match="q_t must have shape"):
        cache.step(q[:1], k, v, w, beta)
    with pytest.raises(TypeError, match="w_t must have dtype"):
        cache.step(q, k, v, w.to(dt if dt != torch.float32 else torch.float16), beta)
    with pytest.raises(ValueError, match="g_t must have shape"):
        cache.step(q, k, v, w, beta, g[:, :1])
    with pytest.raises(ValueError, match="beta_t must lie in"):
        cache.step(q, k, v, w, beta + 2)
    with pytest.raises(ValueError, match="w_t"):
        cache.step(q, k, v, 2 * w, beta)
    with pytest.raises(ValueError, match="q_t contains NaN"):
        cache.step(q * float("nan"), k, v, w, beta)
    with pytest.raises(TypeError, match="check_values"):
        cache.step(q, k, v, w, beta, check_values=1)
    assert len(cache) == 0                                 # nothing changed before the errors


@pytest.mark.skipif(INTERPRETED or not torch.cuda.is_available(), reason="needs a CUDA device")
def test_bf16_on_gpu():
    from path_lib.kernels import transform_keys_to_end
    from path_lib.kernels.decode import TritonPaTHCache
    from path_lib.decoding import PaTHCache
    gen = torch.Generator().manual_seed(3)
    B, T, Hq, Hk, D = 2, 300, 8, 2, 64
    k = torch.randn(B, T, Hk, D, generator=gen).cuda().bfloat16()
    v = torch.randn(B, T, Hk, D, generator=gen).cuda().bfloat16()
    w = F.normalize(torch.randn(B, T, Hk, D, generator=gen), dim=-1).cuda()
    beta = (2 * torch.rand(B, T, Hk, generator=gen)).cuda()
    k_end = transform_keys_to_end(k, w, beta)
    ref = PaTHCache._from_prefix(k_end.float(), v.float(), None, Hq, dtype=torch.float32)
    tri = TritonPaTHCache.from_prefix(k_end, v, None, n_q_heads=Hq, flush_every=16)
    for t in range(40):
        q, kt, vt, wt, bt, _ = _token(gen, B, Hq, Hk, D, False, torch.bfloat16, "cuda")
        want = ref.step(q.float(), kt.float(), vt.float(), wt, bt)
        got = tri.step(q, kt, vt, wt, bt)
        torch.testing.assert_close(got.float(), want, atol=2e-2, rtol=2e-2, msg=f"step {t}")


@pytest.mark.skipif(INTERPRETED or not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("attention", ["path", "path_fox"])
def test_tinylm_decoding_on_gpu_uses_the_triton_cache_and_matches_the_forward(attention):
    from path_lib.kernels.decode import TritonPaTHCache
    from path_lib.nn.model import TinyLM
    torch.manual_seed(0)
    lm = TinyLM(64, d_model=128, n_layers=2, n_heads=2, attention=attention, backend="triton").cuda().eval()
    tokens = torch.randint(0, 64, (2, 90), device="cuda")
    with torch.no_grad():
        full = lm(tokens)
        logits, state = lm.prefill(tokens[:, :70])
        steps = []
        for t in range(70, 90):
            out, state = lm.step(tokens[:, t], state)
            steps.append(out)
    assert any(isinstance(v, TritonPaTHCache) for s in state for v in (s.values() if isinstance(s, dict) else []))
    torch.testing.assert_close(logits, full[:, 69], atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(torch.stack(steps, 1), full[:, 70:], atol=1e-3, rtol=1e-3)


def test_default_config_is_the_recorded_choice():
    import dataclasses
    import json
    from path_lib.kernels.decode import DEFAULT_CONFIG
    from path_lib.records import RECORDS
    rec = json.loads((ROOT / RECORDS["decode"]).read_text())
    assert rec["complete"] and rec["tuned"]
    assert dataclasses.asdict(DEFAULT_CONFIG) == rec["config"]
    assert {r["sdpa_backend"] for r in rec["rows"]} == {"cudnn"}
