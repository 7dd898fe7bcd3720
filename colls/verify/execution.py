"""Pass 5, execution: can the kernel hang, and at which call sizes?

A simulation of the kernel (``mscclRunInterpreter`` in ``msccl_kernel.cu``). A thread block runs its steps
in order; a step fires when its dependency is published, when its incoming connection holds its message
and when its outgoing connection has room. Firing is monotone (nothing that can fire is ever disabled by
another firing), so running until nothing fires decides the question: any thread block left unfinished is
a deadlock in every execution. One pass of the program suffices: the runtime runs the whole program once
per slice of the buffer, and running the slices one after the other is one of the executions it allows.

**Dependencies** follow the kernel's numbering (:func:`colls.verify.structure.kernel_numbers`): a thread
block publishes the number of its last step marked ``hasdep="1"``, and ``deps=k`` waits until that number
is k or more. Nops carrying dependencies wait with the step after them; at the end of a thread block the
loader drops them.

**Messages and call sizes.** A step of ``cnt`` chunks is ``ceil(cnt / maxAllowedCount)`` messages, where
the runtime sets ``maxAllowedCount = max(1, chunkEffectiveSize / ceil(bytes / nchunksperloop))`` for each
call, at most 71 (``mscclSetupCount`` in ``msccl_setup.cc``). Small calls send each step as one message;
large ones send each chunk as its own. A connection holds :func:`fifo_messages` messages before the sender
blocks. So whether a program hangs can depend on the call's size: it is simulated once per distinct way of
cutting its steps into messages, each is mapped back to the range of call sizes that cut them that way, and
a hang is an error only where that range meets the file's own ``[minBytes, maxBytes]``.

``chunkEffectiveSize`` is a connection buffer's slot size times the slots one primitive takes, from NCCL's
defaults (``src/init.cc``, ``src/include/device.h``): Simple ``NCCL_BUFFSIZE`` = 4 MiB / ``NCCL_STEPS`` x 4
slots (1 slot for broadcast and reduce: ``BROADCAST_CHUNKSTEPS``), LL 512 KiB / 8 / 2 (8 data bytes per 16),
LL128 4800 KiB / 8 x 15/16. A site that sets ``NCCL_BUFFSIZE`` moves these sizes in proportion.

The FIFO. A connection's buffer has ``NCCL_STEPS`` = 8 slots. With the Simple protocol every send or receive
primitive of the MSCCL kernel takes ``MSCCL_CHUNKSTEPS`` = ``NCCL_STEPS/2`` = 4 of them (``msccl_struct.h``;
``msccl_kernel.cu`` instantiates ``ProtoSimple<MSCCL_CHUNKSTEPS/MSCCL_SLICESTEPS, MSCCL_SLICESTEPS>``, whose
``genericOp`` always posts all ``SlicePerChunk`` slices): at most :data:`FIFO_MESSAGES` = 2 messages are in
flight. LL and LL128 use one slot per primitive (``chunkSteps = 1`` in ``mscclSetupCount``; ``prims_ll.h``
``waitSend`` waits for ``sendConnHead + 1 <= head + NCCL_STEPS``): 8 messages.
"""

from __future__ import annotations

from collections import deque

from colls.program import STEP_SEMANTICS
from colls.verify.context import REPORT_CAP, WARNING, Context
from colls.verify.structure import kernel_numbers

NCCL_STEPS = 8                                   # NCCL's FIFO slots per connection (src/include/device.h)
MSCCL_CHUNKSTEPS = NCCL_STEPS // 2               # msccl_struct.h: slots one Simple primitive takes
MSCCL_SLICESTEPS = NCCL_STEPS // 4               # msccl_struct.h: slots one slice of it takes
# ProtoSimple<MSCCL_CHUNKSTEPS/MSCCL_SLICESTEPS, MSCCL_SLICESTEPS>: a Simple message moves as 2 slices
SLICE_PER_CHUNK = MSCCL_CHUNKSTEPS // MSCCL_SLICESTEPS
FIFO_MESSAGES = NCCL_STEPS // MSCCL_CHUNKSTEPS   # = 2 messages in flight per connection (Simple)
MAX_COUNT = 72                                   # msccl_struct.h: MSCCL_MAX_COUNT; maxAllowedCount < it
DEFAULT_BUFFSIZE = {"Simple": 1 << 22,           # DEFAULT_BUFFSIZE (x86; 1 MiB on ARM)
                    "LL": 8 * 512 * NCCL_STEPS * 16,           # DEFAULT_LL_BUFFSIZE
                    "LL128": 120 * 640 * NCCL_STEPS * 8}       # DEFAULT_LL128_BUFFSIZE


