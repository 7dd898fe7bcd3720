"""Lowering: every program it produces must verify (the verifier is the oracle), and it must respect
the target's limits by splitting or refuse with a message naming the limit."""

from collections import defaultdict
from dataclasses import replace

import pytest

from colls import msccl, verify
from colls.collectives import Collective
from colls.errors import CollsError
from colls.lower import LowerOptions, lower
from colls.schedule import Op, Schedule
from colls.runtimes import TARGETS

import oracle


def ring_allgather(n: int, chunks: int = 1) -> Schedule:
    ops = []
    for r in range(n):
        ops.append(Op(0, r, r, "i", 0, "o", r * chunks, count=chunks))
    for t in range(n - 1):
        for r in range(n):
            c = (r - t) % n
            src = ("i", 0) if t == 0 else ("o", c * chunks)
            ops.append(Op(t, r, (r + 1) % n, src[0], src[1], "o", c * chunks, count=chunks))
    return Schedule(Collective("allgather", n, chunks), ops, "ring")


def ring_reducescatter(n: int) -> Schedule:
    ops = []
    for t in range(n - 1):
        for r in range(n):
            c = (r - t - 1) % n
            src = ("i", c) if t == 0 else ("t", c)
            last = t == n - 2
            ops.append(Op(t, r, (r + 1) % n, src[0], src[1], "o" if last else "t", 0 if last else c,
                          reduce=("i", c)))
    return Schedule(Collective("reducescatter", n), ops, "ring")


def direct_reducescatter(n: int) -> Schedule:
    """Every rank sends block q to q; q reduces them one after another into its output (so every
    receive after the first waits for the previous one: a chain of cross-threadblock dependencies)."""
    ops = [Op(0, r, r, "i", r, "o", 0) for r in range(n)]
    for r in range(n):
        for d in range(1, n):
            q = (r + d) % n
            ops.append(Op(d, r, q, "i", q, "o", 0, reduce=("o", 0)))
    return Schedule(Collective("reducescatter", n), ops, "direct")


def check(program, target="exe", modes=("inplace", "outofplace")):
    text = msccl.emit(program)
    parsed, findings = msccl.parse(text, "<test>")
    report = verify.verify(parsed, TARGETS[target], findings=findings)
    assert report.ok, report.format()
    return report


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_ring_allgather_fuses_forwarding_and_verifies(n):
    schedule = ring_allgather(n)
    schedule.check()
    program = lower(schedule, TARGETS["exe"])
    check(program)
    types = [st.type for tb in program.gpus[0].tbs for st in tb.steps if st.type != "nop"]
    assert types.count("rcs") == n - 2
    assert program.max_steps() <= n


@pytest.mark.parametrize("n", [2, 4, 7])
def test_ring_reducescatter_keeps_partial_sums_in_flight(n):
    schedule = ring_reducescatter(n)
    schedule.check()
    program = lower(schedule, TARGETS["exe"])
    check(program)
    types = [st.type for tb in program.gpus[0].tbs for st in tb.steps]
    assert types.count("rrs") == n - 2 and "rrc" in types
    assert program.gpus[0].s_chunks == 0


def test_serialised_reductions_get_cross_threadblock_dependencies():
    program = lower(direct_reducescatter(5), TARGETS["exe"])
    check(program)
    deps = [st for tb in program.gpus[0].tbs for st in tb.steps if st.depid >= 0]
    assert deps, "reductions into one chunk from different threadblocks must be ordered"
    waited = {(st.depid, st.deps) for st in deps}
    for tb in program.gpus[0].tbs:
        for st in tb.steps:
            if (tb.id, st.s) in waited:
                assert st.hasdep == 1


