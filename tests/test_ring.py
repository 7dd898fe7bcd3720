"""Tests of colls.synth.ring: correctness of every collective, ring orders against brute force, rails,
step budgets and the bandwidth model on the fixtures of tests/topos.py."""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import topos
from colls.collectives import KINDS, Collective
from colls.errors import CollsError
from colls.synth import get_method, ring
from colls.synth.ring import Ring, all_cycles, best_tour, pack_rings

FIXTURES = {
    "switch4": lambda: topos.switch_node(4),
    "switch8": lambda: topos.switch_node(8),
    "mesh4": lambda: topos.mesh_node(topos.MESH4),
    "ndv2": topos.ndv2,
    "rails2x4": lambda: topos.rail_cluster(2, 4),
    "shared2x4": lambda: topos.shared_nic_cluster(2, 4),
    "ndv2x2": lambda: topos.ndv2_cluster(2),
}
_cache: dict = {}


def fixture(name: str):
    if name not in _cache:
        _cache[name] = FIXTURES[name]()
    return _cache[name]


def synth(topology, kind, chunks=1, root=0, **options):
    return ring.synthesize(topology, Collective(kind, topology.ngpus, chunks, root), **options)


def cycle_quality(topology, order):
    ws = [topology.route_bandwidth(topology.route(a, b)) for a, b in zip(order, order[1:] + order[:1])]
    return min(ws), sum(ws)


# --- every collective is correct, routed and keeps its kind ------------------------------------------
@pytest.mark.parametrize("name", list(FIXTURES))
@pytest.mark.parametrize("kind", KINDS)
def test_schedule_is_correct_and_physical(name, kind):
    topo = fixture(name)
    root = min(3, topo.ngpus - 1)
    s = synth(topo, kind, root=root)
    s.check()
    topos.assert_routes_physical(topo, s)
    assert (s.collective.kind, s.collective.nranks, s.collective.root) == (kind, topo.ngpus, root)
    assert s.method == "ring"
    info = s.info
    assert info["rings"] == len(info["ring_orders"]) >= 1
    for order in info["ring_orders"]:
        assert sorted(order) == topo.gpus
    if kind != "alltoall":
        assert s.lanes == list(range(info["rings"]))
        # each lane only talks along its own ring
        for op in s.ops:
            if not op.local:
                order = info["ring_orders"][op.lane]
                assert order[(order.index(op.src) + 1) % len(order)] == op.dst, op.describe()
        # the ring count was chosen on the same model, computed without building the ops
        rings = [Ring(tuple(order)) for order in info["ring_orders"]]
        assert ring.model_algbw(topo, s.collective, rings) == s.model_algbw(topo)[0]
    assert info["model_algbw_gbps"] == pytest.approx(float(s.model_algbw(topo)[0]))
    assert info["bottleneck_class"] in {d["cls"] for _, _, d in topo.links()}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("chunks", [1, 2, 5])
def test_chunk_factor_is_honoured_or_raised_to_what_the_rings_need(kind, chunks):
    topo = fixture("ndv2")
    s = synth(topo, kind, chunks)
    s.check()
    if kind == "alltoall":  # shifts (with relays) take any chunk factor
        assert s.collective.chunks == chunks
        return
    per_ring = 8 if kind in ("allreduce", "broadcast", "reduce") else 1
    need = s.info["rings"] * per_ring
    assert s.collective.chunks % need == 0
    assert chunks <= s.collective.chunks < chunks + need


def test_explicit_ring_count_and_its_limits():
    topo = fixture("ndv2")
    s = synth(topo, "allgather", rings=2)
    s.check()
    assert s.info["rings"] == 2 and s.lanes == [0, 1] and s.collective.chunks == 2
    for bad in (0, 1025, 1.5, "2"):
        with pytest.raises(CollsError, match="rings"):
            synth(topo, "allgather", rings=bad)


def test_rank_count_must_match_the_topology():
    with pytest.raises(CollsError, match="4 ranks but switch8 has 8 GPUs"):
        ring.synthesize(fixture("switch8"), Collective("allgather", 4))


def test_no_ring_names_a_missing_pair():
    # a star: GPU 0 linked to 1, 2, 3, which are not linked to each other
    matrix = [[0, 1, 1, 1], [1, 0, 0, 0], [1, 0, 0, 0], [1, 0, 0, 0]]
    with pytest.raises(CollsError, match=r"ring: no ring .*no link between GPU 1 and GPU 2"):
        synth(topos.mesh_node(matrix, name="star"), "allgather")


