"""What NCCL does by itself: its ring and tree algorithms, laid out for the engine as NCCL's kernels run them.

To show what the runtime would do without an MSCCL file, NCCL's own algorithms run on the same engine as the
files: the ring and the tree as NCCL's kernels run them (:func:`ring_machine`, :func:`tree_machine`), and
as verified MSCCL programs (:func:`nccl_program`: the tests hold the ring kernel to the file step for step,
and check the trees' shapes on the tree's file form).

What NCCL does
--------------
All file paths are in github.com/NVIDIA/nccl.

*Channels.* NCCL cuts every call across its channels (one SM each); a channel runs its own ring or tree
concurrently with the others and owns its slice of the buffer (``src/device/all_reduce.h``: channel
``bid`` handles ``gridOffset + bid * chunkSize``). The topology search finds a set of channels and
``ncclTopoPreset``/``ncclTopoPostset`` (``src/graph/connect.cc``) run each of them twice: channel ``c``
and channel ``c + nChannels``.

*Ring.* Each channel is one ring over all ranks (``src/graph/rings.cc`` builds the rank order from each
rank's ring ``prev``/``next``). Within a channel the allreduce is a reduce-scatter then an allgather,
2(N-1) steps, pipelined chunk by chunk (``runRing`` in ``src/device/all_reduce.h``: ``send``, N-2
``recvReduceSend``, ``directRecvReduceCopySend``, N-2 ``directRecvCopySend``, ``directRecv``).
Allgather, reducescatter, broadcast and reduce run on the same rings (broadcast and reduce as a chain
from or to the root); ``src/graph/tuning.cc`` allows only the ring for broadcast and reduce.
Inside a node the ring follows NVLink; across nodes it enters and leaves each node through a NIC
(``src/graph/search.cc``, "Search Patterns": ``NET n -> GPU a -> .. -> GPU x -> NET n (or m if
crossNic)``), and the search gives different channels different NICs (``ncclTopoSearchRecNet`` tries
each NET in turn), so the channels spread over the rails. Alltoall is not a ring in NCCL: it is grouped
point-to-point sends and receives, every rank to every other rank.

*Tree (allreduce).* NCCL builds a double binary tree over the *nodes* (``ncclGetDtree`` in
``src/graph/trees.cc``): tree 0 is ``ncclGetBtree``'s binary tree rooted at node 0, tree 1 its mirror
(``nNodes - 1 - node``; for an odd node count a shift by one), so that each node is an interior vertex
in at most one tree and a leaf in the other (NVIDIA, "Massively Scale Your Deep Learning Training with
NCCL 2.4", developer blog, 2019). That holds exactly for an even node count; with an odd one the shift
leaves node 0 (tree 0's root, which has one child there) interior in tree 1 as well.
Inside a node the tree is a chain through the node's GPUs (search pattern ``Tree: NET n -> GPU a ->
GPU b -> .. -> GPU x`` with ``GPU a`` also sending to ``NET n``): the chain's first GPU is the node's
contact with the parent node and the child nodes (``NCCL_TOPO_PATTERN_TREE``, "All NIC traffic going
to/from the same GPU", ``src/include/graph.h``; ``connectTrees`` in ``src/graph/connect.cc``), and each
GPU's parent in the chain is the one before it.
With one node the tree is just the chain. Channel ``c`` runs tree 0 and its copy ``c + nChannels`` runs
tree 1 over the same chain (``connectTrees``), so the data is split in half between the two trees. Each
half is reduced up the tree to the root and broadcast back down, pipelined chunk by chunk: ``runTreeSplit``
in ``src/device/all_reduce.h`` runs ``recvReduceSend`` up and ``directRecvCopySend`` down at once in one
channel, many chunks in flight, the root doing ``directRecvReduceCopySend``.

How the programs are built
--------------------------
*Ring.* NCCL's ring kernel for allreduce, allgather and reduce-scatter (:func:`ring_machine`, written out by
:func:`ring_program`): one threadblock per rank and channel running ``runRing``'s primitives, over the
rings of colls' ring planner (:func:`ring_orders`, one ring per channel: NVLink inside a node, one NIC out
and one NIC in per node, different channels on different rails; the tests check this on DGX A100 x2).
Where a ring fits a file (3 to 32 ranks) this is step for step the program colls' ring method lowers
and proves (tested); beyond, NCCL's kernel has no step limit and neither has its model. (With two ranks
the file's allgather and reduce-scatter send and receive on two threadblocks; NCCL's kernel, like this
model, runs both on one.) Broadcast and
reduce are colls' ring method with one ring per channel (:func:`nccl_program`). Alltoall is grouped
point-to-point sends (:func:`_p2p_program`: every rank sends each peer its block straight, cut over the
channels); on a fabric where some pair has no route (NDv2's hybrid
cube mesh, MI250's GCDs) it is colls' ring alltoall, which relays those pairs over NVLink, out-of-place as
NCCL's is. NCCL too crosses two NVLinks there: a pair whose path goes through another GPU
(``ncclTopoCheckP2p`` gives an ``intermediateRank``) gets a P2P connection whose buffers live on that GPU,
written by the sender and read by the receiver ("via P2P/indirect", NVIDIA/nccl src/transport/p2p.cc,
``p2pSendSetup``/``p2pRecvSetup``); unlike the model it spends no threadblock on the GPU in between and takes
the path's GPU, not the least loaded one. (Made for in-place calls too, the model staged blocks in scratch
that NCCL's sends never stage, and charged the runtime for them: 2 x MI250 at 16 MB 1,102 us against 641, at 1 GB
44.8 ms against 33.7).

*Tree.* NCCL's tree kernel (:func:`tree_machine`, ``runTreeSplit``): per channel a pair of trees, each on
a block of its own (lane ``2c`` tree 0, lane ``2c + 1`` tree 1: NCCL's channels ``c`` and ``c + nChannels``),
each lane owning one chunk column. Each tree's block is two thread groups (:func:`_tree_groups`): the up
group receives from all the GPU's children at once, reduces with its input and sends to the parent, the
down group receives from the parent and sends to all children at once; the root's block does both in one
primitive. The engine runs a group as one threadblock with several peers (a step waits for every peer's
message or slot). Messages are NCCL's tree messages: one slot of the connection's buffer (512 KB with
Simple's default buffer, eight in flight; :func:`colls.runtimes.nccl.tree_chunk_bytes`). The file form
(:func:`tree_schedule`, :func:`nccl_program`) writes the same trees as an MSCCL program, a threadblock per
peer (the tests prove it and check the trees' shapes); the baseline times the kernel's form.
Channel ``c``'s chain starts at a GPU on NIC rail ``c`` (mod the rails; GPUs sharing a rail take turns)
and follows the node's best Hamiltonian path from there (:func:`colls.synth.ring.best_tour`).

Where these programs differ from NCCL
-------------------------------------
- Channel count: NCCL runs every searched channel twice (``c`` and ``c + nChannels``). The ring
  models run ``channels`` rings (one channel each, no duplicates; :func:`nccl_program`'s ring, a file,
  cuts a ring whose steps exceed a threadblock's limit into step segments on channels of their own); the
  tree programs run ``channels`` pairs of trees, ``2 x channels`` MSCCL channels.
- Ring crossings: NCCL computes one graph per node and uses it on every node, so a channel enters and
  leaves each node through the same NIC (``NET n ... NET n``) and the GPUs by that NIC. colls' profiles
  attach one NIC per GPU (DGX A100) and have no PCIe switch shared by two GPUs, so colls' ring enters a
  node on rail ``j`` and leaves it on rail ``j + 1``, alternating between nodes so every inter-node hop
  stays on one rail (see :mod:`colls.synth.ring`): the same one NIC out and one NIC in per node and
  channel, on a different pair of GPUs.
- Tree pattern: NCCL's tree search starts from ``NCCL_TOPO_PATTERN_BALANCED_TREE`` (``src/init.cc``;
  the parent and the children on two GPUs near the NIC) and tries the simpler ``SPLIT_TREE`` and
  ``TREE`` when it finds no channel (``ncclTopoCompute``, "Try a simpler tree"); these programs use
  ``TREE`` (one GPU per node and channel talks to the network).
- Tree groups: NCCL splits one block's threads between the up and down groups (Simple: 384 and 256 of
  640, LL and LL128: 70 % up); the model gives each group that share of a threadblock's copy rate (the rate
  taken as proportional to the threads), and a group with several peers moves each peer's bytes at that
  rate in parallel. RCCL's split is taken to be NCCL's (not checked against its source).
- Channels: on several nodes the runtime's channels are those its topology search finds through the NICs
  (:func:`runtime_channels`); on one node the baseline takes the fastest count up to 32. Each call then
  runs on as many of them as NCCL's per-call rule gives (:func:`colls.runtimes.nccl.call_channels`).
- Messages: the ring's are a file's (a Simple message of four slots, two in flight), where NCCL's ring
  moves slices of two slots, four in flight.
- Alltoall: NCCL's point-to-point scheduler spreads peers over channels per round; here every channel
  carries a slice of every pair's block.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from colls import lower as lowering
from colls import verify
from colls.collectives import Collective
from colls.errors import CollsError, LimitError
from colls.pipeline import compile_schedule
from colls.program import PROTOCOLS, Gpu, Program, Step, Threadblock
from colls.schedule import TRANSIENT, Op, Schedule
from colls.synth.common import checked_route
from colls.synth.ring import best_tour
from colls.runtimes import Target, get_target
from colls.runtimes import nccl as nccl_facts
from colls.topology import NIC, Topology

if TYPE_CHECKING:
    from colls.simulate.engine import Machine

ALGORITHMS = ("ring", "tree")
METHOD = "nccl-tree"


def nccl_program(topology: Topology, collective: Collective, algorithm: str, *, channels: int,
                 proto: str = "Simple", target: str = "exe") -> Program:
    """NCCL's own ``algorithm`` for ``collective`` on ``topology`` with ``channels`` channels, as a
    verified Program.

    Parameters
    ----------
    topology : the machine (:func:`colls.inputs.hardware.load_topology`).
    collective : the :class:`~colls.collectives.Collective`; broadcast and reduce use its root.
    algorithm : ``"ring"`` (every collective; alltoall as all-pairs sends) or ``"tree"`` (allreduce
        only: the double binary tree).
    channels : NCCL channels: rings for ``"ring"`` (``channels`` MSCCL channels, or a multiple of it where
        the lowering cuts a long ring into step segments, from 8 DGX A100 nodes on), pairs of trees for
        ``"tree"`` (``2 x channels`` MSCCL channels).
    proto : ``"Simple"``, ``"LL128"`` or ``"LL"``, the program's protocol.
    target : the runtime whose contract the program is proven against (``exe``, ``rccl``, ``old``).

    Returns the program, proven by :func:`colls.verify.verify` for ``target`` (in-place and out-of-place
    calls) with no error.

    Raises
    ------
    CollsError
        One line naming the option: ``--baseline`` for an unknown algorithm or the tree for anything but
        allreduce, ``--channels`` for a channel count outside 1 .. the target's channel limit (halved for
        the tree's pairs) or a program that does not fit the target, ``--proto``, ``--target``.
    """
    tgt = get_target(target)
    if algorithm not in ALGORITHMS:
        raise CollsError(f"unknown NCCL algorithm {algorithm!r} (choose from {', '.join(ALGORITHMS)})",
                         key="--baseline")
    if algorithm == "tree" and collective.kind != "allreduce":
        raise CollsError(f"NCCL's tree runs allreduce only, not {collective.kind}; use ring",
                         key="--baseline")
    per_channel = 2 if algorithm == "tree" else 1
    most = tgt.max_channels // per_channel
    if isinstance(channels, bool) or not isinstance(channels, int) or not 1 <= channels <= most:
        what = " (each a pair of trees on two MSCCL channels)" if per_channel == 2 else ""
        raise CollsError(f"NCCL {algorithm} on {tgt.name} takes 1..{most} channels{what}, got {channels!r}",
                         key="--channels")
    if proto not in PROTOCOLS:
        raise CollsError(f"unknown protocol {proto!r} (choose from {', '.join(PROTOCOLS)})", key="--proto")
    try:
        if algorithm == "tree":
            return _tree_program(topology, collective, channels, proto, tgt)
        if collective.kind == "alltoall":
            routed = all(topology.route(a, b) is not None for a in topology.gpus for b in topology.gpus
                         if a != b)
            if routed:
                return _p2p_program(topology, collective, channels, proto, tgt)
            # out-of-place, as NCCL's alltoall (grouped sends between two buffers): no block staged in scratch
            return compile_schedule(topology, collective, "ring", instances=channels, proto=proto,
                                    target=target, in_memory=True, mode="outofplace").program
        return compile_schedule(topology, collective, "ring", options={"rings": channels}, proto=proto,
                                target=target, in_memory=True).program
    except LimitError as e:
        raise CollsError(f"NCCL {algorithm} {collective.kind} with {channels} channels does not fit "
                         f"{tgt.name}: {e}; try fewer channels", key="--channels") from None


# --------------------------------------------------------------------------------------------------------
# The ring, as NCCL runs it
# --------------------------------------------------------------------------------------------------------
NATIVE_RING = ("allreduce", "allgather", "reducescatter")


def ring_orders(topology: Topology, kind: str, counts, searched: int | None = None) -> dict[int, list[tuple]]:
    """The rank order of each ring NCCL's ring runs with ``count`` channels, for every count in ``counts``:
    colls' ring planner (:mod:`colls.synth.ring`; one ring per channel, NVLink inside a node, one NIC out
    and one in per node, channels spread over the rails), asked once for all counts, each node's part
    then taken in NCCL's order on a switch node (:func:`_neighbours_first`).

    ``searched``: the most rings the runtime's search finds (:func:`searched_rings`); a count above it runs
    them again on the channels after them (channel ``j`` runs ring ``j mod searched``), as the runtime's
    channels beyond the searched ones copy them."""
    from colls.synth.ring import _Planner
    counts = sorted(set(counts))
    distinct = {k: k if searched is None else min(k, searched) for k in counts}
    wanted = tuple(sorted(set(distinct.values())))
    sets = topology.derived(("nccl ring sets", wanted), lambda: _Planner(topology).ring_sets(list(wanted)))
    switched = {r: group for group in _nodes(topology) if _all_switched(topology, group) for r in group}
    out = {}
    for k in counts:
        d = distinct[k]
        fewer = [c for c in sets if c <= d]
        if d not in sets and (d == k or not fewer):
            continue                    # the planner leaves out a count that carries no more than a smaller one
        rings = [_neighbours_first(ring.order, switched) for ring in sets[d if d in sets else max(fewer)]]
        out[k] = [rings[j % len(rings)] for j in range(k)]
    return out


def even_rings(topology: Topology) -> int:
    """How many rings load a one-node dense mesh's links alike (its link-disjoint Hamiltonian cycles,
    :meth:`colls.synth.ring._Planner._disjoint`), or 0 where the planner has no such set (switches, sparse
    meshes, several nodes)."""
    from colls.synth.ring import _Planner
    if len(_nodes(topology)) != 1:
        return 0
    return len(topology.derived(("disjoint rings",), lambda: _Planner(topology)._disjoint()))


def searched_rings(topology: Topology, tgt: Target, channels: int) -> int:
    """The most distinct rings the runtime's own ring runs on ``channels`` channels at most: its topology
    search finds at most half of them and every channel after the searched ones runs a searched ring again.
    NCCL (``src/init.cc``: ``ringGraph->maxChannels = MAXCHANNELS/2``; ``src/graph/connect.cc``
    ``ncclTopoPostset``: "Duplicate channels rings/trees", channel ``c + nChannels`` gets channel ``c``'s
    ring prev and next, then ``nChannels*2``) and RCCL (the same ``ncclTopoPostset``, its duplication factor
    ``nc`` 2, and 4 on a single MI250 node: ``src/init.cc`` ``allGather3Data[rank].nc``, see
    :data:`colls.runtimes.rccl.SINGLE_NODE_RING_COPIES`). On a dense mesh whose links ``d`` rings load alike
    (:func:`even_rings`), a multiple of ``d``: the search keeps the rings that fit the links at its speed, as
    RCCL's for 8 MI300X (ROCm/rccl src/graph/rome_models.cc, rome_model_79: 14 rings, each xGMI link in two,
    on 28 channels), which no power of two balances over a GPU's 7 links."""
    most = channels // ring_copies(topology, tgt)
    d = even_rings(topology)
    if d > 1 and most >= d:
        most -= most % d
    return max(1, most)


