"""Hardware profile files -> :class:`~colls.topology.Topology`.

Two file forms, told apart by a top-level ``graph:`` key. Both are YAML.

**Node profile** (``hardware/*.yaml``): one machine (a "node"); ``load_topology(spec, nodes=N)`` joins N
copies of it with a network. Keys::

    name, description            text
    gpu: {model, sms, count}     one GPU model per node; ``sms`` caps threadblocks per GPU
    link_classes: {NAME: {bandwidth, latency, efficiency}}
                                 bandwidth: GB/s per direction of ONE physical link of the class
                                 latency:   microseconds per hop (see "Latency" below)
                                 efficiency (optional, default 1): the share of the bandwidth that
                                 GPU-initiated transfers reach; only the simulator uses it (bounds are
                                 of the raw bandwidth)
    switches: [{name, class, links, gpus}]   in-node switch vertex; each listed GPU (or ``all``) attaches
                                 with ``links`` links of ``class``, both directions
    direct: {class, matrix}      GPU->GPU link multiplicities, row = from, column = to
    nics: [{class, gpus, pcie}]  NIC used by the listed local GPUs (or ``all``); ``class`` is its network
                                 link; ``pcie`` (optional) the class of the GPU<->NIC hop (default ``class``)
    network: {layout}            ``rails`` (default) or ``single``; used only when nodes > 1
    rank_order: [...]            rank r of each node is the profile's GPU ``rank_order[r]``

GPU numbers inside a profile (``switches.gpus``, ``nics.gpus``, ``direct.matrix``) are the profile's own
GPU indices; ``rank_order`` maps them to ranks. Cluster of N nodes, G GPUs per node:

- rank ``node * G + local``; in-node switch ``"n{node}.{name}"``;
- each NIC j of each node is two vertices, ``"n{node}.nic{j}.tx"`` (GPU -> network) and
  ``"n{node}.nic{j}.rx"`` (network -> GPU), so no route can hairpin between two GPUs of one node through
  a NIC; the GPU hop uses the ``pcie`` class (or the NIC's), the network hop the NIC's class;
- ``rails``: one leaf switch ``"rail{j}"`` per NIC index j (NIC j of every node), and, when there are
  several rails, a ``"spine"`` joined to every leaf both ways with the sum of that leaf's NIC bandwidths
  (a non-blocking fat tree); ``single``: one switch ``"net"`` for every NIC;
- with one node there are no NIC vertices and no network.

Parallel links between the same two vertices fold into one edge (``count`` links, ``bw`` their sum).

**Graph form**: any other machine, written out vertex by vertex (the whole system; ``nodes`` must be 1)::

    name, description
    link_classes: {NAME: {bandwidth, latency, efficiency}}  optional; links of a listed class inherit them
    graph:
      gpus:     [{id, model, sms, node, label}]       ids 0..N-1 are the ranks; node defaults to 0
      switches: [{id, node, label}]                   string ids; node null = between nodes
      nics:     [{id, node, label}]
      links:    [{from, to, bandwidth, latency, class, count, both}]
                bandwidth is per link, the edge gets count x bandwidth; both (default true) adds the reverse

**Latency.** A link's latency is what one hop costs; the latency of a transfer is the sum over the hops of
its route (:meth:`Topology.route_latency`). Shipped profiles split published per-transfer values over the
hops of the usual route (a GPU->switch->GPU transfer has two hops; GPU->NIC->leaf->NIC->GPU has four), so
route latencies reproduce the published figures; each file says which values it chose and why.

Every user mistake raises :class:`CollsError` naming the file (``source``) and the dotted key (``key``,
list items as ``nics[2].class``). Values outside the accepted ranges (bandwidth 1e-6 to 1e6 GB/s, latency
0 to 1e6 us, whole numbers up to 1e6, at most 64 levels of nesting; see the constants below) are
mistakes too. A user's file is read with :func:`colls.files.read_text` (a regular file of at most 16 MB).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from fractions import Fraction
from importlib import resources

import networkx as nx
import yaml

from colls.errors import EXCERPT_CHARS, CollsError, excerpt, printable
from colls.files import MAX_YAML_PROFILE_BYTES, read_text
from colls.topology import GPU, NIC, SWITCH, Topology, as_fraction

PROFILES_PACKAGE = "colls.profiles"  # the repository's hardware/ folder, installed under this name
LAYOUTS = ("rails", "single")
# Accepted ranges. A link's bandwidth is finite, at least 1 kB/s and at most 1 PB/s per direction; its
# latency finite, 0 to 1 s per hop; every whole number (GPU count, SMs, link multiplicities, ...) at
# most MAX_INT; names at most MAX_NAME characters, other text MAX_TEXT; a cluster at most MAX_GPUS GPUs
# in all. Anything outside is a mistake in the file.
MIN_BANDWIDTH, MAX_BANDWIDTH = Fraction(1, 10**6), Fraction(10**6)  # GB/s
MAX_LATENCY = Fraction(10**6)  # us
MAX_INT = 10**6
MAX_NODES = 10**5  # --nodes (= colls.cli.MAX_NODES); more nodes than any cluster built so far has GPUs
MAX_GPUS = 10**6
# GPUs in one node profile (gpu.count): the largest NVLink domain announced has 576 (NVL576); more GPUs are
# more nodes (--nodes). A million in one node took 70 s and 2.3 GB to show.
MAX_NODE_GPUS = 1024
# GPUs of the largest machine colls builds to answer on: every command lays the whole machine out (about 1 ms a
# node here) and bound's flows, the simulator and the proofs grow from there (bound: 5 s at 4,096 GPUs of DGX
# A100, 16 s at 16,384). A larger one is refused before it is built, naming this limit and the most nodes of
# the profile that fit; a command's own limits (the runtime's, checked first) name theirs.
MAX_MODEL_GPUS = 4096
MAX_DEPTH = 64  # nesting levels of YAML collections
MAX_NAME, MAX_TEXT = 100, 1000  # characters of a name (profile, class, switch) and of any other text
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_+-]*\Z")


def check_model_size(gpus_per_node: int, nodes: int) -> None:
    """Refuse (CollsError on --nodes) a machine of more than :data:`MAX_MODEL_GPUS` GPUs."""
    total = gpus_per_node * nodes
    if total > MAX_MODEL_GPUS:
        fit = MAX_MODEL_GPUS // gpus_per_node
        raise CollsError(f"{nodes:,} nodes of {gpus_per_node} GPUs are {total:,} GPUs; colls models machines of "
                         f"at most {MAX_MODEL_GPUS:,} GPUs ({fit:,} node{'s' if fit != 1 else ''} of this profile; "
                         "laying out a larger one alone takes longer than an answer should)", key="--nodes")


# --- public API ------------------------------------------------------------------------------------------
def list_profiles() -> list[dict]:
    """The shipped node profiles, sorted by name: ``{"name", "description", "gpus", "path"}``.

    ``name`` is what ``load_topology`` accepts; ``gpus`` is per node (the whole system for a graph file).
    """
    out = []
    for path in _shipped().values():
        data = _read_yaml(str(path), path.read_text(encoding="utf-8"))
        check = _Checker(str(path))
        if "graph" in data:
            topo = _graph_topology(check, data)
            gpus, description = topo.ngpus, topo.meta["description"]
        else:
            prof = _parse_profile(check, data)
            gpus, description = prof.count, prof.description
        out.append({"name": path.name.rsplit(".", 1)[0], "description": description, "gpus": gpus, "path": str(path)})
    return out


def load_topology(spec: str, nodes: int = 1, precheck=None) -> Topology:
    """Load a shipped profile (by name, e.g. ``"dgx-a100"``) or a YAML file (by path) as a Topology.

    Parameters
    ----------
    spec : a shipped profile name or the path of a node-profile or graph-form YAML file.
    nodes : how many copies of a node profile to join with its network (graph form: must be 1).
    precheck : called with the number of GPUs once the profile is read and before the machine is built
        (building 10,000 nodes takes seconds; a caller that will refuse that many ranks says so first).

    Returns
    -------
    A Topology that passes ``validate()``, named ``"<profile>"`` or ``"<profile> xN"``, with
    ``meta = {"profile": path, "description": ..., "network": layout (None for the graph form), ...}``.

    Raises
    ------
    CollsError for an unknown name, an unreadable or malformed file, or ``nodes < 1``.
    """
    source, text = _resolve(str(spec))
    if isinstance(nodes, bool) or not isinstance(nodes, int):
        raise CollsError(f"--nodes must be a whole number, got {excerpt(nodes)}", source=source)
    if nodes < 1:
        raise CollsError(f"--nodes must be >= 1 (got {excerpt(nodes)})", source=source)
    if nodes > MAX_NODES:
        raise CollsError(f"--nodes must be at most {MAX_NODES} (got {excerpt(nodes)})", source=source)
    _refuse_xml(source, text)
    data = _read_yaml(source, text)
    check = _Checker(source)
    if "graph" in data:
        if nodes != 1:
            check.fail("graph", f"a graph-form file describes the whole system; --nodes must be 1 "
                                f"(got {nodes})")
        topo = _graph_topology(check, data)
    else:
        profile = _parse_profile(check, data)
        if profile.count * nodes > MAX_GPUS:    # refused before a caller's checks count anything that large
            check_model_size(profile.count, nodes)
        if precheck is not None:
            precheck(profile.count * nodes)
        check_model_size(profile.count, nodes)
        topo = _cluster(check, profile, nodes)
    topo.validate(source)
    for _, _, d in topo.graph.edges(data=True):
        d["efficiency"] = check.efficiency.get(d["cls"], 1.0)
    return topo


def summarize(topo: Topology) -> dict:
    """A JSON-serialisable description of ``topo`` (bandwidths in GB/s, latencies in us).

    Numbers are ints when integral, else floats. ``link_classes[*].bandwidth`` is the bandwidth of one
    link of the class (edge ``bw / count``) and ``latency`` its per-hop latency: a number when every link
    of the class agrees, else the sorted list of the distinct values. ``links`` counts physical links,
    one per direction.
    """
    g = topo.graph
    models: dict[tuple, int] = {}
    for r in topo.gpus:
        key = (g.nodes[r].get("model", ""), topo.sms(r))
        models[key] = models.get(key, 0) + 1
    per_gpu = []
    for r in topo.gpus:
        data = g.nodes[r]
        per_gpu.append({"rank": r, "node": data.get("node"), "local": data.get("local"),
                        "egress": _num(sum((d["bw"] for _, _, d in g.out_edges(r, data=True)), Fraction(0))),
                        "ingress": _num(sum((d["bw"] for _, _, d in g.in_edges(r, data=True)), Fraction(0)))})
    classes: dict[str, dict] = {}
    for _, _, d in topo.links():
        c = classes.setdefault(d["cls"], {"links": 0, "edges": 0, "bw": set(), "lat": set()})
        c["links"] += d["count"]
        c["edges"] += 1
        c["bw"].add(d["bw"] / d["count"])
        c["lat"].add(float(d["latency"]))
    others = [v for v in topo.vertices() if topo.kind(v) != GPU]
    return {
        "name": topo.name,
        "description": topo.meta.get("description", ""),
        "profile": topo.meta.get("profile"),
        "nodes": topo.nodes,
        "gpus_per_node": topo.gpus_per_node,
        "gpus": topo.ngpus,
        "gpu_models": [{"model": m, "sms": s, "gpus": n} for (m, s), n in sorted(models.items())],
        "switches": [{"id": v, "node": topo.node_of(v), "label": topo.label(v)}
                     for v in others if topo.kind(v) == SWITCH],
        "nics": [{"id": v, "node": topo.node_of(v), "label": topo.label(v)}
                 for v in others if topo.kind(v) == NIC],
        "link_classes": [{"class": name, "links": c["links"], "edges": c["edges"],
                          "bandwidth": _one_or_list([_num(b) for b in sorted(c["bw"])]),
                          "latency": _one_or_list(sorted(c["lat"]))}
                         for name, c in sorted(classes.items())],
        "per_gpu": per_gpu,
        "network": topo.meta.get("network"),
    }


def format_summary(topo: Topology) -> str:
    """``summarize(topo)`` as readable text, one fact per line."""
    s = summarize(topo)
    lines = [f"{s['name']}: {s['description']}" if s["description"] else s["name"]]
    if s["profile"]:
        lines.append(f"profile: {s['profile']}")
    models = ", ".join(f"{m['gpus']} x {m['model']} ({m['sms']} SMs)" for m in s["gpu_models"])
    shape = f" in {s['nodes']} nodes" + (f" of {s['gpus_per_node']}" if s["gpus_per_node"] else "")
    lines.append(f"GPUs: {models}{shape if s['nodes'] > 1 else ''}")
    in_node = [w["id"] for w in s["switches"] if w["node"] is not None]
    network = [w["id"] for w in s["switches"] if w["node"] is None]
    lines.append(f"switches: {len(in_node)} in nodes{_few(in_node)}, {len(network)} in the network"
                 f"{_few(network)}")
    nics = [n["id"] for n in s["nics"]]
    split = sum(n.endswith(".tx") for n in nics)
    if nics and 2 * split == len(nics):
        lines.append(f"NICs: {split}, each an out vertex (.tx) and an in vertex (.rx){_few(nics)}")
    else:
        lines.append(f"NICs: {len(nics)}{_few(nics)}")
    if s["network"] is None:
        lines.append("network: as the graph lists it")
    elif s["nodes"] > 1:
        lines.append(f"network: {s['network']}")
    else:
        lines.append(f"network: none (one node; layout {s['network']} when nodes > 1)")
    lines.append("link classes (links = physical links, one per direction):")
    width = max((len(c["class"]) for c in s["link_classes"]), default=0)
    for c in s["link_classes"]:
        lines.append(f"  {c['class']:<{width}}  {c['links']:>5} links  {_text(c['bandwidth'])} GB/s each  "
                     f"{_text(c['latency'])} us per hop")
    lines.append("per-GPU bandwidth (GB/s, all links of the GPU):")
    groups: list[list] = []
    for g in s["per_gpu"]:
        if groups and (groups[-1][2], groups[-1][3]) == (g["egress"], g["ingress"]) \
                and groups[-1][1] == g["rank"] - 1:
            groups[-1][1] = g["rank"]
        else:
            groups.append([g["rank"], g["rank"], g["egress"], g["ingress"]])
    for lo, hi, egress, ingress in groups:
        ranks = f"rank {lo}" if lo == hi else f"ranks {lo}-{hi}"
        lines.append(f"  {ranks}: egress {_text(egress)}, ingress {_text(ingress)}")
    return "\n".join(lines)


# --- files ----------------------------------------------------------------------------------------------
def _shipped() -> dict:
    """The shipped profiles by name, as importlib.resources traversables (files in a checkout or wheel)."""
    found = [p for p in resources.files(PROFILES_PACKAGE).iterdir() if p.name.endswith(".yaml")]
    return {p.name[:-len(".yaml")]: p for p in sorted(found, key=lambda p: p.name)}


def _resolve(spec: str) -> tuple[str, str]:
    """``(source, text)`` of a shipped profile name or a user's file (read with the size cap)."""
    if not spec:
        raise CollsError("must name a profile or a YAML file, got an empty string")
    shipped = _shipped()
    looks_like_path = "/" in spec or "\\" in spec or spec.endswith((".yaml", ".yml"))
    if not looks_like_path and spec in shipped:
        return str(shipped[spec]), shipped[spec].read_text(encoding="utf-8")
    if looks_like_path or os.path.lexists(spec):
        return spec, read_text(spec, MAX_YAML_PROFILE_BYTES)
    known = ", ".join(shipped) or "none"
    raise CollsError(f"unknown hardware profile {excerpt(spec)}; known profiles: {known} "
                     f"(or give the path of a YAML file)")


