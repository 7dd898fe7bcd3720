"""Tests of colls.simulate.defaults: NCCL's own ring and double binary tree as MSCCL programs, each proven by
the verifier, with NCCL's shapes (rings crossing once per node boundary on their own rails, complementary
trees over the nodes) and refusals that name the option."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

import topos
from colls import verify
from colls.inputs import hardware
from colls.collectives import KINDS, Collective
from colls.errors import CollsError
from colls.simulate.defaults import (ALGORITHMS, btree_parent, dtree_parents, nccl_program, tree_parents,
                                 tree_schedule)
from colls.topology import NIC

MACHINES = {
    "dgx-a100": lambda: hardware.load_topology("dgx-a100"),
    "dgx-a100 x2": lambda: hardware.load_topology("dgx-a100", nodes=2),
    "dgx-a100 x4": lambda: hardware.load_topology("dgx-a100", nodes=4),
    "ndv2": lambda: hardware.load_topology("ndv2"),
    "rails2x4": lambda: topos.rail_cluster(2, 4),
}
_cache: dict = {}


def machine(name: str):
    if name not in _cache:
        _cache[name] = MACHINES[name]()
    return _cache[name]


def build(name: str, kind: str, algorithm: str, channels: int, **kw):
    topo = machine(name)
    return nccl_program(topo, Collective(kind, topo.ngpus, root=min(3, topo.ngpus - 1)), algorithm,
                        channels=channels, **kw)


def assert_proven(name: str, program, target: str = "exe") -> None:
    report = verify.verify(program, target, sms=machine(name).min_sms())
    errors = [str(f) for f in report.findings if f.severity == "error"]
    assert report.ok and not errors, errors[:3]


def nics(topo, a: int, b: int) -> list:
    return [v for v in topo.route(a, b) if topo.kind(v) == NIC]


def crossings_by_channel(topo, program) -> dict:
    """channel -> the (sender, receiver) pairs of threadblocks that send to another node."""
    out: dict = defaultdict(set)
    for g in program.gpus:
        for tb in g.tbs:
            if tb.send >= 0 and topo.node_of(tb.send) != topo.node_of(g.id):
                out[tb.chan].add((g.id, tb.send))
    return out


# --- ring: every collective, proven --------------------------------------------------------------------
@pytest.mark.parametrize("name", ["dgx-a100", "dgx-a100 x2", "ndv2", "rails2x4"])
@pytest.mark.parametrize("kind", KINDS)
def test_ring_programs_verify(name, kind):
    program = build(name, kind, "ring", 2)
    assert_proven(name, program)
    assert program.nchannels == 2
    assert program.proto == "Simple"


@pytest.mark.parametrize("proto", ["LL128", "LL"])
def test_protocol_is_the_programs(proto):
    for algorithm in ALGORITHMS:
        program = build("dgx-a100", "allreduce", algorithm, 1, proto=proto)
        assert program.proto == proto
        assert_proven("dgx-a100", program)


def test_ring_on_other_targets():
    for target in ("rccl", "old"):
        assert_proven("dgx-a100 x2", build("dgx-a100 x2", "allreduce", "ring", 4, target=target), target)


def test_rooted_collectives_keep_their_root():
    for kind in ("broadcast", "reduce"):
        assert "root3" in build("dgx-a100", kind, "ring", 1).name


@pytest.mark.parametrize("channels", [1, 4, 8])
def test_ring_channels_cross_once_per_boundary_on_their_own_rails(channels):
    topo = machine("dgx-a100 x2")
    program = build("dgx-a100 x2", "allreduce", "ring", channels)
    assert program.nchannels == channels
    crossings = crossings_by_channel(topo, program)
    assert sorted(crossings) == list(range(channels))
    used = []
    for chan, pairs in crossings.items():
        # two nodes: one hop from node 0 to node 1 and one back, each on one NIC rail
        assert sorted(topo.node_of(a) for a, _ in pairs) == [0, 1], (chan, pairs)
        out = {str(nics(topo, a, b)[0]) for a, b in pairs}
        used.append(frozenset(out))
        for a, b in pairs:
            tx, rx = nics(topo, a, b)
            assert topo.graph.nodes[tx]["nic"] == topo.graph.nodes[rx]["nic"]
    assert len(set(used)) == channels  # every channel leaves its nodes by NICs of its own


# --- tree: the double binary tree ----------------------------------------------------------------------
def test_btree_matches_ncclgetbtree():
    # the illustration in NCCL's src/graph/trees.cc, 14 ranks
    want = {1: 2, 3: 2, 2: 4, 5: 6, 7: 6, 6: 4, 4: 8, 9: 10, 11: 10, 10: 12, 13: 12, 12: 8, 8: 0}
    assert {r: btree_parent(14, r) for r in range(1, 14)} == want
    assert btree_parent(14, 0) is None
    tree0, tree1 = dtree_parents(12)  # mirror: root 11, its child 3 (trees.cc's second drawing)
    assert tree0[8] == 0 and tree1[3] == 11 and tree1[11] is None and tree1[7] == 3 and tree1[1] == 3
    tree0, tree1 = dtree_parents(13)  # shift by one: root 1, its child 9
    assert tree1[1] is None and tree1[9] == 1 and tree1[0] == 9
    assert dtree_parents(1) == ([None], [None])


@pytest.mark.parametrize("nnodes", range(2, 17))
def test_every_node_is_interior_in_at_most_one_tree(nnodes):
    interior = [{p for p in tree if p is not None} for tree in dtree_parents(nnodes)]
    # the mirror (even counts) is exact; the shift (odd counts) leaves node 0, tree 0's root with its
    # one child, interior in tree 1 too
    assert interior[0] & interior[1] == (set() if nnodes % 2 == 0 else {0})


@pytest.mark.parametrize("name", ["dgx-a100", "dgx-a100 x2", "dgx-a100 x4", "ndv2", "rails2x4"])
@pytest.mark.parametrize("channels", [1, 2])
def test_tree_allreduce_verifies(name, channels):
    program = build(name, "allreduce", "tree", channels)
    assert_proven(name, program)
    assert program.nchannels == 2 * channels          # a pair of trees per channel
    assert program.nchunksperloop == 2 * channels     # one chunk column per tree


def test_tree_on_one_node_is_the_chain():
    topo = machine("dgx-a100")
    (pair, chains), = tree_parents(topo, 1)
    assert pair[0] == pair[1]
    chain = chains[0]
    assert sorted(chain) == topo.gpus
    assert pair[0] == {chain[0]: None, **{b: a for a, b in zip(chain, chain[1:])}}


def test_four_nodes_trees_are_complementary():
    topo = machine("dgx-a100 x4")
    schedule = tree_schedule(topo, Collective("allreduce", topo.ngpus), 1)
    schedule.check()
    children: dict = {0: defaultdict(set), 1: defaultdict(set)}
    for op in schedule.ops:  # reductions up the tree that cross between nodes: child node -> parent node
        src, dst = topo.node_of(op.src), topo.node_of(op.dst)
        if op.reduce is not None and src != dst:
            children[op.lane][dst].add(src)
    interior = [set(children[t]) for t in (0, 1)]
    assert interior[0] and interior[1]
    assert not interior[0] & interior[1]  # a node interior in tree 0 is a leaf in tree 1
    for t in (0, 1):  # binary trees spanning the 4 nodes, the shape of ncclGetDtree
        assert all(len(kids) <= 2 for kids in children[t].values())
        assert sum(len(kids) for kids in children[t].values()) == 3
        want = {p for p in dtree_parents(4)[t] if p is not None}
        assert interior[t] == want


def test_tree_channels_use_different_nics():
    topo = machine("dgx-a100 x2")
    program = build("dgx-a100 x2", "allreduce", "tree", 2)
    crossings = crossings_by_channel(topo, program)
    rails = {chan: {topo.graph.nodes[nics(topo, a, b)[0]]["nic"] for a, b in pairs}
             for chan, pairs in crossings.items()}
    assert rails[0] == rails[1] and rails[2] == rails[3]  # a channel's two trees share its chains
    assert rails[0].isdisjoint(rails[2]) and len(rails[0]) == 1


def test_more_chunks_pipeline_through_the_tree():
    topo = machine("dgx-a100 x2")
    program = nccl_program(topo, Collective("allreduce", topo.ngpus, chunks=8), "tree", channels=2)
    assert program.nchunksperloop == 8
    assert_proven("dgx-a100 x2", program)


# --- refusals ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind, algorithm, channels, key", [
    ("allgather", "tree", 1, "--baseline"),
    ("broadcast", "tree", 1, "--baseline"),
    ("allreduce", "rings", 1, "--baseline"),
    ("allreduce", "ring", 0, "--channels"),
    ("allreduce", "ring", 33, "--channels"),
    ("allreduce", "tree", 17, "--channels"),
    ("allreduce", "ring", 2.0, "--channels"),
    ("allreduce", "ring", True, "--channels"),
])
def test_bad_combinations_name_the_option(kind, algorithm, channels, key):
    with pytest.raises(CollsError) as e:
        build("dgx-a100", kind, algorithm, channels)
    assert str(e.value).startswith(key) and "\n" not in str(e.value)


def test_bad_protocol_and_target():
    with pytest.raises(CollsError, match="^--proto"):
        build("dgx-a100", "allreduce", "tree", 1, proto="simple")
    with pytest.raises(CollsError, match="^--target"):
        build("dgx-a100", "allreduce", "ring", 1, target="nccl")


def test_program_beyond_the_gpu_names_channels():
    # 15 peers per rank, a threadblock each per channel: 8 channels need 120 of the A100's 108 SMs
    with pytest.raises(CollsError, match="^--channels"):
        build("dgx-a100 x2", "alltoall", "ring", 8)


@pytest.mark.parametrize("name,kind,algorithm,channels", [
    ("dgx-a100 x2", "allreduce", "ring", 2), ("dgx-a100 x2", "allreduce", "tree", 2),
    ("dgx-a100 x4", "allgather", "ring", 1), ("dgx-a100 x2", "alltoall", "ring", 2)])
def test_programs_proven_in_memory_survive_the_file_round_trip(name, kind, algorithm, channels):
    """NCCL's programs are proven as built, without writing and re-reading them: the XML round trip gives
    back the same Program and no finding of its own, so it would prove nothing more."""
    from colls import msccl
    program = build(name, kind, algorithm, channels)
    parsed, findings = msccl.parse(msccl.emit(program), source="<generated>")
    assert parsed == program
    assert not findings


def test_given_ring_count_lowers_from_the_segments_it_needs():
    """With the ring count given, the lowering starts at the step segments a ring needs (fewer cannot fit
    a threadblock); the program is the one a search from one segment finds."""
    from colls import lower as lowering
    from colls.pipeline import compile_schedule
    from colls.runtimes import get_target
    topo = hardware.load_topology("dgx-a100", nodes=8)
    coll = Collective("allreduce", topo.ngpus)
    hinted = compile_schedule(topo, coll, "ring", options={"rings": 1}, in_memory=True)
    assert hinted.schedule.info["min_segments"] > 1
    schedule = hinted.schedule
    schedule.info.pop("min_segments")
    searched = lowering.lower(schedule, get_target("exe"), lowering.LowerOptions(
        name=hinted.program.name, sms=topo.min_sms()))
    assert searched == hinted.program


# --- NCCL's own ring kernel, laid out directly -----------------------------------------------------------
@pytest.mark.parametrize("name", ["dgx-a100", "dgx-a100 x2", "ndv2", "rails2x4"])
@pytest.mark.parametrize("kind", ["allreduce", "allgather", "reducescatter"])
def test_native_ring_is_the_verified_ring_program(name, kind):
    """Where the ring fits a file (32 ranks or fewer), NCCL's ring written directly is the program the ring
    method lowers and proves, step for step, and its Machine times it exactly as the Program's does."""
    from colls.simulate import simulate
    from colls.simulate.defaults import ring_machine, ring_program
    from colls.simulate.engine import Machine
    from colls.synth.ring import _Planner
    topo = machine(name)
    for channels, rings in _Planner(topo).ring_sets([1, 2, 4]).items():
        orders = [ring.order for ring in rings]
        native = ring_program(topo, kind, orders)
        lowered = build(name, kind, "ring", channels)
        assert native.gpus == lowered.gpus
        assert (native.nchunksperloop, native.nchannels) == (lowered.nchunksperloop, lowered.nchannels)
        assert_proven(name, native)
        head, m = ring_machine(topo, kind, orders)
        assert m.steps == Machine(native, topo, kind).steps
        for size in (1 << 12, 1 << 24):
            a = simulate(head, topo, kind, size, machine=m, native=True)[0]
            b = simulate(native, topo, kind, size, native=True)[0]
            assert a.time_us == pytest.approx(b.time_us, rel=1e-12)


