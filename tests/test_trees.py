"""Tests of the trees method: switch splitting, spanning-tree packing, and the schedules built on them.

Fixtures are built here (bandwidths are test values shaped like the machines of
the shipped profiles, hardware/*.yaml, not measurements); the shipped profiles come from colls.inputs.hardware.
"""

from __future__ import annotations

from fractions import Fraction

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from colls.bound import allgather_bound, bound, reducescatter_bound
from colls.collectives import Collective
from colls.errors import CollsError
from colls.inputs.hardware import load_topology
from colls.lower import LowerOptions, lower
from colls.synth import packing, splitting, trees
from colls.runtimes import get_target
from colls.topology import Topology

GATHERS = ("allgather", "reducescatter", "allreduce")


# --------------------------------------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------------------------------------
def _gpu(g, rank, node, local, sms=108):
    g.add_node(rank, kind="gpu", node=node, local=local, model="test", sms=sms, label=f"GPU {rank}")


def _link(g, u, v, bw, cls="link", both=False):
    for a, b in ((u, v), (v, u)) if both else ((u, v),):
        g.add_edge(a, b, bw=Fraction(bw), latency=0.5, cls=cls, count=1)


def nvswitch_node(gpus: int = 8, bw=300) -> Topology:
    """One node: every GPU on one switch (a DGX A100 shape)."""
    g = nx.DiGraph()
    g.add_node("n0.nvswitch", kind="switch", node=0, label="switch")
    for r in range(gpus):
        _gpu(g, r, 0, r)
        _link(g, r, "n0.nvswitch", bw, "nvswitch", both=True)
    return Topology("switch node", g, 1, gpus)


def rail_cluster(nodes: int = 2, gpn: int = 8, nvs=300, nic=25, spine: bool = True) -> Topology:
    """Nodes of ``gpn`` GPUs on a switch each, NIC j of every node on rail switch j, rails on a spine
    (the layout colls.inputs.hardware builds for rails)."""
    g = nx.DiGraph()
    for n in range(nodes):
        sw = f"n{n}.nvswitch"
        g.add_node(sw, kind="switch", node=n, label=sw)
        for j in range(gpn):
            r = n * gpn + j
            _gpu(g, r, n, j)
            _link(g, r, sw, nvs, "nvswitch", both=True)
            tx, rx, rail = f"n{n}.nic{j}.tx", f"n{n}.nic{j}.rx", f"rail{j}"
            g.add_node(tx, kind="nic", node=n, label=tx)
            g.add_node(rx, kind="nic", node=n, label=rx)
            g.add_node(rail, kind="switch", node=None, label=rail)
            _link(g, r, tx, nic, "ib")
            _link(g, tx, rail, nic, "ib")
            _link(g, rail, rx, nic, "ib")
            _link(g, rx, r, nic, "ib")
    if spine:
        g.add_node("spine", kind="switch", node=None, label="spine")
        for j in range(gpn):
            _link(g, f"rail{j}", "spine", Fraction(nic) * nodes, "ib", both=True)
    return Topology(f"rails {nodes}x{gpn}", g, nodes, gpn)


@st.composite
def small_topologies(draw):
    """3..8 GPUs and 0..2 switches in one node, integer bandwidths 1..10, strongly connected. GPU links
    are one-way with their own bandwidth; a switch link has one bandwidth both ways (the splitting
    theorem's balanced switch). A ring through the GPUs, direct or via switches, keeps it connected."""
    n = draw(st.integers(3, 8))
    nsw = draw(st.integers(0, 2))
    bw = st.integers(1, 10)
    g = nx.DiGraph()
    for r in range(n):
        _gpu(g, r, 0, r, sms=80)
    switches = [f"n0.sw{i}" for i in range(nsw)]
    for s in switches:
        g.add_node(s, kind="switch", node=0, label=s)
        members = draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=n, unique=True))
        for r in members:
            _link(g, r, s, draw(bw), both=True)
    if nsw == 2 and draw(st.booleans()):
        _link(g, switches[0], switches[1], draw(bw), both=True)
    order = draw(st.permutations(range(n)))
    for a, b in zip(order, order[1:] + order[:1]):
        _link(g, a, b, draw(bw))
    extra = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1), bw), max_size=2 * n))
    for a, b, c in extra:
        if a != b:
            old = g.edges[a, b]["bw"] if g.has_edge(a, b) else 0
            _link(g, a, b, old + c)
    return Topology(f"random {n}+{nsw}", g, 1, n)


