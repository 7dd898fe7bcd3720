"""Throughput-optimal tree schedules (the ForestColl method): switch splitting, spanning-tree packing,
and schedules for allgather, reduce-scatter, allreduce, broadcast and reduce.

The method, stage by stage (each a plain function of the previous stage's value):

1. **Bound** (:mod:`colls.bound`): the optimal rate ``x*`` (per GPU for allgather / reduce-scatter, the
   root's min cut for broadcast / reduce).
2. **Splitting** (:func:`colls.synth.splitting.split`): every switch and NIC is removed by edge
   splitting that keeps the cut condition, giving a GPU-only graph of logical arcs, each of which
   travels the physical route ``topology.route(u, v)``. Reduce-scatter and reduce use the reversed
   topology (their data flows towards the roots).
3. **Rate for k trees** (:func:`colls.synth.packing.best_rate`): with ``k`` trees per root each tree
   carries ``y``; the largest y for which the multigraph ``floor(c(e) / y)`` admits the packing, so the
   achieved per-GPU rate is ``x_k = k y``. The chosen k is the smallest with ``x_k`` equal to the
   split graph's rate, searched up to ``max_k`` (default 8, which keeps programs small); when none
   reaches it the best ``x_k`` wins and ``info["k_capped"]`` says so (broadcast and reduce: up to 32,
   their k trees are all there is). The split graph may differ per k: when the uniform split's
   capacities are not whole multiples of the tree rate ``y = x / k``, the same symmetric split dealt
   in whole units of y (a circulant on a switch) is tried, and used if it keeps the rate (2 x DGX
   H100: k = 2 reaches the optimum that way); broadcast and reduce also try ring-shaped splits (fat
   arcs: few trees reach the root's min cut).
4. **Packing** (:func:`colls.synth.packing.pack`): the trees themselves (Lovász's construction,
   equivariant under the cluster's node rotations and rail-preserving local shifts when those are
   automorphisms of the split graph), verified by :func:`colls.synth.packing.check_packing`.
5. **Schedule** (:func:`synthesize`): tree ``(r, i)`` carries chunk ``r k + i`` (one chunk of root r's
   share; a tree found with multiplicity w stands for w trees; every op moves one chunk, because
   multi-chunk ops can deadlock the runtime's two-message FIFOs when it sends them chunk by chunk):

   - *allgather*: r copies input chunk i to output ``r k + i``; the chunk flows down the tree,
     parent -> child, at step = the parent's depth (r sends from its input).
   - *reduce-scatter*: on the reversed packing, tree (r, i) is an in-tree to r. Leaves send input
     ``r k + i``; an inner vertex reduces what its children send, one child per step, with its own
     input: the first child's data is reduced with the input, the last child's result is forwarded
     to the parent, in flight (``rrs``) where the lowering is sure to pair that child with that parent
     in one threadblock, else from scratch; partial sums of two or more children wait in scratch; r
     reduces into output i. The input buffer is never written.
   - *allreduce* (chunk factor ``N k``): reduce-scatter of chunk ``r k + i`` to r (partial sums in the
     output buffer, which is not the caller's input), then allgather of it from r.
   - *broadcast* / *reduce*: k trees of the root only (rates from the rooted bound).

   Every op carries ``route = topology.route(src, dst)`` and moves one chunk. Lanes: trees are dealt
   round-robin onto ``L <= 32`` lanes, the largest L whose threadblock estimate (one per rank, lane
   and peer pairing, as :mod:`colls.lower` builds them) fits 90% of the GPU's SM count; with at most
   32 trees every tree has a lane of its own, so a rank's threadblock carries one receive and the
   sends of one tree (a 2-node cluster at k = 1 needs a handful of steps per threadblock). The trees
   of one lane run one after another, each in a step interval of its own, save that the trees of the roots
   at one place of their nodes (a wave) share theirs, so that a rotation by a node gives the schedule back
   (see :class:`_Builder`).

``Schedule.info`` records the method's facts: ``x_star`` (the optimal rate from the bound),
``split_rate`` (what splitting kept), ``k`` used, ``k_optimal``, ``achieved_rate`` (``x_k``), the
number of trees, ``splitting`` (``fast``, ``exact`` or ``none``), and ``k_capped`` when the cap stopped
the search short of the split rate.

References
----------
L. Zhao et al., "ForestColl: Throughput-Optimal Collective Communications on Heterogeneous Network
Fabrics", arXiv:2402.06787. G. Wang et al., "Blink: Fast and Generic Collectives for Distributed ML",
MLSys 2020. J. Edmonds, "Edge-disjoint branchings", 1973; L. Lovász, J. Combin. Theory B 21 (1976).
"""

from __future__ import annotations

import math
from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field
from fractions import Fraction

from colls import bound as bounds
from colls.collectives import Collective
from colls.errors import CollsError, LimitError
from colls.schedule import Op, Schedule
from colls.synth import packing, splitting
from colls.synth.common import schedule_facts, too_many_gpus
from colls.topology import Topology, rank_offset

METHOD = "trees"
MAX_K = 8            # default cap on trees per root: keeps the program small (k_candidates falls back)
MAX_K_ROOTED = 32    # broadcast / reduce: k trees in all (not N k), so a larger cap is cheap
FREE_K = 64          # cap of the k search for unconstrained_report
FREE_K_WHOLE = 4096  # ... beyond which the whole-multiple k is not tried
MAX_LANES = 32       # the runtimes' channel limit
_PLAN_CACHE_SIZE = 8
# The most GPUs the method takes on. Packing grows each spanning tree a GPU at a time, one max-flow over the
# whole split graph per GPU added, so the work grows faster than the square of the GPUs: on the 2-core machine
# of bench/SCALE.md, 256 GPUs (32 x dgx-a100, 16 x mi250) are answered in 6 to 52 s, and one broadcast on
# 512 GPUs (64 x dgx-a100) had no answer after 5 minutes. Beyond, hier (the node's trees joined along the
# rails) and ring make the files. An allreduce runs its reduce-scatter and allgather trees on lanes of their own
# (split_phases), twice the peers a GPU keeps threadblocks for: at 256 GPUs it needed more threadblocks than the
# runtime holds on every shipped machine (dgx-a100, dgx-h100, dgx2, mi250, ndv2) for exe, refused after 8 to 20 s
# (more threadblocks per GPU than SMs, or more than 32 with a peer on one channel, which the older runtime allows).
MAX_GPUS = 256
MAX_GPUS_ALLREDUCE = 128