def ring_copies(topology: Topology, tgt: Target) -> int:
    """The runtime's duplication factor of its searched rings on ``topology`` (see :func:`searched_rings`)."""
    copies = tgt.ring_copies
    if len(_nodes(topology)) == 1:
        copies = dict(tgt.single_node_ring_copies).get(topology.gpu_model(), copies)
    return copies


def runtime_channels(topology: Topology, tgt: Target) -> int | None:
    """``comm->nChannels`` of the runtime's ring and tree on ``topology`` when the network sets it (several
    nodes, a runtime whose search is NCCL's: :func:`colls.runtimes.nccl.net_channels`, from the NICs of one
    node and the GPUs' paths to them), else None: on one node the search follows the NVLink or xGMI fabric,
    and the model takes the fastest channel count."""
    from colls.runtimes.costs import family_of
    nodes = _nodes(topology)
    if len(nodes) < 2 or not tgt.net_search:
        return None
    g = topology.graph
    home = set(nodes[0])
    paths = []
    for v in topology.vertices():
        if topology.kind(v) != NIC or topology.node_of(v) != 0:
            continue
        into = [float(g.edges[u, v]["bw"]) for u in g.predecessors(v) if u in home]
        out = [float(g.edges[v, w]["bw"]) for w in g.successors(v) if topology.node_of(w) != 0]
        if into and out:
            paths.append(min(max(into), max(out)))
    if not paths:
        return None
    return nccl_facts.net_channels(paths, family_of(topology.gpu_model()).name == "Hopper", tgt.ring_copies)


