"""Program -> MSCCL++ JSON execution plan (the format of MSCCL++ 0.8.0 and later), and back from text.

:func:`plan_of` writes the plan that does what a proved MSCCL XML :class:`~colls.program.Program` does,
step for step; :func:`dumps` gives its exact, deterministic text; :func:`load` reads a plan and refuses
one the MSCCL++ loader would refuse. The facts used are in :mod:`colls.runtimes.mscclpp`, each cited to
microsoft/mscclpp's sources; :mod:`colls.verify.plan` proves a plan.

Mapping (one plan threadblock per XML threadblock, same ids):

- A connection of the XML program (sender gpu, receiver gpu, chan) becomes one channel on each side: a
  memory channel between GPUs of one node, a port channel across nodes. For every pair of GPUs the
  connections between them are listed in one canonical order (sender, receiver, chan) on both sides, so the
  k-th channel from A to B pairs with the k-th from B to A (the executor pairs them by a per-peer counter).
- The k-th message of a connection goes into slot ``k mod S`` of the receiver's scratch (a put, then a
  signal); the receiver waits, then copies or reduces from that slot into its destination at its own step,
  exactly where the XML receive is. Nothing is ever put into a receiver's input or output buffer.
- Credits make slot reuse and consecutive calls safe: at its start the receiving threadblock signals ``S``
  credits (one per slot), the sender waits for a credit before each put, and the receiver signals one credit
  after consuming each message but the last ``S`` (so each call grants exactly as many credits as it has
  messages and leaves every semaphore as it found it). A put into a slot therefore always follows the
  consumption of the slot's previous message, also across calls (the grants of call n+1 are made after the
  receiver has finished call n).
- ``depid``/``deps``: one device semaphore (init 0) per dependency; the producer releases it after the
  step, the consumer acquires it before its step. Each is released and acquired once a call (once a slice
  when pipelined, below). A run of nop steps that only wait (the XML waits on one dependency a step) is one
  ``sem_acquire`` of all their semaphores (:func:`_acquire_runs`).
- Pipelining (``slice_bytes``, on by default: :data:`colls.runtimes.mscclpp.PIPELINE_UNIT_BYTES`; synth and
  compile write each plan with the unit of ``PIPELINE_UNITS`` that simulates fastest,
  :func:`colls.simulate.plans.fastest_slice`): the data
  movement of each step runs inside a ``pipeline`` op of ``num_chunks`` = the step's chunk count, so the
  executor runs it in slices of ``slice_bytes`` and the next hop forwards slice i while this one sends slice
  i + 1, as the MSCCL executor overlaps hops slice by slice. The data handshake is per slice: the receiver's
  wait and the sender's signal (or a port put's own signal) are inside the pipeline, so each runs once per
  iteration on both sides and their counts agree at every call size. The credits stay per message, outside
  the pipelines: a slice lands at the same offset in the slot as in the message (execution_kernel.hpp
  handlePut adds the iteration's offset to source and destination alike), so slots hold whole messages, and
  the credit for a message is granted once all its slices are consumed. A dependency between two pipelined
  one-chunk steps is released and acquired inside both pipelines, once per slice (slice i of every chunk sits at
  the same offset, as in the MSCCL executor's passes); any other stays around the whole step. A plan whose
  pipelined form exceeds 64 ops in a threadblock is written unpipelined.
- Threads: waits, signals, semaphore ops and port puts run on thread 0; copies, reductions and memory puts
  on all threads. A ``nop`` (__syncthreads) separates them where one must see the other's effect, as
  MSCCL++'s own generator does.
- Packets (``protocol="LL"``, :func:`_packet_plan`): every message moves as LL packets, which carry the call's
  flag, into a place of its own in the receiver's scratch; no slots, credits, signals or waits, never
  pipelined, both halves of a double scratch (one per call). Dependencies are the same semaphores.
"""

from __future__ import annotations

import json

from colls.errors import CollsError
from colls.program import STEP_SEMANTICS, Gpu, Program, Step, Threadblock
from colls.runtimes import mscclpp as rt
from colls.topology import node_rotation

# Slots per connection: 2. With one slot each put waits for the receiver to have consumed the previous
# message (a round trip per message); with two the sender fills one slot while the receiver drains the
# other. More slots cost scratch (and so the largest message that fits) and no fewer ops: the receiver
# signals one credit per message either way (S at the start, the rest after consuming).
SLOTS = 2
SUPPORTED = ("allgather", "reducescatter", "allreduce", "alltoall")

TOP_KEYS = ("name", "collective", "protocol", "inplace", "reuse_resources", "gpus", "num_threads_per_block",
            "use_double_scratch_buffer", "buffer_alignment", "min_message_size", "max_message_size")


def _local(buf: str, index: int, size: int) -> dict:
    return {"type": buf, "index": index, "size": size}


def _remote(ref: int, index: int, size: int) -> dict:
    return {"buffer_id": ref, "index": index, "size": size}


class _Conn:
    __slots__ = ("src", "dst", "chan", "sender", "receiver", "ctype", "messages", "slot", "slots",
                 "base", "stage", "src_index", "dst_index", "at", "staged")

    def __init__(self, src, dst, chan):
        self.src, self.dst, self.chan = src, dst, chan
        self.sender = self.receiver = None      # XML threadblock ids
        self.ctype = "memory"
        self.messages: list[int] = []           # cnt of each message, in order
        self.slot = self.slots = self.base = 0
        self.stage = None                       # sender-side staging base (port connections forwarding sums)
        self.src_index = self.dst_index = 0     # channel index on the sender's / receiver's GPU
        self.at: list[int] = []                 # packet plans: each message's packets in the receiver's scratch
        self.staged: list[int] = []             # ... and, across nodes, in the sender's (what the proxy puts)


class _TB:
    """The ops of one threadblock as they are written; ``dirty``: an all-thread op ran since the last nop.
    Between :meth:`open` and :meth:`close` ops go into a pipeline's body."""

    def __init__(self):
        self.ops: list[dict] = []
        self.body: list | None = None
        self.lane = None        # "t0", "all" or "nop" for the last op
        self.dirty = False
        self.acquiring = False  # a sem_acquire spread over several threads since the last nop

    def add(self, op: dict, lane: str) -> None:
        # an acquire of several semaphores runs on as many threads (execution_kernel.hpp handleSemAcquire:
        # tid < nDeviceSemaphores): whatever follows it but another acquire waits for all of them at a nop
        if self.acquiring and op["name"] not in ("sem_acquire", "nop"):
            self.add({"name": "nop"}, "nop")
        (self.ops if self.body is None else self.body).append(op)
        self.lane = lane
        self.dirty = lane == "all" or (self.dirty and lane != "nop")
        self.acquiring = (op["name"] == "sem_acquire" and lane == "all") or (self.acquiring and lane != "nop")

    def sync(self) -> None:
        if self.lane is not None and self.lane != "nop":
            self.add({"name": "nop"}, "nop")

    def open(self, unit: int, nchunks: int) -> None:
        self.body = []
        self.ops.append({"name": "pipeline", "iter_context": {"unit_size": unit, "num_chunks": nchunks},
                         "ops": self.body})

    def close(self) -> None:
        if not self.body:
            self.ops.pop()
        self.body = None

    def sync_after_data(self) -> None:
        """A nop unless every thread's work since the last one is already ordered (before a signal or a
        semaphore release, which thread 0 makes for the whole block)."""
        if self.dirty:
            self.sync()


def plan_of(program: Program, topology, *, name: str, inplace: bool | None = None, slots: int = SLOTS,
            slice_bytes: int | None = rt.PIPELINE_UNIT_BYTES, protocol: str = "Simple") -> dict:
    """The MSCCL++ plan of ``program`` for ``topology`` (which GPUs share a node), named ``name``.

    ``inplace``: the call type the plan is selected for (default: out-of-place when the program serves it).
    ``slice_bytes``: pipeline each step's data movement in slices of this many bytes (None: one message per
    step); a plan whose pipelined form has more than 64 ops in a threadblock is written unpipelined.
    ``protocol``: "Simple", or "LL" for a packet plan (:func:`_packet_plan`; never pipelined, ``slots`` and
    ``slice_bytes`` unused).
    Raises CollsError (naming the limit) when the program cannot be written: a collective or reduction the
    runtime cannot run, more than 64 ops in a threadblock, offsets beyond uint32, or no message size fits.
    """
    if protocol == "LL":
        try:
            return _packet_plan(program, topology, name, inplace)
        except _OverBudget as e:
            raise CollsError(str(e), key="ops") from None
    if protocol != "Simple":
        raise CollsError(f"protocol {protocol!r}: MSCCL++ plans run Simple or LL (execution_plan.cc)", key="protocol")
    if slice_bytes is not None and (slice_bytes <= 0 or slice_bytes % rt.PIPELINE_UNIT_ALIGNMENT):
        raise CollsError(f"a pipeline slice of {slice_bytes} bytes: it must be a positive multiple of "
                         f"{rt.PIPELINE_UNIT_ALIGNMENT} (execution_kernel.hpp handleReduceSend reads int4 "
                         "vectors from offset / 16)", key="slice")
    if slice_bytes is not None:
        try:
            return _plan(program, topology, name, inplace, slots, slice_bytes)
        except _OverBudget:
            pass
    try:
        return _plan(program, topology, name, inplace, slots, None)
    except _OverBudget as e:
        raise CollsError(str(e), key="ops") from None


