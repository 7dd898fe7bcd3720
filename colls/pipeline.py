"""The whole chain in one screen: profile -> Topology -> Schedule -> Program -> XML -> verified file.

Each stage is one plain function of the previous stage's value, so a test (or a curious user in a REPL)
can stop after any of them and look at what it produced::

    topology = hardware.load_topology("dgx-a100", nodes=2)          # profile  -> Topology
    collective = Collective("allreduce", topology.ngpus)             #          -> Collective
    schedule = synth.get_method("ring")(topology, collective)        #          -> Schedule
    schedule.check()                                                 # the method's own proof (optional)
    schedule = schedule.replicate(instances)                         #          -> Schedule
    program = lower.lower(schedule, target, options)                 #          -> Program
    text = msccl.emit(program)                                       #          -> XML text
    report = verify.verify(msccl.parse(text)[0], target, sms=...)    # XML text -> Report (proof)
    write_atomic(path, text)                                         # only if the report is clean
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Callable

from colls import bound as bounds
from colls import lower as lowering
from colls import msccl, synth, verify
from colls.collectives import Collective, busbw_factor
from colls.errors import CollsError, LimitError
from colls.files import write_atomic  # noqa: F401  (the last stage; lives with the safe file handling)
from colls.program import PROTOCOLS, Program
from colls.schedule import Schedule
from colls.verify.execution import fifo_messages
from colls.verify.rules import LIMITS, RULES
from colls.verify.report import symmetry_words
from colls.sizes import size_text
from colls.runtimes import LOWERINGS, MAX_OFFSET, Target, get_target
from colls.topology import Topology

MODES = ("both", "inplace", "outofplace")


def default_mode(kind: str) -> str:
    """The calls a file claims when none are asked for: in-place and out-of-place ("both"), but out-of-place
    only for alltoall. An alltoall in place must stage the blocks a rank receives before it has sent what its
    output still holds (every method: :func:`colls.synth.direct.alltoall_ops`), and a file of both pays for
    that scratch in every call: at 1 GB 0.96-0.99x NCCL's grouped sends on one node of dgx-a100, dgx-h100,
    dgx2 and mi300x, where the file of out-of-place calls reaches them. Out-of-place is what alltoall calls are:
    NCCL's own alltoall is grouped ncclSend/ncclRecv between two buffers (microsoft/msccl
    src/collectives/all_to_all.cc and nccl-tests src/alltoall.cu give it a send and a receive buffer), and
    NCCLX refuses sendbuff == recvbuff ("In-place ncclAllToAll is not supported"). An in-place call then runs
    the runtime's own algorithm, as it would without the file."""
    return "outofplace" if kind == "alltoall" else "both"
# The older runtime selects a file for sizes in [minBytes, maxBytes); "no upper limit" (maxBytes 0 for
# exe/rccl) is written for it as an explicit bound far above any message, as ForestColl writes it.
OLD_NO_LIMIT = 1 << 40


@dataclass
class Compiled:
    """Everything one synthesis produced, stage by stage."""

    topology: Topology
    schedule: Schedule
    program: Program
    text: str | None                   # None for a program proven in memory (compile_schedule's in_memory)
    report: "verify.Report"
    target: Target
    mode: str
    facts: dict = field(default_factory=dict)
    base: Schedule | None = None       # the schedule before --instances copies (see :func:`relower`)
    method: str = ""
    fewer_rings: int | None = None     # the ring count the link model grew this one's from (colls.tune._fewer_rings)

    def summary(self) -> str:
        f = self.facts
        calls = {"both": "in-place and out-of-place", "inplace": "in-place only",
                 "outofplace": "out-of-place only"}[self.mode]
        line = (f"{f['collective']} {f['method']} on {f['hardware']}: {f['gpus']} gpus, "
                f"{f['threadblocks']} threadblocks/gpu, {f['channels']} channels, "
                f"{f['steps']} steps max/threadblock, {f['chunks_per_loop']} chunks per loop; "
                f"{calls}; verified for {self.target.name}{symmetry_words(self.report.facts)}")
        simulated = simulated_words(f)
        if simulated:
            line += f"; {simulated}"
        if f.get("model_algbw_gbps") is not None:
            line += f"; link model algbw {f['model_algbw_gbps']:.1f} GB/s"
            if f.get("bound_algbw_gbps") and f["model_algbw_gbps"] > f["bound_algbw_gbps"] * (1 + 1e-9):
                # the allreduce bound is the best reduce-scatter-then-allgather (colls.bound): on an uneven
                # machine a schedule that overlaps the two can pass it, so it is no optimum there
                line += (f" (above the {f['bound_algbw_gbps']:.1f} GB/s of the best reduce-scatter then "
                         f"allgather, which is no limit for this schedule)")
            elif f.get("bound_algbw_gbps"):
                kind = "optimum" if f.get("bound_exact", True) else "upper bound"
                line += (f" ({100 * f['model_algbw_gbps'] / f['bound_algbw_gbps']:.1f}% of the "
                         f"{f['bound_algbw_gbps']:.1f} GB/s link {kind}")
                if f.get("bound_reachable_gbps"):
                    line += f"; {f['bound_reachable_gbps']:.1f} GB/s is reachable"
                line += ")"
        compared = milp_words(f)
        if compared:
            line += f"; {compared}"
        for note in ("chunks_note", "count_note", "pairing_note", "copies_note", "depth_note", "short_note"):
            if f.get(note):
                line += f"; {f[note]}"
        if f.get("root") is not None:
            line += (f"; for root {f['root']} only: install it only where every {f['collective']} call uses root "
                     f"{f['root']} (the runtime does not check the root)")
        if f.get("packed_threadblocks"):
            line += (f"; {f['packed_threadblocks']} threadblocks a GPU both send to and receive from one peer, their "
                     "sends and receives taking turns, so that the GPU's SMs hold every threadblock")
        info = f.get("method_info", {})
        if info.get("staged_blocks") and self.mode != "outofplace":
            line += (f"; {info['staged_blocks']} blocks a GPU wait in scratch for in-place calls and are copied out "
                     "after (--outofplace-only lands every block in the output at once)")
        if self.mode == "outofplace" and f["collective"] == "alltoall":
            line += ("; in-place calls run the runtime's own alltoall (--inplace-and-outofplace makes a file of "
                     "both, which stages blocks in scratch)")
        if info.get("method") == "trees" and not (f.get("chunks_note") or f.get("count_note")):  # they say why
            line += f"; {info['k']} tree{'s' if info['k'] != 1 else ''} per GPU"
            if "trees_per_gpu_tried" not in f:
                line += " (as asked)"
            elif f.get("limited_by"):
                line += f" (the better {f['limited_by']})"
            elif info.get("k_capped"):
                line += f" ({info['k_capped']})"
        return line


