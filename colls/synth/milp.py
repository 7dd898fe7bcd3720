"""Sketch-guided synthesis on an open solver: routing, link sharing and send order in one CP-SAT model.

The idea is TACCL's (A. Shah et al., "TACCL: Guiding Collective Algorithm Synthesis using
Communication Sketches", NSDI 2023, arXiv:2111.04867; code: microsoft/taccl): a *communication
sketch* (:mod:`colls.inputs.sketch`) says which GPU pairs may talk between nodes, which chunks may leave a node
through which GPU, which decisions are equal by symmetry and how finely buffers are cut, and that keeps
an exact model of routing and scheduling small enough to solve. TACCL solves it in three stages on
Gurobi (a routing MILP whose links carry load <= makespan, a greedy ordering, then a scheduling MILP).
This module solves the same problem with Google OR-Tools' CP-SAT only.

Why CP-SAT (and one model, not three stages)
--------------------------------------------
The hard part of the problem is disjunctive: transfers that share a link or a switch port go one after
another. A MILP states that with big-M pairs (TACCL's stage 3, ``send_c + lat_c <= send_o`` with M =
1e7), whose LP relaxation is empty of information, and TACCL therefore fixes the order with a heuristic
before its last MILP. CP-SAT has the constraint natively: optional interval variables on a
``NoOverlap`` per link ("Scheduling" and "Channeling constraints" in the OR-Tools CP-SAT guide,
developers.google.com/optimization/cp), propagated by edge finding and disjunctive reasoning and
relaxed into its LP by the solver itself. So one model decides the route of every chunk, the order on
every link and the times together, instead of fixing routes before orders are known. Times are
integers: every cost is scaled to units of ``info["time_unit_us"]`` (the smallest transfer's link
occupancy is at least 100 units, so rounding moves no cost by more than 1%), and the makespan is minimized in
steps of 0.1 % of the greedy start's (``milp_model.OBJECTIVE_STEPS`` says why). Measured on 2 x NDv2
allgather (bench/milp.py): the greedy start this module computes is improved within seconds, and
the solver's own bound (with TACCL's load <= makespan constraints added as redundant cuts) tells how
far the result can be from the best schedule of the model.

Determinism: one worker (``threads=1``), a fixed ``seed``, and the limit ``time_limit`` given to
CP-SAT as *deterministic* time (``max_deterministic_time``, a count of work that OR-Tools calibrates
in seconds): a run stops at the same point of the search on any machine and load, so identical inputs
give identical files even when the limit stops the search. The calibration is rough: on a 2-core AMD
EPYC one deterministic second took 0.1 to 11 s of wall time (2 x NDv2 alltoall is the slow end). A
wall-clock backstop of 30 times the limit plus 60 s only guards against a pathological calibration.
``gap`` (default 1%) stops the search as soon as the incumbent is that close to the solver's bound
(``relative_gap_limit``), which is also deterministic.

The model
---------
Costs (alpha-beta, per transfer, with the runtime's costs of :mod:`colls.runtimes.costs`): a chunk of S bytes
sent from GPU u to GPU v over the physical route ``topology.route(u, v)`` holds every link of the route for
``beta = S / route bandwidth`` (as the runtime reaches it: the links' ``efficiency``), and is usable at v
``alpha + beta`` after it starts, where ``alpha`` is what the runtime adds without holding a link: the
route's latency, the sender's fixed cost per message (``step_us``: its fence and flag; once per slice of
the message that carries data, as the kernel posts each slice on its own) and, across nodes, the proxy's
(``net_step_us``), the time one threadblock takes to copy S beyond the links' ``beta``, and the receiver's
copy of the message's last slice out of the connection's buffer (a receive works at one threadblock's rate
too; it copies the first slice out while the last arrives). The
objective adds the call's launch once, and an in-place alltoall's copies out of scratch after the last
transfer. Two constraints say what a GPU's threadblocks can do at once: a GPU pair's transfers share the
lowering's two threadblocks, each holding one for its fixed cost and its copy (``Problem.pair_lanes``), and
on the reversed machine of a reduction a rank's transfers of one chunk start a copy's time apart
(``Problem.fan``: in real time they are the partial sums it adds one after another, into one buffer). The
lowering puts a pair's transfers on a lane by their hop's parity (:func:`_lanes`): those that leave a chunk's
source on one, those a relay forwards on the other, a third hop on the first's again. So while no pair carries
more transfers than a lane holds (``Problem.lane_ops``), each of the two classes runs one transfer at a time
(every candidate is on a hop-shortest path, so a transfer's hop, and its class, is fixed by where it leaves:
``milp_model._hop_parity``). Where a pair's candidates are more than a lane holds, the model holds each pair to
that many transfers, when its greedy start shows a schedule that keeps them there; else (2 x NDv2's alltoall,
whose pairs across the nodes carry up to 128) any two of a pair's transfers at once, as the lowering's further
lanes may run them. Before, any candidates over a lane's meant any two at once, which the file, whose pairs
carried at most 20, did not do: 2 x MI250's alltoall at 1 MB simulated 142.2 us against an objective of 110.6;
now 129.7 against 129.7 (and solved in 43 s instead of 80). Modelled as any two at once everywhere, two transfers
out of a source to one peer could overlap in the model and ran one after the other in the file: a relay's partial
sum reached the GPU that adds it 9 us after the solution said (2 x DGX A100 reduce-scatter at 1 MB), and every
later addition in that GPU's chain waited. A lane's connection holds the runtime's FIFO of two messages
(``Problem.fifo``, colls.verify.execution.FIFO_MESSAGES): a transfer starts only while fewer than two of its
lane's are in flight, from their start until the receiver has them. Without it the model ran a lane's
transfers across the nodes a copy apart, where the file sends two and waits out their 14 us to the other node
(2 x DGX-2 alltoall: the 32 transfers GPU 0 sends GPU 16 end 44 us after the solution said, 217 us simulated
against an objective of 173). A reduction's ops follow the partial sums' arrivals (:meth:`_Builder._reduce`),
the order a GPU adds them in. A file has no clock: a send whose data is there from the start (a leaf's partial
sum, a source's own chunk) runs when its threadblock reaches it, at once where it is the first step, so each is
held until the send of its GPU the solution has arrive last before it starts (:func:`_holds`, ``Op.after``; not
in an alltoall): 2 x DGX-2 reduce-scatter 85.2 -> 76.8 us at 1 MB (objective 75.6), allreduce 117.8 -> 109.4 (107.4); below the
solved size they cost what they save there (one DGX-2's allreduce, 64 KB: 42.9 -> 49.5 us). What it
leaves out: the receiving threadblocks' turns, and the copies of the file (``--instances``). At the solved size,
the simulated time of the file as solved (one copy) over the objective, 2 nodes of every shipped profile:
allgather 0.99-1.05x, reduce-scatter 1.00-1.03x, allreduce 1.00-1.11x, alltoall (out-of-place) 1.00-1.02x, 19 of
the 20 within 10 % (over: allreduce on MI250 1.108; NDv2's reduce-scatter and alltoall were 1.133 and 1.126 while
the simulator held a network send's threadblock until the NIC had sent the message, which the model, holding a
lane for the fixed cost and the copy only, never did, then 1.101 and 1.045 while the simulator's relays forwarded
whole messages and the model charged one fixed cost a message; with
any two of a pair's transfers at once wherever its candidates were more than a lane's, MI250's alltoall was
1.285, and in place the alltoalls of NDv2 and MI250 were 1.115 and 1.207; without the holds 15, DGX-2's reduce-scatter 1.127 and allreduce 1.097; without the FIFO: 0.99-1.07,
1.00-1.13, 0.93-1.15, 1.10-1.37, 13 of 20; any two at once and additions in the order the transfers start as
well: 1.02-1.14, 1.17-1.27, 1.12-1.23, 1.12-1.38, 4 of 20; link time alone: 2.2-10.7x). Files at 1 MB, one copy, before the lanes and the arrival order -> with them
-> with the FIFO too: reduce-scatter 2 x DGX A100 76.7 -> 68.3 -> 68.2 us, 2 x DGX H100 69.5 -> 60.0 -> 60.0, 2 x
DGX-2 93.2 -> 85.2 -> 85.2, 2 x MI250 94.5 -> 80.0 -> 78.2, 2 x NDv2 129.4 -> 126.8 -> 126.2; allreduce 106.4 ->
98.0 -> 98.0, 95.0 -> 85.6 -> 85.6, 126.7 -> 117.8 -> 117.8, 149.6 -> 140.7 -> 134.4, 209.2 -> 205.2 -> 211.8 (the
one slower: its solve stops at the time limit); alltoall 2 x DGX A100 126.4 -> 122.2, 2 x DGX H100 104.7 -> 99.4,
2 x DGX-2 237.3 -> 216.8 -> 216.8. Solves take 0.3 to 26 s at 2 nodes but MI250's alltoall, 49 s (its
deterministic time limit, on a 2-core machine; DGX-2's and DGX H100's alltoall took 0.4 and 0.3 s without the
FIFO's constraints, 23 and 21 s with them).
S is the chunk size a TACCL profile was measured at (``topology.meta["chunk_bytes"]``), or else a 1 MiB buffer
per rank cut into the collective's ``nchunksperloop`` chunks (option ``size`` changes the buffer); ``info``
records both.

*Connections*: every GPU pair inside a node that has a route (switch pairs, mesh links); between nodes
only the sketch's relay pairs (``internode_conn``: local sender s of every node to its receivers on
every other node). *Candidates*: a chunk may use the connections on hop-shortest paths from its
source to its destinations (TACCL's shortest-path sets; a GPU may relay). The sketch's ``senders_of``
removes the inter-node connections a chunk may not leave a node by.

Variables, per chunk c and candidate connection e = (u, v): ``x[c,e]`` (c crosses e), an optional
interval of fixed length beta_e starting at ``s[c,e]``, present iff ``x[c,e]``; per chunk and rank the
arrival time ``a[c,r]``; the makespan T. Constraints:

- routing: allgather and broadcast: every rank but the source receives c exactly once (a tree);
  alltoall: one path from source to destination (flow conservation at relays);
- precedence: ``x[c,(u,v)] => s[c,(u,v)] >= a[c,u]`` and ``a[c,v] = s + alpha_e + beta_e``;
- link and port sharing: ``NoOverlap`` over the intervals of every physical link (a GPU's port to a
  switch, a NIC's links, an NVLink): a link carries its transfers one after another, which also
  fixes the send order on every connection and port; and, as TACCL's stage 1, ``sum beta x <= T`` per
  link (redundant, it strengthens the bound);
- relay: only the sketch's inter-node connections exist; ``senders_of``; ``own_chunks_first``: on an
  inter-node connection, a chunk of the sending GPU ends before a relayed one starts;
- symmetry: every sketch rotation that maps the connections, costs and relay rule onto themselves
  (others are dropped, and ``info["notes"]`` says which) joins chunks into orbits: the members of an
  orbit share their routing literals, and also their times when no member's transfer shares a link
  with its image (on NDv2 every GPU shares the one NIC, so a rotation inside a node shares routes
  only); constraints are then stated once per orbit;
- objective: minimise T, then (lexicographically) the sketch's ``uc-min`` / ``uc-max`` (fewer / more
  distinct connections inside switch lists) or ``minmax`` / ``maxmin`` (busiest / least busy link).

A greedy list schedule (earliest arrival first, whole orbits at once) gives the first incumbent and the
horizon, passed to CP-SAT as a solution hint.

Collectives
-----------
- allgather: chunk (q, j) from q to every rank (input ``i[j]`` -> output ``o[q c + j]``).
- broadcast: the root's chunks to every rank, over any connections (not only shortest paths: a
  GPU that received a chunk relays it, so the root's port is not the only one busy); no symmetry
  (rotations move the root).
- alltoall: chunk (q, b, j) from q to b; arrivals and relayed chunks wait in scratch and local copies
  place them after the last transfer (so in-place calls are right).
- reducescatter: the allgather problem on the reversed machine (each connection turned around, its
  cost that of the real transfer), solved, then run backwards in time: every tree becomes an in-tree
  to the chunk's owner, and a GPU reduces each child's partial sum on arrival and sends its own on
  once every child arrived (partial sums in scratch).
- reduce: the broadcast problem on the reversed machine, run backwards like reducescatter (partial
  sums in scratch, the root's sum in its output).
- allreduce: chunk factor N m: the reduce-scatter of chunk ``q m + j`` to q, then the allgather of it
  from q, one schedule (the second solve is skipped when the machine equals its reversal: the reduce-scatter's
  schedule, its sums one after another included, is one the allgather may run).

Every transfer moves one chunk and carries ``topology.route(src, dst)``; ops run in the order of their
start times, one step each (a total order consistent with every dependency). Lanes: see :func:`_lanes`.
The alltoall's final local copies move a run of chunks each (the arrivals before the rank's own chunks,
and those after).

``Schedule.info``: ``objective_us`` (the makespan found), ``lower_bound_us`` (the solver's bound on
the model's optimum), ``gap``, ``status`` per stage (``optimal``, ``gap limit`` or ``time limit``), ``solve_seconds`` per stage, ``greedy_us``,
``sketch`` (colls YAML), ``chunk_bytes``, ``message_bytes``, ``time_unit_us`` and ``notes``.

STATUS
------
Works: allgather, alltoall, reducescatter, allreduce, broadcast, reduce on switch nodes, meshes (NDv2)
and clusters, with colls and TACCL sketches (one-node TACCL sketches too); time limit, gap,
determinism, progress lines, infeasibility naming the constraint family; ``colls synth --method milp``
(--sketch, --time-limit, --gap, --quiet). bench/milp.py (bench/milp.json, with its machine), whole pipeline:
2 x NDv2 allgather (sk1-ndv2-n2) 2.3 s, 2 x DGX-2 allgather (sk2-dgx2-n2) 0.2 s; 2 x NDv2 alltoall 140 s, to
the time limit of 30 deterministic seconds (objective 428 us, gap 5.9 %; 86 s and 560 us, gap 28 %, before the
connections' FIFO and the hop classes: its target of 120 s is missed, the FIFO's cumulative constraints make each
deterministic second longer): with the runtime's costs the solver's bound is far weaker than with link time
alone, which it closed in 0.5 s, and the larger models run to their limit (8 x NDv2 alltoall, 64 GPUs: 50 s).
Schedules over the GPU's threadblocks get lanes per GPU pair (:func:`_lanes`) and the lowering packs the lightest
peers' threadblocks (colls.lower), so 8 x NDv2 alltoall (110 threadblocks a GPU with one lane count, 80 SMs) and
8 x DGX-2 allgather (81) are written, not refused after their solve. Next: the receivers' turns in the model; a
bound that closes the gap of the larger solves (4 x DGX A100 reduce-scatter: 14 % at the
time limit; a 5 % --gap changed none of 22 files measured); contiguity (several chunks in one send, TACCL's stage 3); ``rrs`` forwarding
of partial sums; overlapping the two halves of allreduce in one model.
"""

