"""Ring schedules for all six collectives, with topology-aware ring orders and several rings (lanes).

Ring orders
-----------
*One node.* A ring is a Hamiltonian cycle over GPU pairs that have a route. :func:`best_tour` finds the
cycle that maximises the bottleneck pair bandwidth, then the total (branch and bound over a depth-first
search, run once per candidate bottleneck from the highest down; deterministic). On a switch every pair
is as good as every other and the identity comes out at once; on meshes (NDv2's hybrid cube mesh, the
16 GCDs of an MI250 node) the search follows the widest links.

*Several rings.* When one ring cannot use every link (meshes), several rings (lanes) share the data
evenly, each owning its own slice of the chunks, and ring counts 1..8 are compared by the bandwidth
model (:func:`model_algbw`, the :meth:`Schedule.model_algbw` of the schedule it would build; fewest
rings on a tie). On one node with few Hamiltonian cycles (at most
CYCLE_LIMIT: meshes) :func:`pack_rings` picks, for each count, the multiset of cycles that maximises the
per-ring rate ``min over links of bw / (rings on the link)``: on NDv2 six rings load every NVLink in
proportion to its bandwidth (the optimum, 150 GB/s out of every GPU); on MI250 six rings reach 300 GB/s
(no set of rings does better: a GCD's four links to its package twin can only be entered from its three
single links). Elsewhere (switches, several nodes) each next ring is the best cycle under residual
weights, the smallest ``bw / (rings already on the link + 1)`` over a pair's route (greedy).

*Several nodes.* Rings cross nodes through NICs, one ring per NIC rail. A GPU's rail is the NIC its route
to the next node leaves by (and, entering, arrives by). Ring ``j`` enters node ``n`` on rail
``j + s[n]`` and leaves it on rail ``j + s[n+1]`` (mod the number of rails), so every hop between nodes
stays on one rail and, over the rings, each node's NICs send once and receive once each. When a rail
serves two or more GPUs of a node (DGX-2: NIC j serves GPUs 2j, 2j+1; NDv2: one NIC for all 8) the ring
enters and leaves on the same rail (``s = 0``); when each rail has one GPU (DGX A100, H100) ``s``
alternates 0, 1, 0, 1, ... (ending 2 for an odd node count; with only two rails and an odd node count the
wrap-around hop crosses rails through the spine). Where every NIC hangs off one switch (``layout:
single``, MI250 as ForestColl models it), a hop between nodes costs the same on any rails, so ``s = 0``
for entering and 1 for leaving on every node: every node runs the same path, as the runtime's own rings
do. Inside a node the ring follows the best Hamiltonian
path between its entry and exit GPU; where many GPUs share a rail, the entry/exit pair is chosen by
cutting the node's best cycle at a hop between allowed GPUs, preferring GPUs used least so far.

Collectives on a ring of N ranks (positions p = 0..N-1, sends go from p to p+1)
-------------------------------------------------------------------------------
==============  ===================================================================  ================
collective      algorithm                                                            steps
==============  ===================================================================  ================
allgather       own chunk copied locally and sent on; received chunks stored and     N-1
                forwarded (``rcs``)
reducescatter   partial sums travel in flight (``rrs``), the last receive reduces    N-1
                into the output; the input is never written
allreduce       reduce-scatter then allgather over N segments per ring: partial      2(N-1)
                sums in flight, the final sum stored and forwarded (``rrcs``),
                then stored and forwarded (``rcs``)
alltoall        shifts along the ring order: the block for ``p+h`` goes straight     ceil((N-1)/2)
                to it, shifts ``h`` and ``N-h`` in one step; a pair without a        + relay hops
                route is relayed over the least-loaded chain of linked pairs; the    + 1
                blocks an in-place call would overwrite too early wait in scratch
broadcast       pipelined chain from the root: N segments per ring                    2(N-1)
reduce          pipelined chain towards the root, partial sums in flight             2(N-1)
==============  ===================================================================  ================

Every ring op moves one chunk (see :class:`_Lane`: larger ops deadlock a ring when buffers are large).
Per rank and ring the lowering then needs 2N-1 instructions for allreduce (63 for N = 32, under the
runtimes' 64 steps per threadblock), N or N+1 for allgather and reducescatter, N (one per segment) for
the chains. Alltoall talks to each peer in its own threadblock, a few steps each.

Chunk factor: a ring needs one chunk per rank block (allgather, reducescatter) or N segments
(allreduce, broadcast, reduce); with R rings the chunk factor becomes the smallest multiple of R times
that need which is at least the requested one. Where that leaves a ring k > 1 chunks of a block, it runs
k rounds one after another (the chains simply get k times more segments). Alltoall keeps the requested
chunk factor. Every schedule is right both out of place and in place (:meth:`Schedule.check` runs
both).

References: the bandwidth-optimal ring allreduce (Patarasuk and Yuan, JPDC 2009); NCCL's rings; ring
orders and NIC rails as in NCCL's topology search (``src/graph/search.cc``: rings per NIC, rail-local
inter-node hops).
"""

from __future__ import annotations

import heapq
import re
from collections import defaultdict
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

from colls.collectives import Collective
from colls.errors import CollsError
from colls.schedule import Op, Schedule
from colls.synth.common import checked_route, schedule_facts
from colls.synth.direct import alltoall_ops, copy_lanes, staged_blocks
from colls.topology import NIC, Topology

METHOD = "ring"
MAX_RINGS = 8          # ring counts tried by default (or the number of NIC rails, if more)
MAX_CHANNELS = 32      # the runtimes' channel limit: no default count of rings above it
# Rings beyond the channels share them: a channel holds one threadblock per peer and direction at a rank, so rings
# whose ranks send to (and receive from) other peers can run on one channel (the lowering lays them out, or
# refuses): 8 MI300X, 7 link-disjoint rings, 128 rings on 32 channels load every link 19/128 of the data where 32
# rings load some 5/32 (7 divides no power of two): reduce-scatter 283 -> 314 GB/s busbw at 1 GB, RCCL's ring
# 301. At most one per threadblock a GPU runs (colls' --rings takes no more than this).
MAX_SHARED_RINGS = 1024
SEARCH_BUDGET = 100_000  # search nodes per best_tour level / pack_rings rate (a count, not a timer)
CYCLE_LIMIT = 1000     # more Hamiltonian cycles than this: a dense graph, planned greedily


# --------------------------------------------------------------------------------------------------------
# Hamiltonian cycles and paths
# --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tour:
    """A Hamiltonian cycle (closed) or path: vertices in order, the smallest hop weight and the summed
    hop value."""

    order: tuple
    bottleneck: Fraction | None
    total: Fraction


class _OutOfBudget(Exception):
    pass


