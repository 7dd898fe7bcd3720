"""GPUs of an MSCCL++ plan that run one plan relabelled: the quotient :mod:`colls.verify.plan` executes.

A plan is *rotation-symmetric with shift d* when GPU ``r + d`` (mod N) holds GPU ``r``'s plan relabelled as
:mod:`colls.verify.symmetry` relabels an XML program: peers ``p + d``, an offset into input or output buffer
``b`` moved by ``d t_b`` chunks (``t_b`` from :meth:`colls.collectives.Collective.rotation_slices`), scratch
offsets, semaphore and barrier ids, threadblocks and their ops unchanged. Lists that only name things may be
in any order: a GPU's channels are named by the threadblock that first lists them (its position and the place
in its list), with the peer relative to the GPU and the name of the channel they pair with on the peer
(the k-th channel of ``g`` to ``p`` pairs with the k-th of ``p`` to ``g``: two GPUs a half-turn apart list
their pair's two channels in opposite orders, whatever writes the plan); remote buffers are named by their
peer relative to the GPU and their type. :func:`find` compares each GPU's plan so described and takes the
smallest period; a plan from any writer is found symmetric when it is.

Why GPUs ``0..d-1`` decide every GPU is the argument of :mod:`colls.verify.symmetry` (an XML program's proof
by symmetry), step for step: the collective is invariant under the relabelling ``g``; the plan is (the
description above is what the kernel reads: the ops, the channels' pairing, which rank's buffer a remote
operand is, the offsets); so an execution that fires an op together with its images stays invariant, it
hangs exactly when the whole plan hangs, and what GPU ``r0 + k d`` holds is ``g^k`` of what ``r0`` holds.
What a canonical GPU does to another GPU's memory or channel (a put, a remote read, a signal, packets) is,
mapped by ``g^-k``, what its image ``k`` orbit steps back does to a canonical GPU; each is made once, by the
canonical GPU whose op it is. A vector clock entry is kept for every threadblock of every GPU: the clock of an
image is the canonical one's with its entries moved by the rotation (:meth:`PlanSymmetry.image_clock`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from colls.collectives import rotation_period
from colls.verify.symmetry import ROTATION_INVARIANT, Symmetry

_CHANNEL_TYPES = ("memory", "port")


@dataclass
class PlanSymmetry:
    """The rotation (``sym``), each canonical endpoint of the GPUs beyond ``0..shift-1`` (``endpoints``:
    (gpu, type, channel) -> the same channel of gpu mod shift) and the clock layout: ``per_call`` threadblocks
    in a call, ``per_orbit_step`` of them on GPUs ``0..shift-1`` (a rotation by ``shift`` GPUs moves a
    threadblock's clock position by that many, within its call)."""

    sym: Symmetry
    endpoints: dict = field(default_factory=dict)
    per_call: int = 0
    per_orbit_step: int = 0

    @property
    def shift(self) -> int:
        return self.sym.shift

    @property
    def nranks(self) -> int:
        return self.sym.nranks

    def moved(self, index: int, k: int) -> int:
        """The clock position of ``g^k`` of the threadblock at ``index``."""
        base = index - index % self.per_call
        return base + (index - base + k * self.per_orbit_step) % self.per_call

    def image_clock(self, clock: np.ndarray, k: int) -> np.ndarray:
        """The clock of ``g^k`` of a threadblock whose clock is ``clock`` (what it has seen of ``e`` is what the
        original has seen of ``g^-k e``)."""
        k %= self.sym.order
        if not k:
            return clock
        blocks = clock.reshape(-1, self.per_call)
        return np.roll(blocks, k * self.per_orbit_step, axis=1).reshape(-1)


def find(model) -> PlanSymmetry | None:
    """The plan's rotation symmetry with the smallest shift, or None (module docstring). ``model`` is a
    :class:`colls.verify.plan._Model` whose static checks passed (channels paired, refs resolved)."""
    coll = model.coll
    n = model.n
    if coll is None or coll.kind not in ROTATION_INVARIANT or n < 2:
        return None
    names = [_channel_names(model, r) for r in range(n)]
    sizes = {"i": coll.in_chunks, "o": coll.out_chunks}
    for ti, to in coll.rotation_slices():
        shifts = {"i": ti, "o": to}
        sigs = [_signature(model, r, names, shifts, sizes) for r in range(n)]
        period = rotation_period(sigs)
        if period < n:
            return _symmetry(model, names, Symmetry(n, period, shifts, sizes))
    return None


def _symmetry(model, names, sym: Symmetry) -> PlanSymmetry:
    d, n = sym.shift, sym.nranks
    found = PlanSymmetry(sym)
    counts = [len(g["threadblocks"]) for g in model.gpus]
    found.per_call, found.per_orbit_step = sum(counts), sum(counts[:d])
    named = [{(ct, name): i for (ct, i), name in names[q].items()} for q in range(d)]
    for r in range(d, n):
        for (ct, i), name in names[r].items():
            found.endpoints[(r, ct, i)] = (r % d, ct, named[r % d][(ct, name)])
    return found


def _channel_names(model, r: int) -> dict:
    """(type, channel index) -> (threadblock position, place in its list) where the channel is first listed."""
    names: dict = {}
    for t, per in enumerate(model.tbch[r]):
        for ct in _CHANNEL_TYPES:
            for k, i in enumerate(per[ct]):
                names.setdefault((ct, i), (t, k))
    return names


def _signature(model, r: int, names: list, shifts: dict, sizes: dict) -> str:
    """GPU ``r``'s plan with ``r`` taken out (module docstring), as one string."""
    n = model.n
    g = model.gpus[r]
    chans = model.chans[r]

    def channel(ct, i):
        peer = chans[ct][i]
        partner = model.partner.get((r, ct, i))
        pname = names[partner[0]].get((ct, partner[2])) if partner else None
        return [names[r].get((ct, i)), (peer - r) % n, pname]

    def buffer(b, rbuf):
        kind = b.get("type")
        if kind is None and "buffer_id" in b:
            kind = rbuf.get(b["buffer_id"])
        t = shifts.get(kind, 0)
        if t and isinstance(b.get("index"), int):
            b = dict(b, index=(b["index"] - r * t) % sizes[kind])
        return b

    def op_(op, refs):
        op = dict(op)
        rbuf = refs.get(op.get("channel_type"), {})
        for key in ("src_buff", "dst_buff"):
            if key in op:
                op[key] = [buffer(b, rbuf) for b in op[key]]
        if op.get("name") == "pipeline":
            op["ops"] = [op_(inner, refs) for inner in op.get("ops") or []]
        return op

    tbs = []
    for t, tb in enumerate(g["threadblocks"]):
        refs = {ct: {j: g["remote_buffers"][x]["type"] for j, x in enumerate(model.tbref[r][t][ct])}
                for ct in _CHANNEL_TYPES}
        described = {key: value for key, value in tb.items()
                     if key not in ("ops", "channels", "remote_buffer_refs")}
        described["channels"] = {ct: [channel(ct, i) for i in model.tbch[r][t][ct]] for ct in _CHANNEL_TYPES}
        described["remote_buffer_refs"] = {
            ct: [[(g["remote_buffers"][x]["rank"] - r) % n, g["remote_buffers"][x]["type"]]
                 for x in model.tbref[r][t][ct]] for ct in _CHANNEL_TYPES}
        described["ops"] = [op_(op, refs) for op in tb["ops"]]
        tbs.append(described)
    rest = {key: value for key, value in g.items()
            if key not in ("id", "threadblocks", "channels", "remote_buffers")}
    peers = {ct: sorted((p - r) % n for p in chans[ct]) for ct in _CHANNEL_TYPES}
    return json.dumps([rest, peers, tbs], sort_keys=True)
