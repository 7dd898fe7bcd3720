"""Tests of colls.synth.hier: the hierarchical schedules (local trees inside each node, rings along the NIC
rails across nodes) compute their collective in place and out of place on every kind of node, their
steps grow with the nodes over the GPUs per node, their rings never put two chunks on a link at once, and
what the method cannot do is refused in one line."""

from __future__ import annotations

from collections import Counter

import pytest

import shell
import topos
from colls import bound
from colls.collectives import Collective
from colls.errors import CollsError
from colls.inputs import hardware
from colls.synth import get_method
from colls.synth import hier

KINDS = ("allgather", "reducescatter", "allreduce")
_cache: dict = {}


def machine(profile: str, nodes: int):
    if (profile, nodes) not in _cache:
        _cache[(profile, nodes)] = hardware.load_topology(profile, nodes=nodes)
    return _cache[(profile, nodes)]


def synth(topo, kind, chunks=1, **options):
    return hier.synthesize(topo, Collective(kind, topo.ngpus, chunks), **options)


# switch nodes with a NIC per GPU, a NIC per two GPUs (dgx2), one NIC for eight (ndv2, whose cube-mesh
# and MI250's xGMI mesh need relays inside the node); node counts below, at and above the GPUs per node,
# and one that is not a multiple of them
@pytest.mark.parametrize("profile, nodes", [("dgx-a100", 2), ("dgx-a100", 3), ("dgx-a100", 9), ("dgx2", 2),
                                            ("ndv2", 2), ("mi250", 2), ("dgx-h100", 4)])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("span", ["default", 1, "per"])
def test_every_schedule_computes_its_collective_in_place_and_out_of_place(profile, nodes, kind, span):
    topo = machine(profile, nodes)
    if span == "per":
        span = topo.gpus_per_node
    s = synth(topo, kind, span=None if span == "default" else span)
    s.check()       # both aliasings
    assert s.info["span"] == (span if span != "default" else (1 if nodes <= topo.gpus_per_node
                                                               else topo.gpus_per_node))


def test_a_chunk_factor_one_gpu_per_node_and_whole_pieces_on_the_rails_work_too():
    for kind in KINDS:
        synth(machine("dgx-a100", 2), kind, chunks=3).check()
        synth(topos.rail_cluster(3, 1), kind).check()
        synth(machine("dgx-a100", 9), kind, chunks=2, unit=16).check()
        synth(machine("mi250", 2), kind, chunks=2, unit=3).check()


def test_with_one_block_per_rail_each_node_the_ring_links_carry_what_the_optimum_needs():
    """Span 1 (the default up to G nodes): every ring link carries the N - 1 blocks a node must import
    through that NIC, so the link model reaches the bound; span G from G nodes on, within N / (N - 1)."""
    for nodes in (2, 4):
        topo = machine("dgx-a100", nodes)
        opt = bound.bound(topo, "allgather").algbw
        for kind in ("allgather", "reducescatter"):
            algbw, _ = synth(topo, kind).model_algbw(topo)
            assert algbw >= opt * 98 / 100
    topo = machine("dgx-a100", 16)
    opt = bound.bound(topo, "allgather").algbw
    algbw, _ = synth(topo, "allgather").model_algbw(topo)
    assert algbw >= opt * 15 / 16 * 99 / 100


