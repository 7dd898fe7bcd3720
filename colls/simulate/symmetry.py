"""Identical threadblocks simulated once: the quotient of a :class:`~colls.simulate.engine.Machine` by an
equitable partition of its threadblocks, connections and links.

Two threadblocks are *alike* when they run the same steps at the same copy rate, wait on alike
threadblocks, send and receive on alike connections; two connections when their senders are alike, their
receivers are alike, their latencies are equal and their routes cross alike links in the same order; two
links when they have the same capacity and are crossed by the same number of flows of each class of
connection. The coarsest such partition is found by colour refinement (start from what each element is
by itself, split classes by the classes of their neighbours until nothing splits).

Within one class everything happens at the same time. By induction over the engine's batches: alike
threadblocks start alike (step 0 of pass 0 at time 0), see the same counts on alike connections and the
same flags of alike threadblocks, so they take the same decisions; and the max-min fair allocation gives
alike flows the same rate, because progressive filling raises alike flows together and fills alike links
together (every link of a class carries the same number of flows of each class at the same rates). So the
engine only needs one representative of each class: its threadblock, its connection, its links. A link
class is one constraint whose load counts each flow class ``n(L, F) = |F| x hops of F's route in L / |L|``
times (the flows of class F that cross any one link of class L), and what it carries is what one of its
links carries. The result (time, every link's bytes, the steady-state jump) is the full simulation's,
up to floating-point rounding; ``tests/test_simulate.py`` checks it against the machine simulated whole.
"""

from __future__ import annotations

from collections import Counter

import numpy as np


def per_list(steps_of: list, f) -> list:
    """``f(steps)`` for each threadblock's list of steps, computed once per distinct list: threadblocks that
    share one list (:meth:`Machine.from_threadblocks`) share the answer."""
    done: dict = {}
    out = []
    for steps in steps_of:
        if id(steps) not in done:
            done[id(steps)] = f(steps)
        out.append(done[id(steps)])
    return out


def _relabel(keys: list) -> list[int]:
    """Dense class numbers for hashable keys, in order of first appearance (deterministic)."""
    seen: dict = {}
    return [seen.setdefault(k, len(seen)) for k in keys]


def _dense(rows: np.ndarray) -> np.ndarray:
    """Dense class numbers for the rows of an integer matrix (entries >= -1), in order of first appearance
    (as :func:`_relabel` numbers keys): equal rows, equal numbers. The columns are folded into one integer
    key, mixed radix, made dense again whenever the next column could overflow it."""
    n = len(rows)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    key = np.zeros(n, dtype=np.int64)
    top = 0                                      # the largest key so far
    for j in range(rows.shape[1]):
        col = rows[:, j] + 1
        base = int(col.max()) + 1
        if (top + 1) * base >= 2**62:
            _, key = np.unique(key, return_inverse=True)
            top = int(key.max())
        key = key * base + col
        top = top * base + base - 1
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[inverse.reshape(-1)]


def _padded(lists: list, sort: bool) -> tuple[np.ndarray, np.ndarray]:
    """Lists of indices as one matrix padded with -1 (each row sorted when ``sort``), and a mask of the real
    entries; rows of different lengths never compare equal (the -1s come first when sorted, last otherwise)."""
    width = max((len(x) for x in lists), default=0)
    out = np.full((len(lists), width), -1, dtype=np.int64)
    for i, x in enumerate(lists):
        if x:
            out[i, width - len(x):] = x
    return out, out >= 0


def _neighbours(labels: np.ndarray, index: np.ndarray, real: np.ndarray, sort: bool) -> np.ndarray:
    """``labels`` looked up at ``index`` (padding stays -1), each row sorted when ``sort``: a multiset."""
    out = np.where(real, labels[np.where(real, index, 0)], -1)
    return np.sort(out, axis=1) if sort and out.shape[1] > 1 else out


def classes(m) -> tuple[list[int], list[int], list[int]]:
    """The coarsest equitable partition of ``m``'s threadblocks, connections and links (class numbers).

    Colour refinement on integer matrices: each round, every element's row is its class and its neighbours'
    classes (sorted where they form a multiset, in order where the order counts), and equal rows are one
    class, numbered in order of first appearance."""
    T, C, L = len(m.tbs), len(m.conn_key), len(m.links)
    # what each element is by itself
    seen: dict = {}                                  # a shape -> its number, in order of first appearance
    shapes = per_list(m.steps, lambda steps: (       # the steps' shape (numbered), and the threadblocks waited on
        seen.setdefault(tuple((s[0], s[1], s[2], s[3], s[4] >= 0, s[5], s[6], s[7]) for s in steps), len(seen)),
        tuple(s[4] for s in steps if s[4] >= 0)))
    shape = [shapes[ti][0] for ti in range(T)]
    scale = m.tb_scale
    tb_c = np.array(_relabel([(shape[ti], m.tb_cap[ti], tuple(v[ti] for _, v in sorted(scale.items())) if scale
                               else (), len(m.out_conns[ti]), len(m.in_conns[ti])) for ti in range(T)]),
                    dtype=np.int64)
    conn_c = np.array(_relabel([(round(m.conn_latency[c], 12), len(m.conn_links[c]), m.conn_net[c])
                                for c in range(C)]), dtype=np.int64)
    link_c = np.array(_relabel([float(x) for x in m.link_cap]), dtype=np.int64)
    crossing = [[] for _ in range(L)]                       # link -> connections crossing it
    for c in range(C):
        for li in m.conn_links[c].tolist():
            crossing[li].append(c)
    # the structure, as padded index matrices (it does not change between rounds)
    outs, out_real = _padded(m.out_conns, True)
    ins, in_real = _padded(m.in_conns, True)
    waits, wait_real = _padded([list(shapes[ti][1]) for ti in range(T)], False)
    route, route_real = _padded([x.tolist() for x in m.conn_links], False)
    cross, cross_real = _padded(crossing, True)
    sender = np.array(m.conn_sender, dtype=np.int64)
    receiver = np.array(m.conn_receiver, dtype=np.int64)
    counts = (len(set(tb_c.tolist())), len(set(conn_c.tolist())), len(set(link_c.tolist())))
    while True:
        tb_n = _dense(np.column_stack([tb_c, _neighbours(conn_c, outs, out_real, True),
                                       _neighbours(conn_c, ins, in_real, True),
                                       _neighbours(tb_c, waits, wait_real, False)]))
        conn_n = _dense(np.column_stack([conn_c, tb_c[sender] if C else conn_c, tb_c[receiver] if C else conn_c,
                                         _neighbours(link_c, route, route_real, False)]))
        link_n = _dense(np.column_stack([link_c, _neighbours(conn_c, cross, cross_real, True)]))
        new = (int(tb_n.max(initial=-1)) + 1, int(conn_n.max(initial=-1)) + 1, int(link_n.max(initial=-1)) + 1)
        tb_c, conn_c, link_c = tb_n, conn_n, link_n
        if new == counts:
            return tb_c.tolist(), conn_c.tolist(), link_c.tolist()
        counts = new