def _coll(topo, kind, **kw):
    return Collective(kind, topo.ngpus, **kw)


# --------------------------------------------------------------------------------------------------------
# Properties on random topologies
# --------------------------------------------------------------------------------------------------------
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_topologies())
def test_split_keeps_the_exact_bound(topo):
    x = allgather_bound(topo).x
    sg = splitting.split(topo, optimum=x)
    assert sg.rate == x
    assert all(isinstance(u, int) and isinstance(v, int) for u, v in sg.arcs)
    assert all(topo.route(u, v) is not None for u, v in sg.arcs)
    exact = splitting.split(topo, optimum=x, fast=False)
    assert exact.rate == x
    rs = splitting.split(topo.reversed(), optimum=reducescatter_bound(topo).x)
    assert rs.rate == reducescatter_bound(topo).x


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_topologies())
def test_unconstrained_packing_reaches_the_bound(topo):
    b = allgather_bound(topo)
    coll = _coll(topo, "allgather")
    k, x, reached = trees.free_k(topo, coll)
    assert reached and x == b.x  # exact Fractions: to the last digit
    p = trees.plan(topo)
    packed, var, _ = p.trees(k)  # built and verified by check_packing inside
    packing.check_packing(var.split.arcs, topo.ngpus, k, x / k, packed)
    assert sum(t.mult for t in packed) == topo.ngpus * k
    report = trees.unconstrained_report(topo, "allgather")
    assert report["k"] == k and report["ratio"] == pytest.approx(1.0)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_topologies())
def test_allgather_schedule_is_correct_and_optimal_where_routes_match(topo):
    coll = _coll(topo, "allgather")
    k, _, _ = trees.free_k(topo, coll)
    s = trees.synthesize(topo, coll, trees_per_gpu=k)
    s.check()
    assert all(op.route == topo.route(op.src, op.dst) for op in s.ops if not op.local)
    algbw, _ = s.model_algbw(topo)
    var = trees.plan(topo).trees(k)[1]
    if var.split.routes_match:  # always without switches
        assert algbw == allgather_bound(topo).algbw
    if not any(topo.kind(v) != "gpu" for v in topo.graph.nodes):
        assert var.split.routes_match


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_topologies(), st.sampled_from(["reducescatter", "allreduce", "broadcast", "reduce"]))
def test_other_schedules_check(topo, kind):
    s = trees.synthesize(topo, _coll(topo, kind))
    s.check()
    assert s.model_algbw(topo)[0] > 0


# --------------------------------------------------------------------------------------------------------
# Splitting
# --------------------------------------------------------------------------------------------------------
def test_split_of_a_switch_node_is_the_complete_graph():
    topo = nvswitch_node()
    sg = splitting.split(topo, optimum=allgather_bound(topo).x)
    assert sg.method == "fast" and sg.routes_match
    assert set(sg.arcs) == {(a, b) for a in range(8) for b in range(8) if a != b}
    assert set(sg.arcs.values()) == {Fraction(300, 7)}


def test_split_of_a_rail_cluster_drops_the_spine_and_never_hairpins():
    topo = rail_cluster(2)
    x = allgather_bound(topo).x
    assert x == Fraction(65, 3)  # theory.md: 16 x 325 / 15 = 346.7 GB/s
    sg = splitting.split(topo, optimum=x)
    assert sg.rate == x and sg.dropped == ["spine"] and sg.routes_match
    for (u, v), paths in sg.paths.items():
        for path in paths:
            if topo.node_of(u) == topo.node_of(v):
                assert all(topo.node_of(w) == topo.node_of(u) for w in path)  # no NIC hairpin
    cross = {e: c for e, c in sg.arcs.items() if topo.node_of(e[0]) != topo.node_of(e[1])}
    assert cross == {(r, (r + 8) % 16): Fraction(25) for r in range(16)}  # one fat arc per rail


