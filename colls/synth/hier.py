"""Hierarchical schedules: each node's own fabric inside the node, the NIC rails across nodes.

Every node of a multi-node machine is the same, and rank ``r`` is GPU ``r % G`` of node ``r // G``
(:meth:`Topology.node_major`); rail ``g`` is GPU ``g`` of every node. A block is one rank's share of the
buffer (``c`` chunks). The blocks of node ``m`` are cut into pieces of ``span`` consecutive blocks, and each
piece crosses the nodes on one rail only:

==============  ==========================================================================================
collective      what happens
==============  ==========================================================================================
allgather       (1) every GPU's block goes to the other GPUs of its node, down a local tree rooted at it;
                (2) every piece goes from its rail's GPU in its own node around a ring of that rail's GPUs
                over all nodes, one chunk per step; (3) each rail GPU sends every piece it received down
                the local tree rooted at it.
reducescatter   the same backwards: in every node, the local GPUs' inputs for each other node's piece are
                summed up the local tree towards the piece's rail GPU; the sums go around the rail ring,
                each one reduced on its way, to the piece's own node; the rail GPU there passes each
                block's total to the block's GPU, which adds it to the sum of its own node's inputs (also
                made up a local tree).
allreduce       the reducescatter above into each rank's block of the output, then the allgather of those
                blocks (the chunk factor is rounded up to a multiple of the rank count).
==============  ==========================================================================================

Pieces. ``span`` 1: rail ``g`` carries block ``(m, g)`` of every node ``m``; every node feeds every rail, so
each ring link carries the ``N - 1`` blocks the optimum needs, and a rail GPU passes ``N - 1`` pieces to each
local peer. ``span`` G: node ``m``'s whole block (G contiguous blocks) rides rail ``m mod G``; a rail GPU then
passes about ``N / G`` pieces to each peer, so a rank's steps grow with the number of nodes over G, not with
the number of GPUs, at the cost of links into a node that feeds no piece to that rail carrying ``N`` blocks
where ``N - 1`` would do (``N / (N - 1)`` of the optimum). The default is 1 up to G nodes and G beyond, where
1 would need ``(G - 1)(N - 1)`` local sends a rank.

Local trees. Inside a node, a block goes from GPU ``a`` to GPU ``b`` straight where the node has a route
(an NVSwitch: every pair), else through the GPUs of a breadth-first tree over the node's direct links
(MI250's xGMI mesh, NDv2's hybrid cube-mesh), each relay storing the block before sending it on (allgather)
or adding its own input to what its children sent (reducescatter, in scratch).

Every node runs the same program seen from itself: the ring's hops, the trees and the pieces depend on
a GPU's local index and on node offsets only.
"""

from __future__ import annotations

from colls.collectives import Collective
from colls.errors import CollsError
from colls.schedule import Op, Schedule
from colls.synth.common import schedule_facts
from colls.topology import Topology

METHOD = "hier"
KINDS = ("allgather", "reducescatter", "allreduce")
OWN, RAIL, FAR = 0, 1, 2        # lanes: a node's own blocks, the rail rings, the pieces from other nodes


