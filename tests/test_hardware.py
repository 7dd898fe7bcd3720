"""Tests for colls.inputs.hardware: shipped profiles, cluster construction, the graph form, and error messages."""

from __future__ import annotations

import json
import textwrap
from fractions import Fraction
from pathlib import Path

import pytest

from colls.errors import CollsError
from colls.inputs.hardware import format_summary, list_profiles, load_topology, summarize
from colls.topology import GPU, NIC, SWITCH

# The published link multiplicity matrices, typed once for all tests (tests/topos.py cites them).
from topos import MI250, NDV2  # noqa: E402


def _nonzero(m):
    return sum(1 for row in m for x in row if x)


# Per profile, from the vendor documents each profile cites: GPUs per node, model, SMs, per-GPU in-node GB/s, in-node switch vertices,
# NICs per node, (GPU, NIC) attachments per node, direct GPU->GPU edges per node, network layout.
SHAPES = {
    "dgx2": dict(G=16, model="V100-SXM3", sms=80, local_bw=150, switches=1, nics=8, attach=16, direct=0,
                 layout="rails", nic_bw=Fraction(25, 2)),
    "ndv2": dict(G=8, model="V100-SXM2", sms=80, local_bw=150, switches=0, nics=1, attach=8,
                 direct=_nonzero(NDV2), layout="single", nic_bw=Fraction(25, 2)),
    "dgx-a100": dict(G=8, model="A100-SXM4", sms=108, local_bw=300, switches=1, nics=8, attach=8, direct=0,
                     layout="rails", nic_bw=25),
    "dgx-h100": dict(G=8, model="H100-SXM5", sms=132, local_bw=450, switches=1, nics=8, attach=8, direct=0,
                     layout="rails", nic_bw=50),
    "mi250": dict(G=16, model="MI250-GCD", sms=104, local_bw=350, switches=0, nics=16, attach=16,
                  direct=_nonzero(MI250), layout="single", nic_bw=16),
    "mi300x": dict(G=8, model="MI300X", sms=304, local_bw=448, switches=0, nics=8, attach=8, direct=56,
                   layout="rails", nic_bw=50),
}


@pytest.fixture(scope="module")
def topos():
    cache = {}

    def get(name, nodes):
        if (name, nodes) not in cache:
            cache[name, nodes] = load_topology(name, nodes)
        return cache[name, nodes]
    return get


