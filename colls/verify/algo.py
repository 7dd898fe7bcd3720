"""Pass 1, ``<algo>``: required attributes, the collective, protocol, sizes, call types, and the shape.

Also decides what the later passes check against: the collective (``cx.kind``, and ``cx.coll`` when the
model covers it), the aliasings the file claims (``cx.modes``), and why the result cannot be proven where
it cannot (``cx.unproven``).
"""

from __future__ import annotations

import re

from colls.collectives import KINDS, Collective
from colls.msccl import ALGO_ATTRS, ALGO_FIELDS
from colls.program import PROTOCOLS, STEP_SEMANTICS
from colls.verify.context import Context

_ROOT_IN_NAME = re.compile(r"root(\d{1,9})\b")     # "...-root3-..." as colls writes it
_LENIENT_KIND = {"reduce_scatter": "reducescatter", "reducescatter": "reducescatter"}
_HINTS = {"outofplace": '"1" (or "0")', "minBytes": '"0"', "maxBytes": '"0" (no upper limit)',
          "inplace": '"0" (or "1")'}


def check(cx: Context) -> None:
    p, t = cx.p, cx.t
    values = {attr: getattr(p, ALGO_FIELDS.get(attr, attr)) for attr in ALGO_ATTRS}
    for attr in t.required_algo_attrs:
        if values.get(attr) is None:
            hint = f"; add {attr}={_HINTS[attr]}" if attr in _HINTS else ""
            cx.add("algo-attr-missing", f"Attribute {attr} of node algo not found{hint}")
    if p.coll is not None:
        kind = t.kind_of(p.coll)
        if kind is None:
            if p.coll == "reduce_scatter" and "reducescatter" in t.colls:
                hint = f"; {t.name} spells it coll=\"reducescatter\""
            elif p.coll == "reducescatter" and "reduce_scatter" in t.colls:
                hint = f"; {t.name} spells it coll=\"reduce_scatter\""
            else:
                hint = f"; it knows {', '.join(t.colls)}"
            cx.add("coll-unknown", f"coll=\"{p.coll}\" is not a collective the {t.name} runtime knows "
                   f"(\"MSCCL: unsupported collective\"){hint}")
            kind = _LENIENT_KIND.get(p.coll, p.coll)
        cx.kind = kind
    if p.proto is not None and p.proto not in PROTOCOLS:
        cx.add("proto-unknown", f"proto=\"{p.proto}\" is not one of {', '.join(PROTOCOLS)} "
               "(\"MSCCL: protocol ... is not supported\")")
    if p.ngpus is not None and p.ngpus != len(p.gpus):
        cx.add("ngpus-mismatch", f"ngpus={p.ngpus} but the file has {len(p.gpus)} <gpu> elements: a rank "
               "without its own element runs no thread blocks while its peers wait for it")
    # the runtime keeps a file for a communicator only when the file's ranks are its ranks
    # (msccl_lifecycle.cc, mscclSchedulerInit: "if (status.algoMetas.back().nRanks == comm->nRanks)")
    if cx.ranks is not None and isinstance(p.ngpus, int) and p.ngpus != cx.ranks:
        cx.add("machine-ranks", f"ngpus={p.ngpus} but the machine has {cx.ranks} GPUs: the runtime uses a file "
               "only for communicators of exactly ngpus ranks, so not on this machine")
    if p.nchunksperloop is not None and p.nchunksperloop < 1:
        cx.add("chunks-per-loop", f"nchunksperloop={p.nchunksperloop}: a call that selects this file divides "
               "its count by it (count % nchunksperloop in the executor's selection, count / nchunksperloop "
               "in the kernel)")
    _check_sizes(cx)
    _check_modes(cx)
    _infer_collective(cx)


# The largest call any GPU can make: its buffers live in one GPU's memory, and none has 1 TiB (the largest
# in 2026 hold under 300 GB).
MAX_CALL_BYTES = 1 << 40


