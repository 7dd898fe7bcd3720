"""Switch removal by edge splitting: a topology becomes a GPU-only graph with (almost) the same optimum.

The trees method packs spanning trees on a graph of GPUs only, so every switch and NIC vertex ``w`` is
removed by *splitting off* pairs of its arcs: ``(u, w), (w, v)`` become one logical arc ``(u, v)``
carrying ``delta`` (both old arcs lose ``delta``). The logical arc's data physically takes the route
``u -> w -> v`` (and whatever ``(u, w)`` and ``(w, v)`` were made of).

The requirement kept (rate ``x``, exact Fractions throughout):

- *allgather* (``root=None``): for every vertex set S holding at least one GPU and not all of them,
  ``c+(S) >= x |S ∩ GPUs|``; equivalently, with a super-source s joined to every GPU by an arc of
  capacity x, ``maxflow(s -> t) >= N x`` for every GPU t (ForestColl, arXiv 2402.06787).
- *rooted* (``root=r``, broadcast): ``maxflow(r -> t) >= x`` for every GPU t (super-source arc s -> r
  of capacity x, requirement x).

Splitting ``delta`` off ``(u, w), (w, v)`` lowers ``c+(S)`` by ``delta`` exactly for the sets with
``u, v ∈ S, w ∉ S`` and those with ``w ∈ S, u, v ∉ S``, and leaves every other set alone, so the largest
admissible amount is ``min(c(u, w), c(w, v), slack)`` with ``slack`` the least surplus
``cut - requirement`` over those sets. Each family is one max-flow per sink GPU t with the named
vertices forced onto a side by infinite arcs (one flow in all when a GPU is forced onto the sink side).

Forbidden pairs: ``u == v`` (a loop) and, when ``w`` is a network vertex (``node`` None), ``u`` and
``v`` in one node: a NIC hairpin the runtime never uses (a route between two GPUs of a node stays in
the node). Capacity left at ``w`` that cannot be split is dropped.

The steps, each exact in what it claims:

1. *Balancing.* Splitting moves equal amounts in and out of ``w``, so at most ``min(in, out)`` of a
   switch's capacity can survive. A switch whose in- and out-capacity differ (a NIC serving two GPUs:
   two 12.5 GB/s PCIe hops in, one 12.5 GB/s port out) is first balanced by scaling its larger side
   down proportionally. The balanced graph's optimum ``x_T <= x*`` is the splitting *target*; it equals
   the true optimum whenever every switch is balanced (symmetric links), which is the case the theory
   covers (Bang-Jensen, Frank and Jackson: complete admissible splitting at a vertex whose in- and
   out-degree are equal). Where ``x_T < x*`` no complete splitting can reach ``x*`` (its logical arcs
   can never carry more than ``min(in, out)`` through the switch).
2. *Fast path* (what makes the big clusters fast). Network vertices whose neighbours are all network
   vertices (a spine) are dropped when the graph without them still has the target rate (checked by
   max-flow). A *symmetric* vertex (all in-arcs of one capacity ``a``, all out-arcs of one capacity
   ``b``, every in-neighbour with the same number ``p`` of allowed partners and every out-neighbour
   with ``q``) is split uniformly, ``delta = min(a / p, b / q)`` per allowed pair, preferring the
   pairs whose *keys* match (GPU local index = NIC index: a rail switch joins NIC j of one node to NIC
   j of the others, a NIC's traffic enters the GPU with its own local index) when they alone cover
   every neighbour regularly: few fat logical arcs pack into trees with few chunks. Variants of the
   same idea (:meth:`Splitter.run`): *in whole units* of a tree rate y, each in-neighbour's
   ``floor(a / y)`` units dealt over its partners in cyclic order (a circulant on a switch), so every
   logical arc holds a whole number of trees; and the *ring* style for rooted problems, a cyclic
   matching (switch -> ring, rails -> node i to node i + 1) with arcs of the full capacity. Any other
   vertex is split by the exact greedy below. Vertices are removed role by role across all nodes
   (rails, sending NICs, receiving NICs, node switches) so that symmetric vertices stay symmetric.
   Then the GPU-only graph's rate is computed exactly; if it is below the target, everything is
   redone with the exact greedy (within a max-flow budget) and the better result is kept.
3. *Exact greedy.* Vertices are removed one at a time (network vertices first, then NICs, then the
   rest); every allowed pair of ``w`` is split by its largest admissible amount (pairs with matching
   keys first, then the larger ones). Splits never raise any ``c+(S)``, so a pair blocked once stays
   blocked and one pass over the pairs is maximal. If dropping a leftover makes the target
   unreachable, the target is lowered to the current graph's exact rate and the removal goes on.

Every logical arc also records the physical paths it was made of; :attr:`SplitGraph.routes_match` says
whether each arc's only path is the route the runtime takes for that GPU pair (then the bandwidth
model of the schedule equals the packing's rate).

References
----------
L. Zhao et al., "ForestColl: Throughput-Optimal Collective Communications on Heterogeneous Network
Fabrics", arXiv:2402.06787 (switch removal by edge splitting, the allgather cut condition).
J. Bang-Jensen, A. Frank, B. Jackson, "Preserving and increasing local edge-connectivity in mixed
graphs", SIAM J. Discrete Math. 8 (1995) (splitting off at an Eulerian vertex).
W. Mader, "Konstruktion aller n-fach kantenzusammenhängenden Digraphen", 1982 (directed splitting).
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from colls.flow import FlowNet
from colls.topology import GPU, NIC, Topology, vertex_key

_MAX_PATHS = 8  # physical paths remembered per logical arc (more: "mixed", routes_match is False)
EXACT_BUDGET = 400_000  # max-flows the exact greedy may spend when the fast path falls short (a count)


# --------------------------------------------------------------------------------------------------------
# Exact max-flow on a capacitated graph of arbitrary vertices
# --------------------------------------------------------------------------------------------------------
def _lcm_den(values) -> int:
    scale = 1
    for v in values:
        scale = math.lcm(scale, Fraction(v).denominator)
    return scale


class _Graph:
    """A capacitated directed graph (Fraction capacities) over hashable vertices, for the rate tests."""

    def __init__(self, arcs: dict, gpus: list[int], vertices=None):
        verts = set(gpus)
        for u, v in arcs:
            verts.add(u)
            verts.add(v)
        if vertices is not None:
            verts |= set(vertices)
        self.gpus = list(gpus)
        is_gpu = set(gpus)
        self.vertices = list(gpus) + sorted((v for v in verts if v not in is_gpu), key=vertex_key)
        self.index = {v: i for i, v in enumerate(self.vertices)}
        keys = [(u, v) for (u, v), c in arcs.items() if c > 0]
        keys.sort(key=lambda e: (self.index[e[0]], self.index[e[1]]))
        self.keys = keys
        self.caps = [arcs[e] for e in keys]
        self.net = FlowNet(len(self.vertices), [self.index[u] for u, _ in keys],
                           [self.index[v] for _, v in keys], what="trees")
        self.scale = _lcm_den(self.caps)
        self.icaps = np.array([int(c * self.scale) for c in self.caps], dtype=np.int64)
        self.n = len(self.gpus)
        self.gmask = np.zeros(len(self.vertices), dtype=bool)
        self.gmask[: self.n] = True

    def out_cap(self, side: np.ndarray) -> int:
        crossing = side[self.net.tails] & ~side[self.net.heads]
        return int(self.icaps[crossing].sum())


def _requirement(g: _Graph, x: Fraction, root):
    """(link caps, source caps, requirement) as ints, scaled so that x is integral."""
    xs = x * g.scale
    den = xs.denominator
    num = xs.numerator
    caps = g.icaps * den
    src = np.zeros(len(g.vertices), dtype=np.int64)
    if root is None:
        src[: g.n] = num
        need = g.n * num
    else:
        src[g.index[root]] = num
        need = num
    return caps, src, need


def rate(arcs: dict, gpus: list[int], root=None, upper: Fraction | None = None, sinks=None) -> Fraction:
    """The exact rate of a capacitated graph (switches allowed).

    ``root`` None: ``x = min over S (1 <= |S ∩ GPUs| < N) of c+(S) / |S ∩ GPUs|`` (the allgather optimum
    per GPU), found by Dinkelbach/Newton steps from ``upper`` (or the best single-GPU cut) with one
    max-flow test per sink. ``root`` r: ``min over GPUs t != r of maxflow(r -> t)``.

    ``sinks``: the GPUs to test (default all); pass one GPU per orbit of a symmetry of the graph.
    Returns 0 when some GPU cannot be reached.
    """
    g = _Graph(arcs, gpus)
    sinks = list(gpus) if sinks is None else list(sinks)
    if root is not None:
        best = None
        nv = len(g.vertices)
        for t in sinks:
            if t == root:
                continue
            src = np.zeros(nv, dtype=np.int64)
            snk = np.zeros(nv, dtype=np.int64)
            big = int(g.icaps.sum()) + 1
            src[g.index[root]] = big
            snk[g.index[t]] = big
            f = g.net.flow(g.icaps, src, snk)
            if best is None or f < best:
                best = f
        return Fraction(best or 0, g.scale)
    n = g.n
    if upper is None:
        upper = None
        for r in gpus:
            one = np.zeros(len(g.vertices), dtype=bool)
            one[g.index[r]] = True
            for side, cnt in ((one, 1), (~one, n - 1)):
                ratio = Fraction(g.out_cap(side), g.scale * cnt)
                if upper is None or ratio < upper:
                    upper = ratio
    x = Fraction(upper)
    if x <= 0:
        return Fraction(0)
    for t in sinks:
        while True:
            caps, src, need = _requirement(g, x, None)
            snk = np.zeros(len(g.vertices), dtype=np.int64)
            snk[g.index[t]] = need + 1
            if g.net.flow(caps, src, snk) >= need:
                break
            side = g.net.source_side()
            cnt = int(side[:n].sum())
            if cnt == 0:
                return Fraction(0)
            new = Fraction(g.out_cap(side), g.scale * cnt)
            if not new < x:
                raise AssertionError("rate: max-flow returned a cut that does not lower the ratio")
            x = new
            if x == 0:
                return x
    return x


def feasible(arcs: dict, gpus: list[int], x: Fraction, root=None, sinks=None) -> bool:
    """Does the graph meet the requirement at rate ``x`` (see the module docstring)?"""
    if x <= 0:
        return True
    g = _Graph(arcs, gpus)
    caps, src, need = _requirement(g, x, root)
    for t in (list(gpus) if sinks is None else sinks):
        if root is not None and t == root:
            continue
        snk = np.zeros(len(g.vertices), dtype=np.int64)
        snk[g.index[t]] = need + 1
        if g.net.flow(caps, src, snk) < need:
            return False
    return True


# --------------------------------------------------------------------------------------------------------
# The result
# --------------------------------------------------------------------------------------------------------
@dataclass
class SplitGraph:
    """A GPU-only graph made from a topology by edge splitting.

    Attributes
    ----------
    gpus : list of ranks.
    arcs : ``(u, v) -> capacity`` (GB/s, Fraction), logical GPU-to-GPU arcs.
    rate : exact rate of ``arcs`` (per GPU for allgather, the min cut for a root).
    target : rate of the balanced topology (what splitting tried to keep).
    optimum : rate of the topology itself (x*).
    method : ``"none"`` (no switch), ``"fast"`` or ``"exact"``.
    dropped : network vertices removed whole (not needed for the rate).
    paths : ``(u, v) -> frozenset of physical paths`` (None when too many to list).
    routes_match : every arc's only physical path is ``topology.route(u, v)``.
    notes : words for people.
    """

    gpus: list
    arcs: dict
    rate: Fraction
    target: Fraction
    optimum: Fraction
    method: str
    dropped: list = field(default_factory=list)
    paths: dict = field(default_factory=dict)
    routes_match: bool = True
    notes: list = field(default_factory=list)


# --------------------------------------------------------------------------------------------------------
# Working graph
# --------------------------------------------------------------------------------------------------------
class _NotSymmetric(Exception):
    """A split in whole units was asked for and a vertex is not symmetric."""


def _turn_sinks(topology: Topology, cap: dict, turn: dict | None) -> list | None:
    """The first node's GPUs (:meth:`Topology.representatives`) when ``turn`` (:meth:`Topology.node_turn`)
    maps the capacitated graph ``cap`` onto itself, else None (test every GPU). A map that keeps every capacity
    and the source's arcs (one per GPU, all alike when unrooted) keeps every max-flow, so a GPU is as good a
    sink as its image, and the turns reach every node from the first."""
    if turn is None:
        return None
    for (u, v), c in cap.items():
        if cap.get((turn.get(u, u), turn.get(v, v))) != c:
            return None
    return topology.representatives()


class _Work:
    """Mutable capacitated graph with in/out adjacency and physical path provenance."""

    def __init__(self, topology: Topology):
        self.topo = topology
        self.cap: dict = {}
        self.out: dict = defaultdict(set)
        self.inn: dict = defaultdict(set)
        self.paths: dict = {}
        for u, v, d in topology.links():
            self.add(u, v, Fraction(d["bw"]), frozenset({(u, v)}))

    def add(self, u, v, c: Fraction, paths) -> None:
        if c <= 0:
            return
        key = (u, v)
        old_c = self.cap.get(key)
        self.out[u].add(v)
        self.inn[v].add(u)
        if old_c is None:       # a new arc (every link of the topology): nothing to add to or merge with
            self.cap[key] = c
            self.paths[key] = paths if paths is None or len(paths) <= _MAX_PATHS else None
            return
        self.cap[key] = old_c + c
        old = self.paths.get(key, frozenset())
        if old is None or paths is None:
            self.paths[key] = None
        else:
            merged = old | paths
            self.paths[key] = merged if len(merged) <= _MAX_PATHS else None

    def sub(self, u, v, c: Fraction) -> None:
        left = self.cap[(u, v)] - c
        if left < 0:
            raise AssertionError("splitting took more than an arc holds")
        if left == 0:
            self.remove_arc(u, v)
        else:
            self.cap[(u, v)] = left

    def remove_arc(self, u, v) -> None:
        del self.cap[(u, v)]
        self.paths.pop((u, v), None)
        self.out[u].discard(v)
        self.inn[v].discard(u)

    def remove_vertex(self, w) -> Fraction:
        """Drop w and its remaining arcs; returns the capacity dropped."""
        lost = Fraction(0)
        for v in list(self.out.get(w, ())):
            lost += self.cap[(w, v)]
            self.remove_arc(w, v)
        for u in list(self.inn.get(w, ())):
            lost += self.cap[(u, w)]
            self.remove_arc(u, w)
        self.out.pop(w, None)
        self.inn.pop(w, None)
        return lost

    def split(self, u, w, v, delta: Fraction) -> None:
        p1, p2 = self.paths.get((u, w)), self.paths.get((w, v))
        paths = None if p1 is None or p2 is None else \
            frozenset(a + b[1:] for a in p1 for b in p2)
        if paths is not None and len(paths) > _MAX_PATHS:
            paths = None
        self.sub(u, w, delta)
        self.sub(w, v, delta)
        self.add(u, v, delta, paths)

    def copy_caps(self) -> dict:
        return dict(self.cap)


def _key(topo: Topology, v):
    """The rail key of a vertex: a GPU's local index, a NIC's index, None for a switch."""
    data = topo.graph.nodes[v]
    if data.get("kind") == GPU:
        return data.get("local")
    if data.get("kind") == NIC:
        if data.get("nic") is not None:
            return data["nic"]
        m = re.search(r"nic(\d+)", str(v))
        return int(m.group(1)) if m else None
    return None


def _allowed(topo: Topology, w, u, v) -> bool:
    if u == v:
        return False
    if topo.node_of(w) is None:
        nu, nv = topo.node_of(u), topo.node_of(v)
        if nu is not None and nu == nv:
            return False
    return True


def _order(topo: Topology) -> list:
    """Removal order: network vertices, then NICs (sending ones, whose in-neighbours are all GPUs,
    before receiving ones), then the other switches; vertices of one role across all nodes together
    (``n0.nic3.tx, n1.nic3.tx, ...``), so that every node sees the same neighbourhoods and symmetric
    vertices stay symmetric."""
    g = topo.graph

    def role(v) -> int:
        if topo.kind(v) != NIC:
            return 0
        return 0 if all(topo.kind(u) == GPU for u in g.predecessors(v)) else 1

    def key(v):
        node = topo.node_of(v)
        local = re.sub(r"^n\d+\.", "", str(v))
        return (node is not None, topo.kind(v) != NIC, role(v), local, -1 if node is None else node,
                vertex_key(v))

    return sorted((v for v in g.nodes if topo.kind(v) != GPU), key=key)


# --------------------------------------------------------------------------------------------------------
# Balancing
# --------------------------------------------------------------------------------------------------------
def _balance(work: _Work, order: list) -> bool:
    """Scale each switch's larger side down to its smaller one (a few passes). True if anything changed."""
    changed_any = False
    for _ in range(len(order) + 1):
        changed = False
        for w in order:
            ins = [(u, w) for u in work.inn.get(w, ())]
            outs = [(w, v) for v in work.out.get(w, ())]
            a = sum((work.cap[e] for e in ins), Fraction(0))
            b = sum((work.cap[e] for e in outs), Fraction(0))
            if a == b:
                continue
            side, ratio = (ins, b / a) if a > b else (outs, a / b) if b > 0 else (outs, Fraction(0))
            if a == 0:
                side, ratio = outs, Fraction(0)
            for e in side:
                c = work.cap[e] * ratio
                if c == 0:
                    work.remove_arc(*e)
                else:
                    work.cap[e] = c
            changed = changed_any = True
        if not changed:
            break
    return changed_any


