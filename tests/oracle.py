"""An oracle independent of colls.verify: run an MSCCL program whole step by whole step, in a random order.

Every order the runtime allows is possible: a step runs when its dependency is published (numbered as the
kernel numbers steps: a nop without a dependency is dropped, so later steps count one lower; nops at the end
of a thread block wait for nothing), its incoming connection holds a message and its outgoing one has room.
Values are plain sets of (rank, input index) atoms, summed here with its own arithmetic, so a sum that
counts an input twice or reads a chunk nothing wrote is seen.
"""

from __future__ import annotations

import random

from colls.collectives import Collective, atoms
from colls.program import STEP_SEMANTICS
from colls.verify import fifo_messages, verify


def run(p, inplace: bool, rng: random.Random, root: int = 0):
    """Run whole steps in a random allowed order: (collective, {rank: output atom sets}), or None if stuck."""
    n = p.ngpus
    c = p.nchunksperloop // n if p.coll in ("allgather", "reducescatter", "alltoall") else p.nchunksperloop
    coll = Collective(p.coll, n, c, root if p.coll in ("broadcast", "reduce") else 0)
    mem = {g.id: {k: None if v is None else atoms(v) for k, v in coll.initial_state(g.id, inplace, g.s_chunks).items()}
           for g in p.gpus}
    blocks = {(g.id, b.id): b for g in p.gpus for b in g.tbs}
    number = {}                                  # the kernel's step numbers: dependency-free nops are dropped
    for key, b in blocks.items():
        shift = 0
        for i, s in enumerate(b.steps):
            number[key + (i,)] = i - shift
            shift += s.type == "nop" and s.depid < 0
    pc = dict.fromkeys(blocks, 0)
    published = dict.fromkeys(blocks, -1)
    fifo: dict = {}

    def waits(key, i):
        s = blocks[key].steps[i]
        if s.depid < 0 or (s.type == "nop" and all(t.type == "nop" for t in blocks[key].steps[i:])):
            return False
        return published[(key[0], s.depid)] < s.deps

    def ready(key):
        b = blocks[key]
        if pc[key] == len(b.steps):
            return False
        s = b.steps[pc[key]]
        sends, receives = STEP_SEMANTICS[s.type][:2]
        return not (waits(key, pc[key]) or (receives and not fifo.get((b.recv, key[0], b.chan)))
                    or (sends and len(fifo.get((key[0], b.send, b.chan), ())) >= fifo_messages(p.proto)))

    # readiness changes only for the block that fired, the ends of its connections and its rank's blocks
    # (a published dependency), so only those are looked at again after a step
    sender = {(k[0], b.send, b.chan): k for k, b in blocks.items() if b.send >= 0}
    receiver = {(b.recv, k[0], b.chan): k for k, b in blocks.items() if b.recv >= 0}
    on_rank: dict = {}
    for k in blocks:
        on_rank.setdefault(k[0], []).append(k)
    candidates: list = []
    slot: dict = {}

    def recheck(key):
        if ready(key) != (key in slot):
            if key in slot:                      # swap with the last and drop it
                i, last = slot.pop(key), candidates.pop()
                if last != key:
                    candidates[i], slot[last] = last, i
            else:
                slot[key] = len(candidates)
                candidates.append(key)

    for key in blocks:
        recheck(key)
    while candidates:
        key = rng.choice(candidates)
        g, b = key[0], blocks[key]
        s = b.steps[pc[key]]
        sends, receives, reads, writes, reduces = STEP_SEMANTICS[s.type]
        where = [coll.alias(g, s.dstbuf, s.dstoff + k, inplace) for k in range(s.cnt)] if writes else []
        got = fifo[(b.recv, g, b.chan)].pop(0) if receives else None
        local = [mem[g].get(coll.alias(g, s.srcbuf, s.srcoff + k, inplace)) for k in range(s.cnt)] if reads else None
        if s.type == "re":
            values = [_add(mem[g].get(w), v) for w, v in zip(where, local)]
        elif reduces:
            values = [_add(v, d) for v, d in zip(local, got)]
        else:
            values = got if receives else local
        if sends:
            fifo.setdefault((g, b.send, b.chan), []).append(values)
        for w, v in zip(where, values or ()):
            mem[g][w] = v
        if s.hasdep == 1 and s.type != "nop":
            published[key] = number[key + (pc[key],)]
        pc[key] += 1
        touched = {key}
        if sends:
            touched.add(receiver.get((g, b.send, b.chan)))
        if receives:
            touched.add(sender.get((b.recv, g, b.chan)))
        if s.hasdep == 1:
            touched.update(on_rank[g])
        for k in touched - {None}:
            recheck(k)
    if any(pc[key] < len(b.steps) for key, b in blocks.items()):
        return None
    return coll, {g.id: [mem[g.id].get(coll.alias(g.id, "o", j, inplace)) for j in range(coll.out_chunks)]
                  for g in p.gpus}


def computes(p, inplace: bool, rng: random.Random, root: int = 0) -> bool:
    """Does one random execution finish with every output chunk right?"""
    result = run(p, inplace, rng, root)
    if result is None:
        return False
    coll, outputs = result
    return all(coll.expected(rank, j) is None or value == atoms(coll.expected(rank, j))
               for rank, values in outputs.items() for j, value in enumerate(values))


def _add(a, b):
    """A sum of symbolic values; None (never written) or an input counted twice poisons it."""
    if a is None or b is None or not a.isdisjoint(b):
        return None
    return a | b


def verdict_holds(p, seeds: int, root: int = 0, why: tuple = ()) -> None:
    """``verify`` rejects ``p``, or ``seeds`` random executions per aliasing the file claims are all right."""
    report = verify(p, "exe")
    report.format()
    if not report.ok:
        return
    for inplace in [m for m, claimed in ((True, p.inplace), (False, p.outofplace)) if claimed]:
        for seed in range(seeds):
            assert computes(p, inplace, random.Random(seed), root), (*why, report.format())