def test_deterministic():
    for name in ("ndv2", "rails2x4"):
        topo = FIXTURES[name]()
        a, b = synth(topo, "allreduce"), synth(FIXTURES[name](), "allreduce")
        assert a.sorted_ops() == b.sorted_ops() and a.info == b.info


# --- ring orders ----------------------------------------------------------------------------------------
def test_switch_ring_is_the_identity_and_one_ring():
    s = synth(fixture("switch8"), "allgather")
    assert s.info["ring_orders"] == [list(range(8))] and s.info["rings"] == 1


@pytest.mark.parametrize("name", ["mesh4", "ndv2"])
def test_first_ring_uses_the_fastest_links_brute_force(name):
    topo = fixture(name)
    gpus = topo.gpus
    best = max(cycle_quality(topo, [gpus[0], *perm]) for perm in itertools.permutations(gpus[1:])
               if all(topo.route(a, b) for a, b in zip([gpus[0], *perm], [*perm, gpus[0]])))
    order = synth(topo, "allgather", rings=1).info["ring_orders"][0]
    assert cycle_quality(topo, order) == best


def test_ndv2_first_ring_is_all_double_links():
    order = synth(fixture("ndv2"), "allgather", rings=1).info["ring_orders"][0]
    assert all(topos.NDV2[a][b] == 2 for a, b in zip(order, order[1:] + order[:1]))


def _brute_tour(verts, weight, start, end=None):
    best = None
    rest = [v for v in verts if v != start and v != end]
    for perm in itertools.permutations(rest):
        order = [start, *perm] + ([] if end is None or end == start else [end])
        hops = list(zip(order, order[1:])) + ([(order[-1], start)] if end is None else [])
        if all(h in weight for h in hops):
            ws = [weight[h] for h in hops]
            best = max(best, (min(ws), sum(ws))) if best else (min(ws), sum(ws))
    return best


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(3, 7).flatmap(lambda n: st.tuples(
    st.just(n),
    st.lists(st.sampled_from([0, 0, 1, 2, 3]), min_size=n * n, max_size=n * n),
    st.booleans())))
def test_best_tour_equals_brute_force(case):
    n, cells, closed = case
    weight = {(a, b): Fraction(cells[a * n + b] * 25) for a in range(n) for b in range(n)
              if a != b and cells[a * n + b]}
    verts = list(range(n))
    end = None if closed else n - 1
    found = best_tour(verts, weight, 0, end)
    want = _brute_tour(verts, weight, 0, end)
    if want is None:
        assert found is None
    else:
        assert found is not None and (found.bottleneck, found.total) == want
        assert sorted(found.order) == verts and found.order[0] == 0
        assert all(h in weight for h in zip(found.order, found.order[1:]))


def test_cycle_enumeration_and_packing_on_meshes():
    ndv2 = fixture("ndv2")
    hops = {(a, b) for a in range(8) for b in range(8) if topos.NDV2[a][b]}
    cycles = all_cycles(range(8), hops)
    assert len(cycles) == 60 and all(c[0] == 0 for c in cycles)
    assert all_cycles(range(8), {(a, b) for a in range(8) for b in range(8) if a != b}) is None
    rate, rings = pack_rings(ndv2, cycles, 6)
    assert rate == 25 and len(rings) == 6
    loads: dict = {}
    for order in rings:
        for hop in zip(order, order[1:] + order[:1]):
            loads[hop] = loads.get(hop, 0) + 1
    assert loads == {hop: topos.NDV2[hop[0]][hop[1]] for hop in hops}  # every NVLink, exactly once


# --- bandwidth model ----------------------------------------------------------------------------------
@pytest.mark.parametrize("n", range(2, 17))
def test_switch_allgather_reaches_the_port_optimum_exactly(n):
    topo = topos.switch_node(n, 150)
    for kind in ("allgather", "reducescatter"):
        assert synth(topo, kind).model_algbw(topo)[0] == Fraction(150 * n, n - 1)
    assert synth(topo, "allreduce").model_algbw(topo)[0] == Fraction(150 * n, 2 * (n - 1))


