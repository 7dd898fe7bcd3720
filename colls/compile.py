"""``colls compile``: the fastest file for every range of call sizes, in a folder a runtime loads as is.

For each collective asked for, every method (:data:`METHODS`: ring, direct, trees, milp; and hier, of
:data:`OPTIONAL_METHODS`, on more than one node or when ``--methods`` names it) synthesizes a schedule once; each is lowered again with 1, 2, 4 and 8 independent copies (``--instances``) while the
copies get channels of their own and the target loads the result (trees and direct: its most copies also made
again carrying several chunks a tree or pieces a block, as deep as simulates faster, :func:`colls.tune.deepest`),
and every variant runs at each protocol (LL, LL128, Simple). The simulator (:mod:`colls.simulate`) times the fastest of those per method at every call size (the search skips a
configuration only when a proven lower bound shows it cannot win by more than 0.1 %, :class:`colls.simulate.baseline.
Fastest`), and times NCCL's own ring (and, for allreduce, its tree) at its best protocol, on the channels
NCCL's per-call rule gives. At each size the winner is the fastest file, unless the runtime's own algorithm is within the
model's measured error in that size band (:func:`colls.runtimes.calibration.margin`, from the comparison with
published runs in bench/CALIBRATION.md) of it: then no file claims the size and the runtime keeps it
("NCCL's own"). The runtime's algorithms are timed first, so a method is simulated at a size only as
far as it could still take it: a configuration whose proven lower bound is above the runtime's time less the
margin is not simulated (:meth:`colls.simulate.baseline.Fastest.time` with ``beat``), and a method none of
whose configurations gets below it is "out of reach" there (its curve stops; ``--json`` gives the busbw
it cannot exceed). The ranges are the ones timing every cell in full gives.

Consecutive sizes with the same winner form one range; a range's file is lowered once more with its
``minBytes``/``maxBytes`` and proved before anything is written. Range edges fall on the simulated
sizes: a range whose last simulated size is S ends at S bytes and the next starts at S + 1 (the first
starts at 0, the last has no upper limit); ``old`` selects ``[minBytes, maxBytes)``, so its ends are
S + 1. A call whose element count does not divide a file's ``nchunksperloop`` falls back to the
runtime's algorithm inside the range (``colls explain`` says so for any call).

The folder (:func:`write`): ``algorithms/`` holds the XML files and nothing else (the runtimes try to
load every file of their algorithm folder, and a file that fails stops the ones after it), named so that
sorted order is range order; ``README.md`` lists the ranges with the modelled busbw, the share of the
optimum and NCCL's modelled busbw, and ``<collective>.png`` plots the chosen curve against each
method's and NCCL's; ``env.sh`` sets what the target needs. Everything is written into a new folder
beside ``DIR`` and swapped in at the end, so a run that fails leaves ``DIR`` as it was; identical inputs
give byte-identical files.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Callable

from colls import bound as bounds
from colls import pipeline, tune
from colls.parallel import in_processes
from colls.collectives import Collective, busbw_factor
from colls.errors import CollsError, LimitError
from colls.files import check_output, write_atomic
from colls.runtimes import calibration, get_target
from colls.runtimes import mscclpp as rt
from colls.simulate import Timing, parse_sizes, served, size_text
from colls.simulate.baseline import Fastest, RuntimeDefault
from colls.simulate.plans import unit_words
from colls.verify.execution import fifo_messages

METHODS = ("ring", "direct", "trees", "milp")
# methods compile runs on machines of more than one node (or when --methods names them): hier (the node's trees
# joined along the rails) is made for machines of many nodes, where it is the one method whose steps grow with the
# nodes over the GPUs per node; on one node it has no hierarchy
OPTIONAL_METHODS = ("hier",)


def default_methods(topology) -> tuple:
    """The methods compile tries on ``topology`` when none are named: :data:`METHODS`, and hier on more than one
    node."""
    return METHODS + (OPTIONAL_METHODS if topology.nodes > 1 else ())


COPIES = (1, 2, 4, 8, 16, 32)
# milp's solver budget per stage in compile, CP-SAT deterministic seconds (synth's default is 10): measured on a
# 2-core AMD EPYC, the 4 x DGX A100 alltoall reaches at 0.5 the schedule it has at 10 (34.06 us, 82 s of wall
# time at 10), the 2 x MI250 alltoall 36.72 us at 2 (12 s) against 37.42 at 1; compile simulates the schedule
# at every size and the model's error at small sizes is larger than what more search buys there
MILP_TIME_LIMIT = 2.0
# ...and the gap at which it stops (synth's default is 1 %): on a large machine the solver finds its schedule
# early and spends the rest of the budget on the bound. On 16 x dgx-a100 (128 GPUs) the allgather's schedule is
# there at 0.05 deterministic s, 6.2 % above the bound, and the budget's 2 s (14 s of wall time) only proves it
# optimal; the allreduce takes 36 s for the same. At 10 % they take 2 and 3.5 s, the same schedules. Measured at
# 2 nodes of every shipped profile (alltoall, allreduce, allgather): the same schedules but the 2 x ndv2
# alltoall's, 342.7 us in the model against 338.1 (1.3 %), well within what the model misses of the simulated time;
# on 1 x ndv2 the allgather, reducescatter and allreduce stop at other schedules too (bench/PLANS.md)
MILP_GAP = 0.1
DEFAULT_SIZES = "1KB:1GB:4"      # 1KB, 4KB, ..., 1GB: 11 sizes (the last range has no upper limit)
ALL = ("allreduce", "allgather", "reducescatter", "alltoall")   # --collective all (+ rooted with --root)
OLD_MAX_FILES = get_target("old").max_files  # MSCCL_XML_FILES holds at most 4 files in the older runtime
MARKER = "<!-- written by colls compile -->"
ALGORITHMS = "algorithms"
PLAN_TARGET = "mscclpp"     # MSCCL++ JSON execution plans (colls.mscclpp); the schedules are lowered as for exe
PLANS = "plans"             # the folder of plans (MSCCLPP_EXECUTION_PLAN_DIR: nothing else may be in it)
REGISTER = "register_plans.py"


@dataclass
class Method:
    """One method's variants for one collective (or why it made none)."""

    name: str
    variants: list = field(default_factory=list)     # Compiled, Simple, one per copy count (plans: and unit)
    refused: str | None = None
    timings: list = field(default_factory=list)      # Timing or None per size (not served: out of reach)


@dataclass
class Range:
    """Consecutive simulated sizes with one winner."""

    first: int                   # index of the first simulated size
    last: int                    # index of the last
    winner: tuple | None         # (method, variant index, protocol) or None: the runtime's own algorithm
    min_bytes: int = 0
    max_bytes: int = 0           # 0: no limit (exe, rccl)
    file: str | None = None
    compiled: object = None
    note: str | None = None
    plans: list = field(default_factory=list)     # --target mscclpp: (file name, plan) per call type


@dataclass
class Plan:
    """What compile decided for one collective."""

    kind: str
    root: int | None
    sizes: list
    methods: list
    nccl: list                   # Timing per size (the faster of NCCL's ring and tree)
    bound: object
    ranges: list
    notes: list = field(default_factory=list)
    margins: list = field(default_factory=list)   # per size: how much faster a file must be to take it
    ngpus: int = 0

    def best_timing(self, i: int) -> Timing | None:
        """The timing the chosen configuration gives at size index ``i`` (None: NCCL's own, not modelled)."""
        for r in self.ranges:
            if r.first <= i <= r.last:
                if r.winner is None:
                    return self.nccl[i]
                return next(m for m in self.methods if m.name == r.winner[0]).timings[i]
        raise IndexError(i)


