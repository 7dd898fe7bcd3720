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
  step, the consumer acquires it before its step. Each is released and acquired once a call.
- Threads: waits, signals, semaphore ops and port puts run on thread 0; copies, reductions and memory puts
  on all threads. A ``nop`` (__syncthreads) separates them where one must see the other's effect, as
  MSCCL++'s own generator does.
"""

from __future__ import annotations

import json

from colls.errors import CollsError
from colls.program import STEP_SEMANTICS, Program
from colls.runtimes import mscclpp as rt

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
                 "base", "stage", "src_index", "dst_index")

    def __init__(self, src, dst, chan):
        self.src, self.dst, self.chan = src, dst, chan
        self.sender = self.receiver = None      # XML threadblock ids
        self.ctype = "memory"
        self.messages: list[int] = []           # cnt of each message, in order
        self.slot = self.slots = self.base = 0
        self.stage = None                       # sender-side staging base (port connections forwarding sums)
        self.src_index = self.dst_index = 0     # channel index on the sender's / receiver's GPU


class _TB:
    """The ops of one threadblock as they are written; ``dirty``: an all-thread op ran since the last nop."""

    def __init__(self):
        self.ops: list[dict] = []
        self.lane = None        # "t0", "all" or "nop" for the last op
        self.dirty = False

    def add(self, op: dict, lane: str) -> None:
        self.ops.append(op)
        self.lane = lane
        self.dirty = lane == "all" or (self.dirty and lane != "nop")

    def sync(self) -> None:
        if self.ops and self.lane != "nop":
            self.add({"name": "nop"}, "nop")

    def sync_after_data(self) -> None:
        """A nop unless every thread's work since the last one is already ordered (before a signal or a
        semaphore release, which thread 0 makes for the whole block)."""
        if self.dirty:
            self.sync()


def plan_of(program: Program, topology, *, name: str, inplace: bool | None = None, slots: int = SLOTS) -> dict:
    """The MSCCL++ plan of ``program`` for ``topology`` (which GPUs share a node), named ``name``.

    ``inplace``: the call type the plan is selected for (default: out-of-place when the program serves it).
    Raises CollsError (naming the limit) when the program cannot be written: a collective or reduction the
    runtime cannot run, more than 64 ops in a threadblock, offsets beyond uint32, or no message size fits.
    """
    kind = program.coll
    if kind not in SUPPORTED:
        raise CollsError(f"MSCCL++ plans are written for {', '.join(SUPPORTED)}, not {kind!r}", key="coll")
    redop = program.extra.get("redop")
    if redop not in (None, "sum"):
        raise CollsError(f"reduction {redop!r}: MSCCL++ ignores reduce_op and always sums "
                         "(execution_kernel.hpp OpType = SUM)", key="redop")
    if not name:
        raise CollsError("a plan needs a name (the executor caches plans by name)", key="name")
    if inplace is None:
        inplace = not program.outofplace
    ngpus = len(program.gpus)
    if [g.id for g in program.gpus] != list(range(ngpus)):
        raise CollsError("gpu ids must be 0..n-1 in order", key="gpu")

    conns = _connections(program, topology)
    by_pair: dict = {}
    for c in conns.values():
        by_pair.setdefault(frozenset((c.src, c.dst)), []).append(c)
    # channel lists: per GPU, per type, peers in order; the connections of one pair in canonical order
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

    # scratch: the program's own chunks first, then the slots of each incoming connection, then staging
    scratch = {g.id: g.s_chunks or 0 for g in program.gpus}
    for c in sorted(conns.values(), key=lambda c: (c.dst, c.src, c.chan)):
        c.slot = max(c.messages)
        c.slots = min(slots, len(c.messages))
        c.base = scratch[c.dst]
        scratch[c.dst] += c.slot * c.slots
    for c in sorted(conns.values(), key=lambda c: (c.src, c.dst, c.chan)):
        if c.ctype == "port":
            c.stage = scratch[c.src]
            scratch[c.src] += c.slot * c.slots

    gpus = []
    for g in program.gpus:
        gpus.append(_gpu_plan(program, g, conns, channels[g.id], scratch[g.id]))

    chunk_max, basis = _chunk_limit(program, kind, scratch)
    max_size = chunk_max * basis
    if program.max_bytes:
        max_size = min(max_size, program.max_bytes)
    min_size = program.min_bytes or 0
    if chunk_max < rt.BUFFER_ALIGNMENT or max_size < min_size:
        raise CollsError(f"no message size fits: a chunk may be at most {chunk_max} bytes (uint32 offsets, "
                         "execution_common.hpp) and the sizes asked are "
                         f"[{min_size}, {program.max_bytes or 'any'}]", key="max_message_size")
    return {
        "name": name, "collective": kind, "protocol": "Simple", "inplace": bool(inplace),
        "reuse_resources": False, "gpus": gpus, "num_threads_per_block": rt.MAX_THREADS_PER_BLOCK,
        "use_double_scratch_buffer": False, "buffer_alignment": rt.BUFFER_ALIGNMENT,
        "min_message_size": min_size, "max_message_size": max_size,
    }


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


def _gpu_plan(program: Program, g, conns: dict, chans: dict, scratch_chunks: int) -> dict:
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
    tbs = []
    for tb in sorted(g.tbs, key=lambda t: t.id):
        tbs.append(_tb_plan(g, tb, conns, remote_id, sem_of, releases))
    for t in tbs:
        if len(t["ops"]) > rt.MAX_OPERATIONS:
            raise CollsError(f"gpu {gid} threadblock {t['id']} needs {len(t['ops'])} ops; MSCCL++ runs at most "
                             f"{rt.MAX_OPERATIONS} per threadblock (MAX_OPERATION, execution_common.hpp)",
                             key="ops")
    channels = [{"channel_type": ct, "connected_to": list(chans[ct])} for ct in ("memory", "port") if chans[ct]]
    return {
        "id": gid, "input_chunks": g.i_chunks or 0, "output_chunks": g.o_chunks or 0,
        "scratch_chunks": scratch_chunks, "threadblocks": tbs, "channels": channels,
        "remote_buffers": [{"rank": peer, "type": "s", "access_channel_types": [ct]} for peer, ct in remote],
        "semaphores": [{"init_value": 0} for _ in deps],
    }


def _tb_plan(g, tb, conns: dict, remote_id: dict, sem_of: dict, releases: dict) -> dict:
    gid = g.id
    cin = conns.get((tb.recv, gid, tb.chan)) if tb.recv is not None and tb.recv >= 0 else None
    cout = conns.get((gid, tb.send, tb.chan)) if tb.send is not None and tb.send >= 0 else None
    # this threadblock's channels per type (incoming first), and its remote buffer refs
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
    b = _TB()
    if cin is not None:
        for _ in range(cin.slots):           # grant every slot for this call
            b.add({"name": "signal", "channel_ids": [index["in"]], "channel_type": cin.ctype}, "t0")
    k_in = k_out = 0
    for k, st in enumerate(tb.steps):
        sends, receives, reads, writes, _ = STEP_SEMANTICS[st.type]
        cnt = st.cnt
        if st.depid is not None and st.depid >= 0:
            b.add({"name": "sem_acquire", "semaphore_ids": [sem_of[(st.depid, st.deps, tb.id, k)]]}, "t0")
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
        if typ == "cpy":
            if src != dst:
                b.sync()
                b.add({"name": "copy", "src_buff": [src], "dst_buff": [dst]}, "all")
        elif typ == "re":
            b.sync()
            b.add({"name": "re", "src_buff": [dst, src], "dst_buff": [dst], "reduce_op": "sum"}, "all")
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
        if receives:
            if k_in < len(cin.messages) - cin.slots:     # the last S messages' credits are the next call's grants
                signals.append((cin.ctype, index["in"]))
            k_in += 1
        if sends:
            k_out += 1
        if signals:
            b.sync_after_data()
            _grouped(b, "signal", sorted(signals, key=lambda s: s[0] != "memory"))
        ids = releases.get((tb.id, k))
        if ids:
            b.sync_after_data()
            for at in range(0, len(ids), rt.MAX_SEMAPHORES_PER_OP):
                b.add({"name": "sem_release", "semaphore_ids": ids[at:at + rt.MAX_SEMAPHORES_PER_OP]}, "t0")
    return {
        "id": tb.id, "ops": b.ops,
        "channels": [{"channel_type": ct, "channel_ids": tb_chans[ct]} for ct in ("memory", "port") if ct in tb_chans],
        "remote_buffer_refs": [{"access_channel_type": ct, "remote_buffer_ids": refs[ct]}
                               for ct in ("memory", "port") if ct in refs],
    }


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


def load(text: str, source: str) -> dict:
    """Read a plan's text; CollsError naming ``source`` and the key when it is not a plan the MSCCL++
    loader can read (not JSON, a required key missing or of the wrong type)."""
    try:
        plan = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise CollsError(f"not JSON: {e}", source=source) from None
    problems = shape_problems(plan)
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
    gpus = plan.get("gpus")
    if gpus is None:
        return out
    if not isinstance(gpus, list) or not gpus:
        return out + [("gpus", "must be a non-empty list")]
    for r, g in enumerate(gpus):
        where = f"gpus[{r}]"
        if not _has_keys(g, where, rt.GPU_KEYS, out):
            continue
        for key in ("id", "input_chunks", "output_chunks", "scratch_chunks"):
            if key in g and not (_is_int(g[key]) and g[key] >= 0):
                out.append((f"{where}.{key}", "must be a non-negative integer"))
        for key in ("threadblocks", "channels", "remote_buffers"):
            if key in g and not isinstance(g[key], list):
                out.append((f"{where}.{key}", "must be a list"))
        for i, ch in enumerate(g.get("channels") or []):
            if not (isinstance(ch, dict) and ch.get("channel_type") in rt.CHANNEL_TYPES):
                out.append((f"{where}.channels[{i}].channel_type", "must be memory, port or switch"))
            elif ch["channel_type"] in ("memory", "port") and not (
                    isinstance(ch.get("connected_to"), list) and all(_is_int(p) for p in ch["connected_to"])):
                out.append((f"{where}.channels[{i}].connected_to", "must be a list of ranks"))
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
            for i, ch in enumerate(tb.get("channels") or []):
                if not (isinstance(ch, dict) and ch.get("channel_type") in rt.CHANNEL_TYPES
                        and isinstance(ch.get("channel_ids"), list) and all(_is_int(x) for x in ch["channel_ids"])):
                    out.append((f"{tw}.channels[{i}]", "needs channel_type and a list of channel_ids"))
            for i, ref in enumerate(tb.get("remote_buffer_refs") or []):
                if not (isinstance(ref, dict) and ref.get("access_channel_type") in rt.CHANNEL_TYPES
                        and isinstance(ref.get("remote_buffer_ids"), list)
                        and all(_is_int(x) for x in ref["remote_buffer_ids"])):
                    out.append((f"{tw}.remote_buffer_refs[{i}]", "needs access_channel_type and remote_buffer_ids"))
            ops = tb.get("ops")
            if ops is not None and not isinstance(ops, list):
                out.append((f"{tw}.ops", "must be a list"))
                continue
            for o, op in enumerate(ops or []):
                _op_shape(op, f"{tw}.ops[{o}]", out)
    return out


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