def fifo_messages(proto: str | None, chunk_steps: int | None = None) -> int:
    """Messages a connection holds before the sender blocks (see the module docstring for the source).
    ``chunk_steps``: the slots a Simple message takes where it is not MSCCL's 4 (NCCL's own tree: 1)."""
    if proto in ("LL", "LL128"):
        return NCCL_STEPS
    return FIFO_MESSAGES if chunk_steps is None else NCCL_STEPS // chunk_steps


def chunk_effective_bytes(proto: str | None, kind: str | None, buffsize: int | None = None,
                          chunk_steps: int | None = None) -> int:
    """Data bytes one message of one chunk carries at most (``chunkEffectiveSize`` in mscclSetupCount).

    ``buffsize``: the connection buffer of the file's protocol, where a site sets it (``NCCL_BUFFSIZE``,
    ``NCCL_LL_BUFFSIZE``, ``NCCL_LL128_BUFFSIZE``); NCCL's default otherwise. ``chunk_steps``: the slots a
    Simple message takes where it is not MSCCL's (NCCL's own tree: 1, ``src/enqueue.cc``).
    """
    proto = proto if proto in DEFAULT_BUFFSIZE else "Simple"
    step = (buffsize or DEFAULT_BUFFSIZE[proto]) // NCCL_STEPS
    if proto == "LL":
        return step // 2
    if proto == "LL128":
        return step // 16 * 15                   # NCCL_LL128_DATAELEMS of NCCL_LL128_LINEELEMS
    if chunk_steps is not None:
        return step * chunk_steps
    return step * (1 if kind in ("broadcast", "reduce") else MSCCL_CHUNKSTEPS)


def first_slice_bytes(message: float, buffsize: int | None = None) -> float:
    """The data bytes of the first of a Simple message's :data:`SLICE_PER_CHUNK` slices (the second has the
    rest, possibly none). NCCL's ``genericOp`` (``src/device/prims_simple.h``) cuts ``nelem`` into slices of
    ``max(divUp(nelem, 16 x SlicePerChunk) x 16, sliceSize / 32)`` elements, ``sliceSize`` being the slots of
    one slice (``stepSize x StepPerSlice``); each slice is waited for, copied and posted on its own, so a
    receiver can forward the first while the second still arrives."""
    step = (buffsize or DEFAULT_BUFFSIZE["Simple"]) // NCCL_STEPS
    least = step * MSCCL_SLICESTEPS / 32
    return min(message, max(message / SLICE_PER_CHUNK, least))


def slice_bytes(message: float, part: int, slices: int, buffsize: int | None = None) -> float:
    """The data bytes of slice ``part`` of a message of ``message`` bytes moved as ``slices`` slices: the first
    as :func:`first_slice_bytes` cuts it, the others the rest in equal parts (possibly none)."""
    if slices == 1:
        return message
    first = first_slice_bytes(message, buffsize)
    return first if part == 0 else (message - first) / (slices - 1)


def data_slices(message: float, slices: int, buffsize: int | None = None) -> int:
    """The slices of a message of ``message`` bytes that carry data, and so pay a post's fence: all
    ``slices``, or 1 when the message fits its first slice."""
    return 1 if slices == 1 or first_slice_bytes(message, buffsize) >= message else slices