def synthesize(topology: Topology, collective: Collective, *, span: int | None = None, unit: int = 1,
               **options) -> Schedule:
    """A hierarchical schedule of ``collective`` on a multi-node ``topology``; ``span`` (1 or the GPUs per
    node) overrides the default piece size, ``unit`` the chunks that cross a rail hop as one op (1: a relay
    passes each chunk on as soon as it has it; a whole piece in one op makes fewer steps, and on 16 x DGX A100
    an allgather half as fast at 64 MB). Other options are ignored.

    Raises CollsError for a collective other than allgather, reducescatter and allreduce, for one node (no
    hierarchy: ring or trees), for a machine whose ranks are not node-major, and when a node's GPUs are not
    all connected by its own links."""
    kind = collective.kind
    if kind not in KINDS:
        raise CollsError(f"{METHOD}: no hierarchical schedule for {kind} (the hier method does "
                         f"{', '.join(KINDS)}; use another method)", key="--collective")
    if collective.nranks != topology.ngpus:
        raise CollsError(f"{METHOD}: the collective has {collective.nranks} ranks but {topology.name} has "
                         f"{topology.ngpus} GPUs")
    nodes, per = topology.node_major()
    if nodes < 2:
        why = ("one node has no hierarchy" if topology.nodes < 2 else
               "its ranks are not numbered node by node, GPU r % G of node r // G")
        raise CollsError(f"{METHOD}: {topology.name}: {why}; use --method ring or trees", key="--method")
    span = _span(nodes, per) if span is None else span
    if span not in (1, per):
        raise CollsError(f"{METHOD}: span must be 1 or the GPUs per node ({per}), got {span}", key="span")
    n = collective.nranks
    if kind == "allreduce":
        collective = collective.with_chunks(n * -(-collective.chunks // n))
    if not isinstance(unit, int) or isinstance(unit, bool) or unit < 1:
        raise CollsError(f"{METHOD}: unit must be a whole number of chunks, 1 or more, got {unit!r}", key="unit")
    build = _Builder(topology, collective, nodes, per, span, unit)
    if kind == "allgather":
        ops, _ = build.allgather(0, lambda r: ("i", 0))
    elif kind == "reducescatter":
        ops, _ = build.reducescatter(0, lambda r: ("o", 0))
    else:
        cb = build.cb
        ops, end = build.reducescatter(0, lambda r: ("o", r * cb))
        more, _ = build.allgather(end, lambda r: ("o", r * cb))
        ops += more
    schedule = Schedule(collective, ops, METHOD, build.scratch_size())
    schedule.info.update(schedule_facts(schedule, topology))
    schedule.info.update({"span": span, "rails": per, "local_depth": build.depth,
                          "pieces_per_rail": len(build.pieces) // per})
    return schedule


class _Builder:
    """The ops of one collective's phases on ``nodes`` nodes of ``per`` GPUs, ``cb`` chunks a block."""

    def __init__(self, topology: Topology, coll: Collective, nodes: int, per: int, span: int, unit: int = 1):
        self.topology, self.nodes, self.per, self.unit = topology, nodes, per, unit
        n = coll.nranks
        self.cb = coll.chunks if coll.kind != "allreduce" else coll.chunks // n
        self.parent, self.down = _local_trees(topology, per)
        self.depth = max((len(levels) for levels in self.down), default=0)
        # piece = (node m, its rail g, first block, blocks): span 1: block (m, g) on rail g; span G: node m's
        # blocks on rail m mod G
        self.pieces = _pieces(nodes, per, span)

        self._slots: list[dict] = [dict() for _ in range(n)]
        self._size = [0] * n

    # --- helpers ------------------------------------------------------------------------------------------
    def far(self, root: int) -> int:
        """The lane of the pieces from other nodes in the local tree rooted at GPU ``root``: one lane for all
        where every tree is a star (no GPU relays); a lane per tree where GPUs relay, so that a relay's
        threadblocks serve one tree: trees sharing a connection's threadblock in different orders close a
        wait cycle once a piece is several messages (MI250, 17 nodes: the allgather hung from 190 MB)."""
        return FAR if self.depth <= 1 else FAR + root

    def rank(self, node: int, local: int) -> int:
        return (node % self.nodes) * self.per + local

    def op(self, step, a, b, src, dst, count, lane, reduce=None) -> Op:
        return Op(step, a, b, src[0], src[1], dst[0], dst[1], count, reduce, lane,
                  self.topology.route(a, b) if a != b else ())     # Topology.route keeps what it found

    def rail(self, g: int, enters) -> tuple[list, dict, dict]:
        """Rail ``g``'s pieces, each one's units (:func:`_units`) and the slot of each unit's every hop
        (:func:`_ring_slots`), the units of a piece of node m entering the ring at node ``enters(m)``."""
        pieces = [p for p in self.pieces if p[1] == g]
        units = {i: _units(p[3] * self.cb, self.unit) for i, p in enumerate(pieces)}
        slots = _ring_slots(self.nodes, {enters(p[0]) % self.nodes: [(i, j) for j in range(len(units[i]))]
                                         for i, p in enumerate(pieces)})
        return pieces, units, slots

    def slot(self, rank: int, key, count: int) -> tuple:
        """Scratch of ``count`` chunks at ``rank`` for ``key`` (its own place: keys are per purpose and
        piece, seen from the rank's node)."""
        slots = self._slots[rank]
        if key not in slots:
            slots[key] = self._size[rank]
            self._size[rank] += count
        return ("s", slots[key])

    def scratch_size(self) -> int:
        return max(self._size, default=0)

    # --- allgather ----------------------------------------------------------------------------------------
    def allgather(self, t0: int, own) -> tuple[list[Op], int]:
        """Every rank's block (at ``own(rank)``) into every rank's output, from step ``t0``; returns the
        ops and the first step after them."""
        N, G, cb = self.nodes, self.per, self.cb
        ops = []
        for r in range(N * G):
            if own(r) != ("o", r * cb):
                ops.append(self.op(t0, r, r, own(r), ("o", r * cb), cb, OWN))
        for node in range(N):
            for h in range(G):
                r = self.rank(node, h)
                ops += self._down(node, h, ("o", r * cb), cb, t0, OWN)
        start = t0 + self.depth + 1
        end = start
        for g in range(G):
            # piece i's unit j leaves node m at hop 1 and reaches node m + k at hop k
            pieces, units, slots = self.rail(g, lambda m: m)
            for i, piece in enumerate(pieces):
                m, _, first, blocks = piece
                x0, length = first * cb, blocks * cb
                for j, (u0, ulen) in enumerate(units[i]):
                    for k, slot in enumerate(slots[(i, j)], start=1):
                        ops.append(self.op(start + slot, self.rank(m + k - 1, g), self.rank(m + k, g),
                                           ("o", x0 + u0), ("o", x0 + u0), ulen, RAIL))
                for k in range(1, N):
                    arrived = start + max(slots[(i, j)][k - 1] for j in range(len(units[i])))
                    more = self._down(m + k, g, ("o", x0), length, arrived, self.far(g))
                    ops += more
                    end = max([end, arrived + 1] + [o.step + 1 for o in more])
        return ops, end

    def _down(self, node: int, root: int, where: tuple, count: int, t: int, lane: int) -> list[Op]:
        """``count`` chunks at ``where`` (the same place on every GPU) from GPU ``root`` of ``node`` to the
        others down the local tree: level ``d`` at step ``t + d``."""
        ops = []
        for d, level in enumerate(self.down[root], start=1):
            for parent, child in level:
                ops.append(self.op(t + d, self.rank(node, parent), self.rank(node, child), where, where, count,
                                   lane))
        return ops

    # --- reducescatter ------------------------------------------------------------------------------------
    def reducescatter(self, t0: int, own) -> tuple[list[Op], int]:
        """Every rank's block summed over all inputs into ``own(rank)``, from step ``t0``; returns the ops
        and the first step after them."""
        N, G, cb = self.nodes, self.per, self.cb
        ops = []
        ends = [t0]
        for node in range(N):
            for h in range(G):
                r = self.rank(node, h)
                ops += self._up(node, h, r * cb, cb, own(r), ("own", h), t0, OWN, ends)
        partial = {}
        # node m + k sums its inputs for node m's piece at its rail GPU; each node visits the pieces by their
        # offset k from it, so every node's scratch is laid out alike (the same program seen from each node)
        order = sorted(((m + k) % N, k, piece) for piece in self.pieces for m in [piece[0]] for k in range(1, N))
        for node, k, piece in order:
            m, g, first, blocks = piece
            x0, length = first * cb, blocks * cb
            at = self.rank(node, g)
            where = self.slot(at, ("sum", k, first % G), length) if G > 1 else ("i", x0)
            partial[(node, first)] = where
            ops += self._up(node, g, x0, length, where, ("sum", k, first % G), t0, self.far(g), ends)
        start = max(ends)
        end = start
        for g in range(G):
            # piece i (node m's) starts at node m + 1 and its unit j reaches node m + k + 1 at hop k
            pieces, units, slots = self.rail(g, lambda m: m + 1)
            for i, piece in enumerate(pieces):
                m, _, first, blocks = piece
                x0, length = first * cb, blocks * cb
                home = self.rank(m, g)
                total = self.slot(home, ("home", first % G), length)    # the piece's sum, at its node's rail GPU
                arrived = {}
                for j, (u0, ulen) in enumerate(units[i]):
                    x = x0 + u0
                    for k, slot in enumerate(slots[(i, j)], start=1):    # the last hop reaches node m
                        a, b = self.rank(m + k, g), self.rank(m + k + 1, g)
                        step = start + slot
                        src = _at(partial[((m + k) % N, first)], u0) if k == 1 else ("t", x)
                        if k < N - 1:
                            ops.append(self.op(step, a, b, src, ("t", x), ulen, RAIL,
                                               reduce=_at(partial[((m + k + 1) % N, first)], u0)))
                        else:
                            ops.append(self.op(step, a, b, src, _at(total, u0), ulen, RAIL))
                        end = max(end, step + 1)
                    for blk in range(x // cb, (x + ulen - 1) // cb + 1):
                        arrived[blk] = start + slots[(i, j)][-1]
                for blk in range(first, first + blocks):     # each block's total to its GPU, added to its node's sum
                    src = _at(total, (blk - first) * cb)
                    if blk == home:
                        mine = own(home)        # one GPU a node: no node sum, its own input
                        ops.append(self.op(arrived[blk] + 1, home, home, src, mine, cb, RAIL,
                                           reduce=mine if G > 1 else ("i", blk * cb)))
                        more = ops[-1:]
                    else:
                        more = self._path(m, g, blk % G, src, own(blk), cb, arrived[blk], self.far(g),
                                          ("pass", blk % G))
                        ops += more
                    end = max([end] + [o.step + 1 for o in more])
        return ops, end

    def _up(self, node: int, root: int, x0: int, count: int, target: tuple, key, t0: int, lane: int,
            ends: list) -> list[Op]:
        """The sum over ``node``'s GPUs of input chunks ``x0 ..`` into ``target`` at GPU ``root``, up the local
        tree: a relay adds what each child sent to its own input in scratch, then sends that on; the children
        of one GPU send at distinct steps (each adds into the same chunks)."""
        ops = []
        G = self.per
        if G == 1:
            return ops
        order = [child for level in reversed(self.down[root]) for _, child in level]
        kids: dict = {}
        for child in order:
            kids.setdefault(self.parent[root][child], []).append(child)
        done: dict = {}

        def finish(v: int) -> int:
            if v in done:
                return done[v]
            t = t0
            here = self.rank(node, v)
            children = sorted(kids.get(v, []), key=lambda c: (finish(c), c))
            acc = target if v == root or not children else self.slot(here, ("up", key, v), count)
            first = True
            for child in children:
                t = max(t, finish(child))
                src = ("i", x0) if child not in kids else self.slot(self.rank(node, child), ("up", key, child), count)
                ops.append(self.op(t, self.rank(node, child), here, src, acc, count, lane,
                                   reduce=("i", x0) if first else acc))
                first = False
                t += 1
            done[v] = t
            return t

        ends.append(finish(root))
        return ops

    def _path(self, node: int, a: int, b: int, src: tuple, dst: tuple, count: int, t: int, lane: int, key
              ) -> list[Op]:
        """``count`` chunks from ``src`` at GPU ``a`` of ``node`` added into ``dst`` at GPU ``b``, along the
        local tree rooted at ``a`` (each relay stores them in scratch)."""
        path = [b]
        while path[-1] != a:
            path.append(self.parent[a][path[-1]])
        path.reverse()
        ops = []
        here = src
        for i, (u, v) in enumerate(zip(path, path[1:]), start=1):
            last = v == b
            there = dst if last else self.slot(self.rank(node, v), key + (v,), count)
            ops.append(self.op(t + i, self.rank(node, u), self.rank(node, v), here, there, count, lane,
                               reduce=dst if last else None))
            here = there
        return ops


def _ring_slots(nodes: int, items: dict) -> dict:
    """When each item crosses each hop of a ring of ``nodes`` nodes (node n sends to n + 1), one item per
    link a slot: ``items[n]`` are the items node ``n`` puts on the ring, in order; each goes ``nodes - 1``
    hops. A node forwards what it received in the slot before at once (so a relay's receive and send are one
    instruction, and nothing waits in between), and puts its own next item on the ring when it has nothing
    to forward. Returns item -> the slot of each hop."""
    queue = {n: list(reversed(v)) for n, v in items.items() if v}
    hops: dict = {}
    moving: dict = {}               # node -> (item, hops made) it received in the last slot
    slot = 0
    while queue or moving:
        sent = {}
        for n in range(nodes):
            got = moving.get(n)
            if got is not None and got[1] < nodes - 1:
                item, made = got
            elif queue.get(n):
                item, made = queue[n].pop(), 0
                if not queue[n]:
                    del queue[n]
            else:
                continue
            hops.setdefault(item, []).append(slot)
            sent[(n + 1) % nodes] = (item, made + 1)
        moving = sent
        slot += 1
    return hops


def _span(nodes: int, per: int) -> int:
    """The default piece size in blocks (module docstring)."""
    return 1 if nodes <= per else per


def _pieces(nodes: int, per: int, span: int) -> list[tuple]:
    """(node m, its rail, first block, blocks) of every piece, by rail then node: span 1: block (m, g) on
    rail g; span G: node m's blocks on rail m mod G."""
    pieces = [(m, j if span == 1 else m % per, m * per + j * span, span)
              for m in range(nodes) for j in range(per // span)]
    return sorted(pieces, key=lambda p: (p[1], p[0]))


def least_peers(topology: Topology, collective: Collective, span: int | None = None) -> int:
    """A lower bound on the peers some rank sends to (or receives from) in the file this method makes, each a
    threadblock of its own whatever the layout (a threadblock has one send peer and one receive peer), counted
    from the node's routes without making it, so that a machine whose file the target cannot hold is refused at
    once (:func:`colls.pipeline.check_limits`; 1,024 x MI250 for a plan of 3 threadblocks a GPU: the schedule
    alone took 3-5 s). GPU ``g``'s local tree reaches every GPU it has a route to in one hop (the first level of a
    breadth-first tree, :func:`_local_trees`): an allgather sends ``g``'s block to each of them, a reducescatter
    receives their sums for ``g``'s block from each (an allreduce does both); and the pieces pass ``g`` around
    its rail's ring, one node to the next, over a NIC (another node's GPU, not a local one), where a piece rides
    ``g``'s rail (``span``: the pieces' size, default as :func:`synthesize`'s). 0 where the method refuses."""
    nodes, per = topology.node_major()
    if collective.kind not in KINDS or nodes < 2 or collective.nranks != topology.ngpus:
        return 0
    rails = {rail for _, rail, _, _ in _pieces(nodes, per, _span(nodes, per) if span is None else span)}
    down = _local_trees(topology, per)[1]
    return max((len(down[a][0]) if down[a] else 0) + (a in rails) for a in range(per))


def least_steps(topology: Topology, collective: Collective, instances: int = 1) -> int:
    """A lower bound on the instructions of rank 0 in the file this method makes (default span and unit),
    counted from the plan without making it, so that a machine whose file the runtime cannot load is
    refused at once (:func:`colls.pipeline.check_limits`). What rank 0 must do, each on a lane of its own
    (so no two of them become one instruction): its node's blocks (received, or sent into their sums) and
    what its local tree's children get of its own; every unit of its rail's pieces from other nodes (a
    relay's receive and send are one instruction) and of its own node's piece; the pieces from other nodes
    on other rails (received, or sent into their sums); what it passes its children of each piece of its
    rail; and, in a reducescatter whose pieces are whole nodes, its node's blocks passed on to their GPUs.
    0 where the method refuses."""
    nodes, per = topology.node_major()
    if collective.kind not in KINDS or nodes < 2 or collective.nranks != topology.ngpus:
        return 0
    n = collective.nranks
    cb = -(-collective.chunks // n) if collective.kind == "allreduce" else collective.chunks
    span = _span(nodes, per)
    pieces = _pieces(nodes, per, span)
    mine = [p for p in pieces if p[1] == 0 and p[0] != 0]
    own = sum(p[3] * cb for p in pieces if p[1] == 0 and p[0] == 0)       # chunks: one op each (unit 1)
    others = sum(1 for p in pieces if p[1] != 0 and p[0] != 0)
    children = len(_local_trees(topology, per)[1][0][0]) if per > 1 else 0
    rail = sum(blocks * cb for _, _, _, blocks in mine)
    gather = (per - 1) + children + rail + own + others + children * len(mine)
    scatter = gather + ((per - 1) + 1 if span > 1 else 0)
    one = {"allgather": gather, "reducescatter": scatter, "allreduce": gather + scatter}[collective.kind]
    return one * instances


def _units(length: int, unit: int) -> list[tuple]:
    """A piece of ``length`` chunks cut into the runs of ``unit`` chunks that cross the rail ring as one op:
    (first, count)."""
    return [(u, min(unit, length - u)) for u in range(0, length, unit)]


def _at(where: tuple, offset: int) -> tuple:
    return (where[0], where[1] + offset)


def _local_trees(topology: Topology, per: int) -> tuple[list[dict], list[list]]:
    """For each local GPU ``g``: ``parent[g]`` (child -> parent) and ``down[g]`` (levels of (parent, child)
    edges) of a breadth-first tree over node 0's routes inside the node; among the GPUs of the level above,
    a child takes the one with the widest route, then the one with the fewest children so far, then the
    nearest local index after the root. CollsError when a node's GPUs are not all connected."""
    near: dict = {}
    for a in range(per):
        for b in range(per):
            if a != b:
                route = topology.route(a, b)
                if route is not None:
                    near.setdefault(a, []).append((b, topology.route_bandwidth(route)))
    parents, downs = [], []
    for root in range(per):
        parent: dict = {}
        levels: list = []
        frontier, seen = [root], {root}
        load: dict = {}
        while len(seen) < per:
            reach: dict = {}
            for u in frontier:
                for v, bw in near.get(u, []):
                    if v not in seen:
                        reach.setdefault(v, []).append((u, bw))
            if not reach:
                missing = min(set(range(per)) - seen)
                raise CollsError(f"{METHOD}: GPU {missing} of {topology.name}'s nodes cannot be reached from GPU "
                                 f"{root} over the node's own links", key="--method")
            level = []
            for v in sorted(reach, key=lambda v: (v - root) % per):
                u = max(reach[v], key=lambda ub: (ub[1], -load.get(ub[0], 0), -((ub[0] - root) % per)))[0]
                parent[v] = u
                load[u] = load.get(u, 0) + 1
                level.append((u, v))
            levels.append(level)
            seen |= set(reach)
            frontier = [v for _, v in level]
        parents.append(parent)
        downs.append(levels)
    return parents, downs

