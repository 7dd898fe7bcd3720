"""The time of an MSCCL++ plan colls wrote (:mod:`colls.mscclpp`), per call size, on the same engine as MSCCL
files (:mod:`colls.simulate.engine`) with MSCCL++'s costs (:mod:`colls.runtimes.mscclpp`).

A plan does what the Program it was written from does, step for step (:func:`colls.mscclpp.plan_of`), so the
engine runs that Program (read back from the plan by :func:`colls.mscclpp.program_of` when only the plan is
at hand) with what differs in MSCCL++:

- **Messages.** An unpipelined plan runs every op over its whole operand: a step of ``cnt`` chunks is one
  message of ``cnt`` chunks whatever the call size (no slices, no passes: ``Machine.chunk_rule``). A
  pipelined plan (:func:`colls.mscclpp.slice_of`) moves each step in slices of the pipeline's unit, each with
  its own signal and wait: the message is the slice (``Machine.chunk_rule`` gives the unit once a step's
  operand is larger), so the engine runs one pass per slice and a hop forwards slice i while the previous
  one sends slice i + 1, as it does for the MSCCL executor's 2 MiB slices. colls' steps move one chunk each,
  where the plan's slices and the engine's per-chunk passes are the same bytes; the engine runs them pass by
  pass (every step's slice i, then slice i + 1) where the plan runs them step by step (all slices of a
  step, then the next step), which the engine cannot express: the order of one threadblock's work differs,
  the bytes, messages and dependencies (slice i on slice i) do not. Each connection has
  :data:`colls.mscclpp.SLOTS` = 2 scratch slots, granted by credits, one per whole message (a step's
  operand): unpipelined, a FIFO of 2 messages; pipelined, of 2 whole messages' slices (``Machine.fifo_rule``;
  a connection whose steps differ in size gets the room of its smallest two, less than the plan allows).
  Which unit a plan is pipelined by is chosen by this time (:func:`fastest_slice`).
- **Packets.** A packet plan (LL) is never pipelined and gives every message its own place in scratch: a
  message is a whole step, and a connection has all its messages in flight at once.
- **Costs** (:func:`model`): the kernel's fixed cost and a message's (signal and wait; none for packets, which
  carry their flag) from MSCCL++'s published figures; a port channel's proxy delay on every cross-node message; a threadblock's copy rate and the
  host's launch cost from the NCCL executor's figures (MSCCL++ publishes none).

What the engine does not see, and so leaves out: a receiver that forwards (``rcs``) copies the message twice
(into its output, and on into the next peer's scratch), the engine once; a cross-node send first copies into
a staging slot; the ``nop`` (__syncthreads) between ops. The time is therefore a little low for forwarding
schedules.
"""

from __future__ import annotations

import math
from dataclasses import replace

from colls.errors import CollsError, printable
from colls import mscclpp
from colls.program import STEP_SEMANTICS, Program
from colls.runtimes import mscclpp as rt
from colls.runtimes.costs import DATA_FRACTION, DEFAULT_LAUNCH, Model, family_of
from colls.simulate import Timing, simulate, size_text
from colls.simulate.engine import Machine, message_count

FIFO_CHUNK_STEPS = 4        # NCCL_STEPS (8) / this = 2 messages in flight per connection: the plan's 2 slots


def model(topology, launch: str = DEFAULT_LAUNCH, protocol: str = "Simple") -> Model:
    """MSCCL++'s costs on ``topology``'s GPUs for a plan of ``protocol`` (:mod:`colls.runtimes.mscclpp` gives each
    figure's source): a packet plan (LL) pays no per-message cost, twice the bytes on the wire and NCCL's LL copy
    rate."""
    fam = family_of(topology.gpu_model())
    if protocol == "LL":
        return Model(fam.host_us[launch] + rt.KERNEL_US, rt.PACKET_STEP_US, DATA_FRACTION["LL"], None,
                     fam.tb_gbps["LL"] / fam.tb_gbps["Simple"], rt.PORT_PROXY_US, notes=("MSCCL++ executor, packets",))
    return Model(fam.host_us[launch] + rt.KERNEL_US, rt.STEP_US, 1.0, None, 1.0, rt.PORT_PROXY_US,
                 notes=("MSCCL++ executor",))


