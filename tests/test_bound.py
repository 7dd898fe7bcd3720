"""Tests of colls.bound: a worked 2 x DGX A100 example, exactness, brute force on small graphs."""

from __future__ import annotations

import re
from fractions import Fraction

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from colls.bound import (Bound, allgather_bound, allreduce_bound, alltoall_bound, bound,
                         broadcast_bound, cut_words, latency_bound_us, reduce_bound,
                         reducescatter_bound)
from colls.collectives import KINDS
from colls.errors import CollsError
from colls.topology import Topology


# --------------------------------------------------------------------------------------------------------
# Fixtures (until colls/hardware.py lands). Bandwidths and latencies are test values shaped like a DGX
# A100 as ForestColl (arXiv 2402.06787) models it (GPU<->NVSwitch 300 GB/s, one 25 GB/s NIC per GPU on rails), not
# measurements.
# --------------------------------------------------------------------------------------------------------
def _gpu(g: nx.DiGraph, rank: int, node: int | None, local: int) -> None:
    g.add_node(rank, kind="gpu", node=node, local=local, model="A100", sms=108, label=f"GPU {rank}")


def _link(g: nx.DiGraph, u, v, bw, cls: str, latency: float = 1.0, both: bool = True) -> None:
    g.add_edge(u, v, bw=Fraction(bw), latency=latency, cls=cls, count=1)
    if both:
        g.add_edge(v, u, bw=Fraction(bw), latency=latency, cls=cls, count=1)


def cluster(nodes: int, gpn: int = 8, nvs=300, nic=25, spine: bool = True) -> Topology:
    """``nodes`` nodes of ``gpn`` GPUs on one NVSwitch each, one NIC per GPU on rail ``j``; rails joined
    by a spine (leaf <-> spine bandwidth = the sum of the leaf's NICs)."""
    g = nx.DiGraph()
    for n in range(nodes):
        sw = f"n{n}.nvswitch"
        g.add_node(sw, kind="switch", node=n, label=f"NVSwitch of node {n}")
        for j in range(gpn):
            r = n * gpn + j
            _gpu(g, r, n, j)
            _link(g, r, sw, nvs, "nvswitch", 0.5)
            tx, rx, rail = f"n{n}.nic{j}.tx", f"n{n}.nic{j}.rx", f"rail{j}"
            g.add_node(tx, kind="nic", node=n)
            g.add_node(rx, kind="nic", node=n)
            g.add_node(rail, kind="switch", node=None)
            _link(g, r, tx, nic, "hdr-ib", 1.0, both=False)
            _link(g, tx, rail, nic, "hdr-ib", 1.0, both=False)
            _link(g, rail, rx, nic, "hdr-ib", 1.0, both=False)
            _link(g, rx, r, nic, "hdr-ib", 1.0, both=False)
    if spine and nodes > 1:
        g.add_node("spine", kind="switch", node=None)
        for j in range(gpn):
            _link(g, f"rail{j}", "spine", Fraction(nic) * nodes, "ib-spine", 1.0)
    return Topology(f"{nodes}x{gpn}", g, nodes=nodes, gpus_per_node=gpn)


def one_switch(ngpus: int, bw) -> Topology:
    g = nx.DiGraph()
    g.add_node("n0.nvswitch", kind="switch", node=0)
    for r in range(ngpus):
        _gpu(g, r, 0, r)
        _link(g, r, "n0.nvswitch", bw, "nvswitch", 0.5)
    return Topology("switch", g, nodes=1, gpus_per_node=ngpus)


def gpu_graph(n: int, edges: list[tuple], switches: int = 0) -> Topology:
    g = nx.DiGraph()
    for r in range(n):
        _gpu(g, r, 0, r)
    for s in range(switches):
        g.add_node(f"sw{s}", kind="switch", node=0)
    for u, v, bw in edges:
        _link(g, u, v, bw, "link", 1.0, both=False)
    return Topology("custom", g, nodes=1, gpus_per_node=n)


def gpus_of(topo: Topology, side) -> set:
    return {v for v in side if topo.kind(v) == "gpu"}


