"""Pass 2, structure: ``<gpu>``, ``<tb>`` and ``<step>`` as the loader reads them, and dependencies.

Read from the loader (``mscclGetAlgoFromXmlFile`` in ``msccl_parser.cc``) and the kernel
(``mscclRunInterpreter`` in ``msccl_kernel.cu``):

- a step becomes a *transmission*; a ``nop`` becomes none: its dependency (if any) is attached to the next
  real step, which must carry one too ("the last ... must be a part of the first immediate instruction");
  a nop without a dependency is dropped altogether;
- the kernel numbers steps by counting transmissions, plus one per extra dependency and per fused ``re``,
  so a dependency-free nop makes every later step of its thread block one lower than its ``s``: a
  ``deps`` that names such a step waits for the one after it (:func:`kernel_numbers`);
- the buffer-bounds check (``mscclCheckBufferBounds``) compares only a step's start offset with the declared
  ``i_chunks``/``o_chunks``/``s_chunks``, which need not match the collective (in-place files declare the
  unused buffer as 0); what the call really has is the collective's buffer, checked here too.
"""

from __future__ import annotations

from colls.program import STEP_SEMANTICS, STEP_TYPES
from colls.msccl import STEP_ATTRS
from colls.runtimes import MAX_OFFSET
from colls.verify.context import BUFFER_NAMES, BUFFERS, Context
from colls.verify.rules import LOAD, MISREAD, UB, WRONG

MAX_DEP_TB = 127                    # msccl_struct.h: int8_t dependentBid[...]
MAX_REDUCE_FUSION = 16              # msccl_struct.h: MSCCL_MAX_REDUCE_FUSION
# which offsets the loader checks, per type (checkSrc/checkDst in mscclGetAlgoFromXmlFile)
_LOADER_CHECKS = {"s": (1, 0), "r": (0, 1), "rcs": (0, 1), "rrs": (1, 0), "rrc": (0, 0), "rrcs": (1, 1),
                  "cpy": (1, 1), "re": (1, 1), "nop": (0, 0)}


def check(cx: Context) -> None:
    _check_gpus(cx)
    for g in cx.p.gpus:
        _check_threadblocks(cx, g)
    _check_waits(cx)


def kernel_numbers(steps) -> list[int]:
    """The number the kernel gives each step of a thread block (``step`` in ``mscclRunInterpreter``).

    Equal to the position except after a nop without a dependency, which the loader drops: every later
    step is then numbered one lower. A ``deps=k`` waits for the first published step numbered k or more.
    """
    out, shift = [], 0
    for st in steps:
        out.append(len(out) - shift)
        if st.type == "nop" and (st.depid is None or st.depid < 0):
            shift += 1
    return out


def real_size(cx: Context, g, buf: str) -> int | None:
    """Chunks the call really has in buffer ``buf`` (the declared count where the shape is unknown)."""
    declared = {"i": g.i_chunks, "o": g.o_chunks, "s": g.s_chunks}[buf]
    if cx.coll is not None and buf != "s":
        return cx.coll.in_chunks if buf == "i" else cx.coll.out_chunks
    return declared


def _check_gpus(cx: Context) -> None:
    p = cx.p
    n = p.ngpus if p.ngpus is not None else len(p.gpus)
    cx.nranks = n
    seen: set = set()
    for g in p.gpus:
        missing = [a for a in ("id", "i_chunks", "o_chunks", "s_chunks") if getattr(g, a) is None]
        if missing:
            cx.add("gpu-attr-missing", "Attribute " + ", ".join(missing) + " of node gpu not found", g.id,
                   line=g.line)
        if g.id is None:
            continue
        if not 0 <= g.id < n:
            cx.add("gpu-id", f"gpu id {g.id} is not a rank of {n} (ids must be 0..{n - 1})", g.id, line=g.line)
        elif g.id in seen:
            cx.add("gpu-id", f"gpu id {g.id} appears twice: that rank reads both", g.id, line=g.line)
        seen.add(g.id)
        if g.s_chunks is not None and g.s_chunks < 0:
            cx.add("gpu-attr-missing", f"s_chunks={g.s_chunks} is negative (\"nScratchChunks must be not "
                   "negative\")", g.id, line=g.line, effect=LOAD)
    # ranks with no element (only worth naming when the file has as many elements as ranks: a count that
    # differs is reported on its own, and n may be anything a file says)
    absent = [r for r in range(n) if r not in seen] if len(p.gpus) == n else []
    if absent:
        cx.add("gpu-id", f"no <gpu> element for rank{'s' if len(absent) > 1 else ''} "
               f"{', '.join(map(str, absent[:8]))}: it runs nothing while its peers wait for it")
    cx.gpu_by_id = {g.id: g for g in p.gpus if g.id is not None}