def best_tour(vertices, weight: dict, start, end=None, value: dict | None = None,
              budget: int = SEARCH_BUDGET) -> Tour | None:
    """The Hamiltonian cycle through ``vertices`` from ``start`` (``end`` None) or the Hamiltonian path
    from ``start`` to ``end`` that maximises the smallest hop weight, then the total hop value.

    Parameters
    ----------
    vertices : the vertices to visit (each exactly once).
    weight : ``(a, b) -> weight`` for the allowed directed hops (absent = not allowed).
    start, end : first vertex; last vertex of a path (None for a cycle back to ``start``).
    value : ``(a, b) -> value`` summed for the second criterion (default: ``weight``). The planner
        ranks by residual bandwidth but sums the links' own bandwidth, so that on a switch, where every
        path loads the same ports, all paths tie and the first one found is provably the best.
    budget : search nodes per bottleneck level; when exhausted the best tour found so far is returned.

    Returns the :class:`Tour`, or None when no tour exists (or none was found within the budget).

    Method: for each distinct weight ``w`` from the largest down, a depth-first branch and bound over the
    hops of weight >= ``w`` maximises the total (bound: the current total plus every remaining sender's
    best hop; a vertex left without a usable predecessor or successor cuts the branch). The first level
    with a tour gives the optimal bottleneck. Ties go to the first tour in (value, vertex) order, so the
    answer is deterministic; with equal values everywhere the first tour found is provably optimal.
    """
    value = weight if value is None else value
    verts = list(vertices)
    n = len(verts)
    if n == 1:
        return Tour((start,), None, Fraction(0)) if end in (None, start) else None
    idx = {v: i for i, v in enumerate(verts)}
    hops = {(idx[a], idx[b]): w for (a, b), w in weight.items() if a in idx and b in idx and a != b}
    s = idx[start]
    e = None if end is None else idx[end]
    for level in sorted(set(hops.values()), reverse=True):
        allowed = {h: value[verts[h[0]], verts[h[1]]] for h, w in hops.items() if w >= level}
        found = _search(n, allowed, s, e, budget)
        if found is not None:
            order = tuple(verts[i] for i in found)
            pairs = _hops(order, end is None)
            return Tour(order, min(weight[h] for h in pairs), sum((value[h] for h in pairs), Fraction(0)))
    return None


def _hops(order, closed: bool):
    pairs = list(zip(order, order[1:]))
    if closed and len(order) > 1:
        pairs.append((order[-1], order[0]))
    return pairs


def _search(n: int, hops: dict, s: int, e: int | None, budget: int) -> list[int] | None:
    """Branch and bound for the largest-total tour over ``hops`` (see :func:`best_tour`)."""
    closed = e is None
    out = [[] for _ in range(n)]
    inmask, outmask = [0] * n, [0] * n
    for (a, b), w in sorted(hops.items(), key=lambda kv: (kv[0][0], -kv[1], kv[0][1])):
        out[a].append((b, w))
        inmask[b] |= 1 << a
        outmask[a] |= 1 << b
    senders = [i for i in range(n) if closed or i != e]
    if any(not out[i] for i in senders) or any(not inmask[i] for i in range(n) if closed or i != s):
        return None
    maxout = [max((w for _, w in out[i]), default=0) for i in range(n)]
    full = (1 << n) - 1
    best_total: list = [None]
    best_path: list = [None]
    path = [s]
    expanded = [0]

    def feasible(visited: int, cur: int) -> bool:
        # every unvisited vertex still needs a predecessor (an unvisited vertex or cur) and a successor
        # (an unvisited vertex, or start to close a cycle; a path's end needs none)
        free = full & ~visited
        rest = free
        while rest:
            u = (rest & -rest).bit_length() - 1
            rest &= rest - 1
            bit = 1 << u
            if not inmask[u] & (free | (1 << cur)) & ~bit:
                return False
            if u != e and not outmask[u] & ((free & ~bit) | ((1 << s) if closed else 0)):
                return False
        return True

    def rec(i: int, visited: int, total, bound) -> None:
        if visited == full:
            if closed:
                w = hops.get((i, s))
                if w is None:
                    return
                total += w
            if best_total[0] is None or total > best_total[0]:
                best_total[0], best_path[0] = total, list(path)
            return
        if best_total[0] is not None and total + bound <= best_total[0]:
            return
        expanded[0] += 1
        if expanded[0] > budget:
            raise _OutOfBudget
        rest = bound - maxout[i]
        for j, w in out[i]:
            bit = 1 << j
            if visited & bit or (j == e and visited | bit != full):
                continue
            if not feasible(visited | bit, j):
                continue
            path.append(j)
            rec(j, visited | bit, total + w, rest)
            path.pop()

    try:
        rec(s, 1 << s, 0, sum(maxout[i] for i in senders))
    except _OutOfBudget:
        pass
    return best_path[0]


def all_cycles(vertices, hops, limit: int = CYCLE_LIMIT, budget: int = SEARCH_BUDGET) -> list | None:
    """Every directed Hamiltonian cycle through ``vertices`` over the allowed ``hops`` (pairs), each
    starting at the first vertex; None if there are more than ``limit`` (a dense graph: a switch) or
    the depth-first enumeration takes more than ``budget`` steps."""
    verts = list(vertices)
    n = len(verts)
    if n == 1:
        return [tuple(verts)]
    out = {v: [b for b in verts if (v, b) in hops] for v in verts}
    start, found, expanded = verts[0], [], [0]

    def rec(v, seen: set, path: list) -> bool:
        expanded[0] += 1
        if len(path) == n:
            if (v, start) in hops:
                found.append(tuple(path))
            return len(found) <= limit
        for b in out[v]:
            if b not in seen:
                seen.add(b)
                path.append(b)
                ok = rec(b, seen, path) and expanded[0] <= budget
                path.pop()
                seen.discard(b)
                if not ok:
                    return False
        return True

    return found if rec(start, {start}, [start]) else None


def disjoint_cycles(vertices, hops, budget: int = SEARCH_BUDGET) -> list[tuple]:
    """As many Hamiltonian cycles through ``vertices`` as can share no hop (each a tuple starting at the first
    vertex), at most the smallest out-degree: on a node where every GPU links to every other by one link of
    the same bandwidth (8 MI300X: 7 cycles, Tillson 1980: the complete digraph on n vertices splits into
    n - 1 Hamiltonian cycles for every n but 4 and 6), each cycle then loads each link it takes once.

    Depth-first over cycles, each built hop by hop over the hops no earlier cycle took, trying first the next
    vertex with the fewest hops left out of it (the way a knight's tour is found); a cycle that would leave some
    vertex without a free hop in or out for the cycles still to come is not taken, and a dead end goes back to
    the previous cycle. ``budget`` bounds the search (search nodes); the most cycles found within it is the
    answer, deterministic."""
    verts = list(vertices)
    n = len(verts)
    if n < 3:
        return [tuple(verts)] if n == 1 else []
    free = {v: {b for b in verts if b != v and (v, b) in hops} for v in verts}
    target = min(len(free[v]) for v in verts)
    best: list = []
    chosen: list = []
    expanded = [0]

    def indeg(v):
        return sum(1 for u in verts if v in free[u])

    def cycle(start):
        """The next Hamiltonian cycle over the free hops (a generator: each in turn, for backtracking)."""
        path, seen = [start], {start}

        def rec(v):
            expanded[0] += 1
            if expanded[0] > budget:
                raise _OutOfBudget
            if len(path) == n:
                if start in free[v]:
                    yield tuple(path)
                return
            for b in sorted((b for b in free[v] if b not in seen), key=lambda b: (len(free[b] - seen), verts.index(b))):
                path.append(b)
                seen.add(b)
                yield from rec(b)
                seen.discard(b)
                path.pop()

        yield from rec(start)

    def take(order, sign):
        for a, b in _hops(order, True):
            if sign > 0:
                free[a].discard(b)
            else:
                free[a].add(b)

    def grow():
        nonlocal best
        if len(chosen) > len(best):
            best = list(chosen)
        if len(chosen) == target:
            return True
        for order in cycle(verts[0]):
            take(order, 1)
            left = target - len(chosen) - 1
            if all(len(free[v]) >= left and indeg(v) >= left for v in verts):
                chosen.append(order)
                if grow():
                    return True
                chosen.pop()
            take(order, -1)
        return False

    try:
        grow()
    except _OutOfBudget:
        pass
    return best


