"""bench/speedup.py's verdicts at 1 GB: where a goal is missed, the table says what binds, from the figures the
bench measured (how close the file comes to the runtime optimum, how busy and how loaded its busiest link is)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import speedup  # noqa: E402


def _row(at_largest, pct, busy, need=None):
    row = {"at_largest": at_largest, "at_largest_optimum_pct": pct, "at_largest_busiest": busy}
    if need is not None:
        row["at_largest_link_need_pct"] = need
    return row


def test_a_met_goal_says_met_and_cases_without_a_goal_say_nothing():
    assert speedup._at_largest_verdict("dgx-a100 x2", "allgather", _row(1.31, 97.0, 0.99, 99.0)) == "met"
    assert speedup._at_largest_verdict("dgx-h100 x2", "allgather", _row(1.05, 90.0, 0.9)) == ""


def test_a_busiest_link_loaded_past_the_optimum_names_the_split_of_the_traffic():
    words = speedup._at_largest_verdict("dgx-a100 x2", "allgather", _row(1.278, 95.6, 0.977, 102.2))
    assert words.startswith("short by 2%: the file runs at 96% of the runtime optimum there")
    assert "that link alone needs 102% of the runtime optimum's time" in words
    assert "split of the traffic over the links binds" in words
    assert "the runtime's costs" not in words               # 98 % busy: the link, not the costs


def test_an_idle_busiest_link_names_the_runtimes_costs():
    words = speedup._at_largest_verdict("mi250 x2", "reducescatter", _row(1.2, 90.0, 0.9, 93.0))
    assert "the runtime's costs (copy rates, waits, the pipeline's fill) leave it idle 10% of the call" in words
    assert "split of the traffic" not in words               # the link could carry its load in the optimum's time
    both = speedup._at_largest_verdict("dgx-a100 x2", "reducescatter", _row(1.24, 92.8, 0.948, 102.2))
    assert "split of the traffic" in both and "leave it idle 5% of the call" in both