def _check_threadblocks(cx: Context, g) -> None:
    p, t, n = cx.p, cx.t, cx.nranks
    ids: dict = {}
    for tb in g.tbs:
        missing = [a for a in ("id", "send", "recv", "chan") if getattr(tb, a) is None]
        if missing:
            cx.at("tb-attr-missing", "Attribute " + ", ".join(missing) + " of node tb not found", g, tb)
        if tb.id is None:
            continue
        if tb.id < 0:
            cx.at("tb-id", f"thread block id {tb.id} is negative (\"bid must be not negative\")", g, tb)
        elif tb.id in ids:
            cx.at("tb-id", f"thread block id {tb.id} appears twice on gpu {g.id} (\"duplicate thread block "
                  "id\")", g, tb)
        else:
            ids[tb.id] = tb
    cx.tb_by_id[g.id] = ids
    # the first id missing below the largest (ids may be anything a file says: sorted, not ranged over)
    gap = next((i for i, x in enumerate(sorted(ids)) if x != i), None)
    if gap is not None:
        cx.add("tb-id", f"thread block {gap} is missing: ids must be contiguous from 0 (\"thread block "
               f"{gap} is missing\")", g.id, line=g.line)
    for tb in g.tbs:
        for peer, what in ((tb.send, "send"), (tb.recv, "recv")):
            if peer is None or peer == -1:
                continue
            if peer == g.id:
                cx.at("tb-peer", f"{what}={peer} is the gpu itself; a peer must be another rank", g, tb)
            elif not 0 <= peer < n:
                cx.at("tb-peer", f"{what}={peer} is not a rank (0..{n - 1}) or -1", g, tb,
                      effect=LOAD if peer < -1 else UB)
        if tb.chan is not None:
            limit = min(t.max_channels, p.nchannels) if p.nchannels is not None else t.max_channels
            if not 0 <= tb.chan < limit:
                why = (f"nchannels={p.nchannels}" if p.nchannels is not None and p.nchannels <= t.max_channels
                       else f"{t.name} allows {t.max_channels} channels; the executor's loader check is off by "
                       "one and chan=32 crashes it")
                cx.at("tb-chan", f"chan={tb.chan} is not in [0, {limit}) ({why})", g, tb,
                      effect=LOAD if tb.chan < 0 or tb.chan > t.max_channels else UB)
        _check_steps(cx, g, tb)


