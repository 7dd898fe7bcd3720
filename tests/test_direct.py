"""Tests of colls.synth.direct and of the method registry (colls.synth)."""

from __future__ import annotations

from fractions import Fraction

import pytest

import topos
from colls.collectives import KINDS, Collective
from colls.errors import CollsError
from colls.synth import METHODS, direct, get_method, ring

FIXTURES = {
    "switch4": lambda: topos.switch_node(4),
    "switch8": lambda: topos.switch_node(8),
    "mesh4": lambda: topos.mesh_node(topos.MESH4),
    "rails2x4": lambda: topos.rail_cluster(2, 4),
    "shared2x4": lambda: topos.shared_nic_cluster(2, 4),
}
STEPS = {"allgather": 2, "alltoall": 2, "broadcast": 2, "reducescatter": "N-1", "reduce": "N-1",
         "allreduce": "N"}


@pytest.mark.parametrize("name", list(FIXTURES))
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("chunks", [1, 3])
def test_schedule_is_correct_physical_and_short(name, kind, chunks):
    topo = FIXTURES[name]()
    n = topo.ngpus
    s = direct.synthesize(topo, Collective(kind, n, chunks, root=n - 1))
    s.check()
    topos.assert_routes_physical(topo, s)
    assert s.method == "direct" and s.collective.kind == kind and s.collective.root == n - 1
    want = STEPS[kind]
    assert s.nsteps == {"N-1": n - 1, "N": n}.get(want, want)
    if kind == "allreduce":
        assert s.collective.chunks % n == 0 and chunks <= s.collective.chunks < chunks + n
    else:
        assert s.collective.chunks == chunks
    assert s.info["steps"] == s.nsteps and s.info["model_algbw_gbps"] > 0


def test_few_ops_with_many_chunks():
    topo = topos.switch_node(4)
    s = direct.synthesize(topo, Collective("allgather", 4, 5))
    assert len(s.ops) == 16 and {op.count for op in s.ops} == {5}
    s = direct.synthesize(topo, Collective("alltoall", 4, 5))
    assert len([op for op in s.ops if not op.local]) == 12
    assert {op.count for op in s.ops if not op.local} == {5}


def test_reductions_into_one_chunk_are_serialised():
    topo = topos.switch_node(6)
    for kind in ("reducescatter", "reduce", "allreduce"):
        s = direct.synthesize(topo, Collective(kind, 6, 2, root=2))
        seen = set()
        for op in s.ops:
            if op.reduce is not None:
                for slot in op.dst_slots():
                    assert (op.step, slot) not in seen
                    seen.add((op.step, slot))


def test_switch_bandwidth_model():
    n, bw = 8, 150
    topo = topos.switch_node(n, bw)
    for kind in ("allgather", "reducescatter", "alltoall"):
        s = direct.synthesize(topo, Collective(kind, n))
        assert s.model_algbw(topo)[0] == Fraction(bw * n, n - 1)
    s = direct.synthesize(topo, Collective("allreduce", n))
    assert s.model_algbw(topo)[0] == Fraction(bw * n, 2 * (n - 1))
    assert direct.synthesize(topo, Collective("broadcast", n)).model_algbw(topo)[0] == Fraction(bw, n - 1)


@pytest.mark.parametrize("kind", KINDS)
def test_mesh_without_all_pairs_is_refused_naming_a_pair(kind):
    topo = topos.ndv2()
    pair = "GPU 5 and GPU 0" if kind == "reduce" else "GPU 0 and GPU 5"
    with pytest.raises(CollsError, match=f"direct: no link between {pair} on ndv2 "
                                         r"\(the fabric does not allow a direct schedule\)"):
        direct.synthesize(topo, Collective(kind, 8))


def test_rooted_collectives_need_only_the_root_pairs():
    star = topos.mesh_node([[0, 1, 1, 1], [1, 0, 0, 0], [1, 0, 0, 0], [1, 0, 0, 0]], name="star")
    for kind in ("broadcast", "reduce"):
        s = direct.synthesize(star, Collective(kind, 4, 2, root=0))
        s.check()
        with pytest.raises(CollsError, match="no link between GPU"):
            direct.synthesize(star, Collective(kind, 4, 2, root=1))
    with pytest.raises(CollsError, match="no link between GPU 1 and GPU 2 on star"):
        direct.synthesize(star, Collective("allgather", 4))


def test_rank_count_must_match():
    with pytest.raises(CollsError, match="3 ranks but switch4 has 4 GPUs"):
        direct.synthesize(topos.switch_node(4), Collective("allgather", 3))