from __future__ import annotations

import bisect
import math
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import replace
from fractions import Fraction

from colls.collectives import Collective
from colls.errors import CollsError
from colls.schedule import Op, Schedule, channel_peers, fewest_threadblocks
from colls.runtimes.costs import model_for, tb_rate
from colls.inputs.sketch import Sketch, derive_sketch, sketch_text, symmetry_permutation
from colls.synth.common import schedule_facts, too_many_gpus
from colls.synth.direct import staged_blocks
from colls.synth.milp_model import Chunk, Connection, Problem, Settings, chunk_map, closure, solve
from colls.topology import Topology
from colls.verify.execution import FIFO_MESSAGES, SLICE_PER_CHUNK, data_slices, slice_bytes

METHOD = "milp"
KINDS = ("allgather", "alltoall", "reducescatter", "allreduce", "broadcast", "reduce")
DEFAULT_BUFFER = 1 << 20       # bytes per rank when the profile holds no chunk size
MIN_UNITS = 100                # the smallest link occupancy, in time units
LANE_OPS = 64                  # transfers per GPU pair (both ways) and lane; the lowering splits longer ones
MAX_LANES = 16
PAIR_LANES = 2                 # threadblocks a GPU pair's transfers share: the hop's parity (_lanes)
# The most GPUs the method takes on, measured on the 2-core machine of bench/SCALE.md. The model has a candidate
# connection for every pair of GPUs the sketch allows and a chunk per source (alltoall: per pair of GPUs): at
# 256 GPUs (32 x dgx-a100) finding the connections alone takes 14 s and an allgather was refused after 272 s;
# at 128 GPUs allgathers were answered in 4 to 20 s with link time alone, and take 51 s (16 x dgx-a100) with the
# runtime's costs, whose weaker bound runs the solve to its time limit. Alltoall at 128 GPUs was refused after
# 137 to 142 s on dgx-a100, mi250 and dgx-h100 (its relays need more threadblocks than the GPU has SMs), and 64
# GPUs took 93 s, both with link time alone.
MAX_GPUS = 128
MAX_GPUS_ALLTOALL = 64


