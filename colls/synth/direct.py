"""Direct schedules: every rank talks straight to every rank that needs its data, in as few steps as the
step semantics allow. They exist only "where the fabric allows", i.e. when every pair the collective
needs has a physical route (a switch, a full mesh, a cluster); otherwise CollsError names a missing pair.

==============  =====================================================================  ===========
collective      what happens                                                           steps
==============  =====================================================================  ===========
allgather       every rank copies its ``c`` input chunks to its output slot, then      2
                sends that slot to the same slot of every other output (one op of
                ``c`` chunks per pair)
alltoall        rank ``r`` sends input block ``q`` to rank ``q``'s output block ``r``   2
                (and copies its own block); blocks from lower ranks wait in scratch
                and local copies place them, side by side on lanes of their own (so
                an in-place call is right too)
broadcast       the root copies its input to its output, then sends it to every       2
                other output
reducescatter   rank ``q`` receives block ``q`` from ``q+1+s`` at step ``s``; the       N-1
                first reduction combines with its own input, the rest accumulate in
                its output (ops of one step never write the same chunk)
reduce          the root receives from ``root+1+s`` at step ``s`` the same way          N-1
allreduce       the reduce-scatter above on ``N`` blocks, then the allgather of the      N
                reduced blocks (chunk factor rounded up to a multiple of N)
==============  =====================================================================  ===========

The steps of the serialised reductions are a schedule order, not barriers: every rank sends at every
step, so the N-1 steps of a reduce-scatter keep all links busy.

Depth (``depth`` d, default 1; :func:`colls.tune.deepest` chooses it). In the runtime each sender's data
arrives on a threadblock of its own, and the one that adds the next sender's share waits until the step
before has summed the whole chunk: with the block in one piece the N-1 threadblocks take turns. With the
chunk factor times d, the block is cut into pieces of one chunk (d per chunk asked for), and sender ``p``
(rank ``q+1+p``) sends piece ``j`` at step ``p + j``: every piece is summed in the
order above, each threadblock works through the pieces one after another, and once the pipeline is full
all N-1 sum at once, each on another piece (1 x dgx-a100 reduce-scatter, 4 copies: 16 MB 59 -> 127 GB/s
busbw at d = 8). An allreduce sends each piece of its block to the other ranks once its last sum is done.
Tried and not kept: the pieces in a Latin square (piece j at step (p + j) mod max(N-1, d), no fill inside a
pass): the reduce-scatter 218 GB/s at 256 MB against 202, but the allreduce 54 against 202.
"""

from __future__ import annotations

from colls.collectives import Collective
from colls.errors import CollsError
from colls.schedule import Op, Schedule
from colls.synth.common import checked_route, schedule_facts
from colls.topology import Topology

METHOD = "direct"


