"""TACCL's topology profile JSON -> :class:`~colls.topology.Topology`.

TACCL (A. Shah et al., "TACCL: Guiding Collective Algorithm Synthesis using Communication Sketches",
NSDI 2023, arXiv:2111.04867; code: microsoft/taccl) describes a machine by a *profile* (a JSON file of
link costs) and a *node shape* given on its command line. :func:`load_taccl_profile` reads such a file
unchanged and builds the same machine in colls' graph model, so users keep the profiles they have.

Keys (what TACCL's code does with them: microsoft/taccl, taccl/topologies/generic.py and
taccl/cli/common.py; what colls does: below)::

    name                 the profile's name; colls also reads the profiled chunk size from its end
                         ("NDv2_1MB" -> 1 MB, "DGX2_1KB" -> 1 KB, "..._32KB" -> 32 KB)
    gpus_per_node        GPUs per node (NDv2: must be 8, the shape's matrix is 8 x 8)
    nics_per_node        NICs per node; NIC j serves GPUs j*k .. j*k+k-1 with k = gpus_per_node / nics.
                         TACCL overwrites the value silently (DGX2: 8, NDv2: 1); colls keeps the file's
                         value and uses those only when the key is absent
    alpha                intra-node cost per transfer
    node_betas_list      intra-node beta per link class, ascending (DGX2 and HubAndSpoke: one class;
                         NDv2: [0] the double-NVLink pairs 0-1, 0-4, 1-3, 2-3, 2-6, 4-5, 5-7, 6-7,
                         [1] the single pairs)
    node_invbws_list     per class alpha + beta as TACCL's MILPs use it (cast to int); checked for
                         shape, not used: colls takes alpha and beta themselves
    remote_alpha, remote_beta
                         inter-node cost per transfer and beta; needed when nodes > 1
    remote_invbw         remote_alpha + remote_beta (TACCL recomputes it); checked, not used
    links, betas, invbws shape ``custom`` only: N x N matrices indexed [dst][src]; links = number of
                         parallel links src -> dst, betas = beta of each of them

Shapes (``shape``, the CLI's ``--taccl-shape``; case does not matter):

- ``DGX2``: the GPUs behind one switch vertex per node (``"n{n}.nvswitch"``), one GPU<->switch edge each
  way; a transfer crosses two hops.
- ``NDv2``: the DGX-1 hybrid cube mesh (NVIDIA's V100 whitepaper; the matrix of hardware/ndv2.yaml):
  direct GPU->GPU edges, class [0] on the double-NVLink pairs (``count`` 2), class [1] on the single ones.
- ``HubAndSpoke``: a direct edge between every two GPUs, one link each (as TACCL builds it).
- ``custom``: the ``links`` / ``betas`` matrices (TACCL's own loader crashes on this shape; here it works).

When ``shape`` is None it is inferred where only one reading fits: ``links`` present -> custom;
8 GPUs and 2 beta classes -> NDv2; 16 GPUs and 1 class -> DGX2; anything else is an error that asks
for ``--taccl-shape``.

**Units.** TACCL's costs are times per *chunk*, not per byte: "Beta values are obtained by multiplying
a beta (in us/MB) by the input size (MB) for which you are trying to generate an algorithm"
(microsoft/taccl, INPUT_GUIDE.md), so each file is tied to one chunk size ``S`` bytes. The same guide
asks users to multiply every cost by a factor (10, 100, ...) so that TACCL's integer rounding keeps
information; the file does not record that factor. So every cost ``c`` in the file stands for
``c * u`` microseconds, ``u`` the *time unit*. TACCL's shipped profiles of one NDv2 link give remote
alpha 2.6 (1 MB file), 26 (32 KB) and 260 (1 KB): ``u`` = 1, 0.1 and 0.01 us. colls uses those three
units for those three sizes and asks for ``time_unit`` for any other size. Then, with sizes as
nccl-tests prints them (1 KB = 1024 bytes, 1 MB = 2**20)::

    bandwidth (GB/s) = S / (beta * u) / 1000      S bytes in beta * u us = S / (beta * u) bytes/us,
                                                  and 1 byte/us = 1e6 B/s = 1e-3 GB/s
    latency (us)     = alpha * u per transfer     split evenly over the hops of the transfer's route

Examples: NDv2_1MB double class 2**20 / 23 / 1000 = 45.6 GB/s, single 2**20 / 46 / 1000 = 22.8 GB/s,
remote 2**20 / 105 / 1000 = 9.99 GB/s, alpha 0.3 us; DGX2_1KB 1024 / (1 * 0.01) / 1000 = 102.4 GB/s,
alpha 30 * 0.01 = 0.3 us, remote 1024 / (10.25 * 0.01) / 1000 = 9.99 GB/s, remote alpha 2.6 us.

The betas are achieved rates, so every edge has ``efficiency`` 1. Between nodes each NIC is two
vertices (``"n{n}.nic{j}.tx"`` / ``".rx"``) on one network switch ``"net"`` (TACCL models no network
layout: every inter-node GPU pair costs the same); the four hops GPU -> NIC -> net -> NIC -> GPU each
have the remote bandwidth and a quarter of remote alpha. A NIC is shared by the GPUs it serves, which
is what TACCL's scaling of remote beta by (inter-node links / nics_per_node) approximates.

GPU model and SMs: TACCL's shapes are V100 machines (DGX-2: V100-SXM3, NDv2: V100-SXM2; NVIDIA's V100
whitepaper: 80 SMs); HubAndSpoke and custom say nothing of the GPU, so colls assumes a V100 with 80
SMs there too unless ``sms`` is given.

``meta`` keeps ``chunk_bytes``, ``profiled_at`` (``"1MB"``), ``time_unit_us`` and ``shape``, and the
description says "profiled at 1MB": a profile describes the machine at that chunk size only.
"""

