"""The MSCCL program: the runtime's own model, four small dataclasses (gpu -> threadblocks -> steps).

Field names follow the XML attributes one to one. A Program read from someone else's file may lack
attributes; those fields are ``None`` and :mod:`colls.verify` reports them. :mod:`colls.msccl` turns a
Program into the loader's exact text and back.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from operator import attrgetter

STEP_TYPES = ("s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy", "re", "nop")
# What each instruction does: (sends, receives, reads local src, writes local dst, reduces)
STEP_SEMANTICS = {
    "s":    (True,  False, True,  False, False),
    "r":    (False, True,  False, True,  False),
    "rcs":  (True,  True,  False, True,  False),
    "rrs":  (True,  True,  True,  False, True),
    "rrc":  (False, True,  True,  True,  True),
    "rrcs": (True,  True,  True,  True,  True),
    "cpy":  (False, False, True,  True,  False),
    "re":   (False, False, True,  True,  True),
    "nop":  (False, False, False, False, False),
}
PROTOCOLS = ("Simple", "LL128", "LL")


def sends(step_type: str) -> bool:
    return STEP_SEMANTICS.get(step_type, (False,) * 5)[0]


def receives(step_type: str) -> bool:
    return STEP_SEMANTICS.get(step_type, (False,) * 5)[1]


def pickled_by_fields(cls):
    """``cls`` (a dataclass) pickled as its constructor and its fields in order: a program or a schedule of
    100,000s of steps or transfers crosses between colls compile's processes (:mod:`colls.compile`) about 3
    times faster than by each object's slot dictionary, pickle's default for slotted classes."""
    values = attrgetter(*(f.name for f in fields(cls)))
    cls.__reduce__ = lambda self: (cls, values(self))
    return cls


def quick_frozen_init(cls):
    """``cls`` (a frozen dataclass with slots and no default factories) with an ``__init__`` that stores each
    field through its slot's descriptor, where the generated one calls ``object.__setattr__`` per field: 1.5
    times faster to build, the same object (a 128-GPU ring allreduce of 4 rings is 130k transfers, 0.16 -> 0.10
    s, made again for every ring count tried). Still frozen: assignment raises as before."""
    if any(f.default_factory is not MISSING for f in fields(cls)):
        raise TypeError(f"{cls.__name__}: a field with a default factory")
    names = [f.name for f in fields(cls)]
    params = ", ".join(n if f.default is MISSING else f"{n}=_default_{n}" for n, f in zip(names, fields(cls)))
    setters = ", ".join(f"_set_{n}=_slot_{n}" for n in names)
    body = "".join(f"    _set_{n}(self, {n})\n" for n in names)
    scope = {f"_slot_{n}": cls.__dict__[n].__set__ for n in names}
    scope.update({f"_default_{f.name}": f.default for f in fields(cls) if f.default is not MISSING})
    exec(f"def __init__(self, {params}, *, {setters}):\n{body}", scope)
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = init
    return cls


@pickled_by_fields
@dataclass(slots=True)
class Step:
    s: int | None
    type: str | None
    srcbuf: str | None = "i"
    srcoff: int | None = -1
    dstbuf: str | None = "o"
    dstoff: int | None = -1
    cnt: int | None = 0
    depid: int | None = -1
    deps: int | None = -1
    hasdep: int | None = 0
    line: int | None = field(default=None, compare=False)  # where it was read from, for findings


@pickled_by_fields
@dataclass(slots=True)
class Threadblock:
    id: int | None
    send: int | None = -1
    recv: int | None = -1
    chan: int | None = 0
    steps: list[Step] = field(default_factory=list)
    line: int | None = field(default=None, compare=False)


@pickled_by_fields
@dataclass(slots=True)
class Gpu:
    id: int | None
    i_chunks: int | None = 0
    o_chunks: int | None = 0
    s_chunks: int | None = 0
    tbs: list[Threadblock] = field(default_factory=list)
    line: int | None = field(default=None, compare=False)


@dataclass
class Program:
    """One ``<algo>``. ``extra`` keeps attributes the runtimes do not read (``redop`` from TACCL, ...)."""

    name: str | None
    coll: str | None
    ngpus: int | None
    nchunksperloop: int | None
    nchannels: int | None
    proto: str | None = "Simple"
    inplace: int | None = 0
    outofplace: int | None = 1
    min_bytes: int | None = 0
    max_bytes: int | None = 0
    gpus: list[Gpu] = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    def gpu(self, rank: int) -> Gpu:
        for g in self.gpus:
            if g.id == rank:
                return g
        raise KeyError(rank)

    def max_steps(self) -> int:
        return max((len(tb.steps) for g in self.gpus for tb in g.tbs), default=0)

    def max_tbs(self) -> int:
        return max((len(g.tbs) for g in self.gpus), default=0)


def rotated(gpus: list[Gpu], nranks: int, shift: int, slices: dict, sizes: dict) -> list[Gpu]:
    """Every rank's Gpu from those of ranks ``0..shift-1``: rank ``r0 + k shift`` runs rank ``r0``'s
    threadblocks with peers ``+ k shift`` (mod ``nranks``) and offsets into buffer ``b`` ``+ k shift slices[b]``
    (mod ``sizes[b]``; scratch and unused offsets as they are). See :mod:`colls.verify.symmetry`."""
    out = list(gpus)
    for k in range(1, nranks // shift):
        move = {b: (k * shift * t) % sizes[b] for b, t in slices.items() if t}

        def off(buf, o):
            m = move.get(buf)
            return (o + m) % sizes[buf] if m and o is not None and o >= 0 else o

        def peer(p):
            return (p + k * shift) % nranks if p is not None and p >= 0 else p
        for g in gpus:
            tbs = [Threadblock(tb.id, peer(tb.send), peer(tb.recv), tb.chan,
                               [Step(st.s, st.type, st.srcbuf, off(st.srcbuf, st.srcoff), st.dstbuf,
                                     off(st.dstbuf, st.dstoff), st.cnt, st.depid, st.deps, st.hasdep)
                                for st in tb.steps]) for tb in g.tbs]
            out.append(Gpu(g.id + k * shift, g.i_chunks, g.o_chunks, g.s_chunks, tbs))
    return out