# --------------------------------------------------------------------------------------------------------
# Uniform split of a symmetric vertex
# --------------------------------------------------------------------------------------------------------
def _symmetric(work: _Work, w):
    """(ins, outs, a, b, allowed pairs, keyed pairs) of a symmetric vertex, [] if it has no arcs on one
    side, None if it is not symmetric (in-capacities or out-capacities differ)."""
    topo = work.topo
    ins = sorted(work.inn.get(w, ()), key=vertex_key)
    outs = sorted(work.out.get(w, ()), key=vertex_key)
    if not ins or not outs:
        return []
    a_vals = {work.cap[(u, w)] for u in ins}
    b_vals = {work.cap[(w, v)] for v in outs}
    if len(a_vals) != 1 or len(b_vals) != 1:
        return None
    allowed = [(u, v) for u in ins for v in outs if _allowed(topo, w, u, v)]
    keyed = [(u, v) for u, v in allowed
             if _key(topo, u) is not None and _key(topo, u) == _key(topo, v)]
    return ins, outs, a_vals.pop(), b_vals.pop(), allowed, keyed


def _regular(pairs, ins, outs):
    """(p, q) if every in-vertex has p partners and every out-vertex q, else None."""
    p = Counter(u for u, _ in pairs)
    q = Counter(v for _, v in pairs)
    if len(p) != len(ins) or len(q) != len(outs):
        return None
    if len(set(p.values())) != 1 or len(set(q.values())) != 1:
        return None
    return next(iter(p.values())), next(iter(q.values()))