def model_text(topology, launch: str = DEFAULT_LAUNCH, protocols=("Simple",)) -> str:
    fam = family_of(topology.gpu_model())
    text = (f"model (MSCCL++ executor on {fam.name}): {fam.host_us[launch]:g} us host launch ({launch}, NCCL's "
            f"measured figure) + {rt.KERNEL_US:g} us kernel per call, {rt.STEP_US:g} us per message sent (signal and "
            f"wait), {rt.PORT_PROXY_US:.3g} us proxy delay per cross-node message, one message per step (per "
            f"{rt.PIPELINE_UNIT_BYTES >> 20} MiB slice when pipelined) and 2 slots per connection, a threadblock "
            f"copies at most {fam.tb_gbps['Simple']:g} GB/s (NCCL's figure)")
    if "LL" in protocols:
        text += (f"; packet plans (LL): no cost per message, 16 bytes on the wire per 8 of data, every message in "
                 f"flight at once, a threadblock writes packets at {fam.tb_gbps['LL']:.3g} GB/s (NCCL's LL figure)")
    return text


def basis(program: Program) -> int:
    """The chunks the plan's message size counts (output chunks for allgather, input chunks otherwise)."""
    g = program.gpus[0]
    return g.o_chunks if program.coll == "allgather" else g.i_chunks


def machine(program: Program, topology, kind: str, slice_bytes: int | None, protocol: str = "Simple") -> Machine:
    """The Program laid out for the engine, cut into messages as the MSCCL++ executor runs its plan.

    ``slice_bytes``: the plan's pipeline unit (:func:`colls.mscclpp.slice_of`), None for an unpipelined plan.
    ``protocol``: the plan's; a packet plan (LL, never pipelined) gives every message its own packets, so a
    connection has all its messages in flight at once."""
    m = Machine(_simple(program), topology, kind)
    ncpl = basis(program) or 1
    most = max((max(int(st.cnt or 0), 1) for g in program.gpus for tb in g.tbs for st in tb.steps
                if STEP_SEMANTICS[st.type][0] or STEP_SEMANTICS[st.type][1]), default=1)

    def plan_messages(proto, size, eff):
        # a message is a step's whole operand: room for the largest step, so no step is cut (engine
        # max_allowed_count then joins a step's chunks into one message) and no chunk is sliced into passes;
        # pipelined, a slice once the step is larger than one
        whole = int(math.ceil(size / ncpl)) * most
        return whole if slice_bytes is None or whole <= slice_bytes else slice_bytes
    m.chunk_rule = plan_messages
    m.chunk_steps = FIFO_CHUNK_STEPS
    m.slice_per_chunk = 1           # the message is already the plan's slice (above)
    # the plan's slots each hold a whole message (a step's operand) and its credits count messages, so a
    # connection has SLOTS messages in flight, each the engine's messages of its slices; the smallest message
    # of a connection's steps sets the room (a connection whose steps differ gets less room than the plan has)
    sends = [[st[3] for st in steps if st[0] and st[3] > 0] for steps in m.steps]

    def plan_fifo(proto, mac, npass):
        room = []
        for ti in m.conn_sender:
            cnts = sends[ti] if ti >= 0 else ()
            if protocol == "LL":
                room.append(max(npass * sum(message_count(c, mac) for c in cnts), 1))
            else:
                room.append(mscclpp.SLOTS * npass * min((message_count(c, mac) for c in cnts), default=1))
        return room
    m.fifo_rule = plan_fifo
    m.plan_slice = slice_bytes
    m.plan_protocol = protocol
    return m


def slices(program: Program, topology, *, inplace: bool = False) -> list[tuple]:
    """The plans of ``program`` :func:`colls.mscclpp.plan_of` writes, one per pipeline unit of
    :data:`colls.runtimes.mscclpp.PIPELINE_UNITS` and one unpipelined: (unit or None, plan), the default unit
    first; a unit whose plan would hold more than 64 ops in a threadblock is left out (the unpipelined plan
    stands for it). Empty when no plan can be written."""
    out = []
    try:
        first = mscclpp.plan_of(program, topology, name="slice", inplace=inplace)
        if mscclpp.slice_of(first) is not None:        # the unit changes nothing but itself (with_unit)
            out = [(unit, mscclpp.with_unit(first, unit)) for unit in rt.PIPELINE_UNITS]
        out.append((None, first if not out else
                    mscclpp.plan_of(program, topology, name="slice", inplace=inplace, slice_bytes=None)))
    except CollsError:
        return []
    return out


def fastest_slice(program: Program, topology, sizes, *, inplace: bool = False) -> tuple:
    """(unit, time): the pipeline unit (None: unpipelined) whose plan of ``program`` simulates fastest at
    ``sizes`` (the geometric mean of its times, microseconds), the default unit unless another is faster. The
    time is infinite, and the unit the default, when the plan does not serve every one of ``sizes`` or none can
    be written."""
    best = (rt.PIPELINE_UNIT_BYTES, math.inf)
    for unit, plan in slices(program, topology, inplace=inplace):
        score = _score(plan, program, topology, sizes, inplace, below=best[1] * (1 - 1e-9))
        if score == math.inf:
            return best
        if score is not None and score < best[1] * (1 - 1e-9):
            best = (unit, score)
    return best