def test_split_exact_greedy_agrees_on_the_rail_cluster():
    topo = rail_cluster(2, gpn=4, nvs=100, nic=25)
    x = allgather_bound(topo).x
    assert splitting.split(topo, optimum=x, fast=False).rate == x


def test_split_shared_nic_target_is_the_balanced_rate():
    topo = load_topology("dgx2", 2)
    x = allgather_bound(topo).x
    sg = splitting.split(topo, optimum=x)
    # a NIC serves two GPUs: each gets half of it, 150 + 6.25 GB/s into every GPU over 31 shares
    assert sg.target == sg.rate == Fraction(625, 124) < x
    assert sg.notes and "NIC" in sg.notes[0]


def test_rate_and_feasible_on_a_small_graph():
    arcs = {(0, 1): Fraction(2), (1, 2): Fraction(2), (2, 0): Fraction(2)}
    assert splitting.rate(arcs, [0, 1, 2]) == 1  # ring of 3: x = c / (N - 1)
    assert splitting.feasible(arcs, [0, 1, 2], Fraction(1))
    assert not splitting.feasible(arcs, [0, 1, 2], Fraction(11, 10))
    assert splitting.rate(arcs, [0, 1, 2], root=0) == 2


# --------------------------------------------------------------------------------------------------------
# Packing
# --------------------------------------------------------------------------------------------------------
def test_best_rate_walks_down_the_breakpoints():
    # complete graph on 4 GPUs with capacity 3: x* = 3 * 3 / 3 = 3 per GPU; k = 1 -> each arc once
    arcs = {(a, b): Fraction(3) for a in range(4) for b in range(4) if a != b}
    assert packing.best_rate(arcs, 4, 1, Fraction(3)) == 3
    # a thin arc forces a breakpoint c/j
    arcs[(0, 1)] = Fraction(2)
    x = splitting.rate(arcs, [0, 1, 2, 3])
    y = packing.best_rate(arcs, 4, 2, x)
    assert y <= x / 2 and any(c / j == y for c in arcs.values() for j in range(1, 20))
    trs = packing.pack(arcs, 4, 2, y)
    packing.check_packing(arcs, 4, 2, y, trs)


def test_check_packing_rejects_overloads_and_non_spanning_trees():
    arcs = {(0, 1): Fraction(1), (1, 0): Fraction(1)}
    good = [packing.Tree(0, {1: 0}), packing.Tree(1, {0: 1})]
    packing.check_packing(arcs, 2, 1, Fraction(1), good)
    with pytest.raises(CollsError, match="carries"):
        packing.check_packing(arcs, 2, 2, Fraction(1),
                              [packing.Tree(0, {1: 0}, 2), packing.Tree(1, {0: 1}, 2)])
    with pytest.raises(CollsError, match="span"):
        packing.check_packing(arcs, 2, 1, Fraction(1), [packing.Tree(0, {}), good[1]])


def test_symmetry_group_of_a_rail_cluster():
    topo = rail_cluster(2)
    sg = splitting.split(topo, optimum=allgather_bound(topo).x)
    group = packing.find_group(sg.arcs, 16, 2, 8)
    assert len(group) == 16 and packing.orbit_reps(group, 16) == [0]
    for g in group:  # every element is an automorphism and fixes no GPU (but the identity)
        assert all(sg.arcs.get((g[u], g[v])) == c for (u, v), c in sg.arcs.items())
        assert g == list(range(16)) or all(g[r] != r for r in range(16))


