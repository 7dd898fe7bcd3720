"""Spanning out-tree (arborescence) packing on a GPU-only graph: the best rate for k trees per root,
a constructive packing, and the symmetry that makes it fast on clusters.

The problem. A GPU-only graph with capacities ``c(e)`` (GB/s, Fractions) and a rate ``y`` per tree give
the multigraph with ``m(e) = floor(c(e) / y)`` copies of each arc. *Allgather*: we want ``k``
arc-disjoint spanning arborescences rooted at every GPU (``N k`` in all; each carries ``y``, so every GPU
sends at ``x_k = k y``). *Rooted* (broadcast): ``k`` arborescences rooted at one GPU.

Edmonds' branching theorem (with a super-root s joined to every GPU by ``k`` arcs): the packing exists
iff every nonempty set X of GPUs has ``ρ_m(X) >= k (N - |X|)`` (rooted: ``>= k`` for X not holding the
root), i.e. iff ``maxflow(s -> t) >= N k`` (rooted ``k``) for every GPU t. More generally, partial
arborescences with vertex sets ``T_i`` plus ``K`` arborescences not yet started can be completed iff
``ρ(X) + #{i : X ∩ T_i ≠ ∅} >= K + #partial`` for every X (Edmonds' theorem with root sets); the left
side is a min cut in the network with an auxiliary vertex ``a_i`` per partial tree (``s -> a_i`` of
capacity 1, ``a_i -> t`` infinite for ``t ∈ T_i``).

Best rate with k fixed (:func:`best_rate`). Feasibility is monotone in y and changes only at the
breakpoints ``c(e)/j``. Starting from ``x / k`` (x = the graph's real-valued rate), each failed max-flow
test names a violated set X with deficit ``D = K - k |X ∩ roots|``; the next y is the largest value with
``sum over arcs e entering X of floor(c(e)/y) >= D``: the D-th largest of ``{c(e)/j}`` over those arcs.
Like Dinkelbach's method every step lowers y to an exact breakpoint, and one pass over the sinks
suffices. The optimal k is the smallest with ``k y_k`` equal to the real rate (found by trying k = 1, 2,
...; ``k = lcm of the denominators of c(e)/x`` always works).

Construction (:func:`pack`, Lovász's proof of Edmonds' theorem). Trees are grown one at a time from
their root; an arc ``(u, v)`` (u in the tree, v not) is added only if the remaining multigraph still
satisfies the condition above. Adding it lowers the cut of exactly the sets holding v and not u, so one
max-flow to sink v decides; Lovász showed that some arc always passes, so the construction never gets
stuck. A rejected arc exposes a tight set X (the min cut's sink side); every other arc entering X is
tried only after the others for the rest of this tree (for one tree they would all be rejected:
tight sets stay tight), which saves most of the failing max-flows. A finished tree is then
taken as many times as the condition allows (binary search, one test each): on graphs whose rate needs
many trees the packing comes out as few distinct trees with multiplicities.

Symmetry. Given a group Γ of automorphisms of the capacitated graph acting freely on the GPUs (node
rotation, local shifts; see :func:`find_group`), the trees of one root per Γ-orbit are grown
*equivariantly*: each accepted arc is added, with all its Γ-images, to all Γ-images of the tree. The
state stays Γ-invariant, so a cut condition holding at sink v holds at every γv: still one max-flow per
candidate, and the feasibility tests of :func:`best_rate` need one sink per orbit. Lovász's guarantee
does not cover the equivariant growth; when no arc orbit passes, the caller retries with a smaller
group, and finally without symmetry (always succeeds). Every packing is verified by
:func:`check_packing` (each tree spans every GPU, arc loads within ``m(e)``).

References
----------
J. Edmonds, "Edge-disjoint branchings", Combinatorial Algorithms, 1973. L. Lovász, "On two minimax
theorems in graph", J. Combin. Theory B 21 (1976) (the constructive proof). A. Schrijver,
"Combinatorial Optimization", Ch. 53. ForestColl (arXiv 2402.06787): spanning-tree packing for
allgather after switch splitting; Blink (MLSys'20): packing spanning trees on GPU fabrics.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from colls.errors import CollsError
from colls.flow import FlowNet

_BIG = 2 ** 40


@dataclass
class Tree:
    """A spanning arborescence: ``parent[v]`` for every GPU but the root; ``mult`` identical copies."""

    root: int
    parent: dict
    mult: int = 1

    def children(self) -> dict:
        out: dict = {}
        for v, p in sorted(self.parent.items()):
            out.setdefault(p, []).append(v)
        return out

    def depth(self) -> dict:
        d = {self.root: 0}

        def get(v):
            path = []
            while v not in d:
                path.append(v)
                v = self.parent[v]
                if len(path) > len(self.parent) + 1:
                    raise CollsError("trees: a tree has a cycle")
            base = d[v]
            for w in reversed(path):
                base += 1
                d[w] = base
            return d

        for v in self.parent:
            get(v)
        return d

    def arcs(self) -> list:
        return [(p, v) for v, p in sorted(self.parent.items())]


def floor_div(c: Fraction, y: Fraction) -> int:
    return (c.numerator * y.denominator) // (c.denominator * y.numerator)


def multiplicities(arcs: dict, y: Fraction) -> dict:
    """``m(e) = floor(c(e) / y)`` for the arcs with at least one copy."""
    out = {}
    for e, c in arcs.items():
        m = floor_div(c, y)
        if m > 0:
            out[e] = m
    return out


# --------------------------------------------------------------------------------------------------------
# Symmetry
# --------------------------------------------------------------------------------------------------------
def _is_automorphism(arcs: dict, perm: list) -> bool:
    for (u, v), c in arcs.items():
        if arcs.get((perm[u], perm[v])) != c:
            return False
    return True


def find_group(arcs: dict, n: int, nodes: int, per_node: int, node_of=None, local_of=None) -> list[list]:
    """Automorphisms of the capacitated GPU graph that act freely on the GPUs, as a list of permutations
    (identity first): node rotation ``(node, local) -> (node + 1, local)`` and the smallest local shift
    ``(node, local) -> (node, local + s)`` (s dividing the node size) that preserve every capacity, and
    every product of their powers. Ranks must be ``node * per_node + local``; otherwise (or with no
    symmetry) only the identity."""
    ident = list(range(n))
    if per_node <= 0 or nodes * per_node != n:
        return [ident]
    if node_of is not None and any(node_of(r) != r // per_node for r in range(n)):
        return [ident]
    if local_of is not None and any(local_of(r) != r % per_node for r in range(n)):
        return [ident]
    gens = []
    if nodes > 1:
        rot = [((r // per_node + 1) % nodes) * per_node + r % per_node for r in range(n)]
        if _is_automorphism(arcs, rot):
            gens.append((rot, nodes))
    for s in range(1, per_node):
        if per_node % s:
            continue
        shift = [(r // per_node) * per_node + (r % per_node + s) % per_node for r in range(n)]
        if _is_automorphism(arcs, shift):
            gens.append((shift, per_node // s))
            break
    group = [ident]
    for gen, order in gens:
        powers = [ident]
        for _ in range(order - 1):
            powers.append([gen[x] for x in powers[-1]])
        group = [[p[x] for x in g] for g in group for p in powers]
    return group


def subgroups(group: list[list], nodes: int, per_node: int) -> list[list[list]]:
    """The group, then its node-rotation part (if different), then the trivial group: retry order."""
    out = [group]
    n = len(group[0])
    rot = [g for g in group if all(g[r] % per_node == r % per_node for r in range(n))] \
        if per_node > 0 else [group[0]]
    if 1 < len(rot) < len(group):
        out.append(rot)
    if len(group) > 1:
        out.append([group[0]])
    return out


def orbit_reps(group: list[list], n: int) -> list[int]:
    seen, reps = set(), []
    for r in range(n):
        if r in seen:
            continue
        reps.append(r)
        for g in group:
            seen.add(g[r])
    return reps


# --------------------------------------------------------------------------------------------------------
# Best rate with k fixed
# --------------------------------------------------------------------------------------------------------
class _MultiNet:
    """Max-flow network over the GPUs, the super-root s and ``aux`` auxiliary vertices (module doc)."""

    def __init__(self, n: int, tails, heads, aux: int = 0):
        self.n, self.aux = n, aux
        self.s = n
        m = len(tails)
        self.m = m
        # FlowNet gives vertices 0..V-1, source V, sink V+1; we use our own s (vertex n) and sink = a GPU.
        V = n + 1 + aux
        at = list(tails) + [n] * aux
        ah = list(heads) + [n + 1 + i for i in range(aux)]
        for i in range(aux):
            at += [n + 1 + i] * n
            ah += list(range(n))
        self.flow = FlowNet(V, at, ah, what="trees")
        self.V = V
        self.zero_v = np.zeros(V, dtype=np.int64)

    def maxflow(self, m: np.ndarray, future: np.ndarray, active: np.ndarray, stars: np.ndarray,
                sink: int) -> int:
        """Flow from s to GPU ``sink``: arcs ``m``, ``s -> g`` = future[g], ``s -> a_i`` = active[i],
        ``a_i -> g`` = stars[i, g] (0 or big)."""
        if self.aux:
            if active is None:
                active = np.zeros(self.aux, dtype=np.int64)
                stars = np.zeros((self.aux, self.n), dtype=np.int64)
            caps = np.concatenate([m, active, stars.reshape(-1)])
        else:
            caps = m
        src = self.zero_v.copy()
        src[: self.n] = future
        # route the source arcs through FlowNet's own source: FlowNet.s -> v; our s is vertex n, fed by
        # FlowNet's source with unlimited capacity.
        src[self.n] = _BIG
        snk = self.zero_v.copy()
        snk[sink] = _BIG
        return self.flow.flow(caps, src, snk)

    def sink_side(self) -> np.ndarray:
        """GPU mask of the last min cut's sink side (the complement of the minimal source side)."""
        side = self.flow.source_side()
        return ~side[: self.n]