def _all_switched(topology: Topology, group: list[int]) -> bool:
    """Every GPU of the node reaches every other through a switch (an NVSwitch node), none directly."""
    return len(group) > 2 and all(
        (r := topology.route(a, b)) is not None and len(r) > 2 for a in group for b in group if a != b)


def _turned(group: list[int], start: int) -> tuple:
    """The GPUs of a switch node in index order from position ``start``, round the node: NCCL's search on a
    switch node goes to the next GPU by index first."""
    return tuple(group[(start + j) % len(group)] for j in range(len(group)))


def _neighbours_first(order: tuple, switched: dict) -> tuple:
    """A ring's order with each switch node's part rebuilt as NCCL's search builds it: from the GPU the ring
    enters the node by, the next GPU is the one after it by index (``ncclTopoSearchNextGpuSort`` in
    ``src/graph/search.cc``: "NVSwitches prefer when we talk to a limited set of peers. Try to use
    neighbors first", next then previous GPU for rings), around the node, the GPU the ring leaves by last.
    Every ring of a channel set then has the same shape turned by its entry, as NCCL's channels do."""
    out, i = [], 0
    while i < len(order):
        group = switched.get(order[i])
        if group is None:
            out.append(order[i])
            i += 1
            continue
        part = order[i:i + len(group)]
        entry, leave = part[0], part[-1]
        out += [r for r in _turned(group, group.index(entry)) if r != leave] + [leave]
        i += len(group)
    return tuple(out)