# --- the registry ------------------------------------------------------------------------------------------
def test_registry():
    from colls.synth import hier, milp, trees
    assert METHODS == {"ring": ring.synthesize, "direct": direct.synthesize, "trees": trees.synthesize,
                       "milp": milp.synthesize, "hier": hier.synthesize}
    assert get_method("direct") is direct.synthesize and get_method("ring") is ring.synthesize
    with pytest.raises(CollsError, match=r"unknown method 'taccl' \(choose from direct, hier, milp, ring, trees\)"):
        get_method("taccl")


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_accepts_and_ignores_unknown_options(method):
    topo = topos.rail_cluster(2, 2) if method == "hier" else topos.switch_node(4)     # hier needs nodes
    s = get_method(method)(topo, Collective("allgather", 4), sketch=None, unknown=1)
    s.check()


@pytest.mark.parametrize("kind", KINDS)
def test_lowered_program_verifies(kind):
    pipeline = pytest.importorskip("colls.pipeline")
    topo = topos.rail_cluster(2, 4)
    for chunks in (1, 3):
        compiled = pipeline.compile_schedule(topo, Collective(kind, 8, chunks, root=5), "direct")
        assert compiled.report.ok


def test_alltoall_places_staged_blocks_side_by_side_and_fills_the_links():
    """The blocks that wait in scratch (so that in-place calls are right) were placed by one threadblock, up
    to N - 1 blocks one after another at one threadblock's copy rate: on a DGX A100 the call took 8x the
    transfers (20 GB/s busbw at 1 GB, busiest link 8 %). Each block now has its copy on a lane of its own,
    which starts as soon as the block has arrived."""
    from colls import bound as bounds
    from colls import pipeline
    from colls.inputs.hardware import load_topology
    from colls.simulate import simulate
    topo = load_topology("dgx-a100", 1)
    c = pipeline.compile_schedule(topo, Collective("alltoall", 8), "direct", mode="both")
    copies = {(op.src, op.lane) for op in c.schedule.ops if op.src == op.dst and op.src_buf == "s"}
    assert {lane for gpu, lane in copies if gpu == 7} == set(range(1, 8))      # GPU 7 stages 7 blocks
    size = 1 << 30
    t, _ = simulate(c.program, topo, "alltoall", size)
    best = bounds.runtime_optimum(topo, "alltoall", "exe").time_us(size)
    assert best / t.time_us > 0.5 and t.busiest_util > 0.5


@pytest.mark.parametrize("kind", ["reducescatter", "reduce", "allreduce"])
@pytest.mark.parametrize("depth", [2, 5])
def test_a_block_summed_in_pieces_is_right_and_pipelined(kind, depth):
    """depth d: the chunk factor times d, the block cut into pieces of one chunk (ops of several chunks are
    several messages in large calls, and four ranks at pieces of two chunks wait on each other in a cycle);
    sender p sends piece j at step p + j, so every piece is summed in the same sender order and each sender's
    threadblock works through the pieces in turn; proved in and out of place."""
    pipeline = pytest.importorskip("colls.pipeline")
    topo = topos.switch_node(4)
    s = direct.synthesize(topo, Collective(kind, 4, 3, root=1), depth=depth)
    s.check()
    one = direct.synthesize(topo, Collective(kind, 4, 3, root=1))
    assert s.collective.chunks == one.collective.chunks * depth
    pieces = s.collective.chunks // (4 if kind == "allreduce" else 1)
    assert s.info["depth"] == depth and {op.count for op in s.ops} == {1}
    assert s.nsteps == 3 + pieces - 1 + (kind == "allreduce")
    assert pipeline.compile_schedule(topo, Collective(kind, 4, 3, root=1), "direct",
                                     options={"depth": depth}).report.ok
    with pytest.raises(CollsError, match="depth"):
        direct.synthesize(topo, Collective(kind, 4, root=1), depth=0)


def test_pieces_keep_every_summing_threadblock_busy():
    """One DGX A100, reduce-scatter and allreduce at 4 copies: with the block in one piece each sum waits for the
    whole previous one (16 MB: 61 and 93 GB/s busbw); in 8 pieces the senders' threadblocks sum at once (100 and
    119 GB/s: the allreduce's 64 KB pieces each pay two slices' fixed costs, colls.simulate.engine)."""
    from colls import pipeline
    from colls.inputs.hardware import load_topology
    from colls.simulate import simulate
    topo = load_topology("dgx-a100", 1)
    for kind in ("reducescatter", "allreduce"):
        t = {}
        for depth in (1, 8):
            c = pipeline.compile_schedule(topo, Collective(kind, 8), "direct", options={"depth": depth}, instances=4,
                                          in_memory=True, prove=False)
            t[depth] = simulate(c.program, topo, kind, 16 << 20)[0].time_us
        assert t[8] < t[1] / 1.2, (kind, t)


