"""Small hand-built Topology fixtures for the synthesis tests, and two checks both method test modules use.

They follow the loader's conventions: rank = node * G + local; the in-node switch is ``"n{n}.{name}"``;
NIC j of node n is ``"n{n}.nic{j}.tx"`` / ``".rx"`` (kind ``nic``); rail leaves ``"rail{j}"`` joined by a
``"spine"`` (leaf <-> spine = the sum of the leaf's NICs), or one ``"net"`` switch. Link matrices are the
ones the shipped profiles cite (msccl-tools' dgx1() for NDv2, ForestColl's for MI250); the other numbers
are test values shaped like the shipped machines (per direction, GB/s), not measurements.
"""

from __future__ import annotations

from fractions import Fraction

import networkx as nx

from colls.topology import Topology

# Azure NDv2 / DGX-1V hybrid cube mesh, NVLink multiplicities (row = from, column = to); NVIDIA's V100
# whitepaper, and dgx1() in microsoft/msccl-tools msccl/topologies/nvidia.py
NDV2 = [
    [0, 2, 1, 1, 2, 0, 0, 0],
    [2, 0, 1, 2, 0, 1, 0, 0],
    [1, 1, 0, 2, 0, 0, 2, 0],
    [1, 2, 2, 0, 0, 0, 0, 1],
    [2, 0, 0, 0, 0, 2, 1, 1],
    [0, 1, 0, 0, 2, 0, 1, 2],
    [0, 0, 2, 0, 1, 1, 0, 2],
    [0, 0, 0, 1, 1, 2, 2, 0],
]

# MI250 node, 16 GCDs, xGMI multiplicities: mi250_topology() in ForestColl (liangyuRain/ForestColl,
# topologies.py)
MI250 = [
    [0, 4, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0],
    [4, 0, 0, 0, 0, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0],
    [0, 0, 0, 4, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0],
    [0, 0, 4, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0],
    [2, 0, 0, 0, 0, 4, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    [0, 1, 0, 0, 4, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0],
    [0, 0, 1, 0, 1, 1, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0],
    [0, 0, 0, 2, 0, 1, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    [1, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 2, 0, 0, 0],
    [0, 1, 1, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 1, 0, 0],
    [0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 1, 0],
    [0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 2],
    [0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 4, 1, 0],
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 4, 0, 1, 1],
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 0, 4],
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1, 4, 0],
]

# A 4-GPU NVLink mesh where every pair is linked, two pairs doubly
MESH4 = [
    [0, 2, 1, 1],
    [2, 0, 1, 1],
    [1, 1, 0, 2],
    [1, 1, 2, 0],
]


def _gpu(g: nx.DiGraph, rank: int, node: int, local: int, sms: int = 80) -> None:
    g.add_node(rank, kind="gpu", node=node, local=local, model="test", sms=sms, label=f"GPU {rank}")


def _link(g: nx.DiGraph, u, v, bw, cls: str, count: int = 1, latency: float = 0.5,
          both: bool = False) -> None:
    for a, b in ((u, v), (v, u)) if both else ((u, v),):
        g.add_edge(a, b, bw=Fraction(bw), latency=latency, cls=cls, count=count)


def _node_switch(g, node: int, gpn: int, bw) -> None:
    sw = f"n{node}.nvswitch"
    g.add_node(sw, kind="switch", node=node, label=f"node {node} NVSwitch")
    for j in range(gpn):
        _gpu(g, node * gpn + j, node, j)
        _link(g, node * gpn + j, sw, bw, "nvswitch", both=True)


def _node_mesh(g, node: int, matrix, per_link) -> None:
    gpn = len(matrix)
    for j in range(gpn):
        _gpu(g, node * gpn + j, node, j)
    for a, row in enumerate(matrix):
        for b, m in enumerate(row):
            if m:
                _link(g, node * gpn + a, node * gpn + b, Fraction(per_link) * m, "nvlink", m)


def switch_node(n: int = 8, bw=150) -> Topology:
    """One node of ``n`` GPUs on one non-blocking switch, ``bw`` GB/s per GPU port."""
    g = nx.DiGraph()
    _node_switch(g, 0, n, bw)
    return Topology(f"switch{n}", g, 1, n)


def mesh_node(matrix, per_link=25, name: str = "mesh") -> Topology:
    """One node whose GPUs are joined by direct links: ``matrix[a][b]`` links of ``per_link`` GB/s."""
    g = nx.DiGraph()
    _node_mesh(g, 0, matrix, per_link)
    return Topology(name, g, 1, len(matrix))


