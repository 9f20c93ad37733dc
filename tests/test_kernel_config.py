"""The launch configuration (``path_lib.kernels.kernel_config`` -> ``path_lib.kernels.KernelConfig``) chooses exactly what
the launcher chose before it was one object: the functions of ``kernels/path_lib/kernels/_path.py`` (now ``_config.py``) as of the v16 sweep
(commit 967fe53: ``_config``, ``_aux_warps``, ``_stages``, ``_rows`` and the split functions,
``_dtypes``, ``_block_prec``, ``_fp32_prec``, with their tables) are copied below as the oracle, and the
builder must agree with them field by field on a grid of devices (an H200, an A100, an sm_86 and a T4,
faked through ``torch.cuda``'s property functions, and the CPU interpreter), dtypes, head dims,
sequence lengths, forward-only calls, explicit block lengths and segments, ``PATH_KERNELS_*`` overrides
and out-of-resources fallback states. No kernel runs (no GPU, no interpreter needed).

Also: the one parser of the ``PATH_KERNELS_*`` variables, printing and storing a configuration, and
``path_lib.kernels.blocking``.
"""
from __future__ import annotations

import itertools
import json
import math
import os
import types

import pytest
import torch

import path_lib.kernels
from path_lib.kernels import _config as kp
from path_lib.kernels._launch import _launch


# ------------------------------------------------------------------------------------------------
# the oracle: the configuration functions of kernels/path_lib/kernels/_path.py at commit 967fe53, unchanged but for
# (a) the process-global fallback state passed in (``_MAX_BT``, ``_ONE_SEGMENT``), (b) ``_dtypes``
# returning Triton dtype names instead of Triton dtypes (so that this file needs no triton)
# ------------------------------------------------------------------------------------------------