def _ring_types(kind: str, n: int) -> list[str]:
    """The steps of one rank of one ring, NCCL's ``runRing`` primitives (``src/device/all_reduce.h``,
    ``all_gather.h``, ``reduce_scatter.h``): allreduce sends, receives-reduces-sends N-2 times, then
    receives-reduces-copies-sends, receives-copies-sends N-2 times and receives; allgather sends its block
    and passes the others on; reduce-scatter reduces along the ring into its own block."""
    if kind == "allreduce":
        return ["s"] + ["rrs"] * (n - 2) + ["rrcs"] + ["rcs"] * (n - 2) + ["r"]
    if kind == "allgather":
        return ["s"] + ["rcs"] * (n - 2) + ["r"]
    return ["s"] + ["rrs"] * (n - 2) + ["rrc"]


def _ring_header(topology: Topology, kind: str, rings: int, proto: str, tgt: Target) -> Program:
    n = topology.ngpus
    return Program(f"nccl-ring-{kind}-{topology.name.replace(' ', '')}", tgt.coll_name(kind), n, n * rings,
                   rings, proto, 1, 1, 0, 0, [])


def _ring_threadblocks(kind: str, orders: list[tuple]):
    """Each rank's threadblocks for NCCL's ring over ``orders``, without steps: (rank, ring, position,
    its threadblock on the ring's channel, and for allgather the local copy's threadblock after it, else
    None), ids numbered per rank in ring order."""
    count: dict = defaultdict(int)
    for ring, order in enumerate(orders):
        n = len(order)
        for p, rank in enumerate(order):
            tb = Threadblock(count[rank], send=order[(p + 1) % n], recv=order[(p - 1) % n], chan=ring)
            copy = Threadblock(count[rank] + 1, chan=ring) if kind == "allgather" else None
            count[rank] += 2 if copy is not None else 1
            yield rank, ring, p, tb, copy


