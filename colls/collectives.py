"""Collectives as data: buffer shapes, pre- and postconditions over chunks, and in-place aliasing.

Chunk model. A rank's buffers are arrays of equal-sized chunks: ``i`` (input), ``o`` (output), ``s``
(scratch). ``chunks`` (the chunk factor ``c``) says how many chunks one rank's share is cut into:

==============  ============  ============  ==================================================
collective      input chunks  output chunks  output chunk ``j`` of rank ``r`` must hold
==============  ============  ============  ==================================================
allgather       c             N c            input ``j % c`` of rank ``j // c``
reducescatter   N c           c              the sum over ranks q of input ``r c + j`` of q
allreduce       c             c              the sum over ranks q of input ``j`` of q
alltoall        N c           N c            input ``r c + j % c`` of rank ``j // c``
broadcast       c             c              input ``j`` of the root
reduce          c             c              (root only) the sum over ranks q of input ``j`` of q
==============  ============  ============  ==================================================

``nchunksperloop`` of an MSCCL program is ``max(input chunks, output chunks)``: the runtime cuts the
buffer of ``count x sizeMultiplier`` elements (the larger of the two) into that many chunks.

Values. Input chunk ``j`` of rank ``r`` is the atom ``(r, j)``. A chunk's symbolic value is the set of atoms
it sums (a copy has one atom; a reduction is the union of its operands, which must be disjoint, or an atom
would be counted twice). ``None`` is an uninitialised chunk. Every value a right program computes sums one
input index over some ranks, so that is how a value is held: the pair ``(index, mask)``, bit ``r`` of
``mask`` set for each rank summed. Copies, sums, the disjointness test and the comparison with the
postcondition are then a few integer operations, whatever the number of ranks. Only a wrong program mixes
input indices in one sum; such a value is a frozenset of atoms (:func:`atoms` gives either form as atoms).

In-place aliasing (as the runtimes define in-place calls): allgather's input is rank ``r``'s slice
``[r c, r c + c)`` of its output; reducescatter's output is rank ``r``'s slice of its input; for the other
collectives input and output are one buffer.
"""

from __future__ import annotations

from dataclasses import dataclass

from colls.errors import CollsError

KINDS = ("allgather", "reducescatter", "allreduce", "alltoall", "broadcast", "reduce")
REDUCING = frozenset({"reducescatter", "allreduce", "reduce"})

# The nccl-tests bus-bandwidth factors (busbw = algbw x factor), n = number of ranks.
def busbw_factor(kind: str, n: int) -> float:
    if kind == "allreduce":
        return 2 * (n - 1) / n
    if kind in ("allgather", "reducescatter", "alltoall"):
        return (n - 1) / n
    return 1.0


Atom = tuple[int, int]
Value = tuple  # (input index, rank bitmask); a frozenset of Atom when indices mix; None = uninitialised


class SymbolicError(Exception):
    """Raised by value operations that would compute a wrong result (message says which). ``value`` is what
    the operation computes anyway, for a checker that reports and carries on."""

    def __init__(self, message: str, value=None):
        super().__init__(message)
        self.value = value


def _ranks(mask: int) -> list[int]:
    out, r = [], 0
    while mask:
        if mask & 1:
            out.append(r)
        mask >>= 1
        r += 1
    return out


def atoms(value) -> frozenset:
    """The (rank, input index) atoms a value sums."""
    if isinstance(value, frozenset):
        return value
    index, mask = value
    return frozenset((r, index) for r in _ranks(mask))


def reduce_values(a, b):
    """The sum of two values; SymbolicError when one is uninitialised or they share an atom."""
    if a is None or b is None:
        raise SymbolicError("reduces an uninitialised chunk", a if b is None else b)
    if type(a) is tuple and type(b) is tuple and a[0] == b[0]:
        if a[1] & b[1]:
            dup = ", ".join(f"input {a[0]} of rank {r}" for r in _ranks(a[1] & b[1]))
            raise SymbolicError(f"counts {dup} twice", (a[0], a[1] | b[1]))
        return (a[0], a[1] | b[1])
    sa, sb = atoms(a), atoms(b)
    union = sa | sb
    if len(union) != len(sa) + len(sb):
        dup = ", ".join(f"input {j} of rank {r}" for r, j in sorted(sa & sb))
        raise SymbolicError(f"counts {dup} twice", union)
    return union


def describe(value: Value | None) -> str:
    if value is None:
        return "nothing (uninitialised)"
    summed = sorted(atoms(value))
    if len(summed) == 1:
        r, j = summed[0]
        return f"input {j} of rank {r}"
    idx = {j for _, j in summed}
    ranks = sorted(r for r, _ in summed)
    if len(idx) == 1:
        return f"the sum of input {idx.pop()} over ranks {rank_ranges(ranks)}"
    return "a sum of " + ", ".join(f"({r},{j})" for r, j in summed)


def rank_ranges(ranks: list[int]) -> str:
    """Sorted ints as compact ranges for people: ``[0, 1, 2, 3, 5]`` -> ``"0-3,5"``."""
    out = []
    i = 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        out.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ",".join(out)