def synthesize(topology: Topology, collective: Collective, *, sketch: Sketch | None = None,
               time_limit: float = 10.0, gap: float = 0.01, seed: int = 0, threads: int = 1,
               size: int | None = None, progress=None, **options) -> Schedule:
    """A schedule of ``collective`` on ``topology`` from the sketch-guided model (module docstring).

    Parameters
    ----------
    sketch : a checked :class:`~colls.inputs.sketch.Sketch`; default :func:`colls.inputs.sketch.derive_sketch`.
    time_limit : CP-SAT deterministic seconds per solve (module docstring); on the limit the
        best schedule found is used and ``info["gap"]`` says how far from the bound it may be.
    gap : stop at this relative gap (0: prove optimality or run to the limit); default 1%.
    seed, threads : CP-SAT's random seed and workers (1: deterministic).
    size : bytes per rank's buffer for the cost model (default: the TACCL profile's chunk size, else
        1 MiB).
    progress : a callable given one line per solved stage.
    options : ``inplace`` False: the file serves out-of-place calls only, and an alltoall's chunks land in
        the output at once (:meth:`_Builder._alltoall`); ``max_tbs``: the target's threadblocks per GPU (with
        the GPU's SMs, the most :func:`_lanes` lays the transfers out on); the others are accepted and ignored
        (the pipeline passes every method the same options).

    Raises CollsError for a collective the method does not make, a rank count that is not the
    machine's, an infeasible sketch (naming the constraint family) or a time limit too short for any
    schedule.
    """
    n = collective.nranks
    if n != topology.ngpus:
        raise CollsError(f"{METHOD}: the collective has {n} ranks but {topology.name} has "
                         f"{topology.ngpus} GPUs")
    if collective.kind not in KINDS:
        raise CollsError(f"{METHOD}: {collective.kind} is not made by this method yet (choose from "
                         f"{', '.join(KINDS)})", key="--collective")
    check_size(collective, topology.name)
    _check_number(time_limit, "--time-limit", lower=0.0)
    _check_number(gap, "--gap", lower=0.0, upper=1.0)
    sketch = sketch if sketch is not None else derive_sketch(topology)
    if sketch.nodes != topology.nodes or sketch.gpus_per_node != topology.gpus_per_node:
        raise CollsError(f"{METHOD}: the sketch is for {sketch.nodes} x {sketch.gpus_per_node} GPUs, the "
                         f"machine has {topology.nodes} x {topology.gpus_per_node}", key="--sketch")
    chunkup = collective.chunks if collective.chunks != 1 else sketch.chunkup
    if collective.kind == "allreduce":
        coll = collective.with_chunks(n * chunkup)
    else:
        coll = collective.with_chunks(chunkup)
    settings = Settings(time_limit=float(time_limit), gap=float(gap), seed=int(seed), threads=int(threads))
    max_tbs = min(options.get("max_tbs") or topology.min_sms(), topology.min_sms())
    builder = _Builder(topology, coll, sketch, size, settings, progress, options.get("inplace", True), max_tbs)
    schedule = builder.build()
    schedule.info.update(schedule_facts(schedule, topology))
    return schedule