def test_packing_without_symmetry_matches():
    topo = rail_cluster(2)
    sg = splitting.split(topo, optimum=allgather_bound(topo).x)
    y = packing.best_rate(sg.arcs, 16, 1, sg.rate)
    assert 16 * y == Fraction(2400, 7)  # k = 1: 98.9% of 346.7 (the in-node arcs hold 2 trees each)
    plain = packing.pack(sg.arcs, 16, 1, y)
    packing.check_packing(sg.arcs, 16, 1, y, plain)


# --------------------------------------------------------------------------------------------------------
# Schedules on the fixtures
# --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [nvswitch_node, rail_cluster], ids=["nvswitch", "rails"])
@pytest.mark.parametrize("kind", GATHERS + ("broadcast", "reduce"))
def test_fixture_schedules(make, kind):
    topo = make()
    s = trees.synthesize(topo, _coll(topo, kind))
    s.check()
    algbw, _ = s.model_algbw(topo)
    assert algbw >= Fraction(97, 100) * bound(topo, kind).algbw
    assert s.lanes == list(range(len(s.lanes))) and len(s.lanes) <= 32
    info = s.info
    for key in ("x_star", "k", "achieved_rate", "trees", "splitting", "lanes", "model_algbw_gbps"):
        assert key in info
    assert all(op.route == (() if op.local else topo.route(op.src, op.dst)) for op in s.ops)


def test_reducescatter_never_writes_its_input_and_uses_in_flight_sums():
    topo = rail_cluster(2)
    s = trees.synthesize(topo, _coll(topo, "reducescatter"))
    assert not any(op.dst_buf == "i" for op in s.ops)
    assert any(op.dst_buf == "t" for op in s.ops)


def test_info_reports_the_cap():
    topo = rail_cluster(2)
    s = trees.synthesize(topo, _coll(topo, "allgather"))
    assert s.info["k"] == 1 and s.info["x_star"] == Fraction(65, 3)
    assert s.info["achieved_rate"] == Fraction(150, 7) and "k capped at 8" in s.info["k_capped"]
    assert s.info["splitting"] == "fast" and s.info["trees"] == 16


def test_chunk_factor_multiplies():
    topo = nvswitch_node(4)
    s = trees.synthesize(topo, _coll(topo, "allgather", chunks=3))
    assert s.collective.chunks == 3
    s.check()
    s = trees.synthesize(topo, _coll(topo, "allreduce", chunks=5))
    assert s.collective.chunks % 4 == 0 and s.collective.chunks >= 5
    s.check()


def test_deterministic():
    topo = rail_cluster(2)
    a = trees.synthesize(topo, _coll(topo, "allreduce"))
    trees.clear_cache()
    b = trees.synthesize(topo, _coll(topo, "allreduce"))
    assert a.sorted_ops() == b.sorted_ops()


def test_errors():
    topo = nvswitch_node(4)
    with pytest.raises(CollsError, match="alltoall"):
        trees.synthesize(topo, _coll(topo, "alltoall"))
    with pytest.raises(CollsError):
        trees.synthesize(topo, Collective("allgather", 3))
    with pytest.raises(CollsError):
        trees.synthesize(topo, _coll(topo, "allgather"), trees_per_gpu=0)
    assert trees.unconstrained_report(topo, "alltoall")["k"] is None
    with pytest.raises(CollsError):
        trees.unconstrained_report(topo, "gather")


def test_k_candidates_best_first():
    topo = load_topology("mi250", 2)
    ks = trees.k_candidates(topo, _coll(topo, "allgather"))
    assert ks[0] == trees.synthesize(topo, _coll(topo, "allgather")).info["k"]
    assert ks == sorted(ks, reverse=True) and ks[-1] == 1
    rates = [trees.plan(topo).rate(k) for k in ks]
    assert rates == sorted(rates, reverse=True) and len(set(rates)) == len(rates)


def test_unconstrained_report():
    topo = rail_cluster(2)
    r = trees.unconstrained_report(topo, "allgather")
    assert r["k"] == 13 and r["trees"] == 208 and r["reached"] and r["constructed"]
    assert r["algbw_gbps"] == pytest.approx(346.6667, abs=1e-3) and r["ratio"] == pytest.approx(1.0)
    assert "k = 13" in r["text"] and "100.0%" in r["text"]