from __future__ import annotations

import json
import re
from fractions import Fraction

import networkx as nx

from colls.errors import CollsError, excerpt
from colls.files import MAX_PROFILE_BYTES, read_text
from colls.inputs.hardware import (MAX_BANDWIDTH, MAX_INT, MAX_LATENCY, MAX_NODES, MIN_BANDWIDTH,
                                   check_model_size)
from colls.inputs.hardware import _check_reachable, _Checker, _what  # noqa: PLC2701 (the profile checker)
from colls.topology import GPU, NIC, SWITCH, Topology

SHAPES = ("DGX2", "NDv2", "HubAndSpoke", "custom")
# The DGX-1 hybrid cube mesh (NVIDIA V100 whitepaper; msccl-tools dgx1(); hardware/ndv2.yaml): the
# pairs with two NVLinks are TACCL's beta class [0], the other linked pairs class [1].
NDV2_DOUBLE = ((0, 1), (0, 4), (1, 3), (2, 3), (2, 6), (4, 5), (5, 7), (6, 7))
NDV2_SINGLE = ((0, 2), (0, 3), (1, 2), (1, 5), (3, 7), (4, 6), (4, 7), (5, 6))
# Microseconds per cost unit of TACCL's shipped profiles, by profiled chunk size (module docstring).
TIME_UNITS = {1 << 20: Fraction(1), 32 << 10: Fraction(1, 10), 1 << 10: Fraction(1, 100)}
_DEFAULT_NICS = {"DGX2": 8, "NDv2": 1}
_MODELS = {"DGX2": "V100-SXM3", "NDv2": "V100-SXM2", "HubAndSpoke": "V100", "custom": "V100"}
V100_SMS = 80
_SIZE_IN_NAME = re.compile(r"(?:^|[_\-.])(\d+)(B|KB|MB|GB)\Z", re.IGNORECASE)
_SIZE_UNITS = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}
_KEYS = ("name", "gpus_per_node", "nics_per_node", "alpha", "node_betas_list", "node_invbws_list",
         "remote_alpha", "remote_beta", "remote_invbw", "links", "betas", "invbws")
