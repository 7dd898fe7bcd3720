"""A machine with failed parts removed: ``--without nic:0:3,link:0-n0.nvswitch``.

A cluster's health check finds a bad NIC or NVLink; :func:`degrade` returns the machine without it, so
that bounds and schedules are computed for the hardware that is really there. Every command that loads a
machine can call it right after loading (the CLI does so in ``_load`` for ``synth`` and ``bound``).

Items (several per option value, separated by commas; the option may be repeated):

``nic:NODE:INDEX``
    NIC ``INDEX`` of node ``NODE``, numbered as the profile lists its ``nics`` (the vertices
    ``nNODE.nicINDEX.tx`` and ``.rx``): both vertices and every link they have are removed. With one
    node there are no NICs in the model (NICs only join nodes).
``link:A-B``, ``link:A-B:K``, ``link:A-B:all``
    ``K`` (default 1) of the parallel physical links between ``A`` and ``B``, or all of them. ``A`` and
    ``B`` are GPU ranks (``link:0-1``) or vertex names as ``colls hardware show`` lists them
    (``link:0-n0.nvswitch``, ``link:rail3-spine``); a profile's NIC is named without its ``.tx``/``.rx``
    half (``link:3-n0.nic3``, ``link:n0.nic3-rail3``), as a physical link fails in both directions. The
    links go in every direction the machine has between the two: each folded edge keeps ``count - K``
    links and ``bw x (count - K) / count``; an edge left with no link is removed. ``A-B`` and ``B-A``
    are the same item. A switch or NIC left with no link in or no link out carries nothing and is
    removed too (``link:3-n0.nic3`` leaves NIC 3 of node 0 unused).
``gpu:RANK``
    Refused: a GPU that is down changes the job itself (the communicator has one rank fewer and the
    others are renumbered), and a schedule for N ranks cannot serve N - 1. Describe the GPUs that
    remain as a machine of their own (a profile with ``gpu.count`` one lower, or a graph file).

Refused with a one-line :class:`CollsError` naming ``--without`` and the item: an empty item, an
unknown kind, a malformed or out-of-range number, a node, NIC, vertex or link the machine does not
have, more links than there are, an item given twice (``link:0-1`` and ``link:1-0`` included; write
``link:0-1:2`` for two links), and a removal after which some GPU can no longer reach another, even by
relaying through other GPUs (no collective could run).

The result is a new :class:`Topology` built from a copy of the graph (no route cached for the whole
machine survives), named ``"<name> without <items>"``, with ``meta["without"]`` the items in canonical
spelling; the input is left as it was. Routes on it never pass through a removed vertex or link.
GPUs never forward in hardware, so a GPU whose only NIC is gone reaches other nodes only through other
GPUs of its node: methods that relay (``ring``, ``trees``) handle that; ``direct`` refuses, naming the
pair without a route.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Iterable

import networkx as nx

from colls.errors import CollsError, excerpt
from colls.topology import GPU, NIC, Topology, vertex_key

OPTION = "--without"
SPELLINGS = "nic:NODE:INDEX, link:A-B[:K|:all] or gpu:RANK"
MAX_ITEMS = 1000
MAX_NAME_SUFFIX = 120  # characters of "without ..." in the machine's name before it is shortened
_NUMBER = re.compile(r"[0-9]{1,9}\Z")


def split_items(values: Iterable[str] | str) -> list[str]:
    """The items of one or more option values (``"a,b"``, repeated options), stripped, in order.

    An empty item (``""``, ``"a,,b"``, a trailing comma) is kept so that :func:`degrade` refuses it.
    """
    if isinstance(values, str):
        values = [values]
    return [part.strip() for value in values for part in str(value).split(",")]


def degrade(topology: Topology, items: Iterable[str] | str) -> Topology:
    """``topology`` without the parts ``items`` name (module docstring); ``topology`` itself when
    there are none.

    Parameters
    ----------
    topology : a machine that passes ``validate()``.
    items : item strings, or option values holding comma-separated items.

    Returns
    -------
    A new Topology on a copy of the graph, named ``"<name> without <items>"``, with
    ``meta["without"]`` the canonical items (after any the input already had).

    Raises
    ------
    CollsError (key ``--without``) for any item that is malformed, names nothing the machine has, is
    given twice, or leaves some GPU unable to reach another.
    """
    texts = split_items(items)
    if not texts:
        return topology
    if len(texts) > MAX_ITEMS:
        raise CollsError(f"{len(texts)} items; at most {MAX_ITEMS}", key=OPTION)
    g = topology.graph.copy()
    work = _Work(topology, g)
    removals = []
    seen: dict = {}
    for text in texts:
        removal = work.parse(text)
        if removal.key in seen:
            again = f" (write {removal.spelled(2)} to remove two links)" if removal.kind == "link" else ""
            raise _fail(text, f"names the same part as {excerpt(seen[removal.key])}{again}")
        seen[removal.key] = text
        work.apply(removal)
        removals.append(removal)
    cut = _first_disconnected(g, topology.gpus)
    if cut is not None:
        _blame(topology, removals, cut)
    _prune(g)
    done = [r.canonical for r in removals]
    meta = dict(topology.meta, without=list(topology.meta.get("without", [])) + done)
    degraded = Topology(_name(topology.name, done), g, topology.nodes, topology.gpus_per_node, meta)
    degraded.validate(source=degraded.name)
    return degraded


# --- one item ------------------------------------------------------------------------------------------
class _Removal:
    """One parsed item: ``canonical`` spelling, ``key`` (equal for items naming the same part)."""

    def __init__(self, kind: str, key: tuple, canonical: str, vertices=(), pair=None, links=None, edges=()):
        self.kind, self.key, self.canonical = kind, key, canonical
        self.vertices = vertices   # nic: the vertices to remove
        self.pair = pair           # link: the two names (a GPU rank, a switch, a NIC)
        self.links = links         # link: how many physical links per edge, None = all
        self.edges = edges         # link: the folded edges (u, v) they take links from

    def spelled(self, links) -> str:
        a, b = self.pair
        return f"link:{a}-{b}:{links}"


class _Work:
    """Parses items against the machine as it is so far (``g``, already without earlier items)."""

    def __init__(self, topology: Topology, g: nx.DiGraph):
        self.topo, self.g = topology, g
        self.removed_by: dict = {}  # vertex -> the item that removed it
        self._ends: dict | None = None

    def parse(self, text: str) -> _Removal:
        if not text:
            raise _fail(text, f"an empty item (expected {SPELLINGS})")
        kind, sep, rest = text.partition(":")
        if text in ("nic", "link", "gpu"):
            raise _fail(text, f"expected {SPELLINGS}")
        if not sep or kind not in ("nic", "link", "gpu"):
            raise _fail(text, f"unknown kind {excerpt(kind if sep else text)} (expected {SPELLINGS})")
        return {"nic": self._nic, "link": self._link, "gpu": self._gpu}[kind](text, rest)

    # nic:NODE:INDEX
    def _nic(self, text: str, rest: str) -> _Removal:
        parts = rest.split(":")
        if len(parts) != 2 or not all(_NUMBER.match(p) for p in parts):
            raise _fail(text, "expected nic:NODE:INDEX with whole numbers (e.g. nic:0:3)")
        node, index = int(parts[0]), int(parts[1])
        topo = self.topo
        nics: dict = {}
        for v, data in topo.graph.nodes(data=True):
            if data.get("kind") == NIC and data.get("nic") is not None:
                nics.setdefault(data.get("node"), {}).setdefault(data["nic"], []).append(v)
        if not nics:
            named = sorted((v for v, k in topo.graph.nodes(data="kind") if k == NIC), key=vertex_key)
            if named:
                why = (f"its NICs ({', '.join(map(str, named[:4]))}{', ...' if len(named) > 4 else ''}) are not "
                       f"numbered by a node profile; name their links with link:A-B")
            elif topo.nodes == 1 and topo.meta.get("network") is not None:
                why = "with one node there is no network, so no NIC in the model"
            else:
                why = "it has none"
            raise _fail(text, f"{topo.name} has no NIC to remove ({why})")
        if node not in nics:
            raise _fail(text, f"node {node} is not a node of {topo.name} (nodes {_span(sorted(nics))})")
        if index not in nics[node]:
            raise _fail(text, f"node {node} has no NIC {index} (its NICs are {_span(sorted(nics[node]))})")
        vertices = tuple(sorted(nics[node][index], key=vertex_key))
        return _Removal("nic", ("nic", node, index), f"nic:{node}:{index}", vertices=vertices)

    # gpu:RANK
    def _gpu(self, text: str, rest: str) -> _Removal:
        n = self.topo.ngpus
        if not _NUMBER.match(rest):
            raise _fail(text, "expected gpu:RANK with a whole number (e.g. gpu:3)")
        if int(rest) >= n:
            raise _fail(text, f"GPU {int(rest)} is not a rank of {self.topo.name} (ranks 0..{n - 1})")
        raise _fail(text, f"a GPU that is down changes the job, not only the machine: the communicator "
                          f"has {n - 1} ranks, renumbered, and a schedule for {n} cannot serve it; describe "
                          f"the {n - 1} GPUs that remain as a machine of their own (a profile with "
                          f"gpu.count one lower, or a graph file) and use that")

    # link:A-B[:K|:all]
    def _link(self, text: str, rest: str) -> _Removal:
        pair, links = self._pair(text, rest), 1
        if pair is None:
            body, sep, count = rest.rpartition(":")
            pair = self._pair(text, body) if sep else None
            if pair is None:
                self._explain_pair(text, body if sep and (count == "all" or _NUMBER.match(count)) else rest)
            if count != "all" and not _NUMBER.match(count):
                raise _fail(text, f"expected link:A-B:K with K a whole number of links or all, "
                                  f"got {excerpt(count)}")
            links = None if count == "all" else int(count)
            if links == 0:
                raise _fail(text, "removes no link (K must be at least 1, or all)")
        a, b = sorted(pair, key=lambda name: vertex_key(self.ends[name][0]))
        edges = self._edges(a, b)
        if not edges:
            raise _fail(text, f"no link joins {_words(a)} and {_words(b)} on {self.topo.name}{self._links_of(a)}")
        counts = [self.g.edges[e]["count"] for e in edges]
        if links is not None and links > min(counts):
            raise _fail(text, f"{min(counts)} link{'s' * (min(counts) > 1)} join {_words(a)} and {_words(b)}"
                              f"{' in one direction' if len(set(counts)) > 1 else ''}; cannot remove {links}")
        canonical = f"link:{a}-{b}" + ("" if links == 1 else f":{'all' if links is None else links}")
        return _Removal("link", ("link", a, b), canonical, pair=(a, b), links=links, edges=edges)

    @property
    def ends(self) -> dict:
        """Each name a link item may use -> the vertices it stands for: a GPU rank (as int), a switch,
        a NIC (both vertices of a profile NIC, ``n0.nic3`` for ``n0.nic3.tx`` and ``.rx``)."""
        if self._ends is None:
            self._ends = {}
            for v in self.g.nodes:
                base = v[:-3] if isinstance(v, str) and v.endswith((".tx", ".rx")) else None
                if base is not None and base + ".tx" in self.g and base + ".rx" in self.g:
                    self._ends.setdefault(base, (base + ".tx", base + ".rx"))
                else:
                    self._ends[v] = (v,)
        return self._ends

    def _vertex(self, name: str):
        """The name ``name`` spells in :attr:`ends` (a GPU rank as int), or None."""
        key = int(name) if _NUMBER.match(name) else name
        return key if key in self.ends else None

    def _edges(self, a, b) -> list:
        """The folded edges between the vertices of names ``a`` and ``b``, both directions."""
        return [(u, v) for x, y in ((a, b), (b, a)) for u in self.ends[x] for v in self.ends[y]
                if self.g.has_edge(u, v)]

    def _pair(self, text: str, body: str):
        """The two names ``A-B`` holds, or None; refuses a spelling that fits several pairs."""
        found = []
        for i, c in enumerate(body):
            if c == "-":
                a, b = self._vertex(body[:i]), self._vertex(body[i + 1:])
                if a is not None and b is not None:
                    found.append((a, b))
        if len(found) > 1:
            raise _fail(text, f"{excerpt(body)} can be read as several pairs of vertices "
                              f"({', '.join(f'{a} and {b}' for a, b in found[:3])})")
        if found and found[0][0] == found[0][1]:
            raise _fail(text, "a link joins two different vertices")
        return found[0] if found else None

    def _explain_pair(self, text: str, body: str):
        """Raise the most helpful error for an ``A-B`` that names no pair of vertices."""
        if "-" not in body:
            raise _fail(text, "expected link:A-B[:K|:all] with A and B GPU ranks or vertex names "
                              "(e.g. link:0-1, link:0-n0.nvswitch:2)")
        left, _, right = body.partition("-")
        for name in (left, right):
            if self._vertex(name) is None:
                raise _fail(text, f"{self._unknown(name)}")
        raise _fail(text, "expected link:A-B[:K|:all] (K a whole number of links, or all)")

    def _unknown(self, name: str) -> str:
        n = self.topo.ngpus
        if name in self.removed_by:
            return f"{excerpt(name)} was removed by {self.removed_by[name]}"
        if name.endswith((".tx", ".rx")) and name[:-3] in self.ends:
            return (f"{excerpt(name)} is one direction of NIC {name[:-3]}: name the NIC ({name[:-3]}), "
                    f"whose links fail in both directions")
        if _NUMBER.match(name):
            return f"GPU {int(name)} is not a rank of {self.topo.name} (ranks 0..{n - 1})"
        others = [str(v) for v in sorted((v for v in self.ends if not isinstance(v, int)),
                                         key=lambda v: (self.topo.kind(self.ends[v][0]) == NIC, vertex_key(v)))]
        shown = ", ".join(others[:6]) + (f" and {len(others) - 6} more" if len(others) > 6 else "")
        return (f"{excerpt(name)} is not a vertex of {self.topo.name} (GPU ranks 0..{n - 1}"
                f"{', ' + shown if shown else ''}; colls hardware show lists them)")

    def _links_of(self, a) -> str:
        names = {name for name, vs in self.ends.items() for v in vs
                 if any(self.g.has_edge(v, u) or self.g.has_edge(u, v) for u in self.ends[a])}
        near = sorted(names, key=lambda name: vertex_key(self.ends[name][0]))
        if not near:
            return ""
        shown = ", ".join(map(str, near[:8])) + (f" and {len(near) - 8} more" if len(near) > 8 else "")
        return f" ({_words(a)} has links to {shown})"

    # --- applying -------------------------------------------------------------------------------------
    def apply(self, removal: _Removal) -> None:
        g = self.g
        if removal.kind == "nic":
            g.remove_nodes_from(removal.vertices)
            for v in removal.vertices:
                self.removed_by[v] = self.removed_by[v[:-3]] = removal.canonical  # n0.nic3.tx, n0.nic3
            self._ends = None
            return
        for e in removal.edges:
            data = g.edges[e]
            left = 0 if removal.links is None else data["count"] - removal.links
            if left == 0:
                g.remove_edge(*e)
            else:
                data["bw"] = data["bw"] * Fraction(left, data["count"])
                data["count"] = left


def _words(name) -> str:
    return f"GPU {name}" if isinstance(name, int) else str(name)


# --- checks and words ----------------------------------------------------------------------------------
def _prune(g: nx.DiGraph) -> None:
    """Remove the switches and NICs that can no longer carry data: no link in or no link out (a NIC
    whose GPU link is gone). No path between GPUs passed through them, so no bound changes; the
    balance of what relays take in and send out (colls.bound) is then of working relays only."""
    dead = [v for v in g.nodes if g.nodes[v]["kind"] != GPU and not (g.in_degree(v) and g.out_degree(v))]
    while dead:
        near = {w for v in dead for w in (*g.predecessors(v), *g.successors(v))} - set(dead)
        g.remove_nodes_from(dead)
        dead = [v for v in near if g.nodes[v]["kind"] != GPU and not (g.in_degree(v) and g.out_degree(v))]


def _first_disconnected(g: nx.DiGraph, gpus: list[int]) -> tuple[int, int] | None:
    """A pair (a, b) of GPUs with no path from a to b (GPUs may relay), or None."""
    if len(gpus) < 2:
        return None
    first = gpus[0]
    down, up = nx.descendants(g, first), nx.ancestors(g, first)
    for r in gpus[1:]:
        if r not in down:
            return first, r
        if r not in up:
            return r, first
    return None


def _blame(topology: Topology, removals: list[_Removal], pair: tuple[int, int]):
    """Raise the error for a removal that disconnects GPUs, naming the first item that does it."""
    g = topology.graph.copy()
    work = _Work(topology, g)
    for i, removal in enumerate(removals):
        work.apply(removal)
        cut = _first_disconnected(g, topology.gpus)
        if cut is not None:
            a, b = cut
            before = (f" after {', '.join(r.canonical for r in removals[:i])}" if i else "")
            raise _fail(removal.canonical, f"leaves GPU {a} with no path to GPU {b}{before}, even through "
                                           f"other GPUs, so no collective can run on {topology.name}")
    raise AssertionError(f"GPUs {pair} are disconnected by the items together but by none of them")


def _name(name: str, done: list[str]) -> str:
    """``"<name> without a, b"``; past MAX_NAME_SUFFIX characters, the count and the first items."""
    full = "without " + ", ".join(done)
    if len(full) <= MAX_NAME_SUFFIX:
        return f"{name} {full}"
    shown: list[str] = []
    for item in done:
        if len(", ".join(shown + [item])) > MAX_NAME_SUFFIX - 40:
            break
        shown.append(item)
    return f"{name} without {len(done)} parts ({', '.join(shown)}, ...)"


def _span(values: list[int]) -> str:
    return f"{values[0]}..{values[-1]}" if values == list(range(values[0], values[-1] + 1)) \
        else ", ".join(map(str, values))


def _fail(item: str, message: str) -> CollsError:
    return CollsError(f"{excerpt(item)}: {message}", key=OPTION)