def _write(tmp_path: Path, text: str, name: str = "box.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


# --- shipped profiles ------------------------------------------------------------------------------------
def test_list_profiles():
    profiles = list_profiles()
    assert [p["name"] for p in profiles] == sorted(SHAPES)
    for p in profiles:
        assert p["gpus"] == SHAPES[p["name"]]["G"]
        assert p["description"] and Path(p["path"]).is_file() and Path(p["path"]).stem == p["name"]


@pytest.mark.parametrize("nodes", [1, 2, 4])
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_profile_loads_with_right_counts(topos, name, nodes):
    s = SHAPES[name]
    topo = topos(name, nodes)
    topo.validate()
    G = s["G"]
    assert topo.name == (name if nodes == 1 else f"{name} x{nodes}")
    assert (topo.nodes, topo.gpus_per_node, topo.ngpus) == (nodes, G, G * nodes)
    assert topo.gpus == list(range(G * nodes))
    assert topo.meta["network"] == s["layout"] and topo.meta["profile"].endswith(f"{name}.yaml")
    assert topo.meta["description"]
    for r in topo.gpus:
        data = topo.graph.nodes[r]
        assert (data["node"], data["local"], data["model"], topo.sms(r)) == (r // G, r % G, s["model"], s["sms"])

    kinds = [topo.kind(v) for v in topo.graph]
    multi = nodes > 1
    rails = s["nics"] if s["layout"] == "rails" else 1
    spine = 1 if s["layout"] == "rails" and s["nics"] > 1 else 0
    assert kinds.count(GPU) == G * nodes
    assert kinds.count(NIC) == (2 * s["nics"] * nodes if multi else 0)
    assert kinds.count(SWITCH) == s["switches"] * nodes + ((rails + spine) if multi else 0)
    in_node = 2 * G * s["switches"] + s["direct"]
    network = (2 * s["attach"] * nodes + 2 * s["nics"] * nodes + 2 * s["nics"] * spine) if multi else 0
    assert topo.graph.number_of_edges() == in_node * nodes + network

    for r in topo.gpus:  # in-node bandwidth per GPU, plus the GPU's NIC hop when there are nodes to reach
        expect = s["local_bw"] + (s["nic_bw"] if multi else 0)
        egress = sum(d["bw"] for _, _, d in topo.graph.out_edges(r, data=True))
        ingress = sum(d["bw"] for _, _, d in topo.graph.in_edges(r, data=True))
        assert egress == ingress == expect


def test_profile_name_matches_file(topos):
    for name in SHAPES:
        assert topos(name, 1).name == name


def test_dgx_a100_x2_worked_example(topos):
    topo = topos("dgx-a100", 2)
    for r in topo.gpus:
        ingress = sum((d["bw"] for _, _, d in topo.graph.in_edges(r, data=True)), Fraction(0))
        assert isinstance(ingress, Fraction) and ingress == Fraction(325)
    assert topo.bw("n0.nvswitch", 3) == 300 and topo.graph.edges["n0.nvswitch", 3]["count"] == 12
    assert topo.bw("n1.nic5.rx", 13) == 25 and topo.graph.edges["n1.nic5.rx", 13]["cls"] == "hdr-ib"
    # 4 nodes: a node's NIC ingress is 8 x 25 = 200 GB/s (the binding cut of ForestColl's bound, arXiv 2402.06787)
    topo4 = topos("dgx-a100", 4)
    into_node = sum(d["bw"] for u, v, d in topo4.graph.edges(data=True)
                    if topo4.node_of(v) == 2 and topo4.node_of(u) != 2)
    assert into_node == 200
    # rails are joined by a non-blocking spine: each leaf's uplink carries all its NICs
    assert topo4.bw("rail3", "spine") == topo4.bw("spine", "rail3") == 4 * 25


def test_ndv2_links_match_matrix(topos):
    for nodes in (1, 2):
        topo = topos("ndv2", nodes)
        for n in range(nodes):
            for i in range(8):
                for j in range(8):
                    u, v = 8 * n + i, 8 * n + j
                    if NDV2[i][j]:
                        e = topo.graph.edges[u, v]
                        assert (e["count"], e["bw"], e["cls"]) == (NDV2[i][j], 25 * NDV2[i][j], "nvlink2")
                    else:
                        assert not topo.graph.has_edge(u, v)  # no PCIe host path is modelled
    topo = topos("ndv2", 1)
    assert topo.route(0, 1) == (0, 1)
    assert topo.route(0, 5) is None and topo.route(0, 7) is None  # no NVLink: no direct route


def test_mi250_matrix(topos):
    assert all(MI250[i][j] == MI250[j][i] for i in range(16) for j in range(16))
    topo = topos("mi250", 1)
    for i in range(16):
        for j in range(16):
            count = topo.graph.edges[i, j]["count"] if topo.graph.has_edge(i, j) else 0
            assert count == MI250[i][j] == (topo.graph.edges[j, i]["count"] if MI250[j][i] else 0)
            if count:
                assert topo.bw(i, j) == 50 * count


def test_dgx2_nic_pairs(topos):
    topo = topos("dgx2", 2)
    for j in range(8):
        served = sorted(u for u in topo.graph.predecessors(f"n1.nic{j}.tx"))
        assert served == [16 + 2 * j, 16 + 2 * j + 1]
        assert topo.bw(f"n1.nic{j}.tx", f"rail{j}") == Fraction(25, 2)


@pytest.mark.parametrize("name,nodes", [("dgx-a100", 2), ("dgx2", 2), ("dgx-h100", 4), ("mi250", 2),
                                        ("ndv2", 2)])
def test_routes(topos, name, nodes):
    topo = topos(name, nodes)
    G = topo.gpus_per_node
    # same node: never leaves the node
    for a, b in ((0, 1), (G + 2, G + 3)):
        route = topo.route(a, b)
        assert route is not None and route[0] == a and route[-1] == b
        assert all(topo.node_of(v) == topo.node_of(a) for v in route)
    # two nodes: GPU -> its NIC's tx -> leaf -> the peer NIC's rx -> GPU
    for local in (0, G - 1):
        a, b = local, (nodes - 1) * G + local
        route = topo.route(a, b)
        nic = local // 2 if name == "dgx2" else 0 if name == "ndv2" else local
        leaf = "net" if SHAPES[name]["layout"] == "single" else f"rail{nic}"
        assert route == (a, f"n0.nic{nic}.tx", leaf, f"n{nodes - 1}.nic{nic}.rx", b)
        assert topo.route_bandwidth(route) == SHAPES[name]["nic_bw"]
        assert topo.route_latency(route) == pytest.approx(2.6)


@pytest.mark.parametrize("name,nodes", [("dgx-a100", 2), ("mi250", 4), ("ndv2", 4), ("dgx-h100", 3)])
def test_a_route_is_the_same_whatever_the_routes_asked_before_it(name, nodes, monkeypatch):
    """Route searches are resumed where the last route from the same GPU stopped them, and dropped past a budget
    of labels (colls.topology.Topology._search): every route is the same asked in rank order, in a shuffled
    order, and with every search dropped after each route (each started again); its hops are switches and NICs
    only."""
    import random
    from colls import topology as topology_module
    first = load_topology(name, nodes=nodes)
    pairs = [(a, b) for a in range(first.ngpus) for b in range(first.ngpus) if a != b]
    ordered = {p: first.route(*p) for p in pairs}
    random.Random(7).shuffle(pairs)
    again = load_topology(name, nodes=nodes)
    assert {p: again.route(*p) for p in pairs} == ordered
    monkeypatch.setattr(topology_module, "SEARCH_LABELS_KEPT", 0)
    fresh = load_topology(name, nodes=nodes)
    assert {p: fresh.route(*p) for p in pairs[:400]} == {p: ordered[p] for p in pairs[:400]}
    assert len(fresh._index["searches"]) == 1
    for (a, b), route in list(ordered.items())[::37]:
        assert route is None or all(first.graph.nodes[v]["kind"] != GPU for v in route[1:-1])


def test_route_across_rails_uses_spine(topos):
    topo = topos("dgx-a100", 2)
    assert topo.route(0, 9) == (0, "n0.nic0.tx", "rail0", "spine", "rail1", "n1.nic1.rx", 9)
    assert topo.route(0, 1) == (0, "n0.nvswitch", 1)
    assert topo.route_latency(topo.route(0, 1)) == pytest.approx(0.3)


def test_labels(topos):
    topo = topos("dgx-a100", 2)
    assert topo.label(12) == "GPU 12 (node 1, local 4)"
    assert topo.label("n1.nic5.rx") == "node 1 NIC 5 (in)"
    assert topo.label("n1.nic5.tx") == "node 1 NIC 5 (out)"
    assert topo.label("rail2") == "rail 2 switch"
    assert topo.node_of("rail2") is None and topo.node_of("spine") is None and topo.node_of("n1.nic5.rx") == 1


def test_summary(topos):
    topo = topos("dgx2", 2)
    s = summarize(topo)
    json.dumps(s)
    assert (s["gpus"], s["nodes"], s["gpus_per_node"], s["network"]) == (32, 2, 16, "rails")
    classes = {c["class"]: c for c in s["link_classes"]}
    assert classes["edr-ib"]["bandwidth"] == 12.5 and isinstance(classes["nvlink2"]["bandwidth"], int)
    assert classes["nvlink2"]["links"] == 2 * 2 * 16 * 6
    assert all(g["ingress"] == 162.5 for g in s["per_gpu"])
    text = format_summary(topo)
    for word in ("V100-SXM3", "80 SMs", "nvlink2", "edr-ib", "12.5", "rails", "ingress 162.5"):
        assert word in text
    text1 = format_summary(topos("dgx-a100", 1))
    assert "ingress 300" in text1 and "none" in text1


# --- rank_order --------------------------------------------------------------------------------------------
NDV2_PATH = Path(__file__).resolve().parent.parent / "hardware" / "ndv2.yaml"


def test_rank_order_permutes(tmp_path):
    order = [3, 1, 0, 2, 7, 6, 4, 5]
    text = NDV2_PATH.read_text().replace("# rank_order: [0, 1, 2, 3, 4, 5, 6, 7]", f"rank_order: {order}")
    path = _write(tmp_path, text, "ndv2-perm.yaml")
    topo = load_topology(str(path), nodes=2)
    for n in range(2):
        for r in range(8):
            for s in range(8):
                m = NDV2[order[r]][order[s]]
                has = topo.graph.has_edge(8 * n + r, 8 * n + s)
                assert has == bool(m)
                if m:
                    assert topo.graph.edges[8 * n + r, 8 * n + s]["count"] == m
    assert topo.label(8) == "GPU 8 (node 1, local 0, profile GPU 3)"
    assert topo.meta["rank_order"] == order


def test_rank_order_moves_nics(tmp_path):
    path = _write(tmp_path, """\
        name: two
        gpu: {model: X, sms: 4, count: 2}
        link_classes: {nv: {bandwidth: 10, latency: 0.5}, ib: {bandwidth: 5, latency: 1}}
        switches: [{name: sw, class: nv, links: 1, gpus: all}]
        nics: [{class: ib, gpus: [0]}, {class: ib, gpus: [1]}]
        rank_order: [1, 0]
    """)
    topo = load_topology(str(path), nodes=2)
    assert list(topo.graph.successors("n0.nic0.tx")) == ["rail0"]
    assert list(topo.graph.predecessors("n0.nic0.tx")) == [1]   # profile GPU 0 is rank 1
    assert list(topo.graph.predecessors("n1.nic1.tx")) == [2]   # profile GPU 1 of node 1 is rank 2


def test_pcie_class_for_gpu_hop(tmp_path):
    path = _write(tmp_path, """\
        name: pc
        gpu: {model: X, sms: 4, count: 2}
        link_classes:
          nv: {bandwidth: 10, latency: 0.5}
          ib: {bandwidth: 5, latency: 1}
          pcie: {bandwidth: 16, latency: 0.25}
        direct: {class: nv, matrix: [[0, 1], [1, 0]]}
        nics: [{class: ib, gpus: all, pcie: pcie}]
        network: {layout: single}
    """)
    topo = load_topology(str(path), nodes=3)
    assert topo.graph.edges[0, "n0.nic0.tx"]["bw"] == 16 and topo.graph.edges["n0.nic0.tx", "net"]["bw"] == 5
    assert topo.route(0, 5) == (0, "n0.nic0.tx", "net", "n2.nic0.rx", 5)
    assert topo.route_latency(topo.route(0, 5)) == pytest.approx(2.5)


# --- graph form ----------------------------------------------------------------------------------------
GRAPH = """\
    name: my-box
    description: two nodes of two GPUs
    link_classes: {nv: {bandwidth: 50, latency: 0.5}}
    graph:
      gpus:
        - {id: 1, model: X, sms: 80, node: 0}
        - {id: 0, model: X, sms: 80}
        - {id: 2, model: X, sms: 80, node: 1}
        - {id: 3, model: X, sms: 80, node: 1}
      switches: [{id: sw0, node: 0}, {id: sw1, node: 1}, {id: core, node: null, label: core switch}]
      nics: [{id: nic0, node: 0}, {id: nic1, node: 1}]
      links:
        - {from: 0, to: sw0, class: nv}
        - {from: 1, to: sw0, class: nv, count: 2}
        - {from: 1, to: sw0, class: nv}
        - {from: 2, to: sw1, bandwidth: 50, latency: 0.5, class: nv}
        - {from: 3, to: sw1, class: nv}
        - {from: 0, to: nic0, bandwidth: 12.5, latency: 1, class: ib}
        - {from: 2, to: nic1, bandwidth: 12.5, latency: 1, class: ib}
        - {from: nic0, to: core, bandwidth: 12.5, latency: 1, class: ib}
        - {from: nic1, to: core, bandwidth: 12.5, latency: 1, class: ib}
        - {from: 0, to: 1, bandwidth: 5, latency: 2, both: false}
"""


def test_graph_form(tmp_path):
    topo = load_topology(str(_write(tmp_path, GRAPH)))
    topo.validate()
    assert (topo.name, topo.nodes, topo.gpus_per_node, topo.ngpus) == ("my-box", 2, 2, 4)
    assert topo.meta["network"] is None and topo.meta["description"] == "two nodes of two GPUs"
    assert [topo.graph.nodes[r]["local"] for r in range(4)] == [0, 1, 0, 1]
    e = topo.graph.edges[1, "sw0"]
    assert (e["count"], e["bw"], e["latency"], e["cls"]) == (3, 150, 0.5, "nv")
    assert topo.graph.has_edge("sw0", 1) and topo.graph.edges["sw0", 1]["bw"] == 150
    assert topo.graph.has_edge(0, 1) and not topo.graph.has_edge(1, 0)
    assert topo.graph.edges[0, 1]["cls"] == "link"
    assert topo.bw("core", "nic1") == Fraction(25, 2)
    assert topo.label("core") == "core switch" and topo.node_of("core") is None
    assert topo.route(0, 3) is None  # GPU 3 has no NIC: only a relay through GPU 2 reaches it
    assert topo.route(0, 2) == (0, "nic0", "core", "nic1", 2)
    json.dumps(summarize(topo))
    assert "my-box" in format_summary(topo)


def test_graph_form_rejects_nodes(tmp_path):
    path = _write(tmp_path, GRAPH)
    with pytest.raises(CollsError) as err:
        load_topology(str(path), nodes=2)
    assert err.value.source == str(path) and err.value.key == "graph" and "--nodes" in str(err.value)


# --- errors --------------------------------------------------------------------------------------------
GOOD = """\
name: box
description: test box
gpu: {model: X, sms: 8, count: 4}
link_classes:
  nv: {bandwidth: 25, latency: 0.5}
  ib: {bandwidth: 12.5, latency: 1}
switches:
  - {name: sw, class: nv, links: 2, gpus: all}
direct:
  class: nv
  matrix: [[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0]]
nics:
  - {class: ib, gpus: [0, 1]}
  - {class: ib, gpus: [2, 3]}
network: {layout: rails}
"""


def test_good_base_loads(tmp_path):
    topo = load_topology(str(_write(tmp_path, GOOD)), nodes=3)
    assert topo.ngpus == 12 and topo.graph.has_edge(0, 1) and topo.graph.has_edge("rail1", "spine")


# (replace this text in GOOD, with this, expected key, words the message must contain)
ERRORS = [
    ("  nv: {bandwidth: 25,", "  nv: {bandwidht: 25,", "link_classes.nv.bandwidht", "unknown key"),
    ("description: test box", "descripton: test box", "descripton", "unknown key"),
    ("gpu: {model: X, sms: 8, count: 4}", "gpu: {model: X, count: 4}", "gpu.sms", "missing key"),
    ("name: box\n", "", "name", "missing key"),
    ("sms: 8", "sms: eight", "gpu.sms", "whole number"),
    ("sms: 8", "sms: 0", "gpu.sms", ">= 1"),
    ("link_classes:\n  nv: {bandwidth: 25, latency: 0.5}\n  ib: {bandwidth: 12.5, latency: 1}\n",
     "link_classes: [nv, ib]\n", "link_classes", "mapping"),
    ("{bandwidth: 25,", "{bandwidth: fast,", "link_classes.nv.bandwidth", "number"),
    ("{bandwidth: 25,", "{bandwidth: 0,", "link_classes.nv.bandwidth", "> 0"),
    ("{bandwidth: 12.5,", "{bandwidth: -12.5,", "link_classes.ib.bandwidth", "> 0"),
    ("latency: 0.5}", "latency: -0.1}", "link_classes.nv.latency", ">= 0"),
    ("latency: 0.5}", "latency: .inf}", "link_classes.nv.latency", "finite"),
    ("class: nv, links: 2", "class: nvl, links: 2", "switches[0].class", "unknown link class"),
    ("links: 2, gpus: all", "links: 2, gpus: [0, 1, 1]", "switches[0].gpus[2]", "listed twice"),
    ("links: 2, gpus: all", "links: 2, gpus: [0, 4]", "switches[0].gpus[1]", "out of range"),
    ("links: 2, gpus: all", "links: 2, gpus: some", "switches[0].gpus", "list"),
    ("{class: ib, gpus: [0, 1]}", "{class: ib, gpus: [0, 0]}", "nics[0].gpus[1]", "listed twice"),
    ("{class: ib, gpus: [2, 3]}", "{class: ib, gpus: [2, 3], pcie: pci}", "nics[1].pcie", "unknown link class"),
    ("{class: ib, gpus: [2, 3]}", "{class: ib, gpus: [2, 3], speed: 1}", "nics[1].speed", "unknown key"),
    ("[0, 0, 1, 0]]", "[0, 0, 1]]", "direct.matrix[3]", "not square"),
    ("[[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0]]", "[[0, 1, 0], [1, 0, 0], [0, 0, 0]]",
     "direct.matrix", "expected 4 x 4"),
    ("[0, 0, 1, 0]]", "[0, 0, -1, 0]]", "direct.matrix[3][2]", ">= 0"),
    ("[0, 0, 1, 0]]", "[0, 0, 1, 2]]", "direct.matrix[3][3]", "itself"),
    ("layout: rails", "layout: torus", "network.layout", "rails, single"),
    ("network: {layout: rails}", "network: {layout: rails}\nrank_order: [0, 1, 1, 2]", "rank_order",
     "permutation"),
    ("network: {layout: rails}", "network: {layout: rails}\nrank_order: [0, 1, 2]", "rank_order",
     "permutation"),
    ("network: {layout: rails}", "network: {layout: rails}\nrank_order: [0, 1, 2, x]", "rank_order[3]",
     "whole number"),
    ("name: box", "name: [box]", "name", "name"),
]


@pytest.mark.parametrize("old,new,key,words", ERRORS, ids=[e[2] + ":" + e[3] for e in ERRORS])
def test_profile_errors(tmp_path, old, new, key, words):
    assert old in GOOD
    path = _write(tmp_path, GOOD.replace(old, new, 1), "bad.yaml")
    with pytest.raises(CollsError) as err:
        load_topology(str(path), nodes=2)
    e = err.value
    assert (e.source, e.key) == (str(path), key)
    message = str(e)
    assert message.startswith(f"{path}: {key}: ") and words in message and "\n" not in message


def test_unreachable_gpu(tmp_path):
    bad = GOOD.replace("links: 2, gpus: all", "links: 2, gpus: [0, 1, 2]").replace(
        "[0, 0, 1, 0]]", "[0, 0, 0, 0]]")
    path = _write(tmp_path, bad)
    with pytest.raises(CollsError, match=r"direct: GPU 3 has no path to GPU 0") as err:
        load_topology(str(path))
    assert err.value.source == str(path)


def test_nodes_need_nics(tmp_path):
    path = _write(tmp_path, GOOD.split("nics:")[0])
    assert load_topology(str(path)).ngpus == 4
    with pytest.raises(CollsError) as err:
        load_topology(str(path), nodes=2)
    assert (err.value.source, err.value.key) == (str(path), "nics")


@pytest.mark.parametrize("nodes", [0, -3])
def test_nodes_must_be_positive(nodes):
    with pytest.raises(CollsError, match="--nodes must be >= 1") as err:
        load_topology("dgx-a100", nodes)
    assert err.value.source.endswith("dgx-a100.yaml")


def test_unknown_profile_lists_known():
    with pytest.raises(CollsError) as err:
        load_topology("dgx-z9")
    message = str(err.value)
    assert "dgx-z9" in message
    for name in SHAPES:
        assert name in message


def test_missing_file(tmp_path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(CollsError, match="no such file") as err:
        load_topology(str(path))
    assert err.value.source == str(path)


def test_yaml_syntax_error_has_line(tmp_path):
    path = _write(tmp_path, "name: box\ngpu: {model: X, sms: 8\nlink_classes: {}\n")
    with pytest.raises(CollsError, match=r"YAML syntax error at line \d+") as err:
        load_topology(str(path))
    assert err.value.source == str(path) and "\n" not in str(err.value)


def test_duplicate_yaml_key(tmp_path):
    path = _write(tmp_path, GOOD.replace("name: box\n", "name: box\nname: other\n"))
    with pytest.raises(CollsError, match=r"line 2.*'name' given twice"):
        load_topology(str(path))


@pytest.mark.parametrize("text", ["", "- a\n- b\n"])
def test_file_not_a_mapping(tmp_path, text):
    path = _write(tmp_path, text)
    with pytest.raises(CollsError) as err:
        load_topology(str(path))
    assert err.value.source == str(path)


def _graph_error(tmp_path, old, new):
    assert old in GRAPH
    path = _write(tmp_path, GRAPH.replace(old, new, 1), "g.yaml")
    with pytest.raises(CollsError) as err:
        load_topology(str(path))
    assert err.value.source == str(path)
    return err.value


GRAPH_ERRORS = [
    ("{id: 3, model: X, sms: 80, node: 1}", "{id: 2, model: X, sms: 80, node: 1}", "graph.gpus[3].id",
     "listed twice"),
    ("{id: 3, model: X, sms: 80, node: 1}", "{id: 4, model: X, sms: 80, node: 1}", "graph.gpus[3].id",
     "out of range"),
    ("{id: 3, model: X, sms: 80, node: 1}", "{id: 3, model: X, sms: 80, node: 3}", "graph.gpus",
     "without gaps"),
    ("{from: 3, to: sw1, class: nv}", "{from: 3, to: sw9, class: nv}", "graph.links[4].to", "unknown vertex"),
    ("{from: 3, to: sw1, class: nv}", "{from: 7, to: sw1, class: nv}", "graph.links[4].from",
     "unknown vertex"),
    ("{from: 3, to: sw1, class: nv}", "{from: 3, to: 3, class: nv}", "graph.links[4]", "itself"),
    ("{from: 3, to: sw1, class: nv}", "{from: 3, to: sw1, class: nvx}", "graph.links[4].bandwidth",
     "missing key"),
    ("{from: 3, to: sw1, class: nv}", "{from: 3, to: sw1, class: nv, bandwidth: 0}",
     "graph.links[4].bandwidth", "> 0"),
    ("{from: 3, to: sw1, class: nv}", "{from: 3, to: sw1, class: nv, latency: -1}",
     "graph.links[4].latency", ">= 0"),
    ("{from: 3, to: sw1, class: nv}", "{from: 3, to: sw1, class: nv, both: maybe}", "graph.links[4].both",
     "true or false"),
    ("{from: 3, to: sw1, class: nv}", "{from: 3, to: sw1, klass: nv}", "graph.links[4].klass", "unknown key"),
    ("{from: 1, to: sw0, class: nv}", "{from: 1, to: sw0, class: nv, latency: 3}", "graph.links[2]",
     "parallel links"),
    ("- {from: 3, to: sw1, class: nv}", "- {from: 3, to: sw1, class: nv, both: false}", "graph.links",
     "no path"),
    ("{id: sw1, node: 1}", "{id: sw0, node: 1}", "graph.switches[1].id", "listed twice"),
    ("{id: nic1, node: 1}", "{id: sw1, node: 1}", "graph.nics[1].id", "listed twice"),
    ("{id: nic1, node: 1}", "{id: nic1, node: 5}", "graph.nics[1].node", "no GPUs"),
    ("{id: 0, model: X, sms: 80}", "{id: 0, model: X}", "graph.gpus[1].sms", "missing key"),
    ("    graph:\n", "    graph:\n      routers: []\n", "graph.routers", "unknown key"),
]


@pytest.mark.parametrize("old,new,key,words", GRAPH_ERRORS, ids=[e[2] + ":" + e[3] for e in GRAPH_ERRORS])
def test_graph_errors(tmp_path, old, new, key, words):
    e = _graph_error(tmp_path, old, new)
    assert e.key == key and words in str(e) and f": {key}: " in str(e)