def test_more_dependencies_than_one_become_nops():
    # rank 0 reads two chunks received on two different threadblocks in one send: two dependencies
    coll = Collective("allgather", 3, 1)
    ops = [Op(0, r, r, "i", 0, "o", r) for r in range(3)]
    ops += [Op(0, 1, 0, "i", 0, "o", 1), Op(0, 2, 0, "i", 0, "o", 2),
            Op(0, 0, 1, "i", 0, "o", 0), Op(0, 0, 2, "i", 0, "o", 0),
            Op(0, 2, 1, "i", 0, "o", 2), Op(0, 1, 2, "i", 0, "o", 1)]
    schedule = Schedule(coll, ops, "direct")
    schedule.check()
    check(lower(schedule, TARGETS["exe"]))


def test_a_held_send_waits_for_the_op_it_is_held_for():
    """``Op.after``: rank 0's two sends of its own chunk read the input, so both would start at once; held for
    the first (another threadblock, another peer), the second's step waits for the first's, and replication
    keeps each copy's hold within its copy."""
    coll = Collective("allgather", 3, 1)
    ops = [Op(0, r, r, "i", 0, "o", r) for r in range(3)]
    ops += [Op(1, 0, 1, "i", 0, "o", 0, lane=0), Op(2, 0, 2, "i", 0, "o", 0, lane=1, after=(1, 0, 1)),
            Op(1, 1, 0, "i", 0, "o", 1), Op(1, 1, 2, "i", 0, "o", 1, lane=1),
            Op(1, 2, 0, "i", 0, "o", 2), Op(1, 2, 1, "i", 0, "o", 2, lane=1)]
    for copies in (1, 2):
        schedule = Schedule(coll, ops, "direct").replicate(copies)
        schedule.check()
        program = lower(schedule, TARGETS["exe"])
        check(program)
        tbs = {tb.id: tb for tb in program.gpus[0].tbs}
        to2 = [tb for tb in tbs.values() if tb.send == 2]
        to1 = [tb for tb in tbs.values() if tb.send == 1]
        assert len(to2) == len(to1) == copies
        senders = {tb.id for tb in to1}
        waits = [{st.depid for st in tb.steps} & senders for tb in to2]
        assert all(len(w) == 1 for w in waits) and len(set.union(*waits)) == copies    # each copy its own
        for tb in to2:
            for st in tb.steps:
                if st.depid in senders:
                    assert tbs[st.depid].steps[st.deps].hasdep == 1
        free = lower(Schedule(coll, [replace(op, after=()) for op in ops], "direct").replicate(copies),
                     TARGETS["exe"])
        senders = {tb.id for tb in free.gpus[0].tbs if tb.send == 1}
        assert not any(st.depid in senders for tb in free.gpus[0].tbs for st in tb.steps if tb.send == 2)


def test_step_limit_splits_across_channels():
    small = replace(TARGETS["exe"], max_steps=6)
    program = lower(ring_allgather(16), small)
    assert program.max_steps() <= 6
    assert program.nchannels > 1
    check(program)  # verified against the real exe limits too


def test_step_limit_refuses_when_channels_run_out():
    tiny = replace(TARGETS["exe"], max_steps=2, max_channels=2)
    with pytest.raises(CollsError, match="steps in one threadblock.*2 channels"):
        lower(ring_allgather(8), tiny)


def test_threadblocks_beyond_sms_are_refused():
    with pytest.raises(CollsError, match="threadblocks per GPU"):
        lower(direct_reducescatter(6), TARGETS["exe"], LowerOptions(sms=2))


def direct_allgather(n: int, chunks: int) -> Schedule:
    ops = [Op(0, r, r, "i", 0, "o", r * chunks, count=chunks) for r in range(n)]
    ops += [Op(0, r, q, "i", 0, "o", r * chunks, count=chunks) for r in range(n) for q in range(n) if q != r]
    return Schedule(Collective("allgather", n, chunks), ops, "direct")


def test_counts_above_the_step_limit_are_split():
    program = lower(direct_allgather(3, chunks=100), TARGETS["exe"])
    assert max(st.cnt for g in program.gpus for tb in g.tbs for st in tb.steps) <= 71
    check(program)