def test_mesh_ring_sets_reach_their_optimum():
    ndv2 = fixture("ndv2")
    s = synth(ndv2, "allgather")
    assert s.info["rings"] == 6 and s.model_algbw(ndv2)[0] == Fraction(150 * 8, 7)
    mi250 = topos.mi250()
    s = synth(mi250, "allgather")
    assert s.info["rings"] == 6 and s.model_algbw(mi250)[0] == Fraction(300 * 16, 15)
    s.check()
    m4 = fixture("mesh4")
    assert synth(m4, "allgather").model_algbw(m4)[0] == Fraction(100 * 4, 3)


def test_alltoall_relays_pairs_without_a_link():
    ndv2 = fixture("ndv2")
    s = synth(ndv2, "alltoall")
    assert s.info["relayed_pairs"] == 24  # each GPU lacks an NVLink to 3 others
    assert s.model_algbw(ndv2)[0] >= 60  # (vs 43 relaying every block along rings)
    cluster = fixture("ndv2x2")
    s = synth(cluster, "alltoall")
    assert s.model_algbw(cluster)[0] == Fraction(25, 8)  # the optimum: each node's NIC, 64 blocks out
    mi250 = topos.mi250()
    s = synth(mi250, "alltoall")
    s.check()
    topos.assert_routes_physical(mi250, s)


def test_alltoall_copies_staged_blocks_on_lanes_of_their_own():
    """In place, a rank cannot take a block into its output before it has sent what is there, so it stages
    it in scratch and copies it out after. The ring's alltoall copied every staged block on one threadblock,
    one after another at one threadblock's copy rate: on a DGX A100 the copies took 4x the transfers (79.5
    GB/s busbw at 1 GB with 4 copies of the schedule, 20 with one; the direct method, which has copied on
    lanes of their own since, 225). Each staged block now has its copy on a lane of its own, as there."""
    from colls import pipeline
    from colls.inputs.hardware import load_topology
    from colls.simulate import simulate
    topo = load_topology("dgx-a100", 1)
    c = pipeline.compile_schedule(topo, Collective("alltoall", 8), "ring", mode="both")
    copies = {(op.src, op.lane) for op in c.schedule.ops if op.src == op.dst and op.src_buf == "s"}
    staged = {gpu: {lane for g, lane in copies if g == gpu} for gpu in range(8)}
    assert max(len(lanes) for lanes in staged.values()) >= 6 and all(0 not in lanes for lanes in staged.values())
    t, _ = simulate(c.program, topo, "alltoall", 1 << 30)
    d = pipeline.compile_schedule(topo, Collective("alltoall", 8), "direct", mode="both")
    assert t.time_us <= 1.05 * simulate(d.program, topo, "alltoall", 1 << 30)[0].time_us


def test_ring_count_is_the_best_measured():
    s = synth(fixture("ndv2"), "allreduce")
    tried = dict(s.info["algbw_by_ring_count"])
    assert s.info["rings"] == min(k for k, v in tried.items() if v == max(tried.values()))


# --- several nodes: rails ------------------------------------------------------------------------------
def _nic_use(info):
    tx: dict = {}
    rx: dict = {}
    for crossings in info["nic_crossings"]:
        for x in crossings:
            tx[x["tx"]] = tx.get(x["tx"], 0) + 1
            rx[x["rx"]] = rx.get(x["rx"], 0) + 1
    return tx, rx


@pytest.mark.parametrize("topo_args, rings_expected", [
    (("rails", 2, 4), 4), (("rails", 3, 4), 4), (("rails", 4, 2), 2), (("shared", 2, 8), 4),
    (("shared", 3, 4), 2)])
def test_rings_cross_nodes_on_matched_rails(topo_args, rings_expected):
    kind, nodes, gpn = topo_args
    topo = (topos.rail_cluster if kind == "rails" else topos.shared_nic_cluster)(nodes, gpn)
    s = synth(topo, "allgather")
    s.check()
    info = s.info
    assert info["rings"] == rings_expected and info["rail_matched"] is True
    for order, crossings in zip(info["ring_orders"], info["nic_crossings"]):
        assert len(crossings) == nodes
        for x in crossings:
            route = topo.route(x["from"], x["to"])
            assert x["tx"] in route and x["rx"] in route and "spine" not in route
            assert x["tx"].split(".")[1] == x["rx"].split(".")[1]  # the same NIC index: one rail
            assert order[(order.index(x["from"]) + 1) % len(order)] == x["to"]
            assert topo.node_of(x["from"]) != topo.node_of(x["to"])
    tx, rx = _nic_use(info)
    assert set(tx.values()) == {1} and set(rx.values()) == {1}  # every NIC once each way
    assert len(tx) == nodes * rings_expected
    assert info["ring_rails"] == [[x["tx"].split(".")[1] for x in c] for c in info["nic_crossings"]]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.integers(2, 4), gpn=st.integers(1, 4), shared=st.booleans(), kind=st.sampled_from(KINDS),
       chunks=st.integers(1, 3))