def fits(program: Program, topology, shift: int | None = None) -> bool:
    """Whether every threadblock's plan of ``program`` stays within MSCCL++'s 64 ops pipelined (as
    :func:`plan_of` writes it by default); anything else the writer would refuse is left to it, with its own
    message. ``shift``: a rotation the program is symmetric under (its proof's, colls.verify.symmetry): only
    the GPUs of one orbit under the rotation by whole nodes it generates are written (:func:`over_budget`)."""
    ranks = node_rotation(shift, topology.node_major()) if shift else None
    for g in program.gpus[:ranks]:
        for tb in g.tbs:
            if sum(least_ops(st) for st in tb.steps) > rt.MAX_OPERATIONS:
                return False        # over whatever its plan: not written to be counted
    return not over_budget(program, topology, rt.PIPELINE_UNIT_BYTES, ranks)


def least_ops(step: Step) -> int:
    """The fewest ops ``step`` takes in its threadblock's pipelined plan (:func:`_tb_plan`; the floors and why
    are in :mod:`colls.runtimes.mscclpp`, PLAN_*_STEP_OPS): 0 for a step that moves no data of a remote peer
    and no data of its own but may still wait (a nop) or is a copy onto itself, 1 for a local copy or sum."""
    sends, receives = STEP_SEMANTICS[step.type][:2]
    if sends and receives:
        return rt.PLAN_RELAY_STEP_OPS
    if sends:
        return rt.PLAN_SEND_STEP_OPS
    if receives:
        return rt.PLAN_RECEIVE_STEP_OPS
    return 1 if _sliced(step, rt.PIPELINE_UNIT_BYTES) else 0