KINDS = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce")


# --------------------------------------------------------------------------------------------------------
# Plans: split graphs, symmetry and the rate table of one direction
# --------------------------------------------------------------------------------------------------------
@dataclass
class _Variant:
    """One split graph of a plan, its symmetry and what was computed on it."""

    split: splitting.SplitGraph
    group: list
    sinks: list | None
    style: str
    only_k: int | None = None      # a split in whole units of one k's tree rate
    rates: dict = field(default_factory=dict)
    packings: dict = field(default_factory=dict)


@dataclass
class Plan:
    """Everything about one packing problem that does not depend on k, and the per-k results.

    ``reverse``: packed on ``topology.reversed()`` (reduce-scatter, reduce). ``root``: None for the
    all-roots problem, else the rooted one. ``optimum``: x* from :mod:`colls.bound` (per GPU for the
    all-roots problem, the min cut for a root). ``variants``: split graphs to choose from (uniform, for
    a root also the ring style, and splits in whole units of one k's tree rate, made on demand when the
    others fall short for that k).
    """

    reverse: bool
    root: int | None
    n: int
    optimum: Fraction
    splitter: splitting.Splitter
    shape: tuple
    variants: list = field(default_factory=list)
    tried_units: set = field(default_factory=set)

    @property
    def split(self) -> splitting.SplitGraph:
        return self.variants[0].split

    @property
    def target(self) -> Fraction:
        """The best rate any split graph keeps (the split rate)."""
        return max(v.split.rate for v in self.variants)

    def _group(self, arcs: dict) -> list:
        if self.root is not None:
            return [list(range(self.n))]
        nodes, per = self.shape
        return packing.find_group(arcs, self.n, nodes, per)

    def _add(self, sg, style: str, only_k=None) -> _Variant:
        group = self._group(sg.arcs)
        sinks = packing.orbit_reps(group, self.n) if self.root is None else None
        var = _Variant(sg, group, sinks, style, only_k)
        self.variants.append(var)
        return var

    def _rate_on(self, var: _Variant, k: int) -> Fraction:
        if k not in var.rates:
            y = packing.best_rate(var.split.arcs, self.n, k, var.split.rate, self.root, var.sinks)
            var.rates[k] = k * y
        return var.rates[k]

    def variant(self, k: int) -> _Variant:
        """The split graph that gives the best rate for k (the first on a tie)."""
        best, best_x = None, None
        for var in self.variants:
            if var.only_k not in (None, k):
                continue
            x = self._rate_on(var, k)
            if best is None or x > best_x:
                best, best_x = var, x
        if best_x < self.target and k not in self.tried_units:
            self.tried_units.add(k)
            unit = self.target / k
            sinks_of = (lambda arcs: packing.orbit_reps(self._group(arcs), self.n)) \
                if self.root is None else None
            sg = self.splitter.run(best.style, unit=unit, sinks_of=sinks_of)
            if sg is not None and sg.rate == self.target:
                var = self._add(sg, best.style + " in whole tree rates", only_k=k)
                if self._rate_on(var, k) > best_x:
                    best = var
        return best

    def rate(self, k: int) -> Fraction:
        """x_k: the per-GPU rate (rooted: the algbw) with k trees per root."""
        return self._rate_on(self.variant(k), k)

    def trees(self, k: int) -> tuple[list, _Variant, int]:
        """The packing for k (cached), the variant it was packed on, and the size of the symmetry
        group it was built with."""
        var = self.variant(k)
        if k not in var.packings:
            x = self._rate_on(var, k)
            if x <= 0:
                raise CollsError(f"{METHOD}: no packing of {k} trees per root exists (a GPU is "
                                 f"unreachable in the split graph)")
            y = x / k
            if self.root is None and len(var.group) > 1:
                groups = packing.subgroups(var.group, *self.shape)
            else:
                groups = [[list(range(self.n))]]
            for grp in groups:
                try:
                    trees = packing.pack(var.split.arcs, self.n, k, y, self.root, grp)
                except packing.Stuck:
                    continue
                packing.check_packing(var.split.arcs, self.n, k, y, trees, self.root)
                var.packings[k] = (trees, len(grp))
                break
            else:  # the trivial group never gets stuck
                raise AssertionError("tree packing failed without symmetry")
        trees, gsize = var.packings[k]
        return trees, var, gsize


_PLANS: "OrderedDict[tuple, Plan]" = OrderedDict()  # memo of plan(): a pure function of its inputs


def clear_cache() -> None:
    """Forget the memoised plans (they are pure functions of the topology; this only frees memory)."""
    _PLANS.clear()


def _fingerprint(topology: Topology) -> tuple:
    g = topology.graph
    verts = tuple(sorted(((str(v), d.get("kind"), d.get("node"), d.get("local"))
                          for v, d in g.nodes(data=True)), key=str))
    links = tuple((str(u), str(v), d["bw"]) for u, v, d in topology.links())
    return (topology.name, topology.nodes, topology.gpus_per_node, verts, links)


def plan(topology: Topology, reverse: bool = False, root: int | None = None) -> Plan:
    """Split graphs, symmetry and optimum for one direction (memoised on the topology's content: the
    pipeline asks for several k on one topology)."""
    key = (_fingerprint(topology), reverse, root)
    if key in _PLANS:
        _PLANS.move_to_end(key)
        return _PLANS[key]
    topo = topology.reversed() if reverse else topology
    n = topology.ngpus
    if root is None:
        b = bounds.reducescatter_bound(topology) if reverse else bounds.allgather_bound(topology)
        optimum = b.x
    else:
        b = bounds.reduce_bound(topology, root) if reverse else bounds.broadcast_bound(topology, root)
        optimum = b.algbw
    p = Plan(reverse, root, n, optimum, splitting.Splitter(topo, root, optimum), topology.node_major())
    styles = ["uniform"] if root is None else ["ring", "uniform"]
    for style in styles:
        sinks_of = (lambda arcs: packing.orbit_reps(p._group(arcs), n)) if root is None else None
        p._add(p.splitter.run(style, sinks_of=sinks_of), style)
        if not p.splitter.order:
            break
    _PLANS[key] = p
    while len(_PLANS) > _PLAN_CACHE_SIZE:
        _PLANS.popitem(last=False)
    return p