# --------------------------------------------------------------------------------------------------------
# A worked example: 2 x DGX A100, the cut bound by hand
# --------------------------------------------------------------------------------------------------------
def test_two_dgx_a100_binding_cut_is_one_gpu_ingress():
    topo = cluster(2)
    b = allgather_bound(topo)
    assert isinstance(b, Bound)
    assert b.algbw == Fraction(16 * 325, 15)
    assert round(float(b.algbw), 2) == 346.67
    assert b.x == Fraction(325, 15)
    assert b.exact
    recv = gpus_of(topo, b.complement)
    assert len(recv) == 1
    (t,) = recv
    assert b.cut_words == (f"the links entering GPU {t} "
                           "(nvswitch 300 GB/s + hdr-ib 25 GB/s = 325 GB/s)")
    assert b.busbw == pytest.approx(float(b.algbw) * 15 / 16)
    # The reported cut is a real cut with ratio x*.
    crossing = sum(d["bw"] for u, v, d in topo.graph.edges(data=True)
                   if u in b.cut and v in b.complement)
    assert crossing / len(gpus_of(topo, b.cut)) == b.x
    assert b.cut | b.complement == frozenset(topo.graph.nodes) and not b.cut & b.complement


def test_four_dgx_a100_binding_cut_is_one_node_nic_ingress():
    topo = cluster(4)
    b = allgather_bound(topo)
    assert b.algbw == Fraction(32 * 200, 24)
    assert round(float(b.algbw), 2) == 266.67
    m = re.fullmatch(r"the 8 NICs entering node (\d) \(hdr-ib 8 x 25 GB/s = 200 GB/s\)", b.cut_words)
    assert m, b.cut_words
    node = int(m.group(1))
    assert gpus_of(topo, b.complement) == set(range(8 * node, 8 * node + 8))


def test_sixteen_nodes_node_cut():
    topo = cluster(16)
    b = allgather_bound(topo)
    assert b.algbw == Fraction(128 * 200, 120)
    assert "NICs entering node" in b.cut_words
    rs = reducescatter_bound(topo)
    assert rs.algbw == b.algbw
    assert re.fullmatch(r"the 8 NICs leaving node \d+ \(hdr-ib 8 x 25 GB/s = 200 GB/s\)", rs.cut_words)


@pytest.mark.parametrize("bw", [1, 25, 300, Fraction(25, 2)])
def test_single_switch_node(bw):
    topo = one_switch(8, bw)
    b = allgather_bound(topo)
    assert b.algbw == 8 * Fraction(bw) / 7
    assert b.cut_words.startswith("the links entering GPU ")
    assert reducescatter_bound(topo).algbw == b.algbw
    ar = allreduce_bound(topo)
    assert ar.algbw == 4 * Fraction(bw) / 7  # 1 / (7/8b + 7/8b)
    assert [p.collective for p in ar.parts] == ["reducescatter", "allgather"]
    assert "not in-network reduction" in ar.method
    assert broadcast_bound(topo, 3).algbw == Fraction(bw)
    assert reduce_bound(topo, 5).algbw == Fraction(bw)


# --------------------------------------------------------------------------------------------------------
# Exactness, the Bound fields
# --------------------------------------------------------------------------------------------------------
def test_exact_fractions_with_half_gigabytes():
    topo = cluster(2, gpn=4, nvs=25, nic=Fraction(25, 2))
    b = allgather_bound(topo)
    # One GPU's ingress: 25 + 12.5 = 37.5 GB/s for the 7 other shares.
    assert b.x == Fraction(75, 14)
    assert b.algbw == Fraction(300, 7)
    assert isinstance(b.algbw, Fraction) and isinstance(b.x, Fraction)
    assert "hdr-ib 12.5 GB/s" in b.cut_words and "= 37.5 GB/s" in b.cut_words
    assert b.time_us(3_000_000) == pytest.approx(3_000_000 / (300 / 7 * 1000))
    assert b.min_time_us(1) == b.latency_us


def test_time_us_units():
    b = allgather_bound(one_switch(2, 1))  # algbw = 2 GB/s = 2000 bytes/us
    assert b.algbw == 2
    assert b.time_us(4000) == 2.0