def _uniform(work: _Work, w, unit: Fraction | None = None) -> list | None:
    """The uniform split of a symmetric vertex (module docstring): ``[(u, v, delta)]``, or None if w is
    not symmetric. Keyed pairs are used when they alone cover every neighbour regularly.

    With ``unit`` (a tree's rate), amounts are whole multiples of it: each in-neighbour's
    ``floor(a / unit)`` units are dealt over its partners as evenly as possible, in cyclic order
    starting at its own position (a circulant on a switch: every out-neighbour then receives the same
    amounts); None if an out-neighbour would get more than ``floor(b / unit)`` units."""
    sym = _symmetric(work, w)
    if not sym:
        return sym
    ins, outs, a, b, allowed, keyed = sym
    for pairs in (keyed, allowed):
        if not pairs:
            continue
        reg = _regular(pairs, ins, outs)
        if reg is None:
            continue
        p, q = reg
        if unit is None:
            delta = min(a / p, b / q)
            return [(u, v, delta) for u, v in pairs]
        return _dealt(pairs, ins, outs, a, b, p, unit)
    return None if allowed else []


def _dealt(pairs, ins, outs, a, b, p, unit):
    A, B = int(a // unit), int(b // unit)
    pos = {v: j for j, v in enumerate(outs)}
    partners: dict = defaultdict(list)
    for u, v in pairs:
        partners[u].append(v)
    plan, got = [], Counter()
    for i, u in enumerate(ins):
        start = i * len(outs) // len(ins)
        ring = sorted(partners[u], key=lambda v: ((pos[v] - start) % len(outs), pos[v]))
        base, extra = divmod(A, p)
        for j, v in enumerate(ring):
            units = base + (1 if j < extra else 0)
            if units:
                plan.append((u, v, units * unit))
                got[v] += units
    if any(n > B for n in got.values()):
        return None
    return plan


def _ring(work: _Work, w) -> list | None:
    """A cyclic matching split of a symmetric vertex with as many in- as out-neighbours: in-neighbour
    i (in (key, node) order, per key group when keys pair them up) goes wholly to out-neighbour
    i + s for the smallest allowed shift s. On a switch this is a ring; on a rail switch it joins each
    node to the next. Rooted (broadcast) splitting prefers it: fat arcs, so few trees reach the root's
    min cut. None when not possible."""
    sym = _symmetric(work, w)
    if not sym:
        return sym
    ins, outs, a, b, allowed, _keyed = sym
    if len(ins) != len(outs):
        return None
    topo = work.topo
    ok = set(allowed)

    def order(vs):
        return sorted(vs, key=lambda v: (topo.node_of(v) is None, topo.node_of(v) or 0, vertex_key(v)))

    keys_in = [_key(topo, u) for u in ins]
    keys_out = [_key(topo, v) for v in outs]
    groups = []
    if None not in keys_in and None not in keys_out and Counter(keys_in) == Counter(keys_out):
        for key in sorted(set(keys_in)):
            groups.append((order([u for u in ins if _key(topo, u) == key]),
                           order([v for v in outs if _key(topo, v) == key])))
    for attempt in ([groups] if groups else []) + [[(order(ins), order(outs))]]:
        plan = []
        for us, vs in attempt:
            n = len(us)
            for s in range(n):
                if all((us[i], vs[(i + s) % n]) in ok for i in range(n)):
                    plan += [(us[i], vs[(i + s) % n], min(a, b)) for i in range(n)]
                    break
            else:
                plan = None
                break
        if plan is not None:
            return plan
    return None


# --------------------------------------------------------------------------------------------------------
# Exact greedy split of one vertex
# --------------------------------------------------------------------------------------------------------
def _split_exact(work: _Work, w, x: Fraction, gpus: list[int], root) -> None:
    """Split every allowed pair of w by its largest admissible amount at rate x (module docstring)."""
    topo = work.topo
    ins = sorted(work.inn.get(w, ()), key=vertex_key)
    outs = sorted(work.out.get(w, ()), key=vertex_key)
    pairs = [(u, v) for u in ins for v in outs if _allowed(topo, w, u, v)]
    if not pairs:
        return
    if x <= 0:
        for u, v in pairs:
            d = min(work.cap.get((u, w), 0), work.cap.get((w, v), 0))
            if d > 0:
                work.split(u, w, v, d)
        return

    def order_key(p):
        u, v = p
        matched = _key(topo, u) is not None and _key(topo, u) == _key(topo, v)
        return (not matched, -min(work.cap[(u, w)], work.cap[(w, v)]), vertex_key(u), vertex_key(v))

    pairs.sort(key=order_key)
    # one flow network over the current graph plus every pair's new arc
    gset = set(gpus)
    others = {a for e in work.cap for a in e if a not in gset}
    vertices = list(gpus) + sorted(others, key=vertex_key)
    index = {v: i for i, v in enumerate(vertices)}
    keys = list(work.cap)
    for u, v in pairs:
        if (u, v) not in work.cap:
            keys.append((u, v))
    arc_of = {e: i for i, e in enumerate(keys)}
    net = FlowNet(len(vertices), [index[a] for a, _ in keys], [index[b] for _, b in keys], what="trees")
    scale = math.lcm(_lcm_den(work.cap.values()), x.denominator)
    caps = np.array([int(work.cap.get(e, 0) * scale) for e in keys], dtype=np.int64)
    xi = int(x * scale)
    nv = len(vertices)
    n = len(gpus)
    base_src = np.zeros(nv, dtype=np.int64)
    if root is None:
        base_src[:n] = xi
        need = n * xi
        valid_t = list(gpus)
    else:
        base_src[index[root]] = xi
        need = xi
        valid_t = [t for t in gpus if t != root]
    big = int(caps.sum()) + need + 1

    def surplus(src_forced, snk_forced, limit: int) -> int:
        """min over sinks t of (flow - need), stopping early at <= 0; at most ``limit``."""
        src = base_src.copy()
        for v in src_forced:
            src[index[v]] = big
        snk = np.zeros(nv, dtype=np.int64)
        for v in snk_forced:
            snk[index[v]] = big
        best = limit
        if root is not None and root in snk_forced:
            return best  # every such set misses the root: its cut holds the root's source arc
        if any(isinstance(v, int) and v in valid_set for v in snk_forced):
            return min(best, net.flow(caps, src, snk) - need)
        for t in valid_t:
            if t in src_forced:
                continue
            snk[index[t]] = big
            best = min(best, net.flow(caps, src, snk) - need)
            snk[index[t]] = 0
            if best <= 0:
                break
        return best

    valid_set = set(valid_t)
    for u, v in pairs:
        a = caps[arc_of[(u, w)]] if (u, w) in arc_of else 0
        b = caps[arc_of[(w, v)]] if (w, v) in arc_of else 0
        d = int(min(a, b))
        if d <= 0:
            continue
        d = min(d, surplus([u, v], [w], d))
        if d > 0:
            d = min(d, surplus([w], [u, v], d))
        if d <= 0:
            continue
        caps[arc_of[(u, w)]] -= d
        caps[arc_of[(w, v)]] -= d
        caps[arc_of[(u, v)]] += d
        work.split(u, w, v, Fraction(d, scale))


# --------------------------------------------------------------------------------------------------------
# The whole removal
# --------------------------------------------------------------------------------------------------------
def _gpu_arcs(work: _Work, gpus) -> dict:
    gs = set(gpus)
    return {e: c for e, c in work.cap.items() if e[0] in gs and e[1] in gs and isinstance(e[0], int)
            and isinstance(e[1], int)}


def _remove_all(topology: Topology, base: _Work, order: list, target: Fraction, gpus, root,
                fast: bool, style: str = "uniform", unit: Fraction | None = None
                ) -> tuple[_Work, Fraction, list, list]:
    """Remove every vertex of ``order`` from a copy of ``base``; returns (work, target reached, dropped,
    notes). Fast mode: uniform splits where symmetric, dropping unneeded network cores first."""
    work = _Work.__new__(_Work)
    work.topo = topology
    work.cap = dict(base.cap)
    work.out = defaultdict(set, {k: set(v) for k, v in base.out.items()})
    work.inn = defaultdict(set, {k: set(v) for k, v in base.inn.items()})
    work.paths = dict(base.paths)
    dropped, notes = [], []
    x = target
    if fast:
        for w in order:
            if topology.node_of(w) is not None:
                continue
            nbrs = set(work.inn.get(w, ())) | set(work.out.get(w, ()))
            if not nbrs or any(isinstance(v, int) or topology.node_of(v) is not None for v in nbrs):
                continue
            trial = {e: c for e, c in work.cap.items() if w not in e}
            if feasible(trial, gpus, x, root):
                work.remove_vertex(w)
                dropped.append(w)
    dirty = False
    for w in order:
        if w in dropped:
            continue
        plan = None
        if fast:
            if style == "ring":
                plan = _ring(work, w)
            if plan is None:
                plan = _uniform(work, w, unit)
            if plan is None and unit is not None:
                raise _NotSymmetric(w)
        if plan is not None:
            for u, v, d in plan:
                if d > 0:
                    work.split(u, w, v, d)
            if work.remove_vertex(w) > 0:
                dirty = True
            continue
        if dirty:
            if not feasible(work.cap, gpus, x, root):
                x = rate(work.cap, gpus, root, upper=x)
                notes.append(f"target lowered to {x} before splitting {w}")
            dirty = False
        _split_exact(work, w, x, gpus, root)
        if work.remove_vertex(w) > 0:
            if not feasible(work.cap, gpus, x, root):
                x = rate(work.cap, gpus, root, upper=x)
                notes.append(f"capacity left at {w} was needed: target lowered to {x}")
    return work, x, dropped, notes


class Splitter:
    """Switch removal for one topology and requirement; :meth:`run` makes split graphs in several
    styles from one prepared (balanced) graph.

    Parameters
    ----------
    topology : Topology (use ``topology.reversed()`` for reduce-scatter and reduce).
    root : None for the allgather requirement, a rank for the rooted (broadcast) one.
    optimum : the topology's exact rate if known (from :mod:`colls.bound`), else computed here.
    """

    def __init__(self, topology: Topology, root=None, optimum: Fraction | None = None):
        self.topology = topology
        self.root = root
        self.gpus = topology.gpus
        self.base = _Work(topology)
        self.order = _order(topology)
        turn = topology.node_turn() if root is None else None
        self.optimum = (rate(self.base.cap, self.gpus, root, sinks=_turn_sinks(topology, self.base.cap, turn))
                        if optimum is None else optimum)
        self.notes: list = []
        self.target = self.optimum
        if self.order and _balance(self.base, self.order):
            self.target = rate(self.base.cap, self.gpus, root, upper=self.optimum,
                               sinks=_turn_sinks(topology, self.base.cap, turn))
            if self.target < self.optimum:
                self.notes.append(
                    f"switches or NICs with unequal in- and out-bandwidth (a NIC shared by GPUs): no "
                    f"splitting keeps the cut bound {self.optimum}; target {self.target} per "
                    f"{'GPU' if root is None else 'tree set'} (balanced graph)")

    def exact_cost(self) -> int:
        """Max-flows the exact greedy may need: two families of one flow per GPU for every pair."""
        pairs = sum(len(self.base.inn.get(w, ())) * len(self.base.out.get(w, ())) for w in self.order)
        return 2 * pairs * len(self.gpus)

    def run(self, style: str = "uniform", unit: Fraction | None = None, exact: bool = True,
            sinks_of=None) -> SplitGraph | None:
        """A split graph (module docstring).

        ``style``: "uniform" or "ring" (cyclic matchings first, for rooted problems) on the fast path.
        ``unit``: amounts in whole multiples of this rate; the result is returned only if it keeps the
        target (else None), with no exact fallback. ``exact``: redo with the exact greedy when the fast
        path falls short of the target (and keep the better). ``sinks_of(arcs)``: the GPUs whose
        max-flow tests suffice for a graph (one per orbit of a symmetry), default all.
        """
        topology, gpus, root, target = self.topology, self.gpus, self.root, self.target
        notes = list(self.notes)
        if not self.order:
            arcs = dict(self.base.cap)
            return SplitGraph(gpus, arcs, target, target, self.optimum, "none",
                              paths={e: self.base.paths[e] for e in arcs}, routes_match=True,
                              notes=notes)
        results = []
        modes = [True, False] if exact and unit is None else [True]
        if False in modes and self.exact_cost() > EXACT_BUDGET:
            modes = [True]
            notes.append(f"exact splitting skipped: about {self.exact_cost()} max-flows, over the budget "
                         f"of {EXACT_BUDGET}")
        for mode in modes:
            try:
                work, reached, dropped, more = _remove_all(topology, self.base, self.order, target, gpus,
                                                           root, mode, style, unit)
            except _NotSymmetric:
                return None
            arcs = _gpu_arcs(work, gpus)
            sinks = sinks_of(arcs) if sinks_of else None
            if feasible(arcs, gpus, reached, root, sinks):
                got = reached
            elif unit is not None:
                return None
            else:
                got = rate(arcs, gpus, root, upper=reached, sinks=sinks)
            results.append((got, mode, work, dropped, more))
            if got == target:
                break
        got, mode, work, dropped, more = max(results, key=lambda r: (r[0], r[1]))
        if len(results) > 1 and mode:
            notes.append("fast path kept: the exact greedy did no better")
        arcs = _gpu_arcs(work, gpus)
        # every logical arc must have a physical route; drop the ones without (never expected)
        missing = [e for e in arcs if topology.route(*e) is None]
        for e in missing:
            del arcs[e]
        if missing:
            got = rate(arcs, gpus, root, upper=got)
            notes.append(f"{len(missing)} logical arcs without a physical route dropped")
        paths = {e: work.paths.get(e) for e in arcs}
        match = all(p is not None and p == frozenset({topology.route(*e)}) for e, p in paths.items())
        return SplitGraph(gpus, arcs, got, target, self.optimum, "fast" if mode else "exact", dropped,
                          paths, match, notes + more)


def split(topology: Topology, root=None, optimum: Fraction | None = None, fast: bool = True,
          style: str = "uniform") -> SplitGraph:
    """Remove every switch and NIC of ``topology`` by edge splitting (module docstring).

    Parameters
    ----------
    topology : Topology (use ``topology.reversed()`` for reduce-scatter and reduce).
    root : None for the allgather requirement, a rank for the rooted (broadcast) one.
    optimum : the topology's exact rate if known (from :mod:`colls.bound`), else computed here.
    fast : try the fast path first (default); False = the exact greedy only.
    style : "uniform" or "ring" (see :meth:`Splitter.run`).

    Returns
    -------
    SplitGraph
    """
    s = Splitter(topology, root, optimum)
    if not fast:
        work, reached, dropped, more = _remove_all(topology, s.base, s.order, s.target, s.gpus, root,
                                                   False)
        arcs = _gpu_arcs(work, s.gpus)
        got = reached if feasible(arcs, s.gpus, reached, root) else rate(arcs, s.gpus, root, upper=reached)
        paths = {e: work.paths.get(e) for e in arcs}
        match = all(p is not None and p == frozenset({topology.route(*e)}) for e, p in paths.items())
        return SplitGraph(s.gpus, arcs, got, s.target, s.optimum, "exact" if s.order else "none",
                          dropped, paths, match, s.notes + more)
    return s.run(style)