def test_random_clusters(nodes, gpn, shared, kind, chunks):
    topo = topos.shared_nic_cluster(nodes, 2 * gpn) if shared else topos.rail_cluster(nodes, gpn)
    s = synth(topo, kind, chunks, root=topo.ngpus - 1)
    s.check()
    topos.assert_routes_physical(topo, s)
    if kind != "alltoall":
        # rails match everywhere except with two single-GPU rails and an odd number of nodes
        crossing_rails = not shared and gpn == 2 and nodes % 2 == 1
        assert s.info["rail_matched"] is not crossing_rails


def test_two_rails_and_three_nodes_cross_rails_once_per_ring():
    topo = topos.rail_cluster(3, 2)
    info = synth(topo, "allgather").info
    assert info["rail_matched"] is False
    for crossings in info["nic_crossings"]:
        bad = [x for x in crossings if not x["rail_matched"]]
        assert len(bad) == 1 and "spine" in topo.route(bad[0]["from"], bad[0]["to"])


def test_one_switch_for_every_nic_gives_every_node_the_same_path():
    # MI250 as ForestColl models it: one NIC per GCD, all on one switch. A hop between nodes costs the same on
    # any rails, so ring j enters every node on rail j and leaves on rail j + 1: node 1 runs node 0's path
    # (before, rails matched and node 1 ran it backwards), and the runtime's ring has a node symmetry
    from colls.inputs.hardware import load_topology
    from colls.simulate import defaults
    topo = load_topology("mi250", 2)
    info = synth(topo, "allgather").info
    for order in info["ring_orders"]:
        first, second = order[:16], order[16:]
        assert [r - 16 for r in second] == list(first)
    rings = defaults.ring_orders(topo, "allreduce", [16], 16)[16]
    assert all([r - 16 for r in ring[16:]] == list(ring[:16]) for ring in rings)
    program, machine = defaults.ring_machine(topo, "allreduce", rings, target="rccl")
    assert len(machine.quotient().tbs) * 2 == len(machine.tbs)


def test_shared_nic_node_inner_path_follows_the_mesh():
    topo = fixture("ndv2x2")
    s = synth(topo, "allgather")
    assert s.info["rings"] == 1
    order = s.info["ring_orders"][0]
    for a, b in zip(order, order[1:] + order[:1]):
        if topo.node_of(a) == topo.node_of(b):
            assert topos.NDV2[a % 8][b % 8] == 2  # double NVLinks inside the nodes
    assert s.model_algbw(topo)[0] == Fraction(25, 2) * 16 / 15  # the node's one NIC is the limit


# --- step budget ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("topo", [topos.switch_node(32), topos.rail_cluster(4, 8)], ids=["switch32", "4x8"])
def test_32_ranks_fit_the_runtime_step_budget(topo):
    for kind in ("allreduce", "allgather", "reducescatter", "broadcast", "reduce"):
        s = synth(topo, kind)
        s.check()
        worst = max(topos.instructions_per_threadblock(s).values())
        assert worst <= (63 if kind == "allreduce" else 33), kind


# --- the whole chain, where the other stages exist ---------------------------------------------------------
@pytest.mark.parametrize("name", ["switch4", "ndv2", "shared2x4"])
@pytest.mark.parametrize("kind", KINDS)
def test_lowered_program_verifies(name, kind):
    pipeline = pytest.importorskip("colls.pipeline")
    topo = fixture(name)
    for chunks in (1, 3):
        coll = Collective(kind, topo.ngpus, chunks, root=1)
        compiled = pipeline.compile_schedule(topo, coll, "ring",
                                             mode="both")
        assert compiled.report.ok