def ring_program(topology: Topology, kind: str, orders: list[tuple], proto: str = "Simple",
                 target: str = "exe") -> Program:
    """NCCL's ring ``kind`` (:data:`NATIVE_RING`) over ``orders`` (one ring per channel) as a whole Program,
    with every step's buffers: what :meth:`ring_machine` times, written out so that it can be proven
    (:func:`colls.verify.verify`) and drawn. One threadblock per rank and ring, ring ``L`` on channel
    ``L``, chunk ``d x rings + L`` of allreduce ring ``L``'s ``N`` segments (d: the ring position where it
    ends reduced) and ``rank x rings + L`` of the gathered or scattered buffers (the ring method's layout);
    allgather adds a local copy of the rank's own block, after its send. NCCL's own kernel has no step limit,
    so neither has this program (as a file it would not load beyond 32 ranks)."""
    tgt = get_target(target)
    n, rings = topology.ngpus, len(orders)
    head = _ring_header(topology, kind, rings, proto, tgt)
    types = _ring_types(kind, n)
    chunks = {"allreduce": (n * rings, n * rings), "allgather": (rings, n * rings),
              "reducescatter": (n * rings, rings)}[kind]
    tbs_of: dict = defaultdict(list)
    for rank, ring, p, tb, copy in _ring_threadblocks(kind, orders):
        order = orders[ring]
        steps = []
        for j, t in enumerate(types):
            if kind == "allreduce":
                off = ((p - j - 1) % n if j < n else (p - (j - n + 1)) % n) * rings + ring
                src, dst = ("i", "i") if j < n - 1 else ("i", "o") if j == n - 1 else ("o", "o")
            elif kind == "allgather":
                off = ring if j == 0 else order[(p - j) % n] * rings + ring
                src = dst = "i" if j == 0 else "o"
            else:
                off = order[(p - j - 1) % n] * rings + ring
                src, dst = "i", "i"
            steps.append(Step(j, t, src, off, dst, off, 1, -1, -1, int(kind == "allgather" and j == 0)))
        if kind == "reducescatter":
            steps[-1].dstbuf, steps[-1].dstoff = "o", ring
        tb.steps = steps
        tbs_of[rank].append(tb)
        if copy is not None:
            copy.steps = [Step(0, "cpy", "i", ring, "o", rank * rings + ring, 1, tb.id, 0, 0)]
            tbs_of[rank].append(copy)
    head.gpus = [Gpu(r, chunks[0], chunks[1], 0, tbs_of[r]) for r in range(n)]
    return head


def ring_machine(topology: Topology, kind: str, orders: list[tuple], proto: str = "Simple",
                 target: str = "exe") -> tuple[Program, "Machine"]:
    """NCCL's ring ``kind`` over ``orders``, laid out for the engine without writing its steps out: the
    Program's header (no GPUs) and the Machine, equal to ``Machine(ring_program(...))`` (tested) but built
    in time linear in ranks x rings, the threadblocks of every rank sharing one list of steps."""
    from colls.simulate.engine import Machine, step_tuples
    tgt = get_target(target)
    n, rings = topology.ngpus, len(orders)
    head = _ring_header(topology, kind, rings, proto, tgt)
    shared = step_tuples([Step(j, t, cnt=1, hasdep=int(kind == "allgather" and j == 0))
                          for j, t in enumerate(_ring_types(kind, n))])
    heads_of: dict = defaultdict(list)
    for rank, _, _, tb, copy in _ring_threadblocks(kind, orders):
        heads_of[rank].append((rank, tb, shared))
        if copy is not None:
            heads_of[rank].append((rank, copy, step_tuples([Step(0, "cpy", cnt=1, depid=tb.id, deps=0)])))
    heads = [h for r in range(n) for h in heads_of[r]]
    return head, Machine.from_threadblocks(head, topology, kind, heads)


# --------------------------------------------------------------------------------------------------------
# The double binary tree
# --------------------------------------------------------------------------------------------------------
def btree_parent(nranks: int, rank: int) -> int | None:
    """The parent of ``rank`` in NCCL's binary tree over ``nranks`` ranks rooted at 0 (``ncclGetBtree``,
    ``src/graph/trees.cc``): clear the lowest set bit and set the next one up (``xx01[0] -> xx10[0]``),
    or just clear it when that is out of range. None for the root."""
    if rank == 0:
        return None
    bit = rank & -rank
    up = (rank ^ bit) | (bit << 1)
    return up if up < nranks else rank ^ bit


def dtree_parents(nnodes: int) -> tuple[list, list]:
    """Each node's parent in NCCL's two trees over ``nnodes`` nodes (``ncclGetDtree``): tree 0 is the
    binary tree, tree 1 its mirror ``nnodes - 1 - node`` (even counts) or its shift by one (odd counts).
    None marks a root."""
    tree0 = [btree_parent(nnodes, v) for v in range(nnodes)]
    if nnodes % 2:
        shifted = [btree_parent(nnodes, (v - 1) % nnodes) for v in range(nnodes)]
        tree1 = [None if u is None else (u + 1) % nnodes for u in shifted]
    else:
        mirrored = [btree_parent(nnodes, nnodes - 1 - v) for v in range(nnodes)]
        tree1 = [None if u is None else nnodes - 1 - u for u in mirrored]
    return tree0, tree1