def test_cyclic_multi_chunk_steps_are_caught_as_deadlocks():
    # Every rank of a ring sending 3 chunks before it receives fills the 2-message FIFOs.
    report = verify.verify(lower(ring_allgather(3, chunks=3), TARGETS["exe"]), TARGETS["exe"])
    assert not report.ok and any(f.rule == "deadlock" for f in report.findings)


@pytest.mark.parametrize("instances", [1, 2, 3])
def test_instances_replicate_on_their_own_channels(instances):
    schedule = ring_allgather(4).replicate(instances)
    schedule.check()
    program = lower(schedule, TARGETS["exe"])
    assert program.nchannels == instances
    assert program.nchunksperloop == 4 * instances
    check(program)


def test_old_target_spells_reduce_scatter_its_way():
    program = lower(ring_reducescatter(4), TARGETS["old"])
    assert program.coll == "reduce_scatter"
    check(program, target="old")


def test_lowering_is_deterministic():
    a = msccl.emit(lower(ring_allgather(6), TARGETS["exe"]))
    b = msccl.emit(lower(ring_allgather(6), TARGETS["exe"]))
    assert a == b


def test_in_flight_fusions_win_the_threadblock_pairing():
    """Rank 1 forwards to rank 2 both copies from rank 0 (fusable, optional) and partial sums from
    rank 3 that stay in flight (they exist only fused, as rrs). Both pairs want send peer 2 on one
    channel and weigh the same; the in-flight pair must get that threadblock."""
    n, c = 4, 3
    coll = Collective("reducescatter", n, c)
    ops = []
    for j in range(c):
        blk = 2 * c + j
        ops += [Op(0, 2, 2, "i", blk, "o", j),                                   # rank 2's own part
                Op(1, 0, 1, "i", blk, "s", j), Op(2, 1, 2, "s", j, "s", j),      # 0 -> 1 -> 2, copies
                Op(1, 3, 1, "i", blk, "t", j, reduce=("i", blk)),                # 3 -> 1, sum in flight
                Op(3, 1, 2, "t", j, "o", j, reduce=("o", j)),                    # 1 -> 2, reduced
                Op(4, 2, 2, "s", j, "o", j, reduce=("o", j))]                    # add rank 0's part
    step = 5
    for dst in (0, 1, 3):
        for j in range(c):
            ops.append(Op(step, dst, dst, "i", dst * c + j, "o", j))
        for src in range(n):
            if src != dst:
                step += 1
                ops += [Op(step, src, dst, "i", dst * c + j, "o", j, reduce=("o", j)) for j in range(c)]
        step += 1
    schedule = Schedule(coll, ops, "test", scratch=c)
    schedule.check()
    program = lower(schedule, TARGETS["exe"])
    check(program)
    rank1 = program.gpus[1]
    fused = [tb for tb in rank1.tbs if any(st.type == "rrs" for st in tb.steps)]
    assert fused and fused[0].recv == 3 and fused[0].send == 2


def fused_steps(program) -> int:
    return sum(st.type in ("rcs", "rrcs", "rrs") for g in program.gpus for tb in g.tbs for st in tb.steps)


def relay_alltoall() -> Schedule:
    """3-rank alltoall where rank 2 relays rank 0's chunk for rank 1. Rank 2's threadblock (receive from 0,
    send to 1) runs its own send (step 3) before the fused receive-forward of the relayed chunk (received
    at step 1, forwarded at step 4), and so before its receive of step 2: its order is not time order.
    Each rank then copies its arrivals from scratch to the output in one copy per run of chunks."""
    ops = [Op(0, r, r, "i", r, "o", r) for r in range(3)]
    ops += [Op(1, 0, 2, "i", 1, "s", 3),   # 0's chunk for 1, parked on the relay
            Op(2, 0, 2, "i", 2, "s", 0),   # 0's chunk for 2
            Op(3, 2, 1, "i", 1, "s", 2),   # 2's own chunk for 1
            Op(4, 2, 1, "s", 3, "s", 0),   # the relayed chunk, forwarded
            Op(1, 1, 0, "i", 0, "s", 1), Op(1, 2, 0, "i", 0, "s", 2), Op(1, 1, 2, "i", 2, "s", 1)]
    ops += [Op(5, 0, 0, "s", 1, "o", 1, count=2), Op(5, 1, 1, "s", 0, "o", 0), Op(5, 1, 1, "s", 2, "o", 2),
            Op(5, 2, 2, "s", 0, "o", 0, count=2)]
    return Schedule(Collective("alltoall", 3), ops, "test", scratch=4)


