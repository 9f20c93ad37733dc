"""README's speed table is the current speed record's (benchmarks/results/bench_path.json), not typed in."""
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_block(name: str) -> str:
    """The text between ``<!-- name -->`` and ``<!-- /name -->`` in README.md."""
    block = re.search(rf"<!-- {name} -->\n(.*?)\n<!-- /{name} -->", (ROOT / "README.md").read_text(), re.S)
    assert block, f"README.md lost its <!-- {name} --> block"
    return block.group(1).strip()


def record(name: str) -> dict:
    return json.loads((ROOT / "benchmarks" / "results" / name).read_text())


def readme_speed_table(bench: dict) -> str:
    """The README's table from the record: ms and ratios to the default SDPA and to fla, PaTH."""
    ms = {(r["D"], r["T"], r["method"], r["mode"]): r["ms"] for r in bench["rows"] if r.get("ms")}
    backend = {r["backend"] for r in bench["rows"] if r["method"] == "sdpa"}
    lines = [f"| D | T | B | SDPA ({'/'.join(sorted(backend))}) fwd | PaTH fwd (x SDPA, x fla) | "
             f"SDPA fwd+bwd | PaTH fwd+bwd (x SDPA, x fla) |", "|---|---|---|---|---|---|---|"]
    for D, T in sorted({(r["D"], r["T"]) for r in bench["rows"]}):
        B = next(r["B"] for r in bench["rows"] if (r["D"], r["T"]) == (D, T))
        cells = []
        for mode in ("fwd", "fwdbwd"):
            s, o, f = ms[D, T, "sdpa", mode], ms[D, T, "ours_path", mode], ms[D, T, "fla_path", mode]
            cells += [f"{s:.2f}", f"{o:.2f} ({o / s:.1f}x, {o / f:.2f}x)"]
        lines.append(f"| {D} | {T} | {B} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def test_readme_speed_table_is_the_records():
    assert readme_block("speed-table") == readme_speed_table(record("bench_path.json"))


def test_readme_decode_table_is_the_records():
    from path_lib.book.speed import decode_tables
    rec = record("bench_decode.json")
    text = (ROOT / "README.md").read_text()
    table, _, summary = decode_tables(rec)
    assert readme_block("decode-table") == table
    assert summary in text
    p = {name: pts[-1]["key_rel_err_median"] for name, pts in rec["precision"]["rows"].items()}
    assert f"{p['fp32 store, flush every 64']:.0e}".replace("e-06", "e-6") in text
    assert f"{100 * p['bf16 store, flush every 64']:.1f}% in bfloat16" in text


def test_readme_lm_table_is_the_records():
    """The end-to-end training table and its sentence are the current record's (RECORDS['lm_throughput'])."""
    from path_lib.book.speed import lm_throughput_tables
    table, _, summary = lm_throughput_tables(record("bench_lm_throughput.json"))
    assert readme_block("lm-table") == table
    assert summary in (ROOT / "README.md").read_text()


def test_readme_targets_table_is_the_records():
    """The README's cell-by-cell target status and its sentence are the current speed record's."""
    from path_lib.book import speed
    table, sentence = speed.target_status(speed.normalize_bench(record("bench_path.json")))
    assert readme_block("targets-table") == table
    assert sentence in (ROOT / "README.md").read_text()
