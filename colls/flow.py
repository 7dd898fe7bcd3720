"""Exact max-flow with OR-Tools' C++ ``SimpleMaxFlow``: one network, capacities reset in place per query.

Every exact computation of the project (the bounds in :mod:`colls.bound`, switch splitting and tree
packing in :mod:`colls.synth`) scales its Fraction bandwidths to integers and asks this network. Int64
capacities keep the answers exact; a total that could overflow is refused instead of rounded.
"""

from __future__ import annotations

import numpy as np
from ortools.graph.python import max_flow

from colls.errors import CollsError

INT_LIMIT = 2 ** 62  # capacities (and their sum) must stay below this to be exact in int64


class FlowNet:
    """``SimpleMaxFlow`` over vertices ``0..n-1`` plus a source ``s = n`` and a sink ``z = n+1``.

    Arcs, in this order: the given ``(tail, head)`` pairs, then ``s -> v`` and ``v -> z`` for every
    vertex v. The network is built once; :meth:`set` replaces every capacity in place.

    ``what`` names the computation in error messages ("trees", "topology 'dgx2 x2'").
    """

    def __init__(self, n: int, tails, heads, what: str = "max-flow"):
        self.n = n
        self.s, self.z = n, n + 1
        self.what = what
        self.tails = np.asarray(tails, dtype=np.int32)
        self.heads = np.asarray(heads, dtype=np.int32)
        self.m = len(self.tails)
        verts = np.arange(n, dtype=np.int32)
        all_t = np.concatenate([self.tails, np.full(n, self.s, np.int32), verts])
        all_h = np.concatenate([self.heads, verts, np.full(n, self.z, np.int32)])
        self.arcs = np.arange(len(all_t), dtype=np.int32)
        self.smf = max_flow.SimpleMaxFlow()
        self.smf.add_arcs_with_capacity(all_t, all_h, np.zeros(len(all_t), np.int64))

    def set(self, caps, src, snk) -> None:
        """Arc capacities ``caps`` (one per given arc), ``s -> v`` = ``src[v]``, ``v -> z`` = ``snk[v]``.

        All int64 (this runs once per max-flow, thousands of times in splitting); callers keep every
        value below :data:`INT_LIMIT`, and the total is checked here.
        """
        caps = np.asarray(caps, dtype=np.int64)
        src = np.broadcast_to(np.asarray(src, dtype=np.int64), (self.n,))
        snk = np.broadcast_to(np.asarray(snk, dtype=np.int64), (self.n,))
        if int(caps.sum()) + int(src.sum()) + int(snk.sum()) >= INT_LIMIT:
            raise CollsError(f"{self.what}: capacities too large to be exact in 64-bit integers; "
                             f"round the bandwidths to fewer digits")
        self.smf.set_arcs_capacity(self.arcs, np.concatenate([caps, src, snk]))

    def solve(self, source: int | None = None, sink: int | None = None) -> int:
        """The max flow from ``source`` to ``sink`` (default: ``s`` to ``z``) under the capacities set."""
        status = self.smf.solve(self.s if source is None else source, self.z if sink is None else sink)
        if status != self.smf.OPTIMAL:
            raise CollsError(f"{self.what}: max-flow failed with status {status} (capacities too large "
                             f"to be exact in 64-bit integers)")
        return int(self.smf.optimal_flow())

    def flow(self, caps, src, snk) -> int:
        """:meth:`set` then :meth:`solve` from ``s`` to ``z``."""
        self.set(caps, src, snk)
        return self.solve()

    def source_side(self) -> np.ndarray:
        """Boolean mask over vertices ``0..n-1``: the minimal source side of the last min cut."""
        mask = np.zeros(self.n + 2, dtype=bool)
        mask[self.smf.get_source_side_min_cut()] = True
        return mask[: self.n]

    def sink_side(self) -> np.ndarray:
        """Boolean mask over vertices ``0..n-1``: the minimal sink side of the last min cut."""
        mask = np.zeros(self.n + 2, dtype=bool)
        mask[self.smf.get_sink_side_min_cut()] = True
        return mask[: self.n]
