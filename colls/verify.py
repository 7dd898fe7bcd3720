"""Prove or refute an MSCCL program: it loads, it cannot hang, it has no data race, it computes the collective.

``verify(program, target)`` returns a :class:`Report` whose findings each carry a rule id (listed in
:data:`RULES`), a location (gpu / tb / step, source line) and a severity. Only errors make a file
invalid, and everything that would stop the runtime loading the file, hang it, or make it compute a wrong
result is an error. The checks, in order:

1. **Contract** (``shared/reference/msccl-runtime.md``, read from ``msccl_parser.cc``): attributes, values,
   limits of the target runtime.
2. **Communication**: one thread block per (gpu, peer, direction, channel); per (sender, receiver,
   channel) the ``cnt`` sequence sent equals the one received.
3. **Deadlock**: a simulation of the kernel (``msccl_kernel.cu``). A thread block runs its steps in order;
   a step fires when its dependency is published, when its incoming connection holds its message and
   when its outgoing connection has room. Firing is monotone (nothing that can fire is ever disabled by
   another firing), so running until nothing fires decides the question: any thread block left unfinished
   is a deadlock in every execution. It runs twice: one message per step (small buffers) and one message
   per chunk (large buffers, where the runtime's ``maxAllowedCount`` is 1).
4. **Races** and 5. **semantics**, for each aliasing the file claims (``inplace``/``outofplace``): symbolic
   execution in the simulation's firing order and a happens-before check of every pair of conflicting
   accesses to one chunk.

The FIFO. A connection's buffer has ``NCCL_STEPS`` = 8 slots. With the Simple protocol every send or
receive primitive of the MSCCL kernel takes ``MSCCL_CHUNKSTEPS`` = ``NCCL_STEPS/2`` = 4 of them:
``msccl_struct.h`` defines ``MSCCL_CHUNKSTEPS (NCCL_STEPS/2)`` and ``MSCCL_SLICESTEPS (NCCL_STEPS/4)``, and
``msccl_kernel.cu`` instantiates ``ProtoSimple<MSCCL_CHUNKSTEPS/MSCCL_SLICESTEPS, MSCCL_SLICESTEPS>``, whose
``genericOp`` always posts all ``SlicePerChunk`` slices. So at most :data:`FIFO_MESSAGES` = 2 messages are
in flight. LL and LL128 use one slot per primitive (``mscclSetupCount`` sets ``chunkSteps = 1`` for them and
``prims_ll.h`` ``waitSend`` waits for ``sendConnHead + 1 <= head + NCCL_STEPS``): 8 messages. (All in
Azure/msccl-executor-nccl.)

Happens-before. Two kinds of edges. *Local* edges (program order in a thread block, a dependency) mean
"the earlier step has finished before the later one starts". *Message* edges (a send to its matching
receive; the receive of message k to the send of message k + FIFO on that connection) only order the
two steps piece by piece, so a receive may write its first chunk while the sender still reads its last.
An access X is ordered before an access Y when a path of edges leads from X to Y and includes at least one
local edge. Steps are simulated in a firing order that respects every edge, so a backward search from Y
may be pruned to steps that fired after X.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field

from colls.collectives import KINDS, Collective, SymbolicError, describe, reduce_values
from colls.msccl import ALGO_ATTRS, ALGO_FIELDS, STEP_ATTRS, Finding, parse, paused_gc
from colls.program import PROTOCOLS, STEP_SEMANTICS, STEP_TYPES, Program
from colls.targets import Target, get_target

ERROR = "error"
WARNING = "warning"

NCCL_STEPS = 8                                   # NCCL's FIFO slots per connection (src/include/device.h)
MSCCL_CHUNKSTEPS = NCCL_STEPS // 2               # msccl_struct.h: slots one Simple primitive takes
FIFO_MESSAGES = NCCL_STEPS // MSCCL_CHUNKSTEPS   # = 2 messages in flight per connection (Simple)
MAX_DEP_TB = 127                                 # msccl_struct.h: int8_t dependentBid[MSCCL_MAX_NUM_STEPS]
MAX_REDUCE_FUSION = 16                           # msccl_struct.h: MSCCL_MAX_REDUCE_FUSION
MAX_OFFSET = 2**15 - 1                           # msccl_struct.h: int16_t srcOffset, dstOffset

BUFFERS = ("i", "o", "s")
BUFFER_NAMES = {"i": "input", "o": "output", "s": "scratch"}
COVERED = frozenset(KINDS)
REPORT_CAP = 10    # findings of one rule (per aliasing) listed before a summary line


def fifo_messages(proto: str | None) -> int:
    """Messages a connection holds before the sender blocks (see the module docstring for the source)."""
    return NCCL_STEPS if proto in ("LL", "LL128") else FIFO_MESSAGES


# Every rule, with what it means. Tests break each one.
RULES = {
    # the loader's text format (found by colls.msccl.parse)
    "xml-declaration": "an <?xml ...?> declaration: the loader fails on it",
    "format-tab": "a tab character: the loader accepts only spaces and line breaks",
    "format-multiline-tag": "an element's attributes span several lines: the loader reads one line",
    "format-single-quote": "a single-quoted value: the loader reads up to the next double quote",
    "format-number": "a number C strtol misreads or that has no meaning (leading 0, '+', hex, < -1)",
    "format-too-many-attrs": "more than 16 attributes on an element: the loader drops the rest",
    "format-long-value": "a name or value over 255 characters: the loader's buffer size",
    "format-text": "text or a processing instruction outside the elements: the loader expects '<'",
    "format-comment": "(warning) a comment: skipped by the executor, nothing in it is read",
    "unknown-element": "(warning) an element the runtime ignores",
    "attr-unknown": "(warning) an attribute of gpu/tb/step the runtime ignores",
    # <algo>
    "algo-attr-missing": "an <algo> attribute the target requires is missing: the file does not load",
    "coll-unknown": "coll is not a collective the target knows (reduce_scatter vs reducescatter)",
    "proto-unknown": "proto is not Simple, LL128 or LL",
    "ngpus-mismatch": "ngpus differs from the number of <gpu> elements",
    "never-selected": "neither inplace nor outofplace is 1: no call ever selects the file",
    "bytes-range": "minBytes > maxBytes (maxBytes != 0) or negative: no size selects the file",
    "limit-channels": "nchannels is not in [1, 32]",
    # <gpu>
    "gpu-attr-missing": "a <gpu> attribute is missing",
    "gpu-id": "gpu ids are not exactly 0..ngpus-1",
    "chunks-mismatch": "i_chunks/o_chunks/s_chunks do not fit coll, ngpus and nchunksperloop",
    "limit-tbs": "more thread blocks on a gpu than the target allows",
    "limit-sms": "more thread blocks on a gpu than SMs: they cannot all be resident, the kernel hangs",
    "limit-tbs-per-channel": "more than 32 thread blocks with a send (or recv) peer on one channel",
    "limit-elements": "a rank's loader would hold 4096 or more XML elements",
    "limit-children": "an element with more than 1024 children: the loader overflows",
    # <tb>
    "tb-attr-missing": "a <tb> attribute is missing",
    "tb-id": "thread block ids are not unique and contiguous from 0",
    "tb-peer": "send/recv is not -1 or another gpu's id",
    "tb-chan": "chan is not in [0, nchannels) or >= 32",
    "limit-steps": "more steps in a thread block than the target allows",
    "conn-duplicate": "two thread blocks of a gpu use one (peer, direction, channel)",
    # <step>
    "step-attr-missing": "a step lacks one of its ten attributes",
    "step-index": "s is not the step's position in its thread block",
    "step-type": "type is not one of s r rcs rrs rrc rrcs cpy re nop",
    "step-buffer": "srcbuf/dstbuf is not i, o or s",
    "step-offset": "an offset outside [0, size) or off + cnt > size of the buffer",
    "step-cnt": "cnt is not in [1, 72) for a real step",
    "step-no-send-peer": "a step sends but its thread block has send=-1",
    "step-no-recv-peer": "a step receives but its thread block has recv=-1",
    "dep-target": "depid/deps name no step of another thread block of this gpu",
    "dep-tb-overflow": "depid > 127: the executor stores it in an int8_t",
    "hasdep-value": "hasdep is not 0 or 1",
    "hasdep-missing": "a step another thread block waits on does not publish progress (hasdep=0 or nop)",
    "nop-no-dep": "a nop without a dependency: it shifts the runtime's step numbering",
    "nop-unanchored": "nops not followed by a real step that carries a dependency",
    "re-fusion": "consecutive re steps the loader fuses have different cnt (the fused step uses the last)",
    # communication and execution
    "conn-mismatch": "the cnt sequence sent differs from the one received on a connection",
    "conn-unmatched": "a send without a matching receive, or a receive without a matching send",
    "deadlock": "thread blocks that can never finish, and what each waits for",
    "race": "two accesses to one chunk from different thread blocks, one a write, not ordered",
    "step-overlap": "a step whose source and destination overlap without being equal",
    "double-count": "a reduction counts an input twice",
    "uninitialised-read": "an output holds data read from a chunk nothing had written",
    "input-write": "a write to the caller's input buffer",
    "postcondition": "an output chunk does not hold what the collective requires",
    "semantics-skipped": "(warning) execution checks not run because of the errors before them",
    "correctness-unchecked": "(warning) a collective the model does not cover: structure checked only",
    "root-assumed": "(warning) the root of a rooted collective was guessed",
}

_SIM_BLOCKERS = frozenset({
    "gpu-attr-missing", "tb-attr-missing", "step-attr-missing", "gpu-id", "tb-id", "tb-peer", "tb-chan",
    "step-type", "step-cnt", "step-no-send-peer", "step-no-recv-peer", "dep-target", "conn-duplicate",
    "conn-mismatch", "conn-unmatched", "ngpus-mismatch", "hasdep-value",
})
_SEM_BLOCKERS = _SIM_BLOCKERS | {"step-buffer", "step-offset", "chunks-mismatch"}

_LENIENT_KIND = {"reduce_scatter": "reducescatter", "reducescatter": "reducescatter"}


@dataclass
class Report:
    """What :func:`verify` found. ``ok`` is True when no finding is an error."""

    source: str
    target: str
    findings: list[Finding]
    facts: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(f.severity == ERROR for f in self.findings)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == ERROR]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity != ERROR]

    def rules(self, severity: str | None = ERROR) -> set[str]:
        """The rule ids found (errors only by default; ``None`` for all)."""
        return {f.rule for f in self.findings if severity is None or f.severity == severity}

    def to_dict(self) -> dict:
        """Plain data for JSON output: source, target, ok, findings (errors first), facts."""
        return {"source": self.source, "target": self.target, "ok": self.ok,
                "errors": len(self.errors), "warnings": len(self.warnings),
                "findings": [f.to_dict() for f in self.findings], "facts": dict(self.facts)}

    def format(self) -> str:
        lines = [str(f) for f in self.findings]
        nerr, nwarn = len(self.errors), len(self.warnings)
        if self.ok:
            modes = ", ".join(self.facts.get("checked", [])) or "no aliasing"
            what = (f"computes {self.facts.get('coll')} correctly ({modes})"
                    if self.facts.get("semantics_checked") else "structure checked")
            extra = f" ({nwarn} warning{'s' if nwarn != 1 else ''})" if nwarn else ""
            lines.append(f"{self.source}: VALID for {self.target}: loads, cannot deadlock, {what}{extra}")
        else:
            lines.append(f"{self.source}: INVALID for {self.target}: {nerr} error{'s' if nerr != 1 else ''}, "
                         f"{nwarn} warning{'s' if nwarn != 1 else ''}")
        return "\n".join(lines)


def verify(program: Program, target: Target | str, *, sms: int | None = None,
           findings: list[Finding] | tuple = (), source: str = "<program>") -> Report:
    """Check ``program`` against every rule and limit of ``target`` and prove (or refute) it correct.

    Parameters
    ----------
    program: the Program (from :func:`colls.msccl.parse` or built in code; ``None`` fields are reported).
    target: a :class:`~colls.targets.Target` or its name (``"exe"``, ``"rccl"``, ``"old"``).
    sms: the GPU's SM count; when given, more thread blocks per gpu than SMs is an error.
    findings: findings already made (the parser's format findings); they lead the report.

    Returns
    -------
    Report: errors first, then warnings, each group in a deterministic order.
    """
    if isinstance(target, str):
        target = get_target(target)
    checker = _Verifier(program, target, sms)
    with paused_gc():
        checker.run()
    everything = list(findings) + checker.findings
    everything.sort(key=lambda f: f.severity != ERROR)   # stable: keeps discovery order inside a group
    return Report(source, target.name, everything, checker.facts)


def verify_text(text: str, source: str, target: Target | str, *, sms: int | None = None) -> Report:
    """Parse MSCCL XML text (any generator's) and verify it. Raises CollsError when it is not MSCCL XML."""
    program, found = parse(text, source)
    return verify(program, target, sms=sms, findings=found, source=source)


# --------------------------------------------------------------------------------------------------

class _Garbage:
    """The value of data read from a chunk nothing had written (``origin`` says where it was read)."""

    __slots__ = ("origin",)

    def __init__(self, origin):
        self.origin = origin


def _chunk_name(storage) -> str:
    buf, index = storage
    return f"{BUFFER_NAMES[buf]} chunk {index}"


def _range_name(storages) -> str:
    buf, first = storages[0]
    return f"{BUFFER_NAMES[buf]} chunks [{first}, {first + len(storages)})"


class _Verifier:
    def __init__(self, program: Program, target: Target, sms: int | None):
        self.p = program
        self.t = target
        self.sms = sms
        self.findings: list[Finding] = []
        self.facts: dict = {}
        self.coll: Collective | None = None
        self.kind: str | None = None
        self.modes: list[bool] = []       # aliasings to check: True = in-place
        self.waited: dict = {}            # (gpu, tb, step) -> first waiter (gpu, tb, step)

    # --- reporting ----------------------------------------------------------------------------------
    def add(self, rule, message, gpu=None, tb=None, step=None, line=None, severity=ERROR):
        self.findings.append(Finding(rule, message, gpu, tb, step, line, severity))

    def at(self, rule, message, gpu, tb, step_index=None, severity=ERROR):
        """A finding located at a thread block (and step) of ``gpu`` (objects from the Program)."""
        step_obj = tb.steps[step_index] if step_index is not None and step_index < len(tb.steps) else None
        line = step_obj.line if step_obj is not None else tb.line
        self.add(rule, message, gpu.id, tb.id, step_index, line, severity)

    def has(self, rules) -> list[str]:
        return sorted({f.rule for f in self.findings if f.severity == ERROR and f.rule in rules})

    # --- driver -------------------------------------------------------------------------------------
    def run(self):
        p, t = self.p, self.t
        self.check_algo()
        self.check_gpus()
        self.check_threadblocks()
        self.check_hasdep()
        self.check_connections()
        self.facts.update({
            "target": t.name, "coll": p.coll, "kind": self.kind, "ngpus": p.ngpus,
            "nchannels": p.nchannels, "nchunksperloop": p.nchunksperloop, "proto": p.proto,
            "chunk_factor": self.coll.chunks if self.coll else None,
            "max_steps_per_tb": p.max_steps(), "max_tbs_per_gpu": p.max_tbs(),
            "max_elements_per_rank": max((1 + len(p.gpus) + len(g.tbs) + sum(len(b.steps) for b in g.tbs)
                                          for g in p.gpus), default=1 + len(p.gpus)),
            "fifo_messages": fifo_messages(p.proto),
            "checked": [], "deadlock_free": None, "semantics_checked": False,
        })
        blockers = self.has(_SIM_BLOCKERS)
        if blockers:
            self.add("semantics-skipped", "deadlock, race and correctness checks were not run: they need "
                     f"the structure these errors break ({', '.join(blockers)})", severity=WARNING)
            return
        self.build_graph()
        if not self.simulate():
            self.add("semantics-skipped", "race and correctness checks were not run: the program deadlocks",
                     severity=WARNING)
            return
        if self.kind not in COVERED:
            self.add("correctness-unchecked", f"coll={p.coll!r}: the model covers {', '.join(KINDS)}; only the "
                     "structure, the communication and deadlock freedom were checked, not races or the result",
                     severity=WARNING)
            return
        blockers = self.has(_SEM_BLOCKERS)
        if blockers or self.coll is None:
            why = ", ".join(blockers) if blockers else "the collective's shape is unknown"
            self.add("semantics-skipped", f"race and correctness checks were not run ({why})", severity=WARNING)
            return
        if not self.modes:
            self.add("semantics-skipped", "race and correctness checks were not run: the file claims neither "
                     "in-place nor out-of-place", severity=WARNING)
            return
        for inplace in self.modes:
            self.check_execution(inplace)
        self.facts["checked"] = ["in-place" if m else "out-of-place" for m in self.modes]
        self.facts["semantics_checked"] = True

    # --- 1. contract: <algo> -----------------------------------------------------------------------
    def check_algo(self):
        p, t = self.p, self.t
        values = {attr: getattr(p, ALGO_FIELDS.get(attr, attr)) for attr in ALGO_ATTRS}
        hints = {"outofplace": '"1" (or "0")', "minBytes": '"0"', "maxBytes": '"0" (no upper limit)',
                 "inplace": '"0" (or "1")'}
        for attr in t.required_algo_attrs:
            if values.get(attr) is None:
                hint = f"; add {attr}={hints[attr]}" if attr in hints else ""
                self.add("algo-attr-missing", f"Attribute {attr} of node algo not found: the {t.name} runtime "
                         f"will not load this file{hint}")
        if p.coll is not None:
            kind = t.kind_of(p.coll)
            if kind is None:
                if p.coll == "reduce_scatter" and "reducescatter" in t.colls:
                    hint = f'; {t.name} spells it coll="reducescatter"'
                elif p.coll == "reducescatter" and "reduce_scatter" in t.colls:
                    hint = f'; {t.name} spells it coll="reduce_scatter"'
                else:
                    hint = f"; it knows {', '.join(t.colls)}"
                self.add("coll-unknown", f"coll=\"{p.coll}\" is not a collective the {t.name} runtime knows, so "
                         f"it never uses this file{hint}")
                kind = _LENIENT_KIND.get(p.coll, p.coll)
            self.kind = kind
        if p.proto is not None and p.proto not in PROTOCOLS:
            self.add("proto-unknown", f"proto=\"{p.proto}\" is not one of {', '.join(PROTOCOLS)}: the runtime "
                     "rejects the file (\"MSCCL: protocol ... is not supported\")")
        if p.nchannels is not None and not 1 <= p.nchannels <= t.max_channels:
            self.add("limit-channels", f"nchannels={p.nchannels}: must be between 1 and {t.max_channels}")
        if p.ngpus is not None and p.ngpus != len(p.gpus):
            self.add("ngpus-mismatch", f"ngpus={p.ngpus} but the file has {len(p.gpus)} <gpu> elements")
        if t.max_children is not None and len(p.gpus) > t.max_children:
            self.add("limit-children", f"<algo> has {len(p.gpus)} <gpu> children; the loader holds at most "
                     f"{t.max_children} children per element (MSCCL_MAX_SUBS) and overflows")
        lo, hi = p.min_bytes, p.max_bytes
        if lo is not None and lo < 0:
            self.add("bytes-range", f"minBytes={lo} is negative")
        if lo is not None and hi is not None and hi != 0:
            empty = lo >= hi if t.name == "old" else lo > hi
            if empty or hi < 0:
                self.add("bytes-range", f"minBytes={lo}, maxBytes={hi}: no message size selects this file "
                         "(maxBytes=0 means no upper limit)")
        if t.name == "old" or p.inplace is None or p.outofplace is None:
            # OLD reads only inplace: 1 = in-place calls, 0 = out-of-place calls. A file for EXE that lacks
            # one of the two (already an error) is checked the same way, to say what else is wrong.
            if p.inplace is not None:
                self.modes = [bool(p.inplace)]
            elif p.outofplace is not None:
                self.modes = [not p.outofplace]
            else:
                self.modes = [True, False]
        else:
            self.modes = [m for m, flag in ((True, p.inplace), (False, p.outofplace)) if flag]
            if p.inplace is not None and p.outofplace is not None and not p.inplace and not p.outofplace:
                self.add("never-selected", "inplace=\"0\" and outofplace=\"0\": neither an in-place nor an "
                         "out-of-place call selects this file")

    # --- 1. contract: <gpu> -------------------------------------------------------------------------
    def check_gpus(self):
        p = self.p
        n = p.ngpus if p.ngpus is not None else len(p.gpus)
        self.nranks = n
        seen: dict[int, int] = {}
        for g in p.gpus:
            missing = [a for a in ("id", "i_chunks", "o_chunks", "s_chunks") if getattr(g, a) is None]
            if missing:
                self.add("gpu-attr-missing", "Attribute " + ", ".join(missing) + " of node gpu not found: "
                         "the runtime will not load this file", g.id, line=g.line)
            if g.id is None:
                continue
            if not 0 <= g.id < n:
                self.add("gpu-id", f"gpu id {g.id} is not a rank of {n} (ids must be 0..{n - 1})", g.id, line=g.line)
            elif g.id in seen:
                self.add("gpu-id", f"gpu id {g.id} appears twice", g.id, line=g.line)
            seen[g.id] = 1
            if g.s_chunks is not None and g.s_chunks < 0:
                self.add("chunks-mismatch", f"s_chunks={g.s_chunks} is negative (\"nScratchChunks must be not "
                         "negative\")", g.id, line=g.line)
        absent = [r for r in range(n) if r not in seen]
        if absent and len(p.gpus) == n:
            self.add("gpu-id", f"no <gpu> element for rank{'s' if len(absent) > 1 else ''} "
                     f"{', '.join(map(str, absent[:8]))}")
        self.gpu_by_id = {g.id: g for g in p.gpus if g.id is not None}
        self.infer_collective()

    def infer_collective(self):
        p = self.p
        kind, n, ncpl = self.kind, p.ngpus, p.nchunksperloop
        if kind not in COVERED or n is None or ncpl is None or n < 2 or ncpl < 1 or n != len(p.gpus):
            return
        if kind in ("allgather", "reducescatter", "alltoall"):
            if ncpl % n:
                self.add("chunks-mismatch", f"nchunksperloop={ncpl} is not a multiple of ngpus={n}, as a {kind} "
                         "needs (nchunksperloop = ngpus x chunks per rank)")
                return
            c = ncpl // n
        else:
            c = ncpl
        root = self.infer_root(kind, n) if kind in ("broadcast", "reduce") else 0
        coll = Collective(kind, n, c, root)
        for g in p.gpus:
            if g.id is None or g.i_chunks is None or g.o_chunks is None:
                continue
            if (g.i_chunks, g.o_chunks) != (coll.in_chunks, coll.out_chunks):
                self.add("chunks-mismatch", f"i_chunks={g.i_chunks}, o_chunks={g.o_chunks}; a {kind} of {n} ranks "
                         f"with nchunksperloop={ncpl} has {coll.in_chunks} input and {coll.out_chunks} output "
                         f"chunks per rank (chunk factor {c})", g.id, line=g.line)
        self.coll = coll

    def infer_root(self, kind: str, n: int) -> int:
        raw = self.p.extra.get("root")
        if raw is not None and str(raw).lstrip("-").isdigit() and 0 <= int(raw) < n:
            return int(raw)
        # broadcast: the root receives nothing; reduce: the root sends nothing
        test = (lambda s: STEP_SEMANTICS.get(s.type, (False,) * 5)[1]) if kind == "broadcast" else \
               (lambda s: STEP_SEMANTICS.get(s.type, (False,) * 5)[0])
        candidates = [g.id for g in self.p.gpus if g.id is not None
                      and not any(test(s) for tb in g.tbs for s in tb.steps)]
        if len(candidates) == 1 and 0 <= candidates[0] < n:
            return candidates[0]
        self.add("root-assumed", f"could not tell the root of this {kind} from the file (no root attribute, "
                 f"{len(candidates)} candidate ranks); checking with root 0", severity=WARNING)
        return 0

    def bufsize(self, g, buf: str) -> int | None:
        declared = {"i": g.i_chunks, "o": g.o_chunks, "s": g.s_chunks}[buf]
        if self.coll is not None and buf != "s":
            real = self.coll.in_chunks if buf == "i" else self.coll.out_chunks
            return real if declared is None else min(declared, real)
        return declared

    # --- 1. contract: <tb> and <step> ------------------------------------------------------------------
    def check_threadblocks(self):
        p, t = self.p, self.t
        n = self.nranks
        self.tb_by_id: dict[int, dict[int, object]] = {}
        for g in p.gpus:
            ids: dict[int, object] = {}
            for tb in g.tbs:
                missing = [a for a in ("id", "send", "recv", "chan") if getattr(tb, a) is None]
                if missing:
                    self.at("tb-attr-missing", "Attribute " + ", ".join(missing) + " of node tb not found: the "
                            "runtime will not load this file", g, tb)
                if tb.id is None:
                    continue
                if tb.id < 0:
                    self.at("tb-id", f"thread block id {tb.id} is negative", g, tb)
                elif tb.id in ids:
                    self.at("tb-id", f"thread block id {tb.id} appears twice on gpu {g.id} (\"duplicate thread "
                            "block id\")", g, tb)
                else:
                    ids[tb.id] = tb
            self.tb_by_id[g.id] = ids
            gaps = [i for i in range(max(ids, default=-1) + 1) if i not in ids]
            if gaps:
                self.add("tb-id", f"thread block {gaps[0]} is missing: ids must be contiguous from 0",
                         g.id, line=g.line)
            self.check_gpu_limits(g)
            for tb in g.tbs:
                for peer, what in ((tb.send, "send"), (tb.recv, "recv")):
                    if peer is None or peer == -1:
                        continue
                    if peer == g.id:
                        self.at("tb-peer", f"{what}={peer} is the gpu itself; a peer must be another rank", g, tb)
                    elif not 0 <= peer < n:
                        self.at("tb-peer", f"{what}={peer} is not a rank (0..{n - 1}) or -1", g, tb)
                if tb.chan is not None:
                    limit = min(t.max_channels, p.nchannels) if p.nchannels is not None else t.max_channels
                    if not 0 <= tb.chan < limit:
                        why = (f"nchannels={p.nchannels}" if p.nchannels is not None and p.nchannels <= t.max_channels
                               else f"{t.name} allows {t.max_channels} channels; the executor's loader check is "
                               "off by one and chan=32 crashes it")
                        self.at("tb-chan", f"chan={tb.chan} is not in [0, {limit}) ({why})", g, tb)
                if len(tb.steps) > t.max_steps:
                    self.at("limit-steps", f"{len(tb.steps)} steps; {t.name} allows {t.max_steps} per thread block "
                            "(MSCCL_MAX_NUM_STEPS)", g, tb)
                if t.max_children is not None and len(tb.steps) > t.max_children:
                    self.at("limit-children", f"{len(tb.steps)} <step> children; the loader holds at most "
                            f"{t.max_children} per element and overflows", g, tb)
                self.check_steps(g, tb)

    def check_gpu_limits(self, g):
        t, p = self.t, self.p
        ntb = len(g.tbs)
        if ntb > t.max_tbs:
            self.add("limit-tbs", f"{ntb} thread blocks; {t.name} allows {t.max_tbs} per gpu", g.id, line=g.line)
        if self.sms is not None and ntb > self.sms:
            self.add("limit-sms", f"{ntb} thread blocks but the GPU has {self.sms} SMs: all thread blocks must be "
                     "resident at once, or the ones waiting for an SM hang the others", g.id, line=g.line)
        if t.max_children is not None and ntb > t.max_children:
            self.add("limit-children", f"<gpu> has {ntb} <tb> children; the loader holds at most {t.max_children} "
                     "per element and overflows", g.id, line=g.line)
        if t.max_tbs_per_channel is not None:
            for what in ("send", "recv"):
                per_chan: dict = defaultdict(int)
                for tb in g.tbs:
                    if getattr(tb, what) is not None and getattr(tb, what) >= 0 and tb.chan is not None:
                        per_chan[tb.chan] += 1
                for chan, count in sorted(per_chan.items()):
                    if count > t.max_tbs_per_channel:
                        self.add("limit-tbs-per-channel", f"{count} thread blocks with a {what} peer on channel "
                                 f"{chan}; at most {t.max_tbs_per_channel} (\"too many {what}s per channel\")",
                                 g.id, line=g.line)
        if t.max_elements is not None:
            elements = 1 + len(p.gpus) + ntb + sum(len(tb.steps) for tb in g.tbs)
            if elements >= t.max_elements:
                self.add("limit-elements", f"rank {g.id}'s loader reads {elements} elements (1 algo + {len(p.gpus)} "
                         f"gpu + its thread blocks and steps); it stops at {t.max_elements} (MSCCL_MAX_NODES) "
                         "before reading the next tag, closing tags included, so at most "
                         f"{t.max_elements - 1} fit", g.id, line=g.line)

    def check_steps(self, g, tb):
        t = self.t
        peers_of = self.tb_by_id.get(g.id, {})
        fuse = None            # ((dstbuf, dstoff, srcbuf), cnt, first index, size) of an open re fusion
        nop_run: list[int] = []
        sizes = {buf: self.bufsize(g, buf) for buf in BUFFERS}
        for i, st in enumerate(tb.steps):
            if None in (st.s, st.type, st.srcbuf, st.srcoff, st.dstbuf, st.dstoff, st.cnt, st.depid, st.deps,
                        st.hasdep):
                missing = [a for a in STEP_ATTRS if getattr(st, a) is None]
                self.at("step-attr-missing", "Attribute " + ", ".join(missing) + " of node step not found: the "
                        "runtime will not load this file (all ten attributes are needed, nop included)", g, tb, i)
            if st.s != i and st.s is not None:
                self.at("step-index", f"s={st.s} but it is step {i} of its thread block (s counts every step, "
                        "nops included, and deps refer to that numbering)", g, tb, i)
            for name in ("srcbuf", "dstbuf"):
                value = getattr(st, name)
                if value is not None and value not in BUFFERS:
                    self.at("step-buffer", f"{name}=\"{value}\" is not i, o or s (the loader parses it on every "
                            "step, nop included)", g, tb, i)
            if st.type is None:
                continue
            if st.type not in STEP_TYPES:
                self.at("step-type", f"type=\"{st.type}\" is not one of {' '.join(STEP_TYPES)}", g, tb, i)
                continue
            sends, receives, reads, writes, _ = STEP_SEMANTICS[st.type]
            nop = st.type == "nop"
            if sends and tb.send is not None and tb.send < 0:
                self.at("step-no-send-peer", f"a {st.type} step sends but thread block {tb.id} has send=-1 "
                        "(\"there is a send ... without a sendPeer\")", g, tb, i)
            if receives and tb.recv is not None and tb.recv < 0:
                self.at("step-no-recv-peer", f"a {st.type} step receives but thread block {tb.id} has recv=-1 "
                        "(\"there is a recv ... without a recvPeer\")", g, tb, i)
            cnt_ok = st.cnt is not None and 1 <= st.cnt < t.max_cnt
            if not nop and st.cnt is not None and not cnt_ok:
                self.at("step-cnt", f"cnt={st.cnt}: a {st.type} step needs 1 <= cnt < {t.max_cnt}", g, tb, i)
            for used, buf, off, role in ((reads, st.srcbuf, st.srcoff, "source"),
                                         (writes, st.dstbuf, st.dstoff, "destination")):
                if not used or buf not in BUFFERS or off is None:
                    continue
                size = sizes[buf]
                if size is None:
                    continue
                count = st.cnt if cnt_ok else 1
                if not 0 <= off < size or off + count > size:
                    self.at("step-offset", f"{role} {BUFFER_NAMES[buf]} chunks [{off}, {off + count}) are not "
                            f"inside the {BUFFER_NAMES[buf]} buffer of {size} chunks", g, tb, i)
                elif off > MAX_OFFSET:
                    self.at("step-offset", f"{role} offset {off}: the executor stores offsets in an int16_t "
                            f"(mscclTransmission in msccl_struct.h), so at most {MAX_OFFSET}", g, tb, i)
            # dependencies
            if st.depid is not None and st.deps is not None:
                if st.depid >= 0:
                    target = peers_of.get(st.depid)
                    if st.depid == tb.id:
                        self.at("dep-target", f"depid={st.depid} is its own thread block: a step waits only on "
                                "other thread blocks", g, tb, i)
                    elif target is None:
                        self.at("dep-target", f"depid={st.depid}: gpu {g.id} has no thread block {st.depid}",
                                g, tb, i)
                    elif not 0 <= st.deps < len(target.steps):
                        self.at("dep-target", f"deps={st.deps}: thread block {st.depid} has steps 0.."
                                f"{len(target.steps) - 1}; the wait never ends", g, tb, i)
                    else:
                        self.waited.setdefault((g.id, st.depid, st.deps), (g.id, tb.id, i))
                    if st.depid > MAX_DEP_TB:
                        self.at("dep-tb-overflow", f"depid={st.depid}: the executor stores it in an int8_t "
                                f"(dependentBid in msccl_struct.h), so anything above {MAX_DEP_TB} waits on the "
                                "wrong thread block", g, tb, i)
                elif st.depid < -1:
                    self.at("dep-target", f"depid={st.depid}: must be -1 or a thread block id", g, tb, i)
            if not nop and st.hasdep is not None and st.hasdep not in (0, 1):
                self.at("hasdep-value", f"hasdep={st.hasdep}: must be 0 or 1 (\"hasDependence needs to be 0 or 1\")",
                        g, tb, i)
            # nops: each carries one dependency, the run ends in a real step that carries one too
            if nop:
                if st.depid is not None and st.depid < 0:
                    self.at("nop-no-dep", "a nop without a dependency: the kernel counts one step per "
                            "dependency, so every later step of this thread block is numbered one lower than its "
                            "s and the deps/hasdep that name them go wrong", g, tb, i)
                nop_run.append(i)
            else:
                if nop_run and st.depid is not None and st.depid < 0:
                    self.at("nop-unanchored", f"steps {nop_run[0]}..{i - 1} are nops carrying dependencies, but "
                            "the real step after them has none: the loader rejects the file (\"the last ... must "
                            "be a part of the first immediate instruction\")", g, tb, i)
                nop_run = []
            # re fusion (msccl_parser.cc): consecutive re with the same dst and src buffer and no dependency
            if st.type == "re":
                key = (st.dstbuf, st.dstoff, st.srcbuf)
                if fuse is not None and fuse[0] == key and st.depid is not None and st.depid < 0:
                    if st.cnt != fuse[1]:
                        self.at("re-fusion", f"the loader fuses this re with step {fuse[2]} (same destination, "
                                "no dependency) and the fused step uses the last cnt for all of them: "
                                f"cnt={st.cnt} here, cnt={fuse[1]} in step {fuse[2]}", g, tb, i)
                    fuse = (key, fuse[1], fuse[2], fuse[3] + 1)
                else:
                    fuse = (key, st.cnt, i, 1)
                if st.hasdep == 1 or fuse[3] == MAX_REDUCE_FUSION:
                    fuse = None
            elif not nop:
                fuse = None
        if nop_run:
            self.at("nop-unanchored", f"steps {nop_run[0]}..{len(tb.steps) - 1} are nops at the end of the thread "
                    "block: no real step follows to wait for their dependencies, so they are dropped", g, tb,
                    nop_run[0])

    def check_hasdep(self):
        for (gid, tbid, k), (_, wtb, ws) in sorted(self.waited.items()):
            g = self.gpu_by_id.get(gid)
            tb = self.tb_by_id.get(gid, {}).get(tbid)
            if g is None or tb is None:
                continue
            st = tb.steps[k]
            if st.type == "nop":
                self.at("hasdep-missing", f"tb {wtb} step {ws} waits on this step, a nop, which never publishes "
                        "progress; wait on the real step after it", g, tb, k)
            elif st.hasdep is not None and st.hasdep != 1:
                self.at("hasdep-missing", f"tb {wtb} step {ws} waits on this step, but it has hasdep=0: a thread "
                        "block publishes progress only after steps marked hasdep=\"1\"", g, tb, k)

    # --- 2. communication -----------------------------------------------------------------------------
    def check_connections(self):
        p = self.p
        n = self.nranks
        self.connections = {}
        if self.has({"gpu-id", "ngpus-mismatch", "gpu-attr-missing"}):
            return                       # without a clean set of ranks, peers cannot be matched
        senders: dict = defaultdict(list)      # (src gpu, dst gpu, chan) -> [(gpu, tb)]
        receivers: dict = defaultdict(list)
        for g in p.gpus:
            if g.id is None:
                continue
            for tb in g.tbs:
                if tb.chan is None or tb.id is None:
                    continue
                if tb.send is not None and tb.send >= 0 and tb.send != g.id and tb.send < n:
                    senders[(g.id, tb.send, tb.chan)].append((g, tb))
                if tb.recv is not None and tb.recv >= 0 and tb.recv != g.id and tb.recv < n:
                    receivers[(tb.recv, g.id, tb.chan)].append((g, tb))
        for table, what in ((senders, "send to"), (receivers, "receive from")):
            for key, users in sorted(table.items()):
                if len(users) > 1:
                    g = users[0][0]
                    peer = key[1] if what == "send to" else key[0]
                    ids = ", ".join(str(tb.id) for _, tb in users)
                    self.at("conn-duplicate", f"thread blocks {ids} all {what} gpu {peer} on channel {key[2]}: at "
                            "most one thread block per (peer, direction, channel), or messages mix", g, users[1][1])
        for key in sorted(set(senders) | set(receivers)):
            s_users, r_users = senders.get(key, []), receivers.get(key, [])
            if len(s_users) > 1 or len(r_users) > 1:
                continue
            src, dst, chan = key
            sender = s_users[0] if s_users else None
            receiver = r_users[0] if r_users else None
            self.connections[key] = (sender, receiver)
            sent = [(i, st.cnt) for i, st in enumerate(sender[1].steps) if STEP_SEMANTICS.get(st.type, (0,))[0]] \
                if sender else []
            got = [(i, st.cnt) for i, st in enumerate(receiver[1].steps) if STEP_SEMANTICS.get(st.type, (0, 0))[1]] \
                if receiver else []
            for k, ((si, sc), (ri, rc)) in enumerate(zip(sent, got)):
                if sc != rc:
                    self.at("conn-mismatch", f"message #{k + 1} from gpu {src} to gpu {dst} on channel {chan}: this "
                            f"step sends cnt={sc}, but gpu {dst} tb {receiver[1].id} step {ri} receives cnt={rc}",
                            sender[0], sender[1], si)
                    break
            if len(sent) > len(got):
                si = sent[len(got)][0]
                if receiver is None:
                    why = f"gpu {dst} has no thread block receiving from gpu {src} on channel {chan}"
                else:
                    why = f"gpu {dst} tb {receiver[1].id} receives only {len(got)} from gpu {src} on channel {chan}"
                self.at("conn-unmatched", f"sends message #{len(got) + 1} to gpu {dst} on channel {chan}, but {why}; "
                        f"{len(sent) - len(got)} message(s) are never received", sender[0], sender[1], si)
            elif len(got) > len(sent):
                ri = got[len(sent)][0]
                if sender is None:
                    why = f"gpu {src} has no thread block sending to gpu {dst} on channel {chan}"
                else:
                    why = f"gpu {src} tb {sender[1].id} sends only {len(sent)} to gpu {dst} on channel {chan}"
                self.at("conn-unmatched", f"receives message #{len(sent) + 1} from gpu {src} on channel {chan}, but "
                        f"{why}; the receive waits forever", receiver[0], receiver[1], ri)

    # --- 3. the execution graph and the simulation -------------------------------------------------
    def build_graph(self):
        """Flat arrays over all steps (node ids), thread blocks and connections, for fast simulation."""
        p = self.p
        self.tbs = []                       # ti -> (gpu, tb)
        tb_index = {}
        for g in sorted((g for g in p.gpus), key=lambda g: g.id):
            for tbid in sorted(self.tb_by_id[g.id]):
                tb_index[(g.id, tbid)] = len(self.tbs)
                self.tbs.append((g, self.tb_by_id[g.id][tbid]))
        T = len(self.tbs)
        self.tb_start, self.tb_len = [0] * T, [0] * T
        self.in_conn, self.out_conn = [-1] * T, [-1] * T
        n_ti, n_idx, n_step, n_send, n_recv, n_cnt, n_dep_ti, n_deps, n_pub = ([] for _ in range(9))
        for ti, (g, tb) in enumerate(self.tbs):
            self.tb_start[ti] = len(n_ti)
            self.tb_len[ti] = len(tb.steps)
            for i, st in enumerate(tb.steps):
                sem = STEP_SEMANTICS[st.type]
                n_ti.append(ti)
                n_idx.append(i)
                n_step.append(st)
                n_send.append(sem[0])
                n_recv.append(sem[1])
                n_cnt.append(st.cnt)
                n_dep_ti.append(tb_index[(g.id, st.depid)] if st.depid >= 0 else -1)
                n_deps.append(st.deps)
                n_pub.append(st.hasdep == 1 and st.type != "nop")
        self.n_ti, self.n_idx, self.n_step, self.n_send, self.n_recv = n_ti, n_idx, n_step, n_send, n_recv
        self.n_cnt, self.n_dep_ti, self.n_deps, self.n_pub = n_cnt, n_dep_ti, n_deps, n_pub
        self.conn_keys, self.conn_sender, self.conn_receiver = [], [], []
        for key, (sender, receiver) in self.connections.items():
            c = len(self.conn_keys)
            self.conn_keys.append(key)
            s_ti = tb_index[(sender[0].id, sender[1].id)] if sender else -1
            r_ti = tb_index[(receiver[0].id, receiver[1].id)] if receiver else -1
            self.conn_sender.append(s_ti)
            self.conn_receiver.append(r_ti)
            if s_ti >= 0:
                self.out_conn[s_ti] = c
            if r_ti >= 0:
                self.in_conn[r_ti] = c

    def run_machine(self, cap: int, per_chunk: bool):
        """Fire steps until nothing can fire. ``per_chunk``: every chunk of a transfer is its own message.

        Returns the state: completed steps in firing order, and per thread block / connection counters.
        """
        T, C = len(self.tbs), len(self.conn_keys)
        tb_start, tb_len, in_conn, out_conn = self.tb_start, self.tb_len, self.in_conn, self.out_conn
        n_send, n_recv, n_cnt, n_dep_ti, n_deps, n_pub, n_idx = (self.n_send, self.n_recv, self.n_cnt,
                                                                 self.n_dep_ti, self.n_deps, self.n_pub, self.n_idx)
        conn_sender, conn_receiver = self.conn_sender, self.conn_receiver
        pc, sub, published = [0] * T, [0] * T, [-1] * T
        sent, consumed = [0] * C, [0] * C
        sent_nodes = [[] for _ in range(C)]
        recv_nodes = [[] for _ in range(C)]
        waiters = [[] for _ in range(T)]
        order = []
        queue = deque(range(T))
        inq = [True] * T
        while queue:
            ti = queue.popleft()
            inq[ti] = False
            start, length, p, k = tb_start[ti], tb_len[ti], pc[ti], sub[ti]
            while p < length:
                n = start + p
                if k == 0:
                    dt = n_dep_ti[n]
                    if dt >= 0 and published[dt] < n_deps[n]:
                        waiters[dt].append(ti)
                        break
                r, s = n_recv[n], n_send[n]
                if r:
                    c = in_conn[ti]
                    if sent[c] <= consumed[c]:
                        break
                if s:
                    c2 = out_conn[ti]
                    if sent[c2] - consumed[c2] >= cap:
                        break
                if r:
                    consumed[c] += 1
                    if k == 0:
                        recv_nodes[c].append(n)
                    w = conn_sender[c]
                    if not inq[w]:
                        inq[w] = True
                        queue.append(w)
                if s:
                    sent[c2] += 1
                    if k == 0:
                        sent_nodes[c2].append(n)
                    w = conn_receiver[c2]
                    if w >= 0 and not inq[w]:
                        inq[w] = True
                        queue.append(w)
                k += 1
                if per_chunk and (r or s) and k < n_cnt[n]:
                    continue
                k = 0
                p += 1
                order.append(n)
                if n_pub[n]:
                    published[ti] = n_idx[n]
                    for w in waiters[ti]:
                        if not inq[w]:
                            inq[w] = True
                            queue.append(w)
                    waiters[ti] = []
            pc[ti], sub[ti] = p, k
        return order, pc, sub, published, sent, consumed, sent_nodes, recv_nodes

    def simulate(self) -> bool:
        """Decide deadlock freedom (both message sizes); keep the firing order for the later checks."""
        cap = fifo_messages(self.p.proto)
        state = self.run_machine(cap, per_chunk=False)
        ok = self.report_deadlock(state, cap, "")
        if ok and any(self.n_cnt[n] > 1 and (self.n_send[n] or self.n_recv[n]) for n in range(len(self.n_ti))):
            big = self.run_machine(cap, per_chunk=True)
            self.report_deadlock(big, cap, " when buffers are large (the runtime then sends each chunk of a "
                                 "step as its own message: maxAllowedCount = 1 in mscclSetupCount)")
        self.facts["deadlock_free"] = not self.has({"deadlock"})
        if ok:
            order, _, _, _, _, _, sent_nodes, recv_nodes = state
            self.build_happens_before(order, sent_nodes, recv_nodes, cap)
        return ok

    def build_happens_before(self, order, sent_nodes, recv_nodes, cap: int):
        """Each step's predecessors: program order and dependency (local), matching send and FIFO room
        (message); and its position in the firing order, which respects all of them."""
        N = len(self.n_ti)
        self.order = order
        self.pos = [0] * N
        for i, n in enumerate(order):
            self.pos[n] = i
        self.dep_pred, self.msg_pred, self.cap_pred = [-1] * N, [-1] * N, [-1] * N
        publisher = []          # ti -> [the first step at or after i that publishes progress]
        for ti in range(len(self.tbs)):
            start, length = self.tb_start[ti], self.tb_len[ti]
            nxt, row = -1, [-1] * length
            for i in range(length - 1, -1, -1):
                if self.n_pub[start + i]:
                    nxt = start + i
                row[i] = nxt
            publisher.append(row)
        for n in range(N):
            dt = self.n_dep_ti[n]
            if dt >= 0:
                self.dep_pred[n] = publisher[dt][self.n_deps[n]]
        for c in range(len(self.conn_keys)):
            sn, rn = sent_nodes[c], recv_nodes[c]
            for k, r in enumerate(rn):
                self.msg_pred[r] = sn[k]
            for k in range(cap, len(sn)):
                self.cap_pred[sn[k]] = rn[k - cap]

    def describe_node(self, n: int) -> str:
        g, tb = self.tbs[self.n_ti[n]]
        return f"gpu {g.id} tb {tb.id} step {self.n_idx[n]}"

    def report_deadlock(self, state, cap: int, when: str) -> bool:
        order, pc, sub, published, sent, consumed, _, _ = state
        stuck = [ti for ti in range(len(self.tbs)) if pc[ti] < self.tb_len[ti]]
        if not stuck:
            return True
        waits_for, reasons = {}, {}
        for ti in stuck:
            g, tb = self.tbs[ti]
            n = self.tb_start[ti] + pc[ti]
            st = self.n_step[n]
            dt = self.n_dep_ti[n]
            if sub[ti] == 0 and dt >= 0 and published[dt] < self.n_deps[n]:
                dg, dtb = self.tbs[dt]
                if pc[dt] > self.n_deps[n]:
                    state_text = (f"which has finished it, but none of its steps from {self.n_deps[n]} on that has "
                                  "run so far publishes progress (hasdep=1)")
                elif pc[dt] >= self.tb_len[dt]:
                    state_text = "which has finished"
                else:
                    state_text = f"which is itself stuck at step {pc[dt]}"
                reasons[ti] = f"waits for tb {dtb.id} step {self.n_deps[n]} ({state_text})"
                waits_for[ti] = dt
            elif self.n_recv[n] and sent[self.in_conn[ti]] <= consumed[self.in_conn[ti]]:
                c = self.in_conn[ti]
                src, _, chan = self.conn_keys[c]
                w = self.conn_sender[c]
                peer = self.tbs[w][1]
                where = (f"tb {peer.id} there is stuck at step {pc[w]}" if pc[w] < self.tb_len[w]
                         else f"tb {peer.id} there has finished")
                reasons[ti] = (f"{st.type} waits to receive message #{consumed[c] + 1} from gpu {src} on channel "
                               f"{chan}, which gpu {src} has not sent ({where})")
                waits_for[ti] = w
            else:
                c = self.out_conn[ti]
                _, dst, chan = self.conn_keys[c]
                w = self.conn_receiver[c]
                peer = self.tbs[w][1]
                reasons[ti] = (f"{st.type} waits for room to send to gpu {dst} on channel {chan}: {cap} messages sent "
                               f"and not yet received fill the FIFO; the receiver, tb {peer.id} there, is stuck at "
                               f"step {pc[w]}")
                waits_for[ti] = w
        # a wait cycle makes the best explanation: follow "waits for" from the first stuck block
        cycle, seen, ti = [], {}, stuck[0]
        while ti in waits_for and ti not in seen:
            seen[ti] = len(cycle)
            cycle.append(ti)
            ti = waits_for[ti]
        if ti in seen:
            loop = cycle[seen[ti]:]
            text = " -> ".join(self.describe_node(self.tb_start[x] + pc[x]) for x in loop + [loop[0]])
            g, tb = self.tbs[loop[0]]
            self.at("deadlock", f"wait cycle{when}: {text}", g, tb, pc[loop[0]])
        for ti in stuck[:REPORT_CAP]:
            g, tb = self.tbs[ti]
            self.at("deadlock", f"never finishes{when}: {reasons[ti]}", g, tb, pc[ti])
        if len(stuck) > REPORT_CAP:
            self.add("deadlock", f"{len(stuck) - REPORT_CAP} more thread blocks never finish{when}")
        return False

    # --- 4./5. races and semantics, for one aliasing ---------------------------------------------------
    def check_execution(self, inplace: bool):
        """Symbolic execution in firing order (values: frozensets of (rank, input index) atoms), then the
        race check over the accesses it recorded, then the postcondition."""
        coll = self.coll
        label = "in-place" if inplace else "out-of-place"
        alias = coll.alias
        state = {g.id: coll.initial_state(g.id, inplace, scratch=g.s_chunks) for g in self.p.gpus}
        payloads = [deque() for _ in self.conn_keys]
        accesses: dict = defaultdict(list)      # (gpu, storage) -> [(node, is_write)] in firing order
        counts: dict = defaultdict(int)
        done: set = set()

        def report(rule, message, n):
            """At most one finding per (rule, step), and REPORT_CAP per rule."""
            if (rule, n) in done:
                return
            done.add((rule, n))
            counts[rule] += 1
            if counts[rule] <= REPORT_CAP:
                g, tb = self.tbs[self.n_ti[n]]
                self.at(rule, f"{label}: {message}", g, tb, self.n_idx[n])

        def load(mem, storage, n):
            value = mem.get(storage)
            return _Garbage((n, storage)) if value is None else value

        def combine(a, b, n):
            if isinstance(a, _Garbage):
                return a
            if isinstance(b, _Garbage):
                return b
            try:
                return reduce_values(a, b)
            except SymbolicError as e:
                report("double-count", f"this reduction {e}", n)
                return a | b

        for n in self.order:
            st = self.n_step[n]
            typ = st.type
            if typ == "nop":
                continue
            ti = self.n_ti[n]
            gid = self.tbs[ti][0].id
            mem = state[gid]
            sends, receives, reads, writes, reduces = STEP_SEMANTICS[typ]
            cnt = st.cnt
            incoming = payloads[self.in_conn[ti]].popleft() if receives else None
            src = [alias(gid, st.srcbuf, st.srcoff + k, inplace) for k in range(cnt)] if reads else None
            dst = [alias(gid, st.dstbuf, st.dstoff + k, inplace) for k in range(cnt)] if writes else None
            noop_copy = typ == "cpy" and src == dst
            if reads and writes and src != dst and not set(src).isdisjoint(dst):
                report("step-overlap", f"source {_range_name(src)} and destination {_range_name(dst)} overlap "
                       "without being equal: the kernel's threads read and write them at once", n)
            local = [load(mem, s, n) for s in src] if reads else None
            if typ == "re":
                values = [combine(load(mem, d, n), v, n) for d, v in zip(dst, local)]
            elif reduces:
                values = [combine(v, d, n) for v, d in zip(local, incoming)]
            elif receives:
                values = incoming
            else:                                   # s, cpy
                values = local
            if sends:
                payloads[self.out_conn[ti]].append(values)
            if reads:
                for s in src:
                    accesses[(gid, s)].append((n, False))
            if writes and not noop_copy:
                for d, v in zip(dst, values):
                    if d[0] == "i" and not coll.input_writable(gid, d[1], inplace):
                        why = ("only the rank's own slice of the input is also output" if inplace
                               else "an out-of-place call must leave the input unchanged")
                        report("input-write", f"writes input chunk {d[1]}, which belongs to the caller ({why})", n)
                    mem[d] = v
                    accesses[(gid, d)].append((n, True))

        self.check_races(accesses, label)

        for g in self.p.gpus:
            mem = state[g.id]
            wrong = []
            for j in range(coll.out_chunks):
                want = coll.expected(g.id, j)
                if want is None:
                    continue
                got = mem.get(alias(g.id, "o", j, inplace))
                if isinstance(got, _Garbage):
                    rn, storage = got.origin
                    report("uninitialised-read", f"gpu {g.id} output chunk {j} ends up holding what this step read "
                           f"from {_chunk_name(storage)} before anything was written there", rn)
                elif got != want:
                    wrong.append(f"output chunk {j} holds {describe(got)}, expected {describe(want)}")
            for text in wrong[:3]:
                self.add("postcondition", f"gpu {g.id}: {label}: {text}", g.id, line=g.line)
            if len(wrong) > 3:
                self.add("postcondition", f"gpu {g.id}: {label}: and {len(wrong) - 3} more wrong output chunks",
                         g.id, line=g.line)
        for rule, count in sorted(counts.items()):
            if count > REPORT_CAP:
                self.add(rule, f"{label}: {count - REPORT_CAP} more steps break this rule")

    def check_races(self, accesses, label: str):
        n_ti = self.n_ti
        memo: dict = {}
        reported: set = set()
        count = 0

        def ordered(x, y):
            key = (x, y)
            if key not in memo:
                memo[key] = self.happens_before(x, y)
            return memo[key]

        def check(x, y, storage, gid, kinds):
            nonlocal count
            if n_ti[x] == n_ti[y] or ordered(x, y) or (x, y) in reported:
                return
            reported.add((x, y))
            count += 1
            if count <= REPORT_CAP:
                g, tb = self.tbs[n_ti[y]]
                self.at("race", f"{label}: {self.describe_node(x)} {kinds[0]} {_chunk_name(storage)} and "
                        f"{self.describe_node(y)} {kinds[1]} it, with nothing ordering them (no dependency, "
                        "program order or chain of messages)", g, tb, self.n_idx[y])

        for (gid, storage), acc in accesses.items():
            last_write = None
            readers: list[int] = []
            for node, is_write in acc:
                if is_write:
                    if last_write is not None and last_write != node:
                        check(last_write, node, storage, gid, ("writes", "writes"))
                    for r in readers:
                        if r != node:
                            check(r, node, storage, gid, ("reads", "writes"))
                    last_write, readers = node, []
                else:
                    if last_write is not None and last_write != node:
                        check(last_write, node, storage, gid, ("writes", "reads"))
                    readers.append(node)
        if count > REPORT_CAP:
            self.add("race", f"{label}: {count - REPORT_CAP} more racing pairs of steps")

    def happens_before(self, x: int, y: int) -> bool:
        """Is step x ordered before step y by a path that includes a local edge? (x fired before y.)"""
        pos = self.pos
        px = pos[x]
        ti = self.n_ti[x]
        x_end = self.tb_start[ti] + self.tb_len[ti]   # later steps of x's thread block: x < n < x_end
        n_idx, dep_pred, msg_pred, cap_pred = self.n_idx, self.dep_pred, self.msg_pred, self.cap_pred
        seen = set()
        stack = [(y, False)]
        while stack:
            n, local = stack.pop()
            preds = ((n - 1 if n_idx[n] > 0 else -1, True), (dep_pred[n], True),
                     (msg_pred[n], False), (cap_pred[n], False))
            for p, edge_local in preds:
                if p < 0:
                    continue
                lp = local or edge_local
                if p == x:
                    if lp:
                        return True
                    continue
                if x < p < x_end:          # x -> p is program order: a local edge
                    return True
                if pos[p] < px:
                    continue
                key = 2 * p + lp
                if key in seen or (not lp and 2 * p + 1 in seen):
                    continue
                seen.add(key)
                stack.append((p, lp))
        return False
