"""Prove or refute an MSCCL++ JSON execution plan: it loads, it cannot hang, it has no data race, it computes
the collective for every rank.

``verify_plan(plan, kind, source)`` runs, in order:

1. the loader's rules (:func:`colls.mscclpp.shape_problems`, then ids, chunk consistency, the 64-op limit,
   operand ranges and uint32 offsets, channel and buffer ids, channel pairing across GPUs, remote buffers);
2. signal/wait pairing: per channel, the signals one side sends equal the waits the other side makes (a
   surplus signal lets the next call's wait return early; a missing one hangs);
3. thread synchronisation inside a threadblock: ops that run on thread 0 (waits, signals, semaphore ops,
   port puts) and ops spread over all threads (copies, reductions, memory puts) see each other's effects
   only across a ``nop``/``barrier`` (__syncthreads);
4. an abstract execution of two consecutive calls on every GPU (counted channel semaphores, device
   semaphores, barriers; the second call of a GPU starts when its first has finished, GPUs are not
   synchronised), which finds deadlocks, and carries vector clocks: every pair of accesses to one chunk, one
   a write, must be ordered (a put into a scratch slot whose previous message was not consumed yet is
   ``plan-slot-race``). A port put reads its source asynchronously: the read is complete only once the
   receiver's wait for the signal after it has returned;
5. the symbolic values of that execution (sets of (rank, input chunk) contributions, as in
   :mod:`colls.verify.semantics`) against the collective's postcondition, for both calls.

Pipelines (``pipeline`` ops, :mod:`colls.runtimes.mscclpp` gives the kernel's semantics) are followed as the
kernel runs them. Their shape is checked first (``plan-pipeline``: a positive unit that is a multiple of 16,
``num_chunks`` >= 1, every body operand ``num_chunks`` chunks long, no nested pipeline, at most 65,535
iterations at max_message_size). Signal/wait pairing counts a body's signals and waits once per iteration:
the counts must agree per kind of pipeline ((unit_size, num_chunks), whose iteration count is the same
function of the call size on both sides) and outside pipelines, so they agree at every call size. The thread
check runs over two iterations of every body (slice i and slice i + 1 of an operand are disjoint). Steps 4
and 5 run on the plan unrolled at a chunk of ``k`` units (``k`` = 1, and 2 when max_message_size allows a
chunk of more than one unit): memory is tracked per unit, a body op in iteration i touches unit i of each
operand, an op outside pipelines its operands' every unit. One chunk of one unit is the unpipelined
behaviour (every small call); two units make every pipeline iterate twice per chunk, so a slice of one
message overlaps the next slice's transfer exactly as at any larger size (the protocol is the same in every
iteration, and slices that are not whole units touch the same ranges as whole ones).

Packets (the LL protocol: ``ppkt``, ``rppkt``, ``cpkt``, ``upkt``, ``repkt``, ``respkt``, ``recpkt``,
``recspkt``) are followed as the kernel runs them: a packet takes two chunks of scratch (the kernel doubles a
packet operand's offset), carries the call's flag, and an op that reads packets waits until every one it reads
carries its call's flag (the executor's flag is new on every call, so packets of another call are never
taken). Writing packets twice into one place in one call is ``plan-packet-reuse``; data read where packets
are, ``plan-packet-form``. With ``use_double_scratch_buffer`` the two calls use the two halves of the scratch
(the executor alternates halves by the flag's parity); the call after next returns to a half, and that is safe
when, in every call, every rank finishes only after each peer it sends packets to has started the call
(``plan-packet-call``; then a write of call n + 2 follows the writer's call n + 1, which follows the peer's
start of call n + 1, which follows the peer's reads of call n). If other plans' calls come between, each is a
collective whose every rank waits for data from every other, so the same argument holds across them.

Remote reads (``rre``, ``rres``: a local source plus peers' chunks read through the memory channels' mappings,
execution_kernel.hpp handleReadReduceSend; ``get`` with equal offsets) read the peer's memory with the reader's
clock, so a read the peer's signal does not order after its writes is a race.

A plan whose GPUs run one plan relabelled (a rotation by ``shift`` GPUs, :mod:`colls.verify.plan_symmetry`)
is executed on GPUs ``0..shift-1`` only (steps 4 and 5; what they do to other GPUs is made as its image on
theirs), as :mod:`colls.verify.symmetry` does for XML files; when that finds anything, the whole plan runs again
so the report names every GPU. The summary says when a proof took the symmetry.

The facts come from microsoft/mscclpp (:mod:`colls.runtimes.mscclpp`, each cited). What is not modelled
(NVLS switch ops, pipelines of different
unit sizes in one plan, thread block groups) leaves the verdict ``unproven``.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from colls.collectives import KINDS, Collective, SymbolicError, describe, reduce_values
from colls.msccl import Finding
from colls import mscclpp
from colls.errors import CollsError
from colls.mscclpp import shape_problems
from colls.program import Program
from colls.runtimes import mscclpp as rt
from colls.verify import plan_symmetry
from colls.verify.report import Report
from colls.verify.rules import HANG, LOAD, PLAN_PROOF_CHUNKS, UB, UNUSED, WRONG

TARGET = "mscclpp"
REPORT_CAP = 10

# rule -> (effect, text); effect None is a warning
PLAN_RULES: dict[str, tuple[str | None, str]] = {
    "plan-key": (LOAD, "a key the loader reads is missing or of the wrong type"),
    "plan-collective": (UNUSED, "collective is not the one asked, or not one MSCCL++ selects"),
    "plan-protocol": (None, "protocol is neither Simple nor LL (the loader then runs Simple)"),
    "plan-threads": (LOAD, "num_threads_per_block above 1024 (__launch_bounds__(1024, 1)) or 0 (no block to "
                           "launch)"),
    "plan-message-size": (UNUSED, "min_message_size > max_message_size, or sizes no call can have"),
    "plan-gpu-id": (LOAD, "gpus[i].id is not i ('GPU rank does not match')"),
    "plan-chunks": (LOAD, "chunk counts that are zero, differ between GPUs, or do not fit the collective"),
    "plan-tb-id": (UB, "threadblock ids are not 0..n-1 in list order (ops by position, channels by id)"),
    "plan-op-count": (LOAD, "more than 64 ops in a threadblock, pipeline bodies counted (MAX_OPERATION)"),
    "plan-pipeline": (UB, "a pipeline the kernel runs wrongly: unit not a positive multiple of 16, num_chunks < 1, "
                          "a body operand not num_chunks chunks (uint32 size - offset wraps), a nested pipeline, "
                          "more than 65535 iterations (uint16) at every call size the plan serves"),
    "plan-operand": (UB, "an operand outside its buffer's chunks"),
    "plan-operand-count": (UB, "more than 10 operands or 8 channels in one op (fixed arrays in Operation)"),
    "plan-offset-range": (UB, "an offset beyond uint32 at every call size the plan serves"),
    "plan-offset-size": (None, "offsets beyond uint32 for the largest calls max_message_size lets the plan take"),
    "plan-pipeline-size": (None, "more than 65535 pipeline iterations for the largest calls max_message_size lets "
                                 "the plan take"),
    "plan-channel-id": (UB, "a channel id outside the threadblock's or the GPU's channel list, or > 16 per type"),
    "plan-buffer-id": (UB, "a buffer id outside the threadblock's refs or the GPU's remote_buffers"),
    "plan-remote-buffer": (HANG, "a remote buffer of a rank this GPU has no channel of that type to"),
    "plan-channel-pairing": (HANG, "GPU A has a different number of channels of a type to B than B to A"),
    "plan-channel-shared": (WRONG, "one channel's semaphore signalled or waited on by two threadblocks (its counter "
                                   "is not atomic)"),
    "plan-wrong-peer": (WRONG, "a put into the buffer of a rank its channel does not connect to"),
    "plan-op-form": (UB, "an op whose operands do not have the form the kernel reads"),
    "plan-op-unsafe": (WRONG, "an op the kernel runs differently than it reads (pwsf, get, flush, pws on memory)"),
    "plan-reduce-op": (WRONG, "a reduce_op other than sum: MSCCL++ ignores it and sums"),
    "plan-semaphore": (UB, "a semaphore id outside the GPU's semaphores"),
    "plan-barrier": (HANG, "a barrier id >= 16 or a barrier whose threadblock count is never reached"),
    "plan-signal-wait": (HANG, "signals on a channel differ in number from the waits on its pair"),
    "plan-thread-sync": (WRONG, "thread-0 and all-thread ops not separated by a nop where one needs the other"),
    "plan-deadlock": (HANG, "threadblocks that can never finish, and what each waits for"),
    "plan-slot-race": (WRONG, "a put into a scratch slot whose previous content was not consumed yet"),
    "plan-race": (WRONG, "two accesses to one chunk, one a write, not ordered"),
    "plan-double-count": (WRONG, "a reduction counts an input twice"),
    "plan-uninitialised-read": (WRONG, "a value read from a chunk nothing had written"),
    "plan-input-write": (WRONG, "a write to the caller's input buffer"),
    "plan-postcondition": (WRONG, "an output chunk does not hold what the collective requires"),
    "plan-packet-protocol": (UB, "packet ops in a plan whose protocol is not LL: its scratch is allocated for data, "
                                 "and packets take twice the bytes at doubled offsets"),
    "plan-packet-scratch": (HANG, "an LL plan with a double scratch whose GPUs' scratch sizes differ (a sender adds "
                                  "its own half's offset to the peer's address)"),
    "plan-packet-form": (WRONG, "packets read as data, or a packet op whose operands are not what the kernel reads"),
    "plan-packet-reuse": (WRONG, "packets written twice into one place in one call (the reader may take either)"),
    "plan-packet-call": (HANG, "a rank can finish a call before a peer it sends packets to has started it, so a later "
                               "call on the same scratch half may overwrite packets not yet read"),
    "plan-unmodelled": (None, "an op the proof does not model: the result is not checked"),
    "plan-semantics-skipped": (None, "execution checks not run because of the errors before them"),
}

_SIGNALS = ("signal", "rlxsignal")
_WAITS = ("wait", "rlxwait")
_MODELLED = frozenset({"nop", "barrier", "signal", "wait", "rlxsignal", "rlxwait", "put", "pws", "copy", "re",
                       "res", "rre", "rres", "get", "sem_acquire", "sem_release", "flush", "pipeline"}) | rt.PACKET_OPS


class _Packet:
    """What a place in scratch holds once packets are written there: the value, the call whose flag they carry,
    the writer's clock when it wrote them, and the reads of the sender's packets the proxy makes for a port
    ``rppkt`` (complete once the packets are read)."""

    __slots__ = ("call", "value", "clock", "own", "tbi", "pending")

    def __init__(self, call, value, clock, own, tbi, pending=()):
        self.call, self.value, self.clock, self.own, self.tbi, self.pending = call, value, clock, own, tbi, pending


class _Cx:
    def __init__(self, plan, kind, source):
        self.plan, self.kind, self.source = plan, kind, source
        self.findings: list[Finding] = []
        self.counts: dict = defaultdict(int)
        self.unproven: list[str] = []

    def add(self, rule, message, gpu=None, tb=None, op=None, calls=None):
        self.counts[rule] += 1
        if self.counts[rule] > REPORT_CAP:
            return
        effect = PLAN_RULES[rule][0]
        sev = "error" if effect else "warning"
        self.findings.append(Finding(rule, message, gpu, tb, op, None, sev, effect if effect else None,
                                     calls if effect else None))

    def errors(self, rules=None) -> list[str]:
        return sorted({f.rule for f in self.findings if f.severity == "error" and (rules is None or f.rule in rules)})

    def mark(self) -> tuple:
        """What :meth:`reset` returns to: the findings, counts and reasons so far."""
        return len(self.findings), dict(self.counts), len(self.unproven)

    def reset(self, mark: tuple) -> None:
        found, counts, unproven = mark
        del self.findings[found:]
        self.counts = defaultdict(int, counts)
        del self.unproven[unproven:]

    def close(self):
        for rule, n in sorted(self.counts.items()):
            if n > REPORT_CAP:
                effect = PLAN_RULES[rule][0]
                self.findings.append(Finding(rule, f"and {n - REPORT_CAP} more", None, None, None, None,
                                             "error" if effect else "warning", effect))


def verify_plan(plan: dict, kind: str, source: str, *, inplace: bool | None = None,
                max_clocks: int | None = None) -> Report:
    """Check ``plan`` against MSCCL++'s loader and kernel and prove it computes ``kind`` (for the call type
    ``inplace``; default: the one the plan declares). Returns a :class:`~colls.verify.report.Report` whose
    findings carry the rule ids of :data:`PLAN_RULES`. ``max_clocks``: the execution is not run (the plan is
    left unproven) when its threadblocks that run times all threadblocks would pass it (its clocks' memory)."""
    cx = _Cx(plan, kind, source)
    facts = {"target": TARGET, "coll": kind, "checked": [], "deadlock_free": None, "semantics_checked": False}
    problems = shape_problems(plan)
    for key, message in problems:
        cx.add("plan-key", f"{key}: {message}" if key else message)
    if problems:
        _skip(cx, "the plan does not have the loader's shape")
    else:
        if inplace is None:
            inplace = plan["inplace"]
        facts["ngpus"] = len(plan["gpus"])
        m = _Model(cx, plan, kind)
        m.check_static()
        facts["max_ops_per_tb"] = m.max_ops
        blockers = cx.errors()
        if blockers:
            _skip(cx, f"deadlock, race and correctness checks were not run ({', '.join(blockers)})")
        elif m.unmodelled:
            _skip(cx, "ops the proof does not model: " + ", ".join(sorted(m.unmodelled)))
        elif kind not in KINDS or m.coll is None:
            _skip(cx, f"collective {kind!r} is not modelled")
        else:
            sym = plan_symmetry.find(m)
            clocks = m.clocks(sym)
            states = m.chunk_states(sym)
            if max_clocks is not None and clocks > max_clocks:
                _skip(cx, f"too large to prove: {sym.shift if sym else m.n} of its {m.n} GPUs run, {clocks:,} "
                      f"threadblock clock entries a call, over the {max_clocks:,} the proof is held to")
            elif states > PLAN_PROOF_CHUNKS:
                _skip(cx, f"too large to prove: its buffers hold {states:,} chunk states on the GPUs the proof "
                      f"runs, over the {PLAN_PROOF_CHUNKS:,} it follows")
            else:
                facts["deadlock_free"] = done = _executed(cx, m, inplace, sym, max_clocks, facts)
                if done:
                    facts["checked"] = ["in-place" if inplace else "out-of-place"]
                    facts["semantics_checked"] = True
            if m.unit:
                facts["pipeline_unit_bytes"] = m.unit
                facts["units_per_chunk_checked"] = m.units_per_chunk()
    cx.close()
    findings = sorted(cx.findings, key=lambda f: f.severity != "error")
    return Report(source, TARGET, findings, facts, cx.unproven)


def _executed(cx: _Cx, m: _Model, inplace: bool, sym, max_clocks: int | None, facts: dict) -> bool:
    """The execution on GPUs 0..shift-1 of ``sym``, or on every GPU; false when it deadlocks. When the quotient
    finds anything, the whole plan again so that the report names every GPU it concerns, as without the
    symmetry (unless that would pass ``max_clocks``: then the quotient's findings stand, true of the GPUs they
    name)."""
    if sym is not None:
        mark = cx.mark()
        done = m.execute_all(inplace, sym)
        if done and len(cx.findings) == mark[0]:
            facts["symmetry"] = {"ranks": sym.nranks, "ranks_run": sym.shift}
            return True
        if max_clocks is not None and m.clocks(None) > max_clocks:
            return done
        cx.reset(mark)
    return m.execute_all(inplace, None)


def _skip(cx: _Cx, why: str) -> None:
    cx.add("plan-semantics-skipped", why)
    cx.unproven.append(why.split(" (")[0])


def _flat_ops(ops):
    """The ops as the loader stores them: pipeline bodies after their pipeline op."""
    out = []
    for op in ops:
        out.append(op)
        if isinstance(op, dict) and op.get("name") == "pipeline":
            out.extend(op.get("ops") or [])
    return out


def _context(ops):
    """(op, its pipeline's (unit_size, num_chunks) or None) for every op but the pipelines themselves."""
    for op in ops:
        if op["name"] == "pipeline":
            ctx = op["iter_context"]
            for inner in op.get("ops") or []:
                yield inner, (ctx["unit_size"], ctx["num_chunks"])
        else:
            yield op, None


def _unrolled(ops, iterations):
    """The ops as the kernel runs them: (op, its index among :func:`_flat_ops`, slice), a pipeline's body
    ``iterations(pipeline op)`` times with slice = the iteration, every other op once with slice None
    (handlePipeline: the pipeline op then skips its body)."""
    out = []
    pos = 0
    for op in ops:
        if op["name"] == "pipeline":
            body = op.get("ops") or []
            for i in range(iterations(op)):
                out.extend((inner, pos + 1 + j, i) for j, inner in enumerate(body))
            pos += 1 + len(body)
        else:
            out.append((op, pos, None))
            pos += 1
    return out


def _lane(op) -> str:
    name = op["name"]
    if name in ("nop", "barrier"):
        return "sync"
    if name == "sem_acquire" and len(op.get("semaphore_ids") or ()) > 1:
        return "all"            # thread i acquires semaphore_ids[i] (execution_kernel.hpp handleSemAcquire)
    if name in rt.THREAD0_OPS or (name in ("put", "pws", "pwsf") and op.get("channel_type") == "port"):
        return "t0"
    return "all"


def _ranges(operands, sl=None, factor=1):
    """Local operands as (buffer, first chunk, end chunk, slice): slice None is the whole operand. ``factor``
    2 for packets: twice the chunks, from twice the index (the kernel doubles the offset)."""
    return [(b["type"], factor * b["index"], factor * (b["index"] + b["size"]), sl)
            for b in operands or () if "type" in b]


def _accesses(op, sl):
    """An op's local accesses for the thread check: (data writes, packet writes, data reads, packet reads)."""
    sp, dp = rt.packet_operands(op)
    src, dst = op.get("src_buff") or [], op.get("dst_buff") or []
    def split(operands, packed):
        return (_ranges([b for j, b in enumerate(operands) if j not in packed], sl),
                _ranges([b for j, b in enumerate(operands) if j in packed], sl, rt.PACKET_SCRATCH_FACTOR))
    dw, pw = split(dst, dp)
    dr, pr = split(src, sp)
    return dw, pw, dr, pr


def _overlap(a, b) -> bool:
    """Do two operand lists share memory? Slices i and j != i of operands are disjoint (each is unit_size
    bytes at i x unit_size)."""
    return any(x[0] == y[0] and x[1] < y[2] and y[1] < x[2] and (x[3] is None or y[3] is None or x[3] == y[3])
               for x in a for y in b)


class _Model:
    """The plan as the executor sets it up: channels paired, refs resolved, ops flattened."""

    def __init__(self, cx: _Cx, plan: dict, kind: str):
        self.cx, self.plan, self.kind = cx, plan, kind
        self.gpus = plan["gpus"]
        self.n = len(self.gpus)
        self.max_ops = 0
        self.unmodelled: set = set()
        self.coll = None
        self.partner: dict = {}         # (g, type, index) -> (peer, type, index)
        self.chan_owner: dict = {}      # (g, type, index) -> tb
        self.chunk_bytes = 0
        self.basis = 0                  # the chunks a call's size counts (output for allgather, input otherwise)
        self.unit = None                # the pipelines' unit_size
        self.packets = False            # the plan has packet ops
        self.widest = (0, None)         # the operand ending furthest into its buffer: (end in chunks, where)
        self.pipeline_cap = (float("inf"), None)   # the largest chunk (bytes) every pipeline counts, and where

    def units_per_chunk(self) -> list[int]:
        """The chunk sizes, in pipeline units, the execution is checked at (see the module docstring)."""
        if not self.unit or self.packets:      # packet ops take no pipeline offset: never pipelined
            return [1]
        return [1, 2] if self.chunk_bytes > self.unit else [1]

    # --- static checks ------------------------------------------------------------------------------
    def check_static(self) -> None:
        cx, plan = self.cx, self.plan
        if plan["collective"] != self.kind or plan["collective"] not in rt.COLLECTIVES:
            cx.add("plan-collective", f"collective is {plan['collective']!r}, expected {self.kind!r}")
        if plan["protocol"] not in rt.PROTOCOLS:
            cx.add("plan-protocol", f"protocol {plan['protocol']!r} runs as Simple")
        if plan.get("num_threads_per_block", 1024) > rt.MAX_THREADS_PER_BLOCK:
            cx.add("plan-threads", f"num_threads_per_block {plan['num_threads_per_block']} > 1024")
        elif plan.get("num_threads_per_block", 1024) == 0:
            cx.add("plan-threads", "num_threads_per_block 0: a kernel of blocks without threads cannot be launched "
                   "(CUDA's invalid configuration)")
        lo = plan.get("min_message_size", 0)
        hi = plan.get("max_message_size", 2**64 - 1)
        if lo > hi:
            cx.add("plan-message-size", f"min_message_size {lo} > max_message_size {hi}: no call selects the plan")
        for r, g in enumerate(self.gpus):
            if g["id"] != r:
                cx.add("plan-gpu-id", f"gpus[{r}].id is {g['id']}", gpu=r)
        self._check_chunks(hi)
        if plan["protocol"] == "LL" and plan.get("use_double_scratch_buffer"):
            sizes = {g["scratch_chunks"] for g in self.gpus}
            if len(sizes) > 1:
                cx.add("plan-packet-scratch", f"scratch_chunks {sorted(sizes)} differ between GPUs: a sender adds its "
                       "own scratch half's offset to the peer's address (execution_kernel.hpp scratchOffset_), so "
                       "its packets land in the wrong place of a peer whose scratch is another size")
        self._check_channels()
        for r, g in enumerate(self.gpus):
            for pos, tb in enumerate(g["threadblocks"]):
                if tb["id"] != pos:
                    cx.add("plan-tb-id", f"threadblock at position {pos} has id {tb['id']}: the loader stores ops "
                           "by position and channels by id", gpu=r, tb=pos)
                flat = _flat_ops(tb["ops"])
                self.max_ops = max(self.max_ops, len(flat))
                if len(flat) > rt.MAX_OPERATIONS:
                    cx.add("plan-op-count", f"{len(flat)} ops (pipeline bodies counted), at most "
                           f"{rt.MAX_OPERATIONS}", gpu=r, tb=pos)
                for k, op in enumerate(flat):
                    self._check_op(r, pos, k, op)
                    if op["name"] == "pipeline":
                        self._check_pipeline(r, pos, k, op)
                self._check_thread_sync(r, pos, _unrolled(tb["ops"], lambda p: 2))
        self._check_pairing()
        self._check_sizes(lo, hi)

    def _check_sizes(self, lo: int, hi: int) -> None:
        """What bounds the call sizes a plan runs right: offsets are uint32 (execution_common.hpp), and a
        pipeline's iterations a uint16_t (handlePipeline). The largest call within each, against the plan's
        message sizes: none fits the smallest call, an error; some calls max_message_size admits do not fit
        (MSCCL++'s own generator writes 2^64 - 1 there), a warning naming the size to set."""
        basis = self.basis
        if not basis or not self.chunk_bytes:
            return
        align = self.plan.get("buffer_alignment", rt.BUFFER_ALIGNMENT) or rt.BUFFER_ALIGNMENT
        end, where = self.widest
        if end and end * self.chunk_bytes > rt.MAX_OFFSET:
            name, r, t, k = where
            self._size_finding(rt.MAX_OFFSET // end // align * align * basis, lo, hi, "plan-offset-range",
                               "plan-offset-size", f"{name}: chunk {end} of its buffer ends beyond uint32", r, t, k)
        cap, where = self.pipeline_cap
        if where is not None and self.chunk_bytes > cap:
            r, t, k = where
            self._size_finding(cap // align * align * basis, lo, hi, "plan-pipeline", "plan-pipeline-size",
                               "a pipeline runs more than 65535 iterations (handlePipeline counts them in a uint16_t)",
                               r, t, k)

    def _size_finding(self, largest, lo, hi, error, warning, what, r, t, k) -> None:
        if largest < max(lo, 1):
            self.cx.add(error, f"{what} at every call size from min_message_size {lo}", gpu=r, tb=t, op=k)
        else:
            self.cx.add(warning, f"{what} for calls above {largest} bytes, which max_message_size {hi} lets the plan "
                        f"take (they compute garbage): set max_message_size to {largest}", gpu=r, tb=t, op=k)

    def _check_chunks(self, max_size) -> None:
        cx = self.cx
        first = self.gpus[0]
        ic, oc = first["input_chunks"], first["output_chunks"]
        for r, g in enumerate(self.gpus):
            if (g["input_chunks"], g["output_chunks"]) != (ic, oc):
                cx.add("plan-chunks", f"input/output chunks ({g['input_chunks']}, {g['output_chunks']}) differ from "
                       f"gpu 0's ({ic}, {oc})", gpu=r)
            if g["input_chunks"] == 0 and g["output_chunks"] == 0:
                cx.add("plan-chunks", "input_chunks and output_chunks are both 0 (the loader divides by them)", gpu=r)
        if ic == 0 or oc == 0:
            return
        if self.kind in KINDS and self.n >= 2:
            wide_in = self.kind in ("reducescatter", "alltoall")
            wide_out = self.kind in ("allgather", "alltoall")
            c, rem = divmod(ic, self.n if wide_in else 1)
            if rem or c < 1 or oc != c * (self.n if wide_out else 1):
                cx.add("plan-chunks", f"input_chunks {ic} and output_chunks {oc} do not have the shape of "
                       f"{self.kind} on {self.n} ranks (one chunk size for every buffer: 'Size per chunks "
                       "inconsistent')")
            elif self.kind not in ("broadcast", "reduce"):
                self.coll = Collective(self.kind, self.n, c)
        self.basis = oc if self.plan["collective"] == "allgather" else ic
        self.chunk_bytes = -(-max_size // self.basis) if self.basis else 0

    def _check_channels(self) -> None:
        cx = self.cx
        self.chans = []         # per gpu: {type: [peer, ...]}
        for r, g in enumerate(self.gpus):
            per = {"memory": [], "port": []}
            for ch in g["channels"]:
                if ch["channel_type"] in per:
                    for p in ch["connected_to"]:
                        if not 0 <= p < self.n or p == r:
                            cx.add("plan-channel-id", f"a channel to {p}, not another rank", gpu=r)
                        per[ch["channel_type"]].append(p)
            self.chans.append(per)
        for r, g in enumerate(self.gpus):
            for j, rb in enumerate(g["remote_buffers"]):
                for t in rb["access_channel_types"]:
                    if t in ("memory", "port") and rb["rank"] not in self.chans[r][t]:
                        cx.add("plan-remote-buffer", f"remote_buffers[{j}]: rank {rb['rank']} by {t}, but gpu {r} "
                               f"has no {t} channel to it", gpu=r)
                if not 0 <= rb["rank"] < self.n or rb["rank"] == r:
                    cx.add("plan-remote-buffer", f"remote_buffers[{j}]: rank {rb['rank']} is not another rank", gpu=r)
        # pairing: the k-th channel of g to p of a type pairs with the k-th of p to g (executor.cc)
        for r in range(self.n):
            for t in ("memory", "port"):
                seen: dict = defaultdict(int)
                for i, p in enumerate(self.chans[r][t]):
                    k = seen[p]
                    seen[p] += 1
                    if 0 <= p < self.n and p != r:
                        theirs = [j for j, q in enumerate(self.chans[p][t]) if q == r]
                        if k < len(theirs):
                            self.partner[(r, t, i)] = (p, t, theirs[k])
        for r in range(self.n):
            for p in range(r + 1, self.n):
                for t in ("memory", "port"):
                    a, b = self.chans[r][t].count(p), self.chans[p][t].count(r)
                    if a != b:
                        cx.add("plan-channel-pairing", f"{a} {t} channel(s) from {r} to {p} but {b} from {p} to {r}: "
                               "the extra ones pair with channels nobody uses", gpu=r)
        # threadblock channel lists and refs
        self.tbch = []
        self.tbref = []
        for r, g in enumerate(self.gpus):
            chs, refs = [], []
            for pos, tb in enumerate(g["threadblocks"]):
                per = {"memory": [], "port": []}
                for ch in tb["channels"]:
                    t = ch["channel_type"]
                    if t not in per:
                        continue
                    for i in ch["channel_ids"]:
                        if not 0 <= i < len(self.chans[r][t]):
                            cx.add("plan-channel-id", f"{t} channel {i}: gpu {r} has {len(self.chans[r][t])}",
                                   gpu=r, tb=pos)
                            continue
                        per[t].append(i)
                    if len(per[t]) > rt.MAX_CHANNELS_PER_TB:
                        cx.add("plan-channel-id", f"{len(per[t])} {t} channels, at most {rt.MAX_CHANNELS_PER_TB}",
                               gpu=r, tb=pos)
                rf = {"memory": [], "port": []}
                for ref in tb.get("remote_buffer_refs") or []:
                    t = ref["access_channel_type"]
                    if t not in rf:
                        continue
                    for j in ref["remote_buffer_ids"]:
                        if not 0 <= j < len(g["remote_buffers"]) or t not in g["remote_buffers"][j]["access_channel_types"]:
                            cx.add("plan-buffer-id", f"remote buffer {j} is not one of gpu {r}'s {t} remote buffers",
                                   gpu=r, tb=pos)
                            continue
                        rf[t].append(j)
                    if len(rf[t]) > rt.MAX_REMOTE_BUFFERS_PER_TB:
                        cx.add("plan-buffer-id", f"{len(rf[t])} {t} remote buffers, at most 16", gpu=r, tb=pos)
                chs.append(per)
                refs.append(rf)
            self.tbch.append(chs)
            self.tbref.append(refs)

    def _check_pipeline(self, r, t, k, op) -> None:
        cx = self.cx
        ctx = op["iter_context"]
        unit, n = ctx["unit_size"], ctx["num_chunks"]
        if unit < 1 or unit % rt.PIPELINE_UNIT_ALIGNMENT:
            cx.add("plan-pipeline", f"unit_size {unit}: not a positive multiple of {rt.PIPELINE_UNIT_ALIGNMENT} "
                   "(the loader divides by it; reductions read 16-byte vectors from offset / 16)", gpu=r, tb=t, op=k)
            return
        if n < 1:
            cx.add("plan-pipeline", f"num_chunks {n}: the pipeline runs no iteration", gpu=r, tb=t, op=k)
            return
        if self.unit is None:
            self.unit = unit
        elif unit != self.unit:
            self.unmodelled.add(f"pipelines of unit sizes {self.unit} and {unit}")
        # the largest chunk whose iterations a uint16_t counts (handlePipeline), against the plan's sizes after
        # the static checks (_check_sizes)
        cap = rt.PIPELINE_MAX_ITERATIONS * unit // n
        if cap < self.pipeline_cap[0]:
            self.pipeline_cap = (cap, (r, t, k))
        for j, inner in enumerate(op.get("ops") or []):
            if inner["name"] == "pipeline":
                cx.add("plan-pipeline", "a pipeline inside a pipeline: the loader flattens one level only",
                       gpu=r, tb=t, op=k + 1 + j)
                continue
            if inner["name"] in rt.PACKET_OPS:
                cx.add("plan-pipeline", f"{inner['name']} in a pipeline: packet ops take no iteration offset, so "
                       "every iteration moves the whole operand again (execution_kernel.hpp)", gpu=r, tb=t, op=k + 1 + j)
                continue
            sizes = {b["size"] for key in ("src_buff", "dst_buff") for b in inner.get(key) or []}
            if sizes and sizes != {n}:
                short = min(sizes) < n
                cx.add("plan-pipeline", f"{inner['name']} has operands of {sorted(sizes)} chunk(s) in a pipeline of "
                       f"num_chunks {n}: " + ("its later iterations compute size - offset below zero in uint32 and "
                                              "move unit_size bytes beyond the operand" if short else
                                              "the iterations end before the operand does"),
                       gpu=r, tb=t, op=k + 1 + j)

    def size_of(self, r: int, buf: str) -> int:
        """A buffer's chunks of data: an LL plan's scratch holds twice its scratch_chunks (EP calScratchBufferSize)."""
        g = self.gpus[r]
        scratch = g["scratch_chunks"] * (rt.PACKET_SCRATCH_FACTOR if self.plan["protocol"] == "LL" else 1)
        return {"i": g["input_chunks"], "o": g["output_chunks"], "s": scratch}[buf]

    def _check_op(self, r, t, k, op) -> None:
        cx = self.cx
        name = op["name"]
        ct = op.get("channel_type")
        if name not in _MODELLED:
            self.unmodelled.add(name)
        if "reduce_op" in op and op["reduce_op"] not in rt.REDUCE_OPS:
            cx.add("plan-reduce-op", f"reduce_op {op['reduce_op']!r}: MSCCL++ sums", gpu=r, tb=t, op=k)
        if name in rt.UNSAFE_OPS:
            cx.add("plan-op-unsafe", f"{name}: {rt.UNSAFE_OPS[name]}", gpu=r, tb=t, op=k)
        if name == "pws" and ct == "memory":
            cx.add("plan-op-unsafe", "pws on a memory channel copies but does not signal (execution_kernel.hpp "
                   "handlePut returns after the copy)", gpu=r, tb=t, op=k)
        if name == "get":
            s, d = (op.get("src_buff") or [{}])[0], (op.get("dst_buff") or [{}])[0]
            if s.get("index") != d.get("index"):
                cx.add("plan-op-unsafe", "get with different source and destination indices: the kernel swaps "
                       "the offsets", gpu=r, tb=t, op=k)
        ids = op.get("channel_ids") or []
        if len(ids) > rt.MAX_CHANNELS_PER_OP:
            cx.add("plan-operand-count", f"{len(ids)} channel ids, at most {rt.MAX_CHANNELS_PER_OP}", gpu=r, tb=t, op=k)
        if ct in ("memory", "port"):
            for c in ids:
                if not 0 <= c < len(self.tbch[r][t][ct]):
                    cx.add("plan-channel-id", f"{name}: {ct} channel id {c}, the threadblock has "
                           f"{len(self.tbch[r][t][ct])}", gpu=r, tb=t, op=k)
        elif name in _SIGNALS + _WAITS or (name in ("put", "pws") and "channel_type" not in op):
            cx.add("plan-op-form", f"{name} without a memory or port channel_type", gpu=r, tb=t, op=k)
        packed = rt.packet_operands(op)
        for key, roles in zip(("src_buff", "dst_buff"), packed):
            operands = op.get(key) or []
            if len(operands) > rt.MAX_OPERANDS:
                cx.add("plan-operand-count", f"{len(operands)} {key} operands, at most {rt.MAX_OPERANDS}",
                       gpu=r, tb=t, op=k)
            for j, b in enumerate(operands):
                self._check_operand(r, t, k, name, ct, b, j in roles)
        if name in rt.PACKET_OPS:
            self._check_packet_op(r, t, k, op)
        for s in op.get("semaphore_ids") or []:
            if not 0 <= s < len(self.gpus[r].get("semaphores") or []):
                cx.add("plan-semaphore", f"semaphore {s}: gpu {r} declares {len(self.gpus[r].get('semaphores') or [])}",
                       gpu=r, tb=t, op=k)
        if name == "barrier" and not 0 <= op["barrier_id"] < rt.MAX_BARRIERS:
            cx.add("plan-barrier", f"barrier id {op['barrier_id']}, at most {rt.MAX_BARRIERS - 1}", gpu=r, tb=t, op=k)
        if name in ("put", "pws", "copy"):
            src, dst = op.get("src_buff") or [], op.get("dst_buff") or []
            if not src or len(src) != len(dst) or any(a["size"] != b["size"] for a, b in zip(src, dst)):
                cx.add("plan-op-form", f"{name} needs one source per destination, of equal sizes", gpu=r, tb=t, op=k)
            elif name != "copy" and any("buffer_id" not in b for b in dst) or any("type" not in b for b in src):
                cx.add("plan-op-form", f"{name} reads local operands and writes remote ones", gpu=r, tb=t, op=k)
        if name in ("re", "res", "rre", "rres"):
            # re/res: local sources; rre/rres read the peers' (src[1:], over memory channels: execution_kernel.hpp
            # handleReadReduceSend reads them through memoryChannelBufferPtrs_); res/rres also write dst[1:] remote
            src, dst = op.get("src_buff") or [], op.get("dst_buff") or []
            sizes = {b["size"] for b in src + dst}
            remote_src = name in ("rre", "rres")
            if len(src) < (2 if remote_src else 1) or not dst or "type" not in dst[0] or len(sizes) != 1 \
                    or "type" not in src[0] or any(("type" in b) == remote_src for b in src[1:]):
                cx.add("plan-op-form", f"{name} needs a local first source, {'remote' if remote_src else 'local'} "
                       "other sources, a local destination first, one size", gpu=r, tb=t, op=k)
            elif name in ("re", "rre") and len(dst) != 1:
                cx.add("plan-op-form", f"{name} writes one local destination", gpu=r, tb=t, op=k)
            elif (name in ("res", "rres") or remote_src) and (ct != "memory" or any("buffer_id" not in b for b in dst[1:])):
                cx.add("plan-op-form", f"{name} reaches its peers over memory channels only", gpu=r, tb=t, op=k)
        if name == "get":
            src, dst = op.get("src_buff") or [], op.get("dst_buff") or []
            if not src or len(src) != len(dst) or any("buffer_id" not in b for b in src) \
                    or any("type" not in b for b in dst) or len({b["size"] for b in src + dst}) != 1 or ct != "memory":
                cx.add("plan-op-form", "get copies remote operands into local ones of one size, over memory channels",
                       gpu=r, tb=t, op=k)
        # a peer's buffer an op reads (rre, rres, get) or writes is one of a rank its channels connect to
        touched = []
        if name in ("rre", "rres", "get") and ct == "memory":
            touched += [("reads", i, b) for i, b in enumerate(op.get("src_buff") or [])]
        if name in ("put", "pws", "res", "rres", "ppkt", "rppkt", "respkt", "recspkt") and ct in ("memory", "port"):
            touched += [("writes", i, b) for i, b in enumerate(op.get("dst_buff") or [])]
        peers = {self.chans[r][ct][i] for i in self.tbch[r][t][ct]} if touched else set()
        for verb, i, b in touched:
            owner = self._remote(r, t, ct, b["buffer_id"]) if "buffer_id" in b else None
            if owner is None:
                continue
            if verb == "writes" and ct == "port" and i < len(ids) and 0 <= ids[i] < len(self.tbch[r][t][ct]):
                peer = self.chans[r][ct][self.tbch[r][t][ct][ids[i]]]
                if owner[0] != peer:
                    cx.add("plan-wrong-peer", f"{name} writes rank {owner[0]}'s buffer over the channel to {peer}",
                           gpu=r, tb=t, op=k)
            elif owner[0] not in peers:
                cx.add("plan-wrong-peer", f"{name} {verb} rank {owner[0]}'s buffer, but the threadblock has no "
                       f"{ct} channel to it", gpu=r, tb=t, op=k)

    def _check_packet_op(self, r, t, k, op) -> None:
        """The operands a packet op's kernel reads (colls.runtimes.mscclpp, packets): data where it reads data,
        packets in scratch where it reads or writes packets, one size."""
        cx, name, ct = self.cx, op["name"], op.get("channel_type")
        self.packets = True
        if self.plan["protocol"] != "LL":
            cx.add("plan-packet-protocol", f"{name} in a plan whose protocol is {self.plan['protocol']!r}",
                   gpu=r, tb=t, op=k)
        src, dst = op.get("src_buff") or [], op.get("dst_buff") or []
        sp, dp = rt.packet_operands(op)
        remote_from = {"ppkt": 0, "rppkt": 0, "respkt": 1, "recspkt": 2}.get(name)
        want_src = {"ppkt": len(dst), "rppkt": 1, "cpkt": 1, "upkt": 1}.get(name)
        want_dst = {"cpkt": 1, "upkt": 1, "repkt": 1, "recpkt": 2}.get(name)
        why = None
        if not src or not dst or len({b["size"] for b in src + dst}) != 1:
            why = "needs sources and destinations of one size"
        elif want_src is not None and len(src) != want_src or name in rt.PACKET_REDUCE_OPS and len(src) < 2:
            why = "has the wrong number of sources"
        elif want_dst is not None and len(dst) != want_dst or remote_from is not None and len(dst) <= remote_from:
            why = "has the wrong number of destinations"
        elif any("type" not in b for b in src):
            why = "reads remote operands (packet ops read their own GPU's buffers)"
        elif any(src[j]["type"] != "s" for j in sp):
            why = "reads packets outside scratch (the kernel reads them from scratch whatever the type says)"
        elif any(("type" in b) != (remote_from is None or j < remote_from) for j, b in enumerate(dst)):
            why = "writes remote operands where the kernel writes local ones, or the reverse"
        elif any("type" in dst[j] and dst[j]["type"] != "s" for j in dp):
            why = "writes packets outside scratch"
        elif remote_from is not None and ct not in ("memory", "port"):
            why = "writes remote packets without a memory or port channel_type"
        elif name in rt.PACKET_REMOTE_MEMORY_ONLY and ct != "memory":
            why = "writes remote packets over a port channel (the kernel writes them over memory channels only)"
        elif name == "rppkt" and ct == "port" and len(op.get("channel_ids") or []) != len(dst):
            why = "over port channels needs one channel id per destination"
        if why:
            cx.add("plan-packet-form", f"{name} {why}", gpu=r, tb=t, op=k)
            return
        if name == "ppkt" and ct == "port":
            cx.add("plan-op-unsafe", "ppkt over a port channel puts its source as if it were packets already and "
                   "names the source memory without the context's base (execution_kernel.hpp handlePutPackets); "
                   "pack with cpkt and forward with rppkt", gpu=r, tb=t, op=k)
        for j in dp:
            b = dst[j]
            if "buffer_id" in b and ct in ("memory", "port"):
                owner = self._remote(r, t, ct, b["buffer_id"])
                if owner is not None and owner[1] != "s":
                    cx.add("plan-packet-form", f"{name} writes packets into rank {owner[0]}'s {owner[1]} buffer, "
                           "not its scratch", gpu=r, tb=t, op=k)

    def _remote(self, r, t, ct, ref):
        refs = self.tbref[r][t].get(ct, [])
        if not 0 <= ref < len(refs):
            return None
        rb = self.gpus[r]["remote_buffers"][refs[ref]]
        return rb["rank"], rb["type"]

    def _check_operand(self, r, t, k, name, ct, b, packed: bool = False) -> None:
        """An operand within its buffer (``packed``: packets, twice the data's bytes, at a doubled offset)."""
        cx = self.cx
        if "switch_channel_id" in b:
            self.unmodelled.add(name)
            return
        if b["index"] < 0 or b["size"] < 1:
            cx.add("plan-operand", f"{name}: index {b['index']} size {b['size']}", gpu=r, tb=t, op=k)
            return
        if "type" in b:
            owner, buf = r, b["type"]
        else:
            if ct not in ("memory", "port"):
                cx.add("plan-op-form", f"{name}: a remote operand needs a memory or port channel_type", gpu=r, tb=t, op=k)
                return
            found = self._remote(r, t, ct, b["buffer_id"])
            if found is None:
                cx.add("plan-buffer-id", f"{name}: buffer_id {b['buffer_id']} is not one of the threadblock's {ct} "
                       "refs", gpu=r, tb=t, op=k)
                return
            owner, buf = found
            if not 0 <= owner < self.n:
                return
        end = (b["index"] + b["size"]) * (rt.PACKET_SCRATCH_FACTOR if packed else 1)
        have = self.size_of(owner, buf)
        if end > have:
            where = "its" if owner == r else f"rank {owner}'s"
            what = f"packets of chunks [{b['index']}, {b['index'] + b['size']}) end at chunk {end}" if packed \
                else f"chunks [{b['index']}, {end})"
            cx.add("plan-operand", f"{name}: {what} of {where} {buf} buffer of {have} chunks",
                   gpu=r, tb=t, op=k)
        if end > self.widest[0]:
            self.widest = (end, (name, r, t, k))

    def _check_thread_sync(self, r, t, ops) -> None:
        """``ops`` unrolled (:func:`_unrolled`, two iterations of every pipeline)."""
        since: list = []
        reported = set()
        for x, k, sx in ops:
            lx = _lane(x)
            if lx == "sync":
                since = []
                continue
            why = None
            xdw, xpw, xdr, xpr = _accesses(x, sx)
            xw, xr = xdw + xpw, xdr + xpr
            for y, sy in since:
                ly = _lane(y)
                ydw, ypw, ydr, ypr = _accesses(y, sy)
                yw, yr = ydw + ypw, ydr + ypr
                if lx == "all":
                    # packets written, then polled: their flags order them (no nop needed)
                    if y["name"] in _WAITS + ("sem_acquire",) and x["name"] != "sem_acquire":
                        why = f"{x['name']} runs on all threads right after {y['name']} on thread 0"
                    elif ly == "all" and (_overlap(ydw, xw + xr) or _overlap(ypw, xw + xdr) or _overlap(yr, xw)):
                        why = f"{x['name']} touches chunks {y['name']} accesses, on other threads"
                    elif ly == "t0" and _overlap(yr, xw):
                        why = f"{x['name']} overwrites the source of {y['name']} before thread 0 issued it"
                elif y["name"] == "sem_acquire" and ly == "all" and x["name"] != "sem_acquire":
                    why = f"{x['name']} on thread 0 may run before other threads' sem_acquire"
                elif x["name"] in _SIGNALS + ("sem_release",) and ly == "all":
                    why = f"{x['name']} on thread 0 while other threads may still run {y['name']}"
                elif x["name"] in ("put", "pws", "pwsf") and ly == "all" and _overlap(yw, xr):
                    why = f"{x['name']} on thread 0 reads what {y['name']} writes on other threads"
                if why:
                    break
            if why and k not in reported:
                reported.add(k)
                self.cx.add("plan-thread-sync", why + ", with no nop between", gpu=r, tb=t, op=k)
            since.append((x, sx))

    def _check_pairing(self) -> None:
        """Signals sent on each channel against waits on its pair, counted per call: for each kind of
        pipeline (unit_size, num_chunks) once per iteration, outside pipelines once (key None)."""
        sent: dict = defaultdict(lambda: defaultdict(int))
        waited: dict = defaultdict(lambda: defaultdict(int))
        shared: set = set()
        for r, g in enumerate(self.gpus):
            for t, tb in enumerate(g["threadblocks"]):
                for op, ctx in _context(tb["ops"]):
                    ct = op.get("channel_type")
                    if ct not in ("memory", "port"):
                        continue
                    signals = op["name"] in _SIGNALS or (op["name"] in ("pws", "pwsf") and ct == "port")
                    waits = op["name"] in _WAITS
                    if not (signals or waits):
                        continue
                    for c in op.get("channel_ids") or []:
                        if 0 <= c < len(self.tbch[r][t][ct]):
                            ep = (r, ct, self.tbch[r][t][ct][c])
                            owner = self.chan_owner.setdefault(ep, t)
                            if owner != t and (ep, t) not in shared:
                                shared.add((ep, t))
                                self.cx.add("plan-channel-shared", f"{ct} channel {ep[2]}'s semaphore is signalled or "
                                            f"waited on by threadblocks {owner} and {t}", gpu=r, tb=t)
                            if signals:
                                sent[ep][ctx] += 1
                            else:
                                waited[ep][ctx] += 1
        eps = set(sent) | set(waited)
        eps |= {self.partner[ep] for ep in eps if ep in self.partner}
        for ep in sorted(eps):
            partner = self.partner.get(ep)
            if partner is None:
                self.cx.add("plan-signal-wait", f"{ep[1]} channel {ep[2]} is used but has no paired channel on "
                            "the peer", gpu=ep[0], tb=self.chan_owner.get(ep))
                continue
            a, b = sent[ep], waited[partner]
            if {x: v for x, v in a.items() if v} != {x: v for x, v in b.items() if v}:
                ctx = next(x for x in sorted(set(a) | set(b), key=repr) if a[x] != b[x])
                more = "never waited for (the next call's wait returns early)" if a[ctx] > b[ctx] \
                    else "waits that no signal answers"
                where = "" if ctx is None else \
                    f" once per iteration of pipelines of unit_size {ctx[0]} and num_chunks {ctx[1]}"
                self.cx.add("plan-signal-wait", f"gpu {ep[0]} signals {a[ctx]} time(s){where} over {ep[1]} channel "
                            f"{ep[2]} to {partner[0]}, which waits {b[ctx]} time(s){where}: {more}",
                            gpu=partner[0], tb=self.chan_owner.get(partner))

    # --- execution ----------------------------------------------------------------------------------
    def clocks(self, sym) -> int:
        """The clock entries the execution keeps for one call: its threadblocks that run (GPUs 0..shift-1 of
        ``sym``, or all) times every threadblock."""
        counts = [len(g["threadblocks"]) for g in self.gpus]
        return sum(counts[:sym.shift if sym is not None else self.n]) * sum(counts)

    def chunk_states(self, sym) -> int:
        """The buffer chunks the execution follows (:meth:`execute_all`, its largest chunk size): every chunk
        of the GPUs that run, in pipeline units, for each of the calls it runs."""
        ranks = sym.shift if sym is not None else self.n
        return ranks * (self.coll.out_chunks + self.coll.in_chunks) * max(self.units_per_chunk()) * _Execution.CALLS

    def execute_all(self, inplace: bool, sym) -> bool:
        """The execution at every chunk size :meth:`units_per_chunk` names, on GPUs ``0..shift-1`` of the
        symmetry ``sym`` (:mod:`colls.verify.plan_symmetry`) or on every GPU; false when it deadlocks."""
        return all(_Execution(self, inplace, units, sym).run() for units in self.units_per_chunk())


class _Execution:
    """Two consecutive calls, threadblock by threadblock until each blocks; vector clocks and values.

    ``units``: a chunk is that many pipeline units; memory is tracked per unit (location (rank, storage,
    unit within the chunk)) and every pipeline runs num_chunks x units iterations.

    ``sym`` (a :class:`colls.verify.plan_symmetry.PlanSymmetry`, or None): only the threadblocks of GPUs
    ``0..shift-1`` run, and memory is kept for them only; an access to GPU ``q = q0 + k shift``, or a signal
    or packets sent to it, is made as its image under ``g^-k`` (that module's docstring): on GPU ``q0``, by the
    threadblock ``k`` orbit steps back, with that threadblock's clock (:meth:`_record`). Clock positions are
    those of every threadblock of every GPU, so a clock names what it has seen of any of them."""

    CALLS = 2

    def __init__(self, m: _Model, inplace: bool, units: int = 1, sym=None):
        self.m, self.cx, self.inplace = m, m.cx, inplace
        self.units = units
        self.sym = sym
        self.d = sym.shift if sym is not None else m.n        # the GPUs that run
        self.label = ("in-place" if inplace else "out-of-place") + \
            (f", chunks of {units} pipeline units" if units > 1 else "")
        self.calls = "in-place calls" if inplace else "out-of-place calls"
        self.tbs = []                   # (call, gpu, tb position)
        for call in range(self.CALLS):
            for r, g in enumerate(m.gpus):
                for t in range(len(g["threadblocks"])):
                    self.tbs.append((call, r, t))
        self.index = {key: i for i, key in enumerate(self.tbs)}
        nt = len(self.tbs)
        self.active = [i for i, (_, r, _) in enumerate(self.tbs) if r < self.d]
        self.ops = [_unrolled(m.gpus[r]["threadblocks"][t]["ops"], self._iterations) if r < self.d else ()
                    for _, r, t in self.tbs]
        self.pc = [0] * nt
        self.own = [0] * nt
        # a clock entry counts a threadblock's ops (each at most once per unrolled op, both calls apart): the
        # narrowest integer that holds the longest threadblock's count (the clocks' memory is nt squared)
        longest = max((len(ops) for ops in self.ops), default=0)
        dtype = np.int16 if longest < np.iinfo(np.int16).max else np.int32
        self.clock = [np.zeros(nt, dtype=dtype) if r < self.d else None for _, r, _ in self.tbs]
        self.started = [call == 0 for call, _, _ in self.tbs]
        self.inbox: dict = defaultdict(list)        # endpoint -> [(clock, own, tbi, async reads)]
        self.consumed: dict = defaultdict(int)
        self.pending: dict = defaultdict(list)      # endpoint -> port-put source reads not yet signalled
        self.releases: dict = defaultdict(list)     # (gpu, sem) -> [(clock, own, tbi)]
        self.acquired: dict = defaultdict(int)
        self.barrier: dict = {}                     # (call, gpu, id) -> [arrived tbis]
        self.released_barrier: set = set()
        self.mem: dict = {}
        # location -> [its last write, the reads since], each (tbi, own, write, remote, where): every access is
        # checked against them as it is made (:meth:`_record`), with the clock its threadblock has then, so no
        # clock is kept per access (one per access held memory in the square of the threadblocks: 4 GB for a
        # plan of 32 GPUs and 96 threadblocks each)
        self.access: dict = {}
        self.unordered: list = []                   # (location, earlier access, later access) with no order
        self.halves = bool(m.plan.get("use_double_scratch_buffer"))   # call n uses scratch half n mod 2
        self.packet_peers: set = set()              # (writer rank, rank whose scratch it writes packets into)
        for call in range(self.CALLS):
            for r in range(self.d):
                for storage, value in m.coll.initial_state(r, inplace).items():
                    for u in range(units):
                        self.mem[(r, self._key(call, storage), u)] = value

    def _iterations(self, op) -> int:
        """handlePipeline's count at a chunk of ``units`` units: ceil(num_chunks x chunk / unit_size)."""
        return op["iter_context"]["num_chunks"] * self.units

    def _units(self, b, sl) -> list:
        """The units of a local or remote operand an op touches: all of them, or the slice's one."""
        first = b["index"] * self.units
        if sl is None:
            return list(range(first, first + b["size"] * self.units))
        return [first + sl] if sl < b["size"] * self.units else []

    def _key(self, call, storage):
        if storage[0] == "s":
            return (call % 2,) + storage if self.halves else storage
        return (call,) + storage

    def _join(self, i, clock, own, j):
        new = np.maximum(self.clock[i], clock)      # a new array: clocks already recorded stay as they were
        if new[j] < own:
            new[j] = own
        self.clock[i] = new

    def run(self) -> bool:
        progress = True
        while progress:
            progress = False
            for i in self.active:
                while self._step(i):
                    progress = True
        stuck = [i for i in self.active if self.pc[i] < len(self.ops[i])]
        if stuck:
            for i in stuck[:REPORT_CAP]:
                call, r, t = self.tbs[i]
                what = self._blocked(i)
                op, flat, sl = self.ops[i][self.pc[i]]
                at = f" (iteration {sl + 1} of its pipeline, chunks of {self.units} units)" if sl is not None else ""
                self.cx.add("plan-deadlock", f"call {call + 1}: blocked at {what}{at}", gpu=r, tb=t, op=flat,
                            calls=self.calls)
            _skip(self.cx, "race and correctness checks were not run: the plan deadlocks")
            return False
        self._races()
        if self.halves:
            self._packet_order()
        self._post()
        return True

    def _blocked(self, i) -> str:
        if not self.started[i]:
            return "its start (the GPU's first call never finished)"
        op = self.ops[i][self.pc[i]][0]
        if op["name"] in rt.PACKET_OPS:
            return f"{op['name']}, polling packets nothing writes in this call"
        if op["name"] in _WAITS:
            return f"{op['name']} on {op['channel_type']} channel(s) {op['channel_ids']} (no signal comes)"
        if op["name"] == "sem_acquire":
            return f"sem_acquire {op.get('semaphore_ids', [])} (never released)"
        if op["name"] == "barrier":
            return f"barrier {op['barrier_id']} (waits for {op['num_threadblocks']} threadblocks)"
        return op["name"]

    def _endpoint(self, i, op, c):
        _, r, t = self.tbs[i]
        ct = op["channel_type"]
        return (r, ct, self.m.tbch[r][t][ct][c])

    def _step(self, i) -> bool:
        call, r, t = self.tbs[i]
        if self.pc[i] >= len(self.ops[i]):
            return False
        if not self.started[i]:
            prev = [self.index[(call - 1, r, u)] for u in range(len(self.m.gpus[r]["threadblocks"]))]
            if any(self.pc[j] < len(self.ops[j]) for j in prev):
                return False
            for j in prev:
                self._join(i, self.clock[j], self.own[j], j)
            self.started[i] = True
        op, flat, sl = self.ops[i][self.pc[i]]
        name = op["name"]
        if name in _WAITS:
            eps = [self._endpoint(i, op, c) for c in op["channel_ids"]]
            if any(len(self.inbox[ep]) <= self.consumed[ep] for ep in eps):
                return False
            for ep in eps:
                clock, own, j, reads = self.inbox[ep][self.consumed[ep]]
                self.consumed[ep] += 1
                self._join(i, clock, own, j)
            self.own[i] += 1
            for ep in eps:
                clock, own, j, reads = self.inbox[ep][self.consumed[ep] - 1]
                for loc, where in reads:            # a port put's source read completes here
                    self._record(loc, i, False, False, where)
            for ep in eps:                          # consumed: its clock is joined, nothing reads it again
                self.inbox[ep][self.consumed[ep] - 1] = None
        elif name == "sem_acquire":
            keys = [(r, s) for s in op.get("semaphore_ids", ())]
            init = self.m.gpus[r]["semaphores"]
            if any(len(self.releases[k]) + init[k[1]]["init_value"] <= self.acquired[k] for k in keys):
                return False
            for k in keys:
                n = self.acquired[k] - init[k[1]]["init_value"]
                self.acquired[k] += 1
                if n >= 0:
                    self._join(i, *self.releases[k][n])
                    self.releases[k][n] = None      # each release is acquired once
            self.own[i] += 1
        elif name == "barrier":
            key = (call, r, op["barrier_id"])
            if (i, key) not in self.released_barrier:
                arrived = self.barrier.setdefault(key, [])
                if i not in arrived:
                    arrived.append(i)
                if len(arrived) < op["num_threadblocks"]:
                    return False
                for j in arrived:
                    self.released_barrier.add((j, key))
                snapshot = [(self.clock[j], self.own[j], j) for j in arrived]
                for j in arrived:
                    for clock, own, jj in snapshot:
                        self._join(j, clock, own, jj)
                self.barrier[key] = []
            self.released_barrier.discard((i, key))
            self.own[i] += 1
        else:
            if name in rt.PACKET_OPS and not self._polled(i, call, r, op):
                return False
            self.own[i] += 1
            self._apply(i, call, r, t, op, flat, sl)
        self.pc[i] += 1
        return True

    def _packet_locs(self, call, r, b):
        """The places of an operand's packets in rank ``r``'s scratch, two per chunk (the offset doubled)."""
        first = rt.PACKET_SCRATCH_FACTOR * b["index"]
        return [(r,) + self._loc(call, r, "s", u) for u in range(first, first + rt.PACKET_SCRATCH_FACTOR * b["size"])]

    def _polled(self, i, call, r, op) -> bool:
        """Whether every packet ``op`` reads carries this call's flag (the kernel polls until it does); if so its
        writers' clocks are joined, and the proxy's reads of a port rppkt's source are complete."""
        src = op.get("src_buff") or []
        found = []
        for j in rt.packet_operands(op)[0]:
            for loc in self._packet_locs(call, r, src[j]):
                v = self.mem.get(loc)
                if not (isinstance(v, _Packet) and v.call == call):
                    return False
                found.append(v)
        for v in found:
            self._join(i, v.clock, v.own, v.tbi)
        for v in found:
            for loc, where in v.pending:
                self._record(loc, i, False, False, where)
        return True

    def _signal(self, i, ep):
        partner = self.m.partner[ep]
        reads = self.pending.pop(ep, [])
        k = partner[0] // self.d
        if k:       # to a GPU beyond the quotient: its image's signal to the canonical GPU
            partner = self.sym.endpoints.get(partner, partner)
            self.inbox[partner].append((self.sym.image_clock(self.clock[i], -k), self.own[i], self.sym.moved(i, -k),
                                        [(self._move(loc, -k), self._moved_where(where, -k)) for loc, where in reads]))
            return
        self.inbox[partner].append((self.clock[i], self.own[i], i, reads))

    def _move(self, loc, k: int):
        """``g^k`` of a location (rank, storage key, unit): the rank ``k`` shifts on, an input or output chunk moved
        with it (:mod:`colls.verify.plan_symmetry`)."""
        q, key, u = loc
        sym = self.sym.sym
        t = sym.shifts.get(key[-2], 0)
        if t:
            key = key[:-1] + ((key[-1] + k * self.d * t) % sym.sizes[key[-2]],)
        return (q + k * self.d) % self.m.n, key, u

    def _moved_where(self, where, k: int):
        return ((where[0] + k * self.d) % self.m.n,) + tuple(where[1:])

    def _image(self, value, k: int):
        """``g^k`` of a value (packets: their value; the clock and places they carry are moved by the caller)."""
        return self.sym.sym.image(value, k) if k else value

    def _apply(self, i, call, r, t, op, flat, sl) -> None:
        name = op["name"]
        ct = op.get("channel_type")
        where = (r, t, flat)
        if name in _SIGNALS:
            for c in op.get("channel_ids", ()):       # none: the loader sets no channel (op.contains)
                self._signal(i, self._endpoint(i, op, c))
            return
        if name == "sem_release":
            for s in op.get("semaphore_ids", ()):     # none: it releases nothing (op.contains)
                self.releases[(r, s)].append((self.clock[i], self.own[i], i))
            return
        if name in ("nop", "flush"):
            return
        src = op.get("src_buff") or []
        dst = op.get("dst_buff") or []
        if name in rt.PACKET_OPS:
            self._apply_packets(i, call, r, t, op, where)
            return
        if name in ("put", "pws"):
            for n, (s, d) in enumerate(zip(src, dst)):
                owner, buf = self.m._remote(r, t, ct, d["buffer_id"])
                us, ud = self._units(s, sl), self._units(d, sl)
                values = [self._read(call, r, s["type"], u, i, where) for u in us]
                if ct == "port":
                    ep = self._endpoint(i, op, op["channel_ids"][n])
                    for u in us:
                        self.pending[ep].append(((r,) + self._loc(call, r, s["type"], u), where))
                for u, v in zip(ud, values):
                    self._write(call, owner, buf, u, v, i, True, where)
            if name == "pws" and ct == "port":
                for c in op["channel_ids"]:
                    self._signal(i, self._endpoint(i, op, c))
            return
        if name == "copy":
            s, d = src[0], dst[0]
            us, ud = self._units(s, sl), self._units(d, sl)
            if all(self._loc(call, r, s["type"], a) == self._loc(call, r, d["type"], b) for a, b in zip(us, ud)):
                return                  # a copy onto itself (an in-place call's own slice) changes nothing
            values = [self._read(call, r, s["type"], u, i, where) for u in us]
            for u, v in zip(ud, values):
                self._write(call, r, d["type"], u, v, i, False, where)
            return
        if name == "get":             # a peer's chunks into local ones (equal offsets: the kernel swaps them)
            for s, d in zip(src, dst):
                values = [self._read_operand(call, r, t, ct, s, u, i, where) for u in self._units(s, sl)]
                for u, v in zip(self._units(d, sl), values):
                    self._write(call, r, d["type"], u, v, i, False, where)
            return
        if name in ("re", "res", "rre", "rres"):
            units_src = [self._units(b, sl) for b in src]
            units_dst = [self._units(b, sl) for b in dst]
            values = [self._sum(name, [self._read_operand(call, r, t, ct, b, us[k], i, where)
                                       for b, us in zip(src, units_src)], where)
                      for k in range(len(units_dst[0]))]
            for k, v in enumerate(values):
                self._write(call, r, dst[0]["type"], units_dst[0][k], v, i, False, where)
                for d, ud in zip(dst[1:], units_dst[1:]):
                    owner, buf = self.m._remote(r, t, ct, d["buffer_id"])
                    self._write(call, owner, buf, ud[k], v, i, True, where)

    def _apply_packets(self, i, call, r, t, op, where) -> None:
        """A packet op (colls.runtimes.mscclpp, packets): its data and packet sources read, the sum taken for the
        reducing ones, written as data or as packets with this call's flag."""
        name, ct = op["name"], op.get("channel_type")
        src, dst = op.get("src_buff") or [], op.get("dst_buff") or []
        sp, dp = rt.packet_operands(op)

        def values(j):
            b = src[j]
            if j in sp:
                locs = self._packet_locs(call, r, b)
                for loc in locs:
                    self._record(loc, i, False, False, where)
                return [self.mem[loc].value for loc in locs[::rt.PACKET_SCRATCH_FACTOR]]
            return [self._read(call, r, b["type"], u, i, where) for u in self._units(b, None)]

        if name in rt.PACKET_REDUCE_OPS:
            got = [values(j) for j in range(len(src))]
            data = [self._sum(name, [terms[k] for terms in got], where) for k in range(len(got[0]))]
        pending = []
        for n, d in enumerate(dst):
            if name not in rt.PACKET_REDUCE_OPS:
                data = values(0 if name in ("rppkt", "cpkt", "upkt") else n)
            if n not in dp:
                for u, v in zip(self._units(d, None), data):
                    self._write(call, r, d["type"], u, v, i, False, where)
                continue
            if "type" in d:
                owner = r
            else:
                found = self.m._remote(r, t, ct, d["buffer_id"])
                if found is None:
                    continue
                owner = found[0]
                self.packet_peers.add((r, owner))
                if name == "rppkt" and ct == "port":     # the proxy reads the sender's packets later
                    pending = [(loc, where) for loc in self._packet_locs(call, r, src[0])]
            self._write_packets(call, owner, d, data, i, "type" not in d, where, tuple(pending))

    def _sum(self, name, terms, where):
        """The reduction of a chunk's terms, in order (the kernels add the first source and each other in turn):
        a term nothing had written, or an input counted twice, is a finding."""
        acc = terms[0]
        for v in terms[1:]:
            if acc is None or v is None:
                self.cx.add("plan-uninitialised-read", f"{self.label}: {name} sums a chunk nothing had written",
                            *where, calls=self.calls)
                acc = None
                continue
            try:
                acc = reduce_values(acc, v)
            except SymbolicError as e:
                self.cx.add("plan-double-count", f"{self.label}: {name} {e}", *where, calls=self.calls)
                acc = e.value
        return acc

    def _write_packets(self, call, owner, b, data, i, remote, where, pending=()) -> None:
        k = owner // self.d         # beyond the quotient: written as by the image k orbit steps back
        clock, tbi = (self.sym.image_clock(self.clock[i], -k), self.sym.moved(i, -k)) if k else (self.clock[i], i)
        if k:
            pending = tuple((self._move(loc, -k), self._moved_where(w, -k)) for loc, w in pending)
        for j, v in enumerate(data):
            locs = self._packet_locs(call, owner, {"index": b["index"] + j, "size": 1})
            old = self.mem.get(self._move(locs[0], -k) if k else locs[0])
            if isinstance(old, _Packet) and old.call == call:
                self.cx.add("plan-packet-reuse", f"{self.label}: packets of rank {owner}'s scratch chunk "
                            f"{b['index'] + j} written twice in call {call + 1}", *where, calls=self.calls)
            packet = _Packet(call, self._image(v, -k), clock, self.own[i], tbi, pending)
            for loc in locs:
                self.mem[self._record(loc, i, True, remote, where)[0]] = packet

    def _packet_order(self) -> None:
        """``plan-packet-call``: in each call, every rank that writes packets into a peer's scratch finishes only
        after the peer has started the call (module docstring)."""
        ends: dict = {}                             # (call, rank) -> what its threadblocks had seen at the end
        members: dict = defaultdict(list)           # (call, rank) -> its threadblocks
        for idx, (call, r, _) in enumerate(self.tbs):
            members[(call, r)].append(idx)
        for idx in self.active:                     # the packets' writers: GPUs that run (a symmetry's images alike)
            call, r, _ = self.tbs[idx]
            ends[(call, r)] = np.maximum(ends[(call, r)], self.clock[idx]) if (call, r) in ends else self.clock[idx]
        for a, b in sorted(self.packet_peers):
            for call in range(self.CALLS):
                if not any(ends[(call, a)][j] >= 1 for j in members[(call, b)]):
                    self.cx.add("plan-packet-call", f"{self.label}: gpu {a} can finish call {call + 1} before gpu {b} "
                                "has started it; the call after next writes packets into the same scratch half, "
                                f"maybe before gpu {b} read this call's", gpu=a, calls=self.calls)
                    break

    def _loc(self, call, r, buf, unit):
        """(storage key, unit within the chunk) of a buffer's unit, aliases folded."""
        chunk, u = divmod(unit, self.units)
        return self._key(call, self.m.coll.alias(r, buf, chunk, self.inplace)), u

    def _read_operand(self, call, r, t, ct, b, unit, i, where):
        """A unit of an operand, local or a peer's (read through the channel's mapping of its buffer)."""
        if "type" in b:
            return self._read(call, r, b["type"], unit, i, where)
        owner, buf = self.m._remote(r, t, ct, b["buffer_id"])
        return self._read(call, owner, buf, unit, i, where)

    def _read(self, call, r, buf, unit, i, where):
        loc, k = self._record((r,) + self._loc(call, r, buf, unit), i, False, False, where)
        value = self.mem.get(loc)
        if isinstance(value, _Packet):
            self.cx.add("plan-packet-form", f"{self.label}: reads packets as data (rank {r}'s scratch chunk "
                        f"{unit // self.units})", *where, calls=self.calls)
            return None
        return self._image(value, k)

    def _write(self, call, r, buf, unit, value, i, remote, where):
        key, u = self._loc(call, r, buf, unit)
        if key[-2] == "i" and buf != "s" and not self.m.coll.input_writable(r, key[-1], self.inplace):
            self.cx.add("plan-input-write", f"{self.label}: writes input chunk {key[-1]} of rank {r}", *where,
                        calls=self.calls)
        loc, k = self._record((r, key, u), i, True, remote, where)
        self.mem[loc] = self._image(value, -k)

    def _record(self, loc, i, write, remote, where):
        """Check an access against the location's last write (and, for a write, the reads since), each of which
        must happen before it (its threadblock's clock now covers theirs); keep it as the last write or a read.
        Returns the location kept, and ``k``: with a symmetry, an access to a GPU ``k`` orbit steps beyond the
        quotient is kept as its image ``g^-k`` (made on the canonical GPU by the image of threadblock ``i``,
        whose clock holds at ``e`` what ``i``'s holds at ``g^k e``)."""
        k = loc[0] // self.d
        me = i
        if k:
            loc, me, where = self._move(loc, -k), self.sym.moved(i, -k), self._moved_where(where, -k)
        x = (me, self.own[i], write, remote, where)
        clock = self.clock[i]
        state = self.access.get(loc)
        if state is None:
            state = self.access[loc] = [None, []]
        last_write, readers = state
        for y in ([last_write] if last_write else []) + (readers if write else []):
            if y[0] != me and clock[self.sym.moved(y[0], k) if k else y[0]] < y[1]:
                self.unordered.append((loc, y, x))
        if write:
            state[0], state[1] = x, []
        else:
            readers.append(x)
        return loc, k

    def _races(self) -> None:
        """Report the unordered pairs :meth:`_record` found, by location, each pair of places once."""
        reported = set()
        by_loc: dict = defaultdict(list)
        for loc, y, x in self.unordered:
            by_loc[loc].append((y, x))
        for loc in sorted(by_loc, key=repr):
            for y, x in by_loc[loc]:
                self._race(loc, y, x, reported)

    def _race(self, loc, y, x, reported) -> None:
        key = (y[4], x[4])
        if key in reported:
            return
        reported.add(key)
        r, storage, unit = loc
        chunk = f"rank {r}'s {'scratch' if storage[-2] == 's' else {'i': 'input', 'o': 'output'}[storage[-2]]} " \
                f"chunk {storage[-1]}" + (f" (unit {unit})" if self.units > 1 else "")
        ya, xa = ("writes" if y[2] else "reads"), ("writes" if x[2] else "reads")
        (gy, ty, oy), (gx, tx, ox) = y[4], x[4]
        rule = "plan-slot-race" if (x[3] or y[3]) and storage[-2] == "s" else "plan-race"
        self.cx.add(rule, f"{self.label}: gpu {gy} tb {ty} op {oy} {ya} {chunk} and gpu {gx} tb {tx} op {ox} {xa} it, "
                    "with nothing ordering them", gx, tx, ox, calls=self.calls)

    def _post(self) -> None:
        coll = self.m.coll
        for call in range(self.CALLS):
            for r in range(self.d):
                wrong = []
                for j in range(coll.out_chunks):
                    want = coll.expected(r, j)
                    if want is None:
                        continue
                    for u in range(self.units):
                        got = self.mem.get((r,) + self._loc(call, r, "o", j * self.units + u))
                        if isinstance(got, _Packet):
                            wrong.append(f"output chunk {j} holds packets, not data")
                            break
                        if got != want:
                            wrong.append(f"output chunk {j}" + (f" (unit {u})" if self.units > 1 else "") +
                                         f" holds {describe(got)}, expected {describe(want)}")
                            break
                for text in wrong[:3]:
                    self.cx.add("plan-postcondition", f"{self.label}, call {call + 1}: gpu {r}: {text}", gpu=r,
                                calls=self.calls)


def proved_plan(program: Program, topology, *, name: str, inplace: bool, source: str = "<generated>",
                slice_bytes: int | None = mscclpp.rt.PIPELINE_UNIT_BYTES, protocol: str = "Simple"):
    """:func:`colls.mscclpp.plan_of` (pipelined by ``slice_bytes``; packets for ``protocol`` LL), then
    :func:`verify_plan` for the plan's
    call type and every other one the program serves; returns (plan, the call types proved). CollsError naming
    the limit or the first finding when the plan cannot be written or is not proved."""
    plan = mscclpp.plan_of(program, topology, name=name, inplace=inplace, slice_bytes=slice_bytes, protocol=protocol)
    proof = mscclpp.rt.PLAN_PROOF_THREADBLOCKS
    modes = {bool(inplace)}
    modes |= {True} if program.inplace else set()
    modes |= {False} if program.outofplace else set()
    for ip in sorted(modes):
        report = verify_plan(plan, program.coll, source, inplace=ip, max_clocks=proof * proof)
        if not report.ok or not report.facts.get("semantics_checked"):
            first = next((f for f in report.findings if f.severity == "error"), None)
            why = str(first) if first is not None else "; ".join(report.unproven) or "not proven"
            raise CollsError(f"the MSCCL++ plan of {program.name} is not proved for "
                             f"{'in-place' if ip else 'out-of-place'} calls: {why}")
    return plan, sorted(modes)