def _check_steps(cx: Context, g, tb) -> None:
    t = cx.t
    peers_of = cx.tb_by_id.get(g.id, {})
    fuse = None            # ((dstbuf, dstoff, srcbuf), cnt, first index, size) of an open re fusion
    nop_run: list[int] = []
    declared = {"i": g.i_chunks, "o": g.o_chunks, "s": g.s_chunks}
    sizes = {buf: real_size(cx, g, buf) for buf in BUFFERS}
    for i, st in enumerate(tb.steps):
        if None in (st.s, st.type, st.srcbuf, st.srcoff, st.dstbuf, st.dstoff, st.cnt, st.depid, st.deps,
                    st.hasdep):
            missing = [a for a in STEP_ATTRS if getattr(st, a) is None]
            cx.at("step-attr-missing", "Attribute " + ", ".join(missing) + " of node step not found (all ten "
                  "attributes are read, nop included)", g, tb, i)
        if st.s is not None and st.s != i:
            cx.at("step-index", f"s={st.s} but it is step {i} of its thread block: the kernel numbers steps by "
                  f"position, not by s, so a deps that means this step must say {i}", g, tb, i)
        for name in ("srcbuf", "dstbuf"):
            value = getattr(st, name)
            if value is not None and value not in BUFFERS:
                cx.at("step-buffer", f"{name}=\"{value}\" is not i, o or s (\"type of buffer is not supported\"; "
                      "read on every step, nop included)", g, tb, i)
        if st.type is None:
            continue
        if st.type not in STEP_TYPES:
            cx.at("step-type", f"type=\"{st.type}\" is not one of {' '.join(STEP_TYPES)}", g, tb, i)
            continue
        sends, receives, reads, writes, _ = STEP_SEMANTICS[st.type]
        nop = st.type == "nop"
        if sends and tb.send is not None and tb.send < 0:
            cx.at("step-no-send-peer", f"a {st.type} step sends but thread block {tb.id} has send=-1 (\"there is "
                  "a send ... without a sendPeer\")", g, tb, i)
        if receives and tb.recv is not None and tb.recv < 0:
            cx.at("step-no-recv-peer", f"a {st.type} step receives but thread block {tb.id} has recv=-1 (\"there "
                  "is a recv ... without a recvPeer\")", g, tb, i)
        cnt_ok = st.cnt is not None and 1 <= st.cnt < t.max_cnt
        if not nop and st.cnt is not None and not cnt_ok:
            if st.cnt == 0:
                cx.at("step-cnt", f"cnt=0: this {st.type} step moves nothing", g, tb, i, effect=WRONG)
            else:
                cx.at("step-cnt", f"cnt={st.cnt}: a {st.type} step needs 1 <= cnt < {t.max_cnt} (\"count must be "
                      "positive and less than ...\")", g, tb, i)
        checked = _LOADER_CHECKS[st.type]
        for k, (used, buf, off, role) in enumerate(((reads, st.srcbuf, st.srcoff, "source"),
                                                    (writes, st.dstbuf, st.dstoff, "destination"))):
            if buf not in BUFFERS or off is None:
                continue
            name = BUFFER_NAMES[buf]
            if checked[k] and declared[buf] is not None and not -1 <= off < declared[buf]:
                cx.at("step-offset", f"{role} offset {off} is outside [-1, {declared[buf]}) of the {name} buffer "
                      f"as declared ({buf}_chunks={declared[buf]}): \"Incorrect offset set for {name} buffer\"",
                      g, tb, i)
                continue
            if not used or sizes[buf] is None:
                continue
            count = st.cnt if cnt_ok else 1
            if not 0 <= off or off + count > sizes[buf]:
                cx.at("step-bounds", f"{role} {name} chunks [{off}, {off + count}) are not inside the {sizes[buf]} "
                      f"chunks of the {name} buffer a call has", g, tb, i)
            elif off > MAX_OFFSET:
                cx.at("step-offset", f"{role} offset {off}: the executor stores offsets in an int16_t "
                      f"(mscclTransmission in msccl_struct.h), so at most {MAX_OFFSET}", g, tb, i, effect=MISREAD)
        # dependencies
        if st.depid is not None and st.deps is not None:
            if st.depid >= 0:
                target = peers_of.get(st.depid)
                if st.depid == tb.id:
                    cx.at("dep-target", f"depid={st.depid} is its own thread block: the step waits for itself",
                          g, tb, i)
                elif target is None:
                    cx.at("dep-target", f"depid={st.depid}: gpu {g.id} has no thread block {st.depid}", g, tb, i)
                elif not 0 <= st.deps < len(target.steps):
                    cx.at("dep-target", f"deps={st.deps}: thread block {st.depid} has steps 0.."
                          f"{len(target.steps) - 1}; the wait never ends", g, tb, i)
                else:
                    cx.waited.setdefault((g.id, st.depid, st.deps), (g.id, tb.id, i))
                if st.depid > MAX_DEP_TB:
                    cx.at("dep-tb-overflow", f"depid={st.depid}: the executor stores it in an int8_t (dependentBid "
                          f"in msccl_struct.h), so anything above {MAX_DEP_TB} waits on the wrong thread block",
                          g, tb, i)
        if not nop and st.hasdep is not None and st.hasdep not in (0, 1):
            cx.at("hasdep-value", f"hasdep={st.hasdep}: must be 0 or 1 (\"hasDependence needs to be 0 or 1\")",
                  g, tb, i)
        # nops that carry a dependency hand it to the next real step, which must carry one itself
        carries = st.depid is not None and st.depid >= 0
        if nop:
            if carries:
                nop_run.append(i)
        else:
            if nop_run and st.depid is not None and st.depid < 0:
                cx.at("nop-unanchored", f"steps {nop_run[0]}..{i - 1} are nops carrying dependencies, but the real "
                      "step after them has none: the loader rejects the file (\"the last ... must be a part of the "
                      "first immediate instruction\")", g, tb, i)
            nop_run = []
        # re fusion (msccl_parser.cc): consecutive re with the same dst and src buffer and no dependency
        if st.type == "re":
            key = (st.dstbuf, st.dstoff, st.srcbuf)
            if fuse is not None and fuse[0] == key and st.depid is not None and st.depid < 0:
                if st.cnt != fuse[1]:
                    cx.at("re-fusion", f"the loader fuses this re with step {fuse[2]} (same destination, no "
                          f"dependency) and the fused step uses the last cnt for all of them: cnt={st.cnt} here, "
                          f"cnt={fuse[1]} in step {fuse[2]}", g, tb, i)
                fuse = (key, fuse[1], fuse[2], fuse[3] + 1)
            else:
                fuse = (key, st.cnt, i, 1)
            if st.hasdep == 1 or fuse[3] == MAX_REDUCE_FUSION:
                fuse = None
        elif not nop:
            fuse = None
    if nop_run:
        cx.at("nop-trailing", f"steps {nop_run[0]}..{len(tb.steps) - 1} are nops at the end of the thread block: "
              "no real step follows to wait for their dependencies, so the loader drops them", g, tb, nop_run[0])