def _nodes(topology: Topology) -> list[list[int]]:
    """The GPUs of each node, nodes and GPUs in order."""
    groups: dict = defaultdict(list)
    for r in topology.gpus:
        groups[topology.node_of(r)].append(r)
    return [groups[k] for k in sorted(groups, key=lambda k: (k is None, k))]


def _head_order(topology: Topology, nodes: list[list[int]]) -> list[int]:
    """Local GPU indices in the order channels take them as chain heads: one GPU of each NIC rail in
    turn (the NIC the GPU's route to the next node leaves by; rails in the order of their first GPU),
    then the next GPU of each rail. On one node no NIC sets a channel's start and NCCL's search repeats one
    chain on every channel (NCCL_DEBUG=INFO on one HGX A100 prints the same ``Trees`` entry for all 24
    channels, NVIDIA/nccl-tests issue 100): the first GPU heads them all."""
    first = nodes[0]
    if len(nodes) == 1:
        return [0]
    rails: dict = defaultdict(list)
    for i, a in enumerate(first):
        other = nodes[1][min(i, len(nodes[1]) - 1)]
        route = topology.route(a, other) or ()
        nics = [v for v in route[1:-1] if topology.kind(v) == NIC]
        rails[nics[0] if nics else None].append(i)
    groups = sorted(rails.values())  # rails in the order of their first GPU
    return [g[j] for j in range(max(map(len, groups))) for g in groups if j < len(g)]


def _chain(topology: Topology, gpus: list[int], head: int) -> tuple:
    """The chain through ``gpus`` from ``head``: the widest Hamiltonian path over routed pairs
    (bottleneck first, then total bandwidth), the best cycle's order where the node has one. Computed once
    per machine, node and head (every channel count asks again)."""
    return topology.derived(("nccl tree chain", tuple(gpus), head), lambda: _search_chain(topology, gpus, head))


def _search_chain(topology: Topology, gpus: list[int], head: int) -> tuple:
    if len(gpus) == 1:
        return (head,)
    weight = {(a, b): topology.route_bandwidth(r) for a in gpus for b in gpus
              if a != b and (r := topology.route(a, b)) is not None}
    tour = best_tour(gpus, weight, head)
    if tour is None:
        paths = [p for end in gpus if end != head and (p := best_tour(gpus, weight, head, end)) is not None]
        tour = max(paths, key=lambda p: (p.bottleneck, p.total), default=None)
    if tour is None:
        raise CollsError(f"NCCL tree: no chain through the {len(gpus)} GPUs of node "
                         f"{topology.node_of(head)} of {topology.name} starts at GPU {head} and uses "
                         f"only linked pairs", key="--baseline")
    return tour.order


def tree_parents(topology: Topology, channels: int) -> list[tuple[dict, list[tuple]]]:
    """For each channel, the rank -> parent rank maps of its two trees (None at the root) and the
    node chains they share: each chain's first GPU is its node's contact with the parent and child nodes
    of :func:`dtree_parents`; inside the chain each GPU's parent is the one before it."""
    nodes = _nodes(topology)
    order = _head_order(topology, nodes)
    node_trees = dtree_parents(len(nodes))
    switched = [_all_switched(topology, g) for g in nodes]
    out = []
    for c in range(channels):
        local = order[c % len(order)]
        # on a switch node NCCL's tree search (pattern TREE) takes the next GPU by index first
        # (ncclTopoSearchNextGpuSort, "Try to use neighbors first"): the node in index order turned to start
        # at the head, so the channels are one chain turned
        chains = [_turned(g, local % len(g)) if sw else _chain(topology, g, g[local % len(g)])
                  for g, sw in zip(nodes, switched)]
        pair = []
        for node_parent in node_trees:
            parent: dict = {}
            for n, chain in enumerate(chains):
                up = node_parent[n]
                parent[chain[0]] = None if up is None else chains[up][0]
                parent.update(zip(chain[1:], chain))
            pair.append(parent)
        out.append((pair, chains))
    return out


def _children(parent: dict) -> dict:
    """Each vertex's children in a tree given as vertex -> parent (None at the root)."""
    children: dict = defaultdict(list)
    for v, p in parent.items():
        if p is not None:
            children[p].append(v)
    return children


def _tree_ops(topology: Topology, parent: dict, lane: int, index: int, start: int) -> list[Op]:
    """One chunk (``index``) of an allreduce over one tree, from step ``start``: reduced up to the root,
    then copied down.

    Up: a GPU receives its children one per step, in the order they are ready; the first is reduced with
    its own input, the later ones with the partial sum in its output, and the last one, unless the GPU is
    the root, stays in flight and goes on to the parent the step after. Down: the root's total goes to
    its children the step after its last receive, and each GPU copies on what it receives the step
    after; a child in another node one step later than the one in the GPU's own node, so that every
    GPU forwards what it receives to its chain child in the same instruction and to another node in a
    send of its own, in both trees (the lowering fuses a receive with the first send that forwards it,
    and by rank the mirrored tree would fuse with the other child: alike nodes would run unlike
    programs, and the two trees of a channel drift apart)."""
    children = _children(parent)
    root = next(v for v, p in parent.items() if p is None)
    order = [root]  # breadth first: parents before children
    for v in order:
        order.extend(sorted(children[v]))
    ready, send_at, done = {}, {}, {}
    for v in reversed(order):
        last = start - 1
        kids = sorted(children[v], key=lambda c: (ready[c], c))
        for c in kids:
            send_at[c] = last = max(ready[c], last + 1)
        children[v] = kids
        done[v], ready[v] = last, last + 1

    def op(step, src, dst, src_buf, dst_buf, reduce=None):
        route = checked_route(topology, src, dst, METHOD, "a tree edge joins them")
        return Op(step, src, dst, src_buf, index, dst_buf, index, 1, reduce, lane, route)

    ops = []
    for v in order:
        kids = children[v]
        for k, c in enumerate(kids):
            final = k == len(kids) - 1
            ops.append(op(send_at[c], c, v, TRANSIENT if children[c] else "i",
                          TRANSIENT if final and v != root else "o", ("o" if k else "i", index)))
    down = {root: done[root]}
    for v in order:
        for c in children[v]:
            down[c] = down[v] + (1 if topology.node_of(c) == topology.node_of(v) else 2)
            ops.append(op(down[c], v, c, "o", "o"))
    return ops