def _plans_for(topology: Topology, collective: Collective) -> list[Plan]:
    kind = collective.kind
    if kind == "allgather":
        return [plan(topology)]
    if kind == "reducescatter":
        return [plan(topology, reverse=True)]
    if kind == "allreduce":
        return [plan(topology, reverse=True), plan(topology)]
    if kind == "broadcast":
        return [plan(topology, root=collective.root)]
    if kind == "reduce":
        return [plan(topology, reverse=True, root=collective.root)]
    raise CollsError(f"{METHOD}: no tree schedule for {kind} (the trees method does "
                     f"{', '.join(KINDS)}; use another method)", key="collective")


def _combined(plans: list[Plan], k: int) -> Fraction:
    """Per-GPU rate of the collective with k trees per root: one plan's x_k, or for allreduce (RS then
    AG) ``1 / (1/x_RS + 1/x_AG)``."""
    xs = [p.rate(k) for p in plans]
    if any(x <= 0 for x in xs):
        return Fraction(0)
    if len(xs) == 1:
        return xs[0]
    return 1 / sum((1 / x for x in xs), Fraction(0))


def _choose_k(plans: list[Plan], cap: int) -> tuple[int, str | None, dict]:
    """Smallest k <= cap with the best combined rate; the reason when the cap stopped the search."""
    table = {}
    best, best_x = None, None
    target = _combined_target(plans)
    for k in range(1, cap + 1):
        x = _combined(plans, k)
        table[k] = x
        if best is None or x > best_x:
            best, best_x = k, x
        if x == target:
            return k, None, table
    return best, (f"k capped at {cap}: no k <= {cap} reaches the split rate {_num(target)} GB/s per "
                  f"GPU; best k = {best} gives {_num(best_x)}"), table


def _combined_target(plans: list[Plan]) -> Fraction:
    xs = [p.target for p in plans]
    if any(x <= 0 for x in xs):
        return Fraction(0)
    return xs[0] if len(xs) == 1 else 1 / sum((1 / x for x in xs), Fraction(0))


# --------------------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------------------
def _cap(collective: Collective, max_k: int | None) -> int:
    if max_k is not None:
        return max_k
    return MAX_K_ROOTED if collective.rooted else MAX_K


def k_candidates(topology: Topology, collective: Collective, max_k: int | None = None) -> list[int]:
    """Trees per root to try, best first: the chosen k (smallest reaching the best rate within
    ``max_k``), then the smaller k that are each strictly better than every k below them, from the
    largest down, so a caller hitting a runtime limit can step down to fewer trees."""
    plans = _plans_for(topology, collective)
    k, _, table = _choose_k(plans, _cap(collective, max_k))
    front, best = [], Fraction(-1)
    for j in range(1, k):
        if table[j] > best:
            front.append(j)
            best = table[j]
    return [k] + [j for j in reversed(front) if table[j] < table[k]]


def check_size(collective: Collective, where: str, target=None) -> None:
    """Refuse more GPUs than :data:`MAX_GPUS` (a machine of that size gets no answer in minutes), or for an
    allreduce than :data:`MAX_GPUS_ALLREDUCE` on a ``target`` that limits the threadblocks per channel (no
    shipped machine of more had one that exe holds)."""
    per_channel = target is not None and target.max_tbs_per_channel is not None
    if collective.kind == "allreduce" and per_channel and MAX_GPUS_ALLREDUCE < collective.nranks <= MAX_GPUS:
        raise too_many_gpus(METHOD, collective, where, MAX_GPUS_ALLREDUCE, "its two halves' trees on lanes of their "
                            "own need more threadblocks than the GPU or a channel holds beyond",
                            f" for an allreduce on {target.name}")
    if collective.nranks > MAX_GPUS:
        raise too_many_gpus(METHOD, collective, where, MAX_GPUS, "its tree packing runs a max-flow over the whole "
                            "machine for every GPU of every tree, minutes beyond")