def _score(plan: dict, program: Program, topology, sizes, inplace: bool, mach: Machine | None = None,
           below: float = math.inf) -> float | None:
    """The geometric mean of ``plan``'s times (us) at ``sizes``; infinite when it does not serve every one.
    None when it cannot be under ``below``: each size is simulated only as long as the mean can still get under
    it (the sizes after it counted at their launch cost, which no call beats), the last size exactly so."""
    budget = len(sizes) * math.log(below) if below < math.inf else math.inf
    launch = model(topology, DEFAULT_LAUNCH, plan["protocol"]).launch_us
    logs = 0.0
    for i, s in enumerate(sizes):
        rest = (len(sizes) - 1 - i) * math.log(launch)
        deadline = math.exp(budget - logs - rest) if budget < math.inf else None
        t = time_plan(plan, program, topology, s, inplace=inplace, mach=mach, deadline_us=deadline)
        if not t.served:
            return None if "lower_bound_us" in t.extra else math.inf
        logs += math.log(t.time_us)
    return math.exp(logs / len(sizes))


def packet_score(program: Program, topology, sizes, *, inplace: bool = False) -> float:
    """The geometric mean of the times (us) of ``program``'s packet plan at ``sizes``; infinite when no packet
    plan can be written or it does not serve every one of them."""
    try:
        plan = mscclpp.plan_of(program, topology, name="packets", inplace=inplace, protocol="LL")
    except CollsError:
        return math.inf
    return _score(plan, program, topology, sizes, inplace, machine(program, topology, program.coll, None, "LL"))


def unit_words(unit: int | None, protocol: str = "Simple") -> str:
    """How a plan's data moves: ``pipelined in 1 MiB slices``, ``whole steps (not pipelined)`` or ``LL packets``."""
    if protocol == "LL":
        return "LL packets, whole steps"
    if unit is None:
        return "whole steps (not pipelined)"
    return f"pipelined in {size_text(unit)} slices"


def _simple(program: Program) -> Program:
    """Plans run Simple whatever the program's protocol; the engine reads the protocol from the program."""
    if program.proto == "Simple" and program.nchunksperloop == basis(program):
        return program
    return replace(program, proto="Simple", nchunksperloop=basis(program))


def served(plan: dict, size: int, inplace: bool) -> str | None:
    """None when the executor runs ``plan`` for a call of ``size`` bytes (nccl-tests' size: the buffer its
    message size counts), otherwise why not. The executor accepts a size that is a multiple of the alignment
    whose aligned units divide by the chunk count (execution_plan.cc); the loaders select by the plan's
    in-place flag and its [min_message_size, max_message_size]."""
    if bool(plan["inplace"]) != bool(inplace):
        return f"the plan serves {'in-place' if plan['inplace'] else 'out-of-place'} calls only"
    lo, hi = plan.get("min_message_size", 0), plan.get("max_message_size", 2**64 - 1)
    if size < lo or size > hi:
        return f"{size} bytes is outside the plan's [min_message_size, max_message_size] = [{lo}, {hi}]"
    return executor_refuses(plan, size)


