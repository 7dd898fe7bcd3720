"""Pass 6, semantics: for each aliasing the file claims, does every call compute the collective?

A symbolic execution in the simulation's firing order (values: frozensets of (rank, input index) atoms, so
a sum that counts an input twice or misses one is seen), then a happens-before check of every pair of
conflicting accesses to one chunk, then the postcondition on every output chunk.

Happens-before. The runtime runs the program once per slice of the buffer; each run touches the same slice
of every chunk, so two accesses conflict only within one run, and it is enough to order them in one.
Three kinds of edges between steps:

- *local* edges (program order in a thread block; a dependency) mean "the earlier step has finished
  before the later one starts";
- *message* edges (a send to its matching receive) order the two steps piece by piece: the receiver
  holds the data at position j of its message only after the sender read position j of its own;
- *room* edges (the receive of message k to the send of message k + FIFO on a connection) mean only that
  the sender waits for space, piece by piece too.

An access X is ordered before an access Y when a path of edges leads from X to Y and includes a local edge,
or when the path is made of message edges alone (a chain of sends, forwards and receives: the data moves on
position by position) and X's chunk is at a position of its step no later than Y's chunk is of its own.
Steps are simulated in a firing order that respects every edge, so a backward search from Y may be pruned
to steps that fired after X.
"""

from __future__ import annotations

from collections import defaultdict, deque

from colls.collectives import SymbolicError, describe, reduce_values
from colls.program import STEP_SEMANTICS
from colls.verify.context import BUFFER_NAMES, REPORT_CAP, Context

# path states of the backward search, best first: a local edge on the path, message edges only, other
_LOCAL, _PURE, _LOOSE = 2, 1, 0


class _Garbage:
    """The value of data read from a chunk nothing had written (``origin`` says where it was read)."""

    __slots__ = ("origin",)

    def __init__(self, origin):
        self.origin = origin


def _chunk_name(storage) -> str:
    buf, index = storage
    return f"{BUFFER_NAMES[buf]} chunk {index}"


def _range_name(storages) -> str:
    buf, first = storages[0]
    return f"{BUFFER_NAMES[buf]} chunks [{first}, {first + len(storages)})"


def check(cx: Context, inplace: bool) -> None:
    """Symbolic execution, race check and postcondition for one aliasing."""
    m = cx.machine
    coll = cx.coll
    label = "in-place" if inplace else "out-of-place"
    calls = cx.modes_text(inplace)
    alias = coll.alias
    sym = m.sym                             # ranks 0..shift-1 stand for every rank (colls.verify.symmetry)
    gpus = [g for g in cx.p.gpus if sym is None or g.id < sym.shift]
    state = {g.id: coll.initial_state(g.id, inplace, scratch=g.s_chunks) for g in gpus}
    payloads = [deque() for _ in m.conn_keys]
    accesses: dict = defaultdict(list)      # (gpu, storage) -> [(node, is_write, position)] in firing order
    counts: dict = defaultdict(int)
    done: set = set()

    def report(rule, message, n):
        """At most one finding per (rule, step), and REPORT_CAP per rule."""
        if (rule, n) in done:
            return
        done.add((rule, n))
        counts[rule] += 1
        if counts[rule] <= REPORT_CAP:
            g, tb = m.tbs[m.n_ti[n]]
            cx.at(rule, f"{label}: {message}", g, tb, m.n_idx[n], calls=calls)

    def load(mem, storage, n):
        value = mem.get(storage)
        return _Garbage((n, storage)) if value is None else value

    def combine(a, b, n):
        if isinstance(a, _Garbage):
            return a
        if isinstance(b, _Garbage):
            return b
        try:
            return reduce_values(a, b)
        except SymbolicError as e:
            report("double-count", f"this reduction {e}", n)
            return e.value

    for n in m.order:
        st = m.n_step[n]
        typ = st.type
        if typ == "nop":
            continue
        ti = m.n_ti[n]
        gid = m.tbs[ti][0].id
        mem = state[gid]
        sends, receives, reads, writes, reduces = STEP_SEMANTICS[typ]
        cnt = st.cnt
        incoming = payloads[m.in_conn[ti]].popleft() if receives else None
        if incoming is not None and m.in_shift[ti]:     # sent by g^k of the representative that sent it
            incoming = [sym.image(v, m.in_shift[ti]) for v in incoming]
        src = [alias(gid, st.srcbuf, st.srcoff + k, inplace) for k in range(cnt)] if reads else None
        dst = [alias(gid, st.dstbuf, st.dstoff + k, inplace) for k in range(cnt)] if writes else None
        noop_copy = typ == "cpy" and src == dst
        if reads and writes and src != dst and not set(src).isdisjoint(dst):
            report("step-overlap", f"source {_range_name(src)} and destination {_range_name(dst)} overlap without "
                   "being equal: the kernel's threads read and write them at once", n)
        local = [load(mem, s, n) for s in src] if reads else None
        if typ == "re":
            values = [combine(load(mem, d, n), v, n) for d, v in zip(dst, local)]
        elif reduces:
            values = [combine(v, d, n) for v, d in zip(local, incoming)]
        elif receives:
            values = incoming
        else:                                   # s, cpy
            values = local
        if sends:
            payloads[m.out_conn[ti]].append(values)
        if reads:
            for k, s in enumerate(src):
                accesses[(gid, s)].append((n, False, k))
        if writes and not noop_copy:
            for k, (d, v) in enumerate(zip(dst, values)):
                if d[0] == "i" and not coll.input_writable(gid, d[1], inplace):
                    why = ("only the rank's own slice of the input is also output" if inplace
                           else "an out-of-place call must leave the input unchanged")
                    report("input-write", f"writes input chunk {d[1]}, which belongs to the caller ({why})", n)
                mem[d] = v
                accesses[(gid, d)].append((n, True, k))

    _check_races(cx, accesses, label, calls)

    for g in gpus:
        mem = state[g.id]
        wrong = 0                           # described for the first 3 alone (a description reads every atom)
        for j in range(coll.out_chunks):
            want = coll.expected(g.id, j)
            if want is None:
                continue
            got = mem.get(alias(g.id, "o", j, inplace))
            if isinstance(got, _Garbage):
                rn, storage = got.origin
                report("uninitialised-read", f"gpu {g.id} output chunk {j} ends up holding what this step read "
                       f"from {_chunk_name(storage)} before anything was written there", rn)
            elif got != want:
                wrong += 1
                if wrong <= 3:
                    cx.add("postcondition", f"gpu {g.id}: {label}: output chunk {j} holds {describe(got)}, "
                           f"expected {describe(want)}", g.id, line=g.line, calls=calls)
        if wrong > 3:
            cx.add("postcondition", f"gpu {g.id}: {label}: and {wrong - 3} more wrong output chunks", g.id,
                   line=g.line, calls=calls)
    for rule, count in sorted(counts.items()):
        if count > REPORT_CAP:
            cx.add(rule, f"{label}: {count - REPORT_CAP} more steps break this rule", calls=calls)