def test_from_g_nodes_on_a_rank_sends_about_n_over_g_pieces_to_each_peer():
    """Span G: a rail GPU passes the pieces its rail brings (about N / G) to each of its G - 1 local peers,
    so the node-level ops of a rank grow with the nodes over the GPUs per node; span 1 would need N - 1."""
    for nodes in (16, 32):
        topo = machine("dgx-a100", nodes)
        G = topo.gpus_per_node
        s = synth(topo, "allgather")
        far = Counter(op.src for op in s.ops if op.lane == hier.FAR and not op.local)
        assert max(far.values()) <= -(-nodes // G) * (G - 1)
        ones = synth(topo, "allgather", span=1)
        far1 = Counter(op.src for op in ones.ops if op.lane == hier.FAR and not op.local)
        assert max(far1.values()) == (nodes - 1) * (G - 1)


@pytest.mark.parametrize("nodes, sources", [(8, [0, 1, 2, 3, 4, 5, 6, 7]), (16, [0, 8]), (7, [3])])
def test_the_rail_ring_moves_one_chunk_per_link_and_slot_and_a_relay_forwards_at_once(nodes, sources):
    items = {m: [(m, q) for q in range(3)] for m in sources}
    slots = hier._ring_slots(nodes, items)
    assert set(slots) == {(m, q) for m in sources for q in range(3)}
    used = Counter()
    for (m, q), hops in slots.items():
        assert len(hops) == nodes - 1
        assert hops == list(range(hops[0], hops[0] + nodes - 1))    # forwarded in the next slot, every hop
        for k, slot in enumerate(hops):
            used[((m + k) % nodes, slot)] += 1
    assert max(used.values()) == 1
    firsts = {m: sorted(slots[(m, q)][0] for q in range(3)) for m in sources}
    for m in sources:       # a node's own chunks go in order
        assert firsts[m] == sorted(firsts[m])
    if len(sources) == nodes:       # every node a source: the classic ring, chunk q at q (N - 1) + hop
        assert all(slots[(m, q)][0] == q * (nodes - 1) for m in sources for q in range(3))


def test_what_it_cannot_do_is_refused_naming_the_option():
    with pytest.raises(CollsError, match="one node has no hierarchy") as e:
        synth(machine("dgx-a100", 1), "allgather")
    assert e.value.key == "--method"
    with pytest.raises(CollsError, match="no hierarchical schedule for alltoall"):
        synth(machine("dgx-a100", 2), "alltoall")
    with pytest.raises(CollsError, match="span must be 1 or the GPUs per node"):
        synth(machine("dgx-a100", 2), "allgather", span=3)


def test_synth_writes_a_verified_file_and_refuses_one_node_in_one_line(tmp_path):
    def run(*args):
        return shell.run(args, timeout=600)

    out = tmp_path / "ar.xml"
    rc, stdout, err = run("synth", "--hardware", "dgx-a100", "--nodes", "2", "--collective", "allreduce",
                          "--method", "hier", "-o", str(out))
    assert rc == 0, err
    assert "allreduce hier on dgx-a100 x2" in stdout and "verified for exe" in stdout
    rc, stdout, err = run("verify", str(out))
    assert rc == 0, stdout + err
    rc, stdout, err = run("synth", "--hardware", "dgx-a100", "--collective", "allgather", "--method", "hier",
                          "-o", str(tmp_path / "one.xml"))
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "one node has no hierarchy" in err and not (tmp_path / "one.xml").exists()


@pytest.mark.parametrize("profile, nodes", [("dgx-a100", 2), ("dgx-a100", 9), ("mi250", 2), ("ndv2", 2)])
def test_the_precheck_bound_never_exceeds_what_the_file_has(profile, nodes):
    """least_steps refuses machines before anything is made: it must be a true lower bound on rank 0's
    instructions in the lowered program, with and without copies."""
    from colls import pipeline
    topo = machine(profile, nodes)
    for kind in KINDS:
        for copies in (1, 2):
            coll = Collective(kind, topo.ngpus)
            least = hier.least_steps(topo, coll, copies)
            try:
                made = pipeline.compile_schedule(topo, coll, "hier", instances=copies, in_memory=True, prove=False)
            except CollsError:
                continue
            real = sum(1 for tb in made.program.gpus[0].tbs for st in tb.steps if st.type != "nop")
            assert 0 < least <= real, (kind, copies, least, real)


def test_a_machine_whose_file_the_loader_cannot_hold_is_refused_before_anything_is_made():
    from colls import pipeline
    from colls.errors import LimitError
    topo = hardware.load_topology("dgx-a100", nodes=460)     # 3,680 GPUs: the gpu elements alone leave too few
    with pytest.raises(LimitError, match="XML elements"):
        pipeline.check_limits(topo, Collective("allreduce", topo.ngpus), "hier", pipeline.get_target("exe"))


def test_relays_inside_a_node_serve_one_tree_each_so_large_calls_do_not_hang():
    """On MI250's xGMI mesh GPUs relay pieces of several nodes' blocks; trees sharing a relay's threadblock
    in different orders closed a wait cycle once a piece was several messages (17 nodes, pieces of 16 chunks:
    the allgather hung from 190 MB). Each tree now has its lane: the file is proved deadlock-free."""
    from colls import pipeline
    topo = machine("mi250", 17)
    made = pipeline.compile_schedule(topo, Collective("allgather", topo.ngpus), "hier", in_memory=True)
    assert made.report.ok
    lanes = {op.lane for op in made.schedule.ops if op.lane >= hier.FAR}
    assert len(lanes) == topo.gpus_per_node


def _program_seen_from(program, gid: int, rot: int, rotated_bufs) -> list:
    """Rank ``gid``'s threadblocks with every peer moved ``rot`` ranks on and every offset into a buffer
    laid out by rank (``rotated_bufs``) moved ``rot`` blocks on."""
    n, cpl = len(program.gpus), program.nchunksperloop
    c = cpl // n

    def move(buf, off):
        return (off + rot * c) % cpl if buf in rotated_bufs and off >= 0 else off

    out = []
    for tb in program.gpus[gid].tbs:
        peers = tuple((p + rot) % n if p >= 0 else -1 for p in (tb.send, tb.recv))
        out.append((peers, tb.chan, tuple((st.type, st.srcbuf, move(st.srcbuf, st.srcoff), st.dstbuf,
                                           move(st.dstbuf, st.dstoff), st.cnt, st.depid, st.deps)
                                          for st in tb.steps)))
    return out


@pytest.mark.parametrize("profile, nodes, kind", [("dgx-a100", 2, "reducescatter"), ("dgx-a100", 16, "allgather"),
                                                  ("dgx-a100", 16, "reducescatter"), ("dgx-a100", 16, "allreduce"),
                                                  ("mi250", 2, "allreduce")])
def test_every_node_runs_node_0s_program_relabelled(profile, nodes, kind):
    """The premise a proof by symmetry needs: the lowered program of every rank is that of the rank G (span 1)
    or G x G (span G) places before it, with peers and the offsets into rank-ordered buffers moved on as
    many places; threadblocks, steps and dependencies identical. (The reducescatter's scratch was handed out
    in the order pieces were visited, absolute node order, so at span G nodes laid it out differently.)"""
    from colls import lower
    from colls.runtimes import get_target
    topo = machine(profile, nodes)
    schedule = get_method("hier")(topo, Collective(kind, topo.ngpus))
    G = topo.gpus_per_node
    shift = G if schedule.info["span"] == 1 else G * G
    assert schedule.rotation()[0] == shift
    bufs = {"allgather": ("o",), "reducescatter": ("i",), "allreduce": ("i", "o")}[kind]
    options = lower.LowerOptions(sms=topo.min_sms(), shape=topo.node_major())
    p = lower.lower(schedule, get_target("exe"), options)          # every rank lowered
    for gid in range(topo.ngpus):
        assert _program_seen_from(p, gid, shift, bufs) == _program_seen_from(p, (gid + shift) % topo.ngpus, 0, bufs)
    # so lowering ranks 0..shift-1 and relabelling them for the others makes the very same program
    assert lower.lower_by_symmetry(schedule, get_target("exe"), options) == p


def test_more_chunks_per_rail_op_where_the_threadblocks_do_not_fit(monkeypatch):
    """64 x MI250's allreduce needs 69 threadblocks with one chunk per rail op (and two), more than RCCL's
    64; four make fewer steps, segments and channels, and 62 threadblocks. The pipeline doubles the unit
    while the threadblocks are what the target refuses, and says so; any other refusal stands."""
    from colls import pipeline
    from colls.errors import LimitError
    real = pipeline._compile_once
    tried = []

    def once(topology, collective, method, tgt, options, **kw):
        tried.append(options["unit"])
        if options["unit"] < 4:
            raise LimitError("hier allreduce: needs 69 threadblocks per GPU, more than the target's 64 "
                             "(threadblocks must all be resident); try fewer --instances", limit="threadblocks")
        return real(topology, collective, method, tgt, options, **kw)
    monkeypatch.setattr(pipeline, "_compile_once", once)
    topo = machine("dgx-a100", 2)
    made = pipeline.compile_schedule(topo, Collective("allreduce", topo.ngpus), "hier", in_memory=True)
    assert tried == [1, 2, 4] and made.report.ok
    assert "4 chunks per rail op, not 1: with 2 it needs 69 threadblocks per GPU" in made.summary()

    def steps(topology, collective, method, tgt, options, **kw):
        raise LimitError("hier allreduce: needs 99 steps in one threadblock, not 99 threadblocks per GPU")
    monkeypatch.setattr(pipeline, "_compile_once", steps)
    with pytest.raises(LimitError, match="99 steps"):
        pipeline.compile_schedule(topo, Collective("allreduce", topo.ngpus), "hier", in_memory=True)


def test_no_more_chunks_per_rail_op_where_one_step_segment_already_had_too_many_threadblocks(monkeypatch):
    """16 x MI250's allreduce for plans (12 threadblocks a GPU allowed) needs 45 at every unit: its layout had
    one step segment and no connection cut, so fewer steps leave the same peers on the same channels. The
    refusal stands at the first unit (it tried all seven, 9.5 s); the lowering marks such a refusal."""
    from colls import pipeline
    from colls.errors import LimitError
    from colls.lower import LowerOptions, lower
    from colls.runtimes import get_target
    from dataclasses import replace
    tried = []

    def once(topology, collective, method, tgt, options, **kw):
        tried.append(options["unit"])
        e = LimitError("hier allreduce: needs 45 threadblocks per GPU, more than 12", limit="threadblocks")
        e.one_segment = True
        raise e
    monkeypatch.setattr(pipeline, "_compile_once", once)
    topo = machine("dgx-a100", 2)
    with pytest.raises(LimitError, match="needs 45"):
        pipeline.compile_schedule(topo, Collective("allreduce", topo.ngpus), "hier", in_memory=True)
    assert tried == [1]
    monkeypatch.undo()
    schedule = get_method("hier")(topo, Collective("allreduce", topo.ngpus))
    with pytest.raises(LimitError) as refused:
        lower(schedule, replace(get_target("exe"), max_tbs=10), LowerOptions(shape=topo.node_major()))
    assert refused.value.one_segment and refused.value.limit == "threadblocks" and not refused.value.any_layout