def simulated_words(facts: dict) -> str | None:
    """``"simulated busbw 1KB n/a, 1MB 12.3, 1GB 180 GB/s: n/a, 41%, 76% of the runtime optimum"`` (n/a: the
    runtime does not run the file for that size, see ``colls simulate``; the shares: the least time any file
    can take on the runtime over this file's, :func:`colls.bound.runtime_optimum`)."""
    sim = facts.get("simulated_busbw_gbps")
    if not sim:
        return None
    parts = [f"{size} {'n/a' if v is None else f'{v:.3g}'}" for size, v in sim.items()]
    line = f"simulated busbw {', '.join(parts)} GB/s"
    pct = facts.get("runtime_optimum_pct")
    if pct:
        line += f": {', '.join(_pct(pct[size]) if size in pct else 'n/a' for size in sim)} of the runtime optimum"
    reasons = list((facts.get("simulated_not_run") or {}).values())
    return line + (f" (n/a: {reasons[0]})" if reasons else "")


def _pct(value: float) -> str:
    return f"{value:.2g}%" if value < 10 else f"{value:.0f}%"


def milp_words(facts: dict) -> str | None:
    """``"model 12.3 us (solver bound 11.0, latency floor 3.2); simulated at 1MB: milp 97.7 us, ring 136.9,
    trees 84.8 (trees is faster: ...)"``."""
    m = facts.get("milp_compare")
    if not m:
        return None

    def us(v):
        return "n/a" if v is None else f"{v:.4g}"
    head = f"milp model {us(m['objective_us'])} us (solver bound {us(m['lower_bound_us'])} us"
    if m.get("latency_floor_us") is not None:
        head += f", latency floor {us(m['latency_floor_us'])} us"
    times = {k: m.get(f"{k}_us") for k in ("milp", "ring", "trees") if f"{k}_us" in m}
    solved = f" (one copy, as solved: {us(m['solved_us'])} us)" if m.get("solved_us") is not None else ""
    parts = ", ".join(f"{k} {us(v)} us" + (solved if k == "milp" else "") for k, v in times.items())
    line = f"{head}); simulated at {size_text(m['size_bytes'])}: {parts}"
    timed = {k: v for k, v in times.items() if v is not None}
    if timed and times.get("milp") is not None:
        best = min(timed, key=timed.get)
        if best != "milp":
            line += (f" ({best} is faster here: the milp model charges the launch, a message's fixed cost, one "
                     "threadblock's copy rate and the threadblocks a GPU pair shares, but not the receivers' turns "
                     "nor the file's copies)")
    return line


def compile_schedule(topology: Topology, collective: Collective, method: str, *, target: str = "exe",
                     instances: int = 1, proto: str = "Simple", min_bytes: int = 0, max_bytes: int = 0,
                     mode: str | None = None, options: dict | None = None,
                     progress: Callable[[str], None] | None = None, in_memory: bool = False,
                     prove: bool = True) -> Compiled:
    """Synthesize, lower, emit and prove one schedule. Raises CollsError when any stage refuses.

    ``mode``: the calls the file claims (:data:`MODES`; default :func:`default_mode`).

    For ``trees`` without ``trees_per_gpu``, the optimal number of trees per GPU is tried first and,
    while the program exceeds the target's limits, the next smaller one; the facts then say what the
    optimum was, what was achieved and which limit decided.

    Before any synthesis, :func:`check_limits` refuses (LimitError, in milliseconds) what the target
    cannot load whatever the schedule. ``progress``, when given, is called with one line per stage
    once the work has taken more than a second (the CLI prints them on a terminal).

    ``in_memory``: for programs that are only simulated, never written (NCCL's own algorithms in
    :mod:`colls.simulate.defaults`): the Program is proven by :func:`colls.verify.verify` as built,
    without the XML round trip (``text`` is None), the schedule's own check is left to that proof, and
    the facts that need the collective's bound are skipped. ``prove`` false (with ``in_memory``): the program
    is checked for the target's rules, limits and deadlocks but not proved (one that is only simulated, to
    choose among candidates; the chosen one is made again and proved). A file is never written from such a result.
    """
    with msccl.paused_gc():  # millions of acyclic objects: a third of a 128-rank ring's time
        return _compile(topology, collective, method, target, instances, proto, min_bytes, max_bytes,
                        mode or default_mode(collective.kind), options, _Progress(progress), in_memory, prove)


class _Progress:
    """Stage lines for a caller's callback, from the first stage that starts a second or more in."""

    def __init__(self, callback: Callable[[str], None] | None):
        self.callback = callback
        self.start = time.perf_counter()

    def __call__(self, stage: str) -> None:
        elapsed = time.perf_counter() - self.start
        if self.callback is not None and elapsed >= 1.0:
            self.callback(f"{stage} ({elapsed:.0f} s so far)")