def _check_sizes(cx: Context) -> None:
    p, t = cx.p, cx.t
    lo, hi = p.min_bytes, p.max_bytes
    if lo is not None and lo > MAX_CALL_BYTES:
        shown = min(lo, 2**63 - 1)      # the loader's strtoll stops at INT64_MAX
        cx.add("bytes-unreachable", f"minBytes={shown}: no call is that large (a GPU's buffers are under "
               f"{MAX_CALL_BYTES >> 40} TiB), so the file loads but is never used")
    if lo is not None and hi is not None and hi != 0:
        empty = lo >= hi if t.name == "old" else lo > hi
        if empty or hi < 0:
            cx.add("bytes-range", f"minBytes={lo}, maxBytes={hi}: no message size selects this file "
                   "(maxBytes=0 means no upper limit)")


def _check_modes(cx: Context) -> None:
    p, t = cx.p, cx.t
    if t.name == "old" or p.inplace is None or p.outofplace is None:
        # OLD reads only inplace: 1 = in-place calls, 0 = out-of-place calls. A file for EXE that lacks
        # one of the two (already an error) is checked the same way, to say what else is wrong.
        if p.inplace is not None:
            cx.modes = [bool(p.inplace)]
        elif p.outofplace is not None:
            cx.modes = [not p.outofplace]
        else:
            cx.modes = [True, False]
        return
    cx.modes = [m for m, flag in ((True, p.inplace), (False, p.outofplace)) if flag]
    if not p.inplace and not p.outofplace:
        cx.add("never-selected", "inplace=\"0\" and outofplace=\"0\": neither an in-place nor an out-of-place "
               "call selects this file")


def _infer_collective(cx: Context) -> None:
    """The collective's shape from coll, ngpus and nchunksperloop (chunks per rank for the sized ones)."""
    p = cx.p
    kind, n, ncpl = cx.kind, p.ngpus, p.nchunksperloop
    if kind not in KINDS:
        if kind is not None:
            cx.unproven.append(f"coll=\"{p.coll}\" is outside the model ({', '.join(KINDS)})")
        return
    if n is None or ncpl is None or n < 2 or ncpl < 1 or n != len(p.gpus):
        return
    if kind in ("allgather", "reducescatter", "alltoall"):
        if ncpl % n:
            cx.add("chunks-mismatch", f"nchunksperloop={ncpl} is not a multiple of ngpus={n}: a {kind} cuts "
                   "each rank's share into nchunksperloop/ngpus chunks, so the shares do not fall on chunk "
                   "boundaries and what the file computes cannot be checked")
            cx.unproven.append(f"nchunksperloop={ncpl} is not a multiple of ngpus={n}")
            return
        c = ncpl // n
    else:
        c = ncpl
    root = _infer_root(cx, kind, n) if kind in ("broadcast", "reduce") else 0
    cx.coll = Collective(kind, n, c, root)
    if kind in ("broadcast", "reduce"):
        cx.facts["root"] = root


def _infer_root(cx: Context, kind: str, n: int) -> int:
    raw = cx.p.extra.get("root")
    root = None
    if raw is not None and str(raw).lstrip("-").isdigit() and 0 <= int(raw) < n:
        root = int(raw)
    else:
        # broadcast: the root receives nothing; reduce: the root sends nothing
        pos = 1 if kind == "broadcast" else 0
        candidates = [g.id for g in cx.p.gpus if g.id is not None
                      and not any(STEP_SEMANTICS.get(s.type, (False,) * 5)[pos] for tb in g.tbs for s in tb.steps)]
        named = _ROOT_IN_NAME.search(cx.p.name or "")
        if len(candidates) == 1 and 0 <= candidates[0] < n:
            root = candidates[0]
        elif named and int(named.group(1)) < n:
            root = int(named.group(1))
        else:
            cx.add("root-assumed", f"could not tell the root of this {kind} from the file (no root attribute, "
                   f"{len(candidates)} candidate ranks); checking with root 0")
            root = 0
    cx.add("root-fixed", f"this {kind} is right only for calls with root {root}: the runtime selects the file "
           f"for every {kind} of {n} ranks whatever its root, and the kernel never reads the root, so install it "
           f"only where every {kind} call uses root {root}")
    return root