# The solves made while sharing_solves() is on, (problem, settings, solution), for the solves after them; None: off
_SHARED: list | None = None


@contextmanager
def sharing_solves():
    """Within it, a problem solved before with the same settings takes that solution instead of a second solve.
    CP-SAT runs deterministically here (one worker, a fixed seed, a deterministic time limit: module docstring),
    so it is the solution a second solve would find. An allreduce solves the reduce-scatter's problem and the
    allgather's (a reduction is an allgather solved on the reversed machine, :meth:`_Builder.build`), so colls
    compile, which makes all three, solves each once (on 16 x DGX A100 the two are 10 and 30 s). Problems and
    settings are compared whole (dataclass equality)."""
    global _SHARED
    outer = _SHARED
    _SHARED = [] if outer is None else outer
    try:
        yield
    finally:
        _SHARED = outer


def _solve(problem: Problem, settings: Settings):
    """:func:`colls.synth.milp_model.solve`, or the solution of the same problem solved before (sharing_solves)."""
    if _SHARED is None:
        return solve(problem, settings)
    for p, s, solution in _SHARED:
        if s == settings and p == problem:
            return solution
    solution = solve(problem, settings)
    _SHARED.append((problem, settings, solution))
    return solution


def check_size(collective: Collective, where: str, target=None) -> None:
    """Refuse more GPUs than :data:`MAX_GPUS` (alltoall: :data:`MAX_GPUS_ALLTOALL`): minutes, then a refusal."""
    most = MAX_GPUS_ALLTOALL if collective.kind == "alltoall" else MAX_GPUS
    if collective.nranks > most:
        what = "a chunk for every pair of GPUs" if collective.kind == "alltoall" else "a chunk per GPU"
        raise too_many_gpus(METHOD, collective, where, most, f"its model has a connection per pair of GPUs and "
                            f"{what}, minutes of solving beyond")


def _check_number(value, key: str, lower: float, upper: float | None = None) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < lower or (upper is not None and value > upper) or (key == "--time-limit" and value <= 0):
        where = f"> {lower:g}" if key == "--time-limit" else f"in {lower:g}..{upper:g}"
        raise CollsError(f"must be a number {where}, got {value!r}", key=key)