def test_a_copy_of_a_run_waits_for_every_receive_into_it():
    """Rank 2's copy of s[0:2] waits for rank 2's threadblock (receive 0, send 1): for its receive of
    s[0] at step 2 (the last step there), not for its send of step 3 (which the in-place copy overwrites,
    but which runs first)."""
    schedule = relay_alltoall()
    schedule.check()
    program = lower(schedule, TARGETS["exe"])
    copies = [st for tb in program.gpus[2].tbs for st in tb.steps if st.type == "cpy" and st.cnt == 2]
    assert len(copies) == 1 and fused_steps(program) == 1
    check(program)
    oracle.verdict_holds(program, seeds=10)


def test_a_send_of_a_run_waits_for_every_receive_into_it():
    """Rank 2 receives rank 0's two chunks one by one, the first forwarded to rank 1 by a fused step that
    runs after rank 2's own send, then sends both on to rank 3 in one step."""
    c = 2
    ops = [Op(0, r, r, "i", 0, "o", r * c, count=c) for r in range(4)]
    ops += [Op(1, 0, 2, "i", 0, "o", 0), Op(2, 0, 2, "i", 1, "o", 1),
            Op(3, 2, 1, "i", 0, "o", 4), Op(4, 2, 1, "o", 0, "o", 0),
            Op(5, 2, 3, "o", 0, "o", 0, count=2)]
    have = {(op.dst, op.dst_index + k) for op in ops for k in range(op.count)}
    ops += [Op(6, j // c, r, "i", j % c, "o", j, lane=1) for r in range(4) for j in range(4 * c)
            if (r, j) not in have]
    schedule = Schedule(Collective("allgather", 4, c), ops, "test")
    schedule.check()
    program = lower(schedule, TARGETS["exe"])
    assert any(st.type == "s" and st.cnt == 2 for tb in program.gpus[2].tbs for st in tb.steps)
    assert fused_steps(program) == 1
    check(program)
    oracle.verdict_holds(program, seeds=10)


def crossed_relays() -> Schedule:
    """Allgather on 4 ranks, 3 chunks each: relays 0 and 1 each receive a chunk (from 2, resp. 3) at
    step 1, send their own three chunks to each other at steps 2-4 and forward the received one at step
    5, then send it to the other side (3, resp. 2) at step 6 and forward the other relay's first chunk
    there at step 7. Fused, relay 0's forward of step 5 runs after its three sends to 1; its send of
    step 6 waits for it; the fused forward of step 7, which receives 1's first chunk, waits behind that
    send, so 1's third send to 0 finds the connection full; and the same at relay 1: a wait cycle.
    Everything else goes directly from its owner on another lane."""
    n, c = 4, 3
    ops = [Op(0, r, r, "i", 0, "o", r * c, count=c) for r in range(n)]
    for a, b, p, q in ((0, 1, 2, 3), (1, 0, 3, 2)):
        ops.append(Op(1, p, a, "i", 0, "o", p * c))
        ops += [Op(2 + k, a, b, "i", k, "o", a * c + k) for k in range(c)]
        ops += [Op(5, a, b, "o", p * c, "o", p * c), Op(6, a, q, "o", p * c, "o", p * c),
                Op(7, a, q, "o", b * c, "o", b * c)]
    have = {(op.dst, op.dst_index + k) for op in ops for k in range(op.count)}
    ops += [Op(8, j // c, r, "i", j % c, "o", j, lane=1) for r in range(n) for j in range(n * c)
            if (r, j) not in have]
    return Schedule(Collective("allgather", n, c), ops, "test")


def test_fusion_never_closes_a_wait_cycle():
    schedule = crossed_relays()
    schedule.check()
    program = lower(schedule, TARGETS["exe"])
    check(program)
    oracle.verdict_holds(program, seeds=10)
    # four forwards could fuse; splitting one of them breaks the cycle, the other three stay fused
    assert fused_steps(program) == 3


def _direct_allgather_one_lane(n: int) -> Schedule:
    ops = [Op(0, r, r, "i", 0, "o", r) for r in range(n)]
    ops += [Op(0, r, q, "i", 0, "o", r) for r in range(n) for q in range(n) if q != r]
    return Schedule(Collective("allgather", n), ops, "direct")


def test_more_peers_on_a_channel_than_the_target_allows_are_refused_before_any_instruction(monkeypatch):
    """A direct allgather of 40 ranks on one lane: each rank sends to 39 peers on one channel, and a threadblock
    has one send peer, so exe's 32 threadblocks with a send peer per channel cannot hold it whatever the fusions.
    With no second channel to move peers to (a target of one channel), that is refused from the ops alone (no
    instruction is made), with the count the laid-out threadblocks would show. The older runtime has no such
    limit and lowers it."""
    import colls.lower as lower_mod
    sched = _direct_allgather_one_lane(40)

    def no_instructions(*args, **kwargs):
        raise AssertionError("instructions were made")

    one_channel = replace(TARGETS["exe"], max_channels=1)
    with monkeypatch.context() as m:
        m.setattr(lower_mod, "_instructions", no_instructions)
        with pytest.raises(CollsError, match="needs 39 threadblocks with a peer on one channel; exe allows 32"):
            lower(sched, one_channel)
    program = lower(sched, TARGETS["old"])
    assert verify.verify(program, TARGETS["old"]).ok


def test_peers_beyond_a_channels_threadblocks_move_whole_to_a_channel_of_their_own():
    """The same 40 ranks on exe, which has 32 channels: each rank's connections are shared between two channels,
    at most 32 send and 32 receive peers on each, a connection whole on one of them (both its ends agree), and
    the file proves correct."""
    program = lower(_direct_allgather_one_lane(40), TARGETS["exe"])
    check(program)
    assert verify.verify(program, TARGETS["exe"]).ok
    oracle.verdict_holds(program, seeds=3)
    sends, recvs, chans = defaultdict(set), defaultdict(set), defaultdict(set)
    for g in program.gpus:
        for tb in g.tbs:
            if tb.send >= 0:
                sends[(g.id, tb.chan)].add(tb.send)
                chans[(g.id, tb.send)].add(tb.chan)
            if tb.recv >= 0:
                recvs[(g.id, tb.chan)].add(tb.recv)
    assert {c for g, c in sends} == {0, 1}
    assert max(map(len, sends.values())) <= 32 and max(map(len, recvs.values())) <= 32
    assert all(len(c) == 1 for c in chans.values())
    # every connection: the sender's channel is the receiver's
    recv_chan = {(g.id, tb.recv): tb.chan for g in program.gpus for tb in g.tbs if tb.recv >= 0}
    assert all(recv_chan[(peer, gpu)] == next(iter(c)) for (gpu, peer), c in chans.items())


def test_a_layout_that_fails_with_its_peers_moved_is_refused_at_once(monkeypatch):
    """A direct alltoall on 16 x dgx-h100 (128 GPUs): 127 peers on each rank's channel, more than exe's 32, so
    they are dealt over four; the last rank's 127 copies out of scratch, on the one lane the transfers leave of
    its 132 SMs, then still do not fit a threadblock. More step segments would only leave fewer channels for
    the peers, so the lowering refuses after that one layout, saying both."""
    import colls.lower as lower_mod
    from colls.inputs.hardware import load_topology
    from colls.synth import get_method
    topo = load_topology("dgx-h100", nodes=16)
    schedule = get_method("direct")(topo, Collective("alltoall", topo.ngpus))
    tried = []
    real = lower_mod._lower_once
    monkeypatch.setattr(lower_mod, "_lower_once", lambda *a, **k: tried.append(a[4]) or real(*a, **k))
    with pytest.raises(CollsError, match="steps in one threadblock; exe allows 64, once the peers one channel "
                                         "cannot hold have channels of their own"):
        lower(schedule, TARGETS["exe"], LowerOptions(sms=topo.min_sms(), shape=topo.node_major()))
    assert len(tried) == 1


@pytest.mark.parametrize("profile, nodes, method", [("dgx-a100", 5, "direct"), ("mi250", 3, "ring")])
def test_peers_dealt_to_channels_of_their_own_are_dealt_alike_from_every_rank(profile, nodes, method):
    """An out-of-place alltoall on 5 x dgx-a100 (direct: 40 GPUs, the same rotated by one rank) and on 3 x mi250
    (ring, relaying the GCD pairs with no link: 48 GCDs, the same rotated by one node of 16): 39 and 47 peers a
    rank, more than exe's 32 a channel, so connections go to a second channel. Dealt rank by rank, the parts were
    not the same seen from every rank and the lowering by symmetry gave up (the whole schedule lowered, simulated
    as nearly as many threadblock classes as threadblocks); dealt as classes under the schedule's rotation, the
    ranks of one orbit stand for all. A connection and its reverse share a part, so a peer's send and receive can
    still share a threadblock."""
    from colls.inputs.hardware import load_topology
    from colls.lower import lower_by_symmetry
    from colls.synth import get_method
    topo = load_topology(profile, nodes=nodes)
    n = topo.ngpus
    schedule = get_method(method)(topo, Collective("alltoall", n), inplace=False)
    d = schedule.rotation()[0]
    options = LowerOptions(sms=topo.min_sms(), shape=topo.node_major(), inplace=False)
    program = lower_by_symmetry(schedule, TARGETS["exe"], options)
    assert program is not None and program.nchannels == 2
    sent, received = defaultdict(set), defaultdict(set)     # (rank, peer) -> the channels of the connection
    for g in program.gpus:
        for tb in g.tbs:
            if tb.send >= 0:
                sent[g.id, tb.send].add(tb.chan)
            if tb.recv >= 0:
                received[g.id, tb.recv].add(tb.chan)
    assert all(len(c) == 1 for c in sent.values())
    assert all(sent[a, b] == received[a, b] == sent[b, a] for a, b in sent)
    for (a, b), chans in sent.items():     # rotated by the schedule's d ranks, a connection keeps its channel
        assert sent[(a + d) % n, (b + d) % n] == chans
    assert len({c for chans in sent.values() for c in chans}) == 2
    check(program)


def test_threadblocks_beyond_sms_pack_a_peers_sends_and_receives():
    """Every rank of a 6-rank direct reduce-scatter has a threadblock receiving from each peer and one sending to
    it, 11 with its copy. With 8 SMs the lowering packs the receiving and sending threadblocks of as many peers
    as it takes into one (send and recv that peer), the peers with the fewest instructions first; the program
    still proves, and with room enough nothing is packed."""
    from colls.lower import packed as packed_count
    free = lower(direct_reducescatter(6), TARGETS["exe"])
    assert free.max_tbs() == 11
    assert not any(tb.send == tb.recv >= 0 for g in free.gpus for tb in g.tbs) and packed_count(free) == 0
    packed = lower(direct_reducescatter(6), TARGETS["exe"], LowerOptions(sms=8))
    check(packed)
    assert packed_count(packed) == 3
    for g in packed.gpus:
        assert len(g.tbs) == 8
        both = [tb for tb in g.tbs if tb.send == tb.recv >= 0]
        assert len(both) == 3
        assert all(len(tb.steps) == 2 for tb in both)


def test_more_peers_than_threadblocks_is_refused_before_any_layout():
    """A rank holds a threadblock per peer it sends to or receives from, whichever are more, however its ops
    are laid out on channels: a direct allgather on one DGX A100 (7 peers) within 4 threadblocks is refused at
    once, marked so that a caller trying other layouts (hier's chunks per rail op) stops."""
    from colls.errors import LimitError
    from colls.inputs import hardware
    from colls.synth import direct
    topo = hardware.load_topology("dgx-a100")
    schedule = direct.synthesize(topo, Collective("allgather", topo.ngpus))
    with pytest.raises(LimitError, match="needs 7 threadblocks per GPU") as e:
        lower(schedule, replace(TARGETS["exe"], max_tbs=4))
    assert e.value.any_layout
    assert 7 <= lower(schedule, TARGETS["exe"]).max_tbs()


def test_threadblocks_waited_on_get_the_ids_a_step_can_name_or_the_layout_is_refused():
    """The MSCCL runtimes name the threadblock a step waits on in an int8_t (dependentBid): on a rank with more
    threadblocks than such ids, those waited on come first. A 6-rank direct reduce-scatter has 11 threadblocks a
    rank, 5 of them waited on (one of them the last): with ids 0-4 nameable they are renumbered into 0-4 and the
    program still proves; with 0-3 the lowering refuses and says why, before any file is written."""
    sched = direct_reducescatter(6)
    free = lower(sched, TARGETS["exe"])
    assert any(st.depid == 10 for g in free.gpus for tb in g.tbs for st in tb.steps)
    narrow = replace(TARGETS["exe"], max_dep_tb=4)
    program = lower(sched, narrow)
    check(program)
    for g in program.gpus:
        assert len(g.tbs) == 11
        assert {st.depid for tb in g.tbs for st in tb.steps if st.depid >= 0} <= set(range(5))
    with pytest.raises(CollsError, match="GPU 0 has 5 threadblocks that others wait on; exe names the one a step "
                                         r"waits on in an int8_t \(dependentBid in msccl_struct.h\), so at most 4"):
        lower(sched, replace(TARGETS["exe"], max_dep_tb=3))
    # MSCCL++ plans wait on semaphores: no such limit
    from colls.runtimes import LOWERINGS
    assert LOWERINGS["mscclpp"].max_dep_tb is None and TARGETS["rccl"].max_dep_tb == 127


def test_copies_out_of_scratch_keep_channels_of_their_own_when_the_sending_lanes_share_few():
    """A direct alltoall on 4 x DGX-2 (64 GPUs, 80 SMs): a send and a receive threadblock per peer would leave
    no SM for the copies out of scratch, so the lanes are what one threadblock per peer leaves (the lowering
    packs each peer's two), and while the peers of the sending lane share channels (63 peers, 32 a channel),
    each lane of copies keeps a channel of its own: the last rank's 63 copies fit 64 steps (they were 78 steps
    in one threadblock, refused). The file proves correct in place and out of place."""
    from colls.inputs.hardware import load_topology
    from colls.synth import direct
    topo = load_topology("dgx2", nodes=4)
    assert direct.copy_lanes(topo, 64, None) == 8     # 72 of 80 SMs, 63 for the peers, one for the own block
    schedule = direct.synthesize(topo, Collective("alltoall", topo.ngpus))
    program = lower(schedule, TARGETS["exe"], LowerOptions(sms=topo.min_sms(), shape=topo.node_major()))
    assert program.max_steps() <= 64 and program.max_tbs() <= 80
    last = program.gpus[-1]
    local = [tb for tb in last.tbs if tb.send < 0 and tb.recv < 0]
    assert len({tb.chan for tb in local}) == len(local) > 1
    assert verify.verify(program, TARGETS["exe"], sms=topo.min_sms()).ok


def test_cutting_a_connection_never_undoes_a_cut():
    """A threadblock too long for a plan has its connections cut at the quantiles of their ops' steps, one part
    more each time. Where many ops share a step the quantiles coincide: 6 ops at steps 0, 0, 2, 3, 3, 4 were cut
    at 3, then at 2 and 3, then at 3 again, and so on without end (a trees allreduce plan on 8 x NDv2, whose
    trees of the roots at one place of their nodes run their steps together, lowered for minutes). The cuts
    only grow now, and the search says when they cannot."""
    from colls.lower import _cut_more
    ops = [Op(step, 0, 1, "i", k, "o", k, 1, lane=0) for k, step in enumerate([0, 0, 2, 3, 3, 4])]
    over = [(0, 0, 0, -1, 1, len(ops))]     # GPU 0's threadblock on channel 0 sending to GPU 1
    cuts: dict = {}
    seen = []
    while _cut_more(cuts, over, ops, 1, 5, 1, {0: 0}, TARGETS["exe"]):
        seen.append(list(cuts[0, 1, 0]))
        assert len(seen) <= 5
    assert seen == [[(3, 0)], [(2, 0), (3, 0)]]


def test_a_connection_whose_ops_share_one_step_is_cut_inside_it():
    """The trees of a wave share their steps, so a relay's 8 receives from one peer can all sit at one step: cut
    at step numbers they stay in one threadblock, too long for a plan (8 x DGX A100's trees allreduce plan needed
    49 threadblocks of the 48 its proof holds). They are cut by their places within the step, in an order
    rotation keeps (what each op looks like from its sender), and every op finds its part by that place."""
    from colls.lower import _Cuts, _cut_more, _seg_part
    ops = [Op(6, 7, 0, "i", 10 + k, "o", 10 + k, 1, lane=0) for k in (5, 2, 7, 0, 3, 6, 1, 4)]
    over = [(0, 0, 0, 7, -1, len(ops))]     # GPU 0's threadblock on channel 0 receiving from GPU 7
    cuts = _Cuts()

    def seen(op):
        return op.seen_from(op.src, {}, {"i": 64, "o": 64}, 8)[:-1]
    assert not _cut_more(_Cuts(), over, ops, 1, 8, 1, {0: 0}, TARGETS["exe"])     # by steps alone: no cut
    assert _cut_more(cuts, over, ops, 1, 8, 1, {0: 0}, TARGETS["exe"], seen=seen)
    assert cuts[7, 0, 0] == [(6, 4)]
    parts = {op.src_index: _seg_part(op, op.step, 1, 8, {0: 0}, cuts)[1] for op in ops}
    assert parts == {10 + k: int(k >= 4) for k in range(8)}         # by the order seen from GPU 7: offsets


def shifted_alltoall(n: int) -> Schedule:
    """Rank r sends its block for rank r + d at step d - 1: a rank receives block r - d (into o[r - d]) before
    it sends i[r - d] at step n - 1 - d, so under in-place aliasing (o[p] is i[p]) that send reads what the
    receive wrote."""
    ops = [Op(0, r, r, "i", r, "o", r) for r in range(n)]
    for d in range(1, n):
        ops += [Op(d - 1, r, (r + d) % n, "i", (r + d) % n, "o", r) for r in range(n)]
    return Schedule(Collective("alltoall", n), ops, "direct")


@pytest.mark.parametrize("modes, waits", [((True, True), True), ((False, True), False), ((True, False), True)])
def test_a_file_is_ordered_for_the_calls_it_claims_only(modes, waits):
    """Out-of-place, an alltoall's input and output are distinct: nothing its ops touch overlaps, so a file of
    out-of-place calls only waits for nothing. Ordered as if in place too, the sends of the blocks a rank has
    already received into the same chunks waited for those receives (2 x dgx-a100's ring alltoall: the second
    node's sends all behind its receives, 816 us for a 16 MB call that takes 424)."""
    inplace, outofplace = modes
    program = lower(shifted_alltoall(4), TARGETS["exe"], LowerOptions(inplace=inplace, outofplace=outofplace))
    assert any(st.depid >= 0 for g in program.gpus for tb in g.tbs for st in tb.steps) == waits
    if not inplace:             # in place, this schedule overwrites blocks before sending them (no scratch)
        check(program)
