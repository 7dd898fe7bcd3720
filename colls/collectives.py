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

Values. Input chunk ``j`` of rank ``r`` is the atom ``(r, j)``. A chunk's symbolic value is a frozenset of
atoms (a copy has one atom; a reduction is the union of its operands, which must be disjoint, or an atom
would be counted twice). ``None`` is an uninitialised chunk.

In-place aliasing (as the runtimes define in-place calls): allgather's input is rank ``r``'s slice
``[r c, r c + c)`` of its output; reducescatter's output is rank ``r``'s slice of its input; for the other
collectives input and output are one buffer.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

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
Value = frozenset  # of Atom; None = uninitialised


class SymbolicError(Exception):
    """Raised by value operations that would compute a wrong result (message says which)."""


@lru_cache(maxsize=1 << 16)
def _sum_over_ranks(n: int, index: int) -> Value:
    return frozenset((q, index) for q in range(n))


def reduce_values(a: Value | None, b: Value | None) -> Value:
    if a is None or b is None:
        raise SymbolicError("reduces an uninitialised chunk")
    union = a | b
    if len(union) != len(a) + len(b):  # one pass for the common case (disjoint operands)
        dup = ", ".join(f"input {j} of rank {r}" for r, j in sorted(a & b))
        raise SymbolicError(f"counts {dup} twice")
    return union


def describe(value: Value | None) -> str:
    if value is None:
        return "nothing (uninitialised)"
    atoms = sorted(value)
    if len(atoms) == 1:
        r, j = atoms[0]
        return f"input {j} of rank {r}"
    idx = {j for _, j in atoms}
    ranks = sorted(r for r, _ in atoms)
    if len(idx) == 1:
        return f"the sum of input {idx.pop()} over ranks {rank_ranges(ranks)}"
    return "a sum of " + ", ".join(f"({r},{j})" for r, j in atoms)


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

    # --- conditions -----------------------------------------------------------------------------------
    def input_value(self, rank: int, j: int) -> Value:
        return frozenset({(rank, j)})

    def expected(self, rank: int, j: int) -> Value | None:
        """What output chunk ``j`` of ``rank`` must hold at the end; None if it is unconstrained."""
        n, c = self.nranks, self.chunks
        k = self.kind
        if k == "allgather":
            return frozenset({(j // c, j % c)})
        if k == "reducescatter":
            return frozenset((q, rank * c + j) for q in range(n))
        if k == "allreduce":
            return frozenset((q, j) for q in range(n))
        if k == "alltoall":
            return frozenset({(j // c, rank * c + j % c)})
        if k == "broadcast":
            return frozenset({(self.root, j)})
        if k == "reduce":
            return frozenset((q, j) for q in range(n)) if rank == self.root else None
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
        n, c = self.nranks, self.chunks
        summed = {"allreduce": 0, "reducescatter": rank * c}.get(
            self.kind, 0 if self.kind == "reduce" and rank == self.root else None)
        for j in range(self.out_chunks):
            if summed is not None and read(j) == _sum_over_ranks(n, summed + j):
                continue  # the sum of one input index over all ranks (one set per index, reused)
            want = self.expected(rank, j)
            if want is None:
                continue
            got = read(j)
            if got != want:
                problems.append(f"output chunk {j} holds {describe(got)}, expected {describe(want)}")
        return problems