class Old:
    _SMEM_HALF_BT64 = {32: 90112, 64: 102400, 128: 188416}
    _SMEM_FP32_BT32 = {32: 32768, 64: 81920, 128: 229376}
    _MAX_BT = {}
    _ONE_SEGMENT = set()
    _FWD_ONLY_SEG_BLOCKS = {128: 16}
    _STAGE_KEYS = ("fwd", "fwd_inter", "inter_q", "inter_kv")
    _STAGES_HALF = dict(fwd=1, fwd_inter=3, inter_q=3, inter_kv=3)
    _WARP_KEYS = ("ut_a", "ut", "prep", "block", "intra", "diag", "seg", "seg_bwd", "fwd", "fwd_inter", "inter_q",
                  "inter_kv")
    _SEG_SPLIT = {128: 32}
    _BLOCK_COLS = {64: 32, 128: 32}
    _DIAG_COLS = {64: 64, 128: 128}
    _KEY_ROWS = {128: 128}
    _QUERY_ROWS = {128: 128}
    _FWD_ROWS = {64: 128, 128: 128}
    _ROW_KEYS = ("key_rows", "query_rows", "fwd_rows")
    _SPLIT_KEYS = ("seg_split", "block_cols", "diag_cols") + _ROW_KEYS

    @staticmethod
    def _smem(device) -> int:
        props = torch.cuda.get_device_properties(device)
        return getattr(props, "shared_memory_per_block_optin", 0) or 48 * 1024

    @staticmethod
    def _segments(n, BT, D):
        ns_max = max(1, int(math.sqrt(2.0 * n * BT / D)))
        return max(2, -(-n // ns_max))

    @classmethod
    def _config(cls, D, T, dtype, device, block_size, seg_blocks, forward_only=False):
        warps = 4 if D <= 64 else 8
        if block_size is not None:
            BT = block_size
        elif device.type != "cuda":
            BT = 64 if dtype != torch.float32 else 32
        else:
            smem = cls._smem(device)
            if dtype == torch.float32:
                BT = 32 if smem >= cls._SMEM_FP32_BT32[D] else 16
            else:
                BT = 64 if smem >= cls._SMEM_HALF_BT64[D] else (32 if smem >= cls._SMEM_HALF_BT64[D] // 2 else 16)
            BT = min(BT, cls._MAX_BT.get((str(device), dtype, D), BT))
            if torch.cuda.get_device_capability(device)[0] < 8:
                warps = 4
        n = max(1, -(-T // BT))
        SB = seg_blocks if seg_blocks is not None else cls._segments(n, BT, D)
        if seg_blocks is None and forward_only and dtype != torch.float32 and BT == 64:
            SB = max(SB, min(n, cls._FWD_ONLY_SEG_BLOCKS.get(D, 0)))
        if seg_blocks is None and (str(device), dtype, D) in cls._ONE_SEGMENT:
            SB = n
        return BT, SB, warps

    @staticmethod
    def _dtypes(q):
        if q.dtype == torch.float32:
            prec = "tf32x3" if q.device.type == "cuda" and torch.cuda.get_device_capability(q.device)[0] >= 8 else "ieee"
            return "float32", "float32", prec, torch.float32
        cdt = "float16" if q.dtype == torch.float16 else "bfloat16"
        return cdt, "float16", "tf32", q.dtype

    @classmethod
    def _stages(cls, q, key):
        spec = os.environ.get("PATH_KERNELS_STAGES", "")
        for item in filter(None, spec.split(",")):
            name, _, val = item.partition("=")
            if name.strip() not in cls._STAGE_KEYS or val.strip() not in ("1", "2", "3", "4"):
                raise ValueError(f"PATH_KERNELS_STAGES: bad item {item!r}")
            if name.strip() == key:
                return int(val)
        if q.device.type != "cuda":
            return 1
        props = torch.cuda.get_device_properties(q.device)
        smem = getattr(props, "shared_memory_per_block_optin", 0) or 48 * 1024
        return cls._STAGES_HALF[key] if smem >= 160 * 1024 and q.dtype != torch.float32 else 1

    @classmethod
    def _aux_warps(cls, q, warps):
        cuda8 = q.device.type == "cuda" and torch.cuda.get_device_capability(q.device)[0] >= 8
        D = q.shape[-1]
        half = q.dtype != torch.float32
        if cuda8 and D >= 128 and half:
            out = dict(ut_a=4, ut=1, prep=4, block=4, intra=4, seg=8, seg_bwd=4, fwd=4, fwd_inter=8, inter_q=8, inter_kv=8)
        elif cuda8 and D >= 128:
            out = dict(ut_a=4, ut=1, prep=4, block=4, intra=8, seg=8)
        elif cuda8 and D >= 64 and half:
            out = dict(ut_a=4, ut=1, prep=4, block=4, intra=4, seg=4)
        elif cuda8 and D >= 64:
            out = dict(ut_a=4, ut=1, prep=4, block=8, intra=8, seg=4)
        else:
            out = {key: warps for key in cls._WARP_KEYS}
        for key in ("fwd", "inter_q", "inter_kv"):
            out.setdefault(key, warps)
        out.setdefault("fwd_inter", out["fwd"])
        out.setdefault("diag", out["intra"])
        out.setdefault("seg_bwd", out["seg"])
        spec = os.environ.get("PATH_KERNELS_WARPS", "")
        for item in filter(None, spec.split(",")):
            key, _, val = item.partition("=")
            if key.strip() not in cls._WARP_KEYS or val.strip() not in ("1", "2", "4", "8", "16"):
                raise ValueError(f"PATH_KERNELS_WARPS: bad item {item!r}")
            out[key.strip()] = int(val)
        return out

    @classmethod
    def _block_prec(cls, q):
        if q.dtype == torch.float32:
            return cls._fp32_prec(q)
        return "tf32"

    @classmethod
    def _split_override(cls, key, D):
        spec = os.environ.get("PATH_KERNELS_SPLIT", "")
        for item in filter(None, spec.split(",")):
            name, _, val = item.partition("=")
            val = val.strip()
            if name.strip() not in cls._SPLIT_KEYS or val not in ("16", "32", "64", "128"):
                raise ValueError(f"PATH_KERNELS_SPLIT: bad item {item!r}")
            if name.strip() == key:
                return int(val) if key in cls._ROW_KEYS else min(int(val), D)
        return None

    @classmethod
    def _rows(cls, key, table, D, BT, SB, NB, half):
        rows = cls._split_override(key, D) or (table.get(D, BT) if half and BT == 64 else BT)
        nblk = rows // BT
        if rows % BT or nblk < 1 or SB % nblk or NB % nblk:
            return BT
        return rows

    @classmethod
    def _seg_split(cls, D):
        return cls._split_override("seg_split", D) or cls._SEG_SPLIT.get(D, D)

    @classmethod
    def _block_cols(cls, D):
        return cls._split_override("block_cols", D) or cls._BLOCK_COLS.get(D, D)

    @classmethod
    def _diag_cols(cls, D, BT=64, half=True):
        cols = cls._DIAG_COLS.get(D, D)
        return cls._split_override("diag_cols", D) or (cols if half and BT == 64 else min(cols, 64))

    @staticmethod
    def _fp32_prec(q):
        return "tf32x3" if q.device.type == "cuda" and torch.cuda.get_device_capability(q.device)[0] >= 8 else "ieee"

    @classmethod
    def launch(cls, device, dtype, D, T, forward_only, block_size, seg_blocks):
        """What the old launcher passed to the kernels (path_attention -> _forward_impl / _backward_impl /
        _precompute), as KernelConfig's field names."""
        BT, SB, warps = cls._config(D, T, dtype, device, block_size, seg_blocks, forward_only)
        q = types.SimpleNamespace(device=device, dtype=dtype, shape=(1, T, 1, D))
        NB = max(1, -(-T // BT))
        NS = -(-NB // SB)
        half = dtype != torch.float32
        CDT, TDT, PREC, _ = cls._dtypes(q)
        return dict(
            block=BT, seg_blocks=SB, n_blocks=NB, n_segments=NS, warps=dict(cls._aux_warps(q, warps), delta=4),
            stages={key: cls._stages(q, key) for key in cls._STAGE_KEYS},
            seg_split=cls._seg_split(D), block_cols=cls._block_cols(D), diag_cols=cls._diag_cols(D, BT, half),
            key_rows=cls._rows("key_rows", cls._KEY_ROWS, D, BT, SB, NB, half),
            query_rows=cls._rows("query_rows", cls._QUERY_ROWS, D, BT, SB, NB, half),
            fwd_rows=cls._rows("fwd_rows", cls._FWD_ROWS, D, BT, SB, NB, half) if NS > 1 else BT,
            compute_dtype=CDT, transport_dtype=TDT, backward_transport_dtype=CDT, precision=PREC,
            block_precision=cls._block_prec(q), solve_precision=cls._fp32_prec(q))


# ------------------------------------------------------------------------------------------------
# fake devices
# ------------------------------------------------------------------------------------------------

DEVICES = {  # name: (opt-in shared memory per block, compute capability)
    "H200": (232448, (9, 0)),
    "A100": (166912, (8, 0)),
    "sm86": (101376, (8, 6)),
    "T4": (65536, (7, 5)),
}


def fake_cuda(monkeypatch, smem, cap):
    props = types.SimpleNamespace(shared_memory_per_block_optin=smem, name="fake GPU")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a, **k: props)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, **k: cap)
    return torch.device("cuda:0")


@pytest.fixture
def clean(monkeypatch):
    """No PATH_KERNELS_* variables, an empty fallback state (old and new)."""
    for var in ("PATH_KERNELS_WARPS", "PATH_KERNELS_STAGES", "PATH_KERNELS_SPLIT", "PATH_KERNELS_PAD_D32"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(kp, "_FALLBACK", kp.FallbackState())
    monkeypatch.setattr(Old, "_MAX_BT", {})
    monkeypatch.setattr(Old, "_ONE_SEGMENT", set())
    return monkeypatch


LAUNCH_FIELDS = ("block", "seg_blocks", "n_blocks", "n_segments", "warps", "stages", "seg_split", "block_cols",
                 "diag_cols", "key_rows", "query_rows", "fwd_rows", "compute_dtype", "transport_dtype",
                 "backward_transport_dtype", "precision", "block_precision", "solve_precision")


def new_fields(cfg):
    """The fields of a KernelConfig that the launches read."""
    d = cfg.as_dict()
    return {key: d[key] for key in LAUNCH_FIELDS}


DTYPES = (torch.float16, torch.bfloat16, torch.float32)
TS = (1, 17, 64, 100, 333, 640, 1024, 1100, 4096, 16384, 65536)
BLOCKINGS = ((None, None), (16, None), (32, 3), (None, 1), (64, 2), (None, 7), (16, 99))


def _grid_check(device, blockings=BLOCKINGS, Ts=TS, skip=lambda *a: False):
    n = 0
    for dtype, D, T, fo, (bs, sb) in itertools.product(DTYPES, kp.HEAD_DIMS, Ts, (False, True), blockings):
        if skip(dtype, D, T, fo, bs, sb):
            continue
        old = Old.launch(device, dtype, D, T, fo, bs, sb)
        new = new_fields(kp.kernel_config(device, dtype, D, T, fo, block_size=bs, seg_blocks=sb))
        assert new == old, (str(device), dtype, D, T, fo, bs, sb, {k: (old[k], new[k]) for k in old
                                                                    if old[k] != new[k]})
        n += 1
    return n


@pytest.mark.parametrize("name", list(DEVICES))
def test_the_builder_chooses_what_the_old_launcher_chose_on_cuda(name, clean):
    smem, cap = DEVICES[name]
    device = fake_cuda(clean, smem, cap)
    # the one deliberate change: an explicit block_size before sm_80 no longer brings back the
    # 8 warps of D = 128 (the old _config skipped its pre-sm_80 rule when block_size was given;
    # test_block_size_before_sm80_keeps_four_warps below)
    pre80 = cap[0] < 8
    n = _grid_check(device, skip=lambda dtype, D, T, fo, bs, sb: pre80 and bs is not None and D == 128)
    assert n > 1000


def test_the_builder_chooses_what_the_old_launcher_chose_on_the_cpu(clean):
    assert _grid_check(torch.device("cpu")) > 1000


@pytest.mark.parametrize("env", [
    dict(PATH_KERNELS_WARPS="intra=8,block=2,fwd_inter=16"),
    dict(PATH_KERNELS_STAGES="fwd=3, inter_kv=2"),
    dict(PATH_KERNELS_SPLIT="seg_split=16,block_cols=64,diag_cols=32"),
    dict(PATH_KERNELS_SPLIT="key_rows=128,query_rows=64,fwd_rows=32"),
    dict(PATH_KERNELS_SPLIT="diag_cols=128,fwd_rows=128", PATH_KERNELS_WARPS="seg_bwd=8", PATH_KERNELS_STAGES="inter_q=4"),
])
@pytest.mark.parametrize("name", ["H200", "T4", "cpu"])
def test_the_overrides_act_as_before(env, name, clean):
    for var, val in env.items():
        clean.setenv(var, val)
    device = torch.device("cpu") if name == "cpu" else fake_cuda(clean, *DEVICES[name])
    pre80 = name == "T4"
    assert _grid_check(device, blockings=((None, None), (16, None), (None, 3)), Ts=(17, 1024, 4096),
                       skip=lambda dtype, D, T, fo, bs, sb: pre80 and bs is not None and D == 128) > 50


@pytest.mark.parametrize("name", ["H200", "A100", "T4", "cpu"])
def test_the_fallback_state_acts_as_before(name, clean):
    """After out-of-resources retries (a shorter block remembered, one segment remembered), the next
    configurations are the old ones (``_MAX_BT`` and ``_ONE_SEGMENT`` then, ``FallbackState`` now)."""
    device = torch.device("cpu") if name == "cpu" else fake_cuda(clean, *DEVICES[name])
    key = str(device)
    for dtype, D, bt in ((torch.bfloat16, 128, 32), (torch.float16, 64, 16), (torch.float32, 128, 16)):
        Old._MAX_BT[(key, dtype, D)] = bt
        kp._FALLBACK.max_block[(key, dtype, D)] = bt
    for dtype, D in ((torch.bfloat16, 64), (torch.float32, 32)):
        Old._ONE_SEGMENT.add((key, dtype, D))
        kp._FALLBACK.one_segment.add((key, dtype, D))
    pre80 = name == "T4"
    assert _grid_check(device, blockings=((None, None), (32, None), (None, 2)), Ts=(17, 1024, 16384),
                       skip=lambda dtype, D, T, fo, bs, sb: pre80 and bs is not None and D == 128) > 50
    # and a device described by hand has no fallback state
    cfg = kp.kernel_config(kp.H200, torch.bfloat16, 128, 1024)
    assert cfg.block == 64 and cfg.n_segments > 1 and not cfg.notes


def test_a_lowered_pipeline_is_remembered_and_consulted(clean):
    """``_launch`` lowers the stages of an attention loop that runs out of shared memory and records the
    depth that fitted in the fallback state; the next configuration for that device, dtype, head dim,
    block length, warps and rows starts there (and says so), others do not."""
    triton = pytest.importorskip("triton")
    device = fake_cuda(clean, *DEVICES["H200"])
    cfg = kp.kernel_config(device, torch.bfloat16, 128, 4096)
    assert cfg.stages.inter_q == 3 and cfg._key == "cuda:0"
    tried = []

    class Kernel:  # stands in for a @triton.jit kernel: fits at 2 stages or fewer
        fn = types.SimpleNamespace(__name__="_bwd_inter_q_kernel")

        def __getitem__(self, grid):
            def launch(**kwargs):
                tried.append(kwargs["num_stages"])
                assert kwargs["num_warps"] == cfg.warps.inter_q and kwargs["QR"] == 128
                if kwargs["num_stages"] > 2:
                    raise triton.runtime.errors.OutOfResources(240000, 232448, "shared memory")
            return launch
    _launch(Kernel(), (1, 1), cfg, "inter_q", QR=cfg.query_rows)
    assert tried == [3, 2]
    again = kp.kernel_config(device, torch.bfloat16, 128, 4096)
    assert again.stages.inter_q == 2 and again.stages.inter_kv == 3
    assert any("stages inter_q 2" in n for n in again.notes)
    tried.clear()
    _launch(Kernel(), (1, 1), again, "inter_q", QR=again.query_rows)
    assert tried == [2]
    # another head dim, or another device, is not affected
    assert kp.kernel_config(device, torch.bfloat16, 64, 4096).stages.inter_q == 3
    assert kp.kernel_config(kp.H200, torch.bfloat16, 128, 4096).stages.inter_q == 3
    # a PATH_KERNELS_STAGES deeper than what fitted is capped, a shallower one kept
    clean.setenv("PATH_KERNELS_STAGES", "inter_q=1")
    assert kp.kernel_config(device, torch.bfloat16, 128, 4096).stages.inter_q == 1


def test_block_size_before_sm80_keeps_four_warps(clean):
    """The one place where the builder differs from the old functions: before sm_80 the kernels run at
    4 warps whether or not ``block_size`` is given (the old ``_config`` gave D = 128 8 warps when it was;
    the out-of-resources retry, ``transform_keys_to_end`` and ``benchmarks/compile_check.py`` had 4)."""
    device = fake_cuda(clean, *DEVICES["T4"])
    for bs in (None, 16, 32):
        cfg = kp.kernel_config(device, torch.float16, 128, 1024, block_size=bs)
        assert set(dataclass_values(cfg.warps)) == {4}
    assert Old._config(128, 1024, torch.float16, device, 16, None)[2] == 8   # the old behaviour


def dataclass_values(obj):
    return [getattr(obj, f) for f in obj.__dataclass_fields__]


# ------------------------------------------------------------------------------------------------
# blocking(), the described devices, printing and storing
# ------------------------------------------------------------------------------------------------

def test_blocking_is_the_h200_configuration(clean):
    """``path_lib.kernels.blocking`` (the benchmark's and the chapters' block and segment lengths) is the H200's
    configuration; it was the CPU's before, which gives the same block lengths and segments."""
    for dtype, D, T, fo in itertools.product(DTYPES, kp.HEAD_DIMS, TS, (False, True)):
        old = Old._config(D, T, dtype, torch.device("cpu"), None, None, fo)[:2]
        assert path_lib.kernels.blocking(T, D, dtype, forward_only=fo) == old
        cfg = path_lib.kernels.kernel_config(path_lib.kernels.H200, dtype, D, T, fo)
        assert (cfg.block, cfg.seg_blocks) == old
    assert path_lib.kernels.blocking(4096, 128) == (64, 8) and path_lib.kernels.blocking(4096, 128, forward_only=True) == (64, 16)


def test_described_devices_match_faked_ones(clean):
    for name, info in (("H200", kp.H200), ("A100", kp.A100), ("sm86", kp.SM86), ("T4", kp.T4)):
        device = fake_cuda(clean, *DEVICES[name])
        for dtype, D, T in itertools.product(DTYPES, kp.HEAD_DIMS, (100, 4096)):
            assert new_fields(kp.kernel_config(info, dtype, D, T)) == new_fields(kp.kernel_config(device, dtype, D, T))


def test_the_table_of_block_lengths_in_design_md(clean):
    """benchmarks/DESIGN.md's table of block lengths per device (half D = 32 / 64 / 128, float32 D = 32 /
    64 / 128)."""
    table = {kp.H200: ((64, 64, 64), (32, 32, 32)), kp.A100: ((64, 64, 32), (32, 32, 16)),
             kp.SM86: ((64, 32, 32), (32, 32, 16)), kp.T4: ((32, 32, 16), (32, 16, 16))}
    for dev, (half, fp32) in table.items():
        assert tuple(kp.kernel_config(dev, torch.float16, D, 4096).block for D in (32, 64, 128)) == half
        assert tuple(kp.kernel_config(dev, torch.float32, D, 4096).block for D in (32, 64, 128)) == fp32


def test_a_configuration_prints_and_stores(clean):
    cfg = kp.kernel_config(kp.H200, torch.bfloat16, 128, 4096)
    text = str(cfg)
    for part in ("bfloat16", "D = 128", "T = 4096", "BT = 64", "SB = 8", "NS = 8", "fwd_inter 8", "inter_q 3",
                 "seg_split 32", "diag_cols 128", "fwd_rows 128", "_fwd_inter_kernel", "tf32x3"):
        assert part in text, (part, text)
    d = cfg.as_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["block"] == 64 and d["seg_blocks"] == 8 and d["warps"]["inter_q"] == 8 and d["stages"]["fwd"] == 1
    assert d["capability"] == [9, 0] and "_key" not in d
    # what changed the defaults is listed
    clean.setenv("PATH_KERNELS_WARPS", "intra=8")
    noted = kp.kernel_config(kp.H200, torch.bfloat16, 128, 4096, block_size=32, seg_blocks=4)
    assert noted.notes == ("PATH_KERNELS_WARPS=intra=8", "block_size 32 given", "seg_blocks 4 given")
    assert "notes:" in str(noted) and noted.warps.intra == 8
    # D = 32 on Hopper runs as 64: the configuration says so
    assert kp.kernel_config(kp.H200, torch.bfloat16, 32, 100).pad_head_dim
    assert not kp.kernel_config(kp.A100, torch.bfloat16, 32, 100).pad_head_dim
    clean.setenv("PATH_KERNELS_PAD_D32", "0")
    assert not kp.kernel_config(kp.H200, torch.bfloat16, 32, 100).pad_head_dim


def test_bad_arguments(clean):
    with pytest.raises(ValueError, match="head dim"):
        kp.kernel_config(kp.H200, torch.bfloat16, 48, 100)
    with pytest.raises(ValueError, match="dtype"):
        kp.kernel_config(kp.H200, torch.float64, 64, 100)


# ------------------------------------------------------------------------------------------------
# the PATH_KERNELS_* parser
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("var,good,bad", [
    ("PATH_KERNELS_WARPS", "ut=8, intra=2,inter_kv=16 ,", ["delta=4", "ut=3", "ut", "ut=8,ut=4", "=4", "ut=x"]),
    ("PATH_KERNELS_STAGES", "fwd=3, inter_kv=2", ["intra=2", "fwd=5", "fwd", "fwd=0"]),
    ("PATH_KERNELS_SPLIT", "seg_split=16, block_cols=64", ["seg_split", "rows=16", "seg_split=24"]),
    ("PATH_KERNELS_PAD_D32", "0", ["yes", "2", "true"]),
    ("PATH_KERNELS_SYNC", "1", ["on", "01"]),
])
def test_one_parser_for_every_variable(var, good, bad):
    parsed = kp.env_overrides({var: good})
    assert parsed.text == ((var, good),)
    for value in bad:
        with pytest.raises(ValueError, match=var):
            kp.env_overrides({var: value})
    assert kp.env_overrides({}) == kp.Overrides()
    assert dict(kp.env_overrides({"PATH_KERNELS_WARPS": "ut=8, intra=2"}).warps) == {"ut": 8, "intra": 2}
    assert kp.env_overrides({"PATH_KERNELS_PAD_D32": "1"}).pad_d32 is True
    assert kp.env_overrides({"PATH_KERNELS_PAD_D32": ""}).pad_d32 is None


def test_a_bad_variable_fails_the_builder(clean):
    clean.setenv("PATH_KERNELS_SPLIT", "seg_split=24")
    with pytest.raises(ValueError, match="PATH_KERNELS_SPLIT"):
        kp.kernel_config(kp.H200, torch.bfloat16, 64, 100)