@dataclass
class Group:
    """One of NCCL's thread groups as the engine runs it (:meth:`colls.simulate.engine.Machine.from_threadblocks`):
    a threadblock whose send and receive peers may be several GPUs, every step using all of them at once."""

    id: int
    send: tuple
    recv: tuple
    chan: int


def _tree_groups(topology: Topology, channels: int):
    """Each rank's groups for NCCL's double binary tree allreduce as its kernel runs it (``runTreeSplit`` in
    ``src/device/all_reduce.h``, NCCL 2.23): (rank, :class:`Group`, its step), ids numbered per rank.

    NCCL runs each tree of a channel in one block whose threads split in two groups: the up group receives
    from every child at once, reduces with its own input and sends to the parent (``recvReduceSend``, a
    ``FanAsymmetric<3, 1>`` primitive; a leaf sends), the down group receives from the parent, keeps the
    result and sends it to every child at once (``recvCopySend``, ``FanAsymmetric<1, 3>``; a leaf
    receives); the root's whole block receives from its children, reduces, keeps the total and sends it
    back down in one primitive (``recvReduceCopySend``, ``FanSymmetric<2>``). A primitive with several peers
    waits for all of them, so the up groups run ahead of the down groups only as far as the root's FIFOs
    let them. Tree ``t`` of channel ``c`` is lane ``2c + t`` (NCCL's channels ``c`` and ``c + nChannels``)
    and owns chunk ``2c + t``; the chain child comes first among a GPU's children."""
    count: dict = defaultdict(int)

    def group(rank, send, recv, lane):
        g = Group(count[rank], tuple(send), tuple(recv), lane)
        count[rank] += 1
        return g

    for c, (pair, _) in enumerate(tree_parents(topology, channels)):
        for t, parent in enumerate(pair):
            lane = 2 * c + t
            children = _children(parent)
            for v in sorted(parent):
                up, node = parent[v], topology.node_of(v)
                kids = sorted(children[v], key=lambda k: (topology.node_of(k) != node, k))
                if up is None:
                    yield v, group(v, kids, kids, lane), "rrcs"
                    continue
                yield v, group(v, [up], kids, lane), "rrs" if kids else "s"
                yield v, group(v, kids, [up], lane), "rcs" if kids else "r"


def tree_machine(topology: Topology, channels: int, proto: str = "Simple",
                 target: str = "exe") -> tuple[Program, "Machine"]:
    """NCCL's tree allreduce with ``channels`` pairs of trees laid out for the engine (:func:`_tree_groups`):
    the Program's header (no GPUs) and the Machine, its messages cut as NCCL cuts a tree's
    (:func:`colls.runtimes.nccl.tree_chunk_bytes`: one slot of the connection's buffer each, eight in
    flight). Each group moves a message to or from each of its peers in parallel, at its share of the
    block's threads times a threadblock's copy rate (:func:`colls.runtimes.nccl.tree_up_share`: NCCL splits
    one block's threads between the up and down groups); a root's block, one primitive on all its threads,
    at the whole rate."""
    from colls.simulate.engine import Machine, step_tuples
    tgt = get_target(target)
    head = Program(f"nccl-tree-allreduce-{topology.name.replace(' ', '')}", tgt.coll_name("allreduce"),
                   topology.ngpus, 2 * channels, 2 * channels, proto, 1, 1, 0, 0, [])
    shared = {kind: step_tuples([Step(0, kind, cnt=1)]) for kind in ("rrcs", "rrs", "s", "rcs", "r")}
    groups = list(_tree_groups(topology, channels))
    heads = sorted(((rank, g, shared[kind]) for rank, g, kind in groups), key=lambda h: (h[0], h[1].id))
    machine = Machine.from_threadblocks(head, topology, "allreduce", heads)
    # each group copies at its share of the block's threads (a root's block: all of them, one primitive)
    role = {(rank, g.id): kind for rank, g, kind in groups}
    threads = dict(tgt.coll_threads)
    machine.tb_scale = {}
    for proto in PROTOCOLS:
        up = nccl_facts.tree_up_share(proto, threads)
        share = {"rrcs": 1.0, "rrs": up, "s": up, "rcs": 1.0 - up, "r": 1.0 - up}
        machine.tb_scale[proto] = [share[role[rank, gid]] for rank, gid, _ in machine.tbs]
    nnodes, n = len(_nodes(topology)), topology.ngpus
    machine.chunk_steps = nccl_facts.TREE_CHUNK_STEPS
    machine.slice_per_chunk = nccl_facts.TREE_SLICE_PER_CHUNK
    machine.chunk_rule = lambda proto, size, eff: nccl_facts.tree_chunk_bytes(proto, size, 2 * channels, n, nnodes,
                                                                             eff)
    return head, machine