def least_threadblocks(program: Program, ranks: int | None = None) -> tuple[int, int]:
    """A lower bound on the threadblocks of the busiest GPU (of ``0..ranks-1``) once ``program``'s threadblocks
    are cut until each one's pipelined plan holds at most MAX_OPERATIONS ops (colls.lower.LowerOptions.fits, as
    colls.tune.compile_for_plans lowers a program its plan cannot hold): (threadblocks, GPU). The cut keeps
    every step (a step split by count or a relay split in two only takes more ops) with the peers it sends to
    and receives from; a threadblock sends to one peer at most and receives from one, so the steps that send to
    peer P fill threadblocks of their own, at least their :func:`least_ops` over MAX_OPERATIONS of them, and so
    for each peer a GPU receives from."""
    best = (0, 0)
    for g in program.gpus[:ranks]:
        out: dict = {}
        into: dict = {}
        for tb in g.tbs:
            for st in tb.steps:
                ops = least_ops(st)
                sends, receives = STEP_SEMANTICS[st.type][:2]
                if sends:
                    out[tb.send] = out.get(tb.send, 0) + ops
                if receives:
                    into[tb.recv] = into.get(tb.recv, 0) + ops
        least = max(sum(-(-ops // rt.MAX_OPERATIONS) for ops in side.values()) for side in (out, into))
        best = max(best, (least, -g.id))
    return best[0], -best[1]


def over_budget(program: Program, topology, slice_bytes: int | None = None,
                ranks: int | None = None) -> list[tuple[int, int]]:
    """The threadblocks (gpu, tb id) whose plan, written whole (pipelined by ``slice_bytes``), has more than
    MSCCL++'s 64 ops (the lowering cuts their connections onto more channels: colls.lower.LowerOptions.fits).
    ``ranks``: those of GPUs ``0..ranks-1`` only (a GPU's ops read its own threadblocks, the messages of its
    connections and whether each peer shares its node; colls.lower.lower_by_symmetry)."""
    try:
        _plan(program, topology, "fits", None, SLOTS, slice_bytes, ranks)
    except _OverBudget as e:
        return e.over
    except CollsError:
        return []
    return []


def op_count(ops: list) -> int:
    """A threadblock's ops as MSCCL++ counts them against MAX_OPERATIONS: a pipeline and each op of its body
    (EP setupOperations stores the body in line)."""
    return sum(1 + len(op["ops"]) if op["name"] == "pipeline" else 1 for op in ops)


class _OverBudget(Exception):
    """Threadblocks that need more than 64 ops: ``over`` lists them as (gpu, tb id)."""

    def __init__(self, message: str, over: list):
        super().__init__(message)
        self.over = over


def with_unit(plan: dict, unit: int) -> dict:
    """``plan`` (pipelined) with every pipeline's ``unit_size`` set to ``unit``: what :func:`plan_of` writes with
    ``slice_bytes=unit``, as the unit decides nothing else (which steps run in a pipeline, the ops around them)."""
    def ops(seq):
        return [dict(op, iter_context=dict(op["iter_context"], unit_size=unit), ops=ops(op["ops"]))
                if op["name"] == "pipeline" else op for op in seq]
    return dict(plan, gpus=[dict(g, threadblocks=[dict(tb, ops=ops(tb["ops"])) for tb in g["threadblocks"]])
                            for g in plan["gpus"]])


def slice_of(plan: dict) -> int | None:
    """The slice a plan :func:`plan_of` wrote pipelines by (its pipelines' unit_size), or None."""
    for g in plan["gpus"]:
        for tb in g["threadblocks"]:
            for op in tb["ops"]:
                if op["name"] == "pipeline":
                    return op["iter_context"]["unit_size"]
    return None


def _plan(program: Program, topology, name, inplace, slots: int, slice_bytes: int | None,
          ranks: int | None = None) -> dict:
    kind, inplace = _checked(program, name, inplace)
    conns = _connections(program, topology)
    channels = _channel_lists(program, conns)

    # scratch: the program's own chunks first, then the slots of each incoming connection, then staging
    scratch = {g.id: g.s_chunks or 0 for g in program.gpus}
    for c in sorted(conns.values(), key=lambda c: _incoming(c, len(program.gpus))):
        c.slot = max(c.messages)
        c.slots = min(slots, len(c.messages))
        c.base = scratch[c.dst]
        scratch[c.dst] += c.slot * c.slots
    for c in sorted(conns.values(), key=lambda c: _outgoing(c, len(program.gpus))):
        if c.ctype == "port":
            c.stage = scratch[c.src]
            scratch[c.src] += c.slot * c.slots

    gpus, over, first = [], [], None
    for g in program.gpus[:ranks]:
        try:
            gpus.append(_gpu_plan(program, g, conns, channels[g.id], scratch[g.id], slice_bytes))
        except _OverBudget as e:
            over += e.over
            first = first or e
    if first is not None:
        raise _OverBudget(str(first), over)

    return _top(program, name, inplace, gpus, scratch, "Simple")


def _top(program: Program, name: str, inplace: bool, gpus: list, scratch: dict, protocol: str,
         offsets: dict | None = None) -> dict:
    """The plan around its GPUs: the message sizes its offsets allow (``offsets``: the largest offset in
    chunks per GPU, its scratch chunks when None) within the program's own range."""
    chunk_max, basis = _chunk_limit(program, program.coll, offsets or scratch)
    max_size = chunk_max * basis
    if program.max_bytes:
        max_size = min(max_size, program.max_bytes)
    min_size = program.min_bytes or 0
    if chunk_max < rt.BUFFER_ALIGNMENT or max_size < min_size:
        raise CollsError(f"no message size fits: a chunk may be at most {chunk_max} bytes (uint32 offsets, "
                         "execution_common.hpp) and the sizes asked are "
                         f"[{min_size}, {program.max_bytes or 'any'}]", key="max_message_size")
    return {
        "name": name, "collective": program.coll, "protocol": protocol, "inplace": bool(inplace),
        "reuse_resources": False, "gpus": gpus, "num_threads_per_block": rt.MAX_THREADS_PER_BLOCK,
        "use_double_scratch_buffer": protocol == "LL", "buffer_alignment": rt.BUFFER_ALIGNMENT,
        "min_message_size": min_size, "max_message_size": max_size,
    }


def _checked(program: Program, name, inplace) -> tuple[str, bool]:
    """What every plan needs of its program (a collective and reduction MSCCL++ runs, a name, GPU ids in
    order): (the collective, the call type the plan is selected for)."""
    kind = program.coll
    if kind not in SUPPORTED:
        raise CollsError(f"MSCCL++ plans are written for {', '.join(SUPPORTED)}, not {kind!r}", key="coll")
    redop = program.extra.get("redop")
    if redop not in (None, "sum"):
        raise CollsError(f"reduction {redop!r}: MSCCL++ ignores reduce_op and always sums "
                         "(execution_kernel.hpp OpType = SUM)", key="redop")
    if not name:
        raise CollsError("a plan needs a name (the executor caches plans by name)", key="name")
    if [g.id for g in program.gpus] != list(range(len(program.gpus))):
        raise CollsError("gpu ids must be 0..n-1 in order", key="gpu")
    return kind, (not program.outofplace) if inplace is None else inplace


def _incoming(c, n: int) -> tuple:
    """Where a connection's slots go in its receiver's scratch: by receiver, then by the sender's place relative
    to it (``(src - dst) mod n``, not the sender's rank), so GPUs that run one program relabelled get the same
    scratch offsets, which colls.verify.plan's proof by symmetry needs (channel and remote buffer lists may be
    in any order: the proof names channels by the threadblocks that hold them)."""
    return c.dst, (c.src - c.dst) % n, c.chan


def _outgoing(c, n: int) -> tuple:
    """A port connection's staging in its sender's scratch: by sender, then the receiver relative to it."""
    return c.src, (c.dst - c.src) % n, c.chan


def _channel_lists(program: Program, conns: dict) -> dict:
    """Per GPU, per channel type, the peer of each channel in order; the connections of one pair of GPUs in
    one canonical order on both sides (sets each connection's channel index on its sender and receiver)."""
    ngpus = len(program.gpus)
    by_pair: dict = {}
    for c in conns.values():
        by_pair.setdefault(frozenset((c.src, c.dst)), []).append(c)
    channels = {g.id: {"memory": [], "port": []} for g in program.gpus}
    for gid in range(ngpus):
        for peer in range(ngpus):
            for c in sorted(by_pair.get(frozenset((gid, peer)), ()), key=lambda c: (c.src, c.dst, c.chan)):
                if peer == gid:
                    continue
                lst = channels[gid][c.ctype]
                if c.src == gid:
                    c.src_index = len(lst)
                else:
                    c.dst_index = len(lst)
                lst.append(peer)
    return channels


def _chunk_limit(program: Program, kind: str, scratch: dict) -> tuple[int, int]:
    """The largest chunk in bytes every buffer's offsets hold (uint32, aligned), and the chunk count the
    executor's message size counts (output chunks for allgather, input chunks otherwise: EP
    checkMessageSize)."""
    most = max(max(g.i_chunks or 0, g.o_chunks or 0, scratch[g.id]) for g in program.gpus)
    chunk = rt.MAX_OFFSET // max(most, 1) // rt.BUFFER_ALIGNMENT * rt.BUFFER_ALIGNMENT
    g0 = program.gpus[0]
    return chunk, (g0.o_chunks if kind == "allgather" else g0.i_chunks)


def _connections(program: Program, topology) -> dict:
    conns: dict = {}
    for g in program.gpus:
        for tb in g.tbs:
            if tb.send is not None and tb.send >= 0:
                c = conns.setdefault((g.id, tb.send, tb.chan), _Conn(g.id, tb.send, tb.chan))
                if c.sender is not None:
                    raise CollsError(f"gpu {g.id}: two threadblocks send to {tb.send} on channel {tb.chan}",
                                     key="tb")
                c.sender = tb.id
                c.messages = [st.cnt for st in tb.steps if STEP_SEMANTICS[st.type][0]]
            if tb.recv is not None and tb.recv >= 0:
                c = conns.setdefault((tb.recv, g.id, tb.chan), _Conn(tb.recv, g.id, tb.chan))
                if c.receiver is not None:
                    raise CollsError(f"gpu {g.id}: two threadblocks receive from {tb.recv} on channel "
                                     f"{tb.chan}", key="tb")
                c.receiver = tb.id
    for c in conns.values():
        if c.sender is None or c.receiver is None:
            raise CollsError(f"connection {c.src}->{c.dst} chan {c.chan} has no sending or no receiving "
                             "threadblock", key="tb")
        rtb = _tb(program, c.dst, c.receiver)
        received = [st.cnt for st in rtb.steps if STEP_SEMANTICS[st.type][1]]
        if received != c.messages or not c.messages:
            raise CollsError(f"connection {c.src}->{c.dst} chan {c.chan}: the messages sent "
                             f"({len(c.messages)}) do not match those received ({len(received)})", key="step")
        c.ctype = "memory" if topology.node_of(c.src) == topology.node_of(c.dst) else "port"
    return conns


def _tb(program: Program, gid: int, tid: int):
    for tb in program.gpu(gid).tbs:
        if tb.id == tid:
            return tb
    raise KeyError((gid, tid))


def _sliced(st: Step, slice_bytes: int | None) -> bool:
    """Does a step's data movement run in a pipeline? Every step that moves data, when pipelining."""
    if slice_bytes is None or st.type == "nop" or not st.cnt or st.cnt < 1:
        return False
    return not (st.type == "cpy" and (st.srcbuf, st.srcoff) == (st.dstbuf, st.dstoff))


def _gpu_plan(program: Program, g, conns: dict, chans: dict, scratch_chunks: int, slice_bytes,
              staging: dict | None = None) -> dict:
    """One GPU's part of the plan; ``staging`` (packet plans: each threadblock's raw staging chunk in scratch,
    or None) writes its threadblocks with packets (:func:`_packet_tb`)."""
    gid = g.id
    # remote buffers: the scratch of every peer this GPU puts into, by channel type, peers in order
    remote = sorted({(c.dst, c.ctype) for c in conns.values() if c.src == gid})
    remote_id = {key: i for i, key in enumerate(remote)}
    # semaphores: one per dependency (producer tb, producer step) -> (consumer tb, consumer step)
    deps = []
    for tb in g.tbs:
        for k, st in enumerate(tb.steps):
            if st.depid is not None and st.depid >= 0:
                deps.append((st.depid, st.deps, tb.id, k))
    deps.sort()
    sem_of = {d: i for i, d in enumerate(deps)}
    releases: dict = {}
    for d in deps:
        releases.setdefault((d[0], d[1]), []).append(sem_of[d])
    # a dependency between two pipelined one-chunk steps is kept slice by slice (inside both pipelines)
    steps = {tb.id: tb.steps for tb in g.tbs}
    per_slice = set()
    for d in deps:
        a, b = steps[d[0]][d[1]], steps[d[2]][d[3]]
        if _sliced(a, slice_bytes) and _sliced(b, slice_bytes) and a.cnt == b.cnt == 1:
            per_slice.add(sem_of[d])
    tbs = []
    for tb in sorted(g.tbs, key=lambda t: t.id):
        if staging is not None:
            tbs.append(_packet_tb(g, tb, conns, remote_id, sem_of, releases, staging.get(tb.id)))
        else:
            tbs.append(_tb_plan(g, tb, conns, remote_id, sem_of, releases, slice_bytes, per_slice))
    over = [(t["id"], op_count(t["ops"])) for t in tbs if op_count(t["ops"]) > rt.MAX_OPERATIONS]
    if over:
        raise _OverBudget(f"gpu {gid} threadblock {over[0][0]} needs {over[0][1]} ops; MSCCL++ runs at most "
                          f"{rt.MAX_OPERATIONS} per threadblock (MAX_OPERATION, execution_common.hpp)",
                          [(gid, tid) for tid, _ in over])
    channels = [{"channel_type": ct, "connected_to": list(chans[ct])} for ct in ("memory", "port") if chans[ct]]
    return {
        "id": gid, "input_chunks": g.i_chunks or 0, "output_chunks": g.o_chunks or 0,
        "scratch_chunks": scratch_chunks, "threadblocks": tbs, "channels": channels,
        "remote_buffers": [{"rank": peer, "type": "s", "access_channel_types": [ct]} for peer, ct in remote],
        "semaphores": [{"init_value": 0} for _ in deps],
    }


def _tb_plan(g, tb, conns: dict, remote_id: dict, sem_of: dict, releases: dict, slice_bytes, per_slice) -> dict:
    cin, cout, index, tb_chans, refs = _ends(g, tb, conns, remote_id)
    b = _TB()
    if cin is not None:
        for _ in range(cin.slots):           # grant every slot for this call
            b.add({"name": "signal", "channel_ids": [index["in"]], "channel_type": cin.ctype}, "t0")
    k_in = k_out = 0
    for k, st in _one_by_one(b, tb, sem_of, releases):
        sends, receives, reads, writes, _ = STEP_SEMANTICS[st.type]
        cnt = st.cnt
        piped = _sliced(st, slice_bytes)
        acquire = sem_of[(st.depid, st.deps, tb.id, k)] if st.depid is not None and st.depid >= 0 else None
        if acquire is not None and acquire not in per_slice:
            b.add({"name": "sem_acquire", "semaphore_ids": [acquire]}, "t0")
        if piped:
            if sends:                                   # the credit for the whole message
                _grouped(b, "wait", [(cout.ctype, index["out"])])
            b.open(slice_bytes, cnt)
            if acquire in per_slice:
                b.add({"name": "sem_acquire", "semaphore_ids": [acquire]}, "t0")
            if receives:                                # each slice's arrival
                _grouped(b, "wait", [(cin.ctype, index["in"])])
        else:
            waits = []
            if receives:
                waits.append((cin.ctype, index["in"]))
            if sends:
                waits.append((cout.ctype, index["out"]))
            _grouped(b, "wait", waits)
        slot_in = _local("s", cin.base + (k_in % cin.slots) * cin.slot, cnt) if receives else None
        out_at = cout.base + (k_out % cout.slots) * cout.slot if sends else None
        remote = _remote(0, out_at, cnt) if sends else None
        src = _local(st.srcbuf, st.srcoff, cnt) if reads else None
        dst = _local(st.dstbuf, st.dstoff, cnt) if writes else None
        signals = []
        typ = st.type
        if typ in ("cpy", "re"):
            _local_step(b, typ, src, dst)
        elif typ != "nop":
            memory_out = sends and cout.ctype == "memory"
            stage = _local("s", cout.stage + (k_out % cout.slots) * cout.slot, cnt) if sends and not memory_out \
                else None
            if typ == "s":
                b.sync()
                if memory_out:
                    b.add({"name": "put", "src_buff": [src], "dst_buff": [remote], "channel_type": "memory"}, "all")
                else:
                    b.add({"name": "copy", "src_buff": [src], "dst_buff": [stage]}, "all")
                    b.sync()
                    _pws(b, stage, remote, index["out"])
            elif typ in ("r", "rcs"):
                b.sync()
                b.add({"name": "copy", "src_buff": [slot_in], "dst_buff": [dst]}, "all")
                if typ == "rcs" and memory_out:
                    b.add({"name": "put", "src_buff": [slot_in], "dst_buff": [remote], "channel_type": "memory"},
                          "all")
                elif typ == "rcs":
                    b.add({"name": "copy", "src_buff": [slot_in], "dst_buff": [stage]}, "all")
                    b.sync()
                    _pws(b, stage, remote, index["out"])
            else:                                   # rrs, rrc, rrcs: the sum of src and the message
                b.sync()
                if memory_out:
                    into = slot_in if typ == "rrs" else dst
                    b.add({"name": "res", "src_buff": [src, slot_in], "dst_buff": [into, remote],
                           "channel_type": "memory", "reduce_op": "sum"}, "all")
                elif not sends:
                    b.add({"name": "re", "src_buff": [src, slot_in], "dst_buff": [dst], "reduce_op": "sum"}, "all")
                else:
                    b.add({"name": "re", "src_buff": [src, slot_in], "dst_buff": [stage], "reduce_op": "sum"}, "all")
                    b.sync()
                    if typ == "rrcs":
                        b.add({"name": "copy", "src_buff": [stage], "dst_buff": [dst]}, "all")
                    _pws(b, stage, remote, index["out"])
            if memory_out:
                signals.append(("memory", index["out"]))
        credits = []
        if receives:
            if k_in < len(cin.messages) - cin.slots:     # the last S messages' credits are the next call's grants
                credits.append((cin.ctype, index["in"]))
            k_in += 1
        if sends:
            k_out += 1
        ids = releases.get((tb.id, k)) or []
        if piped:
            _signal(b, signals)
            _release(b, [i for i in ids if i in per_slice])
            b.close()
            _signal(b, credits)
            _release(b, [i for i in ids if i not in per_slice])
        else:
            _signal(b, signals + credits)
            _release(b, ids)
    return _tb_dict(tb, b, tb_chans, refs)


def _ends(g, tb, conns: dict, remote_id: dict) -> tuple:
    """A threadblock's incoming and outgoing connections, their indices among its channels, its channels per
    type (incoming first) and its remote buffer refs."""
    gid = g.id
    cin = conns.get((tb.recv, gid, tb.chan)) if tb.recv is not None and tb.recv >= 0 else None
    cout = conns.get((gid, tb.send, tb.chan)) if tb.send is not None and tb.send >= 0 else None
    tb_chans: dict = {}
    index = {}
    for c, gpu_index, role in ((cin, cin.dst_index if cin else 0, "in"), (cout, cout.src_index if cout else 0, "out")):
        if c is None:
            continue
        lst = tb_chans.setdefault(c.ctype, [])
        index[role] = len(lst)
        lst.append(gpu_index)
    refs: dict = {}
    if cout is not None:
        refs[cout.ctype] = [remote_id[(cout.dst, cout.ctype)]]
    return cin, cout, index, tb_chans, refs


def _tb_dict(tb, b: _TB, tb_chans: dict, refs: dict) -> dict:
    return {
        "id": tb.id, "ops": b.ops,
        "channels": [{"channel_type": ct, "channel_ids": tb_chans[ct]} for ct in ("memory", "port") if ct in tb_chans],
        "remote_buffer_refs": [{"access_channel_type": ct, "remote_buffer_ids": refs[ct]}
                               for ct in ("memory", "port") if ct in refs],
    }


# --------------------------------------------------------------------------------------------------
# packets: the LL protocol
# --------------------------------------------------------------------------------------------------
# A packet plan (protocol "LL") moves every message as LL packets (colls.runtimes.mscclpp PACKET_*): the
# sender writes data and the call's flag together, the receiver's packet op polls each packet's flag, so there
# is no signal, wait or credit. Each message of a call has packets of its own in the receiver's scratch (a
# region is written once a call); consecutive calls use the two halves of a double scratch, and a later call
# reuses a half only once every rank has started the call between (colls.verify.plan checks the plan gives
# that order). The scratch holds the program's own raw chunks first, then the packets (packet index p is at
# byte 2 p chunk: the kernel doubles packet offsets), then each threadblock's raw staging.

def _packet_plan(program: Program, topology, name, inplace) -> dict:
    kind, inplace = _checked(program, name, inplace)
    conns = _connections(program, topology)
    channels = _channel_lists(program, conns)
    own = {g.id: g.s_chunks or 0 for g in program.gpus}
    packets = {gid: -(-n // 2) for gid, n in own.items()}   # packet index p starts at byte 2 p chunk >= raw's end
    for c in sorted(conns.values(), key=lambda c: _incoming(c, len(program.gpus))):
        for cnt in c.messages:
            c.at.append(packets[c.dst])
            packets[c.dst] += cnt
    for c in sorted(conns.values(), key=lambda c: _outgoing(c, len(program.gpus))):
        if c.ctype == "port":
            for cnt in c.messages:
                c.staged.append(packets[c.src])
                packets[c.src] += cnt
    # each threadblock's raw staging past the packets (a raw chunk at or beyond twice the first packet index is
    # staging, one below it the program's own: program_of tells them apart so)
    staging: dict = {}
    ends = {}
    for g in program.gpus:
        staging[g.id] = {}
        end = 2 * packets[g.id]
        for tb in sorted(g.tbs, key=lambda t: t.id):
            need = max((st.cnt for st in tb.steps if st.type == "rrs"), default=0)
            if need:
                staging[g.id][tb.id] = end
                end += need
        ends[g.id] = -(-end // 2)
    # every rank's scratch the same size: a sender writes into the peer's half at its own half's offset
    # (execution_kernel.hpp adds the sender's scratchOffset_ to the remote address)
    chunks = max(ends.values())
    scratch = {g.id: chunks for g in program.gpus}
    gpus = [_gpu_plan(program, g, conns, channels[g.id], chunks, None, staging[g.id]) for g in program.gpus]
    return _top(program, name, inplace, gpus, scratch, "LL", offsets={gid: 2 * n for gid, n in scratch.items()})


def _packet_tb(g, tb, conns: dict, remote_id: dict, sem_of: dict, releases: dict, stage_raw: int | None) -> dict:
    """One threadblock of a packet plan, step for step as the XML runs it: a send puts packets (``ppkt``; across
    nodes the data is packed into the sender's scratch and the proxy puts the packets, ``cpkt`` + ``rppkt``), a
    receive unpacks them (``upkt``), reduces with them (``repkt``) or forwards them (``rppkt``, ``respkt``)."""
    cin, cout, index, tb_chans, refs = _ends(g, tb, conns, remote_id)
    b = _TB()
    k_in = k_out = 0
    for k, st in _one_by_one(b, tb, sem_of, releases):
        sends, receives, reads, writes, _ = STEP_SEMANTICS[st.type]
        cnt, typ = st.cnt, st.type
        if st.depid is not None and st.depid >= 0:
            b.add({"name": "sem_acquire", "semaphore_ids": [sem_of[(st.depid, st.deps, tb.id, k)]]}, "t0")
        src = _local(st.srcbuf, st.srcoff, cnt) if reads else None
        dst = _local(st.dstbuf, st.dstoff, cnt) if writes else None
        got = _local("s", cin.at[k_in], cnt) if receives else None
        remote = _remote(0, cout.at[k_out], cnt) if sends else None
        port = sends and cout.ctype == "port"
        staged = _local("s", cout.staged[k_out], cnt) if port else None
        keep = _local("s", stage_raw, cnt) if typ == "rrs" else dst

        def forward(packed):                # packets already in this GPU's scratch, on to the peer
            op = {"name": "rppkt", "src_buff": [packed], "dst_buff": [remote], "channel_type": cout.ctype}
            if port:
                op["channel_ids"] = [index["out"]]
            b.add(op, "all")

        if typ in ("cpy", "re"):
            _local_step(b, typ, src, dst)
        elif typ == "s":
            b.sync()
            if port:
                b.add({"name": "cpkt", "src_buff": [src], "dst_buff": [staged]}, "all")
                forward(staged)
            else:
                b.add({"name": "ppkt", "src_buff": [src], "dst_buff": [remote], "channel_type": "memory"}, "all")
        elif typ in ("r", "rcs"):
            b.sync()
            b.add({"name": "upkt", "src_buff": [got], "dst_buff": [dst]}, "all")
            if typ == "rcs":
                forward(got)
        elif typ == "rrc":
            b.sync()
            b.add({"name": "repkt", "src_buff": [src, got], "dst_buff": [dst], "reduce_op": "sum"}, "all")
        elif typ in ("rrs", "rrcs"):
            b.sync()
            if port:
                b.add({"name": "repkt", "src_buff": [src, got], "dst_buff": [keep], "reduce_op": "sum"}, "all")
                b.sync()
                b.add({"name": "cpkt", "src_buff": [keep], "dst_buff": [staged]}, "all")
                forward(staged)
            else:
                b.add({"name": "respkt", "src_buff": [src, got], "dst_buff": [keep, remote], "channel_type": "memory",
                       "reduce_op": "sum"}, "all")
        k_in += bool(receives)
        k_out += bool(sends)
        _release(b, releases.get((tb.id, k)) or [])
    return _tb_dict(tb, b, tb_chans, refs)


def _local_step(b: _TB, typ: str, src, dst) -> None:
    """A step that moves data inside its GPU (cpy, re), written as a copy or a reduction (a copy onto itself,
    an in-place call's own chunk, as nothing)."""
    if typ == "re":
        b.sync()
        b.add({"name": "re", "src_buff": [dst, src], "dst_buff": [dst], "reduce_op": "sum"}, "all")
    elif src != dst:
        b.sync()
        b.add({"name": "copy", "src_buff": [src], "dst_buff": [dst]}, "all")


def _one_by_one(b: _TB, tb, sem_of: dict, releases: dict):
    """(index, step) of the threadblock's steps its writer writes one by one; a run of nops that only wait
    (:func:`_acquire_runs`) is written here, as its acquires at once and the last step's releases."""
    runs = _acquire_runs(tb, sem_of, releases)
    skip = 0
    for k, st in enumerate(tb.steps):
        if k < skip:
            continue
        if k in runs:
            ids = runs[k]
            b.sync()
            for at in _spread(len(ids)):
                b.add({"name": "sem_acquire", "semaphore_ids": ids[at[0]:at[1]]}, "all")
            _release(b, releases.get((tb.id, k + len(ids) - 1)) or [])
            skip = k + len(ids)
            continue
        yield k, st


def _acquire_runs(tb, sem_of: dict, releases: dict) -> dict:
    """Runs of two or more consecutive nop steps that each only acquire a dependency (no step of the run but
    the last releases one), by first step: their semaphore ids. Such a run is written as one ``sem_acquire``
    of all its ids (thread i acquires semaphore_ids[i], execution_kernel.hpp handleSemAcquire; at most
    MAX_SEMAPHORES_PER_OP a op), then the last step's releases: nothing the run's steps do is reordered but
    their waits, which now overlap. The MSCCL executor waits on one dependency a step, so its lowering writes a
    threadblock that waits for many (an in-place alltoall's own block, after every send has read it) as that
    many nops; one op each would take a plan past 64 ops."""
    runs: dict = {}
    k, steps = 0, tb.steps
    while k < len(steps):
        j = k
        while j < len(steps) and steps[j].type == "nop" and steps[j].depid is not None and steps[j].depid >= 0 \
                and (j == k or not releases.get((tb.id, j - 1))):
            j += 1
        if j - k >= 2:
            runs[k] = [sem_of[(steps[x].depid, steps[x].deps, tb.id, x)] for x in range(k, j)]
            k = j
        else:
            k += 1
    return runs


def _spread(n: int) -> list[tuple[int, int]]:
    """``n`` (at least 2) semaphore ids as ranges of at most MAX_SEMAPHORES_PER_OP, each of at least two (so a
    reader tells a run's acquires from a single step's, which always has one id)."""
    per = rt.MAX_SEMAPHORES_PER_OP
    ops = -(-n // per)
    cuts = [n * i // ops for i in range(ops + 1)]
    return list(zip(cuts, cuts[1:]))


def _signal(b: _TB, signals: list) -> None:
    if signals:
        b.sync_after_data()
        _grouped(b, "signal", sorted(signals, key=lambda s: s[0] != "memory"))


def _release(b: _TB, ids: list) -> None:
    if ids:
        b.sync_after_data()
        for at in range(0, len(ids), rt.MAX_SEMAPHORES_PER_OP):
            b.add({"name": "sem_release", "semaphore_ids": ids[at:at + rt.MAX_SEMAPHORES_PER_OP]}, "t0")


def _pws(b: _TB, src: dict, remote: dict, channel: int) -> None:
    """A port put with its signal (one proxy request each, in order: the data lands before the signal)."""
    b.add({"name": "pws", "src_buff": [src], "dst_buff": [remote], "channel_ids": [channel],
           "channel_type": "port"}, "t0")


def _grouped(b: _TB, name: str, pairs: list) -> None:
    """One signal/wait op per channel type over the given (type, channel index) pairs (thread i takes
    channel_ids[i], execution_kernel.hpp handleSignal/handleWait)."""
    for ct in ("memory", "port"):
        ids = [i for t, i in pairs if t == ct]
        if ids:
            b.add({"name": name, "channel_ids": ids, "channel_type": ct}, "t0")


# --------------------------------------------------------------------------------------------------
# text
# --------------------------------------------------------------------------------------------------

def dumps(plan: dict) -> str:
    """The plan's text: keys in the order MSCCL++'s own plans write them, two-space indent, a final newline.
    The same plan always gives the same bytes."""
    ordered = {k: plan[k] for k in TOP_KEYS if k in plan}
    ordered.update({k: v for k, v in plan.items() if k not in ordered})
    return json.dumps(ordered, indent=2, ensure_ascii=True) + "\n"


def is_plan_text(text: str) -> bool:
    """Whether ``text`` is read as an MSCCL++ plan (JSON: its first character, after white space, opens an object
    or a list) rather than MSCCL XML, by every command that takes either."""
    return text.lstrip()[:1] in ("{", "[")


def load(text: str, source: str, shape: bool = True) -> dict:
    """Read a plan's text; CollsError naming ``source`` and the key when it is not a plan the MSCCL++
    loader can read (not JSON, a required key missing or of the wrong type). ``shape=False``: only not JSON
    (``colls verify`` reports the rest as findings of an invalid plan)."""
    try:
        plan = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise CollsError(f"not JSON: {e}", source=source) from None
    problems = shape_problems(plan) if shape else []
    if problems:
        key, message = problems[0]
        raise CollsError(message, source=source, key=key)
    return plan


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def shape_problems(plan) -> list[tuple[str, str]]:
    """(key path, message) for every required key the loader reads with ``[]`` that is missing or of a
    type it cannot convert (execution_plan.cc), in document order."""
    out: list = []
    if not isinstance(plan, dict):
        return [("", "a plan is a JSON object")]
    for key in rt.REQUIRED_KEYS:
        if key not in plan:
            out.append((key, "missing (the loader reads it with obj[...] and throws)"))
    for key in ("name", "collective", "protocol"):
        if key in plan and not isinstance(plan[key], str):
            out.append((key, "must be a string"))
    if "inplace" in plan and not isinstance(plan["inplace"], bool):
        out.append(("inplace", "must be true or false"))
    for key in ("num_threads_per_block", "min_message_size", "max_message_size", "buffer_alignment"):
        if key in plan and not (_is_int(plan[key]) and 0 <= plan[key] < 2**64):
            out.append((key, "must be a non-negative integer"))
    if "gpus" not in plan:
        return out
    gpus = plan["gpus"]
    if not isinstance(gpus, list) or not gpus:
        return out + [("gpus", "must be a non-empty list")]
    for r, g in enumerate(gpus):
        where = f"gpus[{r}]"
        if not _has_keys(g, where, rt.GPU_KEYS, out):
            continue
        for key in ("id", "input_chunks", "output_chunks", "scratch_chunks"):
            if key in g and not (_is_int(g[key]) and g[key] >= 0):
                out.append((f"{where}.{key}", "must be a non-negative integer"))
        _not_lists(g, where, ("threadblocks", "channels", "remote_buffers"), out)
        for i, ch in enumerate(g.get("channels") or []):
            if not (isinstance(ch, dict) and ch.get("channel_type") in rt.CHANNEL_TYPES):
                out.append((f"{where}.channels[{i}].channel_type", "must be memory, port or switch"))
            elif ch["channel_type"] in ("memory", "port") and not (
                    isinstance(ch.get("connected_to"), list) and all(_is_int(p) for p in ch["connected_to"])):
                out.append((f"{where}.channels[{i}].connected_to", "must be a list of ranks"))
        # optional; each entry's init_value is read with [] (execution_plan.cc setupSemaphores)
        for i, sem in enumerate([] if _not_lists(g, where, ("semaphores",), out) else g.get("semaphores", [])):
            if not (isinstance(sem, dict) and _is_int(sem.get("init_value"))):
                out.append((f"{where}.semaphores[{i}].init_value", "must be an integer (the loader reads it with "
                            "[] and throws)"))
        for i, rb in enumerate(g.get("remote_buffers") or []):
            if not (isinstance(rb, dict) and _is_int(rb.get("rank")) and rb.get("type") in rt.BUFFER_TYPES
                    and isinstance(rb.get("access_channel_types"), list)
                    and all(t in rt.CHANNEL_TYPES for t in rb["access_channel_types"])):
                out.append((f"{where}.remote_buffers[{i}]", "needs rank, type i|o|s and access_channel_types"))
        for t, tb in enumerate(g.get("threadblocks") or []):
            tw = f"{where}.threadblocks[{t}]"
            if not _has_keys(tb, tw, rt.TB_KEYS, out):
                continue
            if "id" in tb and not _is_int(tb["id"]):
                out.append((f"{tw}.id", "must be an integer"))
            _not_lists(tb, tw, ("channels", "remote_buffer_refs"), out)
            for i, ch in enumerate(tb.get("channels") or []):
                if not (isinstance(ch, dict) and ch.get("channel_type") in rt.CHANNEL_TYPES
                        and isinstance(ch.get("channel_ids"), list) and all(_is_int(x) for x in ch["channel_ids"])):
                    out.append((f"{tw}.channels[{i}]", "needs channel_type and a list of channel_ids"))
            for i, ref in enumerate(tb.get("remote_buffer_refs") or []):
                if not (isinstance(ref, dict) and ref.get("access_channel_type") in rt.CHANNEL_TYPES
                        and isinstance(ref.get("remote_buffer_ids"), list)
                        and all(_is_int(x) for x in ref["remote_buffer_ids"])):
                    out.append((f"{tw}.remote_buffer_refs[{i}]", "needs access_channel_type and remote_buffer_ids"))
            if _not_lists(tb, tw, ("ops",), out):
                continue
            for o, op in enumerate(tb.get("ops", [])):
                _op_shape(op, f"{tw}.ops[{o}]", out)
    return out


def _not_lists(obj: dict, where: str, keys, out: list) -> bool:
    """Is any of ``keys`` present in ``obj`` but not a list? Each such is a problem, in the order of ``keys``."""
    bad = [key for key in keys if key in obj and not isinstance(obj[key], list)]
    out.extend((f"{where}.{key}", "must be a list") for key in bad)
    return bool(bad)


def _has_keys(obj, where: str, keys, out: list) -> bool:
    """Is ``obj`` an object? Each of ``keys`` it lacks is a problem."""
    if not isinstance(obj, dict):
        out.append((where, "must be an object"))
        return False
    out.extend((f"{where}.{key}", "missing") for key in keys if key not in obj)
    return True


def _op_shape(op, where: str, out: list) -> None:
    if not isinstance(op, dict) or op.get("name") not in rt.OP_NAMES:
        out.append((f"{where}.name", f"unknown operation {op.get('name') if isinstance(op, dict) else op!r} "
                    "(the loader throws 'Invalid operation type')"))
        return
    if "channel_type" in op and op["channel_type"] not in rt.CHANNEL_TYPES:
        out.append((f"{where}.channel_type", "must be memory, port, switch or none"))
    for key in ("src_buff", "dst_buff"):
        if key not in op:
            continue
        if not isinstance(op[key], list):
            out.append((f"{where}.{key}", "must be a list of operands"))
            continue
        for i, b in enumerate(op[key]):
            ok = isinstance(b, dict) and _is_int(b.get("index")) and _is_int(b.get("size"))
            ok = ok and (b.get("type") in rt.BUFFER_TYPES or _is_int(b.get("buffer_id"))
                         or _is_int(b.get("switch_channel_id")))
            if not ok:
                out.append((f"{where}.{key}[{i}]", "an operand needs index, size and type i|o|s or buffer_id"))
    for key in ("channel_ids", "semaphore_ids"):
        if key in op and not (isinstance(op[key], list) and all(_is_int(x) for x in op[key])):
            out.append((f"{where}.{key}", "must be a list of integers"))
    if op["name"] == "barrier" and not (_is_int(op.get("barrier_id")) and _is_int(op.get("num_threadblocks"))):
        out.append((f"{where}.barrier_id", "a barrier needs barrier_id and num_threadblocks"))
    if op["name"] == "pipeline":
        ctx = op.get("iter_context")
        if not (isinstance(ctx, dict) and _is_int(ctx.get("unit_size")) and _is_int(ctx.get("num_chunks"))
                and isinstance(op.get("ops"), list)):
            out.append((f"{where}.iter_context", "a pipeline needs iter_context {unit_size, num_chunks} and ops"))
        else:
            for i, inner in enumerate(op["ops"]):
                _op_shape(inner, f"{where}.ops[{i}]", out)


# --------------------------------------------------------------------------------------------------
# back: the Program a plan colls wrote came from
# --------------------------------------------------------------------------------------------------

NOT_OURS = "not a plan colls writes"


class _Refused(Exception):
    """The plan departs from what :func:`plan_of` writes (the message says where)."""


def program_of(plan: dict, topology, source: str) -> Program:
    """The Program ``plan`` was written from by :func:`plan_of`, read back from its ops, for timing it.

    Only the shapes :func:`plan_of` writes are read: the Program found is written again with
    :func:`plan_of` for ``topology`` and must give the plan back exactly. CollsError naming ``source`` when the
    plan is for another number of GPUs, has channel types this machine's nodes do not give, or has any other
    shape (a plan from MSCCL++'s own generator, or one edited by hand)."""
    kind = plan["collective"]
    n = len(plan["gpus"])
    if n != topology.ngpus:
        raise CollsError(f"the plan is for {n} GPUs but {topology.name} has {topology.ngpus}", source=source,
                         key="gpus")
    if kind not in SUPPORTED:
        raise CollsError(f"{NOT_OURS}: collective {kind!r} (colls writes {', '.join(SUPPORTED)})", source=source,
                         key="collective")
    try:
        program = _read_program(plan, topology)
    except _Refused as e:
        raise CollsError(f"{NOT_OURS} ({e}); colls times only the plans it wrote", source=source) from None
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise CollsError(f"{NOT_OURS} (unexpected {type(e).__name__} while reading its ops); colls times only "
                         "the plans it wrote", source=source) from None
    try:
        again = plan_of(program, topology, name=plan["name"], inplace=plan["inplace"], slice_bytes=slice_of(plan),
                        protocol=plan["protocol"])
    except CollsError as e:
        raise CollsError(f"{NOT_OURS} ({e})", source=source) from None
    if json.loads(dumps(again)) != json.loads(json.dumps(plan)):
        where = _first_difference(json.loads(dumps(again)), json.loads(json.dumps(plan)))
        raise CollsError(f"{NOT_OURS}: written again from the program its ops describe, it differs at {where}; "
                         "colls times only the plans it wrote", source=source)
    return program


def _first_difference(a, b, path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            if a.get(k) != b.get(k):
                return _first_difference(a.get(k), b.get(k), f"{path}.{k}" if path else k)
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return _first_difference(x, y, f"{path}[{i}]")
        if len(a) != len(b):
            return f"{path} (length {len(b)}, expected {len(a)})"
    return path or "the top level"


def _read_program(plan: dict, topology) -> Program:
    gpus = plan["gpus"]
    n = len(gpus)
    peers = []          # per gpu: {type: [peer per channel index]}
    for r, g in enumerate(gpus):
        per = {"memory": [], "port": []}
        for ch in g["channels"]:
            if ch["channel_type"] not in per:
                raise _Refused(f"gpu {r} has a {ch['channel_type']} channel")
            per[ch["channel_type"]] += ch["connected_to"]
        peers.append(per)
        for ct, lst in per.items():
            for p in lst:
                want = "memory" if topology.node_of(p) == topology.node_of(r) else "port"
                if want != ct:
                    raise _Refused(f"gpu {r} reaches gpu {p} by a {ct} channel, but on {topology.name} they "
                                   f"are {'on one node' if want == 'memory' else 'on different nodes'}: the plan "
                                   "was written for another machine")
    # each threadblock's incoming and outgoing channel: (type, index in the GPU's list of that type)
    ends = {}
    for r, g in enumerate(gpus):
        for pos, tb in enumerate(g["threadblocks"]):
            if tb["id"] != pos:
                raise _Refused(f"gpu {r} threadblock {pos} has id {tb['id']}")
            chans = {c["channel_type"]: list(c["channel_ids"]) for c in tb["channels"]}
            refs = tb.get("remote_buffer_refs") or []
            out_ct = None
            if refs:
                if len(refs) != 1 or len(refs[0]["remote_buffer_ids"]) != 1:
                    raise _Refused(f"gpu {r} threadblock {pos} refers to several remote buffers")
                out_ct = refs[0]["access_channel_type"]
            cin = cout = None
            for ct, ids in chans.items():
                if ct == out_ct:
                    if len(ids) == 2:
                        cin, cout = (ct, ids[0]), (ct, ids[1])
                    elif len(ids) == 1:
                        cout = (ct, ids[0])
                    else:
                        raise _Refused(f"gpu {r} threadblock {pos} has {len(ids)} {ct} channels")
                elif len(ids) == 1 and cin is None:
                    cin = (ct, ids[0])
                else:
                    raise _Refused(f"gpu {r} threadblock {pos} has {len(ids)} {ct} channels")
            if out_ct is not None and cout is None:
                raise _Refused(f"gpu {r} threadblock {pos} has a remote buffer but no channel to put over")
            if cout is not None:
                rb = g["remote_buffers"][refs[0]["remote_buffer_ids"][0]]
                if rb["rank"] != peers[r][cout[0]][cout[1]] or rb["type"] != "s":
                    raise _Refused(f"gpu {r} threadblock {pos} puts into a buffer that is not its peer's scratch")
            ends[(r, pos)] = (cin, cout)
    # connections: the j-th channel a GPU lists for a peer is the same on both sides (plan_of's canonical
    # order); the direction is that of the threadblock using it
    used: dict = {}
    for (r, pos), (cin, cout) in ends.items():
        for role, end in (("in", cin), ("out", cout)):
            if end is None:
                continue
            ct, idx = end
            p = peers[r][ct][idx]
            j = sum(1 for q in peers[r][ct][:idx] if q == p)
            key = (r, ct, idx)
            if key in used:
                raise _Refused(f"gpu {r} uses {ct} channel {idx} in two threadblocks")
            used[key] = (role, pos, p, j)
    conns: dict = {}            # (src, dst, ct, j) -> [sender (gpu, tb), receiver (gpu, tb)]
    for (r, ct, idx), (role, pos, p, j) in used.items():
        key = (r, p, ct, j) if role == "out" else (p, r, ct, j)
        conns.setdefault(key, [None, None])[0 if role == "out" else 1] = (r, pos)
    for key, (snd, rcv) in conns.items():
        if snd is None or rcv is None:
            raise _Refused(f"the channel from gpu {key[0]} to gpu {key[1]} has no threadblock on one side")
    conn_of = {}
    for key, (snd, rcv) in conns.items():
        conn_of[("out",) + snd] = key
        conn_of[("in",) + rcv] = key
    chan = _channel_numbers(conns, conn_of, ends)
    # the steps, threadblock by threadblock
    packets = plan["protocol"] == "LL"
    first_packet = [_first_packet(g) for g in gpus] if packets else None
    sems: dict = {}            # (gpu, semaphore) -> [release (tb, step), acquire (tb, step)]
    tbs: dict = {}
    messages: dict = {}
    for (r, pos), (cin, cout) in sorted(ends.items()):
        tb = gpus[r]["threadblocks"][pos]
        local = {}
        for ct, ids in ((c["channel_type"], c["channel_ids"]) for c in tb["channels"]):
            for k, gidx in enumerate(ids):
                local[(ct, k)] = gidx
        in_local = next((k for (ct, k), gidx in local.items() if cin and ct == cin[0] and gidx == cin[1]), None)
        out_local = next((k for (ct, k), gidx in local.items() if cout and ct == cout[0] and gidx == cout[1]), None)
        if packets:
            steps = _read_packet_steps(tb["ops"], r, pos, sems, 2 * first_packet[r])
        else:
            steps = _read_steps(tb["ops"], cin, cout, in_local, out_local, r, pos, sems)
        send = conn_of[("out", r, pos)][1] if cout else -1
        recv = conn_of[("in", r, pos)][0] if cin else -1
        c = chan[(r, pos)]
        tbs[(r, pos)] = Threadblock(pos, send, recv, c, steps)
        if cout:
            messages.setdefault(conn_of[("out", r, pos)], [None, None])[0] = [
                st.cnt for st in steps if STEP_SEMANTICS[st.type][0]]
        if cin:
            messages.setdefault(conn_of[("in", r, pos)], [None, None])[1] = [
                st.cnt for st in steps if STEP_SEMANTICS[st.type][1]]
    for (r, s), (rel, acq) in sems.items():
        if rel is None or acq is None:
            raise _Refused(f"gpu {r} semaphore {s} is {'never released' if rel is None else 'never acquired'}")
        st = tbs[(r, acq[0])].steps[acq[1]]
        st.depid, st.deps = rel
        tbs[(r, rel[0])].steps[rel[1]].hasdep = 1
    # the program's own scratch: what is left after the slots and staging plan_of adds (packet plans: the raw
    # chunks below the first packet, which starts at half of them rounded up; the larger count writes the same)
    extra = [0] * len(gpus)
    for key, (sent, got) in messages.items():
        if not sent or sent != got:
            raise _Refused(f"the messages sent from gpu {key[0]} to gpu {key[1]} differ from those received")
        room = max(sent) * min(SLOTS, len(sent))
        extra[key[1]] += room
        if key[2] == "port":
            extra[key[0]] += room
    out = []
    for r, g in enumerate(gpus):
        own = 2 * first_packet[r] if packets else g["scratch_chunks"] - extra[r]
        if own < 0:
            raise _Refused(f"gpu {r} has less scratch than its connections' slots need")
        out.append(Gpu(r, g["input_chunks"], g["output_chunks"], own,
                       [tbs[(r, pos)] for pos in range(len(g["threadblocks"]))]))
    g0 = gpus[0]
    basis = g0["output_chunks"] if plan["collective"] == "allgather" else g0["input_chunks"]
    inplace = bool(plan["inplace"])
    return Program(plan["name"], plan["collective"], n, basis, max(chan.values(), default=0) + 1, plan["protocol"],
                   int(inplace), int(not inplace), plan.get("min_message_size", 0),
                   plan.get("max_message_size", 0), out)


def _channel_numbers(conns: dict, conn_of: dict, ends: dict) -> dict:
    """An MSCCL channel for every threadblock: its incoming and outgoing connections share it (one ``chan``
    per ``<tb>``), and the connections of one direction keep their order (plan_of sorts a pair's connections
    by (sender, receiver, chan))."""
    parent = {key: key for key in conns}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    for (r, pos), (cin, cout) in ends.items():
        if cin and cout:
            a, b = find(conn_of[("in", r, pos)]), find(conn_of[("out", r, pos)])
            if a != b:
                parent[a] = b
    groups = sorted({find(k) for k in conns})
    after = {g: set() for g in groups}          # group -> groups that must get a larger number
    by_direction: dict = {}
    for key in conns:
        by_direction.setdefault(key[:3], []).append(key)
    for keys in by_direction.values():
        keys.sort(key=lambda k: k[3])
        for a, b in zip(keys, keys[1:]):
            if find(a) == find(b):
                raise _Refused("two connections of one direction share a threadblock chain")
            after[find(a)].add(find(b))
    number, left = {}, {g: 0 for g in groups}
    for g in groups:
        for h in after[g]:
            left[h] += 1
    ready = [g for g in groups if not left[g]]
    while ready:
        ready.sort()
        g = ready.pop(0)
        number[g] = len(number)
        for h in sorted(after[g]):
            left[h] -= 1
            if not left[h]:
                ready.append(h)
    if len(number) != len(groups):
        raise _Refused("the channel order cannot come from one channel per threadblock")
    out = {}
    for (r, pos), (cin, cout) in ends.items():
        key = conn_of[("in", r, pos)] if cin else conn_of[("out", r, pos)] if cout else None
        out[(r, pos)] = number[find(key)] if key is not None else 0
    return out


class _Reader:
    """What reading one threadblock's ops back needs: refusing with its place, local operands, and the
    semaphores' releases and acquires (``sems``: (gpu, semaphore) -> [release (tb, step), acquire (tb, step)])."""

    def __init__(self, seq: list, gpu: int, tb: int, sems: dict):
        self.seq, self.gpu, self.tb, self.sems = seq, gpu, tb, sems

    def fail(self, what):
        raise _Refused(f"gpu {self.gpu} threadblock {self.tb} op {what}")

    def local(self, operand):
        if "type" not in operand:
            self.fail("with a remote operand where a local one is written")
        return operand["type"], operand["index"], operand["size"]

    def acquired(self, s, k):
        entry = self.sems.setdefault((self.gpu, s), [None, None])
        if entry[1] is not None:
            self.fail(f"acquires semaphore {s} twice")
        entry[1] = (self.tb, k)

    def released(self, i, k):
        """The releases after step k's ops (signals among them skipped); the index after them."""
        seq = self.seq
        while i < len(seq) and seq[i]["name"] in ("signal", "sem_release"):
            if seq[i]["name"] == "signal":
                i += 1
                continue
            for s in seq[i]["semaphore_ids"]:
                entry = self.sems.setdefault((self.gpu, s), [None, None])
                if entry[0] is not None:
                    self.fail(f"releases semaphore {s} twice")
                entry[0] = (self.tb, k)
            i += 1
        return i


def _read_steps(ops: list, cin, cout, in_local, out_local, gpu: int, tb: int, sems: dict) -> list:
    """The XML steps of one threadblock's ops (the inverse of :func:`_tb_plan`, nops skipped and pipeline
    bodies read in line: writing the program again checks where they are)."""
    flat = []
    for op in ops:
        flat.extend(op["ops"] if op["name"] == "pipeline" else [op])
    seq = [op for op in flat if op["name"] != "nop"]
    i = 0
    if cin is not None:
        while i < len(seq) and seq[i]["name"] == "signal" and seq[i].get("channel_ids") == [in_local] \
                and seq[i].get("channel_type") == cin[0]:
            i += 1
    steps: list = []
    rd = _Reader(seq, gpu, tb, sems)
    fail, local, acquired, released = rd.fail, rd.local, rd.acquired, rd.released

    while i < len(seq):
        if seq[i]["name"] == "sem_acquire" and len(seq[i]["semaphore_ids"]) > 1:
            ids = []                    # a run of nop steps that only acquire (_acquire_runs)
            while i < len(seq) and seq[i]["name"] == "sem_acquire" and len(seq[i]["semaphore_ids"]) > 1:
                ids += seq[i]["semaphore_ids"]
                i += 1
            for s in ids:
                acquired(s, len(steps))
                steps.append(_read_step(len(steps), "nop"))
            i = released(i, len(steps) - 1)
            continue
        k = len(steps)
        acquire = None
        receives = sends = False
        acquired_at = None
        while i < len(seq) and seq[i]["name"] in ("wait", "sem_acquire"):
            if seq[i]["name"] == "sem_acquire":        # before the waits, or inside the pipeline after the credit's
                if len(seq[i]["semaphore_ids"]) != 1:
                    fail("sem_acquire of several semaphores in a step that waits or moves data")
                if acquire is not None:                 # a second one: the first was a nop step's
                    i, receives, sends = acquired_at + 1, False, False
                    break
                acquire, acquired_at = seq[i]["semaphore_ids"][0], i
                i += 1
                continue
            for c in seq[i]["channel_ids"]:
                if cin and seq[i]["channel_type"] == cin[0] and c == in_local and not receives:
                    receives = True
                elif cout and seq[i]["channel_type"] == cout[0] and c == out_local and not sends:
                    sends = True
                else:
                    fail(f"waits on {seq[i]['channel_type']} channel {c}")
            i += 1
        body = []
        while i < len(seq) and seq[i]["name"] in ("copy", "re", "res", "put", "pws"):
            if body and not sends and not receives:
                break               # a cpy or re step is one op
            body.append(seq[i])
            i += 1
            if body[-1]["name"] in ("put", "pws", "res"):
                break
            if receives and not sends:
                break
        step = _step_of(body, receives, sends, cout, fail, local)
        if step is None:
            if acquire is None and not (i < len(seq) and seq[i]["name"] == "sem_release"):
                fail(f"{seq[i]['name']} where a step starts" if i < len(seq) else "at the end")
            step = _read_step(k, "nop")
        step.s = k
        i = released(i, k)
        if acquire is not None:
            acquired(acquire, k)
        steps.append(step)
    return steps


def _read_step(k: int, typ: str, src=None, dst=None) -> Step:
    """Step ``k`` of a threadblock read back from a plan, its operands (buffer, index, size) or none (a nop)."""
    sb, so = (src[0], src[1]) if src else ("i", -1)
    db, do = (dst[0], dst[1]) if dst else ("o", -1)
    operand = src or dst
    return Step(k, typ, sb, so, db, do, operand[2] if operand else 0)


def _step_of(body: list, receives: bool, sends: bool, cout, fail, local):
    """The XML step one step's body ops are written for (see :func:`_tb_plan`)."""
    names = [op["name"] for op in body]
    port = sends and cout[0] == "port"

    def step(typ, src=None, dst=None):
        return _read_step(0, typ, src, dst)

    if not receives and not sends:
        if not body:
            return None
        op = body[0]
        if names == ["copy"]:
            return step("cpy", local(op["src_buff"][0]), local(op["dst_buff"][0]))
        if names == ["re"] and len(op["src_buff"]) == 2:
            return step("re", local(op["src_buff"][1]), local(op["dst_buff"][0]))
        fail(f"{'+'.join(names)} in a step that neither sends nor receives")
    if sends and not receives:
        if names == ["put"] and not port:
            return step("s", local(body[0]["src_buff"][0]))
        if names == ["copy", "pws"] and port:
            return step("s", local(body[0]["src_buff"][0]))
        fail(f"{'+'.join(names)} in a sending step")
    if receives and not sends:
        if names == ["copy"]:
            return step("r", dst=local(body[0]["dst_buff"][0]))
        if names == ["re"] and len(body[0]["src_buff"]) == 2:
            return step("rrc", local(body[0]["src_buff"][0]), local(body[0]["dst_buff"][0]))
        fail(f"{'+'.join(names)} in a receiving step")
    # receives and sends
    if names in (["copy", "put"], ["copy", "copy", "pws"]):
        return step("rcs", dst=local(body[0]["dst_buff"][0]))
    if names == ["res"] and not port:
        src = local(body[0]["src_buff"][0])
        into = local(body[0]["dst_buff"][0])
        slot = local(body[0]["src_buff"][1])
        return step("rrs", src) if into == slot else step("rrcs", src, into)
    if names == ["re", "pws"] and port:
        return step("rrs", local(body[0]["src_buff"][0]))
    if names == ["re", "copy", "pws"] and port:
        return step("rrcs", local(body[0]["src_buff"][0]), local(body[1]["dst_buff"][0]))
    fail(f"{'+'.join(names)} in a step that receives and sends")


def _first_packet(gpu: dict) -> int:
    """The first packet index a GPU of a packet plan reads or packs (plan_of puts it at half the program's own
    scratch, rounded up)."""
    found = []
    for tb in gpu["threadblocks"]:
        for op in tb["ops"]:
            if op["name"] in rt.PACKET_OPS:
                sp, dp = rt.packet_operands(op)
                found += [op["src_buff"][j]["index"] for j in sp]
                found += [op["dst_buff"][j]["index"] for j in dp if "type" in op["dst_buff"][j]]
    return min(found, default=0)


def _read_packet_steps(ops: list, gpu: int, tb: int, sems: dict, staging_from: int) -> list:
    """The XML steps of one threadblock of a packet plan (the inverse of :func:`_packet_tb`, nops skipped); a raw
    scratch chunk at ``staging_from`` or beyond is the threadblock's staging (a reduce-and-send keeps its sum
    there), one below it the program's own."""
    seq = [op for op in ops if op["name"] != "nop"]
    steps: list = []
    rd = _Reader(seq, gpu, tb, sems)
    fail, local, released = rd.fail, rd.local, rd.released

    def step(typ, src=None, dst=None):
        return _read_step(len(steps), typ, src, dst)

    def kept(operand):                  # rrs (the sum kept in staging) or rrcs (kept in the program's buffer)
        b = local(operand)
        return None if b[0] == "s" and b[1] >= staging_from else b

    def acquired(s):
        rd.acquired(s, len(steps))

    def name(i):
        return seq[i]["name"] if i < len(seq) else None

    i = 0
    while i < len(seq):
        if name(i) == "sem_acquire" and len(seq[i]["semaphore_ids"]) > 1:
            while name(i) == "sem_acquire" and len(seq[i]["semaphore_ids"]) > 1:
                for s in seq[i]["semaphore_ids"]:
                    acquired(s)
                    steps.append(step("nop"))
                i += 1
            i = released(i, len(steps) - 1)
            continue
        waited = name(i) == "sem_acquire"
        if waited:
            acquired(seq[i]["semaphore_ids"][0])
            i += 1
        op, nxt = (seq[i] if i < len(seq) else {}), name(i + 1)
        kind = op.get("name")
        src, dst = op.get("src_buff") or [], op.get("dst_buff") or []
        if kind == "copy":
            st, i = step("cpy", local(src[0]), local(dst[0])), i + 1
        elif kind == "re" and len(src) == 2:
            st, i = step("re", local(src[1]), local(dst[0])), i + 1
        elif kind == "ppkt":
            st, i = step("s", local(src[0])), i + 1
        elif kind == "cpkt" and nxt == "rppkt":
            st, i = step("s", local(src[0])), i + 2
        elif kind == "upkt":
            forwards = nxt == "rppkt" and seq[i + 1]["src_buff"][0] == src[0]
            st, i = step("rcs" if forwards else "r", dst=local(dst[0])), i + (2 if forwards else 1)
        elif kind == "respkt" or kind == "repkt" and nxt == "cpkt" and name(i + 2) == "rppkt" \
                and seq[i + 1]["src_buff"][0] == dst[0]:            # reduced and sent on (across nodes: packed, put)
            into = kept(dst[0])
            st = step("rrcs", local(src[0]), into) if into else step("rrs", local(src[0]))
            i += 1 if kind == "respkt" else 3
        elif kind == "repkt":
            st, i = step("rrc", local(src[0]), local(dst[0])), i + 1
        elif kind == "sem_release" or waited and kind in (None, "sem_acquire"):    # a step that only waits or releases
            st = step("nop")
        else:
            fail(f"{kind} where a step starts")
        i = released(i, len(steps))
        steps.append(st)
    return steps


def calls_words(modes) -> str:
    return " and ".join("in-place" if m else "out-of-place" for m in sorted(modes, reverse=True))
