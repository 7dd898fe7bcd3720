"""The MSCCL XML files of bench/published_files.yaml, rebuilt from the rules they follow.

The published files (github.com/rouge3877/ns3-msccl-data, Validation/SingleCollective/Input/1x8-*) were
written by msccl-tools for 8 GPUs, in place, with no byte range; their names give the family and its
parameters (``ag_ring_<proto>_<R>_<I>``, ``ag_allpair_<proto>_x_<N>``, ``ar_allpair_<proto>_x_<N>``).
These functions write the same steps, threadblocks and channels (checked element by element against the
published text of several files of each family). One liberty: where a step of an all-pairs allreduce waits
on several other threadblocks (the ``nop`` steps before it), the published files list them in an order
msccl-tools took from a Python set; here they come in index order. A step runs when all of them are done,
so the order changes no timing.
"""

from __future__ import annotations

NGPUS = 8
PROTO = {"ll": "LL", "LL128": "LL128", "simple": "Simple"}


def make(name: str) -> str:
    """The XML text of the published file ``name`` (e.g. ``ag_ring_simple_2_1``)."""
    parts = name.split("_")
    family, proto = "_".join(parts[:2]), parts[2]
    if family == "ag_ring":
        return _ag_ring(name, proto, int(parts[3]), int(parts[4]))
    if family == "ag_allpair":
        return _ag_allpair(name, proto, int(parts[4]))
    if family == "ar_allpair":
        return _ar_allpair(name, proto, int(parts[4]))
    raise ValueError(f"{name}: not a published family")


def _step(kind, srcbuf, srcoff, dstbuf, dstoff, cnt, depid=-1, deps=-1, hasdep=0) -> tuple:
    return kind, srcbuf, srcoff, dstbuf, dstoff, cnt, depid, deps, hasdep


def _render(name, proto, nchannels, nchunks, coll, gpus) -> str:
    """``gpus``: (i_chunks, o_chunks, s_chunks, threadblocks) per rank; a threadblock is (send, recv, chan,
    steps), numbered in (send, recv, chan) order as msccl-tools numbers them."""
    out = [f'<algo name="{name}" proto="{PROTO[proto]}" nchannels="{nchannels}" nchunksperloop="{nchunks}" '
           f'ngpus="{NGPUS}" coll="{coll}" inplace="1" outofplace="0" minBytes="0" maxBytes="0">']
    for rank, (ic, oc, sc, tbs) in enumerate(gpus):
        out.append(f'  <gpu id="{rank}" i_chunks="{ic}" o_chunks="{oc}" s_chunks="{sc}">')
        for tid, (send, recv, chan, steps) in enumerate(sorted(tbs, key=lambda t: t[:3])):
            out.append(f'    <tb id="{tid}" send="{send}" recv="{recv}" chan="{chan}">')
            for s, (kind, sb, so, db, do, cnt, depid, deps, hasdep) in enumerate(steps):
                out.append(f'      <step s="{s}" type="{kind}" srcbuf="{sb}" srcoff="{so}" dstbuf="{db}" '
                           f'dstoff="{do}" cnt="{cnt}" depid="{depid}" deps="{deps}" hasdep="{hasdep}"/>')
            out.append("    </tb>")
        out.append("  </gpu>")
    out.append("</algo>")
    return "\n".join(out) + "\n"