def executor_refuses(plan: dict, size: int) -> str | None:
    """Why the executor refuses a call of ``size`` bytes with ``plan`` (an error, not a fallback), or None: the
    size must be a multiple of the alignment whose aligned units divide by the chunk count
    (execution_plan.cc)."""
    g = plan["gpus"][0]
    chunks = g["output_chunks"] if plan["collective"] == "allgather" else g["input_chunks"]
    align = plan.get("buffer_alignment", rt.BUFFER_ALIGNMENT)
    if size % align or (size // align) % max(chunks, 1):
        return f"the executor refuses {size} bytes: not {chunks} chunks of whole {align}-byte units (execution_plan.cc)"
    return None


def time_plan(plan: dict, program: Program, topology, size: int, *, inplace: bool | None = None, bound=None,
              mach: Machine | None = None, launch: str = DEFAULT_LAUNCH, deadline_us: float | None = None) -> Timing:
    """The time of one call of ``size`` bytes of ``plan`` (written from ``program``); a Timing with
    ``served=False`` and the reason when the executor would not run the plan for it, or when the call takes
    longer than ``deadline_us`` (:func:`colls.simulate.out_of_reach`)."""
    inplace = bool(plan["inplace"]) if inplace is None else inplace
    reason = served(plan, size, inplace)
    if reason:
        return Timing(size, False, reason)
    kind = plan["collective"]
    cut = mscclpp.slice_of(plan)
    proto = plan["protocol"]
    if mach is None or getattr(mach, "plan_slice", 0) != cut or getattr(mach, "plan_protocol", None) != proto:
        mach = machine(program, topology, kind, cut, proto)
    try:
        timing, _ = simulate(mach.program, topology, kind, size, model=model(topology, launch, proto), bound=bound,
                             machine=mach, native=True, deadline_us=deadline_us)
    except CollsError as e:
        raise CollsError(f"{printable(str(plan['name']), 100)}: {e}") from None
    timing.extra["protocol"] = proto
    return timing


def run_files(texts, topology, sizes, *, inplace: bool = False, baseline: str | None = None,
              warn=lambda line: None, launch: str = DEFAULT_LAUNCH) -> tuple[str, dict]:
    """``colls simulate`` for plans colls wrote: each plan read (:func:`colls.mscclpp.load`), proved
    (:func:`colls.verify.plan.verify_plan`), read back to its Program (:func:`colls.mscclpp.program_of`: a plan
    of another shape is refused) and timed per size; with ``baseline``, NCCL's own algorithms beside it (what
    the NCCL API shim falls back to). Returns the text and the JSON."""
    from colls import bound as bounds
    from colls.simulate import report as rep
    from colls.verify.plan import verify_plan
    entries = []
    for path, text in texts:
        plan = mscclpp.load(text, path)
        report = verify_plan(plan, plan["collective"], path)
        if not report.ok:
            raise CollsError(f"INVALID for mscclpp: {report.consequence()}; only correct plans are timed "
                             f"(`colls verify {path}` lists the findings)", source=path)
        program = mscclpp.program_of(plan, topology, path)
        entries.append((path, plan, program))
    kinds = {plan["collective"] for _, plan, _ in entries}
    if len(kinds) > 1 and baseline:
        raise CollsError(f"the plans compute different collectives ({', '.join(sorted(kinds))}): compare plans of "
                         "one collective", key="FILE")
    lines, results = [], []
    bound_of: dict = {}
    for path, plan, program in entries:
        kind = plan["collective"]
        if kind not in bound_of:
            try:
                bound_of[kind] = bounds.bound(topology, kind)
            except CollsError:
                bound_of[kind] = None
        b = bound_of[kind]
        mach = machine(program, topology, kind, mscclpp.slice_of(plan), plan["protocol"])
        timings = [time_plan(plan, program, topology, s, inplace=inplace, bound=b, mach=mach, launch=launch)
                   for s in sizes]
        head = (f"{path}: MSCCL++ plan {printable(plan['name'], 100)}, {kind} on {topology.name} ({topology.ngpus} GPUs), "
                f"{'in-place' if plan['inplace'] else 'out-of-place'} plan, {'in-place' if inplace else 'out-of-place'} "
                f"calls, {unit_words(mscclpp.slice_of(plan), plan['protocol'])}")
        if plan["protocol"] == "LL" and launch == "graph":
            warn(f"{path}: {rt.PACKET_GRAPH_HAZARD}")
        if b is not None:
            head += f"; optimum {float(b.algbw):.1f} GB/s algbw, binding cut: {b.cut_words}"
        lines += [head, rep.table(timings), ""]
        results.append({"label": path, "collective": kind, "plan": plan["name"], "target": "mscclpp",
                        "protocol": plan["protocol"], "pipeline_unit_bytes": mscclpp.slice_of(plan),
                        "bound": b.to_dict() if b is not None else None, "sizes": [t.to_dict() for t in timings]})
    if baseline:
        from colls.simulate.baseline import RuntimeDefault, algorithm_of
        kind = next(iter(kinds))
        forced = None if baseline == "nccl" else (algorithm_of(baseline),)
        base = RuntimeDefault(topology, kind, target="exe", algorithms=forced, launch=launch)
        for note in base.notes:
            warn(f"--baseline: {note}")
        timings = [base.time(s, bound_of[kind]) for s in sizes]
        lines += [f"{base.label}: {kind} on {topology.name} ({topology.ngpus} GPUs), what the NCCL API shim falls "
                  "back to", rep.table(timings), ""]
        results.append({"label": base.label, "collective": kind, "baseline": True,
                        "sizes": [t.to_dict() for t in timings]})
    protocols = {plan["protocol"] for _, plan, _ in entries}
    lines.append(model_text(topology, launch, protocols))
    data = {"hardware": topology.name, "gpus": topology.ngpus, "inplace": inplace, "results": results,
            "model": model_text(topology, launch, protocols)}
    return "\n".join(lines), data
