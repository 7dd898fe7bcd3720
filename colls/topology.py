"""The Topology: a directed graph of GPUs, switches and NICs with per-link bandwidth and latency.

Conventions (every module relies on them):

- GPU vertices are the ints ``0 .. ngpus-1``; the int is the GPU's MSCCL rank. Every other vertex is a
  string (``"n0.nvswitch"``, ``"n1.nic3.tx"``, ``"rail3"``).
- Vertex attributes: ``kind`` (``"gpu"``, ``"switch"`` or ``"nic"``), ``node`` (the node index, or
  ``None`` for a vertex of the network between nodes) and ``label`` (words for people). GPUs also carry
  ``local`` (index inside their node), ``model`` and ``sms`` (streaming multiprocessors or compute units:
  the runtime keeps all threadblocks resident, so this caps threadblocks per GPU).
- Edge attributes: ``bw`` (GB/s in that direction, a :class:`~fractions.Fraction` so that bounds can be
  exact), ``latency`` (microseconds, float), ``cls`` (the link-class name from the profile) and
  ``count`` (parallel physical links folded into this edge; ``bw`` is their sum).
- A GPU never forwards traffic in hardware: a physical route between two GPUs passes only through switch
  and NIC vertices; a route between two GPUs of one node never leaves that node.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Hashable, Iterator

import networkx as nx

from colls.errors import CollsError

GPU = "gpu"
SWITCH = "switch"
NIC = "nic"

Vertex = Hashable
Route = tuple  # (src_gpu, v1, ..., dst_gpu)


SEARCH_LABELS_KEPT = 1_000_000  # labels of the route searches kept to be resumed (Topology._search): ~0.1 GB


def vertex_key(v: Vertex) -> tuple:
    """A total order over mixed int/str vertices: GPUs first by rank, then other vertices by name."""
    return (0, v, "") if isinstance(v, int) else (1, 0, str(v))


def as_fraction(value) -> Fraction:
    """Exact value of a number read from a file (``12.5`` becomes 25/2, not a binary float)."""
    if isinstance(value, Fraction):
        return value
    if isinstance(value, bool):
        raise TypeError("a boolean is not a number")
    if isinstance(value, int):
        return Fraction(value)
    return Fraction(str(value))


@dataclass
class Topology:
    """A machine or a cluster of machines as a directed graph (see the module docstring)."""

    name: str
    graph: nx.DiGraph
    nodes: int = 1
    gpus_per_node: int = 0
    meta: dict = field(default_factory=dict)
    _routes: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    _index: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    # --- vertices -------------------------------------------------------------------------------------
    # A Topology's graph is not changed once built (degrade and reversed copy it); what is derived from it
    # (routes, the GPU list, the adjacency the route search walks) is computed once.
    @property
    def ngpus(self) -> int:
        return len(self._gpus())

    @property
    def gpus(self) -> list[int]:
        return list(self._gpus())

    def _gpus(self) -> list[int]:
        """The GPU ranks in order, computed once (not a copy: callers inside this class only read it)."""
        if "gpus" not in self._index:
            self._index["gpus"] = sorted(v for v, k in self.graph.nodes(data="kind") if k == GPU)
        return self._index["gpus"]

    def __getstate__(self) -> dict:
        """Pickled (colls compile's processes) without the route searches kept to be resumed: up to a million
        labels, which the receiving process can search again as it needs."""
        state = self.__dict__.copy()
        if "searches" in self._index:
            state["_index"] = {k: v for k, v in self._index.items() if k not in ("searches", "search_labels")}
        return state

    def _gpu_set(self) -> frozenset:
        if "gpu_set" not in self._index:
            self._index["gpu_set"] = frozenset(self._gpus())
        return self._index["gpu_set"]

    def derived(self, key: tuple, make):
        """``make()``, computed once per ``key`` for this machine (its graph does not change): for what several
        callers derive from the machine alike, such as the runtime's rings for each collective."""
        memo = self._index.setdefault("derived", {})
        if key not in memo:
            memo[key] = make()
        return memo[key]

    def by_latency(self, key: tuple, make):
        """As :meth:`derived`, for what depends on the links' latencies and not their bandwidths: shared with
        :meth:`effective`'s machine, whose links differ in bandwidth alone."""
        memo = self._index.setdefault("by_latency", {})
        if key not in memo:
            memo[key] = make()
        return memo[key]

    def kind(self, v: Vertex) -> str:
        return self.graph.nodes[v]["kind"]

    def node_of(self, v: Vertex) -> int | None:
        return self.graph.nodes[v].get("node")

    def node_turn(self) -> dict | None:
        """Turning the nodes round, node i's vertices to node i + 1's and the last node's to the first's
        (vertices of no node stay), as ``vertex -> image`` for the vertices that move, when that is an
        automorphism of the machine (every link maps to a link with the same bandwidth, latency, class, count
        and efficiency); None when it is not or there is one node. The map pairs each node's vertices by kind
        and by their order in the node (GPUs by rank, others by name without the node's own ``n<i>.``
        prefix); it is checked on every link, so a machine whose nodes differ (a NIC taken out) has none.
        Computed once (the graph does not change)."""
        return self.derived(("node_turn",), self._node_turn)

    def representatives(self) -> list[int]:
        """GPUs that stand for all: the first node's where :meth:`node_turn` is an automorphism (it permutes the
        GPUs and keeps every capacity and distance, and its powers reach every node), else every GPU."""
        if self.node_turn() is None:
            return list(self._gpus())
        return [r for r in self._gpus() if self.node_of(r) == 0]

    def _node_turn(self) -> dict | None:
        g = self.graph
        per_node: dict = {}
        for v, data in g.nodes(data=True):
            node = data.get("node")
            if node is not None:
                per_node.setdefault(node, []).append(v)
        nodes = sorted(per_node)
        if len(nodes) < 2 or nodes != list(range(len(nodes))):
            return None

        def local(v, node):
            name = str(v)
            prefix = f"n{node}."
            return (g.nodes[v]["kind"], 0 if isinstance(v, int) else 1,
                    v if isinstance(v, int) else (name[len(prefix):] if name.startswith(prefix) else name))

        order = {}
        for node in nodes:
            order[node] = sorted(per_node[node], key=lambda v: local(v, node))
            if len(order[node]) != len(order[0]):
                return None
        turn = {}
        for node in nodes:
            for a, b in zip(order[node], order[(node + 1) % len(nodes)]):
                if g.nodes[a]["kind"] != g.nodes[b]["kind"]:
                    return None
                turn[a] = b
        if len(set(turn.values())) != len(turn):
            return None
        for u, v, data in g.edges(data=True):
            if g.get_edge_data(turn.get(u, u), turn.get(v, v)) != data:
                return None
        return turn

    def label(self, v: Vertex) -> str:
        data = self.graph.nodes[v]
        return data.get("label") or (f"GPU {v}" if data["kind"] == GPU else str(v))

    def sms(self, rank: int) -> int:
        return int(self.graph.nodes[rank]["sms"])

    def min_sms(self) -> int:
        return min(self.sms(r) for r in self.gpus)

    def node_major(self) -> tuple[int, int]:
        """(nodes, GPUs per node) when rank r is GPU r % P of node r // P, the layout node rotation and local
        shift act on (the symmetries :func:`colls.synth.packing.find_group` looks for); (0, 0) otherwise."""
        if "node_major" not in self._index:
            n, per = self.ngpus, max(1, self.gpus_per_node)
            major = all(self.node_of(r) == r // per and self.graph.nodes[r].get("local", r % per) == r % per
                        for r in range(n))
            self._index["node_major"] = (self.nodes, self.gpus_per_node) if major else (0, 0)
        return self._index["node_major"]

    def gpu_model(self) -> str | None:
        """The GPU model name of rank 0 (profiles describe one model per machine)."""
        return self.graph.nodes[self.gpus[0]].get("model") if self.gpus else None

    def vertices(self) -> list[Vertex]:
        return sorted(self.graph.nodes, key=vertex_key)

    # --- links ----------------------------------------------------------------------------------------
    def bw(self, u: Vertex, v: Vertex) -> Fraction:
        return self.graph.edges[u, v]["bw"]

    def latency(self, u: Vertex, v: Vertex) -> float:
        return float(self.graph.edges[u, v]["latency"])

    def links(self) -> Iterator[tuple[Vertex, Vertex, dict]]:
        """Every directed link, in a deterministic order."""
        for u, v in sorted(self.graph.edges, key=lambda e: (vertex_key(e[0]), vertex_key(e[1]))):
            yield u, v, self.graph.edges[u, v]

    def reversed(self) -> "Topology":
        """The same machine with every link turned around (reduce-scatter is allgather on this); made once."""
        return self.derived(("reversed",), self._reversed)

    def _reversed(self) -> "Topology":
        g = nx.DiGraph()
        g.graph.update(self.graph.graph)
        g.add_nodes_from((v, dict(d)) for v, d in self.graph.nodes(data=True))
        # attribute values are numbers and strings: a copy of each link's dict is a copy of the link
        g.add_edges_from((v, u, dict(d)) for u, v, d in self.graph.edges(data=True))
        return Topology(self.name + " (reversed)", g, self.nodes, self.gpus_per_node, dict(self.meta))

    def effective(self) -> "Topology":
        """The machine as transfers a GPU starts see it: every link's bandwidth times its class's
        ``efficiency`` (exact, see :func:`as_fraction`), which is what the runtime reaches and the simulator
        charges. The machine itself when every efficiency is 1."""
        if all(as_fraction(d.get("efficiency", 1)) == 1 for _, _, d in self.graph.edges(data=True)):
            return self
        g = self.graph.copy()
        for _, _, d in g.edges(data=True):
            eff = as_fraction(d.get("efficiency", 1))
            if eff != 1:
                d["bw"] = as_fraction(d["bw"]) * eff
                d["efficiency"] = 1
        reached = Topology(self.name, g, self.nodes, self.gpus_per_node, dict(self.meta))
        reached._index["by_latency"] = self._index.setdefault("by_latency", {})     # the same latencies
        return reached

    def validate(self, source: str = "topology") -> None:
        """Raise CollsError unless the graph follows the conventions above."""
        g = self.graph
        ranks = self.gpus
        if not ranks:
            raise CollsError("has no GPUs", source=source)
        if ranks != list(range(len(ranks))):
            raise CollsError(f"GPU ranks must be 0..{len(ranks) - 1}, found {ranks}", source=source)
        for v, data in g.nodes(data=True):
            if data.get("kind") not in (GPU, SWITCH, NIC):
                raise CollsError(f"vertex {v!r} has kind {data.get('kind')!r}", source=source)
            if data["kind"] == GPU and not (isinstance(v, int) and int(data.get("sms", 0)) > 0):
                raise CollsError(f"GPU {v!r} needs an int id and a positive SM count", source=source)
            if data["kind"] != GPU and not isinstance(v, str):
                raise CollsError(f"non-GPU vertex {v!r} must have a string id", source=source)
        for u, v, data in g.edges(data=True):
            if u == v:
                raise CollsError(f"link {u}->{v} is a self-loop", source=source)
            bw = data.get("bw")
            if not isinstance(bw, Fraction) or bw <= 0:
                raise CollsError(f"link {u}->{v} needs a positive bandwidth", source=source)
            if float(data.get("latency", -1)) < 0:
                raise CollsError(f"link {u}->{v} needs a latency >= 0", source=source)

    # --- routes ---------------------------------------------------------------------------------------
    def route(self, a: int, b: int) -> Route | None:
        """The physical path a direct send from rank ``a`` to rank ``b`` takes, or None if there is none.

        The widest path (largest bottleneck bandwidth), then the one with fewest hops, then the first in
        vertex order; intermediate vertices are switches and NICs only, and a route between two GPUs of
        one node stays inside that node (the runtime uses NVLink/xGMI there, never a NIC hairpin).
        """
        if a == b:
            raise ValueError("a route needs two different ranks")
        key = (a, b)
        if key not in self._routes:
            search = self._search(a, self.node_of(a) == self.node_of(b))
            self._routes[key] = search.route_to(b)
            self._searched(search)
        return self._routes.get(key)

    def _search(self, a: int, same_node: bool) -> "_Search":
        """The search from ``a`` (``same_node``: through its node's own vertices only), run as far as the
        routes asked of it so far needed, and resumed where it stopped when another route from ``a`` is asked
        (trees on 256 GPUs ask each GPU for dozens: its search then runs once, not once a route). Searches
        are kept while they hold fewer than :data:`SEARCH_LABELS_KEPT` labels in all, the least recently
        used dropped first (and started again if asked again)."""
        kept = self._index.setdefault("searches", OrderedDict())
        found = kept.get((a, same_node))
        if found is None:
            found = kept[(a, same_node)] = _Search(self, a, same_node)
        else:
            kept.move_to_end((a, same_node))
        return found

    def _searched(self, search: "_Search") -> None:
        """Count the labels ``search`` holds now; drop the least recently used searches beyond the budget."""
        total = self._index.get("search_labels", 0) + len(search.best) - search.counted
        search.counted = len(search.best)
        kept = self._index["searches"]
        while total > SEARCH_LABELS_KEPT and len(kept) > 1:
            _, dropped = kept.popitem(last=False)
            total -= dropped.counted
        self._index["search_labels"] = total

    def _adjacency(self) -> dict:
        """u -> [(v, rank of the link's bandwidth among all bandwidths, v's sort key, v's node)], in vertex
        order: the route search compares bottlenecks as ranks (exactly the order of the
        bandwidths) instead of as fractions."""
        if "adjacency" not in self._index:
            g = self.graph
            rank = {bw: i for i, bw in enumerate(sorted({d["bw"] for _, _, d in g.edges(data=True)}))}
            info = {v: (vertex_key(v), d.get("node")) for v, d in g.nodes(data=True)}
            self._index["adjacency"] = {
                u: [(v, rank[g.edges[u, v]["bw"]]) + info[v] for v in sorted(g.successors(u), key=vertex_key)]
                for u in g.nodes}
        return self._index["adjacency"]

    def route_bandwidth(self, route: Route) -> Fraction:
        """The narrowest link of ``route`` (remembered per route: synthesis asks for the same ones often)."""
        memo = self._index.setdefault("route_bw", {})
        bw = memo.get(route)
        if bw is None:
            bw = memo[route] = min(self.bw(u, v) for u, v in zip(route, route[1:]))
        return bw

    def route_latency(self, route: Route) -> float:
        return sum(self.latency(u, v) for u, v in zip(route, route[1:]))

    def has_route(self, a: int, b: int) -> bool:
        return self.route(a, b) is not None


class _Search:
    """Widest-then-shortest paths from GPU ``a`` (ties: the first found, vertices taken in order), searched
    only as far as the destinations asked so far need. Labels v -> (bottleneck rank, hops, predecessor).

    The vertices are expanded in the order of their keys (-bottleneck, hops, vertex order), as a whole search
    would; a destination's label is final once every vertex of a smaller key is expanded: what the whole
    search gives it. GPUs are endpoints, never relays, so a GPU other than ``a`` is labelled but never put on
    the heap: once the vertices of smaller keys are expanded, none expanded later can better its label (their
    bottleneck is no wider, or as wide with more hops)."""

    __slots__ = ("topology", "a", "same_node", "home", "best", "heap", "done", "counted")

    def __init__(self, topology: Topology, a: int, same_node: bool):
        self.topology, self.a, self.same_node, self.home = topology, a, same_node, topology.node_of(a)
        self.best: dict = {a: (math.inf, 0, None)}      # the source: no bottleneck yet
        self.heap = [(-math.inf, 0, vertex_key(a), a)]  # (-bottleneck, hops, key, v)
        self.done: set = set()
        self.counted = 0        # its labels counted against the budget (Topology._searched)

    def route_to(self, b: int) -> Route | None:
        """The route to GPU ``b`` (None if there is none), searching on until its label is final."""
        adj, gpus = self.topology._adjacency(), self.topology._gpu_set()
        best, heap, done, a = self.best, self.heap, self.done, self.a
        kb = vertex_key(b)
        while heap:
            lab = best.get(b)
            negb, hops, key, u = heap[0]
            if lab is not None and (negb, hops, key) > (-lab[0], lab[1], kb):
                break           # b's label is final: every vertex of a smaller key is expanded
            heapq.heappop(heap)
            if u in done:
                continue
            done.add(u)
            bu = best[u][0]
            for v, r, vkey, node in adj[u]:
                if v in done or (self.same_node and node != self.home):
                    continue
                bott = r if r < bu else bu
                old = best.get(v)
                if old is None or bott > old[0] or (bott == old[0] and hops + 1 < old[1]):
                    best[v] = (bott, hops + 1, u)
                    if v not in gpus:
                        heapq.heappush(heap, (-bott, hops + 1, vkey, v))
        return _path(best, a, b)


def _path(labels: dict, a: int, b: int) -> Route | None:
    """The route to ``b`` the search from ``a`` found (its labels' predecessors), or None."""
    if b not in labels:
        return None
    path = [b]
    while path[-1] != a:
        path.append(labels[path[-1]][2])
    return tuple(reversed(path))


def rank_offset(shape: tuple[int, int], c: int, v: int):
    """Where rank ``c`` is seen from rank ``v`` on a node-major machine of ``shape`` (:meth:`Topology.node_major`):
    (node offset, local offset), each modulo its count. Node rotation and local shift keep it, where they keep
    rank order only until a shift wraps (local 7 -> 0): a schedule built equivariant under them and ordered by
    this offset, not by rank number, runs the same threadblocks on every GPU. Without such a layout (shape
    (0, 0)): the rank itself."""
    nodes, per = shape
    if not nodes or not per:
        return c
    return ((c // per - v // per) % nodes, (c % per - v % per) % per)


def node_rotation(shift: int, shape: tuple[int, int]) -> int | None:
    """The smallest rotation by whole nodes that a rotation by ``shift`` ranks generates on a node-major machine
    of ``shape`` (:meth:`Topology.node_major`): rank ``r`` and ``r + k d`` then sit alike in their nodes, so each
    pair of ranks and its image either share a node or do not (what an MSCCL++ plan's channel types read). None
    without such a layout, or when it is no rotation at all (every rank its own orbit)."""
    nodes, per = shape
    if not nodes or not per:
        return None
    d = math.lcm(shift, per)
    return d if d < nodes * per and (nodes * per) % d == 0 else None