# --- property: any small switch or full mesh, any chunk factor -----------------------------------------
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(2, 9), chunks=st.integers(1, 3), kind=st.sampled_from(KINDS),
       mesh=st.booleans(), data=st.data())
def test_random_sizes_and_chunk_factors_check(n, chunks, kind, mesh, data):
    if mesh:
        cells = data.draw(st.lists(st.integers(1, 3), min_size=n * n, max_size=n * n))
        topo = topos.mesh_node([[0 if a == b else cells[min(a, b) * n + max(a, b)] for b in range(n)]
                                for a in range(n)])
    else:
        topo = topos.switch_node(n)
    root = data.draw(st.integers(0, n - 1))
    for method in ("ring", "direct"):
        s = get_method(method)(topo, Collective(kind, n, chunks, root))
        s.check()
        assert s.collective.chunks >= chunks


def test_ring_counts_fit_the_channels_once_their_steps_are_split():
    """128 ranks: an allreduce ring runs 254 steps per rank, a broadcast chain spans 254 steps; at 64
    steps per threadblock (one more for the send that starts a segment) that is five segments, so at
    most six rings fit 32 channels."""
    from colls.synth.ring import fitting_counts, instructions_per_ring, segments_needed
    for kind in ("allreduce", "broadcast"):
        coll = Collective(kind, 128)
        assert segments_needed(coll, 8, 64) == 5
        assert fitting_counts(coll, range(1, 9), 64, 32) == [1, 2, 3, 4, 5, 6]
    assert instructions_per_ring(Collective("allreduce", 128), 8) == 254
    coll = Collective("allgather", 16)  # 15 steps: one segment, every count fits
    assert fitting_counts(coll, range(1, 9), 64, 32) == list(range(1, 9))
    assert fitting_counts(coll, range(1, 9), None, None) == list(range(1, 9))


def test_ring_counts_whose_instructions_cannot_fit_the_threadblocks_are_left_out():
    """An MSCCL++ plan of 256 GPUs holds 12 threadblocks a GPU (the proof's 3,072 in all), of at most 62 steps:
    one allreduce ring runs 510 instructions a rank (9 threadblocks at least), two 1,020 (17): only one ring is
    worth lowering. Across 128 GPUs and 24 threadblocks, up to 5 rings (1,270 instructions, 21 threadblocks)."""
    from colls.synth.ring import fits, fitting_counts
    assert fitting_counts(Collective("allreduce", 256), range(1, 14), 62, 256, 12) == [1]
    assert not fits(Collective("allreduce", 256), 2, 62, 256, 12) and fits(Collective("allreduce", 256), 2, 62, 256)
    assert fitting_counts(Collective("allreduce", 128), range(1, 14), 62, 256, 24) == [1, 2, 3, 4, 5]
    # counted in a plan's ops, each of those steps takes five of a threadblock's 64 or more, a relay eight or more
    # (colls.runtimes.mscclpp PLAN_*_STEP_OPS): 12 and 8 at most. Across 64 GPUs (48 threadblocks) one to three
    # rings of an allreduce fit (125, 250 and 375 relays: 16, 32 and 47 threadblocks), four do not (500: 63);
    # across 128 one ring's 253 relays already need 32 threadblocks of the 24
    from colls.runtimes.mscclpp import LOWERING
    from colls.synth.ring import least_threadblocks, relays_per_ring
    assert (LOWERING.max_remote_steps, LOWERING.max_relay_steps) == (12, 8)
    assert relays_per_ring(Collective("allreduce", 128), 1) == 253
    assert relays_per_ring(Collective("allgather", 128), 2) == 126 and relays_per_ring(Collective("reduce", 8), 1) == 0
    assert least_threadblocks(Collective("allreduce", 128), 1, 62, 12, 8) == 32
    assert least_threadblocks(Collective("allreduce", 128), 1, 62, 12) == 22
    assert fitting_counts(Collective("allreduce", 64), range(1, 14), 62, 256, 48, 12, 8) == [1, 2, 3]
    assert not fits(Collective("allreduce", 128), 1, 62, 256, 24, 12, 8) and fits(Collective("allreduce", 128), 1, 62,
                                                                                  256, 24, 12)
    # a plan's program lowered as the XML file's (colls.tune.compile_for_plans' first candidate) is held to the
    # plan's ops too: its ring counts are those a plan could hold, the XML file's own are not; and where no count
    # fits (one ring of 128 GPUs), the request is refused before any ring is planned
    from colls import pipeline
    from colls.errors import LimitError
    from colls.inputs.hardware import load_topology
    topo = load_topology("dgx-a100", nodes=8)
    for n, options, most, count in ((8, {}, None, 8), (8, {"proof_threadblocks": 3072}, 12, 3)):
        coll = Collective("allreduce", 8 * n)
        tgt, opts = pipeline._method_options(topo, coll, "ring", "exe", 1, options)
        assert tgt.max_remote_steps == opts["max_remote_steps"] == most
        assert ring.choice(topo, coll, **opts)[0] == count
    big = load_topology("dgx-a100", nodes=16)
    coll = Collective("allreduce", 128)
    tgt, opts = pipeline._method_options(big, coll, "ring", "exe", 1, {"proof_threadblocks": 3072})
    with pytest.raises(LimitError, match="253 of them relays.* at least 32 threadblocks at any count of rings, more "
                                         "than the 24 a plan of 128 GPUs may hold"):
        pipeline.check_limits(big, coll, "ring", tgt, 1, opts)