class _Multigraph:
    def __init__(self, arcs: dict, n: int, y: Fraction):
        mult = multiplicities(arcs, y)
        self.keys = sorted(mult)
        self.index = {e: i for i, e in enumerate(self.keys)}
        self.m = np.array([mult[e] for e in self.keys], dtype=np.int64)
        self.tails = [u for u, _ in self.keys]
        self.heads = [v for _, v in self.keys]
        self.out = [[] for _ in range(n)]
        for i, (u, v) in enumerate(self.keys):
            self.out[u].append((v, i))


def _feasible_counts(net: _MultiNet, mg: _Multigraph, future: np.ndarray, sinks, skip=None) -> bool:
    need = int(future.sum())
    for t in sinks:
        if t == skip:
            continue
        if net.maxflow(mg.m, future, None, None, t) < need:
            return False
    return True


def best_rate(arcs: dict, n: int, k: int, upper: Fraction, root: int | None = None,
              sinks=None) -> Fraction:
    """The largest per-tree rate y such that ``floor(c/y)`` admits the packing (module docstring).

    ``upper`` is the real-valued rate of the graph (x per GPU for allgather, the min cut for a root);
    the search starts at ``upper / k``. ``sinks``: one GPU per orbit of a symmetry (default: all).
    Returns 0 if no rate works (a GPU unreachable)."""
    if upper <= 0:
        return Fraction(0)
    y = Fraction(upper) / k
    roots = list(range(n)) if root is None else [root]
    need = k * len(roots)
    sinks = list(range(n)) if sinks is None else list(sinks)
    for t in sinks:
        if root is not None and t == root:
            continue
        while True:
            mg = _Multigraph(arcs, n, y)
            net = _MultiNet(n, mg.tails, mg.heads)
            future = np.zeros(n, dtype=np.int64)
            future[roots] = k
            flow = net.maxflow(mg.m, future, None, None, t)
            if flow >= need:
                break
            X = net.sink_side()
            deficit = need - k * sum(1 for r in roots if X[r])
            entering = [c for (u, v), c in arcs.items() if X[v] and not X[u]]
            y_new = _dth_largest(entering, deficit)
            if y_new is None or y_new <= 0:
                return Fraction(0)
            if not y_new < y:
                raise AssertionError("best_rate: a violated set that does not lower the rate")
            y = y_new
    return y