_CUSTOM_KEYS = ("links", "betas", "invbws")
_CLASS_KEYS = ("node_betas_list", "node_invbws_list")


def parse_json(source: str, text: str, depth: int = 64):
    """The JSON value in ``text``; CollsError naming ``source`` for a syntax error, a key given twice
    in one object, NaN/Infinity, a number too long to convert or nesting deeper than ``depth``."""
    def pairs(items):
        out = {}
        for k, v in items:
            if k in out:
                raise CollsError(f"JSON key {excerpt(k)} given twice in one object", source=source)
            out[k] = v
        return out

    def constant(name):
        raise CollsError(f"JSON value {name} is not a finite number", source=source)

    deepest = running = 0
    for ch in text:  # brackets inside strings count too: a conservative bound on the nesting
        if ch in "[{":
            running += 1
            deepest = max(deepest, running)
        elif ch in "]}":
            running -= 1
    if deepest > depth:
        raise CollsError(f"JSON nested deeper than {depth} levels", source=source)
    try:
        return json.loads(text, object_pairs_hook=pairs, parse_constant=constant)
    except json.JSONDecodeError as e:
        raise CollsError(f"JSON syntax error at line {e.lineno}, column {e.colno}: {e.msg}",
                         source=source) from None
    except (ValueError, RecursionError):  # an integer of more than 4300 digits
        raise CollsError("a value cannot be read: a number has too many digits", source=source) from None


