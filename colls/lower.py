"""Lowering: a neutral Schedule becomes an MSCCL Program for one runtime target.

What the lowering guarantees (and :mod:`colls.verify` then proves on the result):

1. Instructions. Every remote op becomes a send on its source rank and a receive on its destination; a
   receive whose result is the next thing its rank sends on (same chunks, same channel, nothing writes
   them in between) is fused with that send into one instruction (``rcs``, ``rrcs``, ``rrs``); a local
   op becomes ``cpy`` or ``re``. Ops of more chunks than a step may carry are split.
2. Order. Every instruction has a time, the (step, position) key of the op it starts with (a fused
   instruction: its receive's). Threadblocks run their receives in the order of their ops' keys and
   their sends likewise, which is the order the other end of each connection uses: the FIFO order of
   every (sender, receiver, channel) is consistent by construction. Between the two, earlier time first;
   a fused instruction waits for the sends before its own send, so it may run after instructions of a
   later time. (A fused instruction that cannot be placed is split again.)
3. Dependencies. Every instruction waits for the earlier instructions that touch the same memory (read
   after write, write after read, write after write), chunk by chunk, computed under the buffer aliasing of
   every call the file claims (out-of-place, in-place, or both, so one program is right for both calls: a
   file of out-of-place calls only is not ordered as if its input were its output). Within a threadblock the
   order already implies them; across threadblocks the last of them in each other threadblock's order
   is waited on, with ``nop`` steps carrying the extra dependencies.
   No wait cycle. Without fusion everything an instruction waits for has an earlier time, so no
   dependency or message can form a cycle; a fused instruction that runs after a later time can close
   one (a relay's forward waiting behind its sends, whose receiver waits behind the same at the other
   end). The lowering builds the graph of what each step waits for (the step before it, its
   dependencies, the message it receives, FIFO room for the one it sends) and splits fused instructions
   until it has no cycle. That graph is exact for calls small enough that every step is one message;
   what it cannot fix (a cycle of in-flight ``rrs`` fusions alone, which cannot be split; a hang only
   of large calls, whose steps the runtime cuts into several messages) is left for the verifier to find.
4. Limits. Lanes become channels. When a threadblock would exceed the target's step limit, the
   schedule's steps are cut into segments, each on channels of its own, until it fits; when channels,
   threadblocks per GPU (the SM count) or threadblocks per channel run out, lowering refuses with a
   message that names the limit.
"""

from __future__ import annotations

import bisect
import functools
import heapq
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from typing import Callable

import networkx as nx

from colls.collectives import Collective
from colls.errors import CollsError, LimitError
from colls.program import Gpu, Program, Step, Threadblock, rotated
from colls.schedule import TRANSIENT, Op, Schedule, channel_peers, fewest_threadblocks
from colls.runtimes import Target
from colls.verify.execution import fifo_messages
from colls.topology import node_rotation, rank_offset


@dataclass
class LowerOptions:
    proto: str = "Simple"
    min_bytes: int = 0
    max_bytes: int = 0
    inplace: bool = True
    outofplace: bool = True
    name: str | None = None
    sms: int | None = None  # threadblocks per GPU must not exceed this (all resident at once)
    shape: tuple = (0, 0)   # the machine's node-major layout (Topology.node_major): peers ordered by offset
    # a limit the step count only approximates (MSCCL++'s ops per threadblock): the threadblocks of a program
    # it refuses, as (gpu, tb id), among its ranks 0..d-1 (all when d is None); their connections are cut onto
    # more channels, then every threadblock
    fits: Callable[[Program, int | None], list] | None = field(default=None, compare=False)


@dataclass(eq=False, slots=True)
class _Instr:
    rank: int
    time: tuple
    chan: int
    recv: Op | None = None
    send: Op | None = None
    send_time: tuple | None = None
    recv_time: tuple | None = None
    local: Op | None = None
    deps: set = field(default_factory=set)
    tb: "_Tb | None" = None
    pos: int = -1    # place in its tb's order (set by _order)
    index: int = -1  # final step index in its tb (after nops)

    @property
    def recv_peer(self) -> int:
        return self.recv.src if self.recv is not None else -1

    @property
    def send_peer(self) -> int:
        return self.send.dst if self.send is not None else -1


@dataclass(eq=False, slots=True)
class _Tb:
    rank: int
    chan: int
    recv: int = -1
    send: int = -1
    instrs: list = field(default_factory=list)
    id: int = -1


def lower(schedule: Schedule, target: Target, options: LowerOptions | None = None) -> Program:
    """Turn ``schedule`` into a Program that fits ``target``'s limits (or raise CollsError)."""
    return _lower_all(schedule, target, options or LowerOptions())


class _Asymmetric(Exception):
    """The lowering of one orbit's ranks cannot stand for every rank (see :func:`lower_by_symmetry`)."""


def lower_by_symmetry(schedule: Schedule, target: Target, options: LowerOptions | None = None) -> Program | None:
    """:func:`lower` for a schedule that rotation by ``d`` ranks maps onto itself (:meth:`Schedule.rotation`):
    only ranks ``0..d-1`` are lowered, from the ops they send or receive, and every other rank gets its
    representative's program relabelled (:func:`colls.program.rotated`). None where the schedule has no such
    symmetry, where what one rank waits for would have to be cut by a fusion split, or, with a limit the steps
    only approximate (``options.fits``, MSCCL++'s ops), where no rotation by whole nodes maps the schedule onto
    itself (the whole schedule is then lowered by :func:`lower`). That limit is asked of ranks ``0..d-1`` of the
    program rotated whole, and a connection it has cut is cut at the same steps in every image: the whole
    lowering, whose program is the same at every rank of an orbit, refuses every image of a refused
    threadblock and cuts every image of its connections at the same steps.

    Every choice the lowering makes for a rank (segments, fusions, threadblocks, dependencies, order) reads
    only that rank's ops, in the schedule's order; the one global question, whether a small call can wait on
    itself, is asked of the quotient graph (the images of an instruction as one node): a cycle of the whole
    graph is a closed walk of the quotient, so a quotient without one leaves the whole graph without one. The
    file is proved like any other (:mod:`colls.verify` checks the symmetry it finds there itself)."""
    options = options or LowerOptions()
    rot = schedule.rotation()
    if rot is None:
        return None
    shift, slices = rot
    coll = schedule.collective
    if options.fits is not None:
        # what options.fits counts (a threadblock's ops in an MSCCL++ plan) also depends on which peers share a
        # node (memory or port channels): rotated by a whole number of nodes as well, every rank's count is its
        # representative's (colls.mscclpp.over_budget's ranks; tests/test_mscclpp.py compares both ways)
        shift = node_rotation(shift, options.shape)
        if shift is None:
            return None
    try:
        program = _lower_all(schedule, target, options, (shift, slices))
    except _Asymmetric:
        return None
    program.gpus = rotated(program.gpus, coll.nranks, shift, slices, {"i": coll.in_chunks, "o": coll.out_chunks})
    return program