def _dth_largest(caps: list, d: int) -> Fraction | None:
    """The d-th largest value of the multiset {c / j : c in caps, j = 1, 2, ...}."""
    if d <= 0:
        return None
    if not caps:
        return None
    heap = [(-Fraction(c), Fraction(c), 1) for c in caps]
    heapq.heapify(heap)
    val = None
    for _ in range(d):
        neg, c, j = heapq.heappop(heap)
        val = -neg
        heapq.heappush(heap, (-(c / (j + 1)), c, j + 1))
    return val


# --------------------------------------------------------------------------------------------------------
# Construction
# --------------------------------------------------------------------------------------------------------
class Stuck(Exception):
    """The equivariant growth found no arc orbit to add (retry with a smaller group)."""


@dataclass
class _State:
    mg: _Multigraph
    net: _MultiNet
    future: np.ndarray
    group: list
    orbit_cache: dict = field(default_factory=dict)


def _orbit(st: _State, e: int) -> np.ndarray:
    orb = st.orbit_cache.get(e)
    if orb is None:
        u, v = st.mg.keys[e]
        try:
            orb = np.array([st.mg.index[(g[u], g[v])] for g in st.group], dtype=np.int64)
        except KeyError:
            raise AssertionError("find_group returned a map that is not an automorphism") from None
        st.orbit_cache[e] = orb
    return orb