# --------------------------------------------------------------------------------------------------------
# Shipped profiles
# --------------------------------------------------------------------------------------------------------
PROFILES = ("dgx-a100", "dgx-h100", "dgx2", "mi250", "ndv2")


def _reachable(info: dict, n: int) -> Fraction:
    """The algbw switch splitting keeps (N x the split target; allreduce combines both halves)."""
    parts = [info] if "reducescatter" not in info else [info["reducescatter"], info["allgather"]]
    return n / sum((1 / p["split_target"] for p in parts), Fraction(0))


@pytest.mark.parametrize("nodes", [1, 2])
@pytest.mark.parametrize("name", PROFILES)
def test_shipped_profiles(name, nodes):
    topo = load_topology(name, nodes)
    for kind in GATHERS:
        s = trees.synthesize(topo, _coll(topo, kind))
        s.check()
        algbw, _ = s.model_algbw(topo)
        b = bound(topo, kind).algbw
        target = min(b, _reachable(s.info, topo.ngpus))
        assert algbw >= Fraction(97, 100) * target, (name, nodes, kind, float(algbw / b))
        if target < b:  # only where a NIC serves two GPUs: no splitting reaches the cut bound
            assert name == "dgx2" and nodes == 2 and algbw >= Fraction(95, 100) * b


@pytest.mark.parametrize("name", ["dgx-a100", "dgx2", "mi250"])
def test_two_node_k1_schedules_lower_within_the_step_limit(name):
    topo = load_topology(name, 2)
    for kind in GATHERS:
        s = trees.synthesize(topo, _coll(topo, kind), trees_per_gpu=1)
        program = lower(s, get_target("exe"), LowerOptions(sms=topo.min_sms()))
        assert program.max_steps() <= 64 and program.max_tbs() <= topo.min_sms()


@pytest.mark.parametrize("name,nodes,kind", [
    ("rails", 2, "allgather"), ("rails", 2, "reducescatter"), ("rails", 2, "allreduce"),
    ("mi250", 2, "allgather"), ("mi250", 2, "allreduce"), ("dgx2", 2, "reducescatter")])
def test_generated_programs_verify(name, nodes, kind):
    """Lowered, emitted and proven (no deadlock, no race, right result, in and out of place): with
    several trees per lane (MI250, k = 7) the trees of a lane run one after another."""
    from colls import msccl, verify
    topo = rail_cluster(nodes) if name == "rails" else load_topology(name, nodes)
    s = trees.synthesize(topo, _coll(topo, kind))
    target = get_target("exe")
    text = msccl.emit(lower(s, target, LowerOptions(sms=topo.min_sms())))
    parsed, findings = msccl.parse(text, source="<generated>")
    report = verify.verify(parsed, target, sms=topo.min_sms(), findings=findings)
    assert report.ok, [str(f) for f in report.findings if f.severity == "error"][:1]


@pytest.mark.parametrize("nodes,kind", [(1, "allreduce"), (2, "allreduce"), (2, "reducescatter"), (2, "allgather")])
def test_a_trees_file_is_the_same_seen_from_every_gpu(nodes, kind):
    """The trees are grown under node rotation and local shift; the file keeps that symmetry when children,
    trees and lanes are ordered by offset (not rank number) and the lowering breaks its ties the same way.
    Then every GPU runs the same threadblocks (peers seen from it, steps) and the simulator's quotient
    holds one threadblock per GPU's threadblock. Before, 2 x dgx-a100's allreduce file had 912 threadblocks
    in 720 classes: which child a forwarded chunk went to in the same instruction followed rank numbers."""
    from colls import pipeline
    from colls.simulate import prepare
    from colls.topology import rank_offset
    topo = load_topology("dgx-a100", nodes)
    compiled = pipeline.compile_schedule(topo, Collective(kind, topo.ngpus), "trees", in_memory=True, prove=False)
    shape = topo.node_major()

    def seen_from(gpu):
        return sorted(((rank_offset(shape, tb.recv, gpu.id) if tb.recv >= 0 else None,
                        rank_offset(shape, tb.send, gpu.id) if tb.send >= 0 else None,
                        tuple((st.type, st.cnt, st.depid >= 0, st.hasdep) for st in tb.steps))
                       for tb in gpu.tbs), key=repr)
    first, *rest = sorted(compiled.program.gpus, key=lambda g: g.id)
    assert all(seen_from(g) == seen_from(first) for g in rest)
    machine = prepare(compiled.program, topo, kind)
    assert len(machine.quotient().tbs) * topo.ngpus <= len(machine.tbs)