@pytest.mark.parametrize("name", ["ndv2", "rails2x4", "mesh4", "ndv2x2"])
@pytest.mark.parametrize("kind", ["allgather", "allreduce", "broadcast"])
@pytest.mark.parametrize("options", [{}, {"max_rings": 2}, {"rings": 3}, {"max_steps": 8, "max_channels": 8}])
def test_the_count_and_orders_chosen_without_the_transfers_are_synthesize_s(name, kind, options):
    """ring.choice says what synthesize makes (the pipeline reads it to skip a count already refused)."""
    topo = fixture(name)
    coll = Collective(kind, topo.ngpus, 1, 0)
    s = ring.synthesize(topo, coll, **options)
    assert ring.choice(topo, coll, **options) == (s.info["rings"], s.info["ring_orders"])
    assert ring.with_rings(coll, s.info["rings"]) == s.collective


def test_a_power_of_two_ring_count_the_channels_cannot_hold_is_not_lowered(monkeypatch):
    """128 ranks' broadcast: the default 6 rings leave 768 chunks per loop, so the powers of two beside it are
    the candidates; 8 rings need 40 channels (5 segments each), which no lowering brings under 32: only 4 is
    lowered (8 was lowered first and refused, 60 of the 16 x dgx-a100 broadcast's 90 s)."""
    from colls import pipeline
    from colls.inputs.hardware import load_topology
    from colls.synth.ring import fits
    coll = Collective("broadcast", 128, root=0)
    assert not fits(coll, 8, 64, 32) and fits(coll, 4, 64, 32) and fits(coll, 8, None, None)
    lowered = []

    def record(*args, **kwargs):
        lowered.append((args[9] or {}).get("rings"))
        raise CollsError("stop here")
    monkeypatch.setattr(pipeline, "_compile_method", record)
    with pytest.raises(CollsError):
        pipeline.compile_schedule(load_topology("dgx-a100", nodes=16), coll, "ring", in_memory=True, prove=False)
    assert 8 not in lowered and lowered[0] == 4, lowered


def test_a_ring_count_stepped_down_for_a_limit_stays_a_power_of_two(monkeypatch):
    """Lowered for MSCCL++ plans held to 32 channels, 8 rings of 16 ranks need 40 channels (5 step segments
    each). The count steps down to 4, not 6: 6 rings would leave 96 chunks per loop, which divide no power-of-two
    call, so the runtime would never run the file."""
    from dataclasses import replace
    from colls import pipeline, runtimes
    from colls.inputs.hardware import load_topology
    monkeypatch.setitem(runtimes.LOWERINGS, "mscclpp", replace(runtimes.LOWERINGS["mscclpp"], max_channels=32))
    topo = load_topology("dgx-a100", nodes=2)
    c = pipeline.compile_schedule(topo, Collective("allreduce", 16), "ring", target="mscclpp", in_memory=True,
                                  prove=False)
    n = c.program.nchunksperloop
    assert not n & (n - 1), n
    assert c.facts["rings_tried"] == [8, 4] and c.schedule.info["rings"] == 4