def test_bound_dispatch_and_unknown_kind():
    topo = one_switch(4, 10)
    for kind in KINDS:
        b = bound(topo, kind, root=1)
        assert b.collective == kind
        assert b.algbw > 0 and b.latency_us > 0 and b.cut_words
    with pytest.raises(CollsError, match="unknown collective 'allmix'"):
        bound(topo, "allmix")
    with pytest.raises(CollsError, match="unknown collective"):
        latency_bound_us(topo, "allmix")


def test_alltoall_is_a_labelled_cut_bound():
    topo = cluster(2)
    b = alltoall_bound(topo)
    assert not b.exact and "cut bound" in b.method and "not the exact" in b.method
    # Node egress: 8 GPUs x 8 GPUs x size/16 over 200 GB/s -> algbw <= 16 x 200 / 64 = 50.
    assert b.algbw == 50
    assert "NICs" in b.cut_words


def test_broadcast_root_checked():
    with pytest.raises(CollsError, match="root 9"):
        broadcast_bound(one_switch(4, 1), 9)


# --------------------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------------------
def test_unreachable_gpu_is_named():
    topo = gpu_graph(3, [(0, 1, 5), (1, 0, 5), (0, 2, 5)])
    with pytest.raises(CollsError, match="GPU 2 cannot reach GPU 0"):
        allgather_bound(topo)
    with pytest.raises(CollsError, match="GPU 2 cannot reach GPU 0"):
        reduce_bound(topo, 0)
    assert broadcast_bound(topo, 0).algbw == 5  # the root reaches everyone: fine
    topo2 = gpu_graph(3, [(0, 1, 5), (1, 0, 5), (2, 0, 5)])
    with pytest.raises(CollsError, match="GPU 0 cannot reach GPU 2"):
        reducescatter_bound(topo2)


def test_one_gpu_is_refused():
    with pytest.raises(CollsError, match="at least 2"):
        allgather_bound(one_switch(1, 1))


def test_huge_denominators_are_refused():
    edges = [(0, 1, Fraction(1, 2 ** 40 + 1)), (1, 0, Fraction(1, 2 ** 40 - 1)),
             (1, 2, Fraction(1, 3 ** 20)), (2, 1, 1)]
    with pytest.raises(CollsError, match="64-bit"):
        allgather_bound(gpu_graph(3, edges))


# --------------------------------------------------------------------------------------------------------
# Latency
# --------------------------------------------------------------------------------------------------------
def test_latency_ring_and_switch():
    ring = gpu_graph(4, [(i, (i + 1) % 4, 1) for i in range(4)])
    assert latency_bound_us(ring, "allgather") == 3.0
    assert latency_bound_us(ring, "broadcast", root=0) == 3.0
    assert latency_bound_us(ring, "reduce", root=0) == 3.0
    assert latency_bound_us(one_switch(8, 1), "alltoall") == 1.0  # two 0.5 us hops
    topo = cluster(2)
    # Across nodes on different rails: NVSwitch to the GPU of the right rail (1 us), then
    # GPU -> nic.tx -> rail -> nic.rx -> GPU (4 us); through the spine would be 6 us.
    assert latency_bound_us(topo, "allreduce") == 5.0
    assert allreduce_bound(topo).latency_us == 5.0


# --------------------------------------------------------------------------------------------------------
# cut_words
# --------------------------------------------------------------------------------------------------------
def test_cut_words_groups_gpus_by_node():
    topo = cluster(2)
    everything = frozenset(topo.graph.nodes)
    recv = frozenset({4, 5, 6, 7})
    assert cut_words(topo, everything - recv).startswith("the links entering GPUs 4-7 of node 0 (")
    node1 = frozenset(v for v in topo.graph.nodes if topo.node_of(v) == 1)
    assert cut_words(topo, node1) == "the 8 NICs leaving node 1 (hdr-ib 8 x 25 GB/s = 200 GB/s)"
    assert cut_words(topo, frozenset({3})) == ("the links leaving GPU 3 "
                                               "(nvswitch 300 GB/s + hdr-ib 25 GB/s = 325 GB/s)")
    with pytest.raises(CollsError):
        cut_words(topo, everything)