# libyaml's parser where PyYAML has it, else PyYAML's own: a 900 KB profile of 30,000 NICs took 9 s to read on
# the pure-Python one, 3.5 s on this one (its parse 0.5 s; the rest builds the Python nodes and values)
_BASE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BASE_LOADER):
    """Safe loading that refuses a key given twice in one mapping (PyYAML silently keeps the last). Nesting
    is bounded before it is loaded (:func:`load_yaml`)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            # a plain key is its tag and text (constructing every key twice doubled the load of a large file)
            key = ((key_node.tag, key_node.value) if isinstance(key_node, yaml.ScalarNode)
                   else self.construct_object(key_node, deep=True))
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key; SafeLoader reports it
                duplicate = False
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {excerpt(key_node.value if isinstance(key_node, yaml.ScalarNode) else key)} "
                    "given twice", key_node.start_mark)
        return super().construct_mapping(node, deep)


def load_yaml(text: str):
    """The YAML document in ``text`` (yaml.YAMLError or ValueError as PyYAML raises them). Its collections
    are counted from the parser's events first, and a document nested deeper than MAX_DEPTH is refused
    before it is composed (the composer recurses once per level: deep enough, the stack gives out)."""
    depth = 0
    for event in yaml.parse(text, Loader=_BASE_LOADER):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels",
                                                  event.start_mark)
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
    return yaml.load(text, Loader=_Loader)


# the first element of an XML text, after a declaration, comments and a doctype
_XML_ROOT = re.compile(r"\A\ufeff?\s*(?:<\?.*?\?>\s*|<!--.*?-->\s*|<!DOCTYPE[^>]*>\s*)*<\s*([A-Za-z_][\w.:-]*)", re.S)


def _refuse_xml(source: str, text: str) -> None:
    """A profile is YAML, which never starts with a tag: an XML file given as one says what it is and what
    reads it (an NCCL topology dump is made into a profile by `colls hardware import`)."""
    m = _XML_ROOT.match(text[:100_000])
    if m is None and not text.lstrip("\ufeff \t\r\n").startswith("<"):
        return
    tag = m.group(1) if m else None
    if tag == "system":
        why = ("an NCCL (or RCCL) topology dump, not a hardware profile: `colls hardware import FILE -o node.yaml` "
               "makes a node profile of it")
    elif tag == "algo":
        why = "an MSCCL algorithm file, not a hardware profile (`colls verify` and `colls simulate` read those)"
    else:
        why = f"XML{f' (<{printable(tag, 40)}>)' if tag else ''}, not a hardware profile (YAML)"
    raise CollsError(why, source=source)


def _read_yaml(source: str, text: str) -> dict:
    try:
        data = load_yaml(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        if isinstance(e, yaml.reader.ReaderError):
            where, problem = f" at character {e.position}", f"{e.reason} ({e.character!r})"
        else:
            problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise CollsError(f"YAML syntax error{where}: {printable(problem, 100)}", source=source) from None
    except ValueError as e:  # a number or date PyYAML cannot convert (more than 4300 digits, month 13)
        reason = "a number has too many digits" if "digits" in str(e) else printable(str(e), 80)
        raise CollsError(f"a value cannot be read: {reason}", source=source) from None
    if data is None:
        raise CollsError("is empty", source=source)
    if not isinstance(data, dict):
        raise CollsError(f"must be a mapping of keys (name, gpu, ...), got {_what(data)}", source=source)
    return data


class _Checker:
    """Reads values out of parsed YAML, raising CollsError(source, dotted key) on anything wrong."""

    def __init__(self, source: str):
        self.source = source
        self.efficiency: dict[str, float] = {}   # link class -> share of its bandwidth transfers reach

    def fail(self, key: str | None, message: str):
        raise CollsError(message, source=self.source, key=key or None)

    def mapping(self, value, key: str, required=(), optional=()) -> dict:
        if not isinstance(value, dict):
            self.fail(key, f"expected a mapping, got {_what(value)}")
        allowed = (*required, *optional)
        for k in value:
            if k not in allowed:
                self.fail(_join(key, printable(str(k), EXCERPT_CHARS)),
                      f"unknown key (allowed: {', '.join(allowed)})")
        for k in required:
            if k not in value:
                self.fail(_join(key, k), "missing key")
        return value

    def list(self, value, key: str, nonempty: bool = False) -> list:
        if not isinstance(value, list):
            self.fail(key, f"expected a list, got {_what(value)}")
        if nonempty and not value:
            self.fail(key, "must not be empty")
        return value

    def text(self, value, key: str, limit: int = MAX_TEXT) -> str:
        if not isinstance(value, str):
            self.fail(key, f"expected text, got {_what(value)}")
        if len(value) > limit:
            self.fail(key, f"must be at most {limit} characters, got {len(value)}")
        value = value.rstrip("\n")          # a YAML block scalar ends in a newline
        if not value.isprintable():       # a control character would reach the terminal in every summary
            self.fail(key, f"must be printable text (no control characters), got {excerpt(value)}")
        return value

    def name(self, value, key: str) -> str:
        if not isinstance(value, str) or not _NAME.match(value):
            self.fail(key, f"expected a name of letters, digits, '_', '+' or '-', got {_what(value)}")
        return self.text(value, key, MAX_NAME)

    def integer(self, value, key: str, minimum: int, maximum: int = MAX_INT) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(key, f"expected a whole number, got {_what(value)}")
        if value < minimum:
            self.fail(key, f"must be >= {minimum}, got {excerpt(value)}")
        if value > maximum:
            self.fail(key, f"must be at most {maximum}, got {excerpt(value)}")
        return value

    def number(self, value, key: str) -> Fraction:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            self.fail(key, f"expected a number, got {_what(value)}")
        try:
            return as_fraction(value)
        except (ValueError, ZeroDivisionError):
            self.fail(key, f"expected a finite number, got {_what(value)}")

    def bandwidth(self, value, key: str) -> Fraction:
        bw = self.number(value, key)
        if bw <= 0:
            self.fail(key, f"bandwidth must be > 0 GB/s, got {_num(bw)}")
        if not MIN_BANDWIDTH <= bw <= MAX_BANDWIDTH:
            self.fail(key, f"bandwidth must be between {float(MIN_BANDWIDTH):g} and {float(MAX_BANDWIDTH):g} "
                           f"GB/s, got {_what(value)}")
        return bw

    def latency(self, value, key: str) -> float:
        lat = self.number(value, key)
        if lat < 0:
            self.fail(key, f"latency must be >= 0 us, got {excerpt(float(lat))}")
        if lat > MAX_LATENCY:
            self.fail(key, f"latency must be between 0 and {float(MAX_LATENCY):g} us, got {_what(value)}")
        return float(lat)

    def gpu_list(self, value, key: str, count: int) -> list[int]:
        """``all`` or a list of distinct profile GPU indices 0..count-1."""
        if value == "all":
            return list(range(count))
        if not isinstance(value, list):
            self.fail(key, f"expected all or a list of GPU indices, got {_what(value)}")
        seen: list[int] = []
        for i, gpu in enumerate(self.list(value, key, nonempty=True)):
            k = f"{key}[{i}]"
            gpu = self.integer(gpu, k, 0)
            if gpu >= count:
                self.fail(k, f"GPU {gpu} out of range 0..{count - 1} (gpu.count is {count})")
            if gpu in seen:
                self.fail(k, f"GPU {gpu} listed twice")
            seen.append(gpu)
        return seen

    def link_classes(self, value, key: str = "link_classes") -> dict[str, tuple[Fraction, float]]:
        if not isinstance(value, dict):
            self.fail(key, f"expected a mapping of class names, got {_what(value)}")
        out = {}
        for name, spec in value.items():
            k = _join(key, printable(str(name), EXCERPT_CHARS))
            self.name(name, k)
            self.mapping(spec, k, required=("bandwidth", "latency"), optional=("efficiency",))
            out[name] = (self.bandwidth(spec["bandwidth"], k + ".bandwidth"),
                         self.latency(spec["latency"], k + ".latency"))
            if "efficiency" in spec:
                eff = self.number(spec["efficiency"], k + ".efficiency")
                if not 0 < eff <= 1:
                    self.fail(k + ".efficiency", f"must be above 0 and at most 1, got {_what(spec['efficiency'])}")
                self.efficiency[name] = float(eff)
        return out

    def link_class(self, value, key: str, classes: dict) -> str:
        name = self.text(value, key)
        if name not in classes:
            self.fail(key, f"unknown link class {excerpt(name)} (link_classes has: "
                           f"{printable(', '.join(classes) or 'none', 120)})")
        return name


# --- node profiles --------------------------------------------------------------------------------------
@dataclass
class _Switch:
    name: str
    cls: str
    links: int
    gpus: list[int]


@dataclass
class _Nic:
    cls: str
    hop: str  # class of the GPU<->NIC hop
    gpus: list[int]


@dataclass
class _Profile:
    name: str
    description: str
    model: str
    sms: int
    count: int
    classes: dict[str, tuple[Fraction, float]]
    switches: list[_Switch]
    direct: tuple[str, list[list[int]]] | None
    nics: list[_Nic]
    layout: str
    rank_order: list[int]


def _parse_profile(check: _Checker, data: dict) -> _Profile:
    check.mapping(data, "", required=("name", "gpu", "link_classes"),
                  optional=("description", "switches", "direct", "nics", "network", "rank_order"))
    name = check.name(data["name"], "name")
    description = check.text(data.get("description", ""), "description")
    gpu = check.mapping(data["gpu"], "gpu", required=("model", "sms", "count"))
    model = check.text(gpu["model"], "gpu.model")
    sms = check.integer(gpu["sms"], "gpu.sms", 1)
    count = check.integer(gpu["count"], "gpu.count", 1, MAX_NODE_GPUS)
    classes = check.link_classes(data["link_classes"])

    switches: list[_Switch] = []
    for i, sw in enumerate(check.list(data.get("switches", []), "switches")):
        k = f"switches[{i}]"
        check.mapping(sw, k, required=("name", "class", "links", "gpus"))
        sname = check.name(sw["name"], k + ".name")
        if any(s.name == sname for s in switches):
            check.fail(k + ".name", f"switch {excerpt(sname)} listed twice")
        switches.append(_Switch(sname, check.link_class(sw["class"], k + ".class", classes),
                                check.integer(sw["links"], k + ".links", 1),
                                check.gpu_list(sw["gpus"], k + ".gpus", count)))

    direct = None
    if "direct" in data:
        d = check.mapping(data["direct"], "direct", required=("class", "matrix"))
        direct = (check.link_class(d["class"], "direct.class", classes),
                  _matrix(check, d["matrix"], "direct.matrix", count))

    nics: list[_Nic] = []
    for i, nic in enumerate(check.list(data.get("nics", []), "nics")):
        k = f"nics[{i}]"
        check.mapping(nic, k, required=("class", "gpus"), optional=("pcie",))
        cls = check.link_class(nic["class"], k + ".class", classes)
        hop = check.link_class(nic["pcie"], k + ".pcie", classes) if "pcie" in nic else cls
        nics.append(_Nic(cls, hop, check.gpu_list(nic["gpus"], k + ".gpus", count)))

    network = check.mapping(data.get("network", {}), "network", optional=("layout",))
    layout = network.get("layout", "rails")
    if layout not in LAYOUTS:
        check.fail("network.layout", f"expected one of {', '.join(LAYOUTS)}, got {_what(layout)}")

    rank_order = list(range(count))
    if "rank_order" in data:
        order = check.list(data["rank_order"], "rank_order")
        for i, g in enumerate(order):
            check.integer(g, f"rank_order[{i}]", 0)
        if sorted(order) != rank_order:
            check.fail("rank_order", f"must be a permutation of 0..{count - 1} (gpu.count is {count}), "
                                     f"got {excerpt(order, 80)}")
        rank_order = list(order)
    return _Profile(name, description, model, sms, count, classes, switches, direct, nics, layout,
                    rank_order)


def _matrix(check: _Checker, value, key: str, count: int) -> list[list[int]]:
    rows = check.list(value, key)
    for i, row in enumerate(rows):
        check.list(row, f"{key}[{i}]")
        if len(row) != len(rows):
            check.fail(f"{key}[{i}]", f"matrix is not square: row {i} has {len(row)} entries, "
                                      f"the matrix has {len(rows)} rows")
    if len(rows) != count:
        check.fail(key, f"matrix is {len(rows)} x {len(rows)}, expected {count} x {count} "
                        f"(gpu.count is {count})")
    for i, row in enumerate(rows):
        for j, m in enumerate(row):
            check.integer(m, f"{key}[{i}][{j}]", 0)
            if i == j and m:
                check.fail(f"{key}[{i}][{j}]", "a GPU cannot link to itself (the diagonal must be 0)")
    return rows


def _cluster(check: _Checker, p: _Profile, nodes: int) -> Topology:
    """The graph of ``nodes`` copies of profile ``p`` joined by its network (module docstring)."""
    g = nx.DiGraph()
    G = p.count
    local_of = {prof: r for r, prof in enumerate(p.rank_order)}
    for n in range(nodes):
        for r, prof in enumerate(p.rank_order):
            extra = f", profile GPU {prof}" if prof != r else ""
            g.add_node(n * G + r, kind=GPU, node=n, local=r, model=p.model, sms=p.sms,
                       label=f"GPU {n * G + r} (node {n}, local {r}{extra})")

    def link(u, v, cls, count=1, both=False):
        bw, lat = p.classes[cls]
        _add_link(check, g, u, v, bw * count, count, lat, cls, None)
        if both:
            _add_link(check, g, v, u, bw * count, count, lat, cls, None)

    for n in range(nodes):
        def rank(prof):
            return n * G + local_of[prof]
        for sw in p.switches:
            v = f"n{n}.{sw.name}"
            g.add_node(v, kind=SWITCH, node=n, label=f"node {n} switch {sw.name}")
            for prof in sw.gpus:
                link(rank(prof), v, sw.cls, sw.links, both=True)
        if p.direct:
            cls, matrix = p.direct
            for i, row in enumerate(matrix):
                for j, m in enumerate(row):
                    if m:
                        link(rank(i), rank(j), cls, m)
        if nodes > 1:
            for j, nic in enumerate(p.nics):
                tx, rx = f"n{n}.nic{j}.tx", f"n{n}.nic{j}.rx"
                g.add_node(tx, kind=NIC, node=n, nic=j, label=f"node {n} NIC {j} (out)")
                g.add_node(rx, kind=NIC, node=n, nic=j, label=f"node {n} NIC {j} (in)")
                for prof in nic.gpus:
                    link(rank(prof), tx, nic.hop)
                    link(rx, rank(prof), nic.hop)

    if nodes > 1:
        if not p.nics:
            check.fail("nics", f"missing key: --nodes {nodes} needs NICs to join the nodes")
        if p.layout == "single":
            g.add_node("net", kind=SWITCH, node=None, label="network switch")
        for j, nic in enumerate(p.nics):
            leaf = "net" if p.layout == "single" else f"rail{j}"
            if p.layout == "rails":
                g.add_node(leaf, kind=SWITCH, node=None, label=f"rail {j} switch")
            for n in range(nodes):
                link(f"n{n}.nic{j}.tx", leaf, nic.cls)
                link(leaf, f"n{n}.nic{j}.rx", nic.cls)
        if p.layout == "rails" and len(p.nics) > 1:
            g.add_node("spine", kind=SWITCH, node=None, label="spine switch")
            for j, nic in enumerate(p.nics):
                link(f"rail{j}", "spine", nic.cls, nodes, both=True)

    topo = Topology(p.name if nodes == 1 else f"{p.name} x{nodes}", g, nodes, G,
                    {"profile": check.source, "description": p.description, "network": p.layout,
                     "rank_order": list(p.rank_order)})
    blame = "direct" if p.direct else "switches"
    _check_reachable(check, topo, lambda a, b: blame if topo.node_of(a) == topo.node_of(b) else "nics")
    return topo


# --- graph form -----------------------------------------------------------------------------------------
def _graph_topology(check: _Checker, data: dict) -> Topology:
    check.mapping(data, "", required=("name", "graph"), optional=("description", "link_classes"))
    name = check.text(data["name"], "name")
    description = check.text(data.get("description", ""), "description")
    classes = check.link_classes(data["link_classes"]) if "link_classes" in data else {}
    graph = check.mapping(data["graph"], "graph", required=("gpus", "links"),
                          optional=("switches", "nics"))
    g = nx.DiGraph()

    gpus = check.list(graph["gpus"], "graph.gpus", nonempty=True)
    ids = []
    for i, gpu in enumerate(gpus):
        k = f"graph.gpus[{i}]"
        check.mapping(gpu, k, required=("id", "model", "sms"), optional=("node", "label"))
        rank = check.integer(gpu["id"], k + ".id", 0)
        if rank >= len(gpus):
            check.fail(k + ".id", f"GPU {rank} out of range 0..{len(gpus) - 1} (ids are the ranks "
                                  f"0..N-1 of the {len(gpus)} GPUs listed)")
        if rank in ids:
            check.fail(k + ".id", f"GPU {rank} listed twice")
        ids.append(rank)
        node = check.integer(gpu.get("node", 0), k + ".node", 0)
        g.add_node(rank, kind=GPU, node=node, model=check.text(gpu["model"], k + ".model"),
                   sms=check.integer(gpu["sms"], k + ".sms", 1))
        if "label" in gpu:
            g.nodes[rank]["label"] = check.text(gpu["label"], k + ".label")
    node_ids = sorted({d["node"] for _, d in g.nodes(data=True)})
    if node_ids != list(range(len(node_ids))):
        check.fail("graph.gpus", f"GPU nodes must be numbered 0..{len(node_ids) - 1} without gaps, "
                                 f"got {node_ids}")
    sizes = [0] * len(node_ids)
    for rank in range(len(gpus)):
        data_r = g.nodes[rank]
        data_r["local"] = sizes[data_r["node"]]
        sizes[data_r["node"]] += 1
        data_r.setdefault("label", f"GPU {rank} (node {data_r['node']}, local {data_r['local']})"
                          if len(node_ids) > 1 else f"GPU {rank}")

    for section, kind in (("switches", SWITCH), ("nics", NIC)):
        for i, item in enumerate(check.list(graph.get(section, []), f"graph.{section}")):
            k = f"graph.{section}[{i}]"
            check.mapping(item, k, required=("id",), optional=("node", "label"))
            vid = check.text(item["id"], k + ".id")
            if not vid:
                check.fail(k + ".id", "must not be empty")
            if vid in g:
                check.fail(k + ".id", f"vertex {excerpt(vid)} listed twice")
            node = item.get("node", None)
            if node is not None:
                check.integer(node, k + ".node", 0)
                if node >= len(node_ids):
                    check.fail(k + ".node", f"node {node} has no GPUs (GPU nodes are 0..{len(node_ids) - 1})")
            g.add_node(vid, kind=kind, node=node,
                       label=check.text(item.get("label", vid), k + ".label"))

    for i, ln in enumerate(check.list(graph["links"], "graph.links")):
        k = f"graph.links[{i}]"
        check.mapping(ln, k, required=("from", "to"),
                      optional=("bandwidth", "latency", "class", "count", "both"))
        ends = []
        for end in ("from", "to"):
            v = ln[end]
            if isinstance(v, bool) or not isinstance(v, (int, str)) or v not in g:
                check.fail(f"{k}.{end}", f"unknown vertex {excerpt(v)} (GPUs are ints 0..{len(gpus) - 1}; "
                                         f"switches and NICs are the string ids listed)")
            ends.append(v)
        u, v = ends
        if u == v:
            check.fail(k, f"links {excerpt(u)} to itself")
        cls = check.name(ln["class"], k + ".class") if "class" in ln else "link"
        bw_default, lat_default = classes.get(cls, (None, None))
        for field, default in (("bandwidth", bw_default), ("latency", lat_default)):
            if field not in ln and default is None:
                check.fail(f"{k}.{field}", "missing key" + (f" (class {excerpt(cls)} is not in link_classes)"
                                                            if "class" in ln else ""))
        bw = check.bandwidth(ln["bandwidth"], k + ".bandwidth") if "bandwidth" in ln else bw_default
        lat = check.latency(ln["latency"], k + ".latency") if "latency" in ln else lat_default
        count = check.integer(ln.get("count", 1), k + ".count", 1)
        both = ln.get("both", True)
        if not isinstance(both, bool):
            check.fail(k + ".both", f"expected true or false, got {_what(both)}")
        _add_link(check, g, u, v, bw * count, count, lat, cls, k)
        if both:
            _add_link(check, g, v, u, bw * count, count, lat, cls, k)

    per_node = sizes[0] if len(set(sizes)) == 1 else 0
    topo = Topology(name, g, len(node_ids), per_node,
                    {"profile": check.source, "description": description, "network": None})
    _check_reachable(check, topo, lambda a, b: "graph.links")
    return topo


# --- shared pieces --------------------------------------------------------------------------------------
def _add_link(check, g, u, v, bw, count, latency, cls, key):
    """Add a directed link, folding it into a parallel one of the same class and latency."""
    if g.has_edge(u, v):
        e = g.edges[u, v]
        if (e["cls"], e["latency"]) != (cls, latency):
            check.fail(key, f"parallel links {u}->{v} differ in class or latency "
                            f"({e['cls']} {e['latency']} us vs {cls} {latency} us)")
        e["bw"] += bw
        e["count"] += count
    else:
        g.add_edge(u, v, bw=bw, latency=latency, cls=cls, count=count)


def _check_reachable(check: _Checker, topo: Topology, blame) -> None:
    """Every GPU must reach every other (relaying through GPUs allowed), or no collective can run."""
    ranks = topo.gpus
    if len(ranks) < 2:
        return
    first = ranks[0]
    down, up = nx.descendants(topo.graph, first), nx.ancestors(topo.graph, first)
    for r in ranks[1:]:
        if r not in down:
            check.fail(blame(first, r), f"GPU {first} has no path to GPU {r} over the links given")
        if r not in up:
            check.fail(blame(r, first), f"GPU {r} has no path to GPU {first} over the links given")


def _join(key: str, sub: str) -> str:
    return f"{key}.{sub}" if key else sub


def _what(value) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, (int, float)):
        return f"the number {excerpt(value)}"
    if isinstance(value, str):
        return excerpt(value)
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _num(x):
    """A Fraction as an int when integral, else a float (for JSON and text)."""
    x = Fraction(x)
    return int(x) if x.denominator == 1 else float(x)


def _one_or_list(values: list):
    return values[0] if len(values) == 1 else values


def _text(x) -> str:
    if isinstance(x, list):
        return "/".join(_text(v) for v in x)
    return f"{x:.6g}" if isinstance(x, float) else str(x)


def _few(names: list, limit: int = 6) -> str:
    if not names:
        return ""
    shown = names if len(names) <= limit else names[:limit - 1] + ["...", names[-1]]
    return " (" + ", ".join(map(str, shown)) + ")"