def pack_rings(topology: Topology, cycles: list[tuple], count: int, above: Fraction | None = None,
               budget: int = SEARCH_BUDGET) -> tuple[Fraction, list[tuple]] | None:
    """``count`` rings from ``cycles`` (repeats allowed) that maximise the per-ring rate
    ``T = min over physical links of bw / (rings on the link)``; returns (T, rings) or None.

    Each candidate ``T`` (a link bandwidth over 1..count, from the largest down; only ``count * T >
    above`` when ``above`` is given) gives every link a capacity of ``floor(bw / T)`` rings, and a
    depth-first search picks cycles in their given order (best first), skipping every cycle through a
    saturated link (bit sets). Together the rings then carry ``count * T``: on NDv2's hybrid cube mesh
    six rings use every NVLink exactly in proportion to its bandwidth (150 GB/s per GPU).
    """
    link_index: dict = {}
    uses = []  # per cycle: [(link, times)]
    for order in cycles:
        c: dict = defaultdict(int)
        for a, b in _hops(order, True):
            route = topology.route(a, b)
            for link in zip(route, route[1:]):
                c[link_index.setdefault(link, len(link_index))] += 1
        uses.append(sorted(c.items()))
    links = sorted(link_index, key=link_index.get)
    bw = [topology.bw(u, v) for u, v in links]
    through = [0] * len(links)  # link -> bit set of the cycles using it
    for i, u in enumerate(uses):
        for e, _ in u:
            through[e] |= 1 << i
    gpus = topology.gpus
    egress = {g: {link_index[(u, v)] for (u, v) in links if u == g} for g in gpus}
    ingress = {g: {link_index[(u, v)] for (u, v) in links if v == g} for g in gpus}
    everything = (1 << len(cycles)) - 1
    for rate in sorted({b / m for b in set(bw) for m in range(1, count + 1)}, reverse=True):
        if above is not None and count * rate <= above:
            break
        cap = [int(b // rate) for b in bw]
        if any(sum(cap[e] for e in side[g]) < count for side in (egress, ingress) for g in gpus):
            continue
        blocked = 0
        for e, k in enumerate(cap):
            if k == 0:
                blocked |= through[e]
        expanded = [0]

        def dfs(first: int, left: int, allowed: int) -> list[int] | None:
            if left == 0:
                return []
            expanded[0] += 1
            if expanded[0] > budget:
                raise _OutOfBudget
            rest = allowed >> first << first
            while rest:
                i = (rest & -rest).bit_length() - 1
                rest &= rest - 1
                if any(cap[e] < k for e, k in uses[i]):
                    continue
                for e, k in uses[i]:
                    cap[e] -= k
                full = 0
                for e, _ in uses[i]:
                    if cap[e] == 0:
                        full |= through[e]
                found = dfs(i, left - 1, allowed & ~full)
                for e, k in uses[i]:
                    cap[e] += k
                if found is not None:
                    return [i] + found
            return None

        try:
            chosen = dfs(0, count, everything & ~blocked)
        except _OutOfBudget:
            chosen = None
        if chosen is not None:
            return rate, [cycles[i] for i in chosen]
    return None


# --------------------------------------------------------------------------------------------------------
# Ring planning
# --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Ring:
    """One ring: ranks in order (the last sends to the first) and, across nodes, its NIC crossings."""

    order: tuple
    crossings: tuple = ()


def _natural(text: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def _rail(topology: Topology, route: tuple | None, last: bool) -> str | None:
    """The rail a route leaves (or, ``last``, enters) a node by: its first (last) NIC's name without the
    node prefix and direction (``"n1.nic3.rx"`` -> ``"nic3"``); ``"net"`` if it passes no NIC."""
    if route is None:
        return None
    nics = [v for v in route[1:-1] if topology.kind(v) == NIC]
    if not nics:
        return "net"
    name = str(nics[-1] if last else nics[0])
    return re.sub(r"\.(tx|rx)$", "", re.sub(r"^n\d+\.", "", name))


class _Planner:
    """Plans ring sets: packed from all Hamiltonian cycles on a one-node mesh, otherwise built one ring
    at a time, each under the link loads the earlier ones left (greedy)."""

    def __init__(self, topology: Topology):
        self.topology = topology
        self.loads: dict = defaultdict(int)  # physical link -> rings using it
        self.rings: list[Ring] = []
        self.rails: list[str] = []
        groups: dict = defaultdict(list)
        for r in topology.gpus:
            groups[topology.node_of(r)].append(r)
        self.groups = [groups[k] for k in sorted(groups, key=lambda k: (k is None, k))]
        if len(self.groups) > 1:
            self._init_rails()

    def ring_sets(self, counts) -> dict[int, list[Ring]]:
        """Ring sets to compare, by ring count. On one node with few Hamiltonian cycles (a mesh), the
        :func:`pack_rings` set of each count, leaving out counts that cannot carry more than a smaller
        count already does; otherwise the prefixes of the greedy rings."""
        cycles = self._cycles if len(self.groups) == 1 else None
        if cycles is None:
            planned = self.plan(max(counts))
            spread = self._disjoint()
            out = {}
            for k in counts:
                rings = planned[:k]
                if spread:                 # k rings over the link-disjoint cycles in turn, where that is faster
                    turn = [spread[j % len(spread)] for j in range(k)]
                    if self._rate(turn) > self._rate(rings):
                        rings = turn
                out[k] = rings
            return out
        sets: dict = {}
        carried = None
        for k in counts:
            found = pack_rings(self.topology, cycles, k, above=carried if len(counts) > 1 else None)
            if found is not None:
                sets[k] = [Ring(order) for order in found[1]]
                carried = k * found[0] if carried is None else max(carried, k * found[0])
        return sets or {k: self.plan(k) for k in counts}

    def _disjoint(self) -> list[Ring]:
        """Link-disjoint Hamiltonian cycles of a dense one-node machine (:func:`disjoint_cycles` over the pairs
        with a route, kept when together each runs at one ring's rate: no physical link they share slows them),
        or [] when there are not two: the greedy rings can
        leave links no ring takes (8 MI300X, every pair one xGMI link: 6 rings cover 48 of the 56 links, and
        the last 8 form no ring), these load every link alike. On several nodes: :meth:`_disjoint_paths`."""
        if len(self.groups) > 1:
            return self._disjoint_paths()
        if self._cycles is not None:
            return []                   # a sparse mesh whose every ring :func:`pack_rings` weighs
        t, verts = self.topology, self.groups[0]
        hops = {(a, b) for a in verts for b in verts if a != b and t.route(a, b) is not None}
        rings = [Ring(order) for order in disjoint_cycles(verts, hops)]
        # only where sharing no hop means sharing no slower link (not through a switch, whose ports they share)
        return rings if len(rings) > 1 and self._rate(rings) == self._rate(rings[:1]) else []

    def _rate(self, rings: list[Ring]) -> Fraction:
        """The per-ring rate of a ring set: the least over its physical links of bandwidth / rings on it."""
        loads: dict = defaultdict(int)
        for ring in rings:
            for a, b in _hops(ring.order, True):
                route = self.topology.route(a, b)
                for link in zip(route, route[1:]):
                    loads[link] += 1
        return min(Fraction(self.topology.bw(*link)) / k for link, k in loads.items())

    @cached_property
    def _cycles(self) -> list[tuple] | None:
        """All Hamiltonian cycles of the node over routed pairs, best (bottleneck, total) first; None
        for a dense graph (more than CYCLE_LIMIT). Enumerated once per planner."""
        t, verts = self.topology, self.groups[0]
        hops = {(a, b) for a in verts for b in verts if a != b and t.route(a, b) is not None}
        cycles = all_cycles(verts, hops)
        if cycles is None:
            return None
        if not cycles:
            raise self._no_ring(verts)

        def quality(order):
            ws = [t.route_bandwidth(t.route(a, b)) for a, b in _hops(order, True)]
            return -min(ws), -sum(ws), order

        return sorted(cycles, key=quality)

    def plan(self, count: int) -> list[Ring]:
        """The first ``count`` greedy rings (each planned under the loads of the ones before)."""
        while len(self.rings) < count:
            ring = self._next_single() if len(self.groups) == 1 else self._next_multi(len(self.rings))
            for a, b in _hops(ring.order, True):
                route = self.topology.route(a, b)
                for link in zip(route, route[1:]):
                    self.loads[link] += 1
            self.rings.append(ring)
        return self.rings[:count]

    @property
    def default_count(self) -> int:
        return min(MAX_CHANNELS, max(MAX_RINGS, len(self.rails)))

    def weights(self, verts) -> tuple[dict, dict]:
        """Of every routed pair: the residual weight, min over its links of bw / (rings on it + 1), and
        the value, its route's own bandwidth (see :func:`best_tour`)."""
        t = self.topology
        w, v = {}, {}
        for a in verts:
            for b in verts:
                route = t.route(a, b) if a != b else None
                if route is not None:
                    links = list(zip(route, route[1:]))
                    w[a, b] = min(t.bw(*link) / (self.loads[link] + 1) for link in links)
                    v[a, b] = t.route_bandwidth(route)
        return w, v

    def _next_single(self) -> Ring:
        verts = self.groups[0]
        w, v = self.weights(verts)
        tour = best_tour(verts, w, verts[0], value=v)
        if tour is None:
            raise self._no_ring(verts)
        return Ring(tour.order)

    def _no_ring(self, verts) -> CollsError:
        t = self.topology
        missing = [(a, b) for a in verts for b in verts if a != b and t.route(a, b) is None]
        why = "the search found none"
        if missing:
            why = (f"no link between GPU {missing[0][0]} and GPU {missing[0][1]}, and "
                   f"{len(missing) - 1} more pairs")
        return CollsError(f"{METHOD}: no ring through all {len(verts)} GPUs of {t.name} uses only "
                          f"linked pairs ({why})")

    # --- several nodes ------------------------------------------------------------------------------
    def _init_rails(self) -> None:
        t, groups = self.topology, self.groups
        nn = len(groups)
        self.tx, self.rx = {}, {}
        for n, g in enumerate(groups):
            nxt, prv = groups[(n + 1) % nn], groups[(n - 1) % nn]
            for i, a in enumerate(g):
                self.tx[a] = _rail(t, t.route(a, nxt[min(i, len(nxt) - 1)]), last=False)
                self.rx[a] = _rail(t, t.route(prv[min(i, len(prv) - 1)], a), last=True)
        self.rails = sorted({r for r in list(self.tx.values()) + list(self.rx.values()) if r}, key=_natural)
        if not self.rails:
            raise CollsError(f"{METHOD}: no GPU of {t.name} has a route to another node")
        k = len(self.rails)
        # Can every node enter and leave on the same rail through two different GPUs?
        same = all(len(g) == 1 or any(self.rx[a] == r and self.tx[b] == r and a != b
                                      for a in g for b in g)
                   for g in groups for r in self.rails)
        if same:
            entry = [0] * nn
        elif self._rails_free():
            # one switch for every NIC (layout single): every node enters on rail j and leaves on rail j + 1
            # (below), so every node runs the same path (as the runtime's own rings do: one search, every node
            # alike)
            entry = [0] * nn
        else:
            entry = [n % 2 for n in range(nn)]
            if nn % 2 and nn > 1 and k >= 3:
                entry[-1] = 2
        leave = [entry[(n + 1) % nn] for n in range(nn)]
        for n in range(nn):
            if not same and leave[n] == entry[n]:
                leave[n] = entry[n] + 1  # one switch, or two rails and an odd node count: it crosses rails
        self.entry_offset, self.exit_offset = entry, leave
        self.uses: dict = defaultdict(int)  # GPU -> times it was a ring's entry or exit
        self.shapes: dict = {}              # node's GPUs -> (what a node path depends on, its links)
        self.paths: dict = {}               # what a node path depends on -> the path, in local numbers

    def _rails_free(self) -> bool:
        """Whether a hop between nodes costs the same whichever rails it leaves and enters by: every GPU of a
        node reaches every GPU of the next node over a route as wide and as fast as the one to its own rail's
        GPU (one switch for every NIC, ``network: {layout: single}``)."""
        t, groups = self.topology, self.groups
        if len(self.rails) < 2:
            return False
        for n, g in enumerate(groups):
            nxt = groups[(n + 1) % len(groups)]
            for i, a in enumerate(g):
                own = t.route(a, nxt[min(i, len(nxt) - 1)])
                if own is None:
                    return False
                cost = (t.route_bandwidth(own), t.route_latency(own))
                for b in nxt:
                    r = t.route(a, b)
                    if r is None or (t.route_bandwidth(r), t.route_latency(r)) != cost:
                        return False
        return True

    def _next_multi(self, j: int) -> Ring:
        k = len(self.rails)
        paths = []
        for n, g in enumerate(self.groups):
            paths.append(self._node_path(g, self.rails[(j + self.entry_offset[n]) % k],
                                         self.rails[(j + self.exit_offset[n]) % k]))
        for p in paths:
            self.uses[p[0]] += 1
            self.uses[p[-1]] += 1
        return self._joined(paths)

    def _joined(self, paths: list[tuple]) -> Ring:
        """The ring through the nodes' ``paths`` in turn, with the NIC crossings between them."""
        t = self.topology
        crossings = []
        nn = len(paths)
        for n in range(nn):
            x, e = paths[n][-1], paths[(n + 1) % nn][0]
            route = checked_route(t, x, e, METHOD, "a ring must cross between these nodes here")
            nics = [v for v in route[1:-1] if t.kind(v) == NIC]
            out, into = _rail(t, route, False), _rail(t, route, True)
            crossings.append({"from": x, "to": e, "tx": str(nics[0]) if nics else None,
                              "rx": str(nics[-1]) if nics else None,
                              "rail": out if out == into else f"{out}->{into}", "rail_matched": out == into})
        return Ring(tuple(r for p in paths for r in p), tuple(crossings))

    def _disjoint_paths(self) -> list[Ring]:
        """On an even number of nodes where every GPU links to every other of its node by one link of the same
        bandwidth (xGMI on MI300X) and each GPU of a node has a rail of its own that meets the same GPU of the
        next node: as many rings as a node has GPUs, m, whose paths through each node share no link and whose
        crossings share no NIC; else []. The greedy rings' node paths overlap there (2 x MI300X: its busiest
        xGMI link carried two of 8 rings, 51 % of the link optimum).

        Ring j enters node n at local GPU j + n m/2 and takes the zigzag v, v-1, v+1, v-2, ..., v + m/2 (mod m):
        its hops' differences are every nonzero residue once (a sequencing of Z_m, Gordon 1961), so the m
        shifted paths use each of the node's m(m-1) links once, and it leaves on the rail of v + m/2 to the same
        GPU of the next node; after an even number of nodes it is back at GPU j."""
        t, groups = self.topology, self.groups
        nn, m = len(groups), len(groups[0])
        if nn % 2 or m % 2 or m < 4 or any(len(g) != m for g in groups):
            return []
        for n, g in enumerate(groups):
            routes = [t.route(a, b) for a in g for b in g if a != b]
            if any(r is None or len(r) != 2 for r in routes) or len({t.bw(*r) for r in routes}) != 1:
                return []
            nxt = groups[(n + 1) % nn]
            if len({self.tx[a] for a in g}) != m or any(self.tx[a] is None or self.tx[a] != self.rx[nxt[i]]
                                                        for i, a in enumerate(g)):
                return []
        zigzag = [0] + [v for d in range(1, m // 2) for v in (-d % m, d)] + [m // 2]
        return [self._joined([tuple(g[(j + n * m // 2 + z) % m] for z in zigzag) for n, g in enumerate(groups)])
                for j in range(m)]

    def _node_path(self, g: list, entry_rail: str, exit_rail: str) -> tuple:
        """The node's part of the next ring, from a GPU on ``entry_rail`` to one on ``exit_rail``.

        Nodes alike (the same routes between their GPUs over links of the same bandwidths, the same rails,
        in GPU order) that carry the same ring loads get the same path: it is computed once and mapped,
        which is exactly what computing it again would give (every choice below depends only on those)."""
        if len(g) == 1:
            return (g[0],)
        shape, links = self._shape(tuple(g))
        key = (shape, entry_rail, exit_rail, tuple(self.loads[link] for link in links),
               tuple(self.uses[a] for a in g))
        local = self.paths.get(key)
        if local is None:
            path = self._new_node_path(g, entry_rail, exit_rail)
            self.paths[key] = tuple(g.index(a) for a in path)
            return path
        return tuple(g[i] for i in local)

    def _shape(self, g: tuple) -> tuple:
        """What :meth:`_new_node_path` sees of a node, in local GPU numbers: each pair's route as local link
        numbers and its bandwidth, each link's bandwidth, each GPU's rails; and the links, in that order."""
        if g not in self.shapes:
            t = self.topology
            links: dict = {}
            routes = []
            for a in g:
                for b in g:
                    route = t.route(a, b) if a != b else None
                    if route is None:
                        routes.append(None)
                        continue
                    hops = tuple(links.setdefault(link, len(links)) for link in zip(route, route[1:]))
                    routes.append((hops, t.route_bandwidth(route)))
            shape = (tuple(routes), tuple(t.bw(*link) for link in links),
                     tuple((self.rx.get(a), self.tx.get(a)) for a in g))
            self.shapes[g] = (shape, list(links))
        return self.shapes[g]

    def _new_node_path(self, g: list, entry_rail: str, exit_rail: str) -> tuple:
        ins = [a for a in g if self.rx[a] == entry_rail] or [a for a in g if self.rx[a]]
        outs = [a for a in g if self.tx[a] == exit_rail] or [a for a in g if self.tx[a]]
        pairs = [(a, b) for a in ins for b in outs if a != b]
        w, v = self.weights(g)
        candidates = []
        if len(pairs) > 4:
            # Many GPUs share the rails: cut the node's best cycle at a hop exit -> entry.
            tour = best_tour(g, w, g[0], value=v)
            allowed = set(pairs)
            for i in range(len(g) if tour else 0):
                if (tour.order[i], tour.order[i - 1]) in allowed:
                    candidates.append(tour.order[i:] + tour.order[:i])
        if not candidates:
            for a, b in pairs:
                found = best_tour(g, w, a, b, value=v)
                if found is not None:
                    candidates.append(found.order)
        if not candidates:
            raise CollsError(f"{METHOD}: no path through the {len(g)} GPUs of node "
                             f"{self.topology.node_of(g[0])} of {self.topology.name} joins a GPU on "
                             f"{entry_rail} to one on {exit_rail} over linked pairs")

        def score(path):
            hops = _hops(path, False)
            return (min(w[h] for h in hops), sum((v[h] for h in hops), Fraction(0)),
                    -(self.uses[path[0]] + self.uses[path[-1]]))

        return max(candidates, key=score)


# --------------------------------------------------------------------------------------------------------
# Collectives on one ring
# --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Lane:
    """One ring's share: ``order`` of ranks, its lane, its offset ``base`` inside every rank block (allreduce:
    inside every ring position's block, :func:`_allreduce`), the ``k`` chunk columns it owns there (per segment
    for allreduce, broadcast and reduce), the chunk factor ``c`` and the hop routes (``routes[p]``: from
    ``order[p]`` to ``order[p+1]``).

    Every op moves one chunk: a ring is a cycle of connections, and the runtime's FIFO holds two
    messages per connection, so an op of several chunks (one message each when buffers are large) would
    let every rank fill its successor's FIFO and wait for room while nobody receives: a deadlock. More
    columns therefore run as consecutive rounds (or, for the chains, as more pipelined segments).
    """

    order: tuple
    lane: int
    base: int
    k: int
    c: int
    routes: tuple

    @property
    def n(self) -> int:
        return len(self.order)

    def send(self, step, p, src_buf, src_index, dst_buf, dst_index, reduce=None) -> Op:
        """A one-chunk op from position ``p`` to position ``p + 1``."""
        n = self.n
        return Op(step, self.order[p % n], self.order[(p + 1) % n], src_buf, src_index, dst_buf,
                  dst_index, 1, reduce, self.lane, self.routes[p % n])

    def hops(self):
        """(p, sender, receiver, route) of every hop: what :meth:`send` looks up, once per position for the
        loops that send many chunks over each (a 128-GPU ring allreduce of 4 rings: 130k ops)."""
        n = self.n
        return [(p, self.order[p], self.order[(p + 1) % n], self.routes[p]) for p in range(n)]


def _allgather(ln: _Lane) -> list[Op]:
    n = ln.n
    # each lane copies its own columns (one dependency each for an in-place call's self-copy)
    ops = [Op(0, r, r, "i", ln.base, "o", r * ln.c + ln.base, ln.k, lane=ln.lane) for r in ln.order]
    lane, order, c = ln.lane, ln.order, ln.c
    for m in range(ln.k):
        col = ln.base + m
        for p, a, b, route in ln.hops():
            for s in range(n - 1):
                slot = order[(p - s) % n] * c + col
                ops.append(Op(m * (n - 1) + s, a, b, "i" if s == 0 else "o", col if s == 0 else slot, "o", slot,
                              1, None, lane, route))
    return ops


def _reducescatter(ln: _Lane) -> list[Op]:
    n, ops = ln.n, []
    lane, order, c = ln.lane, ln.order, ln.c
    for m in range(ln.k):
        col = ln.base + m
        for p, a, b, route in ln.hops():
            for s in range(n - 1):
                blk = order[(p - s - 1) % n] * c + col
                final = s == n - 2
                ops.append(Op(m * (n - 1) + s, a, b, "i" if s == 0 else "t", blk, "o" if final else "t",
                              col if final else blk, 1, ("i", blk), lane, route))
    return ops


def _allreduce(ln: _Lane) -> list[Op]:
    """Ring allreduce; the segment that ends reduced at ring position d is chunk ``d (c / N) + base + m`` of
    column m (``base``: the lane's k columns within each position's ``c / N`` chunks). Position-major, so that
    a ring that rotation by d ranks maps onto itself (each node's GPUs in the same order) gives, with its
    chunks, the schedule back under the collective's rotation of ``c / N`` chunks per rank
    (:meth:`Collective.rotation_slices`): the lowering and the proof then work on one orbit of ranks."""
    n, ops = ln.n, []
    per = ln.c // n
    for m in range(ln.k):
        t0 = m * 2 * (n - 1)
        seg = [d * per + ln.base + m for d in range(n)]  # segment d ends reduced at position d
        for p, a, b, route in ln.hops():
            for s in range(n - 1):
                i = seg[(p - s - 1) % n]
                final = s == n - 2
                ops.append(Op(t0 + s, a, b, "i" if s == 0 else "t", i, "o" if final else "t", i, 1, ("i", i),
                              ln.lane, route))
                i = seg[(p - s) % n]
                ops.append(Op(t0 + n - 1 + s, a, b, "o", i, "o", i, 1, None, ln.lane, route))
    return ops


def _chain(ln: _Lane, first: int) -> list[int]:
    """Positions of the chain that starts at position ``first`` (it uses hops first .. first+N-2)."""
    return [(first + h) % ln.n for h in range(ln.n)]


def _broadcast(ln: _Lane, root: int) -> list[Op]:
    n = ln.n
    ops = [Op(0, root, root, "i", ln.base, "o", ln.base, n * ln.k, lane=ln.lane)]
    chain = _chain(ln, ln.order.index(root))
    for b in range(n * ln.k):
        i = ln.base + b
        for h in range(n - 1):
            ops.append(ln.send(b + h, chain[h], "i" if h == 0 else "o", i, "o", i))
    return ops


def _reduce(ln: _Lane, root: int) -> list[Op]:
    n, ops = ln.n, []
    chain = _chain(ln, ln.order.index(root) + 1)  # ends at the root
    for b in range(n * ln.k):
        i = ln.base + b
        for h in range(n - 1):
            final = h == n - 2
            ops.append(ln.send(b + h, chain[h], "i" if h == 0 else "t", i, "o" if final else "t", i,
                               reduce=("i", i)))
    return ops


def _alltoall(topology: Topology, coll: Collective, order: tuple, max_tbs: int | None = None,
              inplace: bool = True) -> tuple[Schedule, int]:
    """Alltoall as shifts along the ring order: the block for position p+h leaves at step
    min(h, N-h) - 1, so each step pairs the shifts h and N-h (see
    :func:`colls.synth.direct.alltoall_ops`). A pair without a route is relayed over routed pairs, on
    the path that costs least under the load already placed (Dijkstra; a hop costs the time its links
    need with one more block on them), after every direct pair. Returns (schedule, relayed pairs).

    With relays, blocks of several chunks would deadlock when buffers are large (a relay's
    multi-message receive and send wait on each other's FIFO around a cycle of ranks); each chunk
    column then runs on its own lane, the one-chunk schedule replicated (:meth:`Schedule.replicate`).
    Without relays the blocks a rank stages in scratch (in place, it cannot take them into its output
    before it has sent what is there) are copied out on lanes of their own, as the direct method does
    (:func:`colls.synth.direct.copy_lanes`): one threadblock copying N - 2 blocks at its copy rate would
    take several times as long as the transfers. With relays every lane is already a copy of the whole
    schedule, and the copies stay on the lane of the transfers. ``inplace`` False: out-of-place calls only,
    nothing staged (:func:`colls.synth.direct.alltoall_ops`).
    """
    n, c = coll.nranks, coll.chunks
    pos = {r: p for p, r in enumerate(order)}

    def step(a: int, b: int) -> int:
        h = (pos[b] - pos[a]) % n
        return min(h, n - h) - 1

    pairs = sorted(((a, b) for a in range(n) for b in range(n) if a != b),
                   key=lambda ab: (step(*ab), pos[ab[0]], ab))
    links = {ab: list(zip(r, r[1:])) for ab in pairs if (r := topology.route(*ab)) is not None}
    loads: dict = defaultdict(int)
    paths: dict = {}
    hops = _Hops(topology, links)
    for ab in sorted(pairs, key=lambda ab: ab not in links):  # direct pairs first, order kept
        paths[ab] = list(ab) if ab in links else hops.cheapest(loads, c, *ab)
        for hop in zip(paths[ab], paths[ab][1:]):
            for link in links[hop]:
                loads[link] += c
    relayed = sum(len(p) > 2 for p in paths.values())
    copies = c if relayed else 1
    one = coll.with_chunks(c // copies)
    lanes = 0 if relayed else copy_lanes(topology, n, max_tbs)
    ops, scratch = alltoall_ops(one, topology.route, step, paths, copy_lanes=lanes, inplace=inplace)
    schedule = Schedule(one, ops, METHOD, scratch).replicate(copies)
    schedule.info.pop("instances", None)  # replicate() notes its copies as --instances: they are not
    return schedule, relayed


class _Hops:
    """The routed pairs of :func:`_alltoall` as a graph, for :meth:`cheapest`: each rank's next ranks, and
    each hop's links with their bandwidths (as floats, once: a relay search looks at every hop)."""

    def __init__(self, topology: Topology, links: dict):
        self.name = topology.name
        self.out: dict = defaultdict(list)
        for (u, v) in links:
            self.out[u].append(v)
        self.links = {hop: [(e, float(topology.bw(*e))) for e in es] for hop, es in links.items()}

    def cheapest(self, loads: dict, c: int, a: int, b: int) -> list[int]:
        """Dijkstra from ``a`` to ``b`` over routed pairs; a hop costs sum over its links of
        (load + c) / bw. Ties: fewer hops, then the path in rank order."""
        heap = [(0.0, 0, (a,))]
        done = set()
        while heap:
            cost, hops, path = heapq.heappop(heap)
            u = path[-1]
            if u == b:
                return list(path)
            if u in done:
                continue
            done.add(u)
            for v in self.out[u]:
                if v not in done:
                    step_cost = sum((loads[e] + c) / bw for e, bw in self.links[u, v])
                    heapq.heappush(heap, (cost + step_cost, hops + 1, path + (v,)))
        raise CollsError(f"{METHOD}: no chain of linked GPUs leads from GPU {a} to GPU {b} on {self.name}")


def _unit(kind: str, n: int) -> int:
    return n if kind in ("allreduce", "broadcast", "reduce") else 1


def with_rings(coll: Collective, rings: int) -> Collective:
    """The collective a schedule of ``rings`` rings runs: its chunk factor raised to a multiple of what every
    ring's equal share needs (the ring count, times the ranks for the collectives cut in N segments)."""
    per = rings * _unit(coll.kind, coll.nranks)
    return coll.with_chunks(per * -(-coll.chunks // per))


def _ring_schedule(topology: Topology, coll: Collective, rings: list[Ring]) -> Schedule:
    """The schedule of ``coll`` over ``rings``, each ring owning an equal slice of the chunks."""
    n, nr = coll.nranks, len(rings)
    per = nr * _unit(coll.kind, n)
    coll = with_rings(coll, nr)
    k = coll.chunks // per
    c = coll.chunks
    ops: list[Op] = []
    for lane, ring in enumerate(rings):
        routes = tuple(topology.route(a, b) for a, b in _hops(ring.order, True))
        ln = _Lane(ring.order, lane, lane * k if coll.kind == "allreduce" else lane * (c // nr), k, c, routes)
        if coll.rooted:
            ops += (_broadcast if coll.kind == "broadcast" else _reduce)(ln, coll.root)
        else:
            ops += {"allgather": _allgather, "reducescatter": _reducescatter,
                    "allreduce": _allreduce}[coll.kind](ln)
    return Schedule(coll, ops, METHOD)


# --------------------------------------------------------------------------------------------------------
# The method
# --------------------------------------------------------------------------------------------------------
def instructions_per_ring(collective: Collective, rings: int) -> int:
    """A lower bound on the instructions one rank runs for one ring of ``rings`` (each ring a lane of
    its own): one per chunk it receives or sends on that ring, the hops of the module table times the
    chunk columns the ring owns at the chunk factor it will have."""
    n, kind = collective.nranks, collective.kind
    per = rings * _unit(kind, n)
    k = -(-collective.chunks // per)
    if kind == "allreduce":
        return 2 * (n - 1) * k
    if kind in ("broadcast", "reduce"):
        return (n - 1) * k  # the chain's N k segments pass every rank but its last one
    return (n - 1) * k


def relays_per_ring(collective: Collective, rings: int) -> int:
    """A lower bound on the relays (steps that receive a chunk and send it on, summed or not) among one rank's
    :func:`instructions_per_ring`: a chunk crosses a ring of N ranks through N - 2 of them, so a rank relays
    all but the one its column starts with or ends with in each phase (allgather, reducescatter: N - 2 of a
    column's N - 1; allreduce: 2N - 3 of 2N - 2). 0 for the chains (broadcast, reduce), not counted."""
    if collective.kind not in ("allgather", "reducescatter", "allreduce") or collective.nranks < 3:
        return 0
    per = rings * _unit(collective.kind, collective.nranks)
    return instructions_per_ring(collective, rings) - -(-collective.chunks // per)


def segments_needed(collective: Collective, rings: int, max_steps: int) -> int:
    """Step segments (each on channels of its own) one ring needs so that no threadblock exceeds
    ``max_steps``: its instructions in pieces, plus the one send that starts each later segment
    (a partial sum stored at the end of one segment is sent on in the next). Segments cut the
    schedule's steps: a chain (broadcast, reduce) spans N k + N - 2 steps, and a rank in its middle
    works at every step of a segment, so a segment may be no longer than a threadblock's steps."""
    need = instructions_per_ring(collective, rings)
    if collective.kind in ("broadcast", "reduce"):
        n = collective.nranks
        need = n * (need // (n - 1)) + n - 2 if n > 1 else need
    seg = max(1, -(-need // max_steps))
    while -(-need // seg) + 1 > max_steps and seg < need:
        seg += 1
    return seg


def fitting_counts(collective: Collective, counts, max_steps: int | None,
                   max_channels: int | None, max_tbs: int | None = None,
                   max_remote_steps: int | None = None, max_relay_steps: int | None = None) -> list[int]:
    """The ring counts in ``counts`` whose rings, each split into :func:`segments_needed` segments,
    fit ``max_channels`` channels and whose instructions can fit ``max_tbs`` threadblocks (all of ``counts``
    when no limits are given; at least the smallest)."""
    counts = sorted(counts)
    fit = [r for r in counts if fits(collective, r, max_steps, max_channels, max_tbs, max_remote_steps,
                                     max_relay_steps)]
    return fit or counts[:1]


def least_threadblocks(collective: Collective, rings: int, max_steps: int | None, max_remote_steps: int | None = None,
                       max_relay_steps: int | None = None) -> int:
    """A lower bound on the threadblocks a rank needs for ``rings`` rings: its instructions over the steps that
    send or receive one threadblock holds (``max_remote_steps``, default ``max_steps``), its relays over the
    relays one holds (``max_relay_steps``)."""
    if not max_steps:
        return 0
    least = -(-rings * instructions_per_ring(collective, rings) // (max_remote_steps or max_steps))
    if max_relay_steps:
        least = max(least, -(-rings * relays_per_ring(collective, rings) // max_relay_steps))
    return least


def fits(collective: Collective, rings: int, max_steps: int | None, max_channels: int | None,
         max_tbs: int | None = None, max_remote_steps: int | None = None,
         max_relay_steps: int | None = None) -> bool:
    """Whether ``rings`` rings, each split into :func:`segments_needed` step segments, fit ``max_channels``
    channels (true when no limits are given; rings of one segment share channels where their peers differ, at
    most one for each of a rank's peers, :data:`MAX_SHARED_RINGS`), and a rank's instructions of all of them
    fit ``max_tbs`` threadblocks (:func:`least_threadblocks`: of ``max_remote_steps``, default ``max_steps``,
    steps that send or receive, which every one of them is, and of ``max_relay_steps`` relays). A count that does not is
    refused by the loader whatever the lowering (copies only add channels and threadblocks; segments and the
    lowering's stores only add instructions). The threadblocks matter where they are few for the rank count: an
    MSCCL++ plan of 128 GPUs holds 24 a GPU (colls proves a plan of 3,072 in all) of at most 12 such steps and 8
    relays (colls.runtimes.mscclpp.PLAN_RELAY_STEP_OPS), and one ring of an allreduce there runs 253 relays a
    rank, 32 threadblocks at least."""
    if not max_steps:
        return True
    if max_tbs and least_threadblocks(collective, rings, max_steps, max_remote_steps, max_relay_steps) > max_tbs:
        return False
    if not max_channels:
        return True
    segments = segments_needed(collective, rings, max_steps)
    if segments == 1:       # rings of one segment may share channels: each at most one ring per peer of a rank
        return -(-rings // max(1, collective.nranks - 1)) <= max_channels
    return rings * segments <= max_channels


def synthesize(topology: Topology, collective: Collective, *, rings: int | None = None,
               max_steps: int | None = None, max_channels: int | None = None,
               max_rings: int | None = None, **options) -> Schedule:
    """A ring schedule of ``collective`` on ``topology``.

    Parameters
    ----------
    rings : number of rings (lanes); default: the count in 1..8 (or the number of NIC rails, if more)
        with the best modelled algbw, fewest rings on a tie.
    max_steps, max_channels : the target's steps per threadblock and channels; the default count is
        then chosen among the counts whose rings fit them when split into step segments
        (:func:`fitting_counts`; a ring of 128 ranks runs 254 allreduce instructions per rank, four
        or five threadblocks of at most 64 steps).
    max_rings : the largest default count to consider (the pipeline lowers it when a program with
        more rings exceeded the target's limits).
    options : ``max_tbs`` (the threadblocks per GPU the target runs) sizes an alltoall's copy lanes
        (:func:`_alltoall`) and leaves out the default counts whose instructions cannot fit it (:func:`fits`),
        ``inplace`` False stages none of its blocks; the others are accepted and ignored (the pipeline passes
        every method the same options).

    Raises CollsError when the rank count is not the topology's GPU count, ``rings`` is out of range, or
    the fabric has no ring (a needed pair has no route).
    """
    n = collective.nranks
    if n != topology.ngpus:
        raise CollsError(f"{METHOD}: the collective has {n} ranks but {topology.name} has "
                         f"{topology.ngpus} GPUs")
    if rings is not None and not (isinstance(rings, int) and 1 <= rings <= MAX_SHARED_RINGS):
        raise CollsError(f"must be an integer in 1..{MAX_SHARED_RINGS}, got {rings!r}", key="rings")
    planner = _Planner(topology)
    if collective.kind == "alltoall":
        ring = planner.ring_sets([1])[1][0]
        schedule, relayed = _alltoall(topology, collective, ring.order, options.get("max_tbs"),
                                      options.get("inplace", True))
        schedule.info.update(_ring_info(topology, [ring]), rings=1, relayed_pairs=relayed,
                             staged_blocks=staged_blocks(schedule.ops, schedule.collective))
        schedule.info.update(schedule_facts(schedule, topology))
        if rings not in (None, 1):
            schedule.info["note"] = "alltoall shifts use one lane; rings ignored"
        return schedule
    best_count, sets, tried = _choose(planner, topology, collective, rings, max_steps, max_channels, max_rings,
                                      options)
    best = _ring_schedule(topology, collective, sets[best_count])
    best.info.update(_ring_info(topology, sets[best_count]), rings=best_count,
                     algbw_by_ring_count=[[count, float(bw)] for count, bw in tried.items()])
    best.info.update(schedule_facts(best, topology))
    if max_steps:  # where the lowering starts splitting the rings' steps (fewer segments cannot fit)
        best.info["min_segments"] = segments_needed(collective, best_count, max_steps)
    return best


def _choose(planner, topology, collective, rings, max_steps, max_channels, max_rings, options) -> tuple:
    """(the count :func:`synthesize` takes, the ring sets of the counts it weighed, their modelled algbw)."""
    top = min(planner.default_count, max_rings or planner.default_count)
    counts = [rings] if rings else fitting_counts(collective, range(1, top + 1), max_steps, max_channels,
                                                  options.get("max_tbs"), options.get("max_remote_steps"),
                                                  options.get("max_relay_steps"))
    sets = planner.ring_sets(counts)
    tried = {count: model_algbw(topology, collective, ring_set) for count, ring_set in sets.items()}
    return min(tried, key=lambda count: (-tried[count], count)), sets, tried


def choice(topology: Topology, collective: Collective, *, rings: int | None = None, max_steps: int | None = None,
           max_channels: int | None = None, max_rings: int | None = None, **options) -> tuple[int, list]:
    """The ring count and orders (``info["rings"]``, ``info["ring_orders"]``) :func:`synthesize` would make
    with these options, without building its transfers (130k for a 128-GPU allreduce on 4 rings): what the
    pipeline compares with a count the target already refused. Not for alltoall (one ring, always)."""
    count, sets, _ = _choose(_Planner(topology), topology, collective, rings, max_steps, max_channels, max_rings,
                             options)
    return count, [list(r.order) for r in sets[count]]


def model_algbw(topology: Topology, collective: Collective, rings: list[Ring]) -> Fraction:
    """The :meth:`Schedule.model_algbw` the ring schedule over ``rings`` will have, without building it.

    Per chunk column, every ring moves N chunks of the buffer (nchunksperloop is N per ring and
    column for every collective but alltoall, which is not planned on rings) and each of its hops
    carries: N-1 chunks (allgather, reducescatter), 2(N-1) (allreduce), N segments (the chains, except
    the one hop that closes the ring: into the root for broadcast, out of it for reduce).
    """
    n = collective.nranks
    loads: dict = defaultdict(int)
    for ring in rings:
        order = ring.order
        per_hop = {"allgather": n - 1, "reducescatter": n - 1, "allreduce": 2 * (n - 1)}.get(
            collective.kind, n)
        idle = None
        if collective.rooted:
            q = order.index(collective.root)
            idle = (q - 1) % n if collective.kind == "broadcast" else q
        for p, (a, b) in enumerate(_hops(order, True)):
            if p != idle:
                route = topology.route(a, b)
                for link in zip(route, route[1:]):
                    loads[link] += per_hop
    return Fraction(len(rings) * n) / max(Fraction(k) / topology.bw(*link) for link, k in loads.items())


def _ring_info(topology: Topology, rings: list[Ring]) -> dict:
    info = {"ring_orders": [list(r.order) for r in rings],
            "ring_link_gbps": [float(min(topology.route_bandwidth(topology.route(a, b))
                                         for a, b in _hops(r.order, True))) for r in rings]}
    if any(r.crossings for r in rings):
        info["ring_rails"] = [[x["rail"] for x in r.crossings] for r in rings]
        info["nic_crossings"] = [list(r.crossings) for r in rings]
        info["rail_matched"] = all(x["rail_matched"] for r in rings for x in r.crossings)
    return info