def plan(topology, kinds, *, target: str = "exe", root: int | None = None, sizes=None, methods=None,
         sketch=None, milp_options: dict | None = None, jobs: int = 1, margin: float | None = None,
         max_threadblocks: int | None = None, progress: Callable[[str], None] = lambda line: None) -> list[Plan]:
    """Synthesize, simulate and choose, for each collective in ``kinds`` (nothing is written).

    ``margin``: how much faster (a fraction) a file must be than the runtime's own algorithm to take a size;
    None: the model's measured error in the size's band (:func:`colls.runtimes.calibration.margin`).
    ``max_threadblocks``: every file within that many threadblocks per GPU (the methods fit their counts and
    copies to it; :func:`colls.pipeline.budgeted`); the runtime's own algorithm is modelled as it runs.
    ``methods``: default :func:`default_methods`."""
    methods, sizes, margins, milp = _settings(topology, methods, sizes, margin, milp_options, sketch)
    plans, collectives = [], []
    for kind in kinds:
        rooted = kind in ("broadcast", "reduce")
        coll = Collective(kind, topology.ngpus, root=(root or 0) if rooted else 0)
        try:
            bound = bounds.bound(topology, kind, root=coll.root)
        except CollsError:
            bound = None
        p = Plan(kind, coll.root if rooted else None, sizes, [Method(name) for name in methods], [None] * len(sizes),
                 bound, [], [], margins, topology.ngpus)
        plans.append(p)
        collectives.append(coll)
    # 1. every method's schedules, and the runtime's own algorithms at every size (independent of each other);
    # the runtime's are laid out and timed in the workers too, one task per collective (laying them out is
    # seconds on a large machine, which the parent would spend while the workers wait)
    budget = {} if max_threadblocks is None else {"max_threadblocks": max_threadblocks}
    # one task per method and collective, but milp's collectives that solve the same problems in one (_together);
    # the longest-looking first, so no long task starts last while the other processes wait (see _slow_first)
    made = [(pis, name, None) for name in methods for pis in _together(name, [p.kind for p in plans])]
    parts = _runtime_parts(sizes, jobs - len(made), len(plans))
    synth = sorted(made + [((pi,), RUNTIME, part) for pi in range(len(plans)) for part in parts],
                   key=lambda x: _slow_first(x[1], plans[x[0][0]].kind))
    tasks = [(f"{', '.join(plans[pi].kind for pi in pis)}: synthesizing with {name}",
              partial(_each, partial(_variants, topology), [(collectives[pi], name, target, dict(
                  milp if name == "milp" else {}, **budget), sizes) for pi in pis])) if name != RUNTIME else
             (f"{plans[pis[0]].kind}: timing the runtime's own algorithms",
              partial(_runtime_times, topology, plans[pis[0]].kind, collectives[pis[0]].root, target,
                      [sizes[i] for i in part], plans[pis[0]].bound))
             for pis, name, part in synth]
    progress(f"synthesizing with {', '.join(methods)} for {', '.join(kinds)}, and timing the runtime's own "
             f"algorithms at {len(sizes)} sizes from {size_text(sizes[0])} to {size_text(sizes[-1])} "
             f"({_processes(jobs)})")
    noted = set()
    for (pis, name, part), done in zip(synth, in_processes(tasks, jobs, progress)):
        if name != RUNTIME:
            for pi, m in zip(pis, done):
                plans[pi].methods[methods.index(name)] = m
            continue
        p = plans[pis[0]]
        times, notes = done
        for i, t in zip(part, times):
            p.nccl[i] = t
        if pis[0] not in noted:         # every part of one collective says the same
            noted.add(pis[0])
            p.notes = notes + p.notes
    for p in plans:
        if not any(m.variants for m in p.methods):
            p.notes.append("no method made a file: the runtime keeps every size")
    # 2. each method's files at each size, only as far as they could beat the runtime's time less the margin;
    # one task per method, which lays its files out for the simulator (seconds on a large machine) and times
    # them at every size, the slowest-looking first (see _slow_to_simulate)
    timed = sorted([(p, m) for p in plans for m in p.methods if m.variants],
                   key=lambda pm: _slow_to_simulate(pm[1].name, pm[0].kind))
    progress(f"simulating the methods' files at {len(sizes)} sizes ({_processes(jobs)})")
    for (p, m), timings in zip(timed, in_processes(
            [(None, partial(_time_method, topology, p.kind, m.variants, target, sizes, p.bound,
                            [None if t is None else t.time_us * (1 - mg) for t, mg in zip(p.nccl, margins)]))
             for p, m in timed], jobs, progress)):
        m.timings = timings
    for p in plans:
        p.ranges = _ranges(p.methods, p.nccl, sizes, target, margins)
    if target == "old":
        _keep_old_files(plans)
    return plans


RUNTIME = "runtime"     # in plan's first stage: the task that times the runtime's own algorithms


def _settings(topology, methods, sizes, margin, milp_options, sketch) -> tuple:
    """What :func:`plan` and :func:`plan_mscclpp` run with: the methods (default :func:`default_methods`), the sizes
    sorted (default :data:`DEFAULT_SIZES`), each size's margin (given, or the model's measured error there) and
    milp's options (:func:`milp_settings`)."""
    methods = default_methods(topology) if methods is None else methods
    sizes = sorted(set(sizes or parse_sizes(DEFAULT_SIZES)))
    margins = [margin if margin is not None else calibration.margin(s)[0] for s in sizes]
    return methods, sizes, margins, milp_settings(milp_options, sketch)


def milp_settings(options: dict | None = None, sketch=None) -> dict:
    """milp's options in compile: its budget and gap (:data:`MILP_TIME_LIMIT`, :data:`MILP_GAP`) unless
    ``options`` say otherwise, and the sketch when one is given."""
    return dict({"time_limit": MILP_TIME_LIMIT, "gap": MILP_GAP}, **(options or {}),
                **({"sketch": sketch} if sketch is not None else {}))


# How long a method's synthesis tends to take, longest first: the searches (milp's solver runs to its time
# limit on the larger collectives; the runtime's own algorithms, laid out and simulated at every size; trees
# packs and re-lowers at several counts) before the constructions (hier lowers up to 8 copies of its
# schedule: 4-7 s on 16 x dgx-a100, like the ring); and
# within a method the collective with most to place (allreduce's two halves, alltoall's N x N chunks).
_SLOW_METHODS = ("milp", RUNTIME, "trees", "hier", "ring", "direct")
_SLOW_KINDS = ("allreduce", "alltoall", "reducescatter", "allgather")


# How long a method's files tend to take to simulate, longest first: trees and hier files are simulated whole
# on a large machine (their ranks are not alike), the ring's on one rank of each class of alike ones
# (colls.simulate.symmetry); milp's and direct's serve the small sizes, which are quick.
_SLOW_TO_SIMULATE = ("trees", "hier", "ring", "direct", "milp")


def _slow_to_simulate(method: str, kind: str) -> tuple:
    """Sort key of a simulation task in :func:`plan` (a method not listed goes after those that are)."""
    return _rank(_SLOW_TO_SIMULATE, method), _rank(_SLOW_KINDS, kind)


def fastest(topology, kind: str, variants: list, target: str) -> Fastest:
    """The simulator's search over a method's variants (each at every protocol) for one collective."""
    return Fastest(topology, kind, [({"instances": c.facts["instances"], "index": i}, c.program, None)
                                    for i, c in enumerate(variants)], target=target)


def _time_method(topology, kind: str, variants: list, target: str, sizes: list, bound, beat: list) -> list:
    """The fastest of ``variants`` at each of ``sizes`` (:meth:`colls.simulate.baseline.Fastest.time`, against
    ``beat``, a time per size or None), the largest first (the order changes nothing but when each ends)."""
    search = fastest(topology, kind, variants, target)
    times = {i: search.time(sizes[i], bound, beat[i]) for i in reversed(range(len(sizes)))}
    return [times[i] for i in range(len(sizes))]