def test_native_rings_on_a_switch_node_go_to_the_next_gpu_first():
    """NCCL's ring search on NVSwitch nodes tries the next GPU by index first: on one DGX A100 every channel
    is 0 1 2 .. 7 (as NCCL_DEBUG=INFO prints there); across nodes each channel enters a node at its GPU, goes
    round by index and leaves by the GPU its planner chose, so the channels are one shape turned."""
    from colls.simulate.defaults import ring_orders
    one = ring_orders(machine("dgx-a100"), "allreduce", [4])[4]
    assert one == [tuple(range(8))] * 4
    two = ring_orders(hardware.load_topology("dgx2", nodes=2), "allreduce", [8])[8]
    turned = [tuple((r // 16) * 16 + (r % 16 + 2 * k) % 16 for r in two[0]) for k in range(8)]
    assert two == turned
    mesh = ring_orders(machine("ndv2"), "allreduce", [2])[2]       # not a switch node: the planner's rings
    assert all(len(set(r)) == 8 for r in mesh)


def test_native_ring_has_no_file_limits():
    """Beyond 32 ranks a ring file is cut into step segments; NCCL's kernel is not, and neither is its model:
    one threadblock per rank and channel, 2N - 1 steps."""
    from colls.simulate.defaults import ring_machine, ring_orders
    topo = hardware.load_topology("dgx-a100", nodes=8)
    orders = ring_orders(topo, "allreduce", [2])[2]
    head, m = ring_machine(topo, "allreduce", orders)
    assert len(m.tbs) == 2 * topo.ngpus and {len(s) for s in m.steps} == {2 * topo.ngpus - 1}
    assert head.nchannels == 2 and head.nchunksperloop == 2 * topo.ngpus


def test_alike_nodes_get_the_ring_path_computed_once():
    """The planner maps one node's path onto every alike node; a node that differs (a link gone) is planned
    for itself, and the rings are the ones planning every node afresh gives."""
    from colls.inputs.degrade import degrade
    from colls.synth.ring import _Planner

    class Afresh(_Planner):
        def _node_path(self, g, entry_rail, exit_rail):
            return self._new_node_path(g, entry_rail, exit_rail)

    computed = []
    for topo in (hardware.load_topology("dgx2", nodes=4),
                 degrade(hardware.load_topology("mi250", nodes=3), "link:16-17:all")):
        planner = _Planner(topo)
        rings = planner.plan(8)
        assert [r.order for r in rings] == [r.order for r in Afresh(topo).plan(8)]
        assert [r.crossings for r in rings] == [r.crossings for r in Afresh(topo).plan(8)]
        computed.append(len(planner.paths))
    assert computed[0] == 8          # four alike DGX-2 nodes: one path per ring

# --- NCCL's own tree kernel, its groups laid out directly -------------------------------------------------
@pytest.mark.parametrize("name", ["dgx-a100", "dgx-a100 x2", "dgx-a100 x4", "rails2x4"])
@pytest.mark.parametrize("channels", [1, 2])
def test_native_tree_groups_compute_the_allreduce(name, channels):
    """Each tree's groups, followed as NCCL's primitives move data (up: the own input plus every child's
    partial sum to the parent; the root keeps the total; down: what the parent sent, to every child), leave
    every rank with every rank's input exactly once; the groups have NCCL's fan-in and fan-out (the root at
    most 2 children, others at most 3, one parent), and each tree has its own lane."""
    from colls.simulate.defaults import _tree_groups
    topo = machine(name)
    by_lane: dict = defaultdict(list)
    for rank, group, kind in _tree_groups(topo, channels):
        by_lane[group.chan].append((rank, group, kind))
    assert sorted(by_lane) == list(range(2 * channels))
    for lane, groups in by_lane.items():
        ups = {r: g for r, g, k in groups if k in ("s", "rrs", "rrcs")}
        downs = {r: g for r, g, k in groups if k in ("r", "rcs", "rrcs")}
        assert sorted(ups) == sorted(downs) == topo.gpus
        roots = [r for r, g, k in groups if k == "rrcs"]
        assert len(roots) == 1 and len(ups[roots[0]].recv) <= 2 and ups[roots[0]].send == ups[roots[0]].recv
        partial: dict = {}

        def up(v):                      # what v's up group sends (or, at the root, keeps)
            if v not in partial:
                got = Counter({v: 1})
                for child in ups[v].recv:
                    assert ups[child].send == (v,)
                    got += up(child)
                partial[v] = got
            return partial[v]
        total = up(roots[0])
        assert total == Counter({r: 1 for r in topo.gpus})
        for v, g in downs.items():     # every child receives from its parent what the parent keeps: the total
            if v != roots[0]:
                assert len(g.recv) == 1 and len(ups[v].recv) <= 3 and v in downs[g.recv[0]].send
                assert set(g.send) == set(ups[v].recv)


def test_native_tree_cuts_messages_as_nccls_tree():
    """NCCL's tree moves one slot of the connection's buffer per message (512 KB with Simple's default 4 MB,
    eight in flight), where a file's Simple message takes four (2 MB, two in flight); LL128 shrinks the tree's
    chunk for smaller calls (src/enqueue.cc)."""
    from colls.runtimes.nccl import tree_chunk_bytes
    from colls.simulate.defaults import tree_machine
    from colls.simulate.engine import Machine
    topo = machine("dgx-a100 x2")
    _, m = tree_machine(topo, 2)
    assert (m.message_bytes("Simple", 1 << 30), m.fifo("Simple")) == (512 << 10, 8)
    assert (m.message_bytes("LL", 1 << 30), m.fifo("LL")) == (32 << 10, 8)
    ring = Machine(build("dgx-a100 x2", "allreduce", "ring", 1), topo, "allreduce")
    assert (ring.message_bytes("Simple", 1 << 30), ring.fifo("Simple")) == (2 << 20, 2)
    full = 600 * 1024 // 16 * 15            # LL128: a slot's data bytes
    assert tree_chunk_bytes("LL128", 1 << 30, 4, 16, 2, full) == full
    # 2 nodes of 8: nstepsLL128 = 1 + 1 + 0.8; a 1 MB call on 4 channels halves until 64 KB chunks
    small = tree_chunk_bytes("LL128", 1 << 20, 4, 16, 2, full)
    assert small < full and small >= 32768 and (1 << 20) // (4 * small) >= 2.8 * 16 / 8
    assert tree_chunk_bytes("Simple", 1 << 20, 4, 16, 2, 512 << 10) == 512 << 10


@pytest.mark.parametrize("name", ["dgx-a100 x2", "rails2x4"])
def test_native_tree_quotient_and_steady_state_are_exact(name):
    """Groups with several peers keep the engine exact: alike groups simulated once give the whole machine's
    time and link bytes, and the steady-state jump gives the full simulation's."""
    from colls.runtimes.costs import for_protocol
    from colls.simulate.defaults import tree_machine
    from colls.simulate.engine import run
    topo = machine(name)
    jumped = 0
    for channels in (1, 2):
        _, m = tree_machine(topo, channels)
        assert m.quotient() is not None
        for proto in ("Simple", "LL128"):
            for size in (1 << 16, 3 << 26):
                kw = dict(ncpl=2 * channels, proto=proto)
                fast = run(m, size, for_protocol(proto), **kw)
                whole = run(m, size, for_protocol(proto), symmetric=False, **kw)
                full = run(m, size, for_protocol(proto), extrapolate=False, **kw)
                for other in (whole, full):
                    assert fast.time_us == pytest.approx(other.time_us, rel=1e-9)
                    assert fast.link_bytes == pytest.approx(other.link_bytes, rel=1e-9)
                jumped += fast.extrapolated_passes
    assert jumped > 0


def test_an_alltoall_too_wide_for_the_p2p_model_is_refused_in_one_clear_line():
    """NCCL's alltoall is modelled with a send and a receive threadblock per peer and channel; at 128 GPUs that
    is 255 per GPU, more than an A100's 108 SMs. The refusal says so in one line (no nested error prefixes)
    before laying the program out, and the runtime's default carries it as a note."""
    from colls.simulate.baseline import RuntimeDefault
    topo = hardware.load_topology("dgx-a100", nodes=16)
    with pytest.raises(CollsError) as err:
        RuntimeDefault(topo, "alltoall", target="exe")
    text = str(err.value)
    assert "255 threadblocks" in text and "108 SMs" in text and "p2p" in text
    assert "--channels" not in text and text.count("--baseline") == 1 and "\n" not in text


def test_the_runtimes_alltoall_where_some_pair_has_no_route_stages_nothing():
    """On MI250 (no xGMI link between some GCDs) the runtime's alltoall is modelled as colls' ring alltoall, which
    relays those pairs; the runtime's alltoall is grouped sends between two buffers, never staging a block in
    scratch for in-place calls. Made for both calls, the model charged it for that scratch (2 x MI250: 1.7x the
    time at 16 MB, 1.3x at 1 GB)."""
    topo = hardware.load_topology("mi250", nodes=1)
    program = nccl_program(topo, Collective("alltoall", topo.ngpus), "ring", channels=2, target="rccl")
    assert (program.inplace, program.outofplace) == (0, 1)