def load_taccl_profile(path, shape: str | None = None, nodes: int = 1, *, chunk=None, time_unit=None,
                       sms: int | None = None) -> Topology:
    """Read a TACCL topology profile (JSON, unchanged) as a Topology of ``nodes`` copies of its node.

    Parameters
    ----------
    path : the profile file (read with :func:`colls.files.read_text`, at most 16 MB).
    shape : ``"DGX2"``, ``"NDv2"``, ``"HubAndSpoke"`` or ``"custom"`` (TACCL's node shapes), or None to
        infer it (module docstring).
    nodes : how many copies of the node to join through their NICs.
    chunk : the chunk size the costs were profiled at, bytes (int) or text like ``"1MB"``; default: read
        from the end of ``name`` (``"NDv2_1MB"``).
    time_unit : microseconds per cost unit of the file; default: TACCL's unit for its shipped sizes
        (1 MB: 1, 32 KB: 0.1, 1 KB: 0.01).
    sms : SMs per GPU; default 80 (the V100 of TACCL's machines).

    Returns
    -------
    A Topology passing ``validate()``; ``meta`` has ``profile``, ``description``, ``network``
    (``"single"``), ``shape``, ``chunk_bytes``, ``profiled_at`` and ``time_unit_us``.

    Raises
    ------
    CollsError naming the file and key (or ``--taccl-shape``, ``--nodes``) for any mistake.
    """
    source = str(path)
    data = parse_json(source, read_text(path, MAX_PROFILE_BYTES))
    check = _Checker(source)
    if not isinstance(data, dict):
        check.fail(None, f"a TACCL profile is a JSON object of keys (name, gpus_per_node, ...), got {_what(data)}")
    nodes = _whole(nodes, "--nodes", 1, MAX_NODES)
    check.mapping(data, "", required=("name", "gpus_per_node", "alpha"), optional=_KEYS)
    name = check.text(data["name"], "name")
    G = check.integer(data["gpus_per_node"], "gpus_per_node", 1)
    shape = _shape(check, data, shape, G)
    check_model_size(G, nodes)
    nbytes = _chunk(check, name, chunk)
    unit = _time_unit(check, nbytes, time_unit)
    sms = V100_SMS if sms is None else _whole(sms, "sms", 1, MAX_INT)

    def bandwidth(beta_value, key) -> Fraction:
        beta = check.number(beta_value, key)
        if beta <= 0:
            check.fail(key, f"beta must be > 0, got {_what(beta_value)}")
        bw = Fraction(nbytes) / (beta * unit) / 1000
        if not MIN_BANDWIDTH <= bw <= MAX_BANDWIDTH:
            check.fail(key, f"gives {float(bw):.6g} GB/s at {_size_text(nbytes)} chunks, outside "
                            f"{float(MIN_BANDWIDTH):g}..{float(MAX_BANDWIDTH):g} GB/s")
        return bw

    def latency(value, key) -> Fraction:
        lat = check.number(value, key)
        if lat < 0:
            check.fail(key, f"must be >= 0, got {_what(value)}")
        if lat * unit > MAX_LATENCY:
            check.fail(key, f"is {float(lat * unit):g} us, more than {float(MAX_LATENCY):g} us")
        return lat * unit

    alpha = latency(data["alpha"], "alpha")
    edges = _node_edges(check, data, shape, G, bandwidth)  # (src, dst, bw, count, cls) inside a node
    nics = remote = None
    if nodes > 1 or "nics_per_node" in data:
        if "nics_per_node" not in data and shape not in _DEFAULT_NICS:
            check.fail("nics_per_node", f"missing key: --nodes {nodes} needs the NICs of shape {shape}")
        nics = check.integer(data.get("nics_per_node", _DEFAULT_NICS.get(shape)), "nics_per_node", 1)
        if G % nics:
            check.fail("nics_per_node", f"{nics} NICs cannot serve {G} GPUs evenly (NIC j serves "
                                        f"gpus_per_node / nics_per_node GPUs)")
    for key in ("remote_alpha", "remote_beta"):
        if key not in data and nodes > 1:
            check.fail(key, f"missing key: --nodes {nodes} needs the inter-node costs")
    if "remote_beta" in data or "remote_alpha" in data:
        remote = (bandwidth(data["remote_beta"], "remote_beta") if "remote_beta" in data else None,
                  latency(data["remote_alpha"], "remote_alpha") if "remote_alpha" in data else None)
    if "remote_invbw" in data:
        latency(data["remote_invbw"], "remote_invbw")

    g = nx.DiGraph()
    model = _MODELS[shape]
    for n in range(nodes):
        for r in range(G):
            g.add_node(n * G + r, kind=GPU, node=n, local=r, model=model, sms=sms,
                       label=f"GPU {n * G + r} (node {n}, local {r})" if nodes > 1 else f"GPU {n * G + r}")
        if shape == "DGX2":
            hub = f"n{n}.nvswitch"
            g.add_node(hub, kind=SWITCH, node=n, label=f"node {n} switch nvswitch")
            for src, _, bw, count, cls in edges:
                _edge(g, n * G + src, hub, bw, count, alpha / 2, cls)
                _edge(g, hub, n * G + src, bw, count, alpha / 2, cls)
        else:
            for src, dst, bw, count, cls in edges:
                _edge(g, n * G + src, n * G + dst, bw, count, alpha, cls)
    if nodes > 1:
        bw, lat = remote
        g.add_node("net", kind=SWITCH, node=None, label="network switch")
        per = G // nics
        for n in range(nodes):
            for j in range(nics):
                tx, rx = f"n{n}.nic{j}.tx", f"n{n}.nic{j}.rx"
                g.add_node(tx, kind=NIC, node=n, nic=j, label=f"node {n} NIC {j} (out)")
                g.add_node(rx, kind=NIC, node=n, nic=j, label=f"node {n} NIC {j} (in)")
                _edge(g, tx, "net", bw, 1, lat / 4, "remote")
                _edge(g, "net", rx, bw, 1, lat / 4, "remote")
                for r in range(j * per, (j + 1) * per):
                    _edge(g, n * G + r, tx, bw, 1, lat / 4, "remote")
                    _edge(g, rx, n * G + r, bw, 1, lat / 4, "remote")
    at = _size_text(nbytes)
    topo = Topology(name if nodes == 1 else f"{name} x{nodes}", g, nodes, G, {
        "profile": source, "network": "single", "shape": shape, "chunk_bytes": nbytes, "profiled_at": at,
        "time_unit_us": float(unit),
        "description": f"TACCL profile {name}, shape {shape}, profiled at {at} (costs hold for {at} chunks)"})
    topo.validate(source)
    _check_reachable(check, topo, lambda a, b: "links" if shape == "custom" else None)
    return topo