def synthesize(topology: Topology, collective: Collective, **options) -> Schedule:
    """A direct schedule of ``collective`` on ``topology``; ``options["max_tbs"]``: the threadblocks per GPU the
    runtime loads, when below the SM count (the alltoall's copy lanes fit it); ``options["inplace"]`` False:
    the file serves out-of-place calls only, and an alltoall stages nothing (:func:`alltoall_ops`); other
    options are ignored.

    Raises CollsError when the collective's rank count is not the topology's GPU count, or when a pair
    of ranks the collective needs has no route (naming the pair).
    """
    n = collective.nranks
    if n != topology.ngpus:
        raise CollsError(f"{METHOD}: the collective has {n} ranks but {topology.name} has "
                         f"{topology.ngpus} GPUs")
    depth = options.get("depth", 1)
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise CollsError(f"must be a positive integer, got {depth!r}", key="depth")
    deep = collective.kind in _SUMS or collective.kind == "alltoall"     # the kinds a depth cuts into pieces
    if collective.kind == "allreduce":
        collective = collective.with_chunks(n * depth * -(-collective.chunks // n))
    elif deep:
        collective = collective.with_chunks(collective.chunks * depth)
    routes = _Routes(topology, collective)
    if collective.kind == "alltoall":
        ops, scratch = alltoall_ops(collective, routes, copy_lanes=copy_lanes(topology, n, options.get("max_tbs")),
                                    pieces=collective.chunks if depth > 1 else 1,
                                    inplace=options.get("inplace", True))
    elif collective.kind in _SUMS:       # pieces of one chunk each (see _gather_sum)
        ops, scratch = _SUMS[collective.kind](collective, routes, depth > 1), 0
    else:
        ops, scratch = _BUILDERS[collective.kind](collective, routes), 0
    schedule = Schedule(collective, ops, METHOD, scratch)
    schedule.info.update(schedule_facts(schedule, topology))
    if collective.kind == "alltoall":
        schedule.info["staged_blocks"] = staged_blocks(ops, collective)
    if deep:
        schedule.info["depth"] = depth
    return schedule


class _Routes:
    """Route lookup that first proves every pair the collective needs is connected (so the error names
    the first missing pair in rank order, not whichever op happened to be built first)."""

    def __init__(self, topology: Topology, collective: Collective):
        n, root = collective.nranks, collective.root
        if collective.rooted:
            pairs = [(root, q) if collective.kind == "broadcast" else (q, root)
                     for q in range(n) if q != root]
        else:
            pairs = [(a, b) for a in range(n) for b in range(n) if a != b]
        why = "the fabric does not allow a direct schedule"
        self._routes = {(a, b): checked_route(topology, a, b, METHOD, why) for a, b in pairs}

    def __call__(self, a: int, b: int) -> tuple:
        return self._routes[(a, b)]


def _allgather(coll: Collective, route) -> list[Op]:
    """The local copy first, then every send from the output: in place the copy is a no-op, and a copy
    after the sends would have to wait for all N-1 of them (one dependency per step in the runtime)."""
    n, c = coll.nranks, coll.chunks
    ops = []
    for r in range(n):
        ops.append(Op(0, r, r, "i", 0, "o", r * c, c))
        ops.extend(Op(1, r, q, "o", r * c, "o", r * c, c, route=route(r, q)) for q in range(n) if q != r)
    return ops


def copy_lanes(topology: Topology, n: int, max_tbs: int | None) -> int:
    """The lanes an alltoall of ``n`` ranks that sends every block straight to its rank gives the copies out
    of scratch (:func:`alltoall_ops`): the threadblocks the transfers leave (a send and a receive one per
    peer, the own block's copy) of 90 % of what the GPU and the runtime run at once (as trees' lanes), at
    least one. Where a send and a receive threadblock per peer leave none, the lowering packs each peer's two
    into one (:func:`colls.lower._pack`), and the lanes are what one per peer leaves: on 256 GPUs of 304 CUs,
    17 lanes of 15 copies, not one threadblock of 255 (more than a threadblock's steps)."""
    limit = min(topology.min_sms(), max_tbs or topology.min_sms())
    usable = (9 * limit) // 10 - 1      # the own block's copy aside
    per_peer = 2 if usable - 2 * (n - 1) >= 1 else 1
    return max(1, min(n - 1, usable - per_peer * (n - 1)))


def alltoall_ops(coll: Collective, route, step=lambda src, dst: 0,
                 paths: dict | None = None, copy_lanes: int = 0, pieces: int = 1,
                 inplace: bool = True) -> tuple[list[Op], int]:
    """Alltoall: rank ``r``'s input block ``q`` goes to rank ``q``'s output block ``r``, leaving at
    ``step(r, q)`` (the same step for both directions of a pair). Returns (ops, scratch).

    ``paths`` (default: straight from ``r`` to ``q``) may route a block through other ranks,
    ``paths[r, q] = [r, m1, ..., q]``: hop i leaves at ``step(r, q) + i`` and waits in the relay's
    scratch (after the first ``N c`` chunks, in a slot no other block holds from the step it arrives
    to the step it leaves) until it is sent on.

    Safe in place: a pair that swaps blocks directly does so in one step, and ops of a step take effect
    in :meth:`Schedule.execution_order` (lower source rank first), so the receiver of the first op, the
    higher rank, would overwrite the block it has yet to send back. That block lands in the receiver's
    scratch instead (``s[r c]``), as does every relayed block, and local copies move them to the output
    after the last transfer: one per run of such blocks; or, with ``copy_lanes`` > 0, one per block, dealt
    round-robin onto lanes 1 to ``copy_lanes`` (each lane a threadblock of its own, so that the copies run
    side by side, each as soon as its block has arrived: one threadblock copying up to N - 1 blocks one
    after another at its copy rate takes far longer than the transfers).

    ``pieces`` (straight paths only): every block moves as that many ops of ``c / pieces`` chunks, piece k at
    step ``step(r, q) + k``, and is copied out of scratch piece by piece, each as it arrives: the call then
    ends one piece's copy after its last transfer, not one block's (the copies run at one threadblock's rate).

    ``inplace`` False (a file for out-of-place calls only, which the runtime never gives an in-place call:
    the ``inplace`` attribute of its ``<algo>``): nothing a rank sends is in its output, so every block lands
    in its output straight away and nothing is staged or copied (relays still hold blocks in scratch). 1 x
    DGX A100 at 1 GB: 4,165 us staged, 4,078 not (NCCL's own grouped sends, modelled: 4,078); at 1 MB 46.4
    against 40.8 us, on 60 threadblocks a GPU instead of 88.
    """
    n, c = coll.nranks, coll.chunks
    if pieces > 1 and (paths is not None or c % pieces):
        raise CollsError(f"alltoall in {pieces} pieces needs straight paths and a chunk factor they divide "
                         f"(got {c})")
    size = c // pieces
    paths = paths or {(r, q): [r, q] for r in range(n) for q in range(n) if r != q}
    ops = [Op(0, r, r, "i", r * c, "o", r * c, c) for r in range(n)]
    staged: dict = {q: [] for q in range(n)}
    relayed: dict = {m: [] for m in range(n)}  # per rank, per transit slot: the (in, out) steps held
    last = 0
    for (r, q), path in sorted(paths.items()):
        t0 = step(r, q)
        swap = len(path) == 2 and len(paths[q, r]) == 2
        src = ("i", q * c)
        for i, (a, b) in enumerate(zip(path, path[1:])):
            if b != q:
                dst = ("s", (n + _transit_slot(relayed[b], t0 + i, t0 + i + 1)) * c)
            elif (swap and r > q) or not inplace:   # in place, the receiver may not have sent it yet
                dst = ("o", r * c)
            else:
                dst = ("s", r * c)
                staged[q].append(r)
            ops.extend(Op(t0 + i + k, a, b, src[0], src[1] + k * size, dst[0], dst[1] + k * size, size,
                          route=route(a, b)) for k in range(pieces))
            src = dst
            last = max(last, t0 + i + pieces - 1)
    for q, sources in staged.items():
        if copy_lanes > 0 or pieces > 1:    # a copy per block (per piece), each as soon as it has arrived
            ops.extend(Op(last + 1 + k, q, q, "s", r * c + k * size, "o", r * c + k * size, size,
                          lane=1 + i % copy_lanes if copy_lanes > 0 else 0)
                       for i, r in enumerate(sorted(sources)) for k in range(pieces))
            continue
        for run in _runs(sorted(sources)):
            ops.append(Op(last + 1, q, q, "s", run[0] * c, "o", run[0] * c, len(run) * c))
    staging = max((r + 1 for sources in staged.values() for r in sources), default=0)
    transit = max(len(slots) for slots in relayed.values())
    return ops, (n + transit if transit else staging) * c


def staged_blocks(ops: list[Op], coll: Collective) -> int:
    """The most blocks one rank of an alltoall copies out of scratch into its output (in-place staging)."""
    per: dict = {}
    for op in ops:
        if op.local and op.src_buf == "s" and op.dst_buf == "o":
            per[op.src] = per.get(op.src, 0) + op.count
    return -(-max(per.values(), default=0) // coll.chunks)


def _transit_slot(slots: list, arrive: int, leave: int) -> int:
    """The first slot free from step ``arrive`` to ``leave`` (a slot read at a step may not be written
    at that step); ``slots`` holds each slot's list of (arrive, leave) and is updated."""
    for k, held in enumerate(slots):
        if all(leave < a or arrive > b for a, b in held):
            held.append((arrive, leave))
            return k
    slots.append([(arrive, leave)])
    return len(slots) - 1


def _runs(xs: list[int]) -> list[list[int]]:
    """Consecutive runs of sorted integers: [0, 1, 3] -> [[0, 1], [3]]."""
    runs: list[list[int]] = []
    for x in xs:
        if runs and runs[-1][-1] == x - 1:
            runs[-1].append(x)
        else:
            runs.append([x])
    return runs


def _broadcast(coll: Collective, route) -> list[Op]:
    """Like allgather: the root's local copy first, then the sends from its output."""
    n, c, root = coll.nranks, coll.chunks, coll.root
    return [Op(0, root, root, "i", 0, "o", 0, c)] + [
        Op(1, root, q, "o", 0, "o", 0, c, route=route(root, q)) for q in range(n) if q != root]


def _gather_sum(dst: int, src_index: int, dst_index: int, size: int, n: int, route, pieces: bool = False) -> list[Op]:
    """The ops that sum ``size`` chunks at input offset ``src_index`` of every rank into ``dst``'s output at
    ``dst_index``: in one op a sender, or with ``pieces`` one op a chunk (module docstring): sender ``p`` (rank
    ``dst+1+p``) sends piece ``j`` at step ``p + j``; sender 0's sum also adds ``dst``'s own input, later ones
    accumulate into the output (so no two ops of a step write one chunk). Pieces are one chunk each: ops of
    several chunks are sent as several messages in large calls, and senders whose pieces are cut so can wait
    on each other's two-message connections in a cycle (the verifier finds it on 4 ranks at 2 pieces of 2)."""
    count = 1 if pieces else size
    ops = []
    for p in range(n - 1):
        src = (dst + 1 + p) % n
        for j in range(size // count):
            at = j * count
            operand = ("i", src_index + at) if p == 0 else ("o", dst_index + at)
            ops.append(Op(p + j, src, dst, "i", src_index + at, "o", dst_index + at, count, reduce=operand,
                          route=route(src, dst)))
    return ops


def _reducescatter(coll: Collective, route, pieces: bool = False) -> list[Op]:
    n, c = coll.nranks, coll.chunks
    return [op for q in range(n) for op in _gather_sum(q, q * c, 0, c, n, route, pieces)]


def _reduce(coll: Collective, route, pieces: bool = False) -> list[Op]:
    return _gather_sum(coll.root, 0, 0, coll.chunks, coll.nranks, route, pieces)


def _allreduce(coll: Collective, route, pieces: bool = False) -> list[Op]:
    """Each block summed at its rank (:func:`_gather_sum`), then each piece of it sent to every other rank
    right after its last sum (in one piece: all at step N-1)."""
    n = coll.nranks
    m = coll.chunks // n  # chunks per block; the caller made the chunk factor a multiple of n
    count = 1 if pieces else m
    ops = [op for q in range(n) for op in _gather_sum(q, q * m, q * m, m, n, route, pieces)]
    for j in range(m // count):      # piece j's last sum is at step n - 2 + j
        ops.extend(Op(n - 1 + j, q, r, "o", q * m + j * count, "o", q * m + j * count, count, route=route(q, r))
                   for q in range(n) for r in range(n) if r != q)
    return ops


_SUMS = {"reducescatter": _reducescatter, "reduce": _reduce, "allreduce": _allreduce}
_BUILDERS = {"allgather": _allgather, "broadcast": _broadcast}
