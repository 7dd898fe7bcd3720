"""Optimality bounds: the best algorithmic bandwidth any schedule can reach on a topology, and why.

Every function here is a free function of a :class:`~colls.topology.Topology` and returns a
:class:`Bound`: the bound on algorithmic bandwidth (GB/s, an exact :class:`~fractions.Fraction` wherever
the bound is exact), the nccl-tests bus bandwidth, the *binding cut* (the set of links that limits every
schedule, as two vertex sets and in words), and a latency lower bound for small messages.

The model (ForestColl, arXiv 2402.06787; bus bandwidth as nccl-tests' doc/PERFORMANCE.md defines it):

- The machine is the directed graph of the topology. A link ``u -> v`` moves at most ``bw(u, v)`` GB/s.
- Data may be forwarded by any vertex: switches and NICs, and also GPUs (a GPU may relay a chunk it has
  received, in software). Switches and NICs do not *replicate* data (no multicast) and do not *reduce*
  data (no in-network reduction such as NVLS or SHARP).
- Sizes follow nccl-tests: ``size`` is one rank's buffer (the output of allgather, the input of
  reduce-scatter, the buffer of allreduce/alltoall/broadcast/reduce), ``algbw = size / time`` and
  ``busbw = algbw x busbw_factor``. 1 GB/s is 1000 bytes per microsecond.

Cut words. A cut is given by its *sending* side ``S``; its links are those from ``S`` to the rest
(the *receiving* side). For reduce-scatter and reduce the sides are those of the real direction of the
data (towards the reducing ranks), not of the reversed graph the bound is computed on.

Exactness. Link bandwidths are Fractions; max-flow runs in int64 on capacities scaled by the least
common multiple of their denominators (and by the denominator of the current rate), so every exact
result is a Fraction equal to the true optimum, never a rounded float. Topologies whose scaled
capacities do not fit comfortably in int64 are refused with :class:`~colls.errors.CollsError`.

References
----------
L. Zhao, S. Maleki, et al., "ForestColl: Throughput-Optimal Collective Communications on Heterogeneous
Network Fabrics", arXiv:2402.06787 (the allgather/reduce-scatter optimum as a min-ratio cut, its
achievability by spanning-tree packing after switch splitting, and the max-flow feasibility test).
W. Dinkelbach, "On nonlinear fractional programming", Management Science 13(7), 1967 (the Newton
iteration on the ratio). NVIDIA/nccl-tests, doc/PERFORMANCE.md (algbw and busbw).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Iterable

import networkx as nx
import numpy as np

from colls.collectives import KINDS, busbw_factor, rank_ranges
from colls.errors import CollsError
from colls.flow import INT_LIMIT, FlowNet
from colls.runtimes import get_target
from colls.runtimes.costs import DATA_FRACTION, DEFAULT_LAUNCH, model_for, tb_rate
from colls.sizes import size_text
from colls.topology import GPU, NIC, Topology, Vertex, vertex_key

# Scaled capacities (and every flow value) must stay below this; the max-flow solver works in int64
# and reports POSSIBLE_OVERFLOW when the capacity out of the source could exceed 2^63 - 1.

_EXACT_AG = "exact optimum: min over cuts S of B+(S) / |S ∩ GPUs| (ForestColl)"
_EXACT_RS = "exact optimum: the allgather optimum of the reversed graph (ForestColl)"


# --------------------------------------------------------------------------------------------------------
# The result
# --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Bound:
    """A bound on the algorithmic bandwidth of one collective on one topology.

    Attributes
    ----------
    collective : str
        One of :data:`colls.collectives.KINDS`.
    ngpus : int
        Number of ranks N.
    algbw : Fraction
        Upper bound on ``size / time`` in GB/s (``size`` = one rank's buffer, nccl-tests convention).
        Exact optimum when ``exact`` is true.
    busbw : float
        ``algbw x busbw_factor(collective, N)`` (nccl-tests), GB/s.
    x : Fraction
        The binding ratio in GB/s: the optimal per-GPU rate ``algbw / N`` for allgather, reduce-scatter,
        allreduce and alltoall; the min cut ``algbw`` itself for broadcast and reduce.
    cut : frozenset
        Sending side S of the binding cut (the data crosses the links from ``cut`` to ``complement``).
    complement : frozenset
        Receiving side (every vertex not in ``cut``).
    cut_words : str
        The binding cut in words (see :func:`cut_words`).
    latency_us : float
        No schedule of this collective finishes in less (see :func:`latency_bound_us`).
    exact : bool
        True if ``algbw`` is the optimum of the model; False for a valid but possibly loose upper bound.
    method : str
        Which bound this is, in words.
    root : int or None
        Root rank of broadcast and reduce.
    parts : tuple of Bound
        For allreduce: the reduce-scatter and allgather bounds it is made of.
    """

    collective: str
    ngpus: int
    algbw: Fraction
    busbw: float
    x: Fraction
    cut: frozenset
    complement: frozenset
    cut_words: str
    latency_us: float
    exact: bool = True
    method: str = ""
    achievable: Fraction | None = None  # when not exact: an algbw that is certainly reachable
    root: int | None = None
    parts: tuple = ()

    def time_us(self, size_bytes) -> float:
        """Bandwidth lower bound on the time of a call with ``size_bytes`` per rank: ``size / algbw``.

        Parameters
        ----------
        size_bytes : int or float
            One rank's buffer size in bytes (nccl-tests ``size``).

        Returns
        -------
        float
            Microseconds (1 GB/s = 1000 bytes/us).
        """
        return float(Fraction(size_bytes) / (self.algbw * 1000))

    def min_time_us(self, size_bytes) -> float:
        """The larger of the two lower bounds: :meth:`time_us` and ``latency_us``."""
        return max(self.latency_us, self.time_us(size_bytes))

    def to_dict(self, size_bytes=None) -> dict:
        """JSON-ready facts (for ``colls bound --json``); exact values also as ``"p/q"`` strings."""
        out = {
            "collective": self.collective, "gpus": self.ngpus, "root": self.root,
            "algbw_gbps": float(self.algbw), "algbw_exact": str(self.algbw),
            "busbw_gbps": self.busbw, "exact": self.exact, "method": self.method,
            "binding_cut": self.cut_words, "latency_bound_us": self.latency_us,
        }
        if self.achievable is not None:
            out["achievable_gbps"] = float(self.achievable)
        if self.parts:
            out["parts"] = [p.to_dict() for p in self.parts]
        if size_bytes is not None:
            out["size_bytes"] = size_bytes
            out["bandwidth_time_us"] = self.time_us(size_bytes)
            out["min_time_us"] = self.min_time_us(size_bytes)
        return out

    def format(self, size_bytes=None) -> str:
        """A few readable lines: the bound, whether it is exact, the binding cut, the latency floor."""
        kind = "optimum" if self.exact else "upper bound"
        lines = [f"{self.collective} on {self.ngpus} GPUs: link {kind}: algbw {float(self.algbw):.2f} GB/s "
                 f"(busbw {self.busbw:.2f} GB/s)",
                 f"  binding cut: {self.cut_words}",
                 f"  bound: {self.method}",
                 *([f"  reachable: {float(self.achievable):.2f} GB/s (the balanced graph's optimum)"]
                   if self.achievable is not None else []),
                 f"  latency floor: {self.latency_us:.2f} us"]
        for p in self.parts:
            lines.append(f"  {p.collective} part: {float(p.algbw):.2f} GB/s, cut: {p.cut_words}")
        if size_bytes is not None:
            lines.append(f"  {size_text(size_bytes)}: at least {self.min_time_us(size_bytes):.2f} us")
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------------------
# The flow network (one per topology and call; capacities are changed in place, never rebuilt)
# --------------------------------------------------------------------------------------------------------
class _FlowNet:
    """The topology as a :class:`colls.flow.FlowNet` with integer-scaled capacities.

    Vertex index: GPU rank r is index r, then the other vertices in ``vertex_key`` order; the network's
    own source ``s`` and sink ``z`` follow. Arcs: the topology's links (capacity ``bw x scale``, times a
    multiplier), then ``s -> v`` and ``v -> z`` (capacities set per use; nonzero only for GPUs here).
    """

    def __init__(self, topo: Topology):
        g = topo.graph
        self.topo = topo
        self.gpus = topo.gpus
        self.n = len(self.gpus)
        others = sorted((v for v in g.nodes if topo.kind(v) != GPU), key=vertex_key)
        self.vertices: list = list(self.gpus) + others
        self.index = {v: i for i, v in enumerate(self.vertices)}
        self.nv = len(self.vertices)
        links = [(u, v, d["bw"]) for u, v, d in topo.links()]
        self.scale = 1
        for _, _, bw in links:
            self.scale = math.lcm(self.scale, Fraction(bw).denominator)
        caps = [int(Fraction(bw) * self.scale) for _, _, bw in links]
        self.total = sum(caps)
        self._check(self.total * max(self.n, 1), "the link bandwidths")
        self.caps = np.array(caps, dtype=np.int64)
        self.net = FlowNet(self.nv, [self.index[u] for u, _, _ in links],
                           [self.index[v] for _, v, _ in links], what=f"topology {topo.name!r}")
        self.tails, self.heads = self.net.tails, self.net.heads
        self.source, self.sink = self.net.s, self.net.z

    def _check(self, value: int, what: str) -> None:
        if value >= INT_LIMIT:
            raise CollsError(
                f"{what} of topology {self.topo.name!r} cannot be represented exactly in 64-bit "
                f"integers (common denominator {self.scale}); round the bandwidths to fewer digits")

    def set(self, mult: int, src: np.ndarray | int = 0, snk: np.ndarray | int = 0) -> None:
        """Link capacities ``bw x scale x mult``; ``s -> r`` capacities ``src``; ``r -> z`` ``snk``."""
        src_all = np.zeros(self.nv, dtype=object)
        snk_all = np.zeros(self.nv, dtype=object)
        src_all[: self.n] = np.broadcast_to(np.asarray(src, dtype=object), (self.n,))
        snk_all[: self.n] = np.broadcast_to(np.asarray(snk, dtype=object), (self.n,))
        self._check(self.total * mult + int(src_all.sum()) + int(snk_all.sum()), "a scaled capacity")
        self.net.set(self.caps * mult, src_all.astype(np.int64), snk_all.astype(np.int64))

    def solve(self, a: int, b: int) -> int:
        return self.net.solve(a, b)

    def source_side(self) -> np.ndarray:
        """Boolean mask over topology vertices: the minimal source side of the last min cut."""
        return self.net.source_side()

    def sink_side(self) -> np.ndarray:
        """Boolean mask over topology vertices: the minimal sink side of the last min cut."""
        return self.net.sink_side()

    def out_cap(self, side: np.ndarray) -> int:
        """B+(side) in scaled units (``bw x scale``): total capacity of links leaving ``side``."""
        crossing = side[self.tails] & ~side[self.heads]
        return int(self.caps[crossing].sum())

    def mask(self, vertices: Iterable[Vertex]) -> np.ndarray:
        m = np.zeros(self.nv, dtype=bool)
        m[[self.index[v] for v in vertices]] = True
        return m

    def vertex_set(self, mask: np.ndarray) -> frozenset:
        return frozenset(self.vertices[i] for i in np.flatnonzero(mask))


# --------------------------------------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------------------------------------
def _check_topology(topo: Topology, kind: str, root: int = 0) -> None:
    """Raise CollsError unless the collective can run at all: >= 2 GPUs, the needed pairs connected (checked
    once per machine, collective and root: the bounds of an allreduce ask for its parts too)."""
    rooted = kind in ("broadcast", "reduce")
    if rooted and (isinstance(root, bool) or not isinstance(root, (int, np.integer))):
        _check_once(topo, kind, root)       # refuses it; not a key to remember
    topo.derived(("checked", kind, int(root) if rooted else None), lambda: _check_once(topo, kind, root))


def _check_once(topo: Topology, kind: str, root: int) -> None:
    topo.validate(source=f"topology {topo.name!r}")
    n = topo.ngpus
    if n < 2:
        raise CollsError(f"topology {topo.name!r} has {n} GPU; a collective needs at least 2")
    rooted = kind in ("broadcast", "reduce")
    if rooted and (isinstance(root, bool) or not isinstance(root, (int, np.integer))
                   or not 0 <= root < n):
        raise CollsError(f"root {root!r} is not a rank of topology {topo.name!r} (0..{n - 1})",
                         key="root")
    g = topo.graph
    hub = int(root) if rooted else 0
    down = nx.descendants(g, hub)
    up = nx.ancestors(g, hub)
    for r in topo.gpus:
        if r == hub:
            continue
        if kind != "reduce" and r not in down:
            raise CollsError(f"in topology {topo.name!r} GPU {hub} cannot reach GPU {r} "
                             f"(no directed path), so {kind} cannot complete")
        if kind != "broadcast" and r not in up:
            raise CollsError(f"in topology {topo.name!r} GPU {r} cannot reach GPU {hub} "
                             f"(no directed path), so {kind} cannot complete")


# --------------------------------------------------------------------------------------------------------
# Allgather / reduce-scatter: the exact min-ratio cut
# --------------------------------------------------------------------------------------------------------
def _min_ratio_cut(topo: Topology) -> tuple[Fraction, frozenset]:
    """x* = min over S (1 <= |S ∩ GPUs| < N) of B+(S)/|S ∩ GPUs|, and a binding S with the smallest
    receiving side found. Assumes _check_topology passed."""
    net = _FlowNet(topo)
    n = net.n
    everything = np.ones(net.nv, dtype=bool)
    # Start: the best single-GPU cut (one GPU's egress over 1, or one GPU's ingress over N - 1).
    x = None  # in scaled units (bw x scale), a Fraction
    best_side = None
    for r in node_representatives(topo):    # a GPU's cuts are its images' (the first minimal is one of these)
        one = net.mask([r])
        for side, k in ((one, 1), (everything & ~one, n - 1)):
            ratio = Fraction(net.out_cap(side), k)
            if x is None or ratio < x:
                x, best_side = ratio, side
    # The GPU left outside the starting cut: the sink whose min cut is tight at the end.
    binding_t = int(np.flatnonzero(~best_side[:n])[0])

    def apply(rate: Fraction) -> None:
        net.set(rate.denominator, src=rate.numerator, snk=0)

    apply(x)
    for t in node_representatives(topo):    # a sink that passes at x passes at any smaller x
        while True:  # Dinkelbach/Newton on the ratio for this sink
            need = n * x.numerator  # N x, scaled by x's denominator like every capacity now
            if net.solve(net.source, t) >= need:
                break
            side = net.source_side()
            k = int(side[:n].sum())
            new = Fraction(net.out_cap(side), k)
            if not (0 < k < n and new < x):
                raise AssertionError("max-flow returned a cut that does not lower the ratio")
            x, binding_t = new, t
            apply(x)
    # x is x*: every sink passed. Re-solve for the binding sink: its min cut is tight, and the minimal
    # sink side is the smallest receiving side of a binding cut for that sink.
    net.solve(net.source, binding_t)
    side = ~net.sink_side()
    k = int(side[:n].sum())
    if not (0 < k < n and Fraction(net.out_cap(side), k) == x):
        raise AssertionError("the binding cut is not tight")
    return x / net.scale, net.vertex_set(side)


def _reversal_map(topo: Topology) -> dict | None:
    """A relabelling that makes the reversed machine the machine itself, or None: each NIC's out vertex
    (``.tx``) and in vertex (``.rx``) swapped, everything else kept, checked link by link (a link u -> v with
    its attributes is matched by a link map(v) -> map(u) with the same ones). Where it holds, a reduce-scatter's
    bound (an allgather's on the reversal) is the allgather's, its cut mapped back; computed once."""
    def make():
        g = topo.graph
        swap = {}
        for v in g.nodes:
            if (isinstance(v, str) and v.endswith(".tx") and g.has_node(v[:-3] + ".rx")
                    and g.nodes[v].get("kind") == g.nodes[v[:-3] + ".rx"].get("kind")):
                swap[v], swap[v[:-3] + ".rx"] = v[:-3] + ".rx", v
        back = lambda v: swap.get(v, v)    # noqa: E731
        ok = all(g.has_edge(back(v), back(u)) and g.edges[back(v), back(u)] == d for u, v, d in g.edges(data=True))
        return swap if ok else None
    return topo.derived(("reversal map",), make)


def _gather_bound(topo: Topology, kind: str, latency: float) -> Bound:
    """The exact allgather (kind "allgather") or reduce-scatter (kind "reducescatter") bound."""
    swap = _reversal_map(topo) if kind == "reducescatter" else None
    directed = topo if kind == "allgather" or swap is not None else topo.reversed()
    x, sending = directed.derived(("min ratio cut",), lambda: _min_ratio_cut(directed))
    if kind == "allgather":
        method = _EXACT_AG
    else:
        if swap is not None:        # the reversal's cut: the machine's, relabelled
            sending = frozenset(swap.get(v, v) for v in sending)
        sending = frozenset(topo.graph.nodes) - sending  # real data flows the other way
        method = _EXACT_RS
    n = topo.ngpus
    algbw = n * x
    exact, achievable = True, None
    lopsided = _unbalanced_relays(topo)
    if lopsided:
        # Switches and NICs forward but never copy data, so a relay that takes in less than it sends
        # out (a NIC shared by two GPUs) can make the cut bound unreachable. The balanced graph (each
        # such relay's larger side scaled down) is reachable by splitting and tree packing.
        from colls.synth.splitting import Splitter
        target = directed.derived(("split target", x), lambda: Splitter(directed, optimum=x).target)
        if target < x:
            exact, achievable = False, n * target
            v, a, b = lopsided[0]
            method = (f"cut bound, an upper bound: {topo.label(v)} takes in {_num(a)} GB/s but sends "
                      f"out {_num(b)} GB/s, and switches and NICs do not copy data, so the optimum "
                      f"lies between {float(n * target):.2f} GB/s (reached by the balanced graph) and "
                      f"this bound")
    return Bound(kind, n, algbw, float(algbw) * busbw_factor(kind, n), x, sending,
                 frozenset(topo.graph.nodes) - sending, cut_words(topo, sending), latency,
                 exact=exact, method=method, achievable=achievable)


def _unbalanced_relays(topo: Topology) -> list:
    """Non-GPU vertices whose total in- and out-bandwidth differ: (vertex, in, out), in vertex order (computed
    once per machine)."""
    return topo.derived(("unbalanced_relays",), lambda: _find_unbalanced_relays(topo))


def _find_unbalanced_relays(topo: Topology) -> list:
    g = topo.graph
    out = []
    for v in topo.vertices():
        if topo.kind(v) == GPU:
            continue
        a = sum((d["bw"] for _, _, d in g.in_edges(v, data=True)), Fraction(0))
        b = sum((d["bw"] for _, _, d in g.out_edges(v, data=True)), Fraction(0))
        if a != b:
            out.append((v, a, b))
    return out


def allgather_bound(topo: Topology) -> Bound:
    """The exact optimal allgather algorithmic bandwidth and its binding cut.

    With N GPUs each holding ``size / N`` bytes, every vertex set S that contains at least one GPU and
    misses at least one must let ``|S ∩ GPUs| x size / N`` bytes out through its outgoing links, so
    ``time >= (size / N) x |S ∩ GPUs| / B+(S)``. The optimum is ``algbw* = N x*`` with
    ``x* = min_S B+(S) / |S ∩ GPUs|``, and it is achievable (ForestColl, Theorem on spanning-tree
    packing after switch splitting; GPUs may relay).

    Algorithm: add a super-source s with an arc of capacity x to every GPU. Rate x is feasible iff for
    every GPU t, ``maxflow(s -> t) >= N x`` (a cut S not containing t has capacity
    ``x (N - |S ∩ GPUs|) + B+(S)``). Start from the best single-GPU cut (an upper bound on x*); for each
    t in turn, while the test fails, the min cut S has ratio ``B+(S) / |S ∩ GPUs| < x``: set x to it
    (Dinkelbach/Newton). A sink that passes at some x passes at every smaller x, so one pass over the
    GPUs suffices. x is always a ratio p/q of a real cut; capacities are scaled by q and by the common
    denominator of the bandwidths, so every test is exact in int64 arithmetic. At the end the min cut
    of the last violated sink is tight; its minimal sink side is reported as the receiving side.

    Cost: N + (number of Newton steps) max-flows on one solver whose capacities are reset in place
    (push-relabel, O(V^2 sqrt(E)) each); Newton steps are few in practice (each strictly lowers x to
    the ratio of a distinct cut).

    Parameters
    ----------
    topo : Topology
        Any topology: GPUs, switches and NICs, bandwidths as Fractions.

    Returns
    -------
    Bound
        ``algbw = N x*`` (a Fraction, GB/s), ``x = x*``, the binding cut (sending side S, receiving
        side its complement) and its words, the latency bound.

    Raises
    ------
    CollsError
        Fewer than 2 GPUs, a GPU that cannot reach another (named), or bandwidths that cannot be made
        exact int64 capacities.

    References
    ----------
    ForestColl (arXiv 2402.06787), the allgather optimality bound and its max-flow test.
    """
    _check_topology(topo, "allgather")
    return _gather_bound(topo, "allgather", latency_bound_us(topo, "allgather"))


def reducescatter_bound(topo: Topology) -> Bound:
    """The exact optimal reduce-scatter algorithmic bandwidth: allgather on ``topo.reversed()``.

    Reduce-scatter is the time-reversal of allgather (every aggregation tree is a broadcast tree with
    its links turned around), so its optimum is the allgather optimum of the reversed graph:
    ``x* = min over S of B-(S) / |S ∩ GPUs|`` with B-(S) the bandwidth of the links *entering* S.
    The reported cut is in the real direction of the data: ``cut`` sends, ``complement`` receives.

    Parameters
    ----------
    topo : Topology

    Returns
    -------
    Bound
        As :func:`allgather_bound`.

    Raises
    ------
    CollsError
        As :func:`allgather_bound`.

    References
    ----------
    ForestColl (arXiv 2402.06787), reduce-scatter by aggregation trees.
    """
    _check_topology(topo, "reducescatter")
    return _gather_bound(topo, "reducescatter", latency_bound_us(topo, "reducescatter"))


def allreduce_bound(topo: Topology) -> Bound:
    """The reduce-scatter + allgather bound for allreduce: ``1/algbw = 1/algbw_RS + 1/algbw_AG``.

    This is the optimum of allreduce done as a reduce-scatter followed by an allgather on the same
    buffer (ForestColl, NCCL ring): ``T_AR = T_RS + T_AG``. It is *not* a bound for in-network
    reduction (NVLS, SHARP) nor a proof that no other allreduce algorithm can do better.

    Parameters
    ----------
    topo : Topology

    Returns
    -------
    Bound
        ``exact`` (for the RS+AG construction), ``x = algbw / N``; ``parts`` holds the reduce-scatter
        and allgather bounds; the cut is that of the slower part (allgather on a tie) and the words name
        both.

    Raises
    ------
    CollsError
        As :func:`allgather_bound`.

    References
    ----------
    ForestColl (arXiv 2402.06787), allreduce as reduce-scatter then allgather.
    """
    _check_topology(topo, "allreduce")
    lat = latency_bound_us(topo, "allreduce")
    rs = _gather_bound(topo, "reducescatter", lat)
    ag = _gather_bound(topo, "allgather", lat)
    algbw = 1 / (1 / rs.algbw + 1 / ag.algbw)
    n = topo.ngpus
    slow = rs if rs.algbw < ag.algbw else ag
    words = f"reduce-scatter: {rs.cut_words}; allgather: {ag.cut_words}"
    exact = rs.exact and ag.exact
    achievable = None
    if not exact:
        reach = [p.achievable if p.achievable is not None else p.algbw for p in (rs, ag)]
        achievable = 1 / (1 / reach[0] + 1 / reach[1])
    method = "reduce-scatter then allgather (1/algbw = 1/algbw_RS + 1/algbw_AG); not in-network reduction"
    if not exact:
        method += "; an upper bound, as its parts are (see them)"
    return Bound("allreduce", n, algbw, float(algbw) * busbw_factor("allreduce", n), algbw / n,
                 slow.cut, slow.complement, words, lat, exact=exact, method=method,
                 parts=(rs, ag), achievable=achievable)


# --------------------------------------------------------------------------------------------------------
# Broadcast / reduce: the min root -> t cut
# --------------------------------------------------------------------------------------------------------
def _rooted_cut(topo: Topology, root: int) -> tuple[Fraction, frozenset]:
    """min over t != root of maxflow(root -> t), and the cut (sending side) with the smallest receiving
    side among the minimising t."""
    net = _FlowNet(topo)
    net.set(1)
    best, best_recv = None, None
    for t in net.gpus:
        if t == root:
            continue
        f = net.solve(root, t)
        if best is None or f <= best:
            recv = net.sink_side()
            if best is None or f < best or recv.sum() < best_recv.sum():
                best, best_recv = f, recv
    return Fraction(best, net.scale), net.vertex_set(~best_recv)


def _rooted_bound(topo: Topology, kind: str, root: int) -> Bound:
    _check_topology(topo, kind, root)
    if kind == "broadcast":
        algbw, sending = _rooted_cut(topo, root)
    else:
        algbw, rev_sending = _rooted_cut(topo.reversed(), root)
        sending = frozenset(topo.graph.nodes) - rev_sending
    n = topo.ngpus
    method = ("exact optimum without replication in switches: min over t of maxflow(root -> t)"
              if kind == "broadcast" else
              "exact optimum without reduction in switches: min over t of maxflow(t -> root)")
    return Bound(kind, n, algbw, float(algbw) * busbw_factor(kind, n), algbw, sending,
                 frozenset(topo.graph.nodes) - sending, cut_words(topo, sending),
                 latency_bound_us(topo, kind, root), exact=True, method=method, root=root)


def broadcast_bound(topo: Topology, root: int = 0) -> Bound:
    """The optimal broadcast algorithmic bandwidth: ``min over GPUs t != root of maxflow(root -> t)``.

    Every GPU t must receive the whole buffer from the root, so ``time >= size / maxflow(root -> t)``.
    The bound is achievable when GPUs relay and switches are split into GPU-to-GPU links (Edmonds'
    branching theorem: k arc-disjoint spanning arborescences exist iff every root -> t cut is >= k;
    ForestColl removes switches by edge splitting that keeps this connectivity). It assumes switches
    and NICs do *not* replicate data (no multicast/NVLS): with replication in switches more is possible.

    Parameters
    ----------
    topo : Topology
    root : int
        The root rank.

    Returns
    -------
    Bound
        ``algbw = x`` = the min cut (Fraction, GB/s); the binding cut separates the root from the GPUs
        of the receiving side.

    Raises
    ------
    CollsError
        A root that is not a rank, a GPU the root cannot reach, or non-representable bandwidths.

    References
    ----------
    ForestColl (arXiv 2402.06787), broadcast trees and switch splitting; J. Edmonds, "Edge-disjoint
    branchings", 1973.
    """
    return _rooted_bound(topo, "broadcast", root)


def reduce_bound(topo: Topology, root: int = 0) -> Bound:
    """The optimal reduce algorithmic bandwidth: broadcast on ``topo.reversed()``.

    ``min over t != root of maxflow(t -> root)``; assumes switches do not reduce (no SHARP/NVLS) and,
    for achievability, that switches can be split as for broadcast. The reported cut is in the real
    direction of the data (towards the root).

    Parameters
    ----------
    topo : Topology
    root : int

    Returns
    -------
    Bound

    Raises
    ------
    CollsError
        As :func:`broadcast_bound` (a GPU that cannot reach the root).

    References
    ----------
    ForestColl (arXiv 2402.06787).
    """
    return _rooted_bound(topo, "reduce", root)


# --------------------------------------------------------------------------------------------------------
# Alltoall: a cut bound
# --------------------------------------------------------------------------------------------------------
def alltoall_bound(topo: Topology) -> Bound:
    """An upper bound on alltoall algorithmic bandwidth from a family of cuts (not the exact optimum).

    Each rank sends ``size / N`` bytes to every rank (``size`` = one rank's buffer, nccl-tests; written
    M / N^2 with M the sum of all ranks' buffers, it is the same amount). Across
    a cut S with ``a = |S ∩ GPUs|`` and ``b = N - a`` GPUs on either side, ``a b size / N`` bytes must
    cross the links leaving S, so ``algbw <= N B+(S) / (a b)`` for *every* S; the minimum over the
    cuts tried below is a valid upper bound. The exact optimum is a minimum-congestion multicommodity
    flow (an LP) and can be lower; ``exact`` is False.

    The cuts tried: every single GPU (egress: S = {g}; ingress: S = all but g); every node (all its
    vertices, both directions) when there are several nodes; the min cuts between the two halves of
    the GPUs (the first half of the nodes, or of the ranks on one node) in both directions, found by
    max-flow; and the binding cuts of allgather and reduce-scatter.

    Parameters
    ----------
    topo : Topology

    Returns
    -------
    Bound
        ``algbw = N x`` with ``x = min B+(S) / (a b)`` over the cuts tried; ``exact=False``.

    Raises
    ------
    CollsError
        As :func:`allgather_bound`.

    References
    ----------
    The cut bound of the multicommodity flow (any cut carries at least the data that must cross it).
    """
    _check_topology(topo, "alltoall")
    net = _FlowNet(topo)
    n = net.n
    everything = np.ones(net.nv, dtype=bool)
    candidates: list[np.ndarray] = []
    for r in node_representatives(topo):    # a GPU's cuts are its images' (the first minimal is one of these)
        one = net.mask([r])
        candidates += [one, everything & ~one]
    node_ids = sorted({topo.node_of(r) for r in net.gpus}, key=lambda v: (v is None, v))
    if len(node_ids) > 1:
        for nd in node_ids:
            side = net.mask(v for v in net.vertices if topo.node_of(v) == nd)
            candidates += [side, everything & ~side]
    # Halves by max-flow: first half of the nodes (or of the ranks on one node) vs the rest.
    order = sorted(net.gpus, key=lambda r: (node_ids.index(topo.node_of(r)), r))
    if len(node_ids) > 1:
        first = set(node_ids[: (len(node_ids) + 1) // 2])
        half_a = [r for r in order if topo.node_of(r) in first]
    else:
        half_a = order[: n // 2]
    in_a = np.zeros(n, dtype=np.int64)
    in_a[half_a] = 1
    big = net.total + 1
    for a_side in (in_a, 1 - in_a):
        net.set(1, src=a_side * big, snk=(1 - a_side) * big)
        net.solve(net.source, net.sink)
        candidates.append(net.source_side())
    _, ag_sending = _min_ratio_cut(topo)
    _, rs_receiving = _min_ratio_cut(topo.reversed())
    candidates += [net.mask(ag_sending), ~net.mask(rs_receiving)]
    best, best_side = None, None
    for side in candidates:
        a = int(side[:n].sum())
        if not 0 < a < n:
            continue
        ratio = Fraction(net.out_cap(side), a * (n - a))
        if best is None or ratio < best:
            best, best_side = ratio, side
    x = best / net.scale
    algbw = n * x
    sending = net.vertex_set(best_side)
    return Bound("alltoall", n, algbw, float(algbw) * busbw_factor("alltoall", n), x, sending,
                 frozenset(topo.graph.nodes) - sending, cut_words(topo, sending),
                 latency_bound_us(topo, "alltoall"), exact=False,
                 method="cut bound: min over a family of cuts S of N B+(S) / (|S ∩ GPUs| |rest ∩ GPUs|); "
                        "an upper bound, not the exact multicommodity-flow optimum")


# --------------------------------------------------------------------------------------------------------
# Latency
# --------------------------------------------------------------------------------------------------------
def _latency(_u, _v, data) -> float:
    return float(data.get("latency", 0.0))


def latency_bound_us(topo: Topology, collective_kind: str, root: int = 0) -> float:
    """A latency lower bound: the longest shortest path between a pair that must exchange data.

    No schedule finishes before data from a source has reached every destination that needs it, and
    that takes at least the shortest path latency (sum of link latencies; GPUs may relay). Pairs:
    every ordered pair of GPUs for allgather, reduce-scatter, allreduce and alltoall; root to every GPU
    for broadcast; every GPU to the root for reduce. (For allreduce this is the bound of any algorithm,
    not twice it for RS + AG.)

    Parameters
    ----------
    topo : Topology
    collective_kind : str
        One of :data:`colls.collectives.KINDS`.
    root : int
        Root rank for broadcast and reduce.

    Returns
    -------
    float
        Microseconds.

    Raises
    ------
    CollsError
        Unknown collective, or a pair with no path (named).

    References
    ----------
    The alpha term of the alpha-beta cost model (TACCL, arXiv:2111.04867); Dijkstra via networkx.
    """
    if collective_kind not in KINDS:
        raise CollsError(f"unknown collective {collective_kind!r} (choose from {', '.join(KINDS)})",
                         key="collective")
    _check_topology(topo, collective_kind, root)
    if collective_kind in ("broadcast", "reduce"):
        return topo.by_latency(("latency_bound", collective_kind, root),
                               lambda: _latency_bound(topo, collective_kind, root))
    # every ordered pair: the same figure for the four collectives that exchange between all GPUs
    return topo.by_latency(("latency_bound", "all pairs"), lambda: _latency_bound(topo, collective_kind, root))


def _latency_bound(topo: Topology, collective_kind: str, root: int) -> float:
    g = topo.graph
    if collective_kind == "broadcast":
        dist = nx.single_source_dijkstra_path_length(g, root, weight=_latency)
        return max(dist[r] for r in topo.gpus if r != root)
    if collective_kind == "reduce":
        dist = nx.single_source_dijkstra_path_length(g.reverse(copy=False), root, weight=_latency)
        return max(dist[r] for r in topo.gpus if r != root)
    worst = 0.0
    gpus = topo.gpus
    for a in node_representatives(topo):
        dist = nx.single_source_dijkstra_path_length(g, a, weight=_latency)
        worst = max(worst, max(dist[b] for b in gpus if b != a))
    return worst


def node_representatives(topo: Topology) -> list:
    """GPUs that stand for all: the first node's when turning the nodes round (:meth:`Topology.node_turn`) is
    an automorphism of the machine, else every GPU.

    Such a map permutes the GPUs and keeps every distance and every capacity, so a GPU of node i is as far
    from the others (:func:`latency_bound_us`) and as good a max-flow sink (:func:`_min_ratio_cut`: the
    source feeds every GPU alike) as its image in node 0; and the turns reach every node."""
    return topo.representatives()


# --------------------------------------------------------------------------------------------------------
# Dispatch
# --------------------------------------------------------------------------------------------------------
def bound(topo: Topology, kind: str, root: int = 0) -> Bound:
    """The bound for collective ``kind`` (one of :data:`colls.collectives.KINDS`).

    Parameters
    ----------
    topo : Topology
    kind : str
    root : int
        Root rank (broadcast and reduce only).

    Returns
    -------
    Bound

    Raises
    ------
    CollsError
        Unknown kind, or as the function for that kind.
    """
    if kind == "allgather":
        return allgather_bound(topo)
    if kind == "reducescatter":
        return reducescatter_bound(topo)
    if kind == "allreduce":
        return allreduce_bound(topo)
    if kind == "alltoall":
        return alltoall_bound(topo)
    if kind == "broadcast":
        return broadcast_bound(topo, root)
    if kind == "reduce":
        return reduce_bound(topo, root)
    raise CollsError(f"unknown collective {kind!r} (choose from {', '.join(KINDS)})", key="collective")


# --------------------------------------------------------------------------------------------------------
# The runtime optimum
# --------------------------------------------------------------------------------------------------------
# Bytes per byte of the call the busiest GPU sends at least, whatever the schedule (files copy, they do not
# reduce in the network): allgather, on average over the GPUs, what each receives, (N - 1) / N; reduce-scatter
# and alltoall, the N - 1 blocks of its input that belong to others, which must leave it; allreduce, a value for
# every element of its input (each is needed elsewhere, whole or in a partial sum); broadcast, the root's whole
# buffer; reduce, every other GPU's whole buffer.
def _sent_share(kind: str, n: int) -> Fraction:
    if kind in ("allreduce", "broadcast", "reduce"):
        return Fraction(1) if n > 1 else Fraction(0)
    return Fraction(n - 1, n)


@dataclass(frozen=True)
class RuntimeOptimum:
    """The least time any file of one collective can take on one runtime, per call size: a lower bound in the
    runtime's own cost model (:mod:`colls.runtimes.costs`, what ``colls simulate`` charges), where the link
    optimum (:class:`Bound`) counts the links alone.

    At each protocol a call costs at least the launch and one message's fixed cost (nothing moves before a
    threadblock has paid it), then the largest of three floors, which all run after it:

    - *latency*: the worst pair's shortest route (:func:`latency_bound_us`), plus the network step when the
      machine has several nodes;
    - *links*: the call's bytes at the link optimum of the machine as the runtime reaches it (each link's
      bandwidth times its class's efficiency, :meth:`colls.topology.Topology.effective`), on the wire (LL moves
      8 data bytes in 16);
    - *threadblocks*: what the busiest GPU must send at least (:func:`_sent_share`), on the wire, at the copy
      rate of every threadblock the GPU may run at once (the target's limit and the GPU's SMs).

    The optimum is the least over the protocols. The runtime's own algorithms can pass it where they reduce in
    the switch (NVLS); a file cannot."""

    collective: str
    ngpus: int
    target: str
    links: Bound                  # the link optimum on the links as the runtime reaches them
    threadblocks: int             # per GPU at most
    models: tuple                 # (protocol, Model, a threadblock's wire rate in GB/s)
    latency_us: float             # the latency floor, the network step included
    sent_share: Fraction

    def terms(self, size_bytes, proto: str) -> dict:
        """The floors of one protocol at one size (microseconds) and which of them binds."""
        _, model, rate = next(m for m in self.models if m[0] == proto)
        wire = float(size_bytes) / model.data_fraction
        floors = {"latency": self.latency_us,
                  "links": wire / (float(self.links.algbw) * 1000.0) if self.links.algbw else math.inf,
                  "threadblocks": float(self.sent_share) * wire / (self.threadblocks * rate * 1000.0)}
        binds = max(floors, key=floors.get)
        return dict(floors, launch=model.launch_us, message=model.step_us, binds=binds,
                    time_us=model.launch_us + model.step_us + floors[binds])

    def best(self, size_bytes) -> tuple[str, dict]:
        """The protocol with the least time at ``size_bytes``, and its :meth:`terms`."""
        return min(((p, self.terms(size_bytes, p)) for p, _, _ in self.models), key=lambda x: x[1]["time_us"])

    def time_us(self, size_bytes) -> float:
        return self.best(size_bytes)[1]["time_us"]

    def threadblocks_for_links(self) -> int:
        """Threadblocks per GPU that must copy at once for the busiest GPU to send at the link optimum's rate
        (Simple, the fastest copy)."""
        rate = max(r for _, _, r in self.models)
        need = float(self.sent_share * self.links.algbw) / rate
        return max(1, math.ceil(need - 1e-9))

    def row(self, size_bytes) -> dict:
        proto, t = self.best(size_bytes)
        algbw = float(size_bytes) / t["time_us"] / 1000.0
        return {"size_bytes": size_bytes, "time_us": t["time_us"], "algbw_gbps": algbw,
                "busbw_gbps": algbw * busbw_factor(self.collective, self.ngpus), "protocol": proto,
                "binds": t["binds"]}

    def to_dict(self, sizes) -> dict:
        return {"target": self.target, "link_algbw_gbps": float(self.links.algbw),
                "threadblocks_per_gpu": self.threadblocks, "latency_floor_us": self.latency_us,
                "threadblocks_for_links": self.threadblocks_for_links(),
                "sizes": [self.row(s) for s in sizes]}

    def format(self, sizes) -> str:
        rate = max(r for _, _, r in self.models)
        lines = [f"runtime optimum on {self.target} (the least time any file can take; "
                 f"links at {float(self.links.algbw):.2f} GB/s algbw as the runtime reaches them):"]
        for s in sizes:
            r = self.row(s)
            lines.append(f"  {size_text(s)}: {r['time_us']:.4g} us, busbw {r['busbw_gbps']:.3g} GB/s "
                         f"({r['protocol']}; {r['binds']} bind{'s' if r['binds'] != 'threadblocks' else ''})")
        lines.append(f"  to send at the links' rate a GPU needs at least {self.threadblocks_for_links()} "
                     f"threadblocks copying at once ({rate:.3g} GB/s each, {self.threadblocks} at most)")
        return "\n".join(lines)


def runtime_optimum(topo: Topology, kind: str, target: str = "exe", root: int = 0,
                    launch: str | None = None, link_optimum: Bound | None = None) -> RuntimeOptimum:
    """The :class:`RuntimeOptimum` of ``kind`` on ``topo`` for files the runtime of ``target`` runs.
    ``link_optimum``: ``bound(topo, kind, root=root)`` where the caller has it; it is the links as the runtime
    reaches them when no link class has an efficiency below 1 (else it is computed for those)."""
    tgt = get_target(target)
    reached = topo.effective()
    links = link_optimum if link_optimum is not None and reached is topo else bound(reached, kind, root=root)
    gpu = topo.gpu_model()
    models = []
    for proto in DATA_FRACTION:
        model = model_for(proto, gpu, launch=launch or DEFAULT_LAUNCH)
        models.append((proto, model, model.tb_gbps or tb_rate(gpu) * model.tb_factor))
    latency = links.latency_us
    crossing = _crossing_latency_us(topo, kind, root)
    if crossing is not None:        # data must cross the network: that route, and the network's step
        latency = max(latency, crossing + models[0][1].net_step_us)
    return RuntimeOptimum(kind, topo.ngpus, tgt.name, links, min(tgt.max_tbs, topo.min_sms()), tuple(models),
                          latency, _sent_share(kind, topo.ngpus))


def _crossing_latency_us(topo: Topology, kind: str, root: int = 0) -> float | None:
    """The latency of the shortest route from one GPU (the root for broadcast, to the root for reduce, else
    GPU 0) to the farthest GPU of another node, which its data must reach; None on one node."""
    g = topo.graph
    source = root if kind in ("broadcast", "reduce") else topo.gpus[0]
    home = topo.node_of(source)
    others = [r for r in topo.gpus if topo.node_of(r) != home]
    if not others:
        return None
    graph = g.reverse(copy=False) if kind == "reduce" else g
    dist = nx.single_source_dijkstra_path_length(graph, source, weight=_latency)
    return max(dist[r] for r in others if r in dist) if any(r in dist for r in others) else None


# --------------------------------------------------------------------------------------------------------
# Words
# --------------------------------------------------------------------------------------------------------
def _num(value: Fraction) -> str:
    """A bandwidth for people: ``300``, ``12.5``, ``33.33``."""
    value = Fraction(value)
    if value.denominator == 1:
        return str(value.numerator)
    text = f"{float(value):.2f}".rstrip("0").rstrip(".")
    return text


def _join(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _describe_side(topo: Topology, side: frozenset) -> tuple[int, str]:
    """(number of parts, words) naming a vertex set by the GPUs it contains, grouped by node."""
    gpus = sorted(v for v in side if topo.kind(v) == GPU)
    if not gpus:
        names = sorted((topo.label(v) for v in side), key=str)
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        return len(names), shown
    by_node: dict = {}
    for r in topo.gpus:
        by_node.setdefault(topo.node_of(r), []).append(r)
    one_node = len(by_node) == 1
    full_nodes, partial = [], []
    for nd in sorted(by_node, key=lambda v: (v is None, v)):
        mine = [r for r in by_node[nd] if r in side]
        if not mine:
            continue
        if nd is not None and not one_node and len(mine) == len(by_node[nd]):
            full_nodes.append(nd)
        else:
            what = f"GPU {mine[0]}" if len(mine) == 1 else f"GPUs {rank_ranges(mine)}"
            if nd is not None and not one_node and len(mine) > 1:
                what += f" of node {nd}"  # ranks are global: one GPU needs no node
            partial.append(what)
    parts = []
    if full_nodes:
        parts.append(f"node {full_nodes[0]}" if len(full_nodes) == 1 else f"nodes {rank_ranges(full_nodes)}")
    parts += partial
    return (1 if full_nodes else 0) + len(partial), _join(parts)


def _link_sum(links: list[tuple]) -> str:
    """``"nvswitch 300 GB/s + hdr-ib 25 GB/s = 325 GB/s"`` or ``"hdr-ib 8 x 25 GB/s = 200 GB/s"``."""
    by_cls: dict = {}
    for _, _, d in links:
        by_cls.setdefault(d.get("cls") or "link", []).append(Fraction(d["bw"]))
    total = sum((sum(bws) for bws in by_cls.values()), Fraction(0))
    terms, multiples = [], False
    for cls, bws in sorted(by_cls.items(), key=lambda kv: (-sum(kv[1]), kv[0])):
        if len(bws) > 1 and len(set(bws)) == 1:
            terms.append(f"{cls} {len(bws)} x {_num(bws[0])} GB/s")
            multiples = True
        else:
            terms.append(f"{cls} {_num(sum(bws))} GB/s")
    if len(terms) == 1 and not multiples:
        return terms[0]
    return " + ".join(terms) + f" = {_num(total)} GB/s"


def cut_words(topo: Topology, S: Iterable[Vertex]) -> str:
    """Name, for people, the links from the vertex set ``S`` to the rest of the topology.

    The cut is described by one side, chosen in this order: a side that holds GPUs; a side whose
    nodes every crossing link touches (so "leaving node 1" rather than "entering nodes 0, 2, 3" for a
    node's NIC egress); fewest groups of GPUs; shortest words; the receiving side. A side is named by
    the GPUs it holds, grouped by node ("GPU 5", "GPUs 4-7 of node 0", "node 3"; ranks are global),
    with the direction ("entering" the receiving side, "leaving" the sending side) and the link
    classes (edge attribute ``cls``) of the crossing links and their bandwidth. When every crossing
    link has an end at a NIC of the named nodes, the NICs are counted: "the 8 NICs entering node 3
    (hdr-ib 8 x 25 GB/s = 200 GB/s)"; otherwise "the links entering GPU 5 (nvswitch 300 GB/s +
    hdr-ib 25 GB/s = 325 GB/s)".

    Parameters
    ----------
    topo : Topology
    S : iterable of vertices
        The sending side.

    Returns
    -------
    str

    Raises
    ------
    CollsError
        If no link leaves S.
    """
    sending = frozenset(S)
    receiving = frozenset(topo.graph.nodes) - sending
    links = [(u, v, d) for u, v, d in topo.links() if u in sending and v not in sending]
    if not links:
        raise CollsError(f"no link of topology {topo.name!r} leaves that vertex set")
    options = []
    for side, direction in ((receiving, "entering"), (sending, "leaving")):
        parts, words = _describe_side(topo, side)
        nodes = {topo.node_of(v) for v in side if topo.kind(v) == GPU}
        has_gpu = bool(nodes)
        touches = (None in nodes or
                   all(topo.node_of(u) in nodes or topo.node_of(v) in nodes for u, v, _ in links))
        key = (not has_gpu, not touches, parts, len(words), direction != "entering")
        options.append((key, side, direction, words, nodes))
    _, side, direction, words, nodes = min(options, key=lambda o: o[0])
    nics = set()
    for u, v, _ in links:
        near, far = (v, u) if direction == "entering" else (u, v)
        for end in (near, far):
            if topo.kind(end) == NIC and (topo.node_of(end) in nodes or end in side):
                nics.add(end)
                break
        else:
            nics = None
            break
    if nics:
        what = f"the {len(nics)} NICs" if len(nics) > 1 else "the NIC"
    else:
        what = "the links"
    return f"{what} {direction} {words} ({_link_sum(links)})"
