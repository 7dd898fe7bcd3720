"""The calibration's inputs and rules: every published point cites its source and is read as its run was
made (forced algorithm, protocol, CUDA graphs), and compile's margin comes from the measured error."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import calibrate  # noqa: E402
from colls.runtimes import calibration  # noqa: E402

POINTS = yaml.safe_load((ROOT / "bench" / "published.yaml").read_text())["points"]


def test_every_point_has_a_source_and_a_figure():
    assert len(POINTS) >= 40
    ids = [p["id"] for p in POINTS]
    assert len(ids) == len(set(ids))
    for p in POINTS:
        assert p["source"] and p["collective"] and p["bytes"] > 0
        assert p.get("time_us") or p.get("busbw_gbps") or p.get("algbw_gbps") or not p["use"]
        # a public source a reader can open: never a path on the machine the points were gathered on
        assert not any(w.startswith(("/", "~")) for w in str(p["source"]).split()), p["id"]
        assert p.get("url") is None or str(p["url"]).startswith("https://"), p["id"]


def test_the_points_cover_what_the_model_is_judged_on():
    used = [p for p in POINTS if p["use"]]
    assert {p["collective"] for p in used} >= {"allreduce", "allgather", "reducescatter", "alltoall"}
    assert {p["gpu"] for p in used} >= {"A100", "H100", "V100", "MI250X"}
    assert any(p["nodes"] > 1 for p in used) and any(p["nodes"] == 1 for p in used)
    assert min(p["bytes"] for p in used) <= 8 and max(p["bytes"] for p in used) >= 8 << 30


@pytest.mark.parametrize("forced, expected", [
    ("NCCL_ALGO=Ring", (("ring",), None)), ("NCCL_ALGO=Ring NCCL_PROTO=Simple", (("ring",), ("Simple",))),
    ("NCCL_TREE_THRESHOLD=0 (ring for all sizes)", (("ring",), None)), (None, (None, None)),
    ("NCCL_ALGO=Tree", (("tree",), None)), ("NCCL_PROTO=LL128", (None, ("LL128",)))])
def test_forced_choices_are_read(forced, expected):
    assert calibrate.forced_of({"forced": forced}) == expected


@pytest.mark.parametrize("forced, caveat, launch", [
    ("CUDA graph (-G 1), -w 10", None, "graph"), (None, "~35 us floor (no CUDA graph, 20 iters)", "stream"),
    (None, None, "stream")])
def test_launch_mode_is_read(forced, caveat, launch):
    assert calibrate.launch_of({"forced": forced, "caveat": caveat}) == launch


def test_points_the_profiles_do_not_describe_are_left_out_with_why():
    profiles = calibrate._profiles()
    base = {"use": True, "profile": "dgx-a100", "gpus_per_node": 8, "nodes": 2, "network": "8 x 200 Gb/s HDR IB"}
    assert calibrate.why_not(base, profiles) is None
    assert "network" in calibrate.why_not(dict(base, network="4 x 100 Gb/s EFA"), profiles)
    assert "no shipped profile" in calibrate.why_not(dict(base, profile=None), profiles)
    assert "unusable" in calibrate.why_not(dict(base, use=False), profiles)
    assert "mesh" in calibrate.why_not(dict(base, profile="ndv2", gpus_per_node=4), profiles)
    assert calibrate.why_not(dict(base, gpus_per_node=4), profiles) is None     # 4 GPUs of a switch node


def test_bands_and_margins():
    assert calibrate.band(16 << 20)[0] == (0.85, 1.15)
    assert calibrate.band((16 << 20) - 1)[0] == (0.67, 1.5)
    assert calibrate.band(8)[0] == (0.5, 2.0)
    assert [b[0] for b in calibration.BANDS] == sorted((b[0] for b in calibration.BANDS), reverse=True)
    for low, name, error, points in calibration.BANDS:
        assert 0 <= error < 1 and points >= 0
        assert calibration.margin(max(low, 1)) == (error, name)


def test_every_explanation_names_published_points_and_says_both_things():
    from fnmatch import fnmatchcase
    ids = [p["id"] for p in POINTS]
    notes = calibrate.explanations()
    assert len({n["id"] for n in notes}) == len(notes)
    for note in notes:
        assert note["leaves_out"].strip() and note["why_not"].strip()
        for pattern in note["points"]:
            assert any(fnmatchcase(i, pattern) for i in ids), (note["id"], pattern)


def test_the_written_calibration_has_no_point_outside_its_band_unexplained():
    """bench/calibration.json as `make bench` last wrote it: every modelled point is within its band or carries
    an explanation of bench/explained.yaml."""
    import json
    data = json.loads((ROOT / "bench" / "calibration.json").read_text())["points"]
    notes = {n["id"] for n in calibrate.explanations()}
    modelled = [e for e in data if "ratio" in e]
    assert len(modelled) >= 40
    for e in modelled:
        assert e["within"] or e.get("explained") in notes, e["id"]
