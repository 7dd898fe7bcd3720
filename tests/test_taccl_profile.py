"""Tests for colls.inputs.taccl: TACCL's topology profile JSON read unchanged, its shapes, units and mistakes.

tests/data/taccl/ holds TACCL's own example files, copied unchanged from microsoft/taccl
(taccl/examples/topo and taccl/examples/sketch).
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from colls.errors import CollsError
from colls.inputs.hardware import format_summary, load_topology
from colls.inputs.taccl import NDV2_DOUBLE, load_taccl_profile
from colls.topology import NIC, SWITCH

DATA = Path(__file__).parent / "data" / "taccl"
NDV2_1MB = DATA / "topo-ndv2-1MB.json"
DGX2_1KB = DATA / "topo-dgx2-1KB.json"
MB, KB = 1 << 20, 1 << 10


def _write(tmp_path: Path, data, name: str = "topo.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def _base(**changes) -> dict:
    data = json.loads(NDV2_1MB.read_text())
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


# --- TACCL's own profiles -------------------------------------------------------------------------------
def test_ndv2_1mb_one_node():
    t = load_taccl_profile(NDV2_1MB, None, 1)
    assert t.meta["shape"] == "NDv2" and t.meta["profiled_at"] == "1MB" and t.meta["chunk_bytes"] == MB
    assert t.ngpus == 8 and t.nodes == 1
    assert {t.graph.nodes[r]["model"] for r in t.gpus} == {"V100-SXM2"} and t.min_sms() == 80
    # beta 23 us for a 1 MB chunk on the double pairs, 46 on the single ones; alpha 0.3 us per transfer
    assert t.bw(0, 1) == Fraction(MB, 23 * 1000) and t.graph.edges[0, 1]["count"] == 2
    assert t.bw(0, 2) == Fraction(MB, 46 * 1000) and t.graph.edges[0, 2]["count"] == 1
    assert not t.graph.has_edge(0, 5) and t.route(0, 5) is None
    assert t.latency(0, 1) == pytest.approx(0.3)
    assert not any(t.kind(v) in (NIC, SWITCH) for v in t.graph)
    assert "profiled at 1MB" in format_summary(t)


def test_ndv2_matches_the_shipped_mesh():
    """TACCL's NDv2 classes sit on the links of hardware/ndv2.yaml: double pairs = 2 NVLinks."""
    t, shipped = load_taccl_profile(NDV2_1MB), load_topology("ndv2")
    assert set(t.graph.edges) == set(shipped.graph.edges)
    for u, v in t.graph.edges:
        assert t.graph.edges[u, v]["count"] == shipped.graph.edges[u, v]["count"]
    assert all(t.graph.edges[a, b]["cls"] == "class0" for a, b in NDV2_DOUBLE)


def test_ndv2_two_nodes_share_one_nic():
    t = load_taccl_profile(NDV2_1MB, "NDv2", 2)
    nics = sorted(v for v in t.graph if t.kind(v) == NIC)
    assert nics == ["n0.nic0.rx", "n0.nic0.tx", "n1.nic0.rx", "n1.nic0.tx"]
    assert all(t.graph.has_edge(r, "n0.nic0.tx") for r in range(8))
    route = t.route(3, 12)
    assert route == (3, "n0.nic0.tx", "net", "n1.nic0.rx", 12)
    assert t.route_bandwidth(route) == Fraction(MB, 105 * 1000)
    assert t.route_latency(route) == pytest.approx(2.6)


