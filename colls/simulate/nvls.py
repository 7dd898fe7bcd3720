"""NCCL's NVLS and NVLS-tree algorithms, timed in closed form.

NVLS reduces inside the NVSwitch (``multimem.ld_reduce``) and multicasts the result (``multimem.st``); no
MSCCL program can say that, so the discrete-event engine cannot run it. Its time is simple enough to write
down from the facts in :mod:`colls.runtimes.nccl`:

- **Bandwidth.** Each GPU's NVSwitch links carry the buffer once in each direction for allreduce, and the
  ``(n-1)/n`` of it that other GPUs own for allgather and reducescatter, at the links' bandwidth (times their
  class's ``efficiency``) times NCCL's NVLS efficiency and ``(channels - 1) / channels``.
- **Rounds.** The call runs in rounds of ``channels x GPUs`` chunks (NCCL's chunk shrinks for smaller calls);
  each round costs a fixed synchronization (:data:`~colls.runtimes.nccl.NVLS_ROUND_US`).
- **Latency.** NCCL's own NVLS latency, plus the host's part of the call (:mod:`colls.runtimes.costs`).
- **NVLS-tree** (several nodes, allreduce): inside each node as above; across nodes NCCL's double binary tree
  over the nodes' NICs. With two nodes each node sends and receives the buffer once over all its NICs; with
  more, a node inner in one tree and a leaf in the other carries it twice. The slower of the two parts
  sets the pace; each tree level adds NCCL's network latency of an NVLS-tree step and the route's latency.
"""

from __future__ import annotations

import math

from colls.collectives import busbw_factor
from colls.runtimes import nccl as facts
from colls.runtimes.costs import DEFAULT_LAUNCH, family_of
from colls.simulate import Timing
from colls.topology import NIC, SWITCH, Topology

KINDS_ONE_NODE = ("allreduce", "allgather", "reducescatter")


def nvls_reason(topology: Topology, kind: str) -> str | None:
    """Why NCCL would not run NVLS (or NVLS-tree) for ``kind`` on this machine, or None when it would."""
    fam = family_of(topology.gpu_model())
    if fam.name not in facts.NVLS_FAMILIES:
        return f"NVLS needs NVLink SHARP (Hopper or later), not {fam.name}"
    nodes = _nodes(topology)
    if kind not in KINDS_ONE_NODE or (len(nodes) > 1 and kind != "allreduce"):
        return f"NCCL runs NVLS for allreduce, and for allgather and reducescatter on one node; not {kind}" + (
            f" on {len(nodes)} nodes" if kind in KINDS_ONE_NODE else "")
    per_node = min(len(g) for g in nodes.values())
    if per_node < facts.NVLS_MIN_GPUS:
        return f"NVLS needs at least {facts.NVLS_MIN_GPUS} GPUs per node"
    for gpus in nodes.values():
        for g in gpus:
            if _switch_gbps(topology, g) <= 0:
                return f"GPU {g} has no NVSwitch link: NVLS needs every GPU behind one switch"
    return None


class Nvls:
    """NCCL's NVLS (one node) or NVLS-tree (several nodes) for ``kind`` on ``topology``; :meth:`time` per size."""

    def __init__(self, topology: Topology, kind: str, *, launch: str = DEFAULT_LAUNCH):
        reason = nvls_reason(topology, kind)
        if reason:
            from colls.errors import CollsError
            raise CollsError(reason, key="--baseline")
        self.topology, self.kind = topology, kind
        nodes = _nodes(topology)
        self.nnodes = len(nodes)
        self.per_node = min(len(g) for g in nodes.values())
        fam = family_of(topology.gpu_model())
        self.host_us = fam.host_us[launch]
        ch = facts.NVLS_CHANNELS
        gbps = min(_switch_gbps(topology, g) for gs in nodes.values() for g in gs)
        self.rate = gbps * facts.NVLS_EFFICIENCY * (ch - 1) / ch * 1000.0          # bytes per us
        self.share = 1.0 if kind == "allreduce" else (self.per_node - 1) / self.per_node
        self.net_rate = None
        self.net_lat = 0.0
        if self.nnodes > 1:
            nic = min(_nic_gbps(topology, n) for n in nodes)
            self.net_rate = nic * 1000.0 / (1.0 if self.nnodes == 2 else 2.0)
            levels = math.ceil(math.log2(self.nnodes))
            self.net_lat = 2 * levels * (facts.NVLS_TREE_NET_LAT_US + _net_route_us(topology, nodes))
        self.label = "NCCL nvls" if self.nnodes == 1 else "NCCL nvls-tree"

    def chunk(self, size: int) -> int:
        concurrent = facts.NVLS_CHANNELS * self.per_node
        chunk = facts.NVLS_CHUNK
        for times, smaller in facts.NVLS_CHUNK_STEPS:
            if size < times * concurrent * facts.NVLS_CHUNK:
                chunk = smaller
                break
        if self.nnodes >= 4:
            chunk = min(chunk, facts.NVLS_TREE_MAX_CHUNK_4_NODES)
        return chunk

    def time(self, size: int, bound=None, beat=None) -> Timing:   # noqa: ARG002 (the timers' common signature)
        chunk = self.chunk(size)
        rounds = max(1, math.ceil(size / (facts.NVLS_CHANNELS * self.per_node * chunk)))
        move = size * self.share / self.rate
        if self.net_rate is not None:
            move = max(move, size / self.net_rate)
        t_us = self.host_us + facts.NVLS_LAT_US + self.net_lat + move + rounds * facts.NVLS_ROUND_US
        algbw = size / t_us / 1000.0
        t = Timing(size, True, None, t_us, algbw, algbw * busbw_factor(self.kind, self.topology.ngpus),
                   label=self.label,
                   extra={"channels": facts.NVLS_CHANNELS, "protocol": "Simple", "chunk_bytes": chunk,
                          "rounds": rounds})
        # no bound_pct: colls bound is the optimum of schedules of sends; reducing in the switch is not one
        return t


def _nodes(topology: Topology) -> dict:
    out: dict = {}
    for g in topology.gpus:
        out.setdefault(topology.node_of(g), []).append(g)
    return out


def _switch_gbps(topology: Topology, gpu: int) -> float:
    """The GPU's bandwidth into NVSwitches (GB/s, after the link classes' efficiency)."""
    g = topology.graph
    return sum(float(d["bw"]) * d.get("efficiency", 1.0) for _, v, d in g.out_edges(gpu, data=True)
               if g.nodes[v]["kind"] == SWITCH)


def _nic_gbps(topology: Topology, node) -> float:
    """A node's NICs' bandwidth out (GB/s): what NCCL's tree over the nodes can use."""
    g = topology.graph
    total = 0.0
    for v, data in g.nodes(data=True):
        if data["kind"] == NIC and data.get("node") == node and str(v).endswith(".tx"):
            total += max((float(d["bw"]) * d.get("efficiency", 1.0) for _, _, d in g.out_edges(v, data=True)),
                         default=0.0)
    return total


def _net_route_us(topology: Topology, nodes: dict) -> float:
    """The latency of a route from the first GPU of one node to the first GPU of the next."""
    keys = sorted(nodes)
    a, b = nodes[keys[0]][0], nodes[keys[1]][0]
    route = topology.route(a, b)
    return topology.route_latency(route) if route else 0.0


__all__ = ["Nvls", "nvls_reason"]