@pytest.mark.parametrize("kind", ["allgather", "reducescatter", "allreduce"])
def test_a_trees_schedule_rotates_by_the_nodes_its_lanes_repeat_after(kind):
    """Rotating every op by a node gives a trees schedule back (steps, lanes, scratch slots and all) where its
    lanes repeat from node to node, so it is lowered and proved on one node's ranks for all
    (colls.lower.lower_by_symmetry). Before, a lane's trees ran one after another in the order of their roots,
    which a rotation does not keep, and each rank's scratch slots went to its trees in that order: no trees
    schedule had a rotation, and 8 x MI250 was lowered whole, twice, for a plan (3.4 s to its refusal, 1.6 s
    now)."""
    from colls import pipeline
    topo = load_topology("mi250", 2)
    schedule = trees.synthesize(topo, Collective(kind, topo.ngpus), lanes=8)
    assert schedule.rotation()[0] == 16
    compiled = pipeline.compile_schedule(topo, Collective(kind, topo.ngpus), "trees", options={"lanes": 8})
    assert compiled.report.ok
    assert compiled.report.facts["symmetry"]["ranks_run"] == 16
def test_an_allreduce_runs_its_way_up_and_down_on_different_threadblocks():
    """A threadblock runs all its steps for one slice before the next: one that sends a tree's partial sum up
    and then receives the total back waits a round trip per slice, and the slices never overlap. With both
    halves of a tree on one lane, the trees allreduce on 2 x dgx-h100 simulates at 30 % of the runtime optimum
    at 1 GB; the allgather halves on lanes of their own overlap the slices (95 %). (2 x dgx2: 83 % against
    92 %, since the trees of roots at one place of their nodes run their steps together on a lane; 54 % when
    they ran one after another.)"""
    from colls import bound as bounds
    from colls import pipeline
    from colls.simulate import simulate
    topo = load_topology("dgx-h100", 2)
    coll = Collective("allreduce", topo.ngpus)
    split = pipeline.compile_schedule(topo, coll, "trees")                   # proved
    assert split.report.ok
    fused = pipeline.compile_schedule(topo, coll, "trees", options={"split_phases": False}, in_memory=True,
                                      prove=False)
    size = 1 << 30
    best = bounds.runtime_optimum(topo, "allreduce", "exe").time_us(size)
    fast, _ = simulate(split.program, topo, "allreduce", size)
    slow, _ = simulate(fused.program, topo, "allreduce", size)
    assert best / fast.time_us > 0.8 and best / slow.time_us < 0.6


def test_the_chunks_of_one_tree_share_its_lane_so_a_reduction_chain_pipelines():
    """A vertex reduces its children one per step, each on a threadblock of its own that waits for the one
    before, and the runtime finishes a step's whole chunk before the threadblock waiting on it starts. With a
    tree's chunks dealt to lanes of their own every chunk waited out the chain (1 x dgx-a100 reduce-scatter,
    8 chunks a tree: 84 GB/s busbw at 16 MB with 4 copies' worth of threadblocks, and 8 chunks with 4 copies
    did not load: 112 threadblocks); on one lane the chain's threadblocks work on successive chunks at once:
    146 us at 16 MB against 239 at one chunk a tree (each pays two slices' fixed costs a message)."""
    from colls import pipeline
    from colls.simulate import simulate
    topo = load_topology("dgx-a100", 1)
    made = {c: pipeline.compile_schedule(topo, Collective("reducescatter", 8, chunks=c), "trees", instances=4,
                                         in_memory=True, prove=False) for c in (1, 8)}
    lanes = {(op.src, op.lane) for op in made[8].schedule.ops if op.dst == 0 and op.src != 0}
    assert len(lanes) == 7 * 4              # GPU 0's 8 chunks come from each child on one lane a copy
    assert made[8].program.max_tbs() == made[1].program.max_tbs()
    assert made[8].program.max_steps() == 8
    size = 16 << 20
    t = {c: simulate(m.program, topo, "reducescatter", size)[0].time_us for c, m in made.items()}
    assert t[8] < t[1] / 1.5