def test_dgx2_1kb_units():
    """The 1 KB file counts in units of 0.01 us (alpha 30 = 0.3 us; remote alpha 260 = 2.6 us)."""
    t = load_taccl_profile(DGX2_1KB, None, 2)
    assert t.meta["shape"] == "DGX2" and t.meta["time_unit_us"] == 0.01 and t.meta["profiled_at"] == "1KB"
    assert t.ngpus == 32 and {t.graph.nodes[r]["model"] for r in t.gpus} == {"V100-SXM3"}
    assert t.bw(0, "n0.nvswitch") == Fraction(KB * 100, 1000)  # 1 KB in 1 x 0.01 us = 102.4 GB/s
    assert t.route_latency(t.route(0, 5)) == pytest.approx(0.3)
    assert t.route_bandwidth(t.route(0, 20)) == Fraction(KB * 100 * 100, 1025 * 1000)
    assert t.route_latency(t.route(0, 20)) == pytest.approx(2.6)
    for j in range(8):  # NIC j serves GPUs 2j and 2j+1
        assert sorted(u for u in t.graph.predecessors(f"n1.nic{j}.tx")) == [16 + 2 * j, 17 + 2 * j]


def test_shape_given_in_any_case_and_chunk_and_unit_options(tmp_path):
    assert load_taccl_profile(NDV2_1MB, "ndv2").meta["shape"] == "NDv2"
    p = _write(tmp_path, _base(name="mine"))
    with pytest.raises(CollsError, match="--taccl-chunk"):
        load_taccl_profile(p)
    assert load_taccl_profile(p, chunk="1MB").bw(0, 1) == Fraction(MB, 23000)
    # 2 MB is none of TACCL's shipped sizes: the time unit must be given
    p2 = _write(tmp_path, _base(name="NDv2_2MB"), "t2.json")
    with pytest.raises(CollsError, match="--taccl-time-unit"):
        load_taccl_profile(p2)
    assert load_taccl_profile(p2, time_unit=0.5).bw(0, 1) == Fraction(2 * MB, 23 * 500)


def test_hub_and_spoke(tmp_path):
    p = _write(tmp_path, _base(name="hub_1MB", gpus_per_node=4, node_betas_list=[10], node_invbws_list=[10],
                               nics_per_node=2))
    t = load_taccl_profile(p, "HubAndSpoke", 2, sms=100)
    assert sorted((u, v) for u, v in t.graph.edges if isinstance(u, int) and isinstance(v, int)) == \
        [(a, b) for n in (0, 4) for a in range(n, n + 4) for b in range(n, n + 4) if a != b]
    assert t.min_sms() == 100


def test_custom_shape_works_and_reads_links_dst_src(tmp_path):
    links = [[0, 1, 0], [2, 0, 1], [1, 1, 0]]   # links[dst][src]: 0 -> 1 has 2 links, 1 -> 0 one
    betas = [[0, 20, 0], [10, 0, 20], [20, 20, 0]]
    p = _write(tmp_path, {"name": "tri_1MB", "gpus_per_node": 3, "alpha": 0.5, "links": links, "betas": betas,
                          "invbws": betas, "nics_per_node": 1, "remote_alpha": 2, "remote_beta": 100,
                          "remote_invbw": 102})
    t = load_taccl_profile(p, None, 2)
    assert t.meta["shape"] == "custom"
    assert t.graph.edges[0, 1]["count"] == 2 and t.bw(0, 1) == 2 * Fraction(MB, 10 * 1000)
    assert t.bw(1, 0) == Fraction(MB, 20 * 1000)
    assert t.graph.has_edge(0, 2) and not t.graph.has_edge(2, 0)  # links[2][0] = 1, links[0][2] = 0