def test_a_ring_count_the_target_refused_is_not_lowered_again(monkeypatch):
    """2 x MI250's allgather takes 13 rings by default (416 chunks per loop, no power-of-two call): 16 and 8 are
    lowered first, then 13; the step down from 13 comes to 8 again (the best count up to 8), the same rings,
    refused without a second lowering (a 128-GPU ring allreduce for MSCCL++ plans lowered 4 rings twice, 1.2 of
    its 9 s)."""
    from colls import pipeline
    from colls.errors import LimitError
    from colls.inputs.hardware import load_topology
    lowered = []

    def refuse(topology, base, method, tgt, **settings):
        lowered.append(base.info["rings"])
        raise LimitError(f"{base.info['rings']} rings refused here")
    monkeypatch.setattr(pipeline, "_lower", refuse)
    with pytest.raises(LimitError, match="1 rings refused"):
        pipeline.compile_schedule(load_topology("mi250", nodes=2), Collective("allgather", 32), "ring",
                                  in_memory=True, prove=False)
    assert lowered == [16, 8, 13, 4, 2, 1], lowered


@pytest.mark.parametrize("nodes", [4, 6])
def test_allreduce_rings_of_identical_nodes_are_lowered_by_symmetry(nodes):
    """A ring that enters each node by one GPU and leaves by another alternates them node by node, so rotating
    the ranks by two nodes maps every ring onto itself. The allreduce's chunks are numbered by ring position
    (position-major), so the chunks move with the ranks as the collective's rotation of c / N chunks per rank
    moves them: the schedule has the rotation, and lowering one orbit of ranks and relabelling it makes the very
    program every rank lowered makes."""
    from colls import lower
    from colls.inputs.hardware import load_topology
    from colls.runtimes import get_target
    topo = load_topology("dgx-a100", nodes)
    schedule = ring.synthesize(topo, Collective("allreduce", topo.ngpus), rings=2)
    assert schedule.rotation()[0] == 2 * topo.gpus_per_node
    options = lower.LowerOptions(sms=topo.min_sms(), shape=topo.node_major())
    assert lower.lower_by_symmetry(schedule, get_target("exe"), options) == lower.lower(schedule, get_target("exe"),
                                                                                      options)


@pytest.mark.parametrize("n, most", [(3, 2), (4, 2), (5, 4), (6, 4), (7, 6), (8, 7), (12, 11)])
def test_disjoint_cycles_of_a_complete_node(n, most):
    """The complete digraph on n vertices splits into n - 1 Hamiltonian cycles except for n = 4 and 6 (Tillson
    1980), where the search stops at what it finds; every cycle visits every vertex and no hop is used twice."""
    from colls.synth.ring import disjoint_cycles
    verts = list(range(n))
    cycles = disjoint_cycles(verts, {(a, b) for a in verts for b in verts if a != b})
    assert len(cycles) == most
    used = [(a, b) for c in cycles for a, b in zip(c, c[1:] + c[:1])]
    assert len(used) == len(set(used)) and all(sorted(c) == verts for c in cycles)