def max_allowed_count(nbytes: int, ncpl: int, eff: int) -> int:
    """``maxAllowedCount`` for a call of ``nbytes`` (the whole buffer, as the runtime counts it)."""
    return min(MAX_COUNT - 1, max(1, eff // -(-nbytes // ncpl)))


def check(cx: Context, sym=None) -> bool:
    """Decide deadlock freedom at every call size; keep the firing order for the semantics pass.

    Returns whether the program completes for small calls (one message per step), whose firing order the
    semantics pass replays; ``cx.facts["deadlock_free"]`` says whether it hangs for a size the file serves.
    ``sym``: the program's rotation symmetry (:mod:`colls.verify.symmetry`), to run ranks 0..shift-1 only.
    """
    m = _Machine(cx, sym)
    cap = fifo_messages(cx.p.proto)
    cx.machine = m
    cnts = sorted({m.n_cnt[n] for n in range(len(m.n_ti)) if m.n_send[n] or m.n_recv[n]}) or [1]
    top = cnts[-1]
    ncpl = max(cx.p.nchunksperloop or 1, 1)
    eff = chunk_effective_bytes(cx.p.proto, cx.kind, cx.buffsize)
    lo_file = max(cx.p.min_bytes or 0, 0)
    hi_file = cx.p.max_bytes if cx.p.max_bytes else None
    if hi_file is not None and cx.t.name == "old":
        hi_file -= 1                              # the older runtime selects [minBytes, maxBytes)
    results: dict = {}                            # message signature -> (state, [byte ranges])
    for k in range(top, 0, -1):
        sig = tuple(-(-c // k) for c in cnts)
        lo = 0 if k == top else ncpl * (eff // (k + 1)) + 1
        hi = None if k == 1 else ncpl * (eff // k)
        if sig not in results:
            per_step = dict(zip(cnts, sig))
            results[sig] = (m.run(cap, [per_step.get(c, 1) for c in m.n_cnt]), [])
        results[sig][1].append((lo, hi))
    small = results[tuple(1 for _ in cnts)][0]
    hanging = [(state, _merge(ranges)) for state, ranges in results.values() if not _finished(m, state)]
    ok = True
    # every size that hangs, in one statement: a file whose smallest hanging range is narrow (32 to 45 MB)
    # usually hangs at the larger sizes too, where its steps are cut into more messages still
    every = _merge([r for _, ranges in hanging for r in ranges])
    for state, ranges in sorted(hanging, key=lambda h: h[1][0][0]):
        inside = _intersect(ranges, lo_file, hi_file)
        if inside:
            ok = False
            inside_all = _merge(_intersect(every, lo_file, hi_file))
            m.report_deadlock(state, cap, _describe(every, ncpl, eff, cx), _calls(inside_all, lo_file, hi_file))
            break                                 # the wait cycle of the smallest hanging calls explains it best
        when = _describe(ranges, ncpl, eff, cx)
        cx.add("deadlock", f"would hang{when}, but the file's size range [{lo_file}, "
               f"{hi_file if hi_file is not None else 'no limit'}] never selects those calls: keep maxBytes "
               "there", severity=WARNING)
    cx.facts["deadlock_free"] = ok
    cx.facts["hangs_for_bytes"] = [[lo, hi] for _, ranges in hanging for lo, hi in ranges]
    if not _finished(m, small):
        return False
    m.build_happens_before(small, cap, use_room=top == 1)
    return True


def _finished(m, state) -> bool:
    pc = state[1]
    return all(pc[ti] >= m.tb_len[ti] for ti in range(len(m.tbs)))


def _merge(ranges):
    out = []
    for lo, hi in sorted(ranges, key=lambda r: r[0]):
        if out and out[-1][1] is not None and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], None if hi is None else max(hi, out[-1][1]))
        elif out and out[-1][1] is None:
            continue
        else:
            out.append((lo, hi))
    return out


def _intersect(ranges, lo_file, hi_file):
    out = []
    for lo, hi in ranges:
        a = max(lo, lo_file)
        b = hi if hi_file is None else (hi_file if hi is None else min(hi, hi_file))
        if b is None or a <= b:
            out.append((a, b))
    return out


def _range_text(ranges) -> str:
    parts = []
    for lo, hi in ranges:
        if hi is None:
            parts.append(f"calls of {lo} bytes or more" if lo > 0 else "every call")
        else:
            parts.append(f"calls of {lo} to {hi} bytes" if lo > 0 else f"calls of at most {hi} bytes")
    return " and ".join(parts)


def _calls(inside, lo_file, hi_file) -> str | None:
    """Which of the file's calls hang, in words; None when all of them do."""
    if len(inside) == 1 and inside[0][0] <= lo_file and inside[0][1] == hi_file:
        return None
    return _range_text(inside)


def _describe(ranges, ncpl, eff, cx) -> str:
    text = _range_text(ranges)
    if text == "every call":
        return ""
    proto = cx.p.proto if cx.p.proto in DEFAULT_BUFFSIZE else "Simple"
    variable = {"Simple": "NCCL_BUFFSIZE", "LL": "NCCL_LL_BUFFSIZE", "LL128": "NCCL_LL128_BUFFSIZE"}[proto]
    size = cx.buffsize or DEFAULT_BUFFSIZE[proto]
    default = "" if cx.buffsize else ", the default"
    return (f" for {text} (the runtime then cuts steps into messages of fewer chunks: maxAllowedCount in "
            f"mscclSetupCount; assuming {variable}={size}{default})")


class _Machine:
    """Flat arrays over all steps (node ids), thread blocks and connections, for fast simulation.

    With a symmetry (:mod:`colls.verify.symmetry`), only ranks ``0..shift-1`` and one connection per orbit,
    the one they send on: a receive reads the connection its sender's representative sends on."""

    def __init__(self, cx: Context, sym=None):
        self.cx = cx
        self.sym = sym
        p = cx.p
        d = sym.shift if sym is not None else None
        self.tbs = []                       # ti -> (gpu, tb)
        tb_index = {}
        for g in sorted(p.gpus, key=lambda g: g.id):
            if d is not None and g.id >= d:
                continue
            for tbid in sorted(cx.tb_by_id[g.id]):
                tb_index[(g.id, tbid)] = len(self.tbs)
                self.tbs.append((g, cx.tb_by_id[g.id][tbid]))
        T = len(self.tbs)
        self.tb_start, self.tb_len = [0] * T, [0] * T
        self.in_conn, self.out_conn = [-1] * T, [-1] * T
        n_ti, n_idx, n_step, n_send, n_recv, n_cnt, n_dep_ti, n_deps, n_pub, n_num = ([] for _ in range(10))
        for ti, (g, tb) in enumerate(self.tbs):
            self.tb_start[ti] = len(n_ti)
            self.tb_len[ti] = len(tb.steps)
            numbers = kernel_numbers(tb.steps)
            real_after = [False] * (len(tb.steps) + 1)     # a real step follows (nop deps wait with it)
            for i in range(len(tb.steps) - 1, -1, -1):
                real_after[i] = real_after[i + 1] or tb.steps[i].type != "nop"
            for i, st in enumerate(tb.steps):
                sem = STEP_SEMANTICS[st.type]
                nop = st.type == "nop"
                n_ti.append(ti)
                n_idx.append(i)
                n_step.append(st)
                n_send.append(sem[0])
                n_recv.append(sem[1])
                n_cnt.append(st.cnt if not nop else 0)
                waits = st.depid >= 0 and (not nop or real_after[i])
                n_dep_ti.append(tb_index[(g.id, st.depid)] if waits else -1)
                n_deps.append(st.deps)
                n_pub.append(st.hasdep == 1 and not nop)
                n_num.append(numbers[i])
        self.n_ti, self.n_idx, self.n_step, self.n_send, self.n_recv = n_ti, n_idx, n_step, n_send, n_recv
        self.n_cnt, self.n_dep_ti, self.n_deps, self.n_pub, self.n_num = n_cnt, n_dep_ti, n_deps, n_pub, n_num
        self.conn_keys, self.conn_sender, self.conn_receiver = [], [], []
        in_shift, out_shift = [0] * T, [0] * T
        for key, (sender, receiver) in cx.connections.items():
            if d is not None and key[0] >= d:
                continue                    # the orbit's representative is the one a rank below d sends on
            c = len(self.conn_keys)
            self.conn_keys.append(key)
            s_ti = tb_index[(sender[0].id, sender[1].id)] if sender else -1
            if d is None:
                r_ti = tb_index[(receiver[0].id, receiver[1].id)] if receiver else -1
            else:                           # its receiver, rank key[1] = q + u d, is g^u of rank q's block
                u = key[1] // d
                r_ti = tb_index[(key[1] % d, receiver[1].id)] if receiver else -1
                if s_ti >= 0:
                    out_shift[s_ti] = u
                if r_ti >= 0:               # which receives from key[0] - u d = key[0] + (M - u) d
                    in_shift[r_ti] = -u % sym.order
            self.conn_sender.append(s_ti)
            self.conn_receiver.append(r_ti)
            if s_ti >= 0:
                self.out_conn[s_ti] = c
            if r_ti >= 0:
                self.in_conn[r_ti] = c
        self.in_shift, self.out_shift = in_shift, out_shift

    def run(self, cap: int, n_msgs: list[int]):
        """Fire steps until nothing can fire; step n is ``n_msgs[n]`` messages on its connections.

        Returns the state: completed steps in firing order, and per thread block / connection counters.
        """
        T, C = len(self.tbs), len(self.conn_keys)
        tb_start, tb_len, in_conn, out_conn = self.tb_start, self.tb_len, self.in_conn, self.out_conn
        n_send, n_recv, n_dep_ti, n_deps, n_pub, n_num = (self.n_send, self.n_recv, self.n_dep_ti, self.n_deps,
                                                          self.n_pub, self.n_num)
        conn_sender, conn_receiver = self.conn_sender, self.conn_receiver
        pc, sub, published = [0] * T, [0] * T, [-1] * T
        sent, consumed = [0] * C, [0] * C
        sent_nodes = [[] for _ in range(C)]
        recv_nodes = [[] for _ in range(C)]
        waiters = [[] for _ in range(T)]
        order = []
        queue = deque(range(T))
        inq = [True] * T
        while queue:
            ti = queue.popleft()
            inq[ti] = False
            start, length, p, k = tb_start[ti], tb_len[ti], pc[ti], sub[ti]
            while p < length:
                n = start + p
                if k == 0:
                    dt = n_dep_ti[n]
                    if dt >= 0 and published[dt] < n_deps[n]:
                        waiters[dt].append(ti)
                        break
                r, s = n_recv[n], n_send[n]
                if r:
                    c = in_conn[ti]
                    if sent[c] <= consumed[c]:
                        break
                if s:
                    c2 = out_conn[ti]
                    if sent[c2] - consumed[c2] >= cap:
                        break
                if r:
                    consumed[c] += 1
                    if k == 0:
                        recv_nodes[c].append(n)
                    w = conn_sender[c]
                    if not inq[w]:
                        inq[w] = True
                        queue.append(w)
                if s:
                    sent[c2] += 1
                    if k == 0:
                        sent_nodes[c2].append(n)
                    w = conn_receiver[c2]
                    if w >= 0 and not inq[w]:
                        inq[w] = True
                        queue.append(w)
                k += 1
                if (r or s) and k < n_msgs[n]:
                    continue
                k = 0
                p += 1
                order.append(n)
                if n_pub[n]:
                    published[ti] = n_num[n]
                    for w in waiters[ti]:
                        if not inq[w]:
                            inq[w] = True
                            queue.append(w)
                    waiters[ti] = []
            pc[ti], sub[ti] = p, k
        return order, pc, sub, published, sent, consumed, sent_nodes, recv_nodes

    def build_happens_before(self, state, cap: int, use_room: bool):
        """Each step's predecessors: program order and dependency (local), matching send (message) and,
        where every step is one message at every size (``use_room``), FIFO room; and its position in the
        firing order, which respects all of them."""
        order, _, _, _, _, _, sent_nodes, recv_nodes = state
        N = len(self.n_ti)
        self.order = order
        self.pos = [0] * N
        for i, n in enumerate(order):
            self.pos[n] = i
        self.dep_pred, self.msg_pred, self.cap_pred = [-1] * N, [-1] * N, [-1] * N
        for n in range(N):
            dt = self.n_dep_ti[n]
            if dt >= 0:     # the first step of the waited-on block that publishes a number >= deps
                start, length = self.tb_start[dt], self.tb_len[dt]
                self.dep_pred[n] = next((start + i for i in range(length) if self.n_pub[start + i]
                                         and self.n_num[start + i] >= self.n_deps[n]), -1)
        for c in range(len(self.conn_keys)):
            sn, rn = sent_nodes[c], recv_nodes[c]
            for k, r in enumerate(rn):
                self.msg_pred[r] = sn[k]
            if use_room:
                for k in range(cap, len(sn)):
                    self.cap_pred[sn[k]] = rn[k - cap]

    def describe_node(self, n: int) -> str:
        g, tb = self.tbs[self.n_ti[n]]
        return f"gpu {g.id} tb {tb.id} step {self.n_idx[n]}"

    def report_deadlock(self, state, cap: int, when: str, calls):
        """Errors naming the stuck thread blocks; ``when`` (the sizes and why) goes on the first one."""
        cx = self.cx
        order, pc, sub, published, sent, consumed, _, _ = state
        stuck = [ti for ti in range(len(self.tbs)) if pc[ti] < self.tb_len[ti]]
        waits_for, reasons = {}, {}
        for ti in stuck:
            n = self.tb_start[ti] + pc[ti]
            st = self.n_step[n]
            dt = self.n_dep_ti[n]
            if sub[ti] == 0 and dt >= 0 and published[dt] < self.n_deps[n]:
                dg, dtb = self.tbs[dt]
                if pc[dt] >= self.tb_len[dt]:
                    state_text = "which has finished without publishing a step numbered that high"
                elif pc[dt] > self.n_deps[n]:
                    state_text = (f"which has passed it, but none of its steps from {self.n_deps[n]} on that has "
                                  "run so far publishes progress (hasdep=1)")
                else:
                    state_text = f"which is itself stuck at step {pc[dt]}"
                reasons[ti] = f"waits for tb {dtb.id} step {self.n_deps[n]} ({state_text})"
                waits_for[ti] = dt
            elif self.n_recv[n] and sent[self.in_conn[ti]] <= consumed[self.in_conn[ti]]:
                c = self.in_conn[ti]
                src, _, chan = self.conn_keys[c]
                w = self.conn_sender[c]
                peer = self.tbs[w][1]
                where = (f"tb {peer.id} there is stuck at step {pc[w]}" if pc[w] < self.tb_len[w]
                         else f"tb {peer.id} there has finished")
                reasons[ti] = (f"{st.type} waits to receive message #{consumed[c] + 1} from gpu {src} on channel "
                               f"{chan}, which gpu {src} has not sent ({where})")
                waits_for[ti] = w
            else:
                c = self.out_conn[ti]
                _, dst, chan = self.conn_keys[c]
                w = self.conn_receiver[c]
                peer = self.tbs[w][1]
                reasons[ti] = (f"{st.type} waits for room to send to gpu {dst} on channel {chan}: {cap} messages sent "
                               f"and not yet received fill the FIFO; the receiver, tb {peer.id} there, is stuck at "
                               f"step {pc[w]}")
                waits_for[ti] = w
        # a wait cycle makes the best explanation: follow "waits for" from the first stuck block
        cycle, seen, ti = [], {}, stuck[0]
        while ti in waits_for and ti not in seen:
            seen[ti] = len(cycle)
            cycle.append(ti)
            ti = waits_for[ti]
        if ti in seen:
            loop = cycle[seen[ti]:]
            text = " -> ".join(self.describe_node(self.tb_start[x] + pc[x]) for x in loop + [loop[0]])
            g, tb = self.tbs[loop[0]]
            cx.at("deadlock", f"wait cycle{when}: {text}", g, tb, pc[loop[0]], calls=calls)
            when = ""
        for ti in stuck[:REPORT_CAP]:
            g, tb = self.tbs[ti]
            cx.at("deadlock", f"never finishes{when}: {reasons[ti]}", g, tb, pc[ti], calls=calls)
            when = ""
        if len(stuck) > REPORT_CAP:
            cx.add("deadlock", f"{len(stuck) - REPORT_CAP} more thread blocks never finish", calls=calls)