def _ag_ring(name, proto, R, I) -> str:
    """A ring 0 -> 1 -> ... -> 7 -> 0 whose chunks are spread over R channels (chunk c on channel c mod R), I
    instances of it (channel i R + r, chunk offset c I + i). One threadblock per channel receives each of its
    chunks from the previous rank and sends it on, in the order the chunks arrive."""
    gpus = []
    for g in range(NGPUS):
        tbs = []
        for i in range(I):
            for r in range(R):
                ops = []
                for c in range(r, NGPUS, R):
                    hop, off = (g - c) % NGPUS, c * I + i
                    if hop > 0:
                        ops.append((hop, 0, _step("r", "o", off, "o", off, 1)))
                    if hop < NGPUS - 1:
                        ops.append((hop, 1, _step("s", "o", off, "o", off, 1)))
                ops.sort(key=lambda x: x[:2])
                send = (g + 1) % NGPUS if any(o[2][0] == "s" for o in ops) else -1
                recv = (g - 1) % NGPUS if any(o[2][0] == "r" for o in ops) else -1
                tbs.append((send, recv, i * R + r, [o[2] for o in ops]))
        gpus.append((0, NGPUS * I, 0, tbs))
    return _render(name, proto, R * I, NGPUS * I, "allgather", gpus)


def _ag_allpair(name, proto, N) -> str:
    """Every rank sends its chunk to each peer and receives the peer's, one threadblock per peer and channel."""
    gpus = []
    for g in range(NGPUS):
        tbs = [(p, p, i, [_step("s", "o", g * N + i, "o", g * N + i, 1),
                          _step("r", "o", p * N + i, "o", p * N + i, 1)])
               for p in range(NGPUS) if p != g for i in range(N)]
        gpus.append((0, NGPUS * N, 0, tbs))
    return _render(name, proto, N, NGPUS * N, "allgather", gpus)


def _ar_allpair(name, proto, N) -> str:
    """All-pairs allreduce: rank r owns block r (8 chunks); it sends each peer that peer's block into scratch,
    receives every peer's copy of its own block, adds the 7 copies chunk by chunk (chunk k on the threadblock
    of peer k, chunk r on a threadblock of its own), then sends the summed block to every peer. N instances
    on channels of their own, each with its own 64 input and 56 scratch chunks."""
    n = NGPUS
    per_in, per_scratch = n * n, n * (n - 1)
    gpus = []
    for r in range(n):
        tbs = []
        for i in range(N):
            io, so = per_in * i, per_scratch * i

            def tb_id(b):                     # the XML id of base threadblock b in instance i
                return b * N + i

            def reduces(k, first_dep):        # chunk k of block r: the 7 received copies added in turn
                return [_step("re", "s", so + k + n * j, "i", io + r * n + k, 1,
                              tb_id(first_dep) if j == 0 else -1, 1 if j == 0 else -1, 1 if j == n - 2 else 0)
                        for j in range(n - 1)]
            # base threadblock 0: chunk r of block r, once every receive has landed (threadblocks 1..7)
            ops = [_step("nop", "i", -1, "o", -1, 0, tb_id(d), 1) for d in range(2, n)] + reduces(r, 1)
            tbs.append((-1, -1, i, ops))
            for b in range(1, n):             # base threadblock b talks to peer p
                p = b - 1 if b - 1 < r else b
                at_peer = r if r < p else r - 1
                others = [d for d in range(1, n) if d != b]
                ops = [_step("s", "i", io + p * n, "s", so + n * at_peer, n),
                       _step("r", "i", io + r * n, "s", so + n * (b - 1), n, hasdep=1)]
                ops += [_step("nop", "i", -1, "o", -1, 0, tb_id(d), 1) for d in others[1:]] + reduces(p, others[0])
                # the summed block goes out once every chunk of it is added (each threadblock's last reduce)
                done = [d for d in range(n) if d != b]
                last = [12 if d == 0 else 13 for d in done]
                ops += [_step("nop", "i", -1, "o", -1, 0, tb_id(d), s) for d, s in zip(done[1:], last[1:])]
                ops += [_step("s", "i", io + r * n, "i", io + r * n, n, tb_id(done[0]), last[0]),
                        _step("r", "i", io + p * n, "i", io + p * n, n)]
                tbs.append((p, p, i, ops))
        gpus.append((per_in * N, 0, per_scratch * N, tbs))
    return _render(name, proto, N, per_in * N, "allreduce", gpus)