# --------------------------------------------------------------------------------------------------------
# Brute force on small random graphs
# --------------------------------------------------------------------------------------------------------
@st.composite
def small_topologies(draw):
    n = draw(st.integers(3, 10))
    nsw = draw(st.integers(0, 2))
    nv = n + nsw
    order = draw(st.permutations(range(nv)))
    edges = {}
    for i in range(nv):  # a directed cycle through every vertex: strongly connected
        edges[(order[i], order[(i + 1) % nv])] = draw(st.integers(1, 20))
    extra = draw(st.lists(st.tuples(st.integers(0, nv - 1), st.integers(0, nv - 1),
                                    st.integers(1, 20)), max_size=3 * nv))
    for u, v, bw in extra:
        if u != v:
            edges[(u, v)] = bw
    den = draw(st.sampled_from([1, 1, 2, 3, 8]))  # bandwidths k/den GB/s: exact rationals
    name = (lambda i: i if i < n else f"sw{i - n}")
    topo = gpu_graph(n, [(name(u), name(v), Fraction(bw, den)) for (u, v), bw in edges.items()],
                     switches=nsw)
    return topo, n, nv, [(u, v, bw) for (u, v), bw in edges.items()], den


def _subset_tables(nv: int, n: int, edges):
    """For every vertex subset (bitmask over indices, GPUs first): B+(S) and |S ∩ GPUs|."""
    masks = np.arange(1 << nv, dtype=np.int64)
    bits = (masks[:, None] >> np.arange(nv)) & 1
    out = np.zeros(len(masks), dtype=np.int64)
    for u, v, bw in edges:
        out += bw * (bits[:, u] & (1 - bits[:, v]))
    gpus = bits[:, :n].sum(axis=1)
    return bits, out, gpus


def _brute_ratio(nv, n, edges):
    _, out, k = _subset_tables(nv, n, edges)
    ok = (k >= 1) & (k < n)
    return min(Fraction(int(b), int(c)) for b, c in zip(out[ok], k[ok]))


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_topologies())
def test_allgather_and_reducescatter_equal_brute_force(case):
    topo, n, nv, edges, den = case
    ag = allgather_bound(topo)
    assert ag.x == _brute_ratio(nv, n, edges) / den
    assert ag.algbw == n * ag.x
    # The reported cut is binding: its ratio is x*.
    crossing = sum(d["bw"] for u, v, d in topo.graph.edges(data=True)
                   if u in ag.cut and v in ag.complement)
    k = len(gpus_of(topo, ag.cut))
    assert 0 < k < n and crossing / k == ag.x
    rs = reducescatter_bound(topo)
    assert rs.x == _brute_ratio(nv, n, [(v, u, bw) for u, v, bw in edges]) / den
    k = len(gpus_of(topo, rs.complement))  # the reducing side receives
    crossing = sum(d["bw"] for u, v, d in topo.graph.edges(data=True)
                   if u in rs.cut and v in rs.complement)
    assert 0 < k < n and crossing / k == rs.x


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_topologies(), st.integers(0, 9))
def test_broadcast_reduce_and_alltoall_against_brute_force(case, root):
    topo, n, nv, edges, den = case
    root %= n
    bits, out, k = _subset_tables(nv, n, edges)
    with_root = (bits[:, root] == 1) & (k < n)
    assert broadcast_bound(topo, root).algbw == Fraction(int(out[with_root].min()), den)
    _, out_rev, _ = _subset_tables(nv, n, [(v, u, bw) for u, v, bw in edges])
    assert reduce_bound(topo, root).algbw == Fraction(int(out_rev[with_root].min()), den)
    # Alltoall: a min over some cuts, so never below the min over all cuts.
    ok = (k >= 1) & (k < n)
    best = min(Fraction(n * int(b), int(a) * (n - int(a)) * den) for b, a in zip(out[ok], k[ok]))
    a2a = alltoall_bound(topo)
    assert a2a.algbw >= best
    crossing = sum(d["bw"] for u, v, d in topo.graph.edges(data=True)
                   if u in a2a.cut and v in a2a.complement)
    a = len(gpus_of(topo, a2a.cut))
    assert a2a.algbw == Fraction(n * crossing, a * (n - a))