def synthesize(topology: Topology, collective: Collective, trees_per_gpu: int | None = None,
               max_k: int | None = None, lanes: int | None = None, max_tbs: int | None = None,
               split_phases: bool = True, depth: int = 1, pair_leaves: bool = False, **options) -> Schedule:
    """A tree schedule of ``collective`` on ``topology`` (module docstring).

    Parameters
    ----------
    trees_per_gpu : k, trees per root (default: :func:`k_candidates`' first).
    max_k : cap of the k search (default 8; 32 for broadcast and reduce, whose k trees are all).
    lanes : number of lanes (default: the most, up to 32, whose threadblocks fit the SM count).
    max_tbs : threadblocks per GPU the target runtime loads (RCCL: 64), when below the SM count.
    split_phases : allreduce: the allgather halves on lanes of their own (default), so that a threadblock
        never holds both the way up and the way down of one tree. In the runtime a threadblock runs all its
        steps for one slice of the buffer before the next, so one that sends a partial sum up and later
        receives the total back waits a whole round trip of the tree for every slice, and the slices do not
        overlap; NCCL's tree splits its warps between the two directions for the same reason. The root then
        sends the total from the output buffer, where it stored it, instead of forwarding it in the same
        instruction. False: both halves of a tree on one lane (the way it was: on 4 x dgx-a100 at 1 GB 38 % of
        the runtime optimum against 78 % split, on 2 x dgx-h100 30 % against 95 %).
    depth : chunks each tree carries, one after another on its lane (default 1; times what the chunk factor
        asks): a deeper pipeline through the trees' chains of reductions and relays (:func:`_deal`), at more
        messages a call. :func:`colls.tune.compile_fastest` chooses it by simulated time.
    pair_leaves : reductions (reduce-scatter, reduce, the first half of allreduce): a vertex's leaf children
        that reach it through one switch add their partial sums pairwise first (:func:`_pair_leaves`), so the
        vertex adds half as many one after another. :func:`colls.tune.compile_fastest` chooses it by simulated
        time.
    options : accepted and ignored (the pipeline passes every method the same options).

    Raises
    ------
    CollsError
        alltoall (not a tree collective), a rank count that is not the topology's GPU count, a k
        out of range, or a fabric where some GPU cannot be reached.
    """
    n = collective.nranks
    if n != topology.ngpus:
        raise CollsError(f"{METHOD}: the collective has {n} ranks but {topology.name} has "
                         f"{topology.ngpus} GPUs")
    check_size(collective, topology.name)      # the target's part is checked by the pipeline
    for name, val in (("trees_per_gpu", trees_per_gpu), ("max_k", max_k), ("lanes", lanes),
                      ("max_tbs", max_tbs), ("depth", depth)):
        if val is not None and not (isinstance(val, int) and not isinstance(val, bool) and val >= 1):
            raise CollsError(f"must be a positive integer, got {val!r}", key=name)
    if lanes is not None and lanes > MAX_LANES:
        raise CollsError(f"must be at most {MAX_LANES}, got {lanes}", key="lanes")
    plans = _plans_for(topology, collective)
    k_opt, capped, _ = _choose_k(plans, _cap(collective, max_k))
    k = trees_per_gpu or k_opt
    if _combined(plans, k) <= 0:
        raise CollsError(f"{METHOD}: {collective.kind} on {topology.name}: no packing of {k} trees per "
                         f"root (some GPU cannot be reached)")
    kind = collective.kind
    base = n * k if kind == "allreduce" else k
    mult = -(-collective.chunks // base) * depth
    coll = collective.with_chunks(base * mult)
    if max_tbs is not None:
        _check_peers(topology, collective, plans, k, max_tbs)
    builder = _Builder(topology, coll, k, mult, split=split_phases and kind == "allreduce")
    paired = 0
    if kind in ("allgather", "broadcast"):
        builder.gather_down(plans[0].trees(k)[0], from_input=True, rooted=kind == "broadcast")
    else:
        up = plans[0].trees(k)[0]
        if pair_leaves:
            up, paired = _pair_leaves(builder, topology, up)
        if kind == "allreduce":
            builder.reduce_up(up, store="output")
            builder.gather_down(plans[1].trees(k)[0], from_input=False)
        else:
            builder.reduce_up(up, store="scratch", rooted=kind == "reduce")
    lane_of = _choose_lanes(builder, topology, lanes, max_tbs)
    ops, scratch = builder.finish(lane_of)
    nlanes = 1 + max(lane_of, default=0)
    schedule = Schedule(coll, ops, METHOD, scratch)
    schedule.info.update(_info(topology, collective, plans, k, k_opt, capped, nlanes, mult, depth))
    schedule.info["leaves_paired"] = paired
    schedule.info.update(schedule_facts(schedule, topology))
    return schedule


def _check_peers(topology: Topology, collective: Collective, plans: list, k: int, max_tbs: int) -> None:
    """Refuse trees whose GPU sends to (or receives from) more peers than ``max_tbs`` (:func:`least_peers`),
    before their transfers are made: on 256 MI250 GCDs one tree per GPU takes 19 peers a GCD, counted in a
    second where making the transfers took 4-6 s more."""
    most, v, word = least_peers(collective, plans, k)
    if most > max_tbs:
        raise LimitError(f"{METHOD} {collective.kind} on {topology.name}: at {k} tree{'s' if k > 1 else ''} per GPU, "
                         f"GPU {v} {word} {most} peers, a threadblock each, more than the {max_tbs} threadblocks a "
                         f"GPU may run here; try fewer --nodes or another --method", limit="threadblocks")


def least_peers(collective: Collective, plans: list, k: int) -> tuple[int, int, str]:
    """The most peers a GPU sends to or receives from in the trees of ``plans`` at ``k`` trees per root, each a
    threadblock whatever the layout (one send peer and one receive peer a threadblock: what colls.lower's
    _check_tbs counts): (peers, the GPU, "sends to" or "receives from"). Data flows from a parent to its
    children down the allgather's (and broadcast's) trees, from a child to its parent up the reductions'; an
    allreduce runs both (plans: the reduction's, then the allgather's). Pairing leaves moves a leaf's send to a
    sibling: not counted, so a lower bound for paired trees."""
    sends: dict = defaultdict(set)
    receives: dict = defaultdict(set)
    down = collective.kind in ("allgather", "broadcast")
    for i, p in enumerate(plans):
        up = not down and (collective.kind != "allreduce" or i == 0)
        for t in p.trees(k)[0]:
            for child, parent in t.parent.items():
                a, b = (child, parent) if up else (parent, child)
                sends[a].add(b)
                receives[b].add(a)
    best = (0, 0, "sends to")
    for side, word in ((sends, "sends to"), (receives, "receives from")):
        for v, peers in side.items():
            if (len(peers), -v) > (best[0], -best[1]):
                best = (len(peers), v, word)
    return best


def _pair_leaves(builder: "_Builder", topology: Topology, trees: list) -> tuple[list, int]:
    """The reduction trees with a vertex's leaf children paired: ordered by their offset from the vertex
    (:meth:`_Builder.rel`, so every tree is paired alike), each second one sends its partial sum to the one
    before it instead, which adds it to its own and sends the two on, where both reach the vertex through one
    switch and the second reaches the first through it too. Returns (trees, leaves moved); the trees as they
    were, and 0, where no leaf moves or where the links would carry more: the busiest link's load over its
    bandwidth, summed over every tree, must not grow (then the link model's rate still holds).

    Why: a vertex adds its children's partial sums into one buffer one after another, each a message's copy
    (:meth:`_Builder.reduce_up`); at a switch node's star root that is a chain of 7 to 15 additions, and the
    first sum leaves, and the last arrives, that many messages late. Paired, the chain is half as long and the
    pairs' additions run side by side. 2 x DGX A100 reduce-scatter in colls compile: 4 MB 41 -> 50.1 GB/s busbw,
    16 MB 103 -> 113, 1 GB 228 -> 234. It is not always faster (the trees' lanes and fusions change with it), so
    :func:`colls.tune.compile_fastest` makes both and keeps the faster."""
    out, moved = [], 0
    for t in trees:
        kids = t.children()
        parent = dict(t.parent)
        for v, cs in kids.items():
            hub = {c: builder.route(c, v)[1] for c in cs if c not in kids and len(builder.route(c, v)) == 3}
            leaves = sorted(hub, key=lambda c: builder.rel(c, v))
            for a, b in zip(leaves[0::2], leaves[1::2]):
                via = builder.route(b, a)
                if hub[a] == hub[b] and len(via) == 3 and via[1] == hub[b]:
                    parent[b] = a
                    moved += t.mult
        out.append(packing.Tree(t.root, parent, t.mult))
    if not moved or _busiest(builder, topology, out) > _busiest(builder, topology, trees):
        return trees, 0
    return out, moved


def _busiest(builder: "_Builder", topology: Topology, trees: list) -> Fraction:
    """The most any link carries, in trees' chunks over its bandwidth, for ``trees`` (data child -> parent)."""
    load: dict = defaultdict(int)
    for t in trees:
        for v, p in t.parent.items():
            route = builder.route(v, p)
            for link in zip(route, route[1:]):
                load[link] += t.mult
    g = topology.graph
    return max((Fraction(n) / Fraction(g.edges[link]["bw"]) for link, n in load.items()), default=Fraction(0))


def free_k(topology: Topology, collective: Collective) -> tuple[int, Fraction, bool]:
    """k free: the smallest k <= 64 whose packing reaches the split rate; if none does, the k at which
    every split arc is a whole multiple of the tree rate (``lcm`` of the denominators of ``c(e) / x``,
    which always reaches it, by Edmonds' theorem on the scaled cut condition) when that is at most
    4096; else the best k <= 64. Returns (k, per-GPU rate, reached)."""
    plans = _plans_for(topology, collective)
    k, capped, _ = _choose_k(plans, FREE_K)
    target = _combined_target(plans)
    if capped:
        whole = 1
        for p in plans:
            var = max(p.variants, key=lambda v: v.split.rate)
            for c in var.split.arcs.values():
                whole = math.lcm(whole, (c / var.split.rate).denominator)
        if whole <= FREE_K_WHOLE and _combined(plans, whole) == target:
            return whole, target, True
    return k, _combined(plans, k), capped is None


def unconstrained_report(topology: Topology, kind: str, root: int = 0) -> dict:
    """The tree packing with k free (:func:`free_k`), for ``colls bound --trees`` (alltoall: a report
    that says trees do not apply).

    Returns ``{"k", "trees", "algbw_gbps", "bound_gbps", "ratio", "split_gbps", "reached",
    "constructed", "text"}``: k, the number of trees, the packing's algbw next to the bound of
    :mod:`colls.bound` (their ratio), what switch splitting keeps, whether the packing reaches it, and
    one readable line. The packing is built and checked when it has at most 200 000 tree arcs.
    """
    n = topology.ngpus
    if kind not in KINDS:
        Collective(kind, n)  # an unknown name raises CollsError
        return {"k": None, "trees": 0, "algbw_gbps": None, "bound_gbps": None, "ratio": None,
                "split_gbps": None, "reached": False, "constructed": False,
                "text": f"trees: no tree packing for {kind} (trees do {', '.join(KINDS)})"}
    coll = Collective(kind, n, 1, root)
    plans = _plans_for(topology, coll)
    k, x, reached = free_k(topology, coll)
    rooted = coll.rooted
    algbw = x if rooted else n * x
    b = bounds.bound(topology, kind, root=root)
    trees = k if rooted else n * k
    built = False
    if trees * (n - 1) * len(plans) <= 200_000:
        for p in plans:
            p.trees(k)
        built = True
    split_rate = _combined_target(plans)
    split_bw = split_rate if rooted else n * split_rate
    ratio = float(algbw / b.algbw) if b.algbw else 0.0
    text = (f"trees: k = {k} per {'root' if rooted else 'GPU'} ({trees} trees) reach "
            f"{float(algbw):.1f} GB/s, {100 * ratio:.1f}% of the {float(b.algbw):.1f} GB/s bound")
    if split_bw < b.algbw:
        text += (f" (switch splitting keeps {float(split_bw):.1f} GB/s: NICs shared by GPUs cannot "
                 f"feed all of them at once)")
    if not reached:
        text += f"; no k <= {FREE_K} reaches {float(split_bw):.1f} GB/s"
    return {"k": k, "trees": trees, "algbw_gbps": float(algbw), "bound_gbps": float(b.algbw),
            "ratio": ratio, "split_gbps": float(split_bw), "reached": reached,
            "constructed": built, "text": text}


# --------------------------------------------------------------------------------------------------------
# Schedules from trees
# --------------------------------------------------------------------------------------------------------
@dataclass
class _Spec:
    """An op before its lane and its partial-sum storage are decided."""

    step: int
    src: int
    dst: int
    src_slot: tuple   # (buf, index); ("T", key) = the partial sum of key, in flight or stored
    dst_slot: tuple
    count: int
    reduce: tuple | None
    tree: int
    route: tuple


class _Builder:
    """Ops of tree schedules, one chunk each (see :meth:`_layout`); ``mult`` chunks per tree when the
    caller asked for a larger chunk factor.

    Tasks and steps. Every (single-chunk) tree is a *task*: its ops get steps relative to the task's
    start, and :meth:`finish` runs the waves of one lane one after another (each in a step interval of
    its own; an allreduce allgather task starts after the reduce-scatter task of its chunk). A wave is one
    task where the trees have no node rotation, else the tasks of the roots at one place of their nodes
    (:meth:`_wave`): images of one another under the rotation, at the same steps, which the argument below
    does not cover; every file is proved free of a wait cycle (colls.verify) before it is written, and none
    was found on the shipped profiles (1-16 nodes: bench/simulate.py, bench/scale.py). Why: the
    lowering orders every threadblock's instructions by step and the runtime's connections hold two
    messages; when trees sharing threadblocks interleave, a forwarding instruction can wait for room on
    a connection whose receiver waits, through a dependency, for that very instruction's threadblock
    (colls.verify finds such cycles). With tasks in sequence per lane (lanes are separate channels,
    so separate threadblocks and connections), the unfinished task that started first only waits on
    its own instructions or on finished ones, so it runs as if alone, and one tree alone cannot wait
    on itself in a cycle: every task finishes. An allreduce's allgather task runs on lanes of its own
    (``split``, the default; see :func:`synthesize`) after its reduce-scatter task's steps: those lanes
    wait on the others, never the other way round, so this still holds. Unsplit, the one instruction two
    tasks share (the root's last reduction fused with its first allgather send) joins tasks that run back
    to back on one lane (a group), so no other task's step falls between its two halves.

    Partial sums. Reductions name them ``("A" | "F", key)`` (see :meth:`reduce_up`) until
    :meth:`finish` decides, per vertex and tree, whether the value stays in flight (``t``:
    receive-reduce-send in one ``rrs`` instruction) or is stored (scratch, or the output buffer for
    allreduce). In flight needs the lowering to pair that receive peer with that send peer in one
    threadblock, which is certain only when no other op of the rank on that lane receives from the
    child or sends to the parent (then no other fusion can claim either peer); otherwise the value is
    stored (the lowering may still fuse it into ``rrcs``)."""

    def __init__(self, topology: Topology, coll: Collective, k: int, mult: int, split: bool = False):
        self.topo = topology
        self.coll = coll
        self.k = k
        self.mult = mult
        self.specs: list[_Spec] = []
        self.ntrees = 0
        self.span: dict = {}              # task -> number of steps
        self.after: dict = {}             # task -> the task it must follow (allreduce)
        self.group: list = []             # task -> group: the tasks of a group share a lane and run
        #                                   back to back (allreduce: a chunk's two halves)
        self.fused: list[tuple] = []      # (rank, task a, task b, recv peer, send peer): the lowering
        #                                   fuses these when tasks a and b share a lane
        self._root_sums: dict = {}        # (root, chunk) -> (task, last child): allreduce
        self.partial: dict = {}           # key -> (rank, task, child, parent, chunk, children, output)
        self._routes: dict = {}
        self.shape = topology.node_major()
        self.place: list = []             # task -> (its root, its index among the root's tasks)
        self.split = split                # allreduce: the allgather half on lanes of its own (see synthesize)
        self.phase: dict = {}             # group -> 1 for those allgather halves (their lanes follow the others')

    def rel(self, c: int, v: int):
        """Rank ``c`` seen from rank ``v`` (:func:`colls.topology.rank_offset`): the trees are grown
        equivariant under node rotation and local shift (:func:`colls.synth.packing.pack`), so ordering a
        vertex's children (and a root's trees) by it keeps the schedule equivariant."""
        return rank_offset(self.shape, c, v)

    def route(self, a: int, b: int) -> tuple:
        key = (a, b)
        if key not in self._routes:
            r = self.topo.route(a, b)
            if r is None:
                raise CollsError(f"{METHOD}: no physical route from GPU {a} to GPU {b} on "
                                 f"{self.topo.name} (a tree arc needs one)")
            self._routes[key] = r
        return self._routes[key]

    def _layout(self, trees: list) -> list[tuple]:
        """One entry per chunk: (tree, task id, the root's share index j) in a deterministic order.

        A tree of multiplicity w stands for w trees of one shape; each of its ``w * mult`` chunks
        becomes a task of its own whose ops move one chunk: with multi-chunk ops the runtime sends a
        step's chunks as separate messages when buffers are large, and two-message FIFOs can then wait
        on each other in a cycle. Root r's share index j (0 <= j < k * mult) is its input chunk j
        (allgather, broadcast), its output chunk j (reduce-scatter, reduce) and the collective's chunk
        ``r k mult + j`` (allgather, reduce-scatter, allreduce)."""
        out, nxt = [], defaultdict(int)
        for t in sorted(trees, key=lambda t: (t.root, sorted((self.rel(v, t.root), self.rel(p, t.root))
                                                             for v, p in t.parent.items()))):
            for _ in range(t.mult * self.mult):
                out.append((t, self.ntrees, nxt[t.root]))
                self.place.append((t.root, nxt[t.root]))
                nxt[t.root] += 1
                self.group.append(self.ntrees)
                self.ntrees += 1
        return out

    def _chunk(self, root: int, j: int, rooted: bool) -> int:
        return j if rooted else root * self.k * self.mult + j

    def gather_down(self, trees: list, from_input: bool, rooted: bool = False) -> None:
        """Allgather / broadcast (``from_input``: the root sends its input chunk and copies it to its
        output) or the allgather half of allreduce (the root sends its output chunk, after the
        reduce-scatter task of that chunk). Relative step of an op = the sender's depth."""
        for t, tid, j in self._layout(trees):
            r = t.root
            c = self._chunk(r, j, rooted)
            depth = t.depth()
            kids = t.children()
            if from_input:
                self.specs.append(_Spec(0, r, r, ("i", j), ("o", c), 1, None, tid, ()))
            for p, v in t.arcs():
                src = ("i", j) if (p == r and from_input) else ("o", c)
                self.specs.append(_Spec(depth[p], p, v, src, ("o", c), 1, None, tid, self.route(p, v)))
            self.span[tid] = 1 + max(depth[p] for p in kids)
            for v, cs in kids.items():
                if v != r:  # the receive from the parent is forwarded to the first child at once
                    self.fused.append((v, tid, tid, t.parent[v], min(cs, key=lambda c: self.rel(c, v))))
            if not from_input:
                rs_task, last = self._root_sums[(r, c)]
                self.after[tid] = rs_task
                if self.split:          # a lane of its own: the root sends the sum from the output buffer
                    self.phase[tid] = 1
                    continue
                self.group[tid] = self.group[rs_task]
                # the root's last reduction is sent on to its first allgather child
                self.fused.append((r, rs_task, tid, last, min(kids[r], key=lambda c: self.rel(c, r))))

    def reduce_up(self, trees: list, store: str, rooted: bool = False) -> None:
        """Reduce-scatter / reduce / the reduce-scatter half of allreduce on reversed-graph trees (data
        flows child -> parent). ``store``: where partial sums wait, "scratch" or "output".

        Slots named before placement: ``("A", key)`` the accumulator of vertex v in tree ``key =
        (task, v)`` (needed with two or more children), ``("F", key)`` its finished partial sum."""
        for t, tid, j in self._layout(trees):
            r = t.root
            cin = self._chunk(r, j, rooted)
            out = j if self.coll.kind in ("reducescatter", "reduce") else cin
            kids = t.children()
            ready, step_of = self._reduce_steps(t, kids, self.rel)
            self.span[tid] = ready[r]
            for v, cs in kids.items():
                order = sorted(cs, key=lambda c: (step_of[c], self.rel(c, v)))
                key = (tid, v)
                last = len(order) - 1
                if v != r:
                    self.partial[key] = (v, tid, order[-1], t.parent[v], cin, len(order),
                                         store == "output")
                    self.fused.append((v, tid, tid, order[-1], t.parent[v]))
                else:
                    self._root_sums[(r, cin)] = (tid, order[-1])
                for pos, c in enumerate(order):
                    if v == r:
                        dst = ("o", out)
                        red = ("i", cin) if pos == 0 else ("o", out)
                    else:
                        dst = ("F", key) if pos == last else ("A", key)
                        red = ("i", cin) if pos == 0 else ("A", key)
                    src = ("F", (tid, c)) if c in kids else ("i", cin)
                    self.specs.append(_Spec(step_of[c], c, v, src, dst, 1, red, tid, self.route(c, v)))

    @staticmethod
    def _reduce_steps(t, kids: dict, rel) -> tuple[dict, dict]:
        """Steps of the ops child -> parent: a vertex takes one child per step, in the order its
        children are ready (ties by ``rel``, see :meth:`rel`); ``ready[v]`` = the first step at which v's
        partial sum is complete."""
        depth = t.depth()
        ready: dict = {}
        step_of: dict = {}
        for v in sorted(depth, key=lambda w: (-depth[w], w)):
            cs = sorted(kids.get(v, []), key=lambda c: (ready[c], rel(c, v)))
            last = -1
            for c in cs:
                s = max(ready[c], last + 1)
                step_of[c] = s
                last = s
            ready[v] = last + 1
        return ready, step_of

    def finish(self, lane_of: list) -> tuple[list[Op], int]:
        """Ops with lanes ``lane_of[task]``, steps made absolute (the waves of a lane in sequence) and
        partial sums placed; returns (ops, scratch chunks per rank)."""
        base: dict = {}
        free: dict = defaultdict(int)
        # a task only ever follows a task of its group with a smaller id; a wave's tasks start together, at the
        # place of its first
        waves: dict = defaultdict(list)
        for tid in sorted(range(self.ntrees), key=lambda t: (self.group[t], t)):
            waves[self._wave(tid, lane_of)].append(tid)
        for wave in waves.values():
            lane = lane_of[wave[0]]
            start = max([free[lane]] + [base[self.after[t]] + self.span[self.after[t]] for t in wave
                                        if t in self.after])
            for tid in wave:
                base[tid] = start
            free[lane] = start + max(self.span[t] for t in wave)
        use: dict = defaultdict(int)   # remote ops per (rank, lane, direction, peer)
        for sp in self.specs:
            if sp.src != sp.dst:
                lane = lane_of[sp.tree]
                use[(sp.dst, lane, "r", sp.src)] += 1
                use[(sp.src, lane, "s", sp.dst)] += 1
        scratch_used: dict = defaultdict(int)
        place: dict = {}
        # a rank's scratch slots go to its trees in the order of their roots seen from it, as every rank sees its
        # own: rotated, each rank's slots are its representative's (Schedule.rotation)
        for key in sorted(self.partial, key=lambda key: (key[1], self.rel(self.place[key[0]][0], key[1]),
                                                         self.place[key[0]][1], key)):
            rank, tree, child, parent, cin, nkids, in_output = self.partial[key]
            lane = lane_of[tree]
            stored = ("o", cin) if in_output else ("s", scratch_used[rank])
            inflight = use[(rank, lane, "r", child)] == 1 and use[(rank, lane, "s", parent)] == 1
            if not in_output and (nkids >= 2 or not inflight):
                scratch_used[rank] += 1
            place[("A", key)] = stored
            place[("F", key)] = ("t", cin) if inflight else stored
        ops = []
        for sp in self.specs:
            src, dst = place.get(sp.src_slot, sp.src_slot), place.get(sp.dst_slot, sp.dst_slot)
            red = None if sp.reduce is None else place.get(sp.reduce, sp.reduce)
            ops.append(Op(base[sp.tree] + sp.step, sp.src, sp.dst, src[0], src[1], dst[0], dst[1],
                          sp.count, reduce=red, lane=lane_of[sp.tree], route=sp.route))
        return ops, max(scratch_used.values(), default=0)

    def _wave(self, tid: int, lane_of: list) -> tuple:
        """The tasks that start at one step on their lane: those whose roots sit at one place of their nodes
        (task j of each such root: the trees are grown equivariant under node rotation,
        :func:`colls.synth.packing.pack`), so that rotating every op by a node gives the schedule back
        (:meth:`colls.schedule.Schedule.rotation`, where the lanes repeat from node to node: every m nodes where
        there are m times a node's GPUs of them, :func:`_equivariant_lanes`) and it is lowered and proved on one
        orbit's ranks for all (:func:`colls.lower.lower_by_symmetry`). Dealt one after another, the tasks of a
        lane ran in the order of their roots, which a rotation does not keep. One task a wave where ranks are
        not node-major or the collective has one root."""
        nodes, per = self.shape
        if not nodes or not per or self.coll.rooted:
            return (lane_of[tid], tid)
        root, j = self.place[tid]
        return (lane_of[tid], root % per, j, tid in self.after)     # an allreduce's halves: waves of their own


    def threadblocks(self, lane_of: list) -> int:
        """Most threadblocks on one rank with trees on lanes ``lane_of[tree]``, as :mod:`colls.lower`
        builds them: per rank and lane, the fused (receive peer, send peer) pairs matched greedily by
        count, one threadblock per matched pair, one per remaining receive peer and per remaining send
        peer, and one for local ops."""
        recv: dict = defaultdict(set)
        send: dict = defaultdict(set)
        local: set = set()
        cached = self.__dict__.get("_links")      # the distinct (src, dst, tree) of the specs, which every
        if cached is None or cached[0] != len(self.specs):    # lane choice tried shares
            cached = self._links = (len(self.specs), sorted({(sp.src, sp.dst, sp.tree) for sp in self.specs}))
        links = cached[1]
        for src, dst, tree in links:
            lane = lane_of[tree]
            if src == dst:
                local.add((src, lane))
                continue
            send[(src, lane)].add(dst)
            recv[(dst, lane)].add(src)
        weight: dict = defaultdict(lambda: defaultdict(int))
        for rank, tree, other, q, p in self.fused:
            if lane_of[tree] == lane_of[other]:
                weight[(rank, lane_of[tree])][(q, p)] += 1
        per_rank: dict = defaultdict(int)
        for key in set(recv) | set(send) | local:
            used_r, used_s = set(), set()
            for (q, p), _ in sorted(weight.get(key, {}).items(), key=lambda kv: (-kv[1], kv[0])):
                if q not in used_r and p not in used_s:
                    used_r.add(q)
                    used_s.add(p)
            per_rank[key[0]] += (len(used_r) + len(recv.get(key, set()) - used_r)
                                 + len(send.get(key, set()) - used_s) + (key in local))
        return max(per_rank.values(), default=0)


# --------------------------------------------------------------------------------------------------------
# Lanes
# --------------------------------------------------------------------------------------------------------
def _choose_lanes(builder: _Builder, topology: Topology, lanes: int | None,
                  max_tbs: int | None = None) -> list[int]:
    """Deal the trees onto L lanes: ``lanes`` if given, else the largest L <= 32 whose threadblock estimate
    fits 90% of the threadblocks a GPU may run (the smallest SM count of the topology's GPUs, or ``max_tbs``
    when the runtime allows fewer; 1 lane if none fits; the margin covers fused pairs the lowering splits
    again to order a threadblock). Fewer lanes means more trees share each lane's threadblocks, one after
    another. Where the trees are equivariant (:func:`_equivariant_lanes`), only the counts that keep them so
    are taken, so that every GPU runs the same threadblocks. An allreduce's allgather halves, when on lanes of
    their own (``builder.split``), take L more lanes, dealt the same way."""
    phases = 2 if builder.split else 1
    if lanes is not None:
        return _deal(builder, max(1, lanes // phases), False)
    limit = topology.min_sms() if max_tbs is None else min(max_tbs, topology.min_sms())
    sms = (9 * limit) // 10
    n = len({g // builder.mult for g in builder.group if not builder.phase.get(g)})     # trees, each on one lane
    strict = all(builder.shape) and not builder.coll.rooted
    for L in range(min(MAX_LANES // phases, max(1, n)), 0, -1):
        lane_of = _deal(builder, L, strict)
        if lane_of is not None and builder.threadblocks(lane_of) <= sms:
            return lane_of
    return _deal(builder, 1, False)


def _deal(builder: _Builder, L: int, strict: bool) -> list[int] | None:
    """Each task's lane with L lanes per phase: :func:`_equivariant_lanes`, or (unless ``strict``) round-robin
    by tree; an allreduce's allgather halves on their own lanes (``builder.phase``) after the first L.

    The ``mult`` chunks of one tree (a chunk factor above one tree's share) share its lane, one after another.
    Why: a vertex reduces its children one per step, each step a threadblock of its own that waits for the
    previous one, and the runtime runs a step's whole chunk before the threadblock that waits on it starts; a
    tree's chunks in sequence on one lane keep those threadblocks busy at once, each on the next chunk (a
    pipeline, the way a ring's threadblock works through its slices), where chunks dealt to lanes of their own
    each wait out the whole chain on threadblocks of their own. 1 x dgx-a100 reduce-scatter at 8 chunks per
    tree and 4 copies, 56 threadblocks both ways: 16 MB 127 GB/s busbw against 84 dealt apart."""
    lane_of = _equivariant_lanes(builder, L)
    if lane_of is None:
        if strict:
            return None
        lane_of = [(g // builder.mult) % L for g in builder.group]
    return [x + L * builder.phase.get(g, 0) for x, g in zip(lane_of, builder.group)]


def _equivariant_lanes(builder: _Builder, L: int) -> list[int] | None:
    """The lane of each task such that node rotation and local shift (the symmetries the trees are grown
    under, :func:`colls.synth.packing.pack`) map the tasks of a lane onto the tasks of one lane, or None when
    L lanes cannot be dealt so (or there is no such symmetry: ranks not node-major, or one root).

    Task j of root r (the j-th of r's trees, ordered by their shape seen from r, :meth:`_Builder.rel`; its
    ``mult`` chunks are consecutive tasks, ``t = j // mult`` the tree) goes to lane ``(local(r) + t) mod L``
    when L divides the GPUs per node P, and to ``(node(r) mod m) P + (local(r) + t) mod P`` when L = m P
    with m dividing the node count: a rotation or shift moves every lane to one lane. A task is dealt by its group: unsplit, an allreduce's allgather task shares its
    reduce-scatter task's lane; split, :func:`_deal` puts it on the same lane of the second L."""
    nodes, per = builder.shape
    if not nodes or not per or builder.coll.rooted:
        return None
    if per % L == 0:
        def lane(r, j):
            return (r % per + j) % L
    elif L % per == 0 and nodes % (L // per) == 0:
        def lane(r, j):
            return ((r // per) % (L // per)) * per + (r % per + j) % per
    else:
        return None
    return [lane(r, j // builder.mult) for r, j in (builder.place[g] for g in builder.group)]


# --------------------------------------------------------------------------------------------------------
# Facts
# --------------------------------------------------------------------------------------------------------
def _info(topology, collective, plans, k, k_opt, capped, nlanes, mult, depth) -> dict:
    n = collective.nranks
    rooted = collective.kind in ("broadcast", "reduce")
    info: dict = {"method": METHOD, "k": k, "k_optimal": k_opt if capped is None else None,
                  "k_best_within_cap": k_opt, "lanes": nlanes}
    if capped:
        info["k_capped"] = capped
    if k != k_opt:
        info["k_note"] = f"k = {k} requested; the search chose {k_opt}"
    parts = []
    for p in plans:
        trees, var, gsize = p.trees(k)
        sg = var.split
        parts.append({
            "direction": "reversed (towards the roots)" if p.reverse else "forward",
            "x_star": p.optimum, "split_rate": sg.rate, "split_target": sg.target,
            "achieved_rate": p.rate(k),
            "rate_fraction": float(p.rate(k) / p.optimum) if p.optimum else 0.0,
            "trees": sum(t.mult for t in trees), "distinct_trees": len(trees),
            "max_depth": max((max(t.depth().values()) for t in trees), default=0),
            "splitting": sg.method, "split_style": var.style, "dropped_vertices": list(sg.dropped),
            "routes_match": sg.routes_match, "symmetry": gsize, "notes": list(sg.notes)})
    x = _combined(plans, k)
    x_star = plans[0].optimum if len(plans) == 1 else \
        1 / sum((1 / p.optimum for p in plans), Fraction(0))
    info.update({
        "x_star": x_star, "achieved_rate": x,
        "achieved_algbw_gbps": float(x if rooted else n * x),
        "bound_algbw_gbps": float(x_star if rooted else n * x_star),
        "rate_fraction": float(x / x_star) if x_star else 0.0,
        "trees": sum(part["trees"] for part in parts),
        "splitting": "+".join(sorted({part["splitting"] for part in parts})),
        "chunks_per_tree": mult,
        "depth": depth,
    })
    if len(parts) == 1:
        info.update({key: val for key, val in parts[0].items() if key not in info and key != "direction"})
    else:
        info["reducescatter"], info["allgather"] = parts
    return info


def _num(x: Fraction) -> str:
    x = Fraction(x)
    return str(x.numerator) if x.denominator == 1 else f"{float(x):.4g}"