@dataclass(frozen=True)
class Collective:
    kind: str
    nranks: int
    chunks: int = 1
    root: int = 0

    def __post_init__(self):
        if self.kind not in KINDS:
            raise CollsError(f"unknown collective {self.kind!r} (choose from {', '.join(KINDS)})",
                             key="collective")
        if self.nranks < 2:
            raise CollsError(f"a collective needs at least 2 ranks, got {self.nranks}")
        if self.chunks < 1:
            raise CollsError(f"chunk factor must be >= 1, got {self.chunks}")
        if not 0 <= self.root < self.nranks:
            raise CollsError(f"root {self.root} is not a rank of {self.nranks}", key="root")

    @property
    def reducing(self) -> bool:
        return self.kind in REDUCING

    @property
    def rooted(self) -> bool:
        return self.kind in ("broadcast", "reduce")

    @property
    def in_chunks(self) -> int:
        return self.nranks * self.chunks if self.kind in ("reducescatter", "alltoall") else self.chunks

    @property
    def out_chunks(self) -> int:
        return self.nranks * self.chunks if self.kind in ("allgather", "alltoall") else self.chunks

    @property
    def nchunksperloop(self) -> int:
        return max(self.in_chunks, self.out_chunks)

    def size(self, buf: str, scratch: int = 0) -> int:
        return {"i": self.in_chunks, "o": self.out_chunks, "s": scratch}[buf]

    def with_chunks(self, chunks: int) -> "Collective":
        return Collective(self.kind, self.nranks, chunks, self.root)

    def rotation_slices(self) -> list[tuple[int, int]]:
        """The per-rank slices ``(t_i, t_o)`` of the input and output under which the collective is invariant
        when every rank ``r`` becomes ``r + d``, offset ``j`` of buffer ``b`` becomes ``j + d t_b`` and input
        atom ``(r, j)`` becomes ``(r + d, j + d t_i)``: the initial state, the in-place aliasing, the writable
        input and every expected output move alike (``tests/test_verify_symmetry.py`` checks it). Allgather's
        output and reducescatter's input are cut in ``c`` chunks per rank, alltoall's both; allreduce holds
        for any slice that is whole after N shifts (``c / N`` first, then 0). Rooted collectives have none."""
        n, c = self.nranks, self.chunks
        return {"allgather": [(0, c)], "reducescatter": [(c, 0)], "alltoall": [(c, c)],
                "allreduce": ([(c // n, c // n)] if c % n == 0 else []) + [(0, 0)]}.get(self.kind, [])

    # --- conditions -----------------------------------------------------------------------------------
    def input_value(self, rank: int, j: int) -> Value:
        return (j, 1 << rank)

    def expected(self, rank: int, j: int) -> Value | None:
        """What output chunk ``j`` of ``rank`` must hold at the end; None if it is unconstrained."""
        n, c = self.nranks, self.chunks
        k = self.kind
        everyone = (1 << n) - 1
        if k == "allgather":
            return (j % c, 1 << (j // c))
        if k == "reducescatter":
            return (rank * c + j, everyone)
        if k == "allreduce":
            return (j, everyone)
        if k == "alltoall":
            return (rank * c + j % c, 1 << (j // c))
        if k == "broadcast":
            return (j, 1 << self.root)
        if k == "reduce":
            return (j, everyone) if rank == self.root else None
        raise AssertionError(k)

    def alias(self, rank: int, buf: str, index: int, inplace: bool) -> tuple[str, int]:
        """The storage a buffer chunk denotes: in-place calls fold ``i`` and ``o`` into one buffer.

        Returns ``(storage, index)`` where storage is ``"i"``, ``"o"`` or ``"s"``; two buffer chunks are the
        same memory exactly when their aliases are equal.
        """
        if not inplace or buf == "s":
            return buf, index
        c = self.chunks
        if self.kind == "allgather":
            return ("o", rank * c + index) if buf == "i" else ("o", index)
        if self.kind == "reducescatter":
            return ("i", rank * c + index) if buf == "o" else ("i", index)
        return "o", index

    def initial_state(self, rank: int, inplace: bool, scratch: int = 0) -> dict:
        """Storage -> value before the call, for one rank, under the given aliasing."""
        state: dict = {}
        for j in range(self.out_chunks):
            state[self.alias(rank, "o", j, inplace)] = None
        for j in range(scratch):
            state[("s", j)] = None
        for j in range(self.in_chunks):
            state[self.alias(rank, "i", j, inplace)] = self.input_value(rank, j)
        return state

    def input_writable(self, rank: int, index: int, inplace: bool) -> bool:
        """May a program write input chunk ``index``? Only where the input is also the output.

        An out-of-place call's send buffer belongs to the caller and must come back unchanged; an in-place
        reducescatter may write only its own slice of the input.
        """
        if not inplace:
            return False
        if self.kind == "reducescatter":
            c = self.chunks
            return rank * c <= index < rank * c + c
        return True

    def check_outputs(self, rank: int, read) -> list[str]:
        """Compare final output chunks (``read(j)`` gives output chunk j's value) with the postcondition."""
        problems = []
        for j in range(self.out_chunks):
            want = self.expected(rank, j)
            if want is None:
                continue
            got = read(j)
            if got != want:
                problems.append(f"output chunk {j} holds {describe(got)}, expected {describe(want)}")
        return problems


def rotation_period(signatures: list) -> int:
    """The smallest divisor ``d`` of ``n = len(signatures)`` with ``signatures[r] == signatures[r + d mod n]``
    for every rank ``r`` (each rank's part of a program or schedule with its own rank taken out), or ``n``."""
    n = len(signatures)
    for d in range(1, n):
        if n % d == 0 and all(signatures[r] == signatures[(r + d) % n] for r in range(n)):
            return d
    return n