@pytest.mark.parametrize("name", ["switch4", "switch8"])
def test_an_alltoall_in_pieces_is_right_in_and_out_of_place(name):
    """depth d: every block moves as one-chunk pieces, piece k at step k, and a block staged in scratch is
    copied out piece by piece as its pieces arrive."""
    pipeline = pytest.importorskip("colls.pipeline")
    topo = FIXTURES[name]()
    n = topo.ngpus
    s = direct.synthesize(topo, Collective("alltoall", n, 2), depth=3)
    s.check()
    assert s.collective.chunks == 6 and {op.count for op in s.ops if not op.local or op.src_buf == "s"} == {1}
    assert s.info["depth"] == 3
    assert pipeline.compile_schedule(topo, Collective("alltoall", n, 2), "direct", options={"depth": 3},
                                     mode="both").report.ok


def test_an_alltoall_in_pieces_ends_one_piece_after_its_transfers():
    """The blocks staged for in-place calls were copied out whole after they arrived: at 64 MB on one DGX A100
    the call ended a 2 MB copy after its last transfer (412 us); copied piece by piece as the pieces arrive,
    330 us."""
    from colls import pipeline
    from colls.inputs.hardware import load_topology
    from colls.simulate import simulate
    topo = load_topology("dgx-a100", 1)
    t = {}
    for depth in (1, 4):
        c = pipeline.compile_schedule(topo, Collective("alltoall", 8), "direct", options={"depth": depth},
                                      instances=4, in_memory=True, prove=False, mode="both")
        t[depth] = simulate(c.program, topo, "alltoall", 64 << 20)[0].time_us
    assert t[4] < t[1] / 1.2, t


@pytest.mark.parametrize("method", ["direct", "ring"])
def test_an_out_of_place_alltoall_stages_nothing_and_keeps_up_with_the_runtimes_sends(method):
    """A file for out-of-place calls only is never given an in-place call (its <algo> says inplace="0"), so no
    block needs to wait in scratch for its receiver to send what its output holds: every block lands in the
    output at once. On one DGX A100 at 1 GB the staged file ran 4,165 us, 2 % behind NCCL's own grouped sends
    (4,078, modelled); unstaged it runs as fast, on 60 threadblocks a GPU instead of 88 (within 0.1 %: its 2 MB
    messages pay two slices' fixed costs, the model's grouped sends one; NCCL's own p2p kernel cuts them into
    512 KB chunks, NCCL_P2P_NVL_CHUNKSIZE, which the model does not)."""
    from colls import tune
    from colls.inputs.hardware import load_topology
    from colls.simulate import simulate
    from colls.simulate.baseline import Baseline
    topo = load_topology("dgx-a100", 1)
    coll = Collective("alltoall", 8)
    made = tune.compile_fastest(topo, coll, method, mode="outofplace")
    assert made.report.ok and made.mode == "outofplace"
    assert made.schedule.scratch == 0
    assert all(op.src_buf == "i" and op.dst_buf == "o" for op in made.schedule.ops)
    size = 1 << 30
    own = Baseline(topo, "alltoall", "ring").time(size).time_us       # alltoall: the runtime's grouped sends
    assert simulate(made.program, topo, "alltoall", size)[0].time_us <= own * (1 + 1e-3)
    assert 'inplace="0"' in made.text and 'outofplace="1"' in made.text
    made.schedule.check(inplace=False)
    assert "wait in scratch" not in made.summary()
    both = tune.compile_fastest(topo, coll, method, instances=1, tune_depth=False, mode="both")
    assert both.schedule.info["staged_blocks"] == 7                 # rank 7 receives every block before it sends
    assert "7 blocks a GPU wait in scratch for in-place calls" in both.summary()


def test_a_milp_alltoall_for_out_of_place_calls_lands_in_the_output():
    from colls import pipeline
    topo = topos.switch_node(4)
    made = pipeline.compile_schedule(topo, Collective("alltoall", 4), "milp", mode="outofplace",
                                     options={"time_limit": 2})
    assert made.report.ok and made.schedule.scratch == 0
    assert not any(op.local and op.src_buf == "s" for op in made.schedule.ops)
