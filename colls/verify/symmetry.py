"""Ranks that run one program, relabelled: the quotient the execution and semantics passes run on.

**The symmetry.** A program of N ranks is *rotation-symmetric with shift d* (d divides N, d < N) when every
rank ``r + d`` (mod N) runs rank ``r``'s program relabelled by the map ``g``: the same threadblocks (ids,
channels, steps in order: type, count, buffers, dependencies, published numbers), peers ``g(p) = p + d``
(mod N), and an offset into buffer ``b`` moved to ``g_b(o) = o + d t_b`` (mod ``|b|``), where ``t_b`` is the
slice of ``b`` one rank owns: allgather output and reducescatter input ``c`` (the chunks per rank), alltoall
both ``c``, allreduce both ``c / N`` (or 0: a program whose every rank works alike on every index), the
other buffers and the scratch 0. :func:`find` computes each rank's program with its own rank taken out
(peers ``p - r``, offsets ``o - r t_b``) and looks for the smallest period ``d`` of that sequence; a file
from any generator is found symmetric when it is, whatever made it. Rooted collectives (broadcast, reduce)
and kinds the model does not cover are never taken as symmetric.

**Why ranks 0..d-1 decide every rank.** Let ``g`` act on values too: the atom ``(r, j)`` (input chunk ``j``
of rank ``r``) goes to ``(r + d, g_i(j))``.

1. *The collective is invariant under g.* With the ``t_b`` above, the initial state of rank ``g(r)``, its
   in-place aliasing, the input chunks it may write and the value every output chunk ``g_o(j)`` must end
   with are the images under ``g`` of rank ``r``'s (the formulas of :class:`colls.collectives.Collective`;
   ``tests/test_verify_symmetry.py`` checks every kind exhaustively on small machines).
2. *The execution is.* Firing is monotone and its end state is unique (:mod:`colls.verify.execution`).
   ``g`` maps the program onto itself, so in a ``g``-invariant state the images ``g^k(n)`` of an enabled
   step ``n`` are enabled, and firing them one after another keeps the rest enabled (they are on other
   threadblocks; two of them share a connection only as its sender and its receiver, and each firing adds
   the message or the room the other needs). So the run that fires a step with all its images stays
   invariant, and the state of rank ``r0 + k d`` is ``g^k`` of rank ``r0``'s: rank ``r``'s receive from rank
   ``s = s0 + k d`` reads connection ``(s, r, ch) = g^k(s0, r - k d, ch)``, the one rank ``s0`` sends on. The
   quotient run keeps ranks ``0..d-1`` and one connection per orbit (its sender one of them); it ends when
   the full run does, in the same state seen from ranks ``0..d-1``, so it hangs exactly when the program
   hangs, at the same call sizes.
3. *The values are.* What rank ``r0 + k d`` holds is ``g^k`` of what ``r0`` holds; a message from
   ``s0 + k d`` carries ``g^k`` of what ``s0`` sent. So the postcondition and the race check at ranks
   ``0..d-1`` are those of every rank, up to the relabelling. A race is between two steps of one rank;
   the happens-before search follows the quotient's edges and adds up the power of ``g`` each edge crossing
   to another orbit member adds (the execution pass's ``in_shift`` and ``out_shift``), and counts a path
   only when it comes back to the rank it started from (power 0 mod N / d).

When the quotient finds anything (an error or a warning), the verifier runs the whole program again, so
that a report names every rank it concerns, exactly as without the symmetry.
"""

from __future__ import annotations

from dataclasses import dataclass

from colls.collectives import rotation_period

#: the kinds whose conditions are invariant under rank rotation (broadcast and reduce have a root)
ROTATION_INVARIANT = ("allgather", "reducescatter", "allreduce", "alltoall")


@dataclass
class Symmetry:
    """Rotation by ``shift`` ranks; ``shifts[b]`` is ``t_b`` (per rank) for the buffers ``"i"``, ``"o"``."""

    nranks: int
    shift: int
    shifts: dict
    sizes: dict

    @property
    def order(self) -> int:
        """The number of ranks in one orbit (N / shift)."""
        return self.nranks // self.shift

    def image(self, value, k: int):
        """``g^k(value)``: a ``(index, mask)`` sum, a frozenset of atoms, or anything else (uninitialised,
        unread) unchanged."""
        k %= self.order
        if not k:
            return value
        n, s = self.nranks, k * self.shift
        di, size = s * self.shifts["i"], self.sizes["i"]
        if type(value) is tuple:
            index, mask = value
            full = (1 << n) - 1
            return ((index + di) % size, ((mask << s) | (mask >> (n - s))) & full)
        if isinstance(value, frozenset):
            return frozenset(((r + s) % n, (j + di) % size) for r, j in value)
        return value


def find(cx) -> Symmetry | None:
    """The program's rotation symmetry with the smallest shift, or None (see the module docstring)."""
    coll = cx.coll
    if coll is None or coll.kind not in ROTATION_INVARIANT or coll.nranks < 2:
        return None
    n = coll.nranks
    sizes = {"i": coll.in_chunks, "o": coll.out_chunks}
    if len(cx.gpu_by_id) != n or sorted(cx.gpu_by_id) != list(range(n)):
        return None
    for ti, to in coll.rotation_slices():
        shifts = {"i": ti, "o": to}
        sigs = [_signature(cx.gpu_by_id[r], r, n, shifts, sizes) for r in range(n)]
        period = rotation_period(sigs)
        if period < n:
            return Symmetry(n, period, shifts, sizes)
    return None


def _signature(gpu, r: int, n: int, shifts: dict, sizes: dict) -> tuple:
    """Rank ``r``'s program with ``r`` taken out: peers as ``p - r``, offsets as ``o - r t_b`` (mod sizes)."""
    def off(buf, o):
        t = shifts.get(buf, 0)
        if not t or o is None or o < 0:
            return o
        return (o - r * t) % sizes[buf]

    def peer(q):
        return q if q is None or q < 0 else (q - r) % n

    tbs = []
    for tb in sorted(gpu.tbs, key=lambda tb: (tb.id is None, tb.id)):
        steps = tuple((st.s, st.type, st.srcbuf, off(st.srcbuf, st.srcoff), st.dstbuf, off(st.dstbuf, st.dstoff),
                       st.cnt, st.depid, st.deps, st.hasdep) for st in tb.steps)
        tbs.append((tb.id, tb.chan, peer(tb.send), peer(tb.recv), steps))
    return (gpu.i_chunks, gpu.o_chunks, gpu.s_chunks, tuple(tbs))