@pytest.mark.parametrize("profile,nodes,without", [("dgx-a100", 3, None), ("mi250", 2, None),
                                                   ("ndv2", 2, None), ("dgx-a100", 3, "nic:1:0")])
def test_latency_bound_from_one_node_is_the_all_pairs_one(profile, nodes, without):
    """The latency bound runs Dijkstra from the first node's GPUs only when turning the nodes round keeps
    every link's latency; it equals the all-pairs longest shortest path, and a machine with one node
    degraded (a NIC taken out) is computed from every GPU."""
    from colls.bound import _latency, latency_bound_us, node_representatives
    from colls.inputs.degrade import degrade
    from colls.inputs.hardware import load_topology
    topo = load_topology(profile, nodes)
    if without:
        topo = degrade(topo, without)
    g, worst = topo.graph, 0.0
    for a in topo.gpus:
        dist = nx.single_source_dijkstra_path_length(g, a, weight=_latency)
        worst = max(worst, max(dist[b] for b in topo.gpus if b != a))
    assert latency_bound_us(topo, "allgather") == worst
    sources = node_representatives(topo)
    assert len(sources) == (len(topo.gpus) if without else len(topo.gpus) // nodes)


@pytest.mark.parametrize("profile,nodes,without", [("ndv2", 3, None), ("dgx2", 2, None), ("dgx2", 2, "nic:1:0")])
def test_balanced_rate_from_one_node_is_the_all_sinks_one(profile, nodes, without):
    """The balanced graph's rate (a shared NIC's larger side scaled down) is tested on the first node's GPUs
    only when turning the nodes round maps the balanced graph onto itself; it equals the rate with every GPU
    as a sink, and a degraded machine tests every GPU."""
    from colls.inputs.degrade import degrade
    from colls.inputs.hardware import load_topology
    from colls.bound import _unbalanced_relays
    from colls.synth import splitting
    topo = load_topology(profile, nodes)
    if without:
        topo = degrade(topo, without)
    for directed in (topo, topo.reversed()):
        sp = splitting.Splitter(directed)
        assert _unbalanced_relays(directed)     # a lopsided relay is there, so the balanced rate was computed
        turn = directed.node_turn()
        assert (turn is None) == bool(without)
        assert splitting._turn_sinks(directed, sp.base.cap, turn) == (
            None if without else [r for r in directed.gpus if directed.node_of(r) == 0])
        assert sp.target == splitting.rate(sp.base.cap, directed.gpus, upper=sp.optimum)
        assert sp.optimum == splitting.rate(splitting._Work(directed).cap, directed.gpus)


@pytest.mark.parametrize("profile, nodes", [("dgx2", 2), ("ndv2", 2), ("mi250", 2), ("dgx-a100", 3)])
def test_a_reduce_scatter_bound_from_the_machine_its_own_reversal_is_the_reversals(monkeypatch, profile, nodes):
    """The shipped machines are their own reversal once each NIC's .tx and .rx swap: the reduce-scatter bound is
    then computed on the machine (once with the allgather's) and its cut mapped back. It is the one computed
    on the reversed machine; a machine whose links back differ is not taken for its reversal."""
    from colls import bound as bounds
    from colls.inputs.hardware import load_topology
    fast = reducescatter_bound(load_topology(profile, nodes=nodes))
    topo = load_topology(profile, nodes=nodes)
    assert bounds._reversal_map(topo) is not None
    monkeypatch.setattr(bounds, "_reversal_map", lambda t: None)
    slow = reducescatter_bound(topo)
    assert (fast.algbw, fast.cut, fast.cut_words, fast.achievable, fast.method) == \
           (slow.algbw, slow.cut, slow.cut_words, slow.achievable, slow.method)
    monkeypatch.undo()
    g = topo.graph.copy()
    u, v = next((u, v) for u, v in g.edges if isinstance(v, str) and v.endswith(".tx"))
    g.edges[u, v]["bw"] = g.edges[u, v]["bw"] / 2          # one NIC's way out at half the speed of its way in
    assert bounds._reversal_map(Topology(topo.name, g, topo.nodes, topo.gpus_per_node, dict(topo.meta))) is None