def _check_races(cx: Context, accesses, label: str, calls: str) -> None:
    m = cx.machine
    n_ti = m.n_ti
    memo: dict = {}
    reported: set = set()
    count = 0

    def check(x, kx, y, ky, storage, kinds):
        nonlocal count
        if n_ti[x] == n_ti[y] or (x, y) in reported:
            return
        key = (x, y, kx <= ky)
        if key not in memo:
            memo[key] = happens_before(m, x, y, kx <= ky)
        if memo[key]:
            return
        reported.add((x, y))
        count += 1
        if count <= REPORT_CAP:
            g, tb = m.tbs[n_ti[y]]
            cx.at("race", f"{label}: {m.describe_node(x)} {kinds[0]} {_chunk_name(storage)} and "
                  f"{m.describe_node(y)} {kinds[1]} it, with nothing ordering them (no dependency, program order "
                  "or chain of messages)", g, tb, m.n_idx[y], calls=calls)

    for (gid, storage), acc in accesses.items():
        last_write = None
        readers: list = []
        for node, is_write, k in acc:
            if is_write:
                if last_write is not None and last_write[0] != node:
                    check(*last_write, node, k, storage, ("writes", "writes"))
                for r in readers:
                    if r[0] != node:
                        check(*r, node, k, storage, ("reads", "writes"))
                last_write, readers = (node, k), []
            else:
                if last_write is not None and last_write[0] != node:
                    check(*last_write, node, k, storage, ("writes", "reads"))
                readers.append((node, k))
    if count > REPORT_CAP:
        cx.add("race", f"{label}: {count - REPORT_CAP} more racing pairs of steps", calls=calls)


def happens_before(m, x: int, y: int, in_step: bool) -> bool:
    """Is step x ordered before step y (x fired before y)? ``in_step``: x's chunk sits at a position of its
    step no later than y's does of its own, so a chain of message edges alone orders them too."""
    pos = m.pos
    px = pos[x]
    ti = m.n_ti[x]
    x_end = m.tb_start[ti] + m.tb_len[ti]   # later steps of x's thread block: x < n < x_end
    n_ti, n_idx, dep_pred, msg_pred, cap_pred = m.n_ti, m.n_idx, m.dep_pred, m.msg_pred, m.cap_pred
    # under a symmetry a node stands for its images: a message or room edge can lead to the image g^k of
    # the node it names (k: the machine's in_shift / out_shift), so the search keeps the power of g it is
    # at, and only a path back at power 0 reaches x itself (colls.verify.symmetry)
    in_shift, out_shift = m.in_shift, m.out_shift
    order = m.sym.order if m.sym is not None else 1
    best = {}                               # (node, power) -> best path state seen from y
    stack = [(y, 0, _PURE)]
    while stack:
        n, k, state = stack.pop()
        t = n_ti[n]
        # pushed last, popped first: program order, then the dependency. What orders two steps of one rank is
        # most often a chain on that rank; following messages first wandered over the other ranks (an RCCL
        # trees allreduce on 4 x MI250: 239 steps visited a pair, 47 s; local edges first: 1.1 and 0.3 s)
        for p, edge, kp in ((cap_pred[n], _LOOSE, (k + out_shift[t]) % order),
                            (msg_pred[n], _PURE, (k + in_shift[t]) % order),
                            (dep_pred[n], _LOCAL, k), (n - 1 if n_idx[n] > 0 else -1, _LOCAL, k)):
            if p < 0:
                continue
            ps = _LOCAL if _LOCAL in (state, edge) else (_PURE if state == edge == _PURE else _LOOSE)
            if p == x and kp == 0:
                if ps == _LOCAL or (ps == _PURE and in_step):
                    return True
                continue
            if x < p < x_end and kp == 0:    # x -> p is program order: a local edge
                return True
            if pos[p] < px or best.get((p, kp), -1) >= ps:
                continue
            best[(p, kp)] = ps
            stack.append((p, kp, ps))
    return False