def _grow(st: _State, r: int, stars_tpl: np.ndarray) -> tuple[dict, dict]:
    """Grow one tree rooted at r (and its images); returns (parent map, arc-id usage counts)."""
    n = st.net.n
    G = len(st.group)
    group = st.group
    for g in group:
        st.future[g[r]] -= 1
    active = np.ones(G, dtype=np.int64)
    stars = stars_tpl
    stars[:] = 0
    for i, g in enumerate(group):
        stars[i, g[r]] = _BIG
    in_tree = np.zeros(n, dtype=bool)
    in_tree[r] = True
    depth = {r: 0}
    order = [r]
    parent: dict = {}
    used: dict = {}
    tight: list[np.ndarray] = []
    need = int(st.future.sum()) + G

    def attempt(u, v, e) -> bool:
        orb = _orbit(st, e)
        np.subtract.at(st.mg.m, orb, 1)
        if (st.mg.m[orb] < 0).any():
            np.add.at(st.mg.m, orb, 1)
            return False
        for i, g in enumerate(group):
            stars[i, g[v]] = _BIG
        if st.net.maxflow(st.mg.m, st.future, active, stars, v) >= need:
            return True
        tight.append(st.net.sink_side())
        np.add.at(st.mg.m, orb, 1)
        for i, g in enumerate(group):
            stars[i, g[v]] = 0
        return False

    m = st.mg.m
    done: set = set()   # tree vertices with no arc left to a vertex outside (the tree only grows, m only drops)
    while len(order) < n:
        accepted = None
        deferred = []
        for u in order:
            if u in done:
                continue
            # the arcs still open, most capacity first (filtering before the stable sort keeps their order;
            # an attempt that fails gives back what it took, so nothing here changes while u is scanned)
            open_arcs = [(v, e) for v, e in st.mg.out[u] if not in_tree[v] and m[e] > 0]
            if not open_arcs:
                done.add(u)
                continue
            for v, e in sorted(open_arcs, key=lambda ve: (-m[ve[1]], ve[0])):
                if any(X[v] and not X[u] for X in tight):
                    deferred.append((u, v, e))
                    continue
                if attempt(u, v, e):
                    accepted = (u, v, e)
                    break
            if accepted:
                break
        if accepted is None:
            for u, v, e in deferred:
                if attempt(u, v, e):
                    accepted = (u, v, e)
                    break
        if accepted is None:
            if G == 1:
                raise AssertionError("tree packing got stuck although the condition held "
                                     "(Lovász's lemma says this cannot happen)")
            raise Stuck()
        u, v, e = accepted
        in_tree[v] = True
        parent[v] = u
        depth[v] = depth[u] + 1
        used[e] = used.get(e, 0) + 1
        # keep `order` sorted by depth so that shallow vertices are tried first (BFS-like trees)
        order.append(v)
        order.sort(key=lambda w: (depth[w], w))
    return parent, used


