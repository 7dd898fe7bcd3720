"""Communication sketches: the hints that keep a routing MILP small (TACCL's idea).

A *communication sketch* (A. Shah et al., "TACCL: Guiding Collective Algorithm Synthesis using
Communication Sketches", NSDI 2023, arXiv:2111.04867) tells a synthesizer which links a schedule may
use between nodes, how to treat the switches inside a node, which (chunk, rank) decisions must be
equal by symmetry and how finely to split the buffers. :func:`load_sketch` reads one, checks it
against the machine (a :class:`~colls.topology.Topology`) and returns a :class:`Sketch`.

Two file forms, told apart by their keys (not by the file name); a file whose first character
(after white space) is ``{`` is parsed as JSON, any other as YAML:

**colls' YAML** (sketches/README.md has the full schema; the shipped files are in sketches/)::

    nodes: 2                          # copies of the node; must equal --nodes
    intranode:                        # optional; default {strategy: none}
      strategy: switch                # switch | none | minmax | maxmin
      switches: [[0, 1, 2, 3]]        # strategy switch only: local GPU lists (or all); each list is
                                      # a switch, two lists are disjoint or identical
      switch_strategy: uc-min         # strategy switch only: uc-min | uc-max, or one per switch;
                                      # default uc-min
    internode:                        # nodes > 1 only; default {relay: fully-connected}
      relay: direct-map               # direct-map | fully-connected | {sender: [receivers]}
      senders_of: {0: [0], 1: [0]}    # local GPU -> the senders its chunks may leave the node by
      own_chunks_first: false         # a sender ships its own chunks before relayed ones
    symmetry: [[2, 16], [16, 32]]     # [offset, group] rotations the machine maps onto itself
    chunkup: 1                        # split each input buffer into this many chunks (1..64)

**TACCL's sketch JSON**, unchanged (any file with ``nnodes``, ``intranode_sketch``,
``internode_sketch``, ``symmetry_offsets`` or ``hyperparameters``): ``nnodes``;
``intranode_sketch.{strategy, switches, switch_hyperedge_strategy}``;
``internode_sketch.{strategy: relay, internode_conn, gpus_to_sender_rev_map, enforce_ordering}``;
``symmetry_offsets``; ``hyperparameters.input_chunkup`` (microsoft/taccl, taccl/cli/common.py
parse_and_get_topo; taccl/routing.py). ``gpus_to_sender_rev_map`` is ``{sender: [GPUs]}``, the reverse
of ``senders_of``. TACCL requires ``symmetry_offsets`` and ``hyperparameters``; colls defaults them
([] and chunkup 1), and accepts the sketches TACCL crashes on (one node without an internode part,
``minmax`` / ``maxmin``).

What is checked against the machine (every failure is a one-line :class:`CollsError` naming the file
and the dotted key, e.g. ``internode_sketch.internode_conn.3[0]``):

- ``nodes`` equals the topology's node count; every GPU index is below the node's GPU count;
- switch lists have two or more distinct GPUs, are disjoint or identical (TACCL's rule), and their
  GPUs are joined pairwise inside the node with equal bandwidth (TACCL asserts equal link costs);
- every relay sender has the same number of receivers (TACCL asserts it); every sender/receiver pair
  has a route through a NIC from each node to the next;
- ``senders_of`` names only relay senders and gives every GPU at least one (TACCL's relay constraint
  looks up a sender for every chunk that leaves a node); ``own_chunks_first`` needs ``senders_of``;
- each symmetry ``[offset, group]`` (rank r -> (r mod group + offset) mod group + floor(r / group) *
  group, TACCL's rule) has ``0 < offset < group``, ``group`` dividing the GPU count, and is an
  automorphism of the machine: every GPU pair keeps its route bandwidth and the whole graph of GPUs,
  switches and NICs maps onto itself with equal link bandwidths and latencies;
- ``chunkup`` is a whole number 1..64; unknown keys, wrong types, syntax errors, an empty file, a
  folder or a file over 1 MB are errors.

:func:`derive_sketch` proposes a sketch from the hardware and :func:`sketch_text` writes one as YAML.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx
import yaml

from colls.errors import EXCERPT_CHARS, CollsError, printable
from colls.files import read_text
from colls.inputs.hardware import _Checker, _join, _read_yaml, _what, load_yaml  # noqa: PLC2701
from colls.inputs.taccl import parse_json
from colls.topology import GPU, NIC, SWITCH, Topology, vertex_key

STRATEGIES = ("switch", "none", "minmax", "maxmin")
SWITCH_STRATEGIES = ("uc-min", "uc-max")
RELAY_FORMS = ("direct-map", "fully-connected")
MAX_CHUNKUP = 64
MAX_SKETCH_BYTES = 1 << 20
PAIR_CHECK_GPUS = 256  # up to this many GPUs a symmetry is first checked pair by pair (a clearer message)
TACCL_KEYS = ("nnodes", "intranode_sketch", "internode_sketch", "symmetry_offsets", "hyperparameters")
COLLS_KEYS = ("nodes", "intranode", "internode", "symmetry", "chunkup")


@dataclass(frozen=True)
class Sketch:
    """A checked communication sketch; GPU numbers are local indices inside a node (0..G-1).

    Attributes
    ----------
    nodes : copies of the node (the topology's node count).
    gpus_per_node : G, GPUs per node.
    strategy : in-node strategy: ``"switch"`` (model each switch list as a hyperedge whose ports bound
        the load), ``"none"``, ``"minmax"`` / ``"maxmin"`` (objective +/- 0.01 x the max / min link
        utilisation, TACCL's terms).
    switches : the switch lists (strategy switch), each sorted; identical lists repeat (k identical
        lists split the bandwidth k ways, as in TACCL).
    switch_strategy : per switch list ``"uc-min"`` (penalise distinct peer connections used, objective
        + 0.01 x their count) or ``"uc-max"`` (reward them). TACCL reads only the first.
    relay : ``((sender, (receivers...)), ...)`` sorted by sender: local GPU ``sender`` of every node
        may send to local GPUs ``receivers`` of every other node, and no other GPU pair across nodes
        may be used. Empty for one node.
    relay_form : how the relay was written: ``"map"``, ``"direct-map"`` (i -> i), ``"fully-connected"``
        (every GPU to every GPU); None for one node.
    senders_of : per local GPU the senders its chunks may leave the node through (TACCL's
        ``gpus_to_sender_rev_map`` turned around), or None (any sender).
    own_chunks_first : a sender ships its own chunks before relayed ones (TACCL's ``enforce_ordering``).
    symmetry : ``((offset, group), ...)``: rank r maps to (r % group + offset) % group + r // group * group;
        symmetric (chunk, rank) pairs get equal decisions.
    chunkup : each input buffer is split into this many chunks.
    source : the file it was read from (not compared).
    """

    nodes: int
    gpus_per_node: int
    strategy: str = "none"
    switches: tuple = ()
    switch_strategy: tuple = ()
    relay: tuple = ()
    relay_form: str | None = None
    senders_of: tuple | None = None
    own_chunks_first: bool = False
    symmetry: tuple = ()
    chunkup: int = 1
    source: str | None = field(default=None, compare=False)

    @property
    def senders(self) -> tuple[int, ...]:
        """The local GPUs that send between nodes."""
        return tuple(s for s, _ in self.relay)

    def receivers(self, sender: int) -> tuple[int, ...]:
        """The local GPUs ``sender`` sends to on every other node (empty if it is no sender)."""
        return dict(self.relay).get(sender, ())

    def rank_map(self, offset: int, group: int) -> list[int]:
        """The rank permutation of one symmetry entry: ``perm[r]`` is the rank r maps to."""
        return symmetry_permutation(self.nodes * self.gpus_per_node, offset, group)

    def to_taccl(self) -> dict:
        """The sketch as TACCL's sketch JSON (a dict for ``json.dumps``)."""
        intra: dict = {"strategy": self.strategy}
        if self.strategy == "switch":
            intra.update(switches=[list(s) for s in self.switches],
                         switch_hyperedge_strategy=list(self.switch_strategy))
        out: dict = {"nnodes": self.nodes, "intranode_sketch": intra}
        if self.nodes > 1:
            conn = self.relay_form if self.relay_form in RELAY_FORMS else \
                {str(s): list(r) for s, r in self.relay}
            inter: dict = {"strategy": "relay", "internode_conn": conn}
            if self.senders_of is not None:
                inter["gpus_to_sender_rev_map"] = {str(s): [g for g, ss in enumerate(self.senders_of) if s in ss]
                                                   for s in self.senders}
            if self.own_chunks_first:
                inter["enforce_ordering"] = True
            out["internode_sketch"] = inter
        out["symmetry_offsets"] = [list(p) for p in self.symmetry]
        out["hyperparameters"] = {"input_chunkup": self.chunkup}
        return out


def symmetry_permutation(ngpus: int, offset: int, group: int) -> list[int]:
    """TACCL's symmetry rule (microsoft/taccl, taccl/routing.py sym_rank): rank r maps to
    ``(r % group + offset) % group + (r // group) * group``."""
    return [(r % group + offset) % group + (r // group) * group for r in range(ngpus)]


# --- reading --------------------------------------------------------------------------------------------
def load_sketch(path, topology: Topology, nodes: int | None = None) -> Sketch:
    """Read a sketch file (colls YAML or TACCL JSON, told apart by content) and check it against
    ``topology``.

    Parameters
    ----------
    path : the sketch file (a regular file of at most 1 MB).
    topology : the machine the sketch is for.
    nodes : the node count the user asked for (``--nodes``); default ``topology.nodes``.

    Returns
    -------
    The :class:`Sketch`, equal for the two forms of the same sketch.

    Raises
    ------
    CollsError naming the file and the dotted key of the first mistake.
    """
    source = str(path)
    data = _parse(source, read_text(path, MAX_SKETCH_BYTES))
    return _Reader(source, topology, topology.nodes if nodes is None else nodes).read(data)


def _parse(source: str, text: str) -> dict:
    """The mapping in ``text``: JSON when its first character (after white space) is ``{``, else YAML."""
    if not text.strip():
        raise CollsError("is empty", source=source)
    if text.lstrip().startswith("{"):
        data = parse_json(source, text)
    else:
        try:
            data = load_yaml(text)
        except (yaml.YAMLError, ValueError):
            _read_yaml(source, text)  # raises the YAML syntax error as one line
            raise
    if data is None:
        raise CollsError("is empty", source=source)
    if not isinstance(data, dict):
        raise CollsError(f"a sketch is a mapping of keys ({', '.join(COLLS_KEYS)}, or TACCL's "
                         f"{', '.join(TACCL_KEYS)}), got {_what(data)}", source=source)
    return data


class _Reader:
    """Turns either form into a Sketch, checking every value against the topology."""

    def __init__(self, source: str, topo: Topology, nodes: int):
        self.check = _Checker(source)
        self.source = source
        self.topo = topo
        self.nodes = nodes
        self.G = topo.gpus_per_node

    def fail(self, key, message):
        self.check.fail(key, message)

    def read(self, data: dict) -> Sketch:
        if any(k in data for k in TACCL_KEYS):
            return self._taccl(data)
        return self._colls(data)

    # --- the two forms ---------------------------------------------------------------------------------
    def _colls(self, data: dict) -> Sketch:
        c = self.check
        c.mapping(data, "", required=("nodes",), optional=COLLS_KEYS)
        nodes = self._nodes(data["nodes"], "nodes")
        intra = c.mapping(data.get("intranode", {"strategy": "none"}), "intranode", required=("strategy",),
                          optional=("switches", "switch_strategy"))
        strategy, switches, per_switch = self._intranode(
            intra, "intranode", "switch_strategy", default_switch_strategy="uc-min", allow_all=True)
        relay, form, senders_of, own_first = (), None, None, False
        if "internode" in data:
            self._multi(nodes, "internode")
            inter = c.mapping(data["internode"], "internode", optional=("relay", "senders_of", "own_chunks_first"))
            relay, form = self._relay(inter.get("relay", "fully-connected"), "internode.relay", nodes)
            if "senders_of" in inter:
                senders_of = self._senders_of(inter["senders_of"], "internode.senders_of", relay)
            own_first = self._own_first(inter, "own_chunks_first", "internode", senders_of, "senders_of")
        elif nodes > 1:
            relay, form = self._relay("fully-connected", "internode", nodes)
        symmetry = self._symmetry(data.get("symmetry", []), "symmetry")
        chunkup = self._chunkup(data.get("chunkup", 1), "chunkup")
        return Sketch(nodes, self.G, strategy, switches, per_switch, relay, form, senders_of, own_first,
                      symmetry, chunkup, self.source)

    def _taccl(self, data: dict) -> Sketch:
        c = self.check
        c.mapping(data, "", required=("nnodes", "intranode_sketch"),
                  optional=("internode_sketch", "symmetry_offsets", "hyperparameters"))
        nodes = self._nodes(data["nnodes"], "nnodes")
        intra = c.mapping(data["intranode_sketch"], "intranode_sketch", required=("strategy",),
                          optional=("switches", "switch_hyperedge_strategy"))
        strategy, switches, per_switch = self._intranode(intra, "intranode_sketch", "switch_hyperedge_strategy")
        relay, form, senders_of, own_first = (), None, None, False
        if "internode_sketch" in data:
            k = "internode_sketch"
            self._multi(nodes, k)
            inter = c.mapping(data[k], k, required=("strategy", "internode_conn"),
                              optional=("gpus_to_sender_rev_map", "enforce_ordering"))
            if inter["strategy"] != "relay":
                self.fail(k + ".strategy", f"expected relay (TACCL's only inter-node strategy), "
                                           f"got {_what(inter['strategy'])}")
            relay, form = self._relay(inter["internode_conn"], k + ".internode_conn", nodes)
            if "gpus_to_sender_rev_map" in inter:
                senders_of = self._rev_map(inter["gpus_to_sender_rev_map"], k + ".gpus_to_sender_rev_map", relay)
            own_first = self._own_first(inter, "enforce_ordering", k, senders_of, "gpus_to_sender_rev_map")
        elif nodes > 1:
            relay, form = self._relay("fully-connected", "internode_sketch", nodes)
        symmetry = self._symmetry(data.get("symmetry_offsets", []), "symmetry_offsets")
        hyper = c.mapping(data.get("hyperparameters", {}), "hyperparameters", optional=("input_chunkup",))
        chunkup = self._chunkup(hyper.get("input_chunkup", 1), "hyperparameters.input_chunkup")
        return Sketch(nodes, self.G, strategy, switches, per_switch, relay, form, senders_of, own_first,
                      symmetry, chunkup, self.source)

    # --- shared checks ---------------------------------------------------------------------------------
    def _nodes(self, value, key: str) -> int:
        nodes = self.check.integer(value, key, 1)
        if nodes != self.nodes or nodes != self.topo.nodes:
            self.fail(key, f"the sketch is for {nodes} node{'s' * (nodes != 1)}, the machine has "
                           f"{self.topo.nodes} (--nodes {self.nodes})")
        if not self.G:
            self.fail(key, "the machine's nodes have different GPU counts; a sketch needs equal nodes")
        return nodes

    def _multi(self, nodes: int, key: str) -> None:
        if nodes == 1:
            self.fail(key, "an inter-node part needs more than one node (nodes is 1)")

    def _gpu(self, value, key: str) -> int:
        """A local GPU index: a whole number, or (a mapping key in JSON) its digits as text."""
        if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 10:
            value = int(value)
        gpu = self.check.integer(value, key, 0)
        if gpu >= self.G:
            self.fail(key, f"GPU {gpu} out of range 0..{self.G - 1} (the node has {self.G} GPUs)")
        return gpu

    def _gpus(self, value, key: str, allow_all: bool = False) -> tuple[int, ...]:
        if allow_all and value == "all":
            return tuple(range(self.G))
        seen: list[int] = []
        for i, v in enumerate(self.check.list(value, key, nonempty=True)):
            gpu = self._gpu(v, f"{key}[{i}]")
            if gpu in seen:
                self.fail(f"{key}[{i}]", f"GPU {gpu} listed twice")
            seen.append(gpu)
        return tuple(seen)

    def _items(self, value, key: str):
        """``(gpu, key of the entry, value)`` of a mapping keyed by local GPUs, in GPU order."""
        if not isinstance(value, dict):
            self.fail(key, f"expected a mapping of local GPUs, got {_what(value)}")
        if not value:
            self.fail(key, "must not be empty")
        out = {}
        for k, v in value.items():
            sub = _join(key, printable(str(k), EXCERPT_CHARS))
            gpu = self._gpu(k, sub)
            if gpu in out:
                self.fail(sub, f"GPU {gpu} given twice")
            out[gpu] = (sub, v)
        return [(gpu, *out[gpu]) for gpu in sorted(out)]

    def _intranode(self, intra: dict, key: str, strategy_key: str, default_switch_strategy=None,
                   allow_all: bool = False):
        strategy = intra["strategy"]
        if strategy not in STRATEGIES:
            self.fail(key + ".strategy", f"expected one of {', '.join(STRATEGIES)}, got {_what(strategy)}")
        if strategy != "switch":
            for extra in ("switches", strategy_key):
                if extra in intra:
                    self.fail(f"{key}.{extra}", f"only with strategy switch (strategy is {strategy})")
            return strategy, (), ()
        if "switches" not in intra:
            self.fail(key + ".switches", "missing key (strategy switch needs the switch lists)")
        switches = []
        for i, sw in enumerate(self.check.list(intra["switches"], key + ".switches", nonempty=True)):
            k = f"{key}.switches[{i}]"
            gpus = self._gpus(sw, k, allow_all)
            if len(gpus) < 2:
                self.fail(k, "a switch joins two or more GPUs")
            for j, other in enumerate(switches):
                if set(gpus) & set(other) and set(gpus) != set(other):
                    self.fail(k, f"overlaps switch list {j} without being identical to it (TACCL's rule: "
                                 f"two switch lists are disjoint or identical)")
            self._equal_links(gpus, k)
            switches.append(tuple(sorted(gpus)))
        per_switch = self._switch_strategy(intra, key + "." + strategy_key, len(switches),
                                           default_switch_strategy)
        return strategy, tuple(switches), per_switch

    def _switch_strategy(self, intra: dict, key: str, count: int, default) -> tuple[str, ...]:
        name = key.rsplit(".", 1)[1]
        if name not in intra:
            if default is None:
                self.fail(key, "missing key (one of uc-min, uc-max per switch list)")
            return (default,) * count
        value = intra[name]
        if isinstance(value, str) and default is not None:
            value = [value] * count
        values = self.check.list(value, key)
        if len(values) != count:
            self.fail(key, f"has {len(values)} entries for {count} switch list{'s' * (count != 1)} "
                           f"(one per list)")
        for i, v in enumerate(values):
            if v not in SWITCH_STRATEGIES:
                self.fail(f"{key}[{i}]", f"expected one of {', '.join(SWITCH_STRATEGIES)}, got {_what(v)}")
        return tuple(values)

    def _equal_links(self, gpus, key: str) -> None:
        """The GPUs of one switch list must be joined pairwise inside node 0 with equal bandwidth."""
        first = None
        for a in gpus:
            for b in gpus:
                if a == b:
                    continue
                route = self.topo.route(a, b)
                if route is None:
                    self.fail(key, f"GPU {a} has no link to GPU {b} inside the node; a switch list joins "
                                   f"GPUs that all reach each other")
                bw = self.topo.route_bandwidth(route)
                if first is None:
                    first = (a, b, bw)
                elif bw != first[2]:
                    self.fail(key, f"GPUs {a}->{b} have {_gbps(bw)} but {first[0]}->{first[1]} "
                                   f"{_gbps(first[2])}; the GPUs of a switch list need equal links "
                                   f"(TACCL asserts equal costs)")

    def _relay(self, value, key: str, nodes: int):
        if isinstance(value, str):
            if value == "fully-connected":
                relay = tuple((s, tuple(range(self.G))) for s in range(self.G))
            elif value == "direct-map":
                relay = tuple((s, (s,)) for s in range(self.G))
            else:
                self.fail(key, f"expected direct-map, fully-connected or a mapping sender: [receivers], "
                               f"got {_what(value)}")
            form = value
            keys = {s: key for s, _ in relay}
        else:
            entries, keys = [], {}
            for s, k, receivers in self._items(value, key):
                entries.append((s, self._gpus(receivers, k)))
                keys[s] = k
            degree = len(entries[0][1])
            for s, receivers in entries:
                if len(receivers) != degree:
                    self.fail(keys[s], f"sender {s} has {len(receivers)} receivers, sender {entries[0][0]} "
                                       f"has {degree}; every sender needs the same number (TACCL's rule)")
            relay = tuple((s, tuple(sorted(r))) for s, r in entries)
            form = "map"
        for s, receivers in relay:
            for r in receivers:
                self._nic_path(s, r, nodes, keys[s])
        return relay, form

    def _nic_path(self, s: int, r: int, nodes: int, key: str) -> None:
        G = self.G
        for n in range(nodes):
            a, b = n * G + s, (n + 1) % nodes * G + r
            route = self.topo.route(a, b)
            if route is None or not any(self.topo.kind(v) == NIC for v in route[1:-1]):
                self.fail(key, f"local GPU {s} cannot send to local GPU {r} of another node through a NIC "
                               f"(no route from rank {a} to rank {b} through a NIC)")

    def _senders_of(self, value, key: str, relay) -> tuple:
        senders = dict(relay)
        per_gpu: list = [None] * self.G
        for gpu, k, v in self._items(value, key):
            chosen = [v] if not isinstance(v, list) else v
            found = self._gpus(chosen, k)
            for i, s in enumerate(found):
                if s not in senders:
                    self.fail(k if not isinstance(v, list) else f"{k}[{i}]",
                              f"GPU {s} is not a relay sender (senders: {_few(senders)})")
            per_gpu[gpu] = tuple(sorted(found))
        return self._covered(per_gpu, key)

    def _rev_map(self, value, key: str, relay) -> tuple:
        senders = dict(relay)
        per_gpu: list = [[] for _ in range(self.G)]
        for s, k, gpus in self._items(value, key):
            if s not in senders:
                self.fail(k, f"GPU {s} is not a sender of internode_conn (senders: {_few(senders)})")
            for g in self._gpus(gpus, k):
                per_gpu[g].append(s)
        return self._covered([tuple(sorted(x)) or None for x in per_gpu], key)

    def _covered(self, per_gpu: list, key: str) -> tuple:
        missing = [g for g, s in enumerate(per_gpu) if not s]
        if missing:
            self.fail(key, f"GPU{'s' * (len(missing) > 1)} {_few(missing)} {'have' if len(missing) > 1 else 'has'} "
                           f"no sender; every GPU's chunks need one to leave the node by")
        return tuple(per_gpu)

    def _own_first(self, inter: dict, name: str, key: str, senders_of, needs: str) -> bool:
        value = inter.get(name, False)
        if not isinstance(value, bool):
            self.fail(f"{key}.{name}", f"expected true or false, got {_what(value)}")
        if value and senders_of is None:
            self.fail(f"{key}.{name}", f"needs {key}.{needs} (which GPUs' chunks each sender relays)")
        return value

    def _symmetry(self, value, key: str) -> tuple:
        n = self.topo.ngpus
        out = []
        for i, pair in enumerate(self.check.list(value, key)):
            k = f"{key}[{i}]"
            if not isinstance(pair, list) or len(pair) != 2:
                self.fail(k, f"expected [offset, group], got {_what(pair)}")
            group = self.check.integer(pair[1], k + "[1]", 2, n)
            offset = self.check.integer(pair[0], k + "[0]", 1, group - 1)
            if n % group:
                self.fail(k + "[1]", f"group {group} does not divide the {n} GPUs")
            reason = automorphism_mismatch(self.topo, symmetry_permutation(n, offset, group))
            if reason:
                self.fail(k, f"[{offset}, {group}] does not map the machine onto itself: {reason}")
            out.append((offset, group))
        return tuple(out)

    def _chunkup(self, value, key: str) -> int:
        return self.check.integer(value, key, 1, MAX_CHUNKUP)


# --- symmetry -------------------------------------------------------------------------------------------
def automorphism_mismatch(topo: Topology, perm: list[int]) -> str | None:
    """Why the rank permutation ``perm`` is not an automorphism of ``topo``, or None if it is.

    A map of the whole graph grown from the GPUs and checked edge by edge (:func:`_extends`) proves most
    automorphisms at once. Otherwise, first every ordered GPU pair must keep its route bandwidth (skipped
    above PAIR_CHECK_GPUS GPUs; it only gives a clearer message); then the GPU map must extend to the whole
    graph (switches and NICs too) with equal bandwidth and latency on every mapped edge (VF2 with the GPUs
    pinned).
    """
    if _extends(topo.graph, perm):
        return None
    # a link between two GPUs maps onto the link between their images, whatever the rest of the map: a check
    # of the GPUs' own links refuses most rotations of a mesh at once (VF2 on 4,096 MI250 GCDs takes seconds)
    g = topo.graph

    def link(e) -> str:
        return "no link" if e is None else f"{_gbps(e['bw'])}, {float(e['latency']):g} us"
    for a, b, d in g.edges(data=True):
        if g.nodes[a]["kind"] == GPU and g.nodes[b]["kind"] == GPU:
            e = g.get_edge_data(perm[a], perm[b])
            if e is None or (e["bw"], float(e["latency"])) != (d["bw"], float(d["latency"])):
                return f"GPU {a}->{b} ({link(d)}) would map to GPU {perm[a]}->{perm[b]} ({link(e)})"
    ranks = topo.gpus
    if len(ranks) <= PAIR_CHECK_GPUS:
        for a in ranks:
            for b in ranks:
                if a == b:
                    continue
                ra, rb = topo.route(a, b), topo.route(perm[a], perm[b])
                bwa = None if ra is None else topo.route_bandwidth(ra)
                bwb = None if rb is None else topo.route_bandwidth(rb)
                if bwa != bwb:
                    return (f"GPU {a}->{b} ({_gbps(bwa)}) would map to GPU {perm[a]}->{perm[b]} "
                            f"({_gbps(bwb)})")
    inverse = {p: r for r, p in enumerate(perm)}
    g1, g2 = _pinned(topo.graph, lambda r: r), _pinned(topo.graph, lambda r: inverse[r])
    matcher = nx.algorithms.isomorphism.DiGraphMatcher(
        g1, g2, node_match=lambda x, y: x["pin"] == y["pin"],
        edge_match=lambda x, y: (x["bw"], x["latency"]) == (y["bw"], y["latency"]))
    if not matcher.is_isomorphic():
        return ("the switches and NICs cannot be mapped to match (GPUs that share a switch or NIC would "
                "map to GPUs that do not)")
    return None


def _extends(graph: nx.DiGraph, perm: list[int]) -> bool:
    """True when an explicit map of the whole graph that moves GPU r to ``perm[r]`` is found and checked: the
    proof :func:`automorphism_mismatch` would get from VF2, at a fraction of its cost on a large machine.

    The map is grown from the GPUs: a switch or NIC not yet mapped is told apart by its kind and by which mapped
    vertices send to it and receive from it; where exactly one vertex on each side has a signature, the two
    are paired (the signatures of a vertex and of its image must agree under any automorphism that extends
    ``perm``). The map found is then checked as VF2 would check it: one to one, of the same kinds, and every
    edge mapped onto an edge of equal bandwidth and latency (so, edges being as many on both sides, onto
    all of them). False means no proof here, not that there is none (ties the signatures cannot break)."""
    kind = graph.nodes
    m = {r: p for r, p in enumerate(perm)}
    if any(kind[r]["kind"] != GPU or kind[p]["kind"] != GPU for r, p in m.items()):
        return False
    free = {v for v in graph if v not in m}
    images = set(m.values())
    if images != set(m):
        return False
    targets = set(free)

    def side(v, inside, name):
        return (kind[v]["kind"], frozenset(name(u) for u in graph.predecessors(v) if u in inside),
                frozenset(name(u) for u in graph.successors(v) if u in inside))

    while free:
        sources: dict = {}
        for v in free:
            sources.setdefault(side(v, m, m.__getitem__), []).append(v)
        found: dict = {}
        for w in targets:
            found.setdefault(side(w, images, lambda u: u), []).append(w)
        paired = [(vs[0], found[key][0]) for key, vs in sources.items()
                  if len(vs) == 1 and len(found.get(key, ())) == 1 and (key[1] or key[2])]
        if not paired:
            return False
        for v, w in paired:
            m[v] = w
            images.add(w)
            free.discard(v)
            targets.discard(w)
    if len(set(m.values())) != len(m):
        return False
    for u, v, d in graph.edges(data=True):
        e = graph.get_edge_data(m[u], m[v])
        if e is None or e["bw"] != d["bw"] or float(e["latency"]) != float(d["latency"]):
            return False
    return True


def _pinned(graph: nx.DiGraph, pin) -> nx.DiGraph:
    out = nx.DiGraph()
    for v, kind in graph.nodes(data="kind"):
        out.add_node(v, pin=pin(v) if kind == GPU else kind)
    for u, v, d in graph.edges(data=True):
        out.add_edge(u, v, bw=d["bw"], latency=float(d["latency"]))
    return out


# --- a default sketch -----------------------------------------------------------------------------------
def derive_sketch(topology: Topology) -> Sketch:
    """A sensible starting sketch for ``topology`` (made once per machine: the CLI shows the one milp uses).

    - In the node: each in-node switch vertex of node 0 joining two or more GPUs becomes a switch list
      (strategy ``switch``, ``uc-min``: fewer distinct connections, fewer channels); without switches
      (NVLink or xGMI meshes) strategy ``none``.
    - Between nodes: with one NIC per GPU, ``direct-map`` (local GPU i sends to local GPU i of the other
      nodes, its own rail); with NICs shared, one sender per NIC (the lowest local GPU on it) sending to
      its counterpart, and every GPU's chunks leaving through the sender(s) of its NIC(s): one stream
      per NIC keeps the NIC's bandwidth whole (TACCL divides remote bandwidth by the inter-node links
      per NIC).
    - Symmetry: the smallest in-node rotation ``[d, G]`` that maps the machine onto itself (DGX-2: 2,
      because GPUs share NICs in pairs; NDv2: 4), then ``[G, nodes * G]`` across nodes.
    - ``chunkup`` 1.
    """
    return topology.derived(("sketch",), lambda: _derive_sketch(topology))


def _derive_sketch(topology: Topology) -> Sketch:
    G, N = topology.gpus_per_node, topology.nodes
    if not G:
        raise CollsError("the machine's nodes have different GPU counts; a sketch needs equal nodes",
                         source=topology.meta.get("profile"))
    locals_ = range(G)
    lists = []
    for v in sorted((v for v in topology.graph if topology.kind(v) == SWITCH and topology.node_of(v) == 0),
                    key=vertex_key):
        gpus = tuple(sorted(u for u in topology.graph.predecessors(v) if topology.kind(u) == GPU))
        if len(gpus) >= 2:
            lists.append(gpus)
    strategy = "none"
    if lists and _switch_lists_fit(topology, lists):
        strategy = "switch"
    else:
        lists = []
    relay, form, senders_of = (), None, None
    if N > 1:
        order = lambda v: (topology.graph.nodes[v].get("nic", -1), vertex_key(v))  # noqa: E731 (nic10 after nic2)
        nics = [sorted((v for v in topology.graph.successors(g) if topology.kind(v) == NIC), key=order)
                for g in locals_]
        distinct = {v for vs in nics for v in vs}
        if all(len(vs) == 1 for vs in nics) and len(distinct) == G:
            relay, form = tuple((s, (s,)) for s in locals_), "direct-map"
        else:
            sender_of_nic = {}
            for g in locals_:
                for v in nics[g]:
                    sender_of_nic.setdefault(v, g)
            senders = sorted(set(sender_of_nic.values()))
            relay, form = tuple((s, (s,)) for s in senders), "map"
            senders_of = tuple(tuple(sorted({sender_of_nic[v] for v in nics[g]})) or tuple(senders)
                               for g in locals_)
    symmetry = []
    n = topology.ngpus
    for d in range(1, G):
        if automorphism_mismatch(topology, symmetry_permutation(n, d, G)) is None:
            symmetry.append((d, G))
            break
    if N > 1 and automorphism_mismatch(topology, symmetry_permutation(n, G, n)) is None:
        symmetry.append((G, n))
    return Sketch(N, G, strategy, tuple(lists), ("uc-min",) * len(lists), relay, form, senders_of, False,
                  tuple(symmetry), 1)


def _switch_lists_fit(topo: Topology, lists) -> bool:
    for i, a in enumerate(lists):
        for b in lists[:i]:
            if set(a) & set(b) and set(a) != set(b):
                return False
        bws = {topo.route_bandwidth(r) if (r := topo.route(x, y)) else None for x in a for y in a if x != y}
        if len(bws) != 1 or None in bws:
            return False
    return True




# --- writing --------------------------------------------------------------------------------------------
def sketch_text(sketch: Sketch, comment: str = "") -> str:
    """``sketch`` as colls' YAML (what :func:`load_sketch` reads back to an equal Sketch).

    ``comment`` (lines of text) is written first, each line as a ``#`` comment.
    """
    lines = [f"# {line}".rstrip() for line in comment.splitlines()]
    lines.append(f"nodes: {sketch.nodes}")
    lines.append("intranode:")
    lines.append(f"  strategy: {sketch.strategy}")
    if sketch.strategy == "switch":
        lines.append("  switches:")
        lines += [f"    - {_flow(s)}" for s in sketch.switches]
        lines.append(f"  switch_strategy: [{', '.join(sketch.switch_strategy)}]")
    if sketch.nodes > 1:
        lines.append("internode:")
        if sketch.relay_form == "map":
            lines.append("  relay: {" + ", ".join(f"{s}: {_flow(r)}" for s, r in sketch.relay) + "}")
        else:
            lines.append(f"  relay: {sketch.relay_form}")
        if sketch.senders_of is not None:
            lines.append("  senders_of: {" + ", ".join(f"{g}: {_flow(s)}" for g, s in
                                                        enumerate(sketch.senders_of)) + "}")
        lines.append(f"  own_chunks_first: {str(sketch.own_chunks_first).lower()}")
    lines.append(f"symmetry: [{', '.join(_flow(p) for p in sketch.symmetry)}]")
    lines.append(f"chunkup: {sketch.chunkup}")
    return "\n".join(lines) + "\n"


def _flow(values) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


def _few(values, limit: int = 8) -> str:
    values = sorted(values)
    shown = ", ".join(str(v) for v in values[:limit])
    return shown + (", ..." if len(values) > limit else "")


def _gbps(bw) -> str:
    return "no link" if bw is None else f"{float(bw):g} GB/s"