def tree_schedule(topology: Topology, collective: Collective, channels: int) -> Schedule:
    """NCCL's double binary tree allreduce as a colls Schedule: ``channels`` pairs of trees, tree ``t``
    of channel ``c`` on lane ``2c + t``, each lane owning chunks ``lane, lane + 2 channels, ...`` (the
    collective's chunk factor rounded up to a multiple of ``2 x channels``).

    ``info`` records ``node_parents`` (each tree's parent node of every node), ``chains`` (per channel,
    each node's chain, head first) and ``trees`` (2 x channels).
    """
    if collective.kind != "allreduce":
        raise CollsError(f"NCCL's tree runs allreduce only, not {collective.kind}", key="--baseline")
    if collective.nranks != topology.ngpus:
        raise CollsError(f"the collective has {collective.nranks} ranks but {topology.name} has "
                         f"{topology.ngpus} GPUs")
    lanes = 2 * channels
    rounds = -(-collective.chunks // lanes)
    coll = collective.with_chunks(lanes * rounds)
    ops: list[Op] = []
    plans = tree_parents(topology, channels)
    for c, (pair, _) in enumerate(plans):
        for t, parent in enumerate(pair):
            lane = 2 * c + t
            for m in range(rounds):
                ops += _tree_ops(topology, parent, lane, m * lanes + lane, m)
    info = {"method": METHOD, "trees": lanes,
            "node_parents": [list(p) for p in dtree_parents(len(_nodes(topology)))],
            "chains": [[list(ch) for ch in chains] for _, chains in plans]}
    return Schedule(coll, ops, METHOD, info=info)


def _tree_program(topology: Topology, collective: Collective, channels: int, proto: str,
                  tgt: Target) -> Program:
    """Lower the tree schedule and prove it, as the pipeline proves its files (the Program as built: it is
    simulated, never written, so the XML round trip would prove nothing more)."""
    schedule = tree_schedule(topology, collective, channels)
    schedule.check()
    name = f"nccl-tree-allreduce-{topology.name.replace(' ', '')}"
    program = lowering.lower(schedule, tgt, lowering.LowerOptions(proto=proto, name=name,
                                                                  sms=topology.min_sms()))
    return _proven(program, topology, tgt, f"NCCL tree allreduce on {topology.name}")


def _p2p_program(topology: Topology, collective: Collective, channels: int, proto: str, tgt: Target) -> Program:
    """NCCL's alltoall: grouped point-to-point sends and receives (``ncclGroupStart``, a ``ncclSend`` and an
    ``ncclRecv`` per peer). Each peer's block is cut over ``channels`` channels, and every part is its own
    send (and, on the peer, its own receive) with no order between them, as NCCL schedules the parts of a
    group's p2p operations over its p2p channels (``scheduleP2pTasksToPlan`` in ``src/enqueue.cc``); the
    block a rank keeps is one local copy per channel. Out-of-place, as NCCL's alltoall; proven like the
    others."""
    n = topology.ngpus
    per_gpu, sms = channels * (2 * (n - 1) + 1), topology.min_sms()
    if per_gpu > sms:       # what the proof below would find, said before laying out n x per_gpu threadblocks
        raise CollsError(f"NCCL's alltoall on {n} GPUs: this model gives each of a GPU's {n - 1} peers a send and a "
                         f"receive threadblock per channel, {per_gpu} threadblocks with {channels} channel(s), more "
                         f"than the GPU's {sms} SMs (NCCL runs several peers on each channel's block, which is not "
                         f"modelled)", key="--channels")
    ncpl = n * channels
    gpus = []
    for r in range(n):
        tbs = []
        for c in range(channels):
            for q in range(n):
                if q == r:
                    continue
                tbs.append(Threadblock(len(tbs), send=q, recv=-1, chan=c, steps=[
                    Step(0, "s", "i", q * channels + c, "o", r * channels + c, 1)]))
                tbs.append(Threadblock(len(tbs), send=-1, recv=q, chan=c, steps=[
                    Step(0, "r", "i", r * channels + c, "o", q * channels + c, 1)]))
            tbs.append(Threadblock(len(tbs), chan=c, steps=[
                Step(0, "cpy", "i", r * channels + c, "o", r * channels + c, 1)]))
        gpus.append(Gpu(r, ncpl, ncpl, 0, tbs))
    program = Program(f"nccl-p2p-alltoall-{topology.name.replace(' ', '')}", tgt.coll_name("alltoall"), n, ncpl,
                      channels, proto, 0, 1, 0, 0, gpus)
    return _proven(program, topology, tgt, f"NCCL alltoall on {topology.name} with {channels} channels",
                   key="--channels")


def _proven(program: Program, topology: Topology, tgt: Target, what: str, key: str | None = None) -> Program:
    """``program`` if the verifier finds no error in it as built (it is simulated, never written), else
    CollsError naming the first error."""
    report = verify.verify(program, tgt, sms=topology.min_sms(), source="<generated>")
    if not report.ok:
        first = next(f for f in report.findings if f.severity == "error")
        raise CollsError(f"{what}: the program does not verify for {tgt.name}: {first}", key=key)
    return program


__all__ = ["ALGORITHMS", "NATIVE_RING", "nccl_program", "ring_orders", "ring_program", "ring_machine", "tree_schedule",
           "tree_parents", "dtree_parents", "btree_parent"]