def _extra_copies(st: _State, r: int, used: dict, sinks) -> int:
    """How many more copies of the finished tree (and its images) the condition allows."""
    cmax = int(st.future[r])
    dec = np.zeros(len(st.mg.m), dtype=np.int64)
    for e, cnt in used.items():
        np.add.at(dec, _orbit(st, e), cnt)
    nz = dec > 0
    if cmax <= 0 or not nz.any():
        return 0
    cmax = min(cmax, int((st.mg.m[nz] // dec[nz]).min()))
    roots = [g[r] for g in st.group]

    def ok(c: int) -> bool:
        m_saved = st.mg.m.copy()
        f_saved = st.future.copy()
        st.mg.m -= c * dec
        for x in roots:
            st.future[x] -= c
        good = _feasible_counts(st.net, st.mg, st.future, sinks)
        st.mg.m[:] = m_saved
        st.future[:] = f_saved
        return good

    lo, hi = 0, cmax
    if hi > 0 and ok(hi):
        lo = hi
    else:
        while lo < hi - 1:
            mid = (lo + hi) // 2
            if ok(mid):
                lo = mid
            else:
                hi = mid
    if lo:
        st.mg.m -= lo * dec
        for x in roots:
            st.future[x] -= lo
    return lo


def pack(arcs: dict, n: int, k: int, y: Fraction, root: int | None = None,
         group: list | None = None) -> list[Tree]:
    """Arc-disjoint spanning arborescences in the multigraph ``floor(c/y)``: ``k`` rooted at every GPU
    (``root`` None) or ``k`` at ``root``; trees of one orbit grown together under ``group`` (module
    docstring). Raises :class:`Stuck` when the equivariant growth gets stuck, CollsError when the
    condition fails at the start (y too large)."""
    group = group or [list(range(n))]
    if root is not None:
        group = [list(range(n))]
    G = len(group)
    mg = _Multigraph(arcs, n, y)
    net = _MultiNet(n, mg.tails, mg.heads, aux=G)
    future = np.zeros(n, dtype=np.int64)
    roots = list(range(n)) if root is None else [root]
    future[roots] = k
    st = _State(mg, net, future, group)
    sinks = orbit_reps(group, n) if root is None else [t for t in range(n) if t != root]
    if not _feasible_counts(net, mg, future, sinks, skip=root):
        raise CollsError(f"trees: no packing of {k} trees per root at rate {y} (rate too high)")
    reps = orbit_reps(group, n) if root is None else [root]
    stars = np.zeros((G, n), dtype=np.int64)
    made: list[tuple[int, dict, int]] = []
    while True:
        progressed = False
        for r in reps:
            if future[r] <= 0:
                continue
            parent, used = _grow(st, r, stars)
            extra = _extra_copies(st, r, used, sinks)
            made.append((r, parent, 1 + extra))
            progressed = True
        if not progressed:
            break
    trees = []
    for r, parent, mult in made:
        for g in group:
            trees.append(Tree(g[r], {g[c]: g[p] for c, p in parent.items()}, mult))
    trees.sort(key=lambda t: (t.root, sorted(t.parent.items())))
    return trees


def check_packing(arcs: dict, n: int, k: int, y: Fraction, trees: list[Tree],
                  root: int | None = None) -> None:
    """Raise CollsError unless ``trees`` is a packing: k per root (or k at ``root``), each spanning every
    GPU along arcs of the graph, and every arc carrying at most ``floor(c/y)`` trees."""
    count: dict = {}
    load: dict = {}
    for t in trees:
        if t.mult < 1:
            raise CollsError("trees: a tree with multiplicity < 1")
        count[t.root] = count.get(t.root, 0) + t.mult
        if set(t.parent) != set(range(n)) - {t.root}:
            raise CollsError(f"trees: a tree of root {t.root} does not span every GPU")
        t.depth()  # raises on a cycle
        for e in t.arcs():
            if e not in arcs:
                raise CollsError(f"trees: tree arc {e} is not an arc of the graph")
            load[e] = load.get(e, 0) + t.mult
    want = {r: k for r in range(n)} if root is None else {root: k}
    if count != want:
        raise CollsError(f"trees: tree counts per root {count} differ from {want}")
    for e, used in load.items():
        if used * y > arcs[e]:
            raise CollsError(f"trees: arc {e} carries {used} trees of rate {y}, more than its "
                             f"{arcs[e]} GB/s")