# --- pieces ---------------------------------------------------------------------------------------------
def _whole(value, key: str, minimum: int, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise CollsError(f"must be a whole number {minimum}..{maximum}, got {excerpt(value)}", key=key)
    return value


def _shape(check: _Checker, data: dict, shape, G: int) -> str:
    """The node shape, given (``--taccl-shape``) or inferred from the keys; either way the shape's keys are
    then checked: all present, none of another shape's."""
    shape = _inferred_shape(check, data, G) if shape is None else _given_shape(shape)
    wrong = _CLASS_KEYS if shape == "custom" else _CUSTOM_KEYS
    for key in wrong:
        if key in data:
            check.fail(key, f"not a key of shape {shape} (custom takes links/betas/invbws, the others "
                            f"node_betas_list/node_invbws_list)")
    for key in (_CUSTOM_KEYS if shape == "custom" else _CLASS_KEYS):
        if key not in data:
            check.fail(key, f"missing key (shape {shape})")
    if shape == "NDv2" and G != 8:
        check.fail("gpus_per_node", f"shape NDv2 is the 8-GPU hybrid cube mesh, got {G} GPUs")
    return shape


def _inferred_shape(check: _Checker, data: dict, G: int) -> str:
    if "links" in data:
        return "custom"
    classes = data.get("node_betas_list")
    count = len(classes) if isinstance(classes, list) else None
    if G == 8 and count == 2:
        return "NDv2"
    if G == 16 and count == 1:
        return "DGX2"
    check.fail(None, f"cannot tell the node shape of {G} GPUs with "
                     f"{'no' if count is None else count} beta classes; give --taccl-shape "
                     f"({', '.join(SHAPES)})")


def _given_shape(shape) -> str:
    known = {s.lower(): s for s in SHAPES}
    if not isinstance(shape, str) or shape.lower() not in known:
        raise CollsError(f"unknown TACCL node shape {excerpt(shape)} (known: {', '.join(SHAPES)})",
                         key="--taccl-shape")
    return known[shape.lower()]


def _chunk(check: _Checker, name: str, chunk) -> int:
    if chunk is None:
        m = _SIZE_IN_NAME.search(name)
        if not m:
            check.fail("name", f"{excerpt(name)} does not end in the profiled chunk size (like NDv2_1MB); "
                               f"give the size (--taccl-chunk)")
        nbytes = int(m.group(1)) * _SIZE_UNITS[m.group(2).upper()]
    elif isinstance(chunk, str):
        from colls.sizes import parse_sizes
        sizes = parse_sizes(chunk, "--taccl-chunk")
        if len(sizes) != 1:
            raise CollsError(f"expected one size, got {excerpt(chunk)}", key="--taccl-chunk")
        nbytes = sizes[0]
    else:
        nbytes = _whole(chunk, "--taccl-chunk", 1, 1 << 40)
    if not 1 <= nbytes <= 1 << 40:
        check.fail("name", f"profiled chunk size {nbytes} bytes is outside 1 byte..1 TB")
    return nbytes


def _time_unit(check: _Checker, nbytes: int, time_unit) -> Fraction:
    if time_unit is None:
        if nbytes not in TIME_UNITS:
            check.fail("name", f"costs profiled at {_size_text(nbytes)}: give the microseconds per cost "
                               f"unit (--taccl-time-unit; TACCL's own files use 1 at 1MB, 0.1 at 32KB, "
                               f"0.01 at 1KB)")
        return TIME_UNITS[nbytes]
    try:
        unit = Fraction(str(time_unit)) if not isinstance(time_unit, bool) else None
    except (ValueError, ZeroDivisionError):
        unit = None
    if unit is None or not Fraction(1, 10**6) <= unit <= 10**6:
        raise CollsError(f"must be a number of microseconds from 1e-6 to 1e6, got {excerpt(time_unit)}",
                         key="--taccl-time-unit")
    return unit


def _node_edges(check: _Checker, data: dict, shape: str, G: int, bandwidth) -> list[tuple]:
    """The links inside one node: ``(src, dst, bw, count, cls)`` with local GPU indices."""
    if shape == "custom":
        return _custom_edges(check, data, G, bandwidth)
    betas = check.list(data["node_betas_list"], "node_betas_list", nonempty=True)
    invbws = check.list(data["node_invbws_list"], "node_invbws_list", nonempty=True)
    want = 2 if shape == "NDv2" else 1
    for key, values in (("node_betas_list", betas), ("node_invbws_list", invbws)):
        if len(values) != want:
            check.fail(key, f"shape {shape} has {want} link class{'es' if want > 1 else ''}, got "
                            f"{len(values)} values")
    for i, v in enumerate(invbws):
        if check.number(v, f"node_invbws_list[{i}]") < 0:
            check.fail(f"node_invbws_list[{i}]", f"must be >= 0, got {_what(v)}")
    bws = [bandwidth(b, f"node_betas_list[{i}]") for i, b in enumerate(betas)]
    if shape == "NDv2":
        out = []
        for cls, pairs, count in ((0, NDV2_DOUBLE, 2), (1, NDV2_SINGLE, 1)):
            for a, b in pairs:
                out += [(a, b, bws[cls], count, f"class{cls}"), (b, a, bws[cls], count, f"class{cls}")]
        return sorted(out)
    if shape == "DGX2":
        return [(r, None, bws[0], 1, "class0") for r in range(G)]
    return [(a, b, bws[0], 1, "class0") for a in range(G) for b in range(G) if a != b]


def _custom_edges(check: _Checker, data: dict, G: int, bandwidth) -> list[tuple]:
    mats = {}
    for key in _CUSTOM_KEYS:
        rows = check.list(data[key], key)
        if len(rows) != G:
            check.fail(key, f"must be {G} x {G} (gpus_per_node), got {len(rows)} rows")
        for i, row in enumerate(rows):
            check.list(row, f"{key}[{i}]")
            if len(row) != G:
                check.fail(f"{key}[{i}]", f"must have {G} entries (gpus_per_node), got {len(row)}")
        mats[key] = rows
    out = []
    for dst in range(G):
        for src in range(G):
            k = f"[{dst}][{src}]"
            count = check.integer(mats["links"][dst][src], "links" + k, 0)
            if check.number(mats["invbws"][dst][src], "invbws" + k) < 0:
                check.fail("invbws" + k, f"must be >= 0, got {_what(mats['invbws'][dst][src])}")
            if src == dst and count:
                check.fail("links" + k, "a GPU cannot link to itself (the diagonal must be 0)")
            if count:
                bw = bandwidth(mats["betas"][dst][src], "betas" + k)
                out.append((src, dst, bw * count, count, "custom"))
            else:
                check.number(mats["betas"][dst][src], "betas" + k)
    return sorted(out, key=lambda e: e[:2])


def _edge(g, u, v, bw, count, latency, cls) -> None:
    g.add_edge(u, v, bw=bw, count=count, latency=float(latency), cls=cls, efficiency=1.0)


def _size_text(nbytes: int) -> str:
    from colls.sizes import size_text
    return size_text(nbytes)