# --- mistakes -------------------------------------------------------------------------------------------
BAD = [
    ("missing alpha", _base(alpha=None), None, "alpha", "missing key"),
    ("negative beta", _base(node_betas_list=[-23, 46]), None, "node_betas_list[0]", "beta must be > 0"),
    ("zero remote beta", _base(remote_beta=0), None, "remote_beta", "beta must be > 0"),
    ("unknown shape", _base(), "DGX1", "--taccl-shape", "unknown TACCL node shape"),
    ("ambiguous shape", _base(gpus_per_node=4, node_betas_list=[1], node_invbws_list=[1]), None, None,
     "--taccl-shape"),
    ("NDv2 with 3 classes", _base(node_betas_list=[1, 2, 3], node_invbws_list=[1, 2, 3]), "NDv2",
     "node_betas_list", "2 link classes"),
    ("NDv2 with 4 GPUs", _base(gpus_per_node=4), "NDv2", "gpus_per_node", "8-GPU"),
    ("unknown key", _base(gpus=8), None, "gpus", "unknown key"),
    ("links in a known shape", _base(links=[[0]]), "NDv2", "links", "not a key of shape NDv2"),
    ("custom wrong matrix size", {"name": "c_1MB", "gpus_per_node": 3, "alpha": 1, "links": [[0, 1], [1, 0]],
                                  "betas": [[0, 1], [1, 0]], "invbws": [[0, 1], [1, 0]]}, "custom", "links",
     "must be 3 x 3"),
    ("custom short row", {"name": "c_1MB", "gpus_per_node": 2, "alpha": 1, "links": [[0, 1], [1]],
                          "betas": [[0, 1], [1, 0]], "invbws": [[0, 1], [1, 0]]}, "custom", "links[1]",
     "must have 2 entries"),
    ("custom self link", {"name": "c_1MB", "gpus_per_node": 2, "alpha": 1, "links": [[1, 1], [1, 0]],
                          "betas": [[1, 1], [1, 0]], "invbws": [[0, 1], [1, 0]]}, "custom", "links[0][0]",
     "itself"),
    ("custom disconnected", {"name": "c_1MB", "gpus_per_node": 2, "alpha": 1, "links": [[0, 0], [1, 0]],
                             "betas": [[0, 0], [1, 0]], "invbws": [[0, 0], [1, 0]]}, "custom", "links",
     "no path"),
    ("custom missing betas", {"name": "c_1MB", "gpus_per_node": 2, "alpha": 1, "links": [[0, 1], [1, 0]],
                              "invbws": [[0, 1], [1, 0]]}, "custom", "betas", "missing key"),
    ("text beta", _base(node_betas_list=["fast", 46]), None, "node_betas_list[0]", "expected a finite number"),
    ("NICs not dividing GPUs", _base(nics_per_node=3), None, "nics_per_node", "evenly"),
    ("not an object", [1, 2], None, None, "JSON object"),
    ("syntax", '{"name": "x_1MB",', None, None, "JSON syntax error"),
]


@pytest.mark.parametrize("data, shape, key, message", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_profiles(tmp_path, data, shape, key, message):
    path = _write(tmp_path, data)
    with pytest.raises(CollsError) as info:
        load_taccl_profile(path, shape, 1)
    text = str(info.value)
    assert "\n" not in text and message in text
    assert info.value.key == key
    if not (key or "").startswith("--"):
        assert text.startswith(str(path))


def test_remote_costs_needed_for_two_nodes(tmp_path):
    path = _write(tmp_path, _base(remote_beta=None))
    load_taccl_profile(path, None, 1)
    with pytest.raises(CollsError, match="remote_beta: missing key"):
        load_taccl_profile(path, None, 2)


def test_bad_nodes_and_options():
    for kwargs, key in (({"nodes": 0}, "--nodes"), ({"chunk": "1MB:2MB"}, "--taccl-chunk"),
                        ({"time_unit": "slow"}, "--taccl-time-unit"), ({"time_unit": -1}, "--taccl-time-unit"),
                        ({"sms": 0}, "sms")):
        with pytest.raises(CollsError) as info:
            load_taccl_profile(NDV2_1MB, **kwargs)
        assert info.value.key == key


def test_nics_needed_for_shapes_without_a_default(tmp_path):
    p = _write(tmp_path, _base(name="hub_1MB", gpus_per_node=4, node_betas_list=[10], node_invbws_list=[10],
                               nics_per_node=None))
    assert load_taccl_profile(p, "HubAndSpoke", 1).ngpus == 4
    with pytest.raises(CollsError, match="nics_per_node: missing key"):
        load_taccl_profile(p, "HubAndSpoke", 2)
    # the known shapes default to TACCL's values: NDv2 one NIC per node
    nd = _write(tmp_path, _base(nics_per_node=None), "nd.json")
    assert sum(1 for v in load_taccl_profile(nd, None, 2).graph if str(v).endswith(".tx")) == 2