def _runtime_parts(sizes: list, spare: int, collectives: int) -> list[tuple]:
    """Each collective's sizes for the runtime's own algorithms, split among the ``spare`` processes the methods'
    tasks leave (one part, all sizes, where they leave none: the runtime's machines laid out once), the
    largest sizes dealt round so that the parts take about as long; each part a task of its own, which lays the
    machines out again (on a large machine seconds, against minutes for every size in one process)."""
    count = max(1, min(len(sizes), spare // max(1, collectives)))
    order = sorted(range(len(sizes)), key=lambda i: -sizes[i])
    return [tuple(sorted(order[k::count])) for k in range(count)]


def _runtime_times(topology, kind: str, root: int, target: str, sizes: list, bound) -> tuple[list, list]:
    """What the runtime of ``target`` runs by itself for ``kind`` (:class:`colls.simulate.baseline.RuntimeDefault`)
    at each of ``sizes``, the largest first (its bounds prune the most there); and the notes that say what
    was left out. No algorithm modelled: None at every size, and a note that says so."""
    try:
        default = RuntimeDefault(topology, kind, root=root, target=target)
    except CollsError as e:
        return [None] * len(sizes), [f"no algorithm of the runtime could be modelled ({e.reason}); every size "
                                     "goes to the fastest file a method made"]
    times = {i: default.time(sizes[i], bound)
             for i in reversed(range(len(sizes)))}
    return [times[i] for i in range(len(sizes))], list(default.notes)


def _slow_first(method: str, kind: str) -> tuple:
    """Sort key of a synthesis task in :func:`plan`: the slowest-looking first (a method or collective not
    listed goes after those that are)."""
    return _rank(_SLOW_METHODS, method), _rank(_SLOW_KINDS, kind)


def _rank(names: tuple, x: str) -> int:
    return names.index(x) if x in names else len(names)


def _processes(jobs: int) -> str:
    return f"{jobs} process{'es' if jobs > 1 else ''}"


# milp's allreduce solves the reduce-scatter's problem and the allgather's (colls.synth.milp.sharing_solves): one
# task makes the three, the allreduce first, so each problem is solved once
_SOLVED_TOGETHER = ("allreduce", "reducescatter", "allgather")


def _together(name: str, kinds: list) -> list[tuple]:
    """The tasks of method ``name`` in :func:`plan` and :func:`plan_mscclpp`: tuples of indices into ``kinds``, one
    collective each, but milp's of :data:`_SOLVED_TOGETHER` in one, in that order."""
    if name != "milp":
        return [(i,) for i in range(len(kinds))]
    shared = tuple(sorted((i for i, k in enumerate(kinds) if k in _SOLVED_TOGETHER),
                          key=lambda i: _SOLVED_TOGETHER.index(kinds[i])))
    return ([shared] if shared else []) + [(i,) for i, k in enumerate(kinds) if k not in _SOLVED_TOGETHER]


def _each(make, calls: list) -> list:
    """``make(*args)`` for each ``args`` of ``calls``, in one process, milp's solves shared (``sharing_solves``)."""
    from colls.synth import milp
    with milp.sharing_solves():
        return [make(*args) for args in calls]


def _variants(topology, coll, name, target, options, sizes=None) -> Method:
    """The method's schedule at 1, 2, 4, ... 32 copies, as far as the target loads them (its count of rings or
    trees already a power of two where one exists: :func:`colls.pipeline.compile_schedule`). A schedule the
    runtime would run for none of ``sizes`` is left out with its copies (they have more chunks per loop
    still)."""
    m = Method(name)
    ncpl = None
    for opts in _pairings(name, coll.kind, options):
        if opts.get("pair_leaves") and m.variants and 2 * len(m.variants[0].schedule.ops) > tune.DEEP_OPS:
            break       # a second base costs what a doubling of the depth does: not past the ops budget either
        # simulated only: the files compile writes are lowered again with their byte ranges and proved then
        # (lower_files), so the proof here would be a second one of the same threadblocks
        first = _first(topology, coll, name, target, opts, m, in_memory=True, prove=False)
        if first is None:
            if m.variants:              # the paired trees refused: those as packed stand
                m.refused = None
                break
            return m
        if opts.get("pair_leaves") and not first.schedule.info.get("leaves_paired"):
            continue                    # nothing to pair: the same trees as the first base
        ncpl = ncpl or first.program.nchunksperloop
        if sizes is None or any(served(first.program, coll.kind, s) is None for s in sizes):
            _copies(first, m)
            _deeper(topology, coll, name, target, opts, m, sizes)
    if not m.variants:
        m.refused = (f"the runtime would run its file for none of the sizes: {ncpl} chunks per loop divide the "
                     "element count of none of them")
    return m


def _pairings(name: str, kind: str, options: dict) -> list:
    """The options of each base the method's variants are made from: a trees reduction twice, its trees as
    packed and with their leaves paired (:func:`colls.synth.trees._pair_leaves`), each with its copies and its
    deeper file, since which wins depends on the size and the machine (2 x DGX A100 reduce-scatter: paired from
    4 MB up; 2 x DGX H100: as packed from 16 KB to 16 MB); every other method once, as asked. The second base
    is made only while twice the first's ops are within :data:`colls.tune.DEEP_OPS`, as a deeper file is: on
    16 x DGX A100 (16,256 and 32,512 ops) both took compile from 91 to 123 s."""
    if tune.pairs(name, kind) and "pair_leaves" not in options:
        return [dict(options, pair_leaves=False), dict(options, pair_leaves=True)]
    return [options]


def _first(topology, coll, name, target, options, m: Method | None, make=tune.compile_fastest,
           in_memory: bool = False, prove: bool = True):
    """The method's file (in-place and out-of-place, or out-of-place only: alltoall's default,
    :func:`colls.pipeline.default_mode`, and any schedule refused in place), made by ``make``; None and
    ``m.refused`` set when it makes none. ``in_memory``: checked as built, not emitted (colls compile emits and
    proves again the files it writes, each with its byte range); ``prove``: False checks the target's rules,
    limits and deadlock freedom, not the result (:func:`colls.verify.verify`)."""
    for mode in dict.fromkeys((pipeline.default_mode(coll.kind), "outofplace")):
        try:
            return make(topology, coll, name, target=target, mode=mode, options=options, instances=1,
                        tune_depth=False, in_memory=in_memory, prove=prove)
        except CollsError as e:
            if m is not None:
                m.refused = str(e)
            if not _refused_in_place(e):
                return None
    return None


def _deeper(topology, coll, name, target, options, m: Method, sizes=None) -> None:
    """The method's file with its most copies made again with the deepest pipeline through its schedule that
    simulates faster (:func:`colls.tune.deepest`: trees carrying several chunks each, direct blocks in pieces),
    beside the copies: its smaller messages win the middle and large sizes, and cost the small ones, where the
    copies of one chunk a tree stay to win them. When ``sizes`` go past :data:`colls.tune.SIZES`, a trees file
    is made deeper again while it simulates faster at the largest of them (patiently: :func:`colls.tune.deepest`),
    within :data:`colls.tune.DEEP_WORK`: a chunk grows with the call, and while it is larger than the runtime's
    slice (2 MB for Simple) its messages are whole slices and the pipeline's fill, a slice a hop down or up the
    tree, is as long as at one chunk a tree (2 x DGX A100 trees reduce-scatter, 2 copies: 228 GB/s busbw at 1
    GB at the 8 chunks a tree that win at 16 and 256 MB, 246 at 64; 2 x MI250 under RCCL, one copy: 16 -> 64
    chunks a tree, 1 GB in 4,545 -> 3,852 us). The first file keeps the middle sizes it wins, the second takes
    the largest. A direct file has one hop to fill, and its search at the largest size cost more than the rest
    of compile on 4 x dgx-a100 (62 -> 230 s) for files five times slower there than the trees' (2 x dgx-a100
    allreduce at 1 GB: 44.9 against 8.1 ms)."""
    if not tune.deepens(name, coll.kind) or not m.variants:
        return
    last = m.variants[-1]
    unproved = dict(target=target, mode=last.mode, in_memory=True, prove=False)
    made: dict = {}                     # the files made by depth, for the second search
    deeper, _ = tune.deepest(last, topology, coll, name, options, unproved, made=made)
    if deeper is not last:
        m.variants.append(deeper)
    if name == "trees" and sizes and max(sizes) > tune.SIZES[-1]:
        deepest, _ = tune.deepest(deeper, topology, coll, name, options, unproved, sizes=(max(sizes),), patient=True,
                                  max_ops=tune.DEEP_WORK // topology.ngpus, made=made)
        if deepest is not deeper:
            m.variants.append(deepest)


def _refused_in_place(e: CollsError) -> bool:
    """Whether the file was refused for its in-place calls (the proof's finding names them; the pipeline adds
    that --outofplace-only makes the file): made for out-of-place calls only, it may still serve."""
    return "in-place" in str(e)


def _copies(first, m: Method) -> None:
    """``first`` and its copies, while they get channels of their own and the target loads them."""
    m.refused = None
    m.variants.append(first)
    for copies in COPIES[1:]:
        if not tune.own_channels(m.variants[-1], copies):
            break               # the copies would share channels: rarely faster, and slow to lay out
        try:
            m.variants.append(pipeline.relower(first, instances=copies, only_simulated=True))
        except CollsError:
            break


def _ranges(methods, nccl, sizes, target, margins) -> list[Range]:
    winners = []
    for i in range(len(sizes)):
        best = None
        for m in methods:
            t = m.timings[i] if m.timings else None
            if t is not None and t.served and (best is None or t.time_us < best[1].time_us * (1 - 1e-9)):
                best = (m, t)
        if best is None or (nccl[i] is not None and best[1].time_us > nccl[i].time_us * (1 - margins[i])):
            winners.append(None)
        else:
            m, t = best
            winners.append((m.name, t.extra["index"], t.extra["protocol"]))
    ranges = []
    for i, w in enumerate(winners):
        if ranges and ranges[-1].winner == w:
            ranges[-1].last = i
        else:
            ranges.append(Range(i, i, w))
    for k, r in enumerate(ranges):
        r.min_bytes = 0 if k == 0 else sizes[r.first - 1] + 1
        last = k == len(ranges) - 1
        r.max_bytes = 0 if last else sizes[r.last] + (1 if target in ("old", PLAN_TARGET) else 0)
    return ranges


def _keep_old_files(plans) -> None:
    """The older runtime loads at most 4 files: keep the ranges that save the most time over NCCL."""
    ranked = []
    for p in plans:
        for r in p.ranges:
            if r.winner is not None:
                # the time saved over NCCL (when NCCL is not modelled: the time the file takes)
                saved = sum(p.nccl[i].time_us - p.best_timing(i).time_us if p.nccl[i] is not None
                            else p.best_timing(i).time_us for i in range(r.first, r.last + 1))
                ranked.append((-saved, p.kind, r.first, r))
    ranked.sort(key=lambda x: x[:3])
    for _, _, _, r in ranked[OLD_MAX_FILES:]:
        r.note = (f"left to the runtime: the older runtime loads at most {OLD_MAX_FILES} files "
                  "(MSCCL_XML_FILES), and other ranges save more time")
        r.winner = None


def _chosen(plans):
    """(plan, range, its number among the collective's files, the variant that won it) for each range a file
    or plan takes."""
    for p in plans:
        count = 0
        for r in p.ranges:
            if r.winner is None:
                continue
            name, index, _ = r.winner
            count += 1
            yield p, r, count, next(m for m in p.methods if m.name == name).variants[index]


def lower_files(plans, target: str, jobs: int = 1) -> None:
    """Lower and prove each range's file (with its byte range and protocol), in ``jobs`` processes; name it.
    The files of one variant whose protocols hold as many messages per connection (LL and LL128) are one
    task: the first is lowered and proved, the others take its threadblocks (:func:`colls.pipeline.relower`),
    each checked as written and sharing the first's proof of races and results (the same steps:
    :func:`colls.pipeline._same_steps`)."""
    groups: dict = {}
    for p, r, count, base in _chosen(plans):
        name, _, proto = r.winner
        root = f"-root{p.root}" if p.root is not None else ""
        r.file = f"{p.kind}{root}-{count:02d}-{name}-{proto}-x{base.facts['instances']}.xml"
        groups.setdefault((id(base), fifo_messages(proto)), (base, []))[1].append(r)
    order = sorted(groups.values(), key=lambda g: -_lowering_work(*g))
    tasks = [(None, partial(_lower_group, base, ranges)) for base, ranges in order]
    for (_, ranges), compiled in zip(order, in_processes(tasks, jobs, lambda line: None)):
        for r, c in zip(ranges, compiled):
            r.compiled = c


def _lowering_work(base, ranges) -> int:
    """How long :func:`_lower_group` tends to take, to start the longest first (so no long task starts last):
    the program's steps, twice over when the first file is lowered afresh (its protocol holds another number
    of messages per connection than the variant's: :func:`colls.pipeline.relower`), for the lowering and the
    proof both grow with the steps."""
    steps = sum(len(tb.steps) for gpu in base.program.gpus for tb in gpu.tbs)
    return steps * (2 if fifo_messages(ranges[0].winner[2]) != fifo_messages(base.program.proto) else 1)


def _lower_group(base, ranges) -> list:
    """The files of ``ranges`` from ``base``, each lowered from the one before (:func:`lower_files`). A file
    that the proof finds wrong for in-place calls serves out-of-place calls only (the same threadblocks, so
    the same times; the runtime runs its own algorithm for in-place ones), as ``colls synth`` would make it
    with ``--outofplace-only``: the variants were checked for deadlocks, not proved, before (:func:`_variants`)."""
    out, last = [], base
    for r in ranges:
        settings = dict(proto=r.winner[2], min_bytes=r.min_bytes, max_bytes=r.max_bytes)
        try:
            last = pipeline.relower(last, **settings)
        except LimitError:
            raise
        except CollsError as e:
            if last.mode != "both" or not _refused_in_place(e):
                raise
            last = pipeline.relower(last, mode="outofplace", **settings)
        out.append(last)
    return out


def write(plans, directory: str, topology, target: str) -> list[str]:
    """Write the folder (module docstring): into a new sibling first, then swapped in. Returns the paths
    of the XML files, relative to ``directory``."""
    files = [(r.file, r.compiled.text) for p in plans for r in p.ranges if r.file]
    return _write_folder(directory, ALGORITHMS, files, plans, topology, {
        "README.md": lambda: readme(plans, topology, target), "env.sh": lambda: env_sh(plans, target)})


def _write_folder(directory: str, subfolder: str, files, plans, topology, extras: dict) -> list[str]:
    """``DIR`` written whole into a new sibling and swapped in (a failure leaves ``DIR`` as it was):
    ``files`` (name, text) in ``subfolder`` and nothing else there, a plot per collective, and ``extras``
    (name -> a function giving the text) beside them. Returns the paths of ``files`` relative to ``DIR``."""
    directory = os.path.normpath(directory)
    _check_directory(directory)
    parent = os.path.dirname(os.path.abspath(directory))
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(directory)}.", suffix=".tmp", dir=parent)
    try:
        os.chmod(tmp, 0o755)            # mkdtemp's 0700 would hide the folder from the job's other users
        os.mkdir(os.path.join(tmp, subfolder), 0o755)
        written = []
        for name, text in files:
            rel = os.path.join(subfolder, name)
            write_atomic(os.path.join(tmp, rel), text, option="-o")
            written.append(rel)
        for p in plans:
            _plot(p, topology, os.path.join(tmp, f"{_label(p)}.png"))
        for name, text in extras.items():
            write_atomic(os.path.join(tmp, name), text(), option="-o")
        _swap(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return written


def _label(p: Plan) -> str:
    return p.kind + (f"-root{p.root}" if p.root is not None else "")


def _check_directory(directory: str) -> None:
    """``DIR`` must be new, empty, or a folder this command wrote before (its README says so)."""
    if not os.path.lexists(directory):
        parent = os.path.dirname(os.path.abspath(directory))
        if not os.path.isdir(parent):
            raise CollsError(f"{directory}: its parent folder does not exist", key="-o")
        return
    if os.path.islink(directory) or not os.path.isdir(directory):
        raise CollsError(f"{directory} exists and is not a folder; give a new folder name", key="-o")
    entries = os.listdir(directory)
    if not entries:
        return
    if not written_here(directory):
        raise CollsError(f"{directory} is a folder colls compile did not write, or holds files it does not "
                         f"write beside its own; give a new folder name, or an empty one", key="-o")


def written_here(folder: str) -> bool:
    """Whether ``folder`` is one this command wrote, and so may be replaced whole: its README.md starts with
    :data:`MARKER` and it holds nothing compile does not write (README.md, env.sh, the plans' register
    script, a plot per collective, and the algorithms or plans folder of files alone). A user's own file
    beside them keeps the folder from being replaced."""
    try:
        with open(os.path.join(folder, "README.md"), encoding="utf-8", errors="replace") as fh:
            if fh.readline().strip() != MARKER:
                return False
        for entry in os.scandir(folder):
            if entry.name in (ALGORITHMS, PLANS) and entry.is_dir(follow_symlinks=False):
                ext = ".xml" if entry.name == ALGORITHMS else ".json"
                if not all(f.name.endswith(ext) and f.is_file(follow_symlinks=False) for f in os.scandir(entry.path)):
                    return False
            elif not (entry.is_file(follow_symlinks=False) and (
                    entry.name in ("README.md", "env.sh", REGISTER) or _PLOT.fullmatch(entry.name))):
                return False
    except OSError:
        return False
    return True


_PLOT = re.compile(r"[a-z]+(-root[0-9]+)?\.png")      # compile's plot of one collective (_label)


def _swap(tmp: str, directory: str) -> None:
    if not os.path.lexists(directory):
        os.rename(tmp, directory)
        return
    old = tempfile.mkdtemp(prefix=f".{os.path.basename(directory)}.", suffix=".old",
                           dir=os.path.dirname(os.path.abspath(directory)))
    os.rmdir(old)
    os.rename(directory, old)
    try:
        os.rename(tmp, directory)
    except OSError:
        os.rename(old, directory)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _own(target: str) -> str:
    """What runs a call no file takes, in short: "RCCL's own" for RCCL, "NCCL's own" otherwise."""
    return get_target(target).own_algorithm.removesuffix(" algorithm") if target != PLAN_TARGET else "NCCL's own"


def _winner_words(r: Range, target: str = "exe") -> str:
    if r.winner is None:
        return _own(target)
    name, _, proto = r.winner
    f = r.compiled.facts if r.compiled is not None else {}
    info = f.get("method_info", {})
    depth = info.get("depth", 1)
    return (f"{name} {proto} x{f.get('instances', '?')}{', ' + tune.depth_words(name, depth) if depth > 1 else ''}"
            f"{', leaves paired' if info.get('leaves_paired') else ''}, {f.get('threadblocks', '?')} threadblocks/GPU")


def _bytes_words(r: Range, target: str) -> str:
    lo = size_text(r.min_bytes) if r.min_bytes else "0"
    if not r.max_bytes:
        return f"{lo} and up"
    hi = r.max_bytes - 1 if target in ("old", PLAN_TARGET) else r.max_bytes
    return f"{lo} to {size_text(hi)}"


def _nccl_words(t: Timing | None) -> str:
    if t is None:
        return "not modelled"
    return f"{_bw(t)} ({t.extra.get('algorithm')} {t.extra.get('protocol')})"


def _bw(t: Timing | None) -> str:
    return "n/a" if t is None or not t.served else f"{t.busbw_gbps:.3g}"


def summary_lines(plans, target: str) -> list[str]:
    """One line per range: sizes, what runs, modelled busbw at the range's ends beside NCCL's."""
    lines = []
    for p in plans:
        lines += [f"{_label(p)}: note: {n}" for n in p.notes]
        for r in p.ranges:
            ends = sorted({r.first, r.last})
            ours = ", ".join(f"{size_text(p.sizes[i])} {_bw(p.best_timing(i))}" for i in ends)
            nccl = ", ".join(f"{size_text(p.sizes[i])} {_nccl_words(p.nccl[i])}" for i in ends)
            where = r.file or "no file"
            lines.append(f"{_label(p)} {_bytes_words(r, target)}: {_winner_words(r, target)} ({where}); busbw {ours} "
                         f"GB/s; {_own(target)}, modelled: {nccl}" + (f"; {r.note}" if r.note else ""))
    return lines


def _margin_words(plans) -> str:
    if all(m == calibration.margin(s)[0] for p in plans for s, m in zip(p.sizes, p.margins)):
        return ("the simulator's measured error in that size band (" + ", ".join(
            f"{100 * err:.0f}% {name}" for _, name, err, _ in calibration.BANDS)
            + ": the typical error against published runs, bench/CALIBRATION.md)")
    return f"{100 * plans[0].margins[0]:g}% (--margin)"


def readme(plans, topology, target: str) -> str:
    out = [MARKER, f"# MSCCL algorithms for {topology.name} ({topology.ngpus} GPUs), target {target}", "",
           f"Written by `colls compile`. Each range of call sizes runs the file listed, or {_own(target)} algorithm "
           f"where no file is faster by more than {_margin_words(plans)}. busbw is nccl-tests' bus bandwidth in GB/s, "
           "modelled by `colls simulate`; \"of optimum\" is the share of `colls bound`'s best possible time.",
           "", "Install: `source env.sh` in the job's environment (it points the runtime at `algorithms/`). "
           "Check a call with `colls explain algorithms --ranks N --bytes SIZE`.", ""]
    runtime = _own(target).removesuffix(" own")
    for p in plans:
        out += [f"## {_label(p)}", "", f"| call sizes (bytes) | runs | file | busbw | of optimum | {runtime} modelled "
                "busbw |", "|---|---|---|---|---|---|"]
        for r in p.ranges:
            file = f"`{ALGORITHMS}/{r.file}`" if r.file else (r.note or "none")
            out.append(_readme_row(p, r, target, _winner_words(r, target), file))
        notes = list(p.notes)
        oop = [r.file for r in p.ranges if r.file and r.compiled.mode == "outofplace"]
        if oop:
            notes.append(f"{', '.join(f'`{ALGORITHMS}/{f}`' for f in oop)} claim{'s' if len(oop) == 1 else ''} "
                         f"out-of-place calls only; an in-place call of those sizes runs {_own(target)} algorithm.")
        if notes:
            out += [""] + [f"Note: {n}" for n in notes]
        refused = [m for m in p.methods if m.refused]
        if refused:
            out += ["", "Methods that made no file: " + "; ".join(f"{m.name}: {m.refused}" for m in refused)]
        beyond = [(m.name, [size_text(t.size_bytes) for t in m.timings if _at_most(p, t) is not None])
                  for m in p.methods]
        beyond = [f"{name} at {', '.join(at)}" for name, at in beyond if at]
        if beyond:
            out += ["", f"Out of reach (a proven lower bound on the method's time is above {runtime} modelled time "
                    "less the margin; not simulated further, so its curve stops there): " + "; ".join(beyond) + "."]
        out += ["", f"![{_label(p)}]({_label(p)}.png)", ""]
    return "\n".join(out) + "\n"


def _readme_row(p: Plan, r: Range, target: str, runs: str, files: str) -> str:
    """A range's row of a README table: sizes, what runs, its files, busbw and share of the optimum at the
    range's ends, NCCL's modelled busbw there."""
    ends = sorted({r.first, r.last})
    ours = " / ".join(f"{size_text(p.sizes[i])}: {_bw(p.best_timing(i))}" for i in ends)
    pct = " / ".join("n/a" if p.best_timing(i) is None or p.best_timing(i).bound_pct is None
                     else f"{p.best_timing(i).bound_pct:.0f}%" for i in ends)
    nccl = " / ".join(_nccl_words(p.nccl[i]) for i in ends)
    return f"| {_bytes_words(r, target)} | {runs} | {files} | {ours} | {pct} | {nccl} |"


def env_sh(plans, target: str) -> str:
    files = [os.path.join(ALGORITHMS, r.file) for p in plans for r in p.ranges if r.file]
    channels = max((r.compiled.program.nchannels for p in plans for r in p.ranges if r.file), default=0)
    lines = ["# Source this file in the job's environment: . path/to/env.sh  (written by colls compile)",
             '_colls_dir="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)"',
             f"# MSCCL runs only with one rank per process; a call no file claims runs {_own(target)} algorithm."]
    if target == "old":
        lines += [f'export MSCCL_XML_FILES="{":".join("$_colls_dir/" + f for f in files)}"',
                  "export NCCL_ALGO=MSCCL,RING,TREE      # MSCCL is off by default in this runtime"]
    else:
        lines += ['export MSCCL_ALGO_DIR="$_colls_dir/algorithms"']
        if target == "rccl":
            lines += ["export RCCL_MSCCL_ENABLE=1", "export RCCL_MSCCL_FORCE_ENABLE=1   # needed on GPUs other "
                      "than MI300X",
                      # RCCL reads one folder: MSCCL_ALGO_DIR, else <libdir>/msccl-algorithms, the files it ships
                      # (ROCm/rccl src/misc/msccl/msccl_lifecycle.cc, mscclInternalSchedulerInit)
                      "# RCCL then loads this folder's files instead of the ones it ships (its msccl-algorithms "
                      "folder, which it runs by default on MI300X for some sizes): a call no file here claims "
                      "runs RCCL's ring or tree, which is what colls compared against."]
        else:
            lines += ["export NCCL_MSCCL_ENABLE=1"]
    if channels:
        lines.append(f"# The files use up to {channels} channels: a communicator with fewer skips them "
                     f"(raise NCCL_MIN_NCHANNELS to {channels} if yours has fewer; colls explain --channels "
                     f"checks).")
    lines.append("unset _colls_dir")
    return "\n".join(lines) + "\n"


def _plot(p: Plan, topology, path: str) -> None:
    from colls.plot import plot_curves
    from colls.simulate.report import bound_curve
    curves = [("chosen", [(s, p.best_timing(i).algbw_gbps if p.best_timing(i) is not None else None)
                          for i, s in enumerate(p.sizes)])]
    for m in p.methods:
        if m.timings:
            curves.append((m.name, [(s, t.algbw_gbps if t is not None else None) for s, t in zip(p.sizes, m.timings)]))
    if any(t is not None for t in p.nccl):
        curves.append(("NCCL (modelled)", [(s, t and t.algbw_gbps) for s, t in zip(p.sizes, p.nccl)]))
    bound = ("optimum (colls bound)", bound_curve(p.bound, p.sizes)) if p.bound is not None else None
    plot_curves(curves, path, title=f"{_label(p)} on {topology.name} ({topology.ngpus} GPUs)", bound=bound,
                option="-o")


def check_out(directory: str) -> None:
    """Refuse a bad ``-o`` before any work."""
    if not directory or "\0" in directory:
        raise CollsError("must name a folder", key="-o")
    _check_directory(os.path.normpath(directory))
    check_output(os.path.join(os.path.dirname(os.path.abspath(directory)), ".colls-check"), "-o")


def _at_most(p: Plan, t: Timing | None) -> float | None:
    """The busbw a method cannot exceed at a size it was not simulated at (its lower bound was too slow)."""
    if t is None or "lower_bound_us" not in t.extra:
        return None
    return t.size_bytes / t.extra["lower_bound_us"] / 1000.0 * busbw_factor(p.kind, p.ngpus)


def to_json(plans, directory: str, written: list, target: str) -> dict:
    out = {"output": directory, "files": written, "target": target, "collectives": []}
    for p in plans:
        ranges = []
        for r in p.ranges:
            timings = [p.best_timing(i) for i in range(r.first, r.last + 1)]
            ranges.append({
                "min_bytes": r.min_bytes, "max_bytes": r.max_bytes,
                "file": r.file and f"{PLANS if target == PLAN_TARGET else ALGORITHMS}/{r.file}",
                "plans": [f"{PLANS}/{f}" for f, _ in r.plans],
                "method": r.winner and r.winner[0], "instances": r.compiled and r.compiled.facts["instances"],
                "chunks_per_loop": r.compiled and r.compiled.program.nchunksperloop,
                "protocol": r.winner and r.winner[2], "note": r.note,
                "sizes": [{"size_bytes": p.sizes[i], "busbw_gbps": t and t.busbw_gbps, "bound_pct": t and t.bound_pct,
                           "margin": p.margins[i],
                           "nccl_busbw_gbps": p.nccl[i] and p.nccl[i].busbw_gbps}
                          for i, t in zip(range(r.first, r.last + 1), timings)]})
        out["collectives"].append({
            "collective": p.kind, "root": p.root, "ranges": ranges,
            "refused": {m.name: m.refused for m in p.methods if m.refused},
            "methods": {m.name: [None if t is None else t.busbw_gbps for t in m.timings] for m in p.methods},
            "methods_busbw_at_most_gbps": {m.name: [_at_most(p, t) for t in m.timings] for m in p.methods},
            "sizes": p.sizes, "nccl_busbw_gbps": [t and t.busbw_gbps for t in p.nccl], "notes": p.notes})
    return out


# --------------------------------------------------------------------------------------------------
# --target mscclpp: MSCCL++ plans
# --------------------------------------------------------------------------------------------------
#
# The same choice with MSCCL++'s costs: every method's schedule (and its copies) is lowered as for the MSCCL
# executor and written as a plan (:func:`colls.mscclpp.plan_of`; one a plan cannot hold, more than 64 ops in a
# threadblock, is left out); the plans are timed by :mod:`colls.simulate.plans` at every size beside NCCL's
# own algorithms (what the NCCL API shim falls back to), and each size goes to the fastest plan unless NCCL's
# is within the margin. Plans run Simple. Range ends are written half-open, max = S + 1, so that MSCCL++ 0.8's
# min <= bytes < max and the current min <= bytes <= max select the same plan for every size the executor
# accepts (a multiple of 16 bytes).

def plan_mscclpp(topology, kinds, *, sizes=None, methods=None, sketch=None, milp_options: dict | None = None,
                 jobs: int = 1, margin: float | None = None, max_threadblocks: int | None = None,
                 packets: bool = False, progress: Callable[[str], None] = lambda line: None) -> list[Plan]:
    """:func:`plan` for MSCCL++ plans (nothing is written); ``packets``: each schedule also as a packet plan (LL),
    which a size takes where it is the fastest."""
    methods, sizes, margins, milp = _settings(topology, methods, sizes, margin, milp_options, sketch)
    plans, collectives = [], []
    for kind in kinds:
        if kind not in ALL:
            raise CollsError(f"MSCCL++ plans are written for {', '.join(ALL)}, not {kind}", key="--collective")
        coll = Collective(kind, topology.ngpus)
        collectives.append(coll)
        try:
            bound = bounds.bound(topology, kind)
        except CollsError:
            bound = None
        p = Plan(kind, None, sizes, [], [None] * len(sizes), bound, [], [], margins, topology.ngpus)
        try:
            default = RuntimeDefault(topology, kind, target="exe")
            p.notes += default.notes
        except CollsError as e:
            default = None
            p.notes.append(f"NCCL's algorithms could not be modelled ({e}): every size goes to the fastest plan")
        progress(f"{kind}: timing NCCL's own algorithms at {len(sizes)} sizes")
        if default is not None:
            p.nccl = [default.time(s, bound) for s in sizes]
        p.methods = [Method(name) for name in methods]
        plans.append(p)
    # one task per method and collective, milp's collectives that solve the same problems in one (_together)
    budget = {} if max_threadblocks is None else {"max_threadblocks": max_threadblocks}
    work = sorted([(pis, name) for name in methods for pis in _together(name, [p.kind for p in plans])],
                  key=lambda x: _slow_first(x[1], plans[x[0][0]].kind))
    tasks = [(f"{', '.join(plans[pi].kind for pi in pis)}: {name}: synthesizing, writing plans and timing them",
              partial(_each, partial(_plan_variants, topology), [(collectives[pi], name, dict(
                  milp if name == "milp" else {}, **budget), sizes, plans[pi].bound, packets) for pi in pis]))
             for pis, name in work]
    progress(f"synthesizing with {', '.join(methods)} for {', '.join(kinds)}, writing plans and timing them at "
             f"{len(sizes)} sizes ({_processes(jobs)})")
    for (pis, name), done in zip(work, in_processes(tasks, jobs, progress)):
        for pi, m in zip(pis, done):
            plans[pi].methods[methods.index(name)] = m
    for p in plans:
        p.ranges = _ranges(p.methods, p.nccl, sizes, PLAN_TARGET, margins)
    return plans


def _plan_variants(topology, coll, name, options, sizes, bound, packets: bool = False) -> Method:
    """The method's schedule and its copies as plans, each timed at every size (the fastest per size); with
    ``packets`` each also as a packet plan (LL)."""
    from colls import mscclpp
    from colls.simulate import plans as plan_sim
    m = Method(name)
    first = _first(topology, coll, name, "exe", options, m, make=tune.compile_for_plans)
    if first is None:
        return m
    _copies(first, m)
    kept, refused = [], None
    for c in m.variants:
        units = plan_sim.slices(c.program, topology)
        if not units:
            try:
                mscclpp.plan_of(c.program, topology, name="candidate", inplace=False)
            except CollsError as e:
                refused = refused or str(e)
            continue
        # one variant per pipeline unit, the default first: each size takes the fastest
        group = [(replace(c, facts=dict(c.facts, plan_slice=unit)), plan,
                  plan_sim.machine(c.program, topology, coll.kind, unit)) for unit, plan in units]
        if packets:
            try:
                ll = mscclpp.plan_of(c.program, topology, name="candidate", inplace=False, protocol="LL")
                group.append((replace(c, facts=dict(c.facts, plan_slice=None, plan_protocol="LL")), ll,
                              plan_sim.machine(c.program, topology, coll.kind, None, "LL")))
            except CollsError:
                pass            # the Simple plans stand for it
        kept.append(group)
    m.variants = [c for group in kept for c, _, _ in group]
    if not kept:
        m.refused = f"no MSCCL++ plan: {refused}"
        return m
    m.timings = []
    for s in sizes:
        best, index = None, 0
        for group in kept:
            # the unpipelined Simple plan's largest message
            whole = next(mach for c, _, mach in group if c.facts["plan_slice"] is None
                         and c.facts.get("plan_protocol", "Simple") == "Simple").message_bytes("Simple", s)
            timed: dict = {}        # units at least as large as every step at this size time alike
            for c, plan, mach in group:
                unit = c.facts["plan_slice"]
                key = "LL" if c.facts.get("plan_protocol") == "LL" else whole if unit is None else min(unit, whole)
                if key in timed:
                    t = replace(timed[key], extra=dict(timed[key].extra))
                else:
                    t = timed[key] = plan_sim.time_plan(plan, c.program, topology, s, bound=bound, mach=mach)
                if t.served and (best is None or t.time_us < best.time_us * (1 - 1e-9)):
                    t.extra.update(index=index, instances=c.facts["instances"])
                    best = t
                index += 1
        m.timings.append(best)
    return m


def lower_plans(plans) -> None:
    """Lower each range's schedule again with its byte range, write it as plans (out-of-place, and in-place
    where the schedule serves it), prove them; name them uniquely."""
    from colls.verify.plan import proved_plan
    for p, r, count, base in _chosen(plans):
        r.compiled = pipeline.relower(base, proto="Simple", min_bytes=r.min_bytes, max_bytes=r.max_bytes)
        protocol = base.facts.get("plan_protocol", "Simple")
        stem = f"colls-{p.kind}-{p.ngpus}r-{count:02d}-{r.winner[0]}-x{base.facts['instances']}" + \
            ("-ll" if protocol == "LL" else "")
        r.compiled.facts["plan_slice"] = base.facts.get("plan_slice", rt.PIPELINE_UNIT_BYTES)
        r.compiled.facts["plan_protocol"] = protocol
        plan, modes = proved_plan(r.compiled.program, r.compiled.topology, name=f"{stem}-oop", inplace=False,
                                  slice_bytes=r.compiled.facts["plan_slice"], protocol=protocol)
        r.plans = [(f"{stem}-oop.json", plan)]
        if True in modes:
            r.plans.append((f"{stem}-ip.json", dict(plan, name=f"{stem}-ip", inplace=True)))
        r.file = r.plans[0][0]


def write_plans(plans, directory: str, topology) -> list[str]:
    """The folder for MSCCL++: ``plans/`` (the plans and nothing else), README.md, env.sh (0.8.x),
    register_plans.py (current MSCCL++), a plot per collective; written beside ``directory`` and swapped in."""
    from colls import mscclpp
    files, names = [], set()
    for p in plans:
        for r in p.ranges:
            for file, plan in r.plans:
                if plan["name"] in names:
                    raise CollsError(f"two plans named {plan['name']} (the executor caches plans by name)")
                names.add(plan["name"])
                files.append((file, mscclpp.dumps(plan)))
    return _write_folder(directory, PLANS, files, plans, topology, {
        "README.md": lambda: plans_readme(plans, topology), "env.sh": plans_env_sh,
        REGISTER: lambda: register_py(plans, topology)})


def plan_entries(plans, topology) -> list[tuple]:
    """(file, collective, world size, ranks per node, min bytes, max bytes, in-place) per plan, in the order
    the ranges come: what register_plans.py registers and its selector matches."""
    per_node = topology.ngpus // max(len({topology.node_of(g) for g in topology.gpus}), 1)
    out = []
    for p in plans:
        for r in p.ranges:
            for file, plan in r.plans:
                out.append((f"{PLANS}/{file}", p.kind, p.ngpus, per_node, plan["min_message_size"],
                            plan["max_message_size"], bool(plan["inplace"])))
    return out


def plans_env_sh() -> str:
    from colls.runtimes import mscclpp as rt
    lines = ["# Source this file in the job's environment: . path/to/env.sh  (written by colls compile)",
             f"# For MSCCL++ {rt.SHIM_VERSIONS}: its NCCL API library, preloaded in place of NCCL, loads every plan of "
             f"{rt.PLAN_DIR_ENV} at communicator setup;",
             "# a call no plan takes runs the real NCCL. Current MSCCL++ reads no folder: use register_plans.py.",
             '_colls_dir="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)"',
             f'export {rt.PLAN_DIR_ENV}="$_colls_dir/{PLANS}"',
             f': "${{MSCCLPP_LIB_DIR:?set MSCCLPP_LIB_DIR to the folder holding {rt.NCCL_SHIM}}}"',
             ': "${NCCL_LIB:?set NCCL_LIB to the real libnccl.so, for the calls no plan takes}"',
             f'export LD_PRELOAD="$MSCCLPP_LIB_DIR/{rt.NCCL_SHIM}${{LD_PRELOAD:+:$LD_PRELOAD}}"',
             "export MSCCLPP_ENABLE_NCCL_FALLBACK=TRUE",
             'export MSCCLPP_NCCL_LIB_PATH="$NCCL_LIB"',
             "unset _colls_dir"]
    return "\n".join(lines) + "\n"


def register_py(plans, topology) -> str:
    """The script that registers the plans with current MSCCL++ (see colls.runtimes.mscclpp)."""
    entries = plan_entries(plans, topology)
    rows = "\n".join(f"    {e!r}," for e in entries)
    return f'''"""Register the MSCCL++ plans of this folder (written by colls compile) with current MSCCL++ (its selector API, PR #620).

Call register(rank) in every process before the communicator is created (before
torch.distributed.init_process_group with the NCCL API library preloaded, or before your MSCCL++ communicator):
each plan becomes an Algorithm with its world size and ranks per node, and a selector gives a call the first plan
whose collective, world size, ranks per node, buffer mode and byte range (inclusive: min <= bytes <= max) match;
other calls go on to MSCCL++'s own choice. bytes is the whole buffer one rank passes (nccl-tests' size: the
output of allgather, the input of reducescatter).
"""

import os

HERE = os.path.dirname(os.path.abspath(__file__))
# (file, collective, world size, ranks per node, min bytes, max bytes, in-place)
PLANS = [
{rows}
]


def _call_bytes(req, collective):
    size = int(getattr(req, "message_size", 0))
    return size * int(getattr(req, "world_size", 1)) if collective == "allgather" else size


def _in_place(req, collective):
    send, recv = getattr(req, "input_buffer", None), getattr(req, "output_buffer", None)
    if send is None or recv is None:
        return None
    rank, size = int(getattr(req, "rank", 0)), int(getattr(req, "message_size", 0))
    if collective == "allgather":
        return int(send) == int(recv) + rank * size
    if collective == "reducescatter":
        return int(recv) == int(send) + rank * size
    return int(send) == int(recv)


def select(algorithms, req):
    collective = str(getattr(req, "collective", ""))
    for path, coll, world, per_node, low, high, inplace in PLANS:
        if coll != collective or int(getattr(req, "world_size", world)) != world:
            continue
        if int(getattr(req, "n_ranks_per_node", per_node)) != per_node:
            continue
        if not low <= _call_bytes(req, coll) <= high or _in_place(req, coll) not in (None, inplace):
            continue
        algo = algorithms.get(coll, {{}}).get(os.path.splitext(os.path.basename(path))[0])
        if algo is not None:
            return algo
    return None


def register(rank):
    import mscclpp
    plan_class = getattr(mscclpp, "ExecutionPlan", None)
    if plan_class is None:
        from mscclpp._mscclpp import CppExecutionPlan as plan_class
    builder = mscclpp.AlgorithmCollectionBuilder()
    for path, coll, world, per_node, low, high, inplace in PLANS:
        plan = plan_class(os.path.join(HERE, path), rank)
        constraint = mscclpp.Algorithm.Constraint(world_size=world, n_ranks_per_node=per_node)
        builder.add_algorithm_builder(mscclpp.Algorithm(id=os.path.splitext(os.path.basename(path))[0],
                                                        execution_plan=plan, constraint=constraint, tags={{}}))
    builder.set_algorithm_selector(select)


if __name__ == "__main__":
    register(int(os.environ.get("RANK", "0")))
'''


def plans_readme(plans, topology) -> str:
    from colls.runtimes import mscclpp as rt
    out = [MARKER, f"# MSCCL++ plans for {topology.name} ({topology.ngpus} GPUs), target {PLAN_TARGET}", "",
           "Written by `colls compile --target mscclpp`. Each range of call sizes runs the plans listed (one for "
           "out-of-place calls, one for in-place calls where the schedule serves them), or NCCL's own algorithm "
           f"where no plan is faster by more than {_margin_words(plans)}. busbw is nccl-tests' bus bandwidth in "
           "GB/s, modelled by `colls simulate` with MSCCL++'s costs (colls/simulate/plans.py).", "",
           "The plans are in the format of MSCCL++ 0.8.0 and later; 0.7 and earlier cannot read them.", "",
           f"- **MSCCL++ {rt.SHIM_VERSIONS}** (NCCL API library): set `MSCCLPP_LIB_DIR` and `NCCL_LIB`, then "
           f"`source env.sh`: it points `{rt.PLAN_DIR_ENV}` at `{PLANS}/`, preloads `{rt.NCCL_SHIM}` and sends the "
           "calls no plan takes to the real NCCL. It selects the first plan of the call's collective with "
           "`min_message_size <= bytes < max_message_size` (half-open) and the call's in-place flag; it does not "
           "check the world size: use this folder only with communicators of "
           f"{topology.ngpus} ranks.",
           f"- **Current MSCCL++ ({rt.CURRENT_VERSIONS})**: call `register_plans.register(rank)` "
           f"(`{REGISTER}`) in every process before the communicator is created. Its selector matches collective, "
           "world size, ranks per node, buffer mode and `min <= bytes <= max` (inclusive).",
           "  Current MSCCL++ keeps the buffer mode of the first DSL plan it runs for the process (src/core/"
           "algorithm.cc DslAlgorithm::bufferMode, a function-static): if your job makes both in-place and "
           "out-of-place calls of one collective, check which one runs first.",
           "- The range ends are written so that both rules give the same plan for every size the executor "
           "accepts (a multiple of 16 bytes whose 16-byte units divide by the plan's chunks).",
           "- Check a call with `colls explain DIR --ranks N --bytes SIZE` (it applies both rules).", ""]
    if any(r.compiled is not None and r.compiled.facts.get("plan_protocol") == "LL" for p in plans for r in p.ranges):
        out += [f"**Packet plans** (files ending `-ll-oop.json` / `-ll-ip.json`, \"LL packets\" below): "
                f"{rt.PACKET_GRAPH_HAZARD}. Run this folder only in jobs that do not capture these calls in CUDA "
                "graphs, or write it again without `--packets`.", ""]
    for p in plans:
        out += [f"## {_label(p)}", "", "| call sizes (bytes) | runs | plans | busbw | of optimum | NCCL's modelled "
                "busbw |", "|---|---|---|---|---|---|"]
        for r in p.ranges:
            files = ", ".join(f"`{PLANS}/{f}`" for f, _ in r.plans) or (r.note or "none")
            words = _own(PLAN_TARGET) if r.winner is None else (f"{r.winner[0]} x{r.compiled.facts['instances']}, "
                                                             f"{r.compiled.facts['threadblocks']} threadblocks/GPU, "
                                                             f"{unit_words(r.compiled.facts['plan_slice'], r.compiled.facts['plan_protocol'])}")
            out.append(_readme_row(p, r, PLAN_TARGET, words, files))
        if p.notes:
            out += [""] + [f"Note: {n}" for n in p.notes]
        refused = [m for m in p.methods if m.refused]
        if refused:
            out += ["", "Methods that made no plan: " + "; ".join(f"{m.name}: {m.refused}" for m in refused)]
        out += ["", f"![{_label(p)}]({_label(p)}.png)", ""]
    return "\n".join(out) + "\n"