def least_instructions(collective: Collective, method: str, instances: int = 1,
                       rings: int | None = None) -> int:
    """A lower bound on the instructions (steps) of the busiest rank of any program ``method`` makes.

    Every rank must receive (or send) a share of the data the collective defines (allgather: the N-1
    other ranks' chunks; reducescatter: a sum for each other rank's chunks; allreduce, broadcast,
    reduce: one chunk per chunk of the buffer); a step carries at most ``cnt`` < 72 chunks, and the
    ring and trees methods, like replicated schedules, move one chunk per step. Rings need more: the
    instructions of :func:`colls.synth.ring.instructions_per_ring` for each ring.
    """
    from colls.synth import ring
    n, c, kind = collective.nranks, collective.chunks * instances, collective.kind
    if n == 1:
        return 0
    if method == "trees" and kind == "allreduce":
        c = max(c, n)  # a chunk per root at least (the chunk factor is N k)
    share = {"allgather": (n - 1) * c, "reducescatter": (n - 1) * c, "alltoall": (n - 1) * c}.get(kind, c)
    per_step = 1 if method in ("ring", "trees") or instances > 1 else 71
    least = -(-share // per_step)
    if method == "ring" and kind != "alltoall":
        counts = [rings] if rings else range(1, ring.MAX_CHANNELS + 1)
        coll = collective.with_chunks(c)
        least = max(least, min(r * ring.instructions_per_ring(coll, r) for r in counts))
    return least


def _hint(collective: Collective, tgt: Target, instances: int, steps: int, sms: int | None,
          nodes: int | None = None, rings: int | None = None) -> str:
    """What to try when a program is too big for ``tgt`` (``nodes``: the machine's, when known; one node
    has no fewer to try; ``rings``: the count asked for)."""
    old = get_target("old")
    tries = ["fewer --rings"] if rings and rings > 1 else []
    tries += ["fewer --chunks"] if collective.chunks > 1 else []
    tries += ["fewer --instances"] if instances > 1 else []
    tries += ["fewer --nodes"] if nodes != 1 else []
    # a plan's proof budget (tbs_why) binds whatever XML target: no other one to suggest
    if tgt.name != "old" and not tgt.tbs_why and steps <= old.max_steps * min(old.max_tbs, sms or old.max_tbs):
        tries.append("--target old")  # no element limit there, 256 steps per threadblock
    return " or ".join(tries or ["another --method"])


def check_rank_limits(collective: Collective, method: str, tgt: Target, instances: int = 1,
                      options: dict | None = None, where: str | None = None, sms: int | None = None,
                      least: int = 0, nodes: int | None = None) -> int:
    """The limits that depend only on the number of ranks (offsets, XML elements per rank, ``<gpu>``
    elements under ``<algo>``), checked before the machine is even built; returns the least number of steps a rank needs (``least``: a bound
    the method knows from the machine, when larger). ``nodes``: the machine's, when known (what to try
    says fewer nodes only where there are several)."""
    n = collective.nranks
    where = where or f"{n} ranks"
    rings = (options or {}).get("rings")
    steps = max(least, least_instructions(collective, method, instances, rings))
    buffer = max(collective.in_chunks, collective.out_chunks) * instances
    if buffer - 1 - (tgt.max_cnt - 2) > MAX_OFFSET:  # the last chunk's step starts there
        raise LimitError(f"{collective.kind} of {n} ranks at chunk factor {collective.chunks * instances} "
                         f"has {buffer} chunks per buffer; step offsets are int16 (at most 32767) in "
                         f"every runtime's loader; try fewer --chunks or --instances")
    if tgt.max_elements is not None:
        tbs = -(-steps // tgt.max_steps) if steps else 1
        elements = 1 + n + max(1, tbs) + max(1, steps)
        if elements >= tgt.max_elements:
            raise LimitError(
                f"{method} {collective.kind} on {where}: each rank's loader would parse at least "
                f"{elements} XML elements (1 algo + {n} gpu elements + at least {max(1, tbs)} "
                f"threadblocks and {steps} steps of its own); {tgt.name} stops at {tgt.max_elements} "
                f"(MSCCL_MAX_NODES); try {_hint(collective, tgt, instances, steps, sms, nodes, rings)}")
    if tgt.max_children is not None and n > tgt.max_children:
        # msccl_parser.h: struct mscclXmlNode holds subs[MSCCL_MAX_SUBS], MSCCL_MAX_SUBS = 1024, and the
        # parser adds children without a check: an <algo> of more <gpu> elements overruns it
        raise LimitError(f"{method} {collective.kind} on {where}: a file of {n} GPUs has {n} <gpu> elements under "
                         f"<algo>; {tgt.name}'s loader holds at most {tgt.max_children} children per element "
                         f"(MSCCL_MAX_SUBS), so one file serves at most {tgt.max_children} GPUs; try fewer "
                         "--nodes")
    if steps > tgt.max_steps * tgt.max_tbs:       # whatever the GPU: check_limits refines with its SMs
        raise LimitError(f"{method} {collective.kind} on {where}: a rank needs at least {steps} steps, more "
                         f"than {tgt.max_tbs} threadblocks of {tgt.max_steps} steps hold "
                         f"({tgt.name}{', ' + tgt.tbs_why if tgt.tbs_why else ''}); try "
                         f"{_hint(collective, tgt, instances, steps, sms, nodes, rings)}")
    if method == "ring" and collective.kind != "alltoall" and n > 1:
        _check_ring_channels(collective, tgt, rings, where,
                             _hint(collective, tgt, instances, steps, sms, nodes, rings))
    synth.check_size(method, collective, where, tgt)    # within what the runtime loads, the method's own reach
    return steps


def _check_ring_channels(collective: Collective, tgt: Target, rings: int | None, where: str, hint: str) -> None:
    """Refuse rings whose step segments cannot fit the channels at any count (:func:`colls.synth.ring.fits`,
    the rule the method picks its counts by; the lowering would refuse the count it falls back to after
    making it, 40 s for 1,024 ranks). Copies only add channels, so one copy decides."""
    from colls.synth import ring
    counts = [rings] if rings else range(1, ring.MAX_CHANNELS + 1)
    if any(ring.fits(collective, r, tgt.max_steps, tgt.max_channels) for r in counts):
        if tgt.max_relay_steps is None or any(
                ring.fits(collective, r, tgt.max_steps, tgt.max_channels, tgt.max_tbs, tgt.max_remote_steps,
                          tgt.max_relay_steps) for r in counts):
            return
        # a plan's threadblocks (max_relay_steps: only an MSCCL++ plan's program has it) hold too few relays:
        # refused here in milliseconds, not after each count is lowered and cut (128 GPUs: 5-8 s)
        least = {r: ring.least_threadblocks(collective, r, tgt.max_steps, tgt.max_remote_steps, tgt.max_relay_steps)
                 for r in counts}
        r = min(counts, key=lambda r: (least[r], r))
        raise LimitError(f"ring {collective.kind} on {where}: {r} ring{'s' if r > 1 else ''} of {collective.nranks} "
                         f"ranks run{'s' if r == 1 else ''} {r * ring.instructions_per_ring(collective, r)} "
                         f"instructions per rank, {r * ring.relays_per_ring(collective, r)} of them relays; a "
                         f"threadblock of an MSCCL++ "
                         f"plan holds at most {tgt.max_remote_steps} steps that send or receive and "
                         f"{tgt.max_relay_steps} relays (64 ops), so at least {least[r]} threadblocks"
                         + ("" if rings else " at any count of rings") + ", more than "
                         + (tgt.tbs_why or f"the {tgt.max_tbs} {tgt.name} runs") + "; try "
                         + " or ".join((["--method hier"] if collective.kind in ("allgather", "reducescatter",
                                                                                 "allreduce") else []) + [hint]))
    r = counts[0]
    segs = ring.segments_needed(collective, r, tgt.max_steps)
    kind = collective.kind
    raise LimitError(f"ring {kind} on {where}: a ring of {collective.nranks} ranks runs "
                     f"{ring.instructions_per_ring(collective, r)} instructions per rank, {segs} step segments of "
                     f"at most {tgt.max_steps} steps on channels of their own, more than the {tgt.max_channels} "
                     f"channels {tgt.name} has" + ("" if rings else " at any count of rings") + "; try "
                     + " or ".join((["fewer --rings"] if rings else [])
                                   + (["--method hier"] if kind in ("allgather", "reducescatter", "allreduce") else [])
                                   + [hint]))


def check_limits(topology: Topology, collective: Collective, method: str, tgt: Target,
                 instances: int = 1, options: dict | None = None) -> None:
    """Refuse, before any synthesis, what ``tgt`` cannot load whatever schedule ``method`` writes.

    Every figure is a lower bound on what the program needs, so nothing the full pipeline could write
    is refused. The limits are the loaders' (RCCL's src/include/msccl/msccl_struct.h, the executor's
    msccl_parser): each rank parses the ``<algo>``, every ``<gpu>`` element and its own threadblocks and
    steps, fewer than MSCCL_MAX_NODES = 4096 elements; offsets are int16 (at most 32767); a direct
    schedule talks to N-1 peers, one threadblock each.
    """
    n = collective.nranks
    least = 0
    if method == "hier":    # its steps follow the nodes and the node's tree: counted from its plan, in milliseconds
        from colls.synth import hier
        least = hier.least_steps(topology, collective, instances)
    steps = check_rank_limits(collective, method, tgt, instances, options, topology.name, topology.min_sms(),
                              least, topology.nodes)
    hint = _hint(collective, tgt, instances, steps, topology.min_sms(), topology.nodes, (options or {}).get("rings"))
    limit_tbs = min(tgt.max_tbs, topology.min_sms())
    peers = 0
    if method == "direct":  # every pair, or the method refuses
        peers = n - 1
    elif method == "ring" and collective.kind == "alltoall":  # every routed pair straight, others relayed
        peers = sum(1 for b in range(1, n) if topology.route(0, b) is not None)
    elif method == "hier":  # its node's neighbours and the next GPU on its rail
        from colls.synth import hier
        peers = hier.least_peers(topology, collective, (options or {}).get("span"))
    if peers > limit_tbs:
        who = (f"but --max-threadblocks {tgt.tbs_budget} allows at most {limit_tbs} threadblocks per GPU"
               if tgt.tbs_budget == limit_tbs else f"more than {tgt.tbs_why}" if tgt.tbs_why and limit_tbs == tgt.max_tbs
               else f"but {tgt.name} on this GPU runs at most {limit_tbs} threadblocks per GPU")
        raise LimitError(f"{method} {collective.kind} on {topology.name}: a rank talks to {peers} peers, "
                         f"one threadblock each, {who}; try "
                         + ("fewer --nodes" if collective.kind == "alltoall" or method == "hier" else "--method trees"))
    _check_waited(topology, collective, method, tgt, peers, (options or {}).get("inplace", True))
    if steps > tgt.max_steps * limit_tbs:
        raise LimitError(f"{method} {collective.kind} on {topology.name}: a rank needs at least {steps} "
                         f"steps, more than {limit_tbs} threadblocks of {tgt.max_steps} steps hold"
                         + (f", {tgt.tbs_why}" if tgt.tbs_why and limit_tbs == tgt.max_tbs else "")
                         + f"; try {hint}")


def _check_waited(topology: Topology, collective: Collective, method: str, tgt: Target, peers: int,
                  inplace: bool) -> None:
    """Refuse a schedule that talks to every other rank, one threadblock each, when more of a rank's threadblocks
    must be waited on than a step can name (``tgt.max_dep_tb``: an int8_t dependentBid in msccl_struct.h; the
    lowering numbers those first, :func:`colls.lower._waited_first`, and refuses the rest after laying them out,
    10-12 s on 256 GPUs). In place, an alltoall's last rank takes every lower rank's block into scratch (it has
    yet to send what its output holds: colls.synth.direct.alltoall_ops), each through the threadblock receiving
    from that peer, and copies it out on a threadblock that waits for that one: N - 1 of them. A direct sum
    (reduce-scatter, allreduce, reduce) adds the peers' blocks one after another, each receiving threadblock
    waiting for the one before (colls.synth.direct._gather_sum): N - 2."""
    n, most = collective.nranks, tgt.max_dep_tb
    if most is None or peers != n - 1:
        return
    if collective.kind == "alltoall" and inplace and n - 1 > most + 1:
        raise LimitError(f"{method} alltoall on {topology.name}: in place, GPU {n - 1} takes the blocks of its "
                         f"{peers} peers into scratch, one threadblock receiving from each, and copies them out on "
                         f"threadblocks that wait for those; {tgt.name} lets a step wait only on threadblocks 0 to "
                         f"{most} (an int8_t dependentBid in msccl_struct.h); try out-of-place calls only (alltoall's "
                         "default) or fewer --nodes")
    if method == "direct" and collective.kind in ("reducescatter", "allreduce", "reduce") and n - 2 > most + 1:
        raise LimitError(f"direct {collective.kind} on {topology.name}: a rank adds the blocks of its {peers} peers "
                         f"one after another, each threadblock receiving from a peer waiting for the one before "
                         f"({n - 2} threadblocks waited on); {tgt.name} lets a step wait only on threadblocks 0 to "
                         f"{most} (an int8_t dependentBid in msccl_struct.h); try --method hier, ring or trees")


# the option that sets a method's count of rings or trees, and where its schedule says the count it used
_COUNTS = {"ring": ("rings", "rings", "rings"), "trees": ("trees_per_gpu", "k", "trees per GPU")}


def _compile(topology, collective, method, target, instances, proto, min_bytes, max_bytes, mode,
             options, progress, in_memory=False, prove=True) -> Compiled:
    """The method's file; when the count of rings or trees it chose by itself leaves a number of chunks per
    loop that divides no power-of-two call (6 rings: 48 chunks; 7 trees per GPU on 32 GCDs: 224), the runtime
    would never run the file at nccl-tests' sizes or the bucket sizes frameworks use, so the powers of two
    around the count are made too and the one the bandwidth model rates best of those the runtime runs is
    taken (the summary says so).

    The candidates' schedules are compared before any is lowered (the choice reads their schedules and chunk
    counts only: a schedule's chunks per loop are its collective's times its copies); the best is lowered, the
    next when the target cannot load it, then emitted and proved as asked."""
    args = (topology, collective, method, target, instances, proto, min_bytes, max_bytes, mode)
    option, info_key, words = _COUNTS.get(method, (None, None, None))
    if option is None or collective.chunks & (collective.chunks - 1) or (options or {}).get(option):
        return _compile_method(*args, options, progress, in_memory, prove)

    def chunks_per_loop(schedule: Schedule) -> int:
        return schedule.collective.nchunksperloop * instances

    # what the target cannot load whatever the schedule is refused first, in milliseconds, as without a count
    tgt, opts = _method_options(topology, collective, method, target, instances, options, mode)
    _check_options(topology, collective, tgt, instances, proto, min_bytes, max_bytes, mode)
    check_limits(topology, collective, method, tgt, instances, opts)
    from colls.synth import ring
    try:
        if method == "ring" and collective.kind != "alltoall":
            # the count and its chunks without the transfers, made where they are lowered (a 6-ring allreduce of
            # 128 GPUs is 195k transfers; 4 rings are taken there, for a power-of-two call)
            planned, (count, _) = None, ring.choice(topology, collective, **opts)
            ncpl = ring.with_rings(collective, count).nchunksperloop * instances
        else:
            planned = _planned(topology, collective, method, target, instances, options, mode)
            count, ncpl = planned.info.get(info_key), chunks_per_loop(planned)
    except CollsError:              # the method refuses: let the full path say why, as it always has
        planned, count, ncpl = None, None, None
    if not count or not ncpl & (ncpl - 1):
        return _compile_method(*args, options, progress, in_memory, prove, planned=planned)
    low = 1 << (count.bit_length() - 1)
    tried = []

    def plan_count(other):
        if method == "ring" and not ring.fits(collective, other, tgt.max_steps, tgt.max_channels, tgt.max_tbs,
                                              tgt.max_remote_steps, tgt.max_relay_steps):
            return None             # the loader refuses it whatever the lowering: not lowered to be refused
        try:
            alt = _planned(topology, collective, method, target, instances, dict(options or {}, **{option: other}),
                           mode)
        except CollsError:
            return None
        return alt if not chunks_per_loop(alt) & (chunks_per_loop(alt) - 1) else None

    for other in sorted({low, 2 * low} - {count}):
        alt = plan_count(other)
        if alt is not None:
            tried.append((other, alt))
    # rings on one node: more rings while the bandwidth model does not fall (for one doubling at most without a
    # gain: the counts of rings that load every link alike come every other doubling), each count taken when it grows (7
    # link-disjoint rings on 8 MI300X leave 56 chunks; 8 rings load 8 links twice, 32 rings carry 4 or 5 on each,
    # 128 rings, sharing the 32 channels, 18 or 19: 8 -> 32 -> 128 rings is 293 -> 468 -> 493 GB/s algbw), up to a
    # threadblock a ring. Planning rings on one node is cheap; on a cluster each doubling plans every GPU again.
    fewer = None            # the count the last one grew from: colls.tune compares the two by simulated time
    if method == "ring" and topology.nodes == 1 and tried:
        other, alt = max(tried, key=lambda x: x[0])
        rate = alt.model_algbw(topology)[0]
        more_rings = other
        while more_rings * 2 <= min(tgt.max_tbs, topology.min_sms(), ring.MAX_SHARED_RINGS):
            more_rings *= 2
            more = plan_count(more_rings)
            more_rate = None if more is None else more.model_algbw(topology)[0]
            if more_rate is None or more_rate < rate or (more_rate == rate and more_rings >= 4 * other):
                break       # falls, or two doublings without a gain (8 MI250: 16 and 32 rings, planned in 6 s)
            if more_rate > rate:
                fewer = other
                other, alt, rate = more_rings, more, more_rate
                tried.append((other, alt))
    tried.sort(key=lambda x: (-x[1].model_algbw(topology)[0], -x[1].info.get(info_key, 0)))
    best = None
    refused: dict = {}      # ring count -> (its rings, why the target refused them)
    for other, alt in tried:
        try:
            best = _compile_method(*args, dict(options or {}, **{option: other}), progress, in_memory, prove,
                                   planned=alt)
            break
        except LimitError as e:
            if method == "ring":
                refused[other] = (alt.info.get("ring_orders"), e)
        except CollsError:
            continue            # more than the target loads: the next best
    if best is None:                # no power of two beside it loads: the count itself (or the one it steps down to)
        return _note_chunks(_compile_method(*args, options, progress, in_memory, prove, planned=planned,
                                            refused=refused))
    best.facts["chunks_note"] = (f"{best.schedule.info.get(info_key)} {words}, not {count}: {count} would leave "
                                 f"{ncpl} chunks per loop, which divide no power-of-two call")
    if fewer is not None and best.schedule.info.get(info_key) > fewer:
        best.fewer_rings = fewer
    if method == "trees":
        best.facts["trees_per_gpu_tried"] = [count, best.schedule.info.get(info_key)]
    return best


def _note_chunks(result: Compiled) -> Compiled:
    """``result`` with a note when its chunks per loop divide no power-of-two call (the runtime would run it
    only for calls whose element count they divide)."""
    n = result.program.nchunksperloop
    if n & (n - 1):
        result.facts["chunks_note"] = (f"{n} chunks per loop divide no power-of-two call: the runtime runs this "
                                       "file only for calls whose element count they divide")
    return result


def proved(compiled: Compiled, *, progress: Callable[[str], None] | None = None, in_memory: bool = False,
           prove: bool = True) -> Compiled:
    """A candidate made to be simulated (``in_memory``, not proved), made as :func:`compile_schedule` would
    have made it with ``in_memory`` and ``prove``: the same program, now emitted and proved (or only
    proved), with its facts; nothing is synthesized or lowered again."""
    return _again(compiled, _Progress(progress), in_memory, prove)


_KEPT_FACTS = ("trees_per_gpu_tried", "limited_by", "rings_tried", "chunks_note", "count_note", "trees_tuned",
               "pairing_note", "pairing_tuned",
               "copies_note", "copies_tuned", "depth_note", "depth_tuned")


def _again(compiled: Compiled, progress, in_memory: bool, prove: bool, **changes) -> Compiled:
    """``compiled``'s schedule lowered again (``changes``: instances, proto, min_bytes, max_bytes, mode), kept
    in memory or emitted and proved as asked; the facts that say how the schedule was chosen are kept."""
    f = compiled.facts
    settings = dict(instances=f["instances"], proto=f["proto"], min_bytes=f["min_bytes"],
                    max_bytes=f["max_bytes"], mode=compiled.mode)
    settings.update({k: v for k, v in changes.items() if v is not None})
    tgt = compiled.target
    _check_options(compiled.topology, compiled.base.collective, tgt, settings["instances"], settings["proto"],
                   settings["min_bytes"], settings["max_bytes"], settings["mode"])
    if tgt.name == "old" and settings["max_bytes"] == 0:
        settings["max_bytes"] = OLD_NO_LIMIT
    with msccl.paused_gc():
        result = None
        if settings["instances"] == f["instances"] and settings["mode"] == compiled.mode \
                and fifo_messages(settings["proto"]) == fifo_messages(f["proto"]):
            # the same threadblocks: the lowering reads the protocol only for the messages a connection holds
            # (LL and LL128 alike), and the byte range not at all; only the attributes and the checks are new
            program = compiled.program
            if (settings["proto"], settings["min_bytes"], settings["max_bytes"]) != \
                    (program.proto, program.min_bytes, program.max_bytes):
                program = replace(program, proto=settings["proto"], min_bytes=settings["min_bytes"],
                                  max_bytes=settings["max_bytes"])
            try:
                result = _finish(compiled.topology, compiled.base, compiled.schedule, program, compiled.method,
                                 tgt, compiled.mode, progress, in_memory, prove, proved=compiled)
            except LimitError:
                raise
            except CollsError:
                if program is compiled.program:
                    raise
                result = None       # lowered afresh below, as any other change
        if result is None:
            result = _lower(compiled.topology, compiled.base, compiled.method, tgt, progress=progress,
                            in_memory=in_memory, prove=prove, **settings)
    for key in _KEPT_FACTS:
        if key in f:
            result.facts[key] = f[key]
    return result


def _compile_method(topology, collective, method, target, instances, proto, min_bytes, max_bytes, mode,
                    options, progress, in_memory=False, prove=True, planned: Schedule | None = None,
                    refused: dict | None = None) -> Compiled:
    """The method's file with ``options``; ``planned``: the schedule the method made with these options (trees:
    the one of its chosen count, which is not made again); ``refused``: ring counts the target already refused
    (:func:`_compile_ring`)."""
    tgt, options = _method_options(topology, collective, method, target, instances, options, mode)
    _check_options(topology, collective, tgt, instances, proto, min_bytes, max_bytes, mode)
    check_limits(topology, collective, method, tgt, instances, options)
    if tgt.name == "old" and max_bytes == 0:
        max_bytes = OLD_NO_LIMIT
    settings = dict(instances=instances, proto=proto, min_bytes=min_bytes, max_bytes=max_bytes,
                    mode=mode, progress=progress, in_memory=in_memory, prove=prove)
    if method == "ring" and "rings" not in options and collective.kind != "alltoall":
        return _compile_ring(topology, collective, tgt, options, settings, planned, refused)
    if method == "hier" and "unit" not in options:
        return _compile_hier(topology, collective, tgt, options, settings)
    if method != "trees" or "trees_per_gpu" in options:     # planned: made with these very options
        return _compile_once(topology, collective, method, tgt, options, schedule=planned, **settings)
    from colls.synth import trees
    candidates = trees.k_candidates(topology, collective)
    refused = []
    fit = "an MSCCL++ plan" if tgt.tbs_why else tgt.name     # a plan's program: lowered as exe, within its budget
    for k in candidates:
        # synthesize(trees_per_gpu=k) makes what synthesize() made when that chose k itself
        again = planned if planned is not None and planned.info.get("k") == k else None
        try:
            result = _compile_once(topology, collective, method, tgt,
                                   dict(options, trees_per_gpu=k), schedule=again, **settings)
        except LimitError as e:
            refused.append((k, str(e)))
            continue
        result.facts["trees_per_gpu_tried"] = [k for k, _ in refused] + [k]
        if refused:
            result.facts["limited_by"] = (f"{refused[0][0]} trees per GPU would not fit {fit}: "
                                          f"{refused[0][1]}")
        return result
    raise LimitError(f"trees {collective.kind} on {topology.name}: no number of trees per GPU fits "
                     f"{fit} (tried {', '.join(str(k) for k, _ in refused)}): {refused[-1][1]}")


def _method_options(topology, collective, method, target, instances, options, mode: str = "both"
                    ) -> tuple[Target, dict]:
    """The target (within ``--max-threadblocks``) and the options the method is called with: the target's
    limits the method fits its lanes, rings or trees to, and ``inplace`` False for a file of out-of-place calls
    only (an alltoall then stages none of its blocks: :func:`colls.synth.direct.alltoall_ops`)."""
    options = dict(options or {})
    if mode == "outofplace":
        options["inplace"] = False
    tgt = budgeted(get_target(target), options.pop("max_threadblocks", None))
    proof = options.pop("proof_threadblocks", None)         # colls.tune.compile_for_plans: what a proof holds
    cap = None if proof is None else max(1, proof // collective.nranks)
    if cap is not None and cap < tgt.max_tbs:
        tgt = replace(tgt, max_tbs=cap, tbs_why=f"the {cap} a plan of {collective.nranks} GPUs may hold (colls "
                                                f"proves a plan of at most {proof:,} threadblocks in all)")
    if proof is not None:   # a program for a plan, lowered as the XML file's or cut: a plan's ops hold its steps
        tgt = replace(tgt, max_remote_steps=LOWERINGS["mscclpp"].max_remote_steps,
                      max_relay_steps=LOWERINGS["mscclpp"].max_relay_steps)
    synth.get_method(method)
    if method in ("trees", "direct", "ring", "milp"):
        options.setdefault("max_tbs", tgt.max_tbs)  # lanes are chosen to fit what the runtime loads
    if method == "ring" and "rings" not in options:  # ring counts are chosen among those that fit
        options.update(max_steps=tgt.max_steps, max_channels=tgt.max_channels,
                       max_remote_steps=tgt.max_remote_steps, max_relay_steps=tgt.max_relay_steps)
    elif method == "ring":      # a given count: the target's steps only say where the lowering starts
        options.setdefault("max_steps", tgt.max_steps)
    return tgt, options


def _planned(topology, collective, method, target, instances, options, mode: str = "both") -> Schedule:
    """The schedule ``method`` makes with ``options`` (not lowered: its count and chunks per loop are known
    before the lowering, which is most of a file's time). The last one made is kept: a plan's program is made
    as the XML file's and then, when its plan cannot hold it, again with the same options to be cut
    (colls.tune.compile_for_plans; trees on 128 GPUs, half a second each)."""
    _, opts = _method_options(topology, collective, method, target, instances, options, mode)
    try:
        key = (collective, method, tuple(sorted(opts.items())))
        hash(key)
    except TypeError:           # an option that is not hashable (a sketch): made afresh
        key = None
    if key is not None and _LAST_PLANNED and _LAST_PLANNED[0] == key and _LAST_PLANNED[1] is topology:
        return _LAST_PLANNED[2]
    schedule = synth.get_method(method)(topology, collective, **opts)
    if key is not None:
        _LAST_PLANNED[:] = [key, topology, schedule]
    return schedule


_LAST_PLANNED: list = []        # [key, topology, schedule] of the last _planned (its topology compared by identity)


def budgeted(tgt: Target, max_threadblocks: int | None) -> Target:
    """``tgt`` with at most ``max_threadblocks`` threadblocks per GPU (``--max-threadblocks``: every SM a
    collective holds is one the model's compute cannot use). Every method then fits its lanes, rings or trees
    to it as to the target's own limit; the name stays, so the file is the target's."""
    if max_threadblocks is None:
        return tgt
    if isinstance(max_threadblocks, bool) or not isinstance(max_threadblocks, int) or max_threadblocks < 1:
        raise CollsError(f"a number of threadblocks per GPU, 1 or more, got {max_threadblocks!r}",
                         key="--max-threadblocks")
    return replace(tgt, max_tbs=min(tgt.max_tbs, max_threadblocks), tbs_budget=max_threadblocks)


def _compile_ring(topology, collective, tgt, options, settings, planned: Schedule | None = None,
                  known: dict | None = None) -> Compiled:
    """The default ring count first (``planned``: its schedule, made with these options); while the program
    exceeds the target's limits (threadblocks, channels), the best count among the smaller ones: among the
    powers of two when the collective's chunks are one (the default), so that the file's chunks per loop still
    divide the power-of-two calls users make (6 rings of 16 ranks would leave 96 chunks per loop, which divide
    no power-of-two call: the runtime would never run the file). ``known``: ring count -> (ring orders, the
    LimitError the target gave them), counts :func:`_compile` has lowered already: a schedule of the same
    rings is the same schedule (the count and the orders are all the method's options choose), so it is
    refused again without being lowered."""
    from colls.synth import ring
    refused: list = []
    pow2 = not collective.chunks & (collective.chunks - 1)
    while True:
        seen: dict = {}
        try:
            if planned is None and known:
                count, orders = ring.choice(topology, collective, **options)
                if known.get(count, (None,))[0] == orders:
                    seen["rings"] = count
                    raise known[count][1]
            result = _compile_once(topology, collective, "ring", tgt, options, seen=seen, schedule=planned,
                                   **settings)
        except LimitError as e:
            rings = seen.get("rings", 1)
            refused.append((rings, str(e)))
            if rings <= 1:
                raise
            options = dict(options, max_rings=1 << ((rings - 1).bit_length() - 1) if pow2 else rings - 1)
            planned = None
            continue
        if refused:
            _note_chunks(result)
            result.facts["limited_by"] = (f"{refused[0][0]} rings would not fit {tgt.name}: "
                                          f"{refused[0][1]}")
            result.facts["rings_tried"] = [r for r, _ in refused] + [seen["rings"]]
        return result


def _compile_hier(topology, collective, tgt, options, settings) -> Compiled:
    """hier passes one chunk on per rail op by default (a relay forwards each chunk as soon as it has it);
    where its threadblocks exceed the target's (RCCL's 64 on 64 x MI250: 69 for the allreduce), twice as many,
    and so on up to a step's count (fewer steps: fewer step segments, channels and threadblocks)."""
    refused: list = []
    unit = 1
    while True:
        try:
            result = _compile_once(topology, collective, "hier", tgt, dict(options, unit=unit), **settings)
        except LimitError as e:
            # more chunks per rail op only shorten the threadblocks; their peers stay (lower: any_layout), and in
            # one step segment already they are laid out alike (16 x MI250's allreduce for plans: 7 units, 45
            # threadblocks a GPU each time, 9.5 s)
            if e.limit != "threadblocks" or 2 * unit >= tgt.max_cnt or e.any_layout or e.one_segment:
                raise
            refused.append((unit, str(e)))
            unit *= 2
            continue
        if refused:
            why = refused[-1][1].split(": ", 1)[-1].split(" (")[0]
            result.facts["limited_by"] = result.facts["count_note"] = (
                f"{unit} chunks per rail op, not 1: with {refused[-1][0]} it {why}")
        return result


def _compile_once(topology: Topology, collective: Collective, method: str, tgt: Target, options: dict,
                  *, instances: int, proto: str, min_bytes: int, max_bytes: int, mode: str,
                  progress: _Progress, seen: dict | None = None, in_memory: bool = False,
                  prove: bool = True, schedule: Schedule | None = None) -> Compiled:
    if schedule is None:
        progress(f"synthesizing {method} {collective.kind} for {collective.nranks} ranks")
        schedule = synth.get_method(method)(topology, collective, **options)
    if seen is not None:
        seen.update(schedule.info)
    # what the schedule computes is proved on the program it is lowered to (and, should that proof fail, by
    # the schedule's own check, which names the transfer at fault: _finish); here only its shape
    schedule.check_shape()
    return _lower(topology, schedule, method, tgt, instances=instances, proto=proto, min_bytes=min_bytes,
                  max_bytes=max_bytes, mode=mode, progress=progress, in_memory=in_memory,
                  prove=prove or not in_memory)


def relower(compiled: Compiled, *, instances: int | None = None, proto: str | None = None,
            min_bytes: int | None = None, max_bytes: int | None = None, mode: str | None = None,
            only_simulated: bool = False) -> Compiled:
    """The same synthesized schedule lowered again with other settings (copies, protocol, size range,
    aliasing), emitted and proved like the first time; raises CollsError (LimitError) when the target
    cannot load the result.

    ``only_simulated``: for a program that is simulated and never written as it is (colls compile's copies:
    the file it writes is lowered again and proved): kept in memory (no text), checked for the target's rules
    and limits and for deadlocks but not proved to compute the collective, and without the summary's link
    model and bound."""
    return _again(compiled, _Progress(None), only_simulated, not only_simulated, instances=instances, proto=proto,
                  min_bytes=min_bytes, max_bytes=max_bytes, mode=mode)


def _lower(topology: Topology, base: Schedule, method: str, tgt: Target, *, instances: int, proto: str,
           min_bytes: int, max_bytes: int, mode: str, progress: _Progress, in_memory: bool = False,
           prove: bool = True) -> Compiled:
    collective = base.collective
    schedule = base.replicate(instances)
    progress("lowering to the MSCCL IR")
    opts = lowering.LowerOptions(
        proto=proto, min_bytes=min_bytes, max_bytes=max_bytes,
        inplace=mode in ("both", "inplace"), outofplace=mode in ("both", "outofplace"),
        name=f"colls-{method}-{collective.kind}{_root_tag(collective)}-{topology.name.replace(' ', '')}",
        sms=topology.min_sms(), shape=topology.node_major(), fits=_plan_fits(tgt, topology))
    program = lowering.lower_by_symmetry(schedule, tgt, opts)
    if program is not None:     # one orbit's ranks lowered, the others relabelled: proved whatever the use
        try:
            return _finish(topology, base, schedule, program, method, tgt, mode, progress, in_memory, True)
        except LimitError:
            raise
        except CollsError as e:
            # a loader limit (elements, steps, threadblocks of a rank) is the same for the whole lowering,
            # which deals every rank as the orbit's (colls.lower): lowering every rank would meet it again
            # (2 copies of hier's allgather on 128 x dgx-a100: 4,895 elements a rank, 145 s to find it twice)
            if e.rule_family == LIMITS:
                raise
            progress("lowering every rank (the program lowered by symmetry did not verify)")
    program = lowering.lower(schedule, tgt, opts)
    return _finish(topology, base, schedule, program, method, tgt, mode, progress, in_memory, prove)


def _plan_fits(tgt: Target, topology: Topology):
    """For MSCCL++ plans, the threadblocks of a lowered program whose plan has more than the executor's 64 ops
    (:func:`colls.mscclpp.over_budget`); the lowering cuts their connections onto channels of their own. None
    for the XML targets, whose limit is the step count itself."""
    if tgt.name != "mscclpp":
        return None
    from colls import mscclpp
    return lambda program, ranks=None: mscclpp.over_budget(program, topology, mscclpp.rt.PIPELINE_UNIT_BYTES, ranks)


def _finish(topology: Topology, base: Schedule, schedule: Schedule, program: Program, method: str, tgt: Target,
            mode: str, progress: _Progress, in_memory: bool, prove: bool, proved: Compiled | None = None) -> Compiled:
    """A lowered program checked (in memory, proved or not) or emitted and proved, with its facts.
    ``proved``: a file proved before, whose proof this one shares where only their protocols and byte ranges
    differ (:func:`_same_steps`)."""
    collective = base.collective
    if in_memory:
        text = None
        progress("verifying the program")
        report = verify.verify(program, tgt, sms=topology.min_sms(), source="<generated>", prove=prove)
    else:
        text = msccl.emit(program)
        progress(f"verifying the file ({len(text) // 1024} KiB)")
        parsed, text_findings = msccl.parse(text, source="<generated>")
        shared = proved is not None and _same_steps(proved, text, mode)
        report = verify.verify(parsed, tgt, sms=topology.min_sms(), findings=text_findings, prove=not shared)
        if shared and report.ok:
            report.facts.update({k: proved.report.facts[k] for k in SHARED_PROOF if k in proved.report.facts})
    if not report.ok:
        if prove or not in_memory:
            base.check()        # a wrong schedule: its own check names the transfer at fault
        first = next(f for f in report.findings if f.severity == "error")
        hint = ""
        if mode == "both" and "in-place" in str(first):
            hint = "; this schedule does not support in-place calls: pass --outofplace-only"
        raise CollsError(f"{method} {collective.kind} on {topology.name}: the generated program does not verify "
                         f"for {tgt.name}: {first}{hint}",
                         rule_family=RULES[first.rule].family if first.rule in RULES else None)
    facts = _facts(topology, schedule, program, tgt, method, mode, with_bound=not in_memory)
    return Compiled(topology, schedule, program, text, report, tgt, mode, facts, base=base, method=method)


# What a proof found that holds for every file with the same steps (:func:`_same_steps`).
SHARED_PROOF = ("checked", "semantics_checked", "symmetry")
# The <algo> attributes the proof of races and results reads only through the messages a connection holds
# (the rules, the limits and the deadlock check, which read them otherwise, run on every file).
_UNPROVED_ATTRS = re.compile(r' (?:proto|minBytes|maxBytes)="[^"]*"')


def _same_steps(proved: Compiled, text: str, mode: str) -> bool:
    """Whether the file ``text`` is ``proved``'s, a file emitted and proved (in-place and out-of-place as
    ``mode`` says) without findings, up to its protocol and byte range: every ``<gpu>``, ``<tb>`` and
    ``<step>`` line the same, the ``<algo>`` line the same without those attributes, and as many messages
    per connection (LL and LL128: :func:`colls.verify.execution.fifo_messages`). The order the steps fire in,
    the races and the result are then the same for every call (:mod:`colls.verify.semantics` reads the
    protocol only for those messages, the byte range not at all: a step moves the same chunks whatever the
    size), so that part of the proof holds for both."""
    if proved.text is None or proved.mode != mode or not proved.report.ok \
            or not proved.report.facts.get("semantics_checked"):
        return False
    head, _, rest = text.partition("\n")
    old_head, _, old_rest = proved.text.partition("\n")
    proto = re.search(r' proto="([^"]*)"', head)
    return proto is not None and fifo_messages(proto.group(1)) == fifo_messages(proved.report.facts.get("proto")) \
        and rest == old_rest and _UNPROVED_ATTRS.sub("", head) == _UNPROVED_ATTRS.sub("", old_head)


def _root_tag(collective: Collective) -> str:
    """``-root<R>`` in a rooted collective's file name: the file serves that root only."""
    return f"-root{collective.root}" if collective.rooted else ""


def _check_options(topology, collective, tgt, instances, proto, min_bytes, max_bytes, mode) -> None:
    if collective.nranks != topology.ngpus:
        raise CollsError(f"the collective has {collective.nranks} ranks but {topology.name} has "
                         f"{topology.ngpus} GPUs")
    if instances < 1:
        raise CollsError(f"must be >= 1, got {instances}", key="--instances")
    if proto not in PROTOCOLS:
        raise CollsError(f"unknown protocol {proto!r} (choose from {', '.join(PROTOCOLS)})",
                         key="--proto")
    if min_bytes < 0 or max_bytes < 0:
        raise CollsError("byte bounds must be >= 0", key="--min-bytes/--max-bytes")
    if max_bytes and max_bytes < min_bytes:
        raise CollsError(f"--max-bytes {max_bytes} is below --min-bytes {min_bytes} (0 means no limit)",
                         key="--max-bytes")
    if mode not in MODES:
        raise CollsError(f"unknown mode {mode!r}")


def _facts(topology, schedule, program, tgt, method, mode, with_bound: bool = True) -> dict:
    coll = schedule.collective
    # the link-load model and the bound are for the summary of a file; a program proven in memory has none
    algbw, link = schedule.model_algbw(topology) if with_bound else (None, None)
    facts = {
        "collective": coll.kind, "method": method, "hardware": topology.name, "target": tgt.name,
        "gpus": coll.nranks, "threadblocks": program.max_tbs(), "packed_threadblocks": lowering.packed(program),
        "channels": program.nchannels,
        "steps": program.max_steps(), "chunks_per_loop": program.nchunksperloop,
        "scratch_chunks": schedule.scratch, "instances": schedule.info.get("instances", 1),
        "proto": program.proto, "inplace": bool(program.inplace), "outofplace": bool(program.outofplace),
        "min_bytes": program.min_bytes, "max_bytes": program.max_bytes,
        "root": coll.root if coll.rooted else None,
        "model_algbw_gbps": float(algbw) if algbw else None,
        "model_busbw_gbps": float(algbw) * busbw_factor(coll.kind, coll.nranks) if algbw else None,
        "busiest_link": None if link is None else f"{topology.label(link[0])} -> {topology.label(link[1])}",
        "method_info": _jsonable(schedule.info),
    }
    bound = _bound_or_none(topology, coll) if with_bound else None
    if bound is not None:
        facts["bound_algbw_gbps"] = float(bound.algbw)
        facts["bound_exact"] = bound.exact
        facts["bound_cut"] = bound.cut_words
        if bound.achievable is not None:
            facts["bound_reachable_gbps"] = float(bound.achievable)
        if algbw:
            facts["fraction_of_bound"] = float(Fraction(algbw) / bound.algbw)
    return facts


def _bound_or_none(topology, coll):
    """The collective's bound, or None where the model has none to give (the facts then omit it)."""
    try:
        return bounds.bound(topology, coll.kind, root=coll.root)
    except CollsError:
        return None


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Fraction):
        return int(value) if value.denominator == 1 else float(value)
    return value