class _Builder:
    """States the problem(s) of one collective, solves them and turns the solutions into ops."""

    def __init__(self, topology, coll, sketch, size, settings, progress, inplace=True, max_tbs=None):
        self.topo = topology
        self.inplace = inplace
        self.max_tbs = max_tbs          # threadblocks a GPU holds (its SMs, the target's limit): _lanes
        self.coll = coll
        self.sketch = sketch
        self.settings = settings
        self.progress = progress
        self.start = time.perf_counter()
        n = coll.nranks
        if "chunk_bytes" in topology.meta and size is None:
            self.chunk_bytes = int(topology.meta["chunk_bytes"])
            self.message = self.chunk_bytes * coll.nchunksperloop
        else:
            self.message = DEFAULT_BUFFER if size is None else int(size)
            self.chunk_bytes = max(1, self.message // coll.nchunksperloop)
        self.n = n
        self.stages: dict = {}
        self.notes: list = []
        # the runtime's costs (colls.runtimes.costs: Simple, a stream launch) and one threadblock moving a chunk
        self.costs = model_for("Simple", topology.gpu_model())
        self.copy_us = self.chunk_bytes / (tb_rate(topology.gpu_model()) * 1000)
        # a message moves as the kernel's slices (colls.simulate.engine): each that carries data pays the fixed
        # cost, and the receiver copies the first out while the last arrives, so only the last's copy follows it
        self.slices_paid = data_slices(self.chunk_bytes, SLICE_PER_CHUNK)
        first = slice_bytes(self.chunk_bytes, 0, SLICE_PER_CHUNK)
        self.rest_share = (self.chunk_bytes - first) / self.chunk_bytes       # of a message, after its first slice
        self.last_copy_us = self.copy_us * (self.rest_share if self.rest_share > 0 else 1.0)
        self.tail_us = 0.0          # what runs after the last transfer (an in-place alltoall's copies)
        # each transfer as timed by the solution: (phase: its first step, step, source, destination, start,
        # arrival, whether its data is there from the call's start), in its phase's time units (:func:`_holds`)
        self.timed: list = []

    # --- problems -------------------------------------------------------------------------------------
    def connections(self, reverse: bool) -> tuple[dict, float]:
        """(u, v) -> Connection in the problem's world (reverse: (u, v) is the real v -> u), and the
        time unit in microseconds. A transfer holds its route's links for its bytes at their bandwidth as
        the runtime reaches it (``beta``); it is usable at the receiver ``alpha + beta`` after it starts, where
        ``alpha`` is what the runtime adds without holding a link (module docstring: the costs)."""
        topo, sk, G = self.topo, self.sketch, self.topo.gpus_per_node
        reached = topo.effective()
        costs = self.costs
        copy_us = self.copy_us
        raw = {}
        for a in range(self.n):
            for b in range(self.n):
                if a == b:
                    continue
                inter = a // G != b // G
                if inter and b % G not in sk.receivers(a % G):
                    continue
                route = topo.route(a, b)
                if route is None:
                    continue
                beta = float(Fraction(self.chunk_bytes) / (reached.route_bandwidth(route) * 1000))
                # the route's latency, the sender's fixed cost per message (and the proxy's, across nodes), its
                # threadblock's copy rate where that is below the links', and the receiver's copy out of the FIFO
                fixed = costs.step_us * self.slices_paid
                lat = (topo.route_latency(route) + fixed + (costs.net_step_us if inter else 0.0)
                       + max(0.0, copy_us - beta) + self.last_copy_us)
                links = tuple(zip(route, route[1:]))
                busy = fixed + max(beta, copy_us)       # the sending threadblock: its fences, its copy
                # its FIFO slot: the one the transfer after next waits for is its first slice's, free once that
                # slice is copied out, a fixed cost and the rest of the sender's copy before the whole arrives
                hold = lat + beta - (self.slices_paid - 1) * costs.step_us - max(beta, copy_us) * self.rest_share
                raw[(b, a) if reverse else (a, b)] = (lat, beta, links, inter, a % G, busy, hold)
        smallest = min(r[1] for r in raw.values())
        unit = smallest / MIN_UNITS
        conns = {k: Connection(max(0, round(lat / unit)), max(1, round(beta / unit)), links, inter, s,
                               max(1, round(busy / unit)), max(1, round(hold / unit)))
                 for k, (lat, beta, links, inter, s, busy, hold) in raw.items()}
        return conns, unit

    def problem(self, kind: str, reverse: bool = False, chunks: int | None = None) -> Problem:
        """The model of ``kind`` (allgather, broadcast or alltoall) with ``chunks`` chunks per source."""
        n, G, sk = self.n, self.topo.gpus_per_node, self.sketch
        c = self.coll.chunks if chunks is None else chunks
        conns, unit = self.connections(reverse)
        everyone = frozenset(range(n))
        if kind == "alltoall":
            items = [Chunk(q, frozenset([b]), q % G) for q in range(n) for b in range(n) if b != q
                     for _ in range(c)]
        elif kind == "broadcast":
            root = self.coll.root
            items = [Chunk(root, everyone - {root}, root % G) for _ in range(c)]
        else:
            items = [Chunk(q, everyone - {q}, q % G) for q in range(n) for _ in range(c)]
        switch_pairs = frozenset((u, v) for (u, v), conn in conns.items() if not conn.inter
                                 and any(u % G in s and v % G in s for s in sk.switches))
        strategy = sk.switch_strategy[0] if sk.strategy == "switch" and sk.switch_strategy else None
        # on the reversed machine a rank's transfers of a chunk are the partial sums it adds one after another,
        # each at one threadblock's copy rate
        fan = round(self.copy_us / unit) if reverse else 0
        problem = Problem(n, G, conns, items, kind != "alltoall", sk.senders_of, sk.own_chunks_first,
                          switch_pairs=switch_pairs, switch_strategy=strategy,
                          link_strategy=sk.strategy if sk.strategy in ("minmax", "maxmin") else None,
                          unit_us=unit, any_path=kind == "broadcast", fan=fan, pair_lanes=PAIR_LANES,
                          lane_ops=LANE_OPS, fifo=FIFO_MESSAGES)
        perms, maps = [], []
        for offset, group in sk.symmetry:
            perm = symmetry_permutation(n, offset, group)
            if kind == "broadcast":
                problem.notes.append(f"symmetry [{offset}, {group}] dropped: it moves the root")
                continue
            mp = chunk_map(problem, perm)
            if mp is None:
                problem.notes.append(f"symmetry [{offset}, {group}] dropped: the sketch's relay "
                                     f"connections do not map onto themselves under it")
                continue
            perms.append(perm)
            maps.append(mp)
        problem.group, problem.chunk_maps = closure(perms, n, maps, len(items))
        return problem

    def run(self, name: str, problem: Problem):
        solution = _solve(problem, self.settings)
        unit = problem.unit_us
        stage = {"objective_us": round(solution.makespan * unit, 4),
                 "lower_bound_us": round(solution.bound * unit, 4),
                 "gap": round(solution.gap, 6), "status": solution.status,
                 "solve_seconds": round(solution.seconds, 3),
                 "greedy_us": round(solution.greedy * unit, 4), "decisions": solution.variables}
        self.stages[name] = stage
        for note in solution.notes:
            if note not in self.notes:
                self.notes.append(note)
        if self.progress is not None:
            self.progress(f"{METHOD} {name}: incumbent {stage['objective_us']:.2f} us, bound "
                          f"{stage['lower_bound_us']:.2f} us ({solution.status}), "
                          f"{time.perf_counter() - self.start:.1f} s elapsed")
        return solution

    # --- schedules ------------------------------------------------------------------------------------
    def build(self) -> Schedule:
        kind = self.coll.kind
        if kind == "allgather":
            p = self.problem("allgather")
            ops = self._multicast(p, self.run("allgather", p), 0, _allgather_slots(self.coll))
            scratch = 0
        elif kind == "broadcast":
            p = self.problem("broadcast")
            root = self.coll.root
            ops = [Op(0, root, root, "i", 0, "o", 0, self.coll.chunks)]
            ops += self._multicast(p, self.run("broadcast", p), 1, lambda c: (("i", c), ("o", c)),
                                   copy=False)
            scratch = 0
        elif kind == "alltoall":
            p = self.problem("alltoall")
            ops, scratch = self._alltoall(p, self.run("alltoall", p))
        elif kind == "reducescatter":
            p = self.problem("allgather", reverse=True)
            c = self.coll.chunks
            ops = self._reduce(p, self.run("reduce-scatter", p), 0, "s", lambda k, owner: k - owner * c)
            scratch = self.n * c
        elif kind == "reduce":
            p = self.problem("broadcast", reverse=True)
            ops = self._reduce(p, self.run("reduce", p), 0, "s")
            scratch = self.coll.chunks
        else:  # allreduce: chunk q m + j is reduced to q, then sent from q to every rank
            m = self.coll.chunks // self.n
            back = self.problem("allgather", reverse=True, chunks=m)
            rs = self.run("reduce-scatter", back)
            ops = self._reduce(back, rs, 0, "o")
            forward = self.problem("allgather", chunks=m)
            if _same(forward, back):
                ag, self.stages["allgather"] = rs, dict(self.stages["reduce-scatter"], reused=True)
            else:
                ag = self.run("allgather", forward)
            first = 1 + max(op.step for op in ops)
            ops += self._multicast(forward, ag, first, lambda c: (("o", c), ("o", c)), copy=False, ready=False)
            scratch = 0
        ops = _lanes(ops, self.max_tbs)
        holds = _holds(self.timed)
        if holds:
            sends = {op.step: op for op in ops if not op.local}     # a transfer each step
            ops = [replace(op, after=(y.step, y.lane, y.dst)) if not op.local and (y := sends.get(holds.get(op.step)))
                   else op for op in ops]
        schedule = Schedule(self.coll, ops, METHOD, scratch)
        schedule.info.update(self.facts(), lanes=len(schedule.lanes))
        if kind == "alltoall":
            schedule.info["staged_blocks"] = staged_blocks(ops, self.coll)
        return schedule

    def facts(self) -> dict:
        stages = self.stages
        # the phases run one after another, in one call: its launch once
        fixed = self.costs.launch_us + self.tail_us
        total = fixed + sum(s["objective_us"] for s in stages.values())
        bound = fixed + sum(s["lower_bound_us"] for s in stages.values())
        return {"objective_us": round(total, 4), "lower_bound_us": round(bound, 4),
                "launch_us": round(self.costs.launch_us, 4),
                "gap": round(0.0 if total <= 0 else max(0.0, (total - bound) / total), 6),
                "stages": stages, "solve_seconds": {k: s["solve_seconds"] for k, s in stages.items()},
                "sketch": sketch_text(self.sketch), "chunk_bytes": self.chunk_bytes,
                "message_bytes": self.message, "time_limit": self.settings.time_limit,
                "relative_gap_limit": self.settings.gap, "notes": list(self.notes)}

    def _route(self, a: int, b: int) -> tuple:
        return self.topo.route(a, b)

    def _multicast(self, problem: Problem, sol, first: int, slots, copy: bool = True,
                   ready: bool = True) -> list[Op]:
        """Ops of a solved allgather/broadcast: the source sends from its slot, every receiver writes
        its output slot and relays from there. ``slots(chunk) = ((src buf, idx), (dst buf, idx))``; ``ready``:
        the sources' slots hold their data from the call's start (an allreduce's second phase: they do not)."""
        ops = []
        if copy:
            for q in range(self.n):
                (sb, si), (db, di) = slots(q * self.coll.chunks)
                ops.append(Op(0, q, q, sb, si, db, di, self.coll.chunks))
            first = max(first, 1)
        order = sorted(sol.sends, key=lambda s: (s[3], s[4], s[0], s[1], s[2]))
        hop: dict = {}
        for k, (c, u, v, s, a) in enumerate(order):
            (sb, si), (db, di) = slots(c)
            src = (sb, si) if u == problem.chunks[c].src else (db, di)
            self.timed.append((first, first + k, u, v, s, a, ready and u == problem.chunks[c].src))
            hop[c, v] = hop.get((c, u), 0) + 1
            ops.append(Op(first + k, u, v, *src, db, di, lane=_family(problem.chunks[c].src + c, hop[c, v]),
                          route=self._route(u, v)))
        return ops

    def _reduce(self, problem: Problem, sol, first: int, partial: str, out=lambda k, owner: k) -> list[Op]:
        """Ops of a reduction from the solved allgather/broadcast on the reversed machine: the send
        u -> v over [s, a] becomes v -> u over [T - a, T - s]. Chunk k is input ``k`` of every rank
        and ends in its owner's output ``o[out(k, owner)]``; partial sums wait in ``partial[k]`` on the
        way. A GPU's first child is reduced with its own input, later ones with the partial sum.

        The ops go in the order the partial sums arrive (T - s), which is the order a GPU adds them in: its
        additions into one buffer are a chain, and the model spaces them a copy's time apart by arrival
        (``Problem.fan``). In the order the transfers start (T - a), a partial sum that crosses the nodes
        starts early and arrives last, and every addition after it in the chain waited for it: 2 x DGX A100
        reduce-scatter at 1 MB, 76.4 -> 68.3 us simulated (objective 68.2)."""
        T = sol.makespan
        depth: dict = {}
        for k, u, v, s, a in sorted(sol.sends, key=lambda s: (s[3], s[4], s[0], s[1], s[2])):
            depth[k, v] = depth.get((k, u), 0) + 1
        real = sorted(((T - s, T - a, k, v, u) for k, u, v, s, a in sol.sends))
        has_partial: set = set()
        ops = []
        for step, (end, begin, k, src, dst) in enumerate(real):
            owner = problem.chunks[k].src
            from_slot = (partial, k) if (src, k) in has_partial else ("i", k)
            target = ("o", out(k, owner)) if dst == owner else (partial, k)
            operand = target if (dst, k) in has_partial else ("i", k)
            has_partial.add((dst, k))
            self.timed.append((first, first + step, src, dst, begin, end, from_slot[0] == "i"))
            ops.append(Op(first + step, src, dst, *from_slot, *target, reduce=operand,
                          lane=_family(owner + k, depth[k, src]),
                          route=self._route(src, dst)))
        return ops

    def _alltoall(self, problem: Problem, sol) -> tuple[list[Op], int]:
        """Ops of a solved alltoall: chunk (q, b, j) reads ``i[b c + j]`` at q, waits in scratch at
        relays (a slot of its own) and lands in ``s[q c + j]`` at b; local copies place the arrivals
        in the output after the last transfer (right for in-place calls too). A file for out-of-place calls
        only (``inplace`` False) lands every chunk in ``o[q c + j]`` at once and copies nothing."""
        n, c = self.n, self.coll.chunks
        land, base = ("s", n * c) if self.inplace else ("o", 0)
        ops = [Op(0, r, r, "i", r * c, "o", r * c, c) for r in range(n)]
        order = sorted(sol.sends, key=lambda s: (s[3], s[4], s[0], s[1], s[2]))
        where: dict = {}
        transit: dict = {r: 0 for r in range(n)}
        hops: dict = {}
        before: dict = {}                   # chunk -> how many equal chunks come before it
        rank_of: list = []                  # chunk index -> j: its place among the chunks equal to it
        for chunk in problem.chunks:
            rank_of.append(before.get(chunk, 0))
            before[chunk] = rank_of[-1] + 1
        for k, (ch, u, v, _, _) in enumerate(order):     # no send held (_holds says why)
            chunk = problem.chunks[ch]
            q, (b,) = chunk.src, tuple(chunk.dests)
            j = rank_of[ch]
            src = where.get(ch, ("i", b * c + j))
            if v == b:
                dst = (land, q * c + j)
            else:
                dst = ("s", base + transit[v])
                transit[v] += 1
            where[ch] = dst
            hops[ch] = hops.get(ch, 0) + 1
            ops.append(Op(1 + k, u, v, *src, *dst, lane=_family(q + b, hops[ch]), route=self._route(u, v)))
        last = 1 + len(order)
        if self.inplace:    # the copies run after the last transfer, each rank's on one threadblock
            self.tail_us = (n - 1) * c * self.copy_us
            for r in range(n):   # one copy per run of arrivals: the chunks before the rank's own, and after
                ops += [Op(last, r, r, "s", a, "o", a, b - a) for a, b in ((0, r * c), ((r + 1) * c, n * c)) if b > a]
        return ops, base + max(transit.values())


def _holds(timed: list) -> dict:
    """step -> step: each transfer whose data is there from the call's start and that the solution starts
    later, held until the transfer its GPU sends that the solution has arrive last by that start.

    A file has no clock: such a send starts as soon as its threadblock reaches it, and where it is a
    threadblock's first step, at once. Every leaf of a GPU then sends together and shares its links with the
    transfers the solution timed first, which arrive late, and every addition or relay after them waits (2 x
    DGX-2 reduce-scatter at 1 MB: 85.2 us simulated against an objective of 75.6; held, 76.8). A send ends no
    later than it arrives, so the held one starts no later than the solution says where its GPU's sends before it
    are on time. Held for a transfer the GPU receives as well, it waited on what the model leaves out (a
    receiving threadblock's turns) and lost where calls take many passes: the same reduce-scatter at 1 GB 38.1 ->
    31 GB/s busbw, against 38.6 held for sends. Within a phase (an allreduce's second reads what the first wrote,
    and holds nothing): its times start again at 0. A transfer that arrives by another's start starts before it,
    so its step comes first in either order the phases number them in (by start, or by arrival for a reduction):
    every hold waits back in time. An alltoall's sends
    are not held: a GPU pair's many transfers wait on the receiver's FIFO there, and a held send waits on every
    such delay of the send before it (2 nodes, 1 MB: DGX-2 216.8 -> 225.5 us, NDv2 466.6 -> 473.3, objectives
    213.9 and 418.4)."""
    sent: dict = defaultdict(list)          # (phase, rank) -> (arrival, step) of the transfers it sends
    for phase, step, u, _, _, a, _ in timed:
        sent[phase, u].append((a, step))
    for events in sent.values():
        events.sort()
    out = {}
    for phase, step, u, _, s, _, ready in timed:
        if ready and s > 0:
            events = sent[phase, u]
            i = bisect.bisect_right(events, (s, math.inf)) - 1
            if i >= 0:
                out[step] = events[i][1]
    return out


def _family(family: int, hop: int) -> int:
    """The provisional lane of a transfer: its chunk's family number and the parity of its hop."""
    return 2 * family + hop % 2


def _lanes(ops: list[Op], max_tbs: int | None = None) -> list[Op]:
    """Final lanes: the hop's parity, plus twice the chunk family modulo K, K the smallest count that
    leaves no GPU pair more than about LANE_OPS transfers per lane (the runtime's threadblocks hold
    at most 64 steps); local ops stay on lane 0.

    A chunk's consecutive hops are on lanes of different parity, so a relay receives a chunk and
    forwards it in two threadblocks that run side by side. This is a choice of speed, not of safety:
    on one lane the lowering fuses the two into one receive-copy-send (and splits any fusion that would
    close a wait cycle), which saves a step, but one threadblock then receives and forwards one message
    after the other, and the parity's second channel is gone. colls.simulate, busbw at 1 KB / 1 MB /
    1 GB on 2 x NDv2 allgather: 0.0187 / 10.1 / 23.1 GB/s with the parity, 0.0122 / 6.63 / 14.2 fused
    on one channel, 0.0177 / 8.96 / 20.5 fused on two; 2 x NDv2 allreduce 9.19 against 7.44 at 1 MB;
    2 x DGX-2 is mixed (allgather 1 MB 21.6 against 23.5 fused, 1 GB 81.2 against 80.2).

    K is one count for every pair, so every pair a GPU talks to has a threadblock on each of the 2 K lanes.
    When that is more threadblocks than a GPU holds (``max_tbs``: its SMs, the target's limit), each pair gets
    the count its own transfers need instead: a GPU that relays many chunks between nodes spreads those over
    lanes, and its pairs inside the node stay on two (8 x NDv2 alltoall: 110 threadblocks a GPU with one K,
    over its 80 SMs)."""
    per: dict = {}
    for op in ops:
        if not op.local:
            for key in ((op.src, op.dst), (op.dst, op.src)):
                per[key] = per.get(key, 0) + 1

    def need(n: int) -> int:
        return min(MAX_LANES // 2, max(1, -(-n // LANE_OPS)))

    count = need(max(per.values(), default=0))
    out = [replace(op, lane=0 if op.local else op.lane % 2 + 2 * ((op.lane // 2) % count)) for op in ops]
    if max_tbs is None or _threadblocks(out) <= max_tbs:
        return out
    return [replace(op, lane=0 if op.local else op.lane % 2 + 2 * ((op.lane // 2) % need(per[op.src, op.dst])))
            for op in ops]


def _threadblocks(ops: list[Op]) -> int:
    """The fewest threadblocks the busiest rank needs for ``ops`` on their lanes (those of its remote ops,
    :func:`colls.schedule.fewest_threadblocks`, and one for its local copies on each lane that has them)."""
    per_rank = fewest_threadblocks(channel_peers(ops, lambda op: op.lane))
    local = defaultdict(set)
    for op in ops:
        if op.local:
            local[op.src].add(op.lane)
    for rank, lanes in local.items():
        per_rank[rank] += len(lanes)
    return max(per_rank.values(), default=0)


def _allgather_slots(coll: Collective):
    c = coll.chunks

    def slots(k: int):
        return ("i", k % c), ("o", k)
    return slots


def _same(a: Problem, b: Problem) -> bool:
    """Whether two problems are the same model (a symmetric machine equals its reversal), but for the reversed
    one's ``fan``: a schedule that keeps it is one the forward problem may run."""
    return (a.conns, a.chunks, a.group, a.senders_of, a.switch_pairs) == \
        (b.conns, b.chunks, b.group, b.senders_of, b.switch_pairs) and a.unit_us == b.unit_us