def ndv2() -> Topology:
    return mesh_node(NDV2, 25, "ndv2")


def mi250() -> Topology:
    return mesh_node(MI250, 50, "mi250")


def _nics(g, nodes: int, gpn: int, serves, nic_bw, rails: bool) -> None:
    """NIC j of every node serves the local GPUs ``serves[j]``; rails + spine, or one "net" switch."""
    if not rails:
        g.add_node("net", kind="switch", node=None, label="network switch")
    for j, locals_ in enumerate(serves):
        leaf = f"rail{j}" if rails else "net"
        if rails:
            g.add_node(leaf, kind="switch", node=None, label=f"rail {j}")
        for n in range(nodes):
            tx, rx = f"n{n}.nic{j}.tx", f"n{n}.nic{j}.rx"
            g.add_node(tx, kind="nic", node=n, nic=j)
            g.add_node(rx, kind="nic", node=n, nic=j)
            for local in locals_:
                _link(g, n * gpn + local, tx, nic_bw, "pcie")
                _link(g, rx, n * gpn + local, nic_bw, "pcie")
            _link(g, tx, leaf, nic_bw, "ib")
            _link(g, leaf, rx, nic_bw, "ib")
    if rails and len(serves) > 1:
        g.add_node("spine", kind="switch", node=None, label="spine")
        for j in range(len(serves)):
            _link(g, f"rail{j}", "spine", Fraction(nic_bw) * nodes, "ib-spine", nodes, both=True)


def rail_cluster(nodes: int = 2, gpn: int = 4, nvs=300, nic=25) -> Topology:
    """DGX A100-like: switch nodes, one NIC per GPU, NIC j of every node on rail j."""
    g = nx.DiGraph()
    for n in range(nodes):
        _node_switch(g, n, gpn, nvs)
    _nics(g, nodes, gpn, [[j] for j in range(gpn)], nic, rails=True)
    return Topology(f"rails{nodes}x{gpn}", g, nodes, gpn)


def shared_nic_cluster(nodes: int = 2, gpn: int = 8, nvs=150, nic=Fraction(25, 2)) -> Topology:
    """DGX-2-like: switch nodes, NIC j serves local GPUs 2j and 2j+1, rails + spine."""
    g = nx.DiGraph()
    for n in range(nodes):
        _node_switch(g, n, gpn, nvs)
    _nics(g, nodes, gpn, [[2 * j, 2 * j + 1] for j in range(gpn // 2)], nic, rails=True)
    return Topology(f"shared{nodes}x{gpn}", g, nodes, gpn)


def ndv2_cluster(nodes: int = 2) -> Topology:
    """NDv2 meshes with one NIC per node shared by all 8 GPUs, every NIC on one switch."""
    g = nx.DiGraph()
    for n in range(nodes):
        _node_mesh(g, n, NDV2, 25)
    _nics(g, nodes, 8, [list(range(8))], Fraction(25, 2), rails=False)
    return Topology(f"ndv2x{nodes}", g, nodes, 8)


# --- checks both method test modules use -----------------------------------------------------------------
def assert_routes_physical(topology: Topology, schedule) -> None:
    """Every remote op carries the topology's route for its pair, and that route is a path of links."""
    for op in schedule.ops:
        if op.local:
            assert op.route == (), op.describe()
            continue
        assert op.route and op.route == topology.route(op.src, op.dst), op.describe()
        assert op.route[0] == op.src and op.route[-1] == op.dst
        for u, v in zip(op.route, op.route[1:]):
            assert topology.graph.has_edge(u, v), (op.describe(), u, v)


def instructions_per_threadblock(schedule) -> dict:
    """(rank, lane) -> instructions the lowering needs at least: one per receive, one per local op and
    one per send that does not forward what the rank received just before (``rcs``/``rrs`` fusion)."""
    from collections import defaultdict

    count: dict = defaultdict(int)
    received: dict = defaultdict(set)  # (rank, lane) -> slots received and not yet sent on
    by_step: dict = defaultdict(list)
    for op in schedule.ops:
        by_step[op.step].append(op)
    for step in sorted(by_step):
        ops = by_step[step]
        for op in ops:
            if op.local:
                count[op.src, op.lane] += 1
                continue
            slot = (op.src_buf, op.src_index, op.count)
            if slot in received[op.src, op.lane]:
                received[op.src, op.lane].discard(slot)
            else:
                count[op.src, op.lane] += 1
        for op in ops:
            if not op.local:
                count[op.dst, op.lane] += 1
                received[op.dst, op.lane].add((op.dst_buf, op.dst_index, op.count))
    return dict(count)
