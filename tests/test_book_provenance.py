"""path_lib.book.notebook's provenance dropdown: the public command of a record and its HTML block."""
from __future__ import annotations

import pytest

from path_lib.book.notebook import MACHINE_OPTIONS, provenance_details, public_command

RECORDED = ("python experiments/run_equal.py --phases lm,flip_flop --state /tmp/path_book_gpu_state "
            "--resume-from runs/gpu_state --out /root/out --budget-s 420 --workers 14")


def test_public_command_drops_machine_options_and_fixes_the_script_path():
    assert public_command(RECORDED) == "python scripts/experiments/run_equal.py --phases lm,flip_flop"
    assert public_command("PYTHONPATH=. python3 scripts/experiments/run_conversion.py --preset full "
                          "--workers=3 --out=/root/out/c.json --seeds 0,1,2") == (
        "python scripts/experiments/run_conversion.py --preset full --seeds 0,1,2")
    # an option that changes the result is kept with its value
    assert public_command("python scripts/experiments/run_lm.py --steps 500 --budget-s 9") == (
        "python scripts/experiments/run_lm.py --steps 500")


@pytest.mark.parametrize("option", MACHINE_OPTIONS)
def test_no_machine_option_or_temporary_path_survives(option):
    got = public_command(f"python scripts/x.py {option} /tmp/somewhere --keep 1")
    assert option not in got and "/tmp" not in got and got.endswith("--keep 1")


def test_public_command_bad_input():
    with pytest.raises(TypeError, match="command"):
        public_command(None)


def test_provenance_details_is_a_collapsed_block_with_every_field():
    rec = {"provenance": {"device": "NVIDIA H200", "torch": "2.11", "triton": "3.6", "python": "3.12.3",
                          "commit": "35e2baf5", "date": "2026-12-02T00:03:37+00:00", "command": RECORDED}}
    out = provenance_details(rec, summary="Recorded <run>")
    assert out.startswith("<details><summary>Recorded &lt;run&gt;</summary>") and out.endswith("</details>")
    for text in ("NVIDIA H200", "torch 2.11", "triton 3.6", "Python 3.12.3", "35e2baf5", "2026-12-02</li>",
                 "<code>python scripts/experiments/run_equal.py --phases lm,flip_flop</code>"):
        assert text in out
    assert "/tmp" not in out and "/root" not in out and "budget" not in out


def test_notes_go_inside_the_dropdown():
    from path_lib.book.notebook import provenance_details
    rec = {"provenance": {"device": "GPU", "command": "python x.py", "commit": "c", "date": "2026-01-01"}}
    html = provenance_details(rec, notes=["timed <older> code"])
    assert html.index("timed &lt;older&gt; code") < html.index("</details>")
    assert "note:" not in provenance_details(rec)