def test_rings_on_a_fully_connected_node_use_every_link():
    """8 MI300X, one xGMI link between every pair: one ring at a time (each the best under the links the ones
    before it loaded), 6 rings covered 48 of the 56 links and the last 8 form no ring, so 7 rings loaded some
    links twice and the default ring file ran 6 rings. The link-disjoint cycles give 7 rings on all 56, and
    the ring method takes them."""
    from colls.inputs.hardware import load_topology
    from colls.synth.ring import _Planner
    topo = load_topology("mi300x")
    sets = _Planner(topo).ring_sets([6, 7, 14])
    for k in (7, 14):
        loads = {}
        for r in sets[k]:
            for hop in zip(r.order, r.order[1:] + r.order[:1]):
                loads[hop] = loads.get(hop, 0) + 1
        assert len(loads) == 56 and set(loads.values()) == {k // 7}
    schedule = ring.synthesize(topo, Collective("allgather", 8))
    assert schedule.info["rings"] == 7
    for other in (topos.switch_node(8), topos.ndv2(), topos.mi250()):     # switches and sparse meshes: as before
        assert _Planner(other)._disjoint() == []


def test_a_ring_file_on_a_fully_connected_node_takes_more_rings_where_seven_divide_no_call():
    """8 MI300X: 7 link-disjoint rings leave 56 chunks per loop, which no power-of-two call divides; 8 rings load
    8 links twice (57 % of the link optimum). Doubling while the bandwidth model grows takes 32 rings, 4 or 5 on
    every link (91 %)."""
    from colls import bound, pipeline
    from colls.inputs.hardware import load_topology
    topo = load_topology("mi300x")
    result = pipeline.compile_schedule(topo, Collective("allgather", 8), "ring", target="rccl")
    assert result.schedule.info["rings"] == 32
    assert not result.program.nchunksperloop & (result.program.nchunksperloop - 1)
    assert result.schedule.model_algbw(topo)[0] >= 0.9 * bound.bound(topo, "allgather").algbw


def test_rings_beyond_the_channels_share_them_where_their_peers_differ():
    """8 MI300X for the MSCCL executor (1,024 threadblocks, 32 channels): 32 rings over the 7 link-disjoint ones
    load some links 5/32 of the data where 7 rings would load each 1/7, and the file ran at 0.94x NCCL's ring at
    1 GB. Rings of different peers share a channel (one threadblock per peer and direction at a rank): 128 rings on
    the 32 channels load every link 18/128 or 19/128, and the file is faster than NCCL's ring; RCCL, 64
    threadblocks, keeps 32 (64 load the links as 32 do)."""
    from colls import pipeline
    from colls.inputs.hardware import load_topology
    from colls.simulate import simulate
    from colls.simulate.baseline import Baseline
    topo = load_topology("mi300x")
    coll = Collective("reducescatter", 8)
    result = pipeline.compile_schedule(topo, coll, "ring")
    assert result.schedule.info["rings"] == 128 and result.program.nchannels == 32 and result.report.ok
    assert result.program.max_tbs() == 128 and not result.program.nchunksperloop & (result.program.nchunksperloop - 1)
    size = 1 << 30
    assert simulate(result.program, topo, "reducescatter", size)[0].time_us < \
        Baseline(topo, "reducescatter", "ring").time(size).time_us
    assert pipeline.compile_schedule(topo, coll, "ring", target="rccl").schedule.info["rings"] == 32
    assert ring.fits(coll, 224, 64, 32) and not ring.fits(coll, 225, 64, 32)    # 7 peers a rank, 32 channels


@pytest.mark.parametrize("nodes", [2, 4])
def test_rings_across_fully_connected_nodes_share_no_link_and_no_nic(nodes):
    """MI300X nodes, one xGMI link between every pair and a rail per GPU: ring after ring, each planned under the
    loads of those before, the node paths overlapped (2 nodes: the busiest xGMI link carried two of 8 rings,
    51 % of the link optimum, and the file 0.76x RCCL's ring). The zigzag paths (a sequencing of Z_8) shifted by
    one GPU a ring use each of a node's 56 links once over 8 rings and each NIC once a direction; every crossing
    stays on its rail; the link model then reaches 80 % of the optimum on 2 nodes."""
    from colls import bound
    from colls.inputs.hardware import load_topology
    from colls.synth.ring import _Planner
    topo = load_topology("mi300x", nodes=nodes)
    n = topo.ngpus
    count, orders = ring.choice(topo, Collective("allgather", n))
    assert count == 8
    loads: dict = {}
    for order in orders:
        assert sorted(order) == list(range(n))
        for a, b in zip(order, order[1:] + order[:1]):
            for link in zip(topo.route(a, b), topo.route(a, b)[1:]):
                loads[link] = loads.get(link, 0) + 1
    assert set(loads.values()) == {1}
    inside = [(a, b) for a, b in loads if isinstance(a, int) and isinstance(b, int)]
    assert len(inside) == nodes * 56
    rings = _Planner(topo)._disjoint_paths()
    assert all(c["rail_matched"] for r in rings for c in r.crossings)
    schedule = ring.synthesize(topo, Collective("allgather", n))
    if nodes == 2:
        assert schedule.model_algbw(topo)[0] >= 0.8 * bound.bound(topo, "allgather").algbw
    # an odd number of nodes cannot return to its first GPU on matched rails: the rings are planned as before
    assert _Planner(load_topology("mi300x", nodes=3))._disjoint_paths() == []
    for other in (load_topology("dgx-a100", nodes=2), load_topology("mi250", nodes=2)):
        assert _Planner(other)._disjoint_paths() == []