def test_paired_leaves_halve_a_vertexs_additions_and_keep_every_links_load():
    """A vertex adds its children's partial sums one after another: at a switch node's root, 7 of them. With
    the leaves paired (each second one, by offset, sends to the one before it through the same switch) the
    roots add at most 4 local sums and the pairs add side by side; the links carry what they carried, and the
    file is proved. A mesh has no two leaves behind one switch, and a reduce's pairs would load one GPU's port
    more than the trees as packed: neither pairs."""
    from colls import pipeline
    topo = load_topology("dgx-a100", 2)
    kind = Collective("reducescatter", topo.ngpus)
    as_packed = trees.synthesize(topo, kind)
    paired = trees.synthesize(topo, kind, pair_leaves=True)
    assert as_packed.info["leaves_paired"] == 0 and paired.info["leaves_paired"] > 0

    def most_local_sums(schedule):     # partial sums one GPU receives from its own node for one chunk
        per: dict = {}
        for op in schedule.ops:
            if op.src // 8 == op.dst // 8 and op.src != op.dst:
                key = (op.dst, op.dst_buf, op.dst_index)
                per[key] = per.get(key, 0) + 1
        return max(per.values())
    assert most_local_sums(as_packed) == 7 and most_local_sums(paired) == 4

    def link_chunks(schedule):
        load: dict = {}
        for op in schedule.ops:
            for link in zip(op.route, op.route[1:]):
                load[link] = load.get(link, 0) + op.count
        return sorted(load.values())
    assert link_chunks(paired) == link_chunks(as_packed)
    made = pipeline.compile_schedule(topo, kind, "trees", options={"pair_leaves": True})
    assert made.report.ok and made.schedule.info["leaves_paired"] == paired.info["leaves_paired"]
    mesh = load_topology("mi250", 2)
    assert trees.synthesize(mesh, Collective("reducescatter", mesh.ngpus), pair_leaves=True).info["leaves_paired"] == 0
    assert trees.synthesize(topo, Collective("reduce", topo.ngpus, root=0), pair_leaves=True).info["leaves_paired"] == 0


@pytest.mark.parametrize("kind", ["allgather", "reducescatter", "allreduce"])
def test_trees_with_more_peers_than_threadblocks_are_refused_before_their_transfers(kind):
    """The peers a GPU sends to or receives from in its trees (a threadblock each whatever the layout) bound the
    lowered program's threadblocks from below, and trees over ``max_tbs`` of them are refused before their
    transfers are made."""
    from colls.errors import LimitError
    from colls.pipeline import compile_schedule
    topo = load_topology("dgx-a100", nodes=2)
    coll = Collective(kind, topo.ngpus)
    most, gpu, word = trees.least_peers(coll, trees._plans_for(topo, coll), 1)
    program = compile_schedule(topo, coll, "trees", options={"trees_per_gpu": 1}, in_memory=True,
                               prove=False).program
    assert 1 < most <= min(len(g.tbs) for g in program.gpus)
    with pytest.raises(LimitError, match=f"at 1 tree per GPU, GPU {gpu} {word} {most} peers, a threadblock each, "
                                         f"more than the {most - 1} threadblocks"):
        trees.synthesize(topo, coll, trees_per_gpu=1, max_tbs=most - 1)
    trees.synthesize(topo, coll, trees_per_gpu=1, max_tbs=most)