def _check_waits(cx: Context) -> None:
    """Waits on steps that do not publish progress, and waits the kernel's numbering moves."""
    numbering: dict = {}
    for (gid, tbid, k), (_, wtb, ws) in sorted(cx.waited.items()):
        g = cx.gpu_by_id.get(gid)
        tb = cx.tb_by_id.get(gid, {}).get(tbid)
        if g is None or tb is None:
            continue
        st = tb.steps[k]
        numbers = numbering.get(id(tb))
        if numbers is None:
            numbers = numbering[id(tb)] = kernel_numbers(tb.steps)
        if st.type != "nop" and numbers[k] != k:
            first = next((j for j in range(len(tb.steps)) if numbers[j] >= k and tb.steps[j].type != "nop"), None)
            until = f"until step {first}" if first is not None else "for a step this thread block never reaches"
            cx.at("nop-no-dep", f"tb {wtb} step {ws} waits on step {k}, but the nops without a dependency before it "
                  f"make the kernel number it {numbers[k]}: the wait lasts {until}", g, tb, k)
        elif st.type == "nop":
            cx.at("hasdep-missing", f"tb {wtb} step {ws} waits on this step, a nop, which never publishes progress: "
                  "the wait lasts until a later step of this thread block publishes", g, tb, k)
        elif st.hasdep is not None and st.hasdep != 1:
            cx.at("hasdep-missing", f"tb {wtb} step {ws} waits on this step, but it has hasdep=0: a thread block "
                  "publishes progress only after steps marked hasdep=\"1\", so the wait lasts until a later one "
                  "(or forever)", g, tb, k)