class Quotient:
    """A Machine with one threadblock, connection and link per class; the engine runs it like a Machine.

    ``conn_links[c]`` are link *classes*, ``conn_weight[c]`` the flows of ``c``'s class each link of that
    class carries (``n(L, F)``), ``link_class[l]`` the class of original link ``l``.
    """

    def __init__(self, m, tb_c, conn_c, link_c):
        self.full = m
        self.program, self.topology, self.kind = m.program, m.topology, m.kind
        rep_tb = _firsts(tb_c)
        rep_conn = _firsts(conn_c)
        rep_link = _firsts(link_c)
        self.tb_size = np.bincount(tb_c, minlength=len(rep_tb))
        conn_size = np.bincount(conn_c, minlength=len(rep_conn))
        link_size = np.bincount(link_c, minlength=len(rep_link))
        self.link_class = np.array(link_c, dtype=np.int64)
        self.links = [m.links[li] for li in rep_link]
        self.link_cap = m.link_cap[rep_link]
        self.tbs = [m.tbs[ti] for ti in rep_tb]
        self.tb_cap = [m.tb_cap[ti] for ti in rep_tb]
        self.tb_scale = {p: [v[ti] for ti in rep_tb] for p, v in m.tb_scale.items()} if m.tb_scale else None
        # a threadblock's peers of one class are one connection here: the class's flows all count in its weight
        self.out_conns = [tuple(sorted({conn_c[c] for c in m.out_conns[ti]})) for ti in rep_tb]
        self.in_conns = [tuple(sorted({conn_c[c] for c in m.in_conns[ti]})) for ti in rep_tb]
        self.conn_key = [m.conn_key[c] for c in rep_conn]
        self.rep_conn = rep_conn
        self.conn_sender = [tb_c[m.conn_sender[c]] for c in rep_conn]
        self.conn_receiver = [tb_c[m.conn_receiver[c]] for c in rep_conn]
        self.conn_latency = [m.conn_latency[c] for c in rep_conn]
        self.conn_net = [m.conn_net[c] for c in rep_conn]
        self.conn_links, self.conn_weight = [], []
        for k, c in enumerate(rep_conn):
            hops = Counter(link_c[li] for li in m.conn_links[c].tolist())
            ls = sorted(hops)
            self.conn_links.append(np.array(ls, dtype=np.int64))
            self.conn_weight.append(np.array([conn_size[k] * hops[x] / link_size[x] for x in ls]))
        self.steps = [[s[:4] + (tb_c[s[4]] if s[4] >= 0 else -1,) + s[5:] for s in m.steps[ti]]
                      for ti in rep_tb]

    def message_bytes(self, proto, size, buffsize=None) -> int:
        return self.full.message_bytes(proto, size, buffsize)

    def fifo(self, proto) -> int:
        return self.full.fifo(proto)

    def slices(self, proto) -> int:
        return self.full.slices(proto)

    def fifo_caps(self, proto, mac: int, npass: int) -> list[int]:
        # a class's connections send alike steps (the classes refine the senders' step shapes): one cap each
        full = self.full.fifo_caps(proto, mac, npass)
        return [full[c] for c in self.rep_conn]

    def link_bytes(self, per_class: np.ndarray) -> np.ndarray:
        """Each original link's bytes from its class's."""
        return per_class[self.link_class]

    def link_name(self, li: int) -> str:
        return self.full.link_name(li)

    def tb_name(self, ti: int) -> str:
        gid, tid, tb = self.tbs[ti]
        return f"gpu {gid} tb {tid} (ch {tb.chan})"


def _firsts(labels: list[int]) -> list[int]:
    first: dict = {}
    for i, c in enumerate(labels):
        first.setdefault(c, i)
    return [first[c] for c in range(len(first))]


def quotient(m) -> Quotient | None:
    """The machine's quotient, or None when no two threadblocks are alike (nothing to gain)."""
    if not m.tbs:
        return None
    tb_c, conn_c, link_c = classes(m)
    if len(set(tb_c)) == len(tb_c):
        return None
    return Quotient(m, tb_c, conn_c, link_c)