def _lower_all(schedule: Schedule, target: Target, options: LowerOptions, sym: tuple | None = None) -> Program:
    """:func:`lower`; with ``sym = (d, slices)`` (:meth:`Schedule.rotation`), the program of ranks ``0..d-1``
    only (:func:`lower_by_symmetry`; ``_lower_once`` gets it with the ops' images, :func:`_images`)."""
    # Within a step, local ops go last: a rank's first sends then never wait for its own copies.
    all_ops = _split_counts(schedule.execution_order(), target.max_cnt - 1)
    lanes = sorted({op.lane for op in all_ops})
    sending = {op.lane for op in all_ops if not op.local}
    if sym is not None:
        all_ops = [op for op in all_ops if op.src < sym[0] or op.dst < sym[0]]
        sym = sym + (_images(all_ops, schedule.collective, *sym),)
    nsteps = max(1, schedule.nsteps)
    coll = schedule.collective
    slices, sizes = (sym[1] if sym is not None else {}), {"i": coll.in_chunks, "o": coll.out_chunks}

    def seen(op: Op) -> tuple:          # an op as its sender sees it: the same for its images under rotation
        return op.seen_from(op.src, slices, sizes, coll.nranks)[:-1]
    limit_tbs = min(target.max_tbs, options.sms) if options.sms else target.max_tbs
    # whatever the layout, a rank holds a threadblock per peer it sends to or receives from, whichever are more
    # (all on one channel; channels, segments and lanes only add): too many, and no segmenting can help
    try:
        _check_tbs(schedule, max(fewest_threadblocks(channel_peers(all_ops, lambda op: 0)).values(), default=0),
                   limit_tbs, options, target)
    except LimitError as e:
        e.any_layout = True     # the same peers in any layout: a caller trying other layouts may stop here
        raise
    last_error = None

    @functools.cache
    def shift() -> int | None:          # the schedule's smallest rotation, asked only where peers need parts
        rot = schedule.rotation()
        return rot and rot[0]
    # a method that knows its segments (rings) says where to start; fewer would not fit anyway. Nor would
    # fewer than a lane's busiest connection needs: its ops stay on one channel per segment, and nseg
    # segments leave at least 1/nseg of them in one (cutting a chain only adds ops)
    need = -(-_least_steps(all_ops, lambda op: op.lane) // target.max_steps)
    for nseg in range(min(max(schedule.info.get("min_segments", 1), need), target.max_channels),
                      target.max_channels + 1):
        most = max(1, target.max_channels // nseg)
        base = min(len(lanes), most)
        if base * nseg > target.max_channels:
            break
        while True:     # lanes share channels where a rank's peers need channels of their own (_peer_parts)
            # a lane of local copies only (an alltoall's copies out of scratch) has no connection to share a
            # channel with: it keeps a channel (and its threadblock) of its own while the lanes that send share
            lane_chan = {lane: (k % (base if lane in sending else most)) * nseg for k, lane in enumerate(lanes)}
            cuts = _peer_parts(all_ops, nseg, nsteps, base, lane_chan, target, coll.nranks, shift)
            if cuts is not None or base == 1:
                break
            base = (base + 1) // 2
        moved, cuts = bool(cuts), _Cuts(cuts or {})
        # connections cut at steps (channel c's part k on channel c + k x base x nseg): where a limit the
        # steps only approximate (options.fits) refuses a threadblock, the connections it uses are cut in
        # more parts, each on a channel of its own, before every threadblock is cut (the next nseg)
        while True:
            program, last_error, over = _lower_once(schedule, target, options, all_ops, nseg, nsteps, base,
                                                    len(lanes), lane_chan, cuts, limit_tbs, sym)
            if program is not None and not over:
                return program
            stuck = _indivisible(over, all_ops, nseg, nsteps, base, lane_chan, cuts) if over else None
            if stuck is not None:
                (src, dst), step = stuck
                raise LimitError(f"{schedule.method} {schedule.collective.kind}: GPU {src}'s transfer to GPU {dst} "
                                 f"at step {step} does not fit a threadblock of {target.name} by itself; try fewer "
                                 "--instances or --chunks, or another --method")
            if not over or not _cut_more(cuts, over, all_ops, nseg, nsteps, base, lane_chan, target,
                                         None if sym is None else (sym[0], schedule.collective.nranks), seen):
                break
        if moved:   # more segments only leave fewer channels for the peers (or none): refused now, not after all
            raise LimitError(f"{last_error}, once the peers one channel cannot hold have channels of their "
                             f"own; try fewer --rings, --instances or --chunks, or another --method")
    raise LimitError(f"{last_error}, and splitting it across channels would need more than "
                     f"{target.max_channels} channels; try fewer --rings, --instances or --chunks"
                     + ("" if target.name == "old" else ", or --target old (256 steps)"))


def _lower_once(schedule: Schedule, target: Target, options: LowerOptions, all_ops: list, nseg: int,
                nsteps: int, base: int, nlanes: int, lane_chan: dict, cuts: dict, limit_tbs: int,
                sym: tuple | None = None):
    """One lowering with ``nseg`` step segments and the connections of ``cuts`` cut: (program or None, why
    not, the threadblocks ``options.fits`` refuses as (gpu, tb id, channel, recv peer, send peer)). Raises
    LimitError where more segments cannot help (threadblocks, channels of too many lanes)."""
    width = base * nseg

    def seg_of(op: Op, step: int) -> tuple:
        return _seg_part(op, step, nseg, nsteps, lane_chan, cuts)

    def chan_before(op: Op) -> int:     # an op's channel, known before the segments' stores are added
        return _channel_before(op, nseg, nsteps, base, lane_chan, cuts)

    least = _least_steps(all_ops, chan_before)  # the stores only add steps: too many already, none will fit
    if least > target.max_steps:
        return None, (f"{schedule.method} {schedule.collective.kind}: needs at least {least} steps "
                      f"in one threadblock; {target.name} allows {target.max_steps}"), []
    ops, segs, scratch = _segment(all_ops, schedule.scratch, seg_of)
    keys = {id(op): (op.step, i) for i, op in enumerate(ops)}
    # by symmetry: each op received outside ranks 0..d-1 -> its image received inside (the quotient's edges)
    reps = None if sym is None else sym[0]
    image = None if sym is None else {id(ops[i]): ops[j] for i, j in sym[2].items()}

    def chan_of(op: Op) -> int:
        seg, part = segs[id(op)]
        return lane_chan[op.lane] + seg + part * width

    least = _least_steps(ops, chan_of)
    if least > target.max_steps:  # no threadblock layout can fit: try more segments at once
        return None, (f"{schedule.method} {schedule.collective.kind}: needs at least {least} steps "
                      f"in one threadblock; {target.name} allows {target.max_steps}"), []
    one_segment = nseg == 1 and not cuts    # a refusal here: shorter threadblocks would be laid out alike
    _check_peers(schedule, ops, chan_of, limit_tbs, options, target, one_segment)
    no_fuse = set()  # keyed by the ids of this segmentation's ops
    aliasings = _aliasings(options)
    forwards = _forward_candidates(ops, schedule.collective, aliasings)
    held = any(op.after for op in ops)     # sends a method holds (Op.after): milp's alone
    while True:
        try:
            instrs = _instructions(ops, keys, chan_of, no_fuse, forwards, options.shape, reps)
        except CollsError:
            if base == nlanes:
                raise
            raise LimitError(
                f"{schedule.method} {schedule.collective.kind}: {nlanes} lanes (rings, trees or "
                f"instances) split into {nseg} step segments of at most {target.max_steps} steps "
                f"need {nlanes * nseg} channels; {target.name} allows {target.max_channels}; "
                f"try fewer --rings, --instances or --chunks"
                + ("" if target.name == "old" else ", or --target old")) from None
        tbs, bad = _threadblocks(instrs, options.shape, limit_tbs)
        # a rank's threadblocks, and those with a send (receive) peer on one channel: splitting a fusion never
        # merges two (one per peer and direction on a channel), so they are refused as soon as they are laid out
        _check_tbs(schedule, max(Counter(tb.rank for tb in tbs).values(), default=0), limit_tbs, options, target,
                   one_segment)
        _check_per_channel(schedule, max(Counter((tb.rank, tb.chan, d) for tb in tbs for d, peer in
                                                 (("s", tb.send), ("r", tb.recv)) if peer >= 0).values(),
                                         default=0), target)
        longest = max((len(tb.instrs) for tb in tbs), default=0)
        if longest > target.max_steps:   # splitting fusions and adding nops only lengthen threadblocks
            return None, (f"{schedule.method} {schedule.collective.kind}: needs at least {longest} steps in "
                          f"one threadblock; {target.name} allows {target.max_steps}"), []
        if not bad:
            _dependencies(instrs, schedule.collective, aliasings)
            if held:
                _holds(instrs)
            bad = _order(tbs)
        if not bad:
            bad = _wait_cycles(instrs, tbs, fifo_messages(options.proto), image)
        if not bad:
            break
        if bad <= no_fuse:
            raise AssertionError("lowering could not resolve a fusion conflict")
        no_fuse |= bad
    program = _assemble(schedule, tbs, options, target, scratch, reps)  # one Threadblock per _Tb: checked above
    steps = program.max_steps()
    if steps > target.max_steps:
        return None, (f"{schedule.method} {schedule.collective.kind}: needs {steps} steps in one "
                      f"threadblock; {target.name} allows {target.max_steps}"), []
    refused = []
    if options.fits is not None:
        whole = program
        if sym is not None:     # the peers' threadblocks say what a connection carries: every rank, relabelled
            coll = schedule.collective
            whole = replace(program, gpus=rotated(program.gpus, coll.nranks, reps, sym[1],
                                                  {"i": coll.in_chunks, "o": coll.out_chunks}))
        refused = options.fits(whole, reps)
    if refused:
        by_id = {(g.id, tb.id): tb for g in program.gpus for tb in g.tbs}
        over = [(gpu, tid, by_id[gpu, tid].chan, by_id[gpu, tid].recv, by_id[gpu, tid].send,
                 len(by_id[gpu, tid].steps)) for gpu, tid in refused]
        return program, (f"{schedule.method} {schedule.collective.kind}: a threadblock of {steps} steps does "
                         f"not fit {target.name}"), over
    return program, None, []


def _images(all_ops: list[Op], coll: Collective, reps: int, slices: dict) -> dict:
    """Index of an op of ``all_ops`` received outside ranks ``0..reps-1`` -> index of its image received
    inside: the op rotated by a multiple of ``reps`` ranks, found by the ops' fields before segmenting (the
    segmented ops keep the indices; segmenting moves a cut chain's slots rank by rank, and in-flight numbers
    are not compared, as :meth:`Schedule.rotation` does not)."""
    n = coll.nranks
    sizes = {"i": coll.in_chunks, "o": coll.out_chunks}
    inside = {}
    for i, op in enumerate(all_ops):
        if op.dst < reps and not op.local:
            inside.setdefault(op.seen_from(0, slices, sizes, n), []).append(i)
    out = {}
    for i, op in enumerate(all_ops):
        if op.dst >= reps and not op.local:
            found = inside.get(op.seen_from(op.dst - op.dst % reps, slices, sizes, n))
            if not found:
                raise _Asymmetric(f"{op.describe()} has no image received by ranks 0..{reps - 1}")
            out[i] = found[0]
    return out


def _check_peers(schedule: Schedule, ops: list, chan_of, limit_tbs: int, options: LowerOptions,
                 target: Target, one_segment: bool = False) -> None:
    """Refuse, before any instruction is made, what the threadblocks laid out from ``ops`` would break whatever
    the fusions: a threadblock has one send peer and one receive peer on its channel, so a rank has at least as
    many threadblocks with a send (receive) peer on a channel as distinct peers it sends to (receives from)
    there, and at least the larger of the two on each channel (the counts :func:`_check_tbs` and
    :func:`_check_per_channel` test once the threadblocks are laid out, which only splitting fusions adds to)."""
    peers = channel_peers(ops, chan_of)
    if not peers:
        return
    _check_per_channel(schedule, max(len(p) for p in peers.values()), target)
    _check_tbs(schedule, max(fewest_threadblocks(peers).values()), limit_tbs, options, target, one_segment)


def _check_tbs(schedule: Schedule, tbmax: int, limit_tbs: int, options: LowerOptions, target: Target,
               one_segment: bool = False) -> None:
    """Refuse more than ``limit_tbs`` threadblocks on a GPU; ``one_segment``: the layout counted had one step
    segment and no connection cut (:class:`colls.errors.LimitError`)."""
    if tbmax > limit_tbs:
        what = f"the GPU's {options.sms} SMs" if options.sms and options.sms < target.max_tbs \
            else f"--max-threadblocks {target.tbs_budget}" if target.tbs_budget == target.max_tbs \
            else target.tbs_why if target.tbs_why else f"the target's {target.max_tbs}"
        why = "" if target.tbs_why and what == target.tbs_why else " (threadblocks must all be resident)"
        raise LimitError(f"{schedule.method} {schedule.collective.kind}: needs {tbmax} threadblocks "
                         f"per GPU, more than {what}{why}; try fewer --instances or --chunks, or another --method",
                         limit="threadblocks", one_segment=one_segment)


def _check_per_channel(schedule: Schedule, per_chan: int, target: Target) -> None:
    if target.max_tbs_per_channel and per_chan > target.max_tbs_per_channel:
        raise LimitError(f"{schedule.method} {schedule.collective.kind}: needs {per_chan} threadblocks "
                         f"with a peer on one channel; {target.name} allows "
                         f"{target.max_tbs_per_channel}; try fewer --instances or --chunks, or "
                         f"another --method")


def _step_segment(step: int, nseg: int, nsteps: int) -> int:
    """The step segment (of ``nseg`` equal ones over ``nsteps`` steps) a step falls in."""
    return min(nseg - 1, step * nseg // nsteps)


# A cut point (step, k) of a connection: its ops from the k-th of that step on (in the order of
# :attr:`_Cuts.within`) go to the next part. WHOLE puts every op in the next part (:func:`_peer_parts`).
WHOLE = (-1, 0)


class _Cuts(dict):
    """(src, dst, channel) -> the sorted cut points of that connection (each ``(step, k)``, :data:`WHOLE`); an op
    is in the part after every point at or before ``(its step, its place)``. ``within``: id(op) -> its place
    among the ops of its connection at its step, by what the op looks like from its sender
    (:meth:`colls.schedule.Op.seen_from`, which rotation keeps): set only for connections cut inside a step
    (:func:`_cut_more`), every other op's place counts as 0, so a cut ``(step, 0)`` is one at the step."""

    def __init__(self, *args):
        super().__init__(*args)
        self.within: dict = {}


def _peer_parts(all_ops: list, nseg: int, nsteps: int, base: int, lane_chan: dict,
                target: Target, nranks: int, shift) -> dict | None:
    """Connections moved whole to channels of their own where a rank has more send (receive) peers on one
    channel than the target's threadblocks with a peer per channel: a tree's root or a NIC's GPU that sends
    to a GPU on every other node (7 in its node and 31 across on 32 nodes of 8) cannot hold all of them on its
    lane's channel, whatever the threadblocks. Connection (src, dst) of channel c goes to part k, channel
    c + k x base x nseg (the parts :func:`_cut_more` cuts by steps; ``cuts`` of k times :data:`WHOLE` put every
    op in part k): of the fewest parts that hold them, the one with the fewest peers on both its ends that has room
    for it. Empty where every channel fits; None where the parts the channels leave room for cannot hold the
    peers (the caller puts more lanes on a channel, or :func:`_check_peers` refuses the layout and says why).

    A connection and its reverse go to one part, so that the lowering can still pack a peer's send and receive on
    one threadblock (:func:`_pack`). ``shift()``: the smallest rotation d that maps the schedule onto itself
    (:meth:`Schedule.rotation`), or None; the connections are dealt as classes under it (one decision for a
    connection and all its images, the peers counted per class of ranks, r mod d), so that the parts are the same
    seen from every rank: the whole lowering and the lowering of ranks ``0..d-1`` by symmetry
    (:func:`lower_by_symmetry`, whose ``all_ops`` are theirs only) deal alike. Dealt rank by rank they were not,
    and a schedule whose peers needed parts was lowered whole (4 x MI250's ring alltoall: simulated as 3,802
    threadblocks of 4,096 unlike, 48 s at 1 GB)."""
    limit = target.max_tbs_per_channel
    width = base * nseg
    conns = {(lane_chan[op.lane] + _step_segment(op.step, nseg, nsteps), op.src, op.dst)
             for op in all_ops if not op.local}
    sends, recvs = Counter((c, s) for c, s, _ in conns), Counter((c, d) for c, _, d in conns)
    most = max(max(sends.values(), default=0), max(recvs.values(), default=0))
    if not limit or most <= limit:
        return {}
    n = nranks
    d = shift() or n

    def rep(c: int, src: int, dst: int) -> tuple:       # the connection's class: its image sent by ranks 0..d-1
        return c, src % d, (dst - src + src % d) % n
    classes = {rep(*csd) for csd in conns}
    units: dict = {}            # a class and its reverse's, as one: the smaller -> both
    for x in classes:
        c, a, b = x
        back = rep(c, b, a)
        key = min(x, back) if back in classes else x
        units.setdefault(key, set()).add(x)
    order = sorted(units)
    for parts in range(-(-most // limit), target.max_channels // width + 1):
        used: dict = defaultdict(int)     # (rank class, channel, part, "s" or "r") -> peers placed there
        part: dict = {}
        for key in order:
            need = Counter()
            for c, a, b in units[key]:
                need[(a, c, "s")] += 1
                need[(b % d, c, "r")] += 1
            room = [k for k in range(parts) if all(used[(r, c, k, w)] + m <= limit for (r, c, w), m in need.items())]
            if not room:
                break
            k = min(room, key=lambda k: (max(used[(r, c, k, w)] for (r, c, w) in need), k))
            for (r, c, w), m in need.items():
                used[(r, c, k, w)] += m
            for x in units[key]:
                part[x] = k
        else:       # every class's images (rotation maps the schedule's connections onto themselves)
            return {((a + k) % n, (b + k) % n, c): [WHOLE] * p for (c, a, b), p in part.items() if p
                    for k in range(0, n, d)}
    return None


def _cut_more(cuts: _Cuts, over: list, all_ops: list, nseg: int, nsteps: int, base: int, lane_chan: dict,
              target: Target, sym: tuple | None = None, seen=None) -> bool:
    """Cut the connections the refused threadblocks ``over`` use (their receive and their send) in one
    part more, at the quantiles of their ops' steps; where those make no new cut (every op of the connection
    at one step or two: a trees wave's), at the quantiles of the ops' places within their steps (``seen(op)``:
    the order, :class:`_Cuts`); False when that needs more channels than the target has, or cuts nothing new
    (the caller then cuts every threadblock: more step segments). ``sym = (d, n)``:
    ``over`` and ``all_ops`` are those of ranks ``0..d-1`` (:func:`lower_by_symmetry`), and each connection
    cut is cut alike in its images under rotation by ``d`` of ``n`` ranks (a step keeps its number, and an op
    its place within it)."""
    width = base * nseg
    wanted = set()
    for gpu, _, chan, recv, send, _ in over:
        c = chan % width
        if recv is not None and recv >= 0:
            wanted.add((recv, gpu, c))
        if send is not None and send >= 0:
            wanted.add((gpu, send, c))
    held: dict = defaultdict(list)
    for op in all_ops:
        if not op.local:
            key = (op.src, op.dst, lane_chan[op.lane] + _step_segment(op.step, nseg, nsteps))
            if key in wanted:
                held[key].append(op)
    made = {}
    for key, ops in held.items():
        if cuts.get(key, [None])[0] == WHOLE:   # moved whole by _peer_parts: its peers' channel stays
            continue
        parts = len(cuts.get(key, ())) + 2
        if parts * width > target.max_channels:
            return False
        old = cuts.get(key, [])
        new = _more_points(old, sorted((op.step, 0) for op in ops), parts)
        if new == old and seen is not None:     # one step holds them: cut inside it
            _place(cuts, all_ops, {(op.src, op.dst) for op in ops}, seen)
            new = _more_points(old, sorted((op.step, cuts.within[id(op)]) for op in ops), parts)
        if new != old:
            made[key] = new
    for key, new in made.items():       # after all: a key and its image may both be wanted
        cuts[key] = new
        if sym is not None:
            (d, n), (src, dst, c) = sym, key
            images = [((src + k) % n, (dst + k) % n, c) for k in range(d, n, d)]
            for image in images:
                cuts[image] = new
            if any(k for _, k in new):
                _place(cuts, all_ops, {(a, b) for a, b, _ in images}, seen)
    return bool(made)


def _more_points(old: list, at: list, parts: int) -> list:
    """The cut points of a connection whose ops sit at the sorted keys ``at`` cut in ``parts`` parts: at their
    quantiles, never before the first. The points only grow: many ops at one key make quantiles that coincide
    and cut in no more parts, and taken alone they undid the last cut, round and round (0, 0, 2, 3, 3, 4 was
    cut at 3, then at 2 and 3, then at 3 ...)."""
    new = sorted({at[len(at) * i // parts] for i in range(1, parts)} - {at[0]})
    if len(new) <= len(old):
        new = sorted(set(old) | set(new))
    return new


def _place(cuts: _Cuts, all_ops: list, pairs: set, seen) -> None:
    """Set ``cuts.within`` for the ops of the connections ``pairs`` (src, dst): each op's place among those of
    its connection at its step, in the order of ``seen``."""
    groups: dict = defaultdict(list)
    for op in all_ops:
        if not op.local and (op.src, op.dst) in pairs and id(op) not in cuts.within:
            groups[(op.src, op.dst, op.step)].append(op)
    for group in groups.values():
        for k, op in enumerate(sorted(group, key=seen)):
            cuts.within[id(op)] = k


def _seg_part(op: Op, step: int, nseg: int, nsteps: int, lane_chan: dict, cuts: dict) -> tuple:
    """(step segment, part of its connection's cut) of ``op`` were it at ``step``."""
    seg = _step_segment(step, nseg, nsteps)
    if op.local or not cuts:
        return seg, 0
    at = cuts.get((op.src, op.dst, lane_chan[op.lane] + seg))
    return seg, (bisect.bisect_right(at, (step, cuts.within.get(id(op), 0))) if at else 0)


def _channel_before(op: Op, nseg: int, nsteps: int, base: int, lane_chan: dict, cuts: dict) -> int:
    """``op``'s channel with ``nseg`` step segments and the connections of ``cuts`` cut, before the segments'
    stores are added (channel c's part k on channel c + k x base x nseg)."""
    seg, part = _seg_part(op, op.step, nseg, nsteps, lane_chan, cuts)
    return lane_chan[op.lane] + seg + part * base * nseg


def _indivisible(over: list, all_ops: list, nseg: int, nsteps: int, base: int, lane_chan: dict,
                 cuts: dict) -> tuple | None:
    """A refused threadblock (of ``over``, as :func:`_lower_once` gives them) that holds one transfer alone:
    ((src, dst), step), or None. Cuts (:func:`_cut_more`, at step numbers and within a step) and step segments
    split a connection's transfers, never one transfer, so it is refused in every layout the search would try
    (the search through them took 60 s and 2.2 GB once, when one step's transfers could not be split)."""
    alone = [((gpu, send) if send is not None and send >= 0 else (recv, gpu)) + (chan,)
             for gpu, _, chan, recv, send, steps in over
             if steps == 1 and (send is not None and send >= 0) != (recv is not None and recv >= 0)]
    if not alone:               # the usual case: nothing to look up among all the ops
        return None
    held: dict = {key: [] for key in alone}     # (src, dst, channel) of those -> the step of each transfer on it
    for op in all_ops:
        if not op.local:
            key = (op.src, op.dst, _channel_before(op, nseg, nsteps, base, lane_chan, cuts))
            if key in held:
                held[key].append(op.step)
    for key in alone:                           # in the order the threadblocks were refused
        if len(held[key]) == 1:
            return key[:2], held[key][0]
    return None


def _least_steps(ops: list[Op], chan_of) -> int:
    """A lower bound on the steps of the busiest threadblock: every op received from one peer on one
    channel is an instruction of the one threadblock with that receive peer, and likewise for sends."""
    count: dict = defaultdict(int)
    for op in ops:
        if not op.local:
            c = chan_of(op)
            count[(op.dst, c, "r", op.src)] += 1
            count[(op.src, c, "s", op.dst)] += 1
    return max(count.values(), default=0)


def _split_counts(ops: list[Op], max_cnt: int) -> list[Op]:
    """Cut ops of more than ``max_cnt`` chunks into pieces, piece k on a lane of its own.

    Pieces on one connection would be several messages per stage of a pipeline, and a ring whose
    every rank sends two messages before it receives fills the connection FIFOs and deadlocks; on
    separate lanes (channels) each connection keeps one message per stage. A local copy or reduce uses
    no connection: its pieces stay on its lane (new lanes would take channels the ring's step segments
    need: a broadcast root's copy of 128 chunks would double the lanes of 8 rings).
    """
    if all(op.count <= max_cnt for op in ops):
        return ops
    stride = 1 + max(op.lane for op in ops)
    out = []
    for op in ops:
        if op.count <= max_cnt:
            out.append(op)
            continue
        for piece, start in enumerate(range(0, op.count, max_cnt)):
            n = min(max_cnt, op.count - start)
            out.append(replace(op, count=n, src_index=op.src_index + start,
                               dst_index=op.dst_index + start,
                               lane=op.lane if op.local else op.lane + piece * stride,
                               reduce=None if op.reduce is None else (op.reduce[0], op.reduce[1] + start)))
    return out


def _segment(ops: list[Op], scratch: int, seg_of) -> tuple[list[Op], dict, int]:
    """The segments the ops fall in, with in-flight values stored where a chain crosses one.

    ``seg_of(op, step)``: the segment of ``op`` were it at ``step`` (its step segment and its part of a cut
    connection). An op that forwards an in-flight value must become one instruction with the op that
    produced it, so it keeps that op's segment (and channel). A chain that would cross into another segment
    (a ring reduce-scatter of N ranks is one chain of N-1 steps) is cut there instead: the producing op
    stores the partial result in a scratch chunk of its own on the receiving rank (a receive-reduce-copy at
    the end of one segment), and the forwarding op sends it from there (a send at the start of the next
    segment, which waits for the store). Returns (ops, id(op) -> segment, scratch chunks per rank).
    """
    out = list(ops)
    producer: dict = {}  # in-flight slot -> index in out of the op that produced it
    segs: dict = {}      # index in out -> segment
    used: dict = defaultdict(int)
    for i, op in enumerate(out):
        own = seg_of(op, op.step)
        if op.src_buf == TRANSIENT and (op.src, op.src_buf, op.src_index) in producer:
            j = producer.pop((op.src, op.src_buf, op.src_index))
            if segs[j] != own:
                slot = scratch + used[op.src]
                used[op.src] += op.count
                out[j] = replace(out[j], dst_buf="s", dst_index=slot)
                op = out[i] = replace(op, src_buf="s", src_index=slot)
        segs[i] = own
        if op.dst_buf == TRANSIENT:
            producer[(op.dst, op.dst_buf, op.dst_index)] = i
    return out, {id(op): segs[i] for i, op in enumerate(out)}, scratch + max(used.values(), default=0)


def _forward_candidates(ops, coll: Collective, aliasings: tuple) -> dict:
    """For each remote op, the remote op whose received result it sends on unchanged (nothing on that rank
    wrote those chunks, under any of ``aliasings``, in between), or None. It depends on the ops' order alone,
    so the retries of :func:`_instructions` (fusions refused one conflict at a time) share it."""
    last_writer: dict = {}  # location -> the latest op writing it
    out: dict = {}
    for op in ops:
        if not op.local:
            out[id(op)] = _forwarded(op, _locations(op.src_slots(), coll, aliasings), last_writer)
        for loc in _locations(op.dst_slots(), coll, aliasings):
            last_writer[loc] = op
    return out


def _instructions(ops, keys, chan_of, no_fuse, forwards: dict, shape: tuple = (0, 0),
                  reps: int | None = None) -> list[_Instr]:
    """One instruction per op half, fusing a receive with the send that forwards its result.

    A receive A is fused with a later send B when B sends exactly A's chunks on the same channel and no
    op on that rank writes those chunks (under either aliasing) between A and B (``forwards``:
    :func:`_forward_candidates`): the fused instruction receives at A's time and forwards at once, which
    sends what B would have sent. Of several such sends (a tree's vertex forwarding to its children), the
    first by :func:`_forward_key`.
    """
    fused_with: dict = {}   # id(recv op) -> send op
    for op in ops:
        if not op.local:
            a = forwards[id(op)]
            if a is not None and chan_of(a) == chan_of(op) and (id(a), id(op)) not in no_fuse:
                b = fused_with.get(id(a))
                if b is None or _forward_key(op, keys, shape) < _forward_key(b, keys, shape):
                    fused_with[id(a)] = op
    sent_by_fusion = {id(b) for b in fused_with.values()}

    def mine(rank):             # with reps, the instructions of ranks 0..reps-1 only (their ops are all here)
        return reps is None or rank < reps
    for op in ops:
        if not op.local and op.src_buf == TRANSIENT and id(op) not in sent_by_fusion and mine(op.src):
            raise CollsError(f"{op.describe()}: cannot forward an in-flight value on another channel "
                             f"or in a separate instruction")
    instrs = []
    for op in ops:
        t = keys[id(op)]
        if op.local:
            if op.reduce is not None and op.reduce != (op.dst_buf, op.dst_index):
                raise CollsError(f"{op.describe()}: a local reduce must accumulate into its target")
            instrs.append(_Instr(op.src, t, chan_of(op), local=op))
            continue
        if id(op) not in sent_by_fusion and mine(op.src):
            instrs.append(_Instr(op.src, t, chan_of(op), send=op, send_time=t))
        if not mine(op.dst):
            continue
        b = fused_with.get(id(op))
        if op.dst_buf == TRANSIENT and b is None:
            raise CollsError(f"{op.describe()}: its in-flight result is never forwarded in one instruction")
        instrs.append(_Instr(op.dst, t, chan_of(op), recv=op, send=b, recv_time=t,
                             send_time=keys[id(b)] if b is not None else None))
    return instrs


def _forward_key(op: Op, keys: dict, shape: tuple) -> tuple:
    """Which of the sends that forward one receive is fused with it: the earliest step and lane, then the peer
    nearest by :func:`colls.topology.rank_offset`, so that the choice is the same seen from every GPU of a
    schedule that is (by rank number it would differ where a shift wraps), then the schedule's order."""
    return op.step, op.lane, rank_offset(shape, op.dst, op.src), keys[id(op)]


def _forwarded(op: Op, reads: set, last_writer: dict) -> Op | None:
    """The remote op whose received result ``op`` sends on, if nothing rewrote it in between."""
    writers = {id(last_writer.get(loc)) for loc in reads}
    if len(writers) != 1:
        return None
    a = last_writer.get(next(iter(reads)))
    if a is None or a.local or a.dst != op.src or a.count != op.count:
        return None
    if (a.dst_buf, a.dst_index) != (op.src_buf, op.src_index):
        return None
    return a


def _aliasings(options: LowerOptions) -> tuple:
    """The buffer aliasings (in-place: True) of the calls the file claims, which its order must keep right. A
    file of out-of-place calls only is not ordered as if its input were its output: an alltoall's receive of
    block p would wait for its send of block p (the same chunk, in place), which on 2 x dgx-a100 held every
    GPU of the second node's sends behind its receives, 816 us for a 16 MB call that takes 424."""
    return tuple(inplace for inplace, claimed in ((False, options.outofplace), (True, options.inplace))
                 if claimed) or (False, True)


def _locations(slots, coll: Collective, aliasings: tuple) -> set:
    """The memory ``slots`` stand for under each of ``aliasings`` (:func:`_aliasings`)."""
    out = set()
    for rank, buf, idx in slots:
        if buf == TRANSIENT:
            out.add((rank, "t", idx))
            continue
        if False in aliasings:
            out.add((rank, "x", buf, idx))
        if True in aliasings:
            out.add((rank, "p") + coll.alias(rank, buf, idx, True))
    return out


def _threadblocks(instrs: list[_Instr], shape: tuple = (0, 0), limit: int | None = None) -> tuple[list[_Tb], set]:
    """Group instructions into threadblocks: one per (rank, channel, recv peer, send peer) pairing.

    Ties between pairings go to the peers nearest in :func:`colls.topology.rank_offset` (``shape``: the
    machine's node-major layout), not in rank number, so a schedule that is the same seen from every GPU gets
    the same threadblocks on every GPU. A rank with more than ``limit`` threadblocks gets some of its peers'
    receiving and sending threadblocks packed into one (:func:`_pack`).

    Returns the threadblocks and the fused (receive, send) pairs whose two peers did not end up in one
    threadblock; the caller splits those and tries again."""
    by_rc: dict = defaultdict(list)
    for ins in instrs:
        by_rc[(ins.rank, ins.chan)].append(ins)
    tbs: list[_Tb] = []
    orphans: set = set()
    for (rank, chan), group in sorted(by_rc.items()):
        # Pairing weight: fusions whose value is in flight (rrs) must be kept, so they come first;
        # then the pairs with the most fusable instructions.
        weight: dict = defaultdict(lambda: [0, 0])
        recv_peers, send_peers = set(), set()
        for ins in group:
            if ins.recv is not None:
                recv_peers.add(ins.recv_peer)
            if ins.send is not None:
                send_peers.add(ins.send_peer)
            if ins.recv is not None and ins.send is not None:
                w = weight[(ins.recv_peer, ins.send_peer)]
                w[0] += ins.recv.dst_buf == TRANSIENT
                w[1] += 1
        pair_of_recv: dict = {}
        used_send = set()
        def near(peer, rank=rank):
            return rank_offset(shape, peer, rank)
        for (q, p), _ in sorted(weight.items(), key=lambda kv: (-kv[1][0], -kv[1][1], near(kv[0][0]),
                                                                 near(kv[0][1]))):
            if q not in pair_of_recv and p not in used_send:
                pair_of_recv[q] = p
                used_send.add(p)
        # Peers with no fused instruction between them get threadblocks of their own: a threadblock
        # that sends to one peer and receives from another, unrelated, can wait on itself through them.
        rest_recv = sorted(q for q in recv_peers if q not in pair_of_recv)
        rest_send = sorted(p for p in send_peers if p not in used_send)
        tb_of_recv, tb_of_send = {}, {}
        for q in sorted(pair_of_recv):
            tb = _Tb(rank, chan, recv=q, send=pair_of_recv[q])
            tbs.append(tb)
            tb_of_recv[q] = tb
            tb_of_send[pair_of_recv[q]] = tb
        for q in rest_recv:
            tb = _Tb(rank, chan, recv=q)
            tbs.append(tb)
            tb_of_recv[q] = tb
        for p in rest_send:
            tb = _Tb(rank, chan, send=p)
            tbs.append(tb)
            tb_of_send[p] = tb
        local_tb = None
        for ins in group:
            if ins.recv is not None:
                tb = tb_of_recv[ins.recv_peer]
                if ins.send is not None and tb.send != ins.send_peer:
                    orphans.add((id(ins.recv), id(ins.send)))
            elif ins.send is not None:
                tb = tb_of_send[ins.send_peer]
            else:
                if local_tb is None:
                    local_tb = _Tb(rank, chan)
                    tbs.append(local_tb)
                tb = local_tb
            ins.tb = tb
            tb.instrs.append(ins)
    if limit is not None:
        tbs = _pack(tbs, limit, shape)
    return tbs, orphans


def _pack(tbs: list[_Tb], limit: int, shape: tuple) -> list[_Tb]:
    """A rank that has more than ``limit`` threadblocks (its SMs: all must be resident) gets, for as many of its
    peers as it takes to fit, the threadblock that only receives from a peer on a channel and the one that only
    sends to it there packed into one (``send`` and ``recv`` that peer, as the runtimes allow: one sender and
    one receiver of a connection per channel), the peers with the fewest instructions first (the packing
    serializes their sends and receives, so they cost the least time), nearest peer first on ties.

    Packing adds no wait that goes back in time: neither threadblock holds a fused instruction (those are in the
    paired threadblocks), and :func:`_order` runs the packed one's instructions by time, so a wait cycle still
    needs a fused instruction elsewhere, which :func:`_wait_cycles` splits as before. Files within the limit are
    laid out as before."""
    per_rank: dict = defaultdict(list)
    for tb in tbs:
        per_rank[tb.rank].append(tb)
    out = []
    for rank, group in sorted(per_rank.items()):
        over = len(group) - limit
        if over <= 0:
            out += group
            continue
        recv_only = {(tb.chan, tb.recv): tb for tb in group if tb.send < 0 <= tb.recv}
        send_only = {(tb.chan, tb.send): tb for tb in group if tb.recv < 0 <= tb.send}
        pairs = sorted((key for key in recv_only if key in send_only),
                       key=lambda k: (len(recv_only[k].instrs) + len(send_only[k].instrs),
                                      rank_offset(shape, k[1], rank), k[0]))
        gone = set()
        for chan, peer in pairs[:over]:
            r, s = recv_only[chan, peer], send_only[chan, peer]
            r.send = peer
            r.instrs += s.instrs
            for ins in s.instrs:
                ins.tb = r
            gone.add(id(s))
        out += [tb for tb in group if id(tb) not in gone]
    return out


def fewest_packed(program: Program) -> int:
    """The fewest threadblocks the busiest GPU of ``program`` would hold with every pair :func:`_pack` may join
    joined: on each GPU, a threadblock that only receives from a peer on a channel and one that only sends to it
    there count once. A lower bound on what a copy of the program needs (:func:`colls.tune.own_channels`), which
    the threadblocks as laid out, unpacked below the limit, overstate."""
    most = 0
    for g in program.gpus:
        recv_only = {(tb.chan, tb.recv) for tb in g.tbs if tb.send < 0 <= tb.recv}
        send_only = {(tb.chan, tb.send) for tb in g.tbs if tb.recv < 0 <= tb.send}
        most = max(most, len(g.tbs) - len(recv_only & send_only))
    return most


FUSED_TYPES = frozenset({"rcs", "rrs", "rrcs"})


def packed(program: Program) -> int:
    """The most threadblocks on one GPU of ``program`` that :func:`_pack` packed: those that send to and receive
    from one peer and hold no fused step (a threadblock the lowering pairs so is paired for its fusions)."""
    return max((sum(1 for tb in g.tbs if tb.send == tb.recv >= 0 and not any(st.type in FUSED_TYPES
                                                                           for st in tb.steps))
                for g in program.gpus), default=0)


def _order(tbs: list[_Tb]) -> set:
    """Put each threadblock's instructions in an order that keeps its receives in receive-key order and
    its sends in send-key order (the order the other end of each connection uses) and that runs every
    instruction after the ones of its threadblock it depends on; among the orders that do, earliest time
    first. Returns the fused (receive, send) pairs to split when no such order exists."""
    bad = set()
    for tb in tbs:
        succ: dict = defaultdict(set)
        for part, key in (("recv", lambda i: i.recv_time), ("send", lambda i: i.send_time)):
            chain = sorted((i for i in tb.instrs if getattr(i, part) is not None), key=key)
            for x, y in zip(chain, chain[1:]):
                succ[id(x)].add(y)
        members = {id(i) for i in tb.instrs}
        for ins in tb.instrs:
            for d in ins.deps:
                if id(d) in members:
                    succ[id(d)].add(ins)
        indeg = defaultdict(int)
        for outs in succ.values():
            for y in outs:
                indeg[id(y)] += 1
        heap = [(i.time, n, i) for n, i in enumerate(tb.instrs) if indeg[id(i)] == 0]
        heapq.heapify(heap)
        order = []
        seq = {id(i): n for n, i in enumerate(tb.instrs)}
        while heap:
            _, _, ins = heapq.heappop(heap)
            order.append(ins)
            for y in succ.get(id(ins), ()):
                indeg[id(y)] -= 1
                if indeg[id(y)] == 0:
                    heapq.heappush(heap, (y.time, seq[id(y)], y))
        if len(order) < len(tb.instrs):
            placed = {id(i) for i in order}
            stuck = [i for i in tb.instrs if id(i) not in placed and i.recv is not None
                     and i.send is not None]
            if not stuck:
                raise AssertionError("threadblock order has a cycle without a fused instruction")
            bad.update((id(i.recv), id(i.send)) for i in stuck)
        tb.instrs = order
        for k, ins in enumerate(order):
            ins.pos = k
    return bad


def _wait_cycles(instrs: list[_Instr], tbs: list[_Tb], cap: int, image: dict | None = None) -> set:
    """The fused (receive, send) pairs to split so that no instruction waits, through others, for itself.

    The graph is what a step of a small call (one message per step) waits for: the step before it in its
    threadblock, its dependencies, the send of the message it receives, and the receive that makes room
    for the message it sends (the one ``cap`` messages earlier on that connection). It is acyclic exactly
    when such calls cannot hang. Without fusion every wait goes to an earlier time (the send of a message
    has its receive's time), so there is no cycle; a fused instruction has its receive's time but runs
    after the sends that precede its own send, which may be later. So every cycle holds a wait that goes
    back in time, and it ends at a fused instruction: those are split (a fused instruction whose value is
    in flight cannot be, and a cycle of such alone is left for the verifier to report).

    ``image`` (lowering by symmetry: ``instrs`` are those of one orbit's ranks): a message received outside
    them is taken as its image received inside, so the graph is the quotient's; a cycle there cannot be
    split soundly for every rank, and raises :class:`_Asymmetric`.
    """
    node = {id(ins): k for k, ins in enumerate(instrs)}
    succ: list = [[] for _ in instrs]
    sender, receiver = {}, {}
    for ins in instrs:
        if ins.send is not None:
            sender[id(ins.send)] = ins
        if ins.recv is not None:
            receiver[id(ins.recv)] = ins
        for d in ins.deps:
            succ[node[id(d)]].append(node[id(ins)])
    def received_by(op):
        if image is not None and id(op) in image:
            op = image[id(op)]
        return receiver[id(op)]
    for op_id, ins in sender.items():
        succ[node[id(ins)]].append(node[id(received_by(ins.send))])
    for tb in tbs:
        for a, b in zip(tb.instrs, tb.instrs[1:]):
            succ[node[id(a)]].append(node[id(b)])
        sends = [i for i in tb.instrs if i.send is not None]
        for a, b in zip(sends, sends[cap:]):
            succ[node[id(received_by(a.send))]].append(node[id(b)])
    indeg = [0] * len(instrs)
    for outs in succ:
        for b in outs:
            indeg[b] += 1
    ready = [k for k, d in enumerate(indeg) if d == 0]
    while ready:
        for b in succ[ready.pop()]:
            indeg[b] -= 1
            if indeg[b] == 0:
                ready.append(b)
    rest = [k for k, d in enumerate(indeg) if d > 0]
    if not rest:
        return set()
    if image is not None:
        raise _Asymmetric("a small call could wait on itself: fusions to split")
    graph = nx.DiGraph()
    graph.add_edges_from((a, b) for a in rest for b in succ[a] if indeg[b] > 0)
    bad: set = set()
    pending = [(graph, scc) for scc in nx.strongly_connected_components(graph) if len(scc) > 1]
    while pending:
        g, scc = pending.pop()
        late = {}  # splittable fused instruction -> the waits on it that go back in time
        for k in scc:
            ins = instrs[k]
            if ins.recv is not None and ins.send is not None and ins.recv.dst_buf != TRANSIENT:
                late[k] = [a for a in g.predecessors(k) if a in scc and instrs[a].time > ins.time]
        late = {k: back for k, back in late.items() if back}
        if not late:
            continue
        # split the fused instruction that runs latest after its time; splitting it frees its receive
        # from the waits that held it back, which may already break every cycle through it
        k = max(late, key=lambda k: (max(instrs[a].time for a in late[k]), instrs[k].time))
        bad.add((id(instrs[k].recv), id(instrs[k].send)))
        g = g.subgraph(scc).copy()
        g.remove_edges_from((a, k) for a in late[k])
        pending += [(g, c) for c in nx.strongly_connected_components(g) if len(c) > 1]
    return bad


def _dependencies(instrs: list[_Instr], coll: Collective, aliasings: tuple) -> None:
    """Fill ``deps`` with every earlier instruction on the same rank that touches the same memory under any
    of ``aliasings`` (:func:`_aliasings`)."""
    last_writer: dict = {}
    readers: dict = defaultdict(list)
    for ins in sorted(instrs, key=lambda i: i.time):
        reads, writes = _accesses(ins, coll, aliasings)
        deps = set()
        for loc in reads:
            w = last_writer.get(loc)
            if w is not None:
                deps.add(w)
        for loc in writes:
            w = last_writer.get(loc)
            if w is not None:
                deps.add(w)
            deps.update(readers.get(loc, ()))
        deps.discard(ins)
        ins.deps = deps
        for loc in reads:
            readers[loc].append(ins)
        for loc in writes:
            last_writer[loc] = ins
            readers[loc] = []


def _holds(instrs: list[_Instr]) -> None:
    """Add to a send's ``deps`` the instructions that send the op it is held for (``Op.after``: its rank's send of
    that step and lane to that destination), where they come earlier in time.

    A send whose data is there from the start runs as soon as its threadblock reaches it, and a threadblock
    whose first step it is reaches it at once; a method that timed it later (milp, :func:`colls.synth.milp._holds`)
    says what it waits for. A wait that goes back in time only, like every other dependency, cannot make a small
    call wait on itself (:func:`_wait_cycles`)."""
    held = [ins for ins in instrs if ins.send is not None and ins.recv is None and ins.send.after]
    at: dict = defaultdict(list)    # (rank, step, lane, destination) -> the instructions that send it there
    for ins in instrs:
        if ins.send is not None:
            at[ins.rank, ins.send.step, ins.send.lane, ins.send.dst].append(ins)
    for ins in held:
        ins.deps.update(d for d in at.get((ins.rank, *ins.send.after), ()) if d.time < ins.time)


def _accesses(ins: _Instr, coll: Collective, aliasings: tuple) -> tuple[set, set]:
    """Memory the instruction touches on its rank (in-flight values are not memory)."""
    reads: list = []
    writes: list = []
    if ins.local is not None:
        reads += ins.local.src_slots() + ins.local.operand_slots()
        writes += ins.local.dst_slots()
    if ins.recv is not None:
        reads += ins.recv.operand_slots()
        writes += [s for s in ins.recv.dst_slots() if s[1] != TRANSIENT]
    if ins.send is not None and ins.recv is None:
        reads += [s for s in ins.send.src_slots() if s[1] != TRANSIENT]
    return _locations(reads, coll, aliasings), _locations(writes, coll, aliasings)


def _assemble(schedule: Schedule, tbs: list[_Tb], options: LowerOptions, target: Target,
              scratch: int, reps: int | None = None) -> Program:
    coll = schedule.collective
    by_rank: dict = defaultdict(list)
    for tb in tbs:
        by_rank[tb.rank].append(tb)
    shape = options.shape
    for rank, group in by_rank.items():
        group.sort(key=lambda t: (t.chan, t.recv < 0, rank_offset(shape, t.recv, rank), t.send < 0,
                                  rank_offset(shape, t.send, rank)))
        _waited_first(schedule, rank, group, target, options)
        for k, tb in enumerate(group):
            tb.id = k
    # Step indices, counting one nop per extra cross-tb dependency.
    for tb in tbs:
        pos = 0
        for ins in tb.instrs:
            pos += max(0, len(_cross(ins)) - 1)
            ins.index = pos
            pos += 1
    hasdep = set()
    made: list = []             # (step, the instruction it runs): hasdep is known once every step is made
    gpus = []
    nchannels = 1 + max((tb.chan for tb in tbs), default=0)
    for rank in range(coll.nranks if reps is None else reps):
        gtbs = []
        for tb in by_rank.get(rank, []):
            steps: list[Step] = []
            for ins in tb.instrs:
                targets = _cross(ins)
                for dep in targets[:-1]:
                    steps.append(Step(len(steps), "nop", "i", -1, "o", -1, 0, dep.tb.id, dep.index, 0))
                    hasdep.add(id(dep))
                step = _step(ins, len(steps))
                if targets:
                    step.depid, step.deps = targets[-1].tb.id, targets[-1].index
                    hasdep.add(id(targets[-1]))
                steps.append(step)
                made.append((step, ins))
            gtbs.append(Threadblock(tb.id, tb.send, tb.recv, tb.chan, steps))
        gpus.append(Gpu(rank, coll.in_chunks, coll.out_chunks, scratch, gtbs))
    for st, ins in made:
        if id(ins) in hasdep:
            st.hasdep = 1
    return Program(
        name=options.name or f"colls-{schedule.method}-{coll.kind}-n{coll.nranks}",
        coll=target.coll_name(coll.kind), ngpus=coll.nranks, nchunksperloop=coll.nchunksperloop,
        nchannels=nchannels, proto=options.proto, inplace=int(options.inplace),
        outofplace=int(options.outofplace), min_bytes=options.min_bytes, max_bytes=options.max_bytes,
        gpus=gpus)


def _waited_first(schedule: Schedule, rank: int, group: list[_Tb], target: Target, options: LowerOptions) -> None:
    """Where a rank has more threadblocks than ids a step can wait on (``target.max_dep_tb``), put those other
    threadblocks wait on first, each kind in its order, or refuse when they are more than those ids (a direct
    alltoall in place on 256 GPUs: a receive from each of 255 peers, each waited on by a copy out of scratch)."""
    most = target.max_dep_tb
    if most is None or len(group) <= most + 1:
        return
    waited = {id(d.tb) for tb in group for ins in tb.instrs for d in ins.deps if d.tb is not tb}
    if len(waited) > most + 1:
        raise LimitError(f"{schedule.method} {schedule.collective.kind}: GPU {rank} has {len(waited)} threadblocks "
                         f"that others wait on; {target.name} names the one a step waits on in an int8_t "
                         f"(dependentBid in msccl_struct.h), so at most {most + 1}; try "
                         + ("--outofplace-only (an alltoall then stages nothing), "
                            if schedule.collective.kind == "alltoall" and options.inplace else "")
                         + "fewer --nodes, --instances or --chunks, or another --method")
    group.sort(key=lambda t: id(t) not in waited)


def _cross(ins: _Instr) -> list[_Instr]:
    """The last dependency in each other threadblock's order, in a fixed order.

    Last in the threadblock's order, not in time: a fused instruction waits in its threadblock for the
    sends before its own send, so receives of an earlier time can run after sends of a later one, and
    waiting for the latest in time would not wait for them."""
    latest: dict = {}
    for d in ins.deps:
        if d.tb is ins.tb:
            continue  # _order placed it earlier in this threadblock
        cur = latest.get(id(d.tb))
        if cur is None or d.pos > cur.pos:
            latest[id(d.tb)] = d
    return sorted(latest.values(), key=lambda d: (d.tb.id, d.index))


def _step(ins: _Instr, s: int) -> Step:
    if ins.local is not None:
        op = ins.local
        kind = "re" if op.reduce is not None else "cpy"
        return Step(s, kind, op.src_buf, op.src_index, op.dst_buf, op.dst_index, op.count, -1, -1, 0)
    if ins.recv is not None:
        op = ins.recv
        if op.reduce is not None:
            src = op.reduce
            if op.dst_buf == TRANSIENT:
                return Step(s, "rrs", src[0], src[1], src[0], src[1], op.count, -1, -1, 0)
            kind = "rrcs" if ins.send is not None else "rrc"
            return Step(s, kind, src[0], src[1], op.dst_buf, op.dst_index, op.count, -1, -1, 0)
        kind = "rcs" if ins.send is not None else "r"
        return Step(s, kind, op.dst_buf, op.dst_index, op.dst_buf, op.dst_index, op.count, -1, -1, 0)
    op = ins.send
    return Step(s, "s", op.src_buf, op.src_index, op.src_buf, op.src_index, op.count, -1, -1, 0)
