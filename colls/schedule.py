"""The neutral Schedule: which chunks go from which GPU to which, copy or reduce, in what order, over
which physical route. It knows nothing of MSCCL; :mod:`colls.lower` turns it into a Program.

Semantics (step-synchronous). Ops run in increasing ``step``; every op of step ``t`` reads the state left
by steps ``< t`` and ops of one step must not touch each other's chunks (one may not write what another
reads or writes). A step is a logical time, not a barrier: the lowering keeps only the dependencies the
data needs, so independent work overlaps on the GPU.

An :class:`Op` moves ``count`` consecutive chunks from ``src`` rank's ``src_buf[src_index:]`` to ``dst``
rank's ``dst_buf[dst_index:]`` (``src == dst`` is a local copy or reduce). With ``reduce`` set to a slot
``(buf, index)`` of ``dst``, the result is ``reduce-operand (+) data`` instead of ``data``. The destination
buffer ``"t"`` means "in flight": the result is not stored, and exactly one later op from ``dst`` must send
it on (``src_buf == "t"``, same index); the lowering fuses the pair into one ``rrs`` instruction.

``lane`` names the parallel pipeline (a ring, a tree) an op belongs to; lanes become channels.
``route`` is the physical path (from :meth:`Topology.route`) that the transfer's bytes use.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from fractions import Fraction
from operator import attrgetter

from colls.collectives import Collective, SymbolicError, reduce_values, rotation_period
from colls.errors import CollsError
from colls.program import pickled_by_fields, quick_frozen_init

BUFFERS = ("i", "o", "s")
TRANSIENT = "t"


@quick_frozen_init
@pickled_by_fields
@dataclass(frozen=True, order=True, slots=True)
class Op:
    step: int
    src: int
    dst: int
    src_buf: str
    src_index: int
    dst_buf: str
    dst_index: int
    count: int = 1
    reduce: tuple[str, int] | None = None
    lane: int = 0
    route: tuple = ()
    # (step, lane, destination) of an earlier send of the same rank this op's send waits for, or (): a send
    # whose data is there from the call's start runs at once in a file, where a method that timed it later
    # (milp) would have it wait (:func:`colls.lower._holds`)
    after: tuple = ()

    @property
    def local(self) -> bool:
        return self.src == self.dst

    def src_slots(self):
        return [(self.src, self.src_buf, self.src_index + k) for k in range(self.count)]

    def dst_slots(self):
        return [(self.dst, self.dst_buf, self.dst_index + k) for k in range(self.count)]

    def operand_slots(self):
        if self.reduce is None:
            return []
        b, i = self.reduce
        return [(self.dst, b, i + k) for k in range(self.count)]

    def seen_from(self, k: int, slices: dict, sizes: dict, n: int) -> tuple:
        """This op's fields with the ranks moved ``k`` back (mod ``n``) and an offset into buffer ``b`` moved
        ``k slices[b]`` back (mod ``sizes[b]``; scratch as it is; in-flight numbers as -1, see
        :meth:`Schedule.rotation`): two ops are images of each other under rotation by ``k - k'`` ranks
        exactly when ``a.seen_from(k)`` equals ``b.seen_from(k')``. Routes are left out."""
        # in line, not a helper: called for every op of a schedule (Schedule.rotation), 130k on 128 GPUs
        sb, so, db, do = self.src_buf, self.src_index, self.dst_buf, self.dst_index
        if sb == TRANSIENT:
            so = -1         # an in-flight value is named by the two ops it joins, whatever its number
        elif t := slices.get(sb):
            so = (so - k * t) % sizes[sb]
        if db == TRANSIENT:
            do = -1
        elif t := slices.get(db):
            do = (do - k * t) % sizes[db]
        red = self.reduce
        if red is not None:
            rb, ro = red
            if rb == TRANSIENT:
                ro = -1
            elif t := slices.get(rb):
                ro = (ro - k * t) % sizes[rb]
            red = (rb, ro)
        else:
            red = ()
        return (self.step, (self.src - k) % n, (self.dst - k) % n, sb, so, db, do, self.count, red, self.lane,
                self.after)

    def describe(self) -> str:
        what = "reduce" if self.reduce else "copy"
        return (f"step {self.step} lane {self.lane}: {what} {self.count} chunk(s) "
                f"rank {self.src} {self.src_buf}[{self.src_index}] -> rank {self.dst} "
                f"{self.dst_buf}[{self.dst_index}]")


# the deterministic order of a schedule's ops (Schedule.sorted_ops)
_SORT_KEY = attrgetter("step", "lane", "src", "dst", "dst_buf", "dst_index", "src_buf", "src_index")


@dataclass
class Schedule:
    """A collective's chunk transfers. ``scratch`` = scratch chunks per rank; ``info`` = method facts
    (for the summary and ``--json``: ring orders, tree counts, optimality notes)."""

    collective: Collective
    ops: list[Op]
    method: str
    scratch: int = 0
    info: dict = field(default_factory=dict)

    @property
    def nranks(self) -> int:
        return self.collective.nranks

    @property
    def lanes(self) -> list[int]:
        return sorted({op.lane for op in self.ops})

    @property
    def nsteps(self) -> int:
        return 1 + max((op.step for op in self.ops), default=-1)

    def sorted_ops(self) -> list[Op]:
        return sorted(self.ops, key=_SORT_KEY)

    # --- replication ----------------------------------------------------------------------------------
    def replicate(self, instances: int) -> "Schedule":
        """``instances`` independent copies, each on its own lanes and 1/instances of every chunk.

        Chunk ``j`` becomes chunks ``j*instances + k`` (copy k), so the chunk factor grows by
        ``instances`` and each copy keeps its own slice of every original chunk (interleaved, as
        msccl-tools' replication does). A multi-chunk op stays one op of ``count*instances``
        chunks only when instances == 1, so each copy's op covers its own stride of chunks.
        """
        if instances == 1:
            return self
        if instances < 1:
            raise CollsError(f"--instances must be >= 1, got {instances}")
        nl = max(self.lanes, default=0) + 1
        ops = []
        for op in self.ops:         # Op(...) rather than dataclasses.replace: a 1,024-GPU schedule has 500k
            for k in range(instances):
                for m in range(op.count):
                    ops.append(Op(op.step, op.src, op.dst, op.src_buf, (op.src_index + m) * instances + k,
                                  op.dst_buf, (op.dst_index + m) * instances + k, 1,
                                  None if op.reduce is None else (op.reduce[0], (op.reduce[1] + m) * instances + k),
                                  op.lane + k * nl, op.route,
                                  (op.after[0], op.after[1] + k * nl, op.after[2]) if op.after else ()))
        return Schedule(self.collective.with_chunks(self.collective.chunks * instances), ops,
                        self.method, self.scratch * instances, dict(self.info, instances=instances))

    def execution_order(self) -> list[Op]:
        """The order the lowering gives ops on a rank: by step, remote ops before local ones, then the
        deterministic tie-break of :meth:`sorted_ops`. Under in-place aliasing, ops of one step can
        touch the same memory; they then take effect in this order."""
        return sorted(self.sorted_ops(), key=lambda op: (op.step, op.local))

    def rotation(self) -> tuple[int, dict] | None:
        """``(d, slices)``: the smallest rotation under which the schedule is the same, or None.

        Rotating every op by ``d`` ranks (its source and destination ``+ d``, an offset into buffer ``b``
        ``+ d slices[b]``, see :meth:`Collective.rotation_slices`; scratch and in-flight slots unchanged;
        steps and lanes unchanged) gives the schedule's ops back: rank ``r + d`` does what rank ``r`` does,
        relabelled. Routes are not compared (the lowering does not read them), nor the numbers of in-flight
        values (they pair a received reduction with the op that forwards it, and the lowering leaves no number
        of them in the program; a file lowered by symmetry is proved like any other)."""
        coll = self.collective
        n = coll.nranks
        sizes = {"i": coll.in_chunks, "o": coll.out_chunks}
        for ti, to in coll.rotation_slices():
            slices = {"i": ti, "o": to}
            per: list = [[] for _ in range(n)]
            for op in self.ops:
                if not 0 <= op.src < n:
                    return None
                per[op.src].append(op.seen_from(op.src, slices, sizes, n))
            d = rotation_period([sorted(p) for p in per])
            if d < n:
                return d, slices
        return None

    # --- checks ---------------------------------------------------------------------------------------
    def check(self, inplace: bool | None = None) -> None:
        """Raise CollsError unless the schedule is well formed and computes its collective.

        ``inplace=None`` checks both calls: out-of-place (separate buffers; ops of one step must not
        touch each other's chunks) and in-place (the collective's aliasing; ops run in
        :meth:`execution_order`). Neither may write the caller's input where it is not also the output.
        This is the synthesizers' own test; the written file is proven separately by :mod:`colls.verify`.
        """
        self.check_shape()
        for mode in ((False, True) if inplace is None else (inplace,)):
            try:
                self._run(mode)
            except CollsError as e:
                where = "in-place" if mode else "out-of-place"
                raise CollsError(f"{self.method} {self.collective.kind} ({where}): {e}") from None

    def check_shape(self) -> None:
        """Raise CollsError unless every op names ranks, buffers and chunks that exist (linear in the ops; what
        the lowering needs of a schedule; :meth:`check` also proves what it computes). The distinct ranks and
        buffer ranges are checked first (a 128-GPU ring allreduce's 130k ops name a few hundred); where one is
        wrong, the first op at fault is named."""
        ops = self.ops
        ranks = set(map(attrgetter("src"), ops)) | set(map(attrgetter("dst"), ops))
        ranges = set(map(attrgetter("src_buf", "src_index", "count"), ops)) | set(
            map(attrgetter("dst_buf", "dst_index", "count"), ops))
        n = self.collective.nranks
        if all(0 <= r < n for r in ranks) and all(
                count >= 1 and (buf == TRANSIENT or (buf in BUFFERS and 0 <= idx and
                                                     idx + count <= self.collective.size(buf, self.scratch)))
                for buf, idx, count in ranges):
            return
        for op in ops:
            self._check_shape(op)

    def _run(self, inplace: bool) -> None:
        coll = self.collective
        n = coll.nranks
        state: dict = {}
        for r in range(n):
            for (buf, idx), val in coll.initial_state(r, inplace, self.scratch).items():
                state[(r, buf, idx)] = val

        def key(slot):
            r, buf, idx = slot
            return slot if buf == TRANSIENT else (r,) + coll.alias(r, buf, idx, inplace)

        if inplace:
            groups = [[op] for op in self.execution_order()]
        else:
            by_step: dict[int, list[Op]] = defaultdict(list)
            for op in self.ops:
                by_step[op.step].append(op)
            groups = [by_step[t] for t in sorted(by_step)]
            for ops in groups:
                self._same_step_conflicts(ops)
        in_flight: dict = {}
        for ops in groups:
            updates = {}
            for op in ops:
                for k, (src, dst) in enumerate(zip(op.src_slots(), op.dst_slots())):
                    if src[1] == TRANSIENT:
                        if src not in in_flight:
                            raise CollsError(f"{op.describe()} forwards an in-flight value that does "
                                             f"not exist")
                        val = in_flight.pop(src)
                    else:
                        val = state.get(key(src))
                    if val is None:
                        raise CollsError(f"{op.describe()} reads an uninitialised chunk")
                    if op.reduce is not None:
                        try:
                            val = reduce_values(state.get(key(op.operand_slots()[k])), val)
                        except SymbolicError as e:
                            raise CollsError(f"{op.describe()} {e}") from None
                    if dst[1] != TRANSIENT:
                        storage = key(dst)
                        if storage[1] == "i" and not coll.input_writable(dst[0], storage[2], inplace):
                            raise CollsError(f"{op.describe()} writes the caller's input buffer")
                    updates[dst] = val
            for dst, val in updates.items():
                if dst[1] == TRANSIENT:
                    if dst in in_flight:
                        raise CollsError(f"rank {dst[0]} has two in-flight values t[{dst[2]}]")
                    in_flight[dst] = val
                else:
                    state[key(dst)] = val
        if in_flight:
            slot = sorted(in_flight)[0]
            raise CollsError(f"rank {slot[0]}'s in-flight value t[{slot[2]}] is never sent on")
        for r in range(n):
            problems = coll.check_outputs(r, lambda j, r=r: state.get(key((r, "o", j))))
            if problems:
                raise CollsError(f"rank {r}: {problems[0]}")

    @staticmethod
    def _same_step_conflicts(ops: list[Op]) -> None:
        reads, writes = {}, {}
        for op in ops:
            for s in op.src_slots() + op.operand_slots():
                if s[1] != TRANSIENT:
                    reads.setdefault(s, op)
            for s in op.dst_slots():
                if s[1] == TRANSIENT:
                    continue
                if s in writes:
                    raise CollsError(f"{op.describe()} and {writes[s].describe()} write the same chunk")
                writes[s] = op
        for s, op in writes.items():
            if s in reads and reads[s] is not op:
                raise CollsError(f"{op.describe()} writes a chunk that {reads[s].describe()} reads "
                                 f"in the same step")

    def _check_shape(self, op: Op) -> None:
        coll = self.collective
        if not (0 <= op.src < coll.nranks and 0 <= op.dst < coll.nranks):
            raise CollsError(f"{op.describe()} names a rank outside 0..{coll.nranks - 1}")
        if op.count < 1:
            raise CollsError(f"{op.describe()} moves no chunk")
        for buf, idx, who in ((op.src_buf, op.src_index, "source"), (op.dst_buf, op.dst_index, "target")):
            if buf == TRANSIENT:
                continue
            if buf not in BUFFERS:
                raise CollsError(f"{op.describe()} names buffer {buf!r}")
            if not (0 <= idx and idx + op.count <= coll.size(buf, self.scratch)):
                raise CollsError(f"{op.describe()}: {who} is outside buffer {buf}")
        if op.dst_buf == TRANSIENT and (op.local or op.reduce is None):
            raise CollsError(f"{op.describe()}: only a received reduction may stay in flight")
        if op.src_buf == TRANSIENT and op.local:
            raise CollsError(f"{op.describe()}: an in-flight value can only be sent to another rank")

    # --- bandwidth model ------------------------------------------------------------------------------
    def link_loads(self, topology) -> dict:
        """Chunks carried by each physical link (u, v), summed over all ops and their routes."""
        per_route: dict = defaultdict(int)     # few distinct routes carry many ops: each route walked once
        for op in self.ops:
            if op.src != op.dst:
                per_route[op.src, op.dst, op.route] += op.count
        loads: dict = defaultdict(int)
        for key, chunks in per_route.items():
            src, dst, route = key
            route = route or topology.route(src, dst)
            if route is None:
                op = next(op for op in self.ops if (op.src, op.dst, op.route) == key)
                raise CollsError(f"{op.describe()}: no physical route from rank {op.src} to {op.dst}")
            for u, v in zip(route, route[1:]):
                loads[(u, v)] += chunks
        return dict(loads)

    def model_algbw(self, topology) -> tuple[Fraction, tuple | None]:
        """Bandwidth-model algbw in GB/s: total data / max over links of (bytes carried / bandwidth).

        Total data is the nccl-tests ``S`` (the larger of the input and output buffers, across the
        collective: ``nchunksperloop`` chunks). Returns (algbw, the busiest link).
        """
        loads = self.link_loads(topology)
        total = self.collective.nchunksperloop
        worst, link = Fraction(0), None
        for (u, v), chunks in sorted(loads.items(), key=lambda kv: str(kv[0])):
            t = Fraction(chunks) / topology.bw(u, v)
            if t > worst:
                worst, link = t, (u, v)
        if worst == 0:
            return Fraction(0), None
        return Fraction(total) / worst, link


def channel_peers(ops, chan_of) -> dict:
    """(rank, channel, "s" or "r") -> the peers a rank's remote ``ops`` send to (receive from) on that channel
    (``chan_of(op)``)."""
    peers: dict = defaultdict(set)
    for op in ops:
        if not op.local:
            c = chan_of(op)
            peers[(op.src, c, "s")].add(op.dst)
            peers[(op.dst, c, "r")].add(op.src)
    return peers


def fewest_threadblocks(peers: dict) -> dict:
    """rank -> the fewest threadblocks its remote ops need (``peers`` of :func:`channel_peers`): a threadblock
    has one send peer and one receive peer on its channel, so on each channel as many as the peers it sends to
    or receives from, whichever are more."""
    per_rank: dict = defaultdict(int)
    for (rank, chan, d), p in peers.items():
        other = peers.get((rank, chan, "r" if d == "s" else "s"), ())
        if len(p) > len(other) or (len(p) == len(other) and d == "s"):   # each channel once, its larger side
            per_rank[rank] += len(p)
    return per_rank

