"""What the runtime would do by itself: NCCL's own ring (or tree) on the same machine, timed by the same
engine.

NCCL picks its protocol per call with its tuning model, and uses fewer channels for small calls. This
baseline gives NCCL the best protocol under the simulator's model: at every size, the fastest of LL, LL128
and Simple, each with 1, 2, 4, ... channels up to the most NCCL's per-call rule gives a call of that size
(:func:`colls.runtimes.nccl.call_channels`) and the communicator has (on several nodes what its topology
search finds through the NICs, :func:`colls.simulate.defaults.runtime_channels`; on one node up to
:data:`MAX_BASELINE_CHANNELS`, as many as the target and the GPU's SMs allow). It is an optimistic reference
(NCCL's tuner does not always find the best), so a file that beats it beats what NCCL does by itself in this
model.

A configuration is skipped without simulating it only when it provably cannot win by more than 0.1 %
(:data:`TOLERANCE`): its time is at least the launch cost plus the larger of its busiest link's wire bytes
over that link's bandwidth and its busiest threadblock's work, one message after another, each with the
model's fixed cost per message, the bytes at the threadblock's copy rate (:func:`lower_bound`), and at least
the longest chain of steps of its first pass that wait on each other (:class:`Chain`: order, flags,
messages' latencies, FIFO slots), followed by a threadblock's work in the later passes. The engine never does
either faster (``tests/test_runtime_model.py`` checks both on every method's files and the runtime's own
algorithms); the chain is exact where a call is one latency-bound chain, as small calls are.
"""

from __future__ import annotations

import bisect
import heapq
import math
from dataclasses import replace

import numpy as np

from colls.collectives import Collective
from colls.errors import CollsError
from colls.simulate import Timing, out_of_reach, served, simulate
from colls.simulate.engine import Machine, message_count, pass_bytes
from colls.verify.execution import data_slices, max_allowed_count, slice_bytes
from colls.simulate.symmetry import per_list
from colls.runtimes.costs import DEFAULT_LAUNCH, model_for, tb_rates
from colls.runtimes import get_target
from colls.runtimes import nccl as nccl_facts

# A configuration is not simulated when its lower bound shows it cannot beat the best found by more than
# this fraction: the result is within 0.1 % of the model's best (40 times less than the smallest error the
# model has against published runs, bench/CALIBRATION.md), and many-channel configurations that tie at a
# link's bandwidth are not simulated one after another.
TOLERANCE = 1e-3
MAX_BASELINE_CHANNELS = 32          # NCCL's coll channels on 8-GPU NVSwitch nodes: 24 to 32 (NCCL_DEBUG=INFO)
PROTOCOL_ORDER = ("Simple", "LL128", "LL")


def algorithm_of(name: str) -> str:
    """``"nccl-ring"`` -> ``"ring"``."""
    return name.split("-", 1)[1]


class Fastest:
    """The fastest of several programs of one collective at each call size: each program at every
    protocol (``protocols``), each with ``extra`` facts saying which it is.

    Configurations are simulated in the order of a lower bound on their time (:func:`lower_bound`: launch,
    plus the larger of the busiest link's bytes at full speed and the busiest threadblock's messages and
    bytes), and the search stops when
    the next bound is within :data:`TOLERANCE` of the best time found: the result is within 0.1 % of the
    true best of the model.
    ``native``: programs of the runtime's own algorithms (no file selection rules); otherwise a program
    only competes at the sizes the runtime would run it for.
    """

    def __init__(self, topology, kind: str, entries, *, native: bool = False, target: str = "exe",
                 protocols=PROTOCOL_ORDER, launch: str = DEFAULT_LAUNCH, channel_cap=None):
        self.topology, self.kind, self.native, self.target = topology, kind, native, target
        self.launch = launch
        self.channel_cap = channel_cap          # (size, protocol) -> the most ``channels`` a call may use
        self.protocols = tuple(protocols)
        self.entries = []                       # (extra, Simple program, Machine, loads)
        for extra, program, machine in entries:
            machine = machine or Machine(program, topology, kind)
            machine.quotient()                  # once, for every size and the chain bounds
            self.entries.append((dict(extra), program, machine, _loads(machine)))
        self.chains: dict = {}                  # entry index -> Chain, made when first needed

    def time(self, size: int, bound=None, beat: float | None = None) -> Timing | None:
        """The fastest configuration at ``size`` (``extra`` says which, with ``protocol``), or None when
        no program serves the size.

        ``beat``: a time (microseconds) the result only matters below. A configuration whose lower bound is
        above it is not simulated; when no configuration reaches it, the result is :func:`out_of_reach`
        (not served, with the proven lower bound of the fastest in ``extra``) instead of a time."""
        candidates = []
        for index, (extra, program, machine, loads) in enumerate(self.entries):
            if not self.native and served(program, self.kind, size, inplace=_inplace(program), target=self.target):
                continue                # the runtime would not run this program for the size (at any protocol)
            for order, proto in enumerate(self.protocols):
                if self.channel_cap and extra["channels"] > self.channel_cap(size, proto):
                    continue            # the runtime runs a call this small on fewer channels
                model = model_for(proto, self.topology.gpu_model(), launch=self.launch)
                lb = lower_bound(loads, model, size, program.nchunksperloop or 1, machine.message_bytes(proto, size))
                candidates.append((lb, index, order, False, proto, model))
        # best first by bound; a configuration's chain bound is computed when it first comes to the front (then
        # it goes back in with the larger bound), so configurations the loads bound rules out never need one
        heapq.heapify(candidates)
        best = None
        lowest = None                   # the lower bound of the first configuration not simulated
        cut = math.inf                  # the least lower bound of those stopped at the time to beat
        while candidates:
            lb, index, order, chained, proto, model = heapq.heappop(candidates)
            if (best is not None and lb >= best[0].time_us * (1 - TOLERANCE)) or (beat is not None and lb > beat):
                lowest = lb             # and every configuration after it (their bounds are no lower)
                break
            extra, program, machine, _ = self.entries[index]
            if not chained:
                if index not in self.chains:
                    self.chains[index] = Chain(machine)
                chain = self.chains[index].bound(model, size, program.nchunksperloop or 1,
                                                 machine.message_bytes(proto, size), machine.fifo(proto),
                                                 machine.slices(proto))
                heapq.heappush(candidates, (max(lb, chain), index, order, True, proto, model))
                continue
            prog = program if proto == program.proto else replace(program, proto=proto)
            # only a time below both matters: the time to beat, and the best's (less the margin a new best
            # must win by, below); a call that runs past it stops there with that time as its lower bound
            limits = [x for x in (beat, best and best[0].time_us * (1 - 1e-6)) if x is not None]
            timing, _ = simulate(prog, self.topology, self.kind, size, bound=bound, machine=machine, model=model,
                                 native=self.native, target=self.target, deadline_us=min(limits, default=None),
                                 inplace=_inplace(program))
            if not timing.served:
                if "lower_bound_us" in timing.extra:
                    cut = min(cut, timing.extra["lower_bound_us"])
                continue
            if best is None or timing.time_us < best[0].time_us * (1 - 1e-6):
                best = (timing, dict(extra, protocol=proto))
        if beat is not None and (best is None or best[0].time_us > beat):
            reached = [x for x in (lowest, best and best[0].time_us, cut) if x is not None and x < math.inf]
            if reached:
                return out_of_reach(size, min(reached))
        if best is None:
            return None
        timing, timing.extra = best
        return timing

    def link_bound(self, size: int, index: int = 0) -> float:
        """The launch plus entry ``index``'s busiest link's wire bytes at that link's full bandwidth, at the
        fastest of ``protocols`` (microseconds): the part of :func:`lower_bound` that copies of the program
        on more threadblocks leave as it is (they carry the same bytes over the same links)."""
        _, program, _, (link_us, _) = self.entries[index]
        chunk = size / (program.nchunksperloop or 1)
        return min(model.launch_us + link_us * chunk / model.data_fraction
                   for model in (model_for(p, self.topology.gpu_model(), launch=self.launch)
                                 for p in self.protocols))


def _inplace(program) -> bool:
    """Whether :class:`Fastest` times ``program`` at in-place calls: a file of in-place calls only is timed at
    the calls it serves (timed out-of-place, it served no size, so colls synth --inplace-only was never given
    copies or depth: 1 x dgx-a100's ring allgather on 2 threadblocks, 11x slower than the file of both)."""
    return program.outofplace == 0


def runtime_blocks(topology, target: str = "exe") -> int:
    """The most threadblocks per GPU the runtime's own ring runs on ``topology``: one per channel, on as many
    channels as :class:`Baseline` gives it (on several nodes what its topology search finds through the NICs,
    on one node up to :data:`MAX_BASELINE_CHANNELS`), within the target's channels and the GPU's SMs. A file
    that holds no more SMs than this holds none the runtime's own call would leave to the model's compute."""
    return min(_ring_channels(topology, get_target(target)), topology.min_sms())


def _ring_channels(topology, tgt) -> int:
    """The most channels the runtime's own ring and tree run on: on several nodes the network sets them (its
    topology search), on one node the fastest count up to :data:`MAX_BASELINE_CHANNELS` stands for them; within
    the target's channels."""
    from colls.simulate import defaults
    top = min(MAX_BASELINE_CHANNELS, tgt.max_channels)
    return min(top, defaults.runtime_channels(topology, tgt) or top)


class Baseline:
    """NCCL's ``algorithm`` for one collective on one machine, laid out once per channel count."""

    def __init__(self, topology, kind: str, algorithm: str, *, root: int = 0, target: str = "exe",
                 launch: str = DEFAULT_LAUNCH, protocols=PROTOCOL_ORDER):
        from colls.simulate import defaults
        self.topology, self.kind, self.algorithm = topology, kind, algorithm
        tgt = get_target(target)
        sms = topology.min_sms()
        collective_channels = algorithm in ("ring", "tree") and kind != "alltoall"   # alltoall: p2p channels
        top = _ring_channels(topology, tgt) if collective_channels else min(MAX_BASELINE_CHANNELS, tgt.max_channels)
        counts = [1 << i for i in range(top.bit_length()) if 1 << i <= top]
        if top not in counts:
            counts.append(top)
        entries = []
        last_error = None
        if algorithm == "ring" and kind in defaults.NATIVE_RING and topology.ngpus > 1:
            # NCCL's own ring kernel: no file limits, laid out directly (defaults.ring_machine)
            per_channel = 2 if kind == "allgather" else 1
            searched = defaults.searched_rings(topology, tgt, top)
            if defaults.even_rings(topology) > 1:     # the runtime's channels: its searched rings, copied
                most = searched * defaults.ring_copies(topology, tgt)
                counts = sorted({c for c in counts if c <= most} | {most})
            counts = [c for c in counts if c * per_channel <= sms]
            last_error = f"{per_channel} threadblocks per channel, {sms} SMs"
            for channels, orders in sorted(defaults.ring_orders(topology, kind, counts, searched).items()):
                program, machine = defaults.ring_machine(topology, kind, orders, target=target)
                entries.append(({"channels": channels}, program, machine))
        elif algorithm == "tree" and kind == "allreduce" and topology.ngpus > 1:
            # NCCL's own tree kernel, its groups laid out directly (defaults.tree_machine): a pair of trees per
            # channel, each tree on a block of its own (NCCL's channels c and c + nChannels)
            counts = [c for c in counts if 2 * c <= min(sms, top)]
            last_error = f"two blocks per channel, {sms} SMs"
            for channels in counts:
                program, machine = defaults.tree_machine(topology, channels, target=target)
                entries.append(({"channels": channels}, program, machine))
        else:
            coll = Collective(kind, topology.ngpus, root=root)
            for channels in counts:
                try:
                    program = defaults.nccl_program(topology, coll, algorithm, channels=channels, proto="Simple",
                                                    target=target)
                except CollsError as e:                 # more channels than the target or the SMs allow
                    last_error = e
                    break
                if program.max_tbs() > sms:
                    break
                machine = Machine(program, topology, kind)
                # NCCL's broadcast, reduce and point-to-point kernels move a message as one slice
                machine.slice_per_chunk = nccl_facts.OTHER_SLICE_PER_CHUNK
                entries.append(({"channels": channels}, program, machine))
        if not entries:
            shown = "p2p alltoall" if kind == "alltoall" else algorithm      # alltoall runs as grouped sends
            why = getattr(last_error, "reason", last_error) or "no channel count fits"
            raise CollsError(f"{tgt.runtime}'s {shown} cannot be modelled here: {why}", key="--baseline")
        cap = None
        if collective_channels:
            cap = _channel_cap(algorithm, topology.ngpus, max(e[0]["channels"] for e in entries),
                               dict(tgt.coll_threads))
        self.fastest = Fastest(topology, kind, entries, native=True, target=target, launch=launch,
                               protocols=protocols, channel_cap=cap)

    @property
    def label(self) -> str:
        return f"NCCL {self.algorithm} (best protocol; channels by NCCL's per-call rule)"

    def time(self, size: int, bound=None, beat: float | None = None) -> Timing | None:
        """The fastest protocol and channel count at ``size``; ``extra`` says which. ``beat``: as in
        :meth:`Fastest.time` (a time the result only matters below; above it, a :func:`out_of_reach`)."""
        timing = self.fastest.time(size, bound, beat)
        if timing is not None:
            timing.label = self.label
        return timing


def _channel_cap(algorithm: str, nranks: int, top: int, threads: dict):
    """The most channels (of the baseline's programs) the runtime runs a call on, by its per-call rule
    (:func:`colls.runtimes.nccl.call_channels`). A tree program's channel is a pair of trees, NCCL's
    channels ``c`` and ``c + nChannels``: two of the runtime's channels."""
    per = 2 if algorithm == "tree" else 1

    def cap(size: int, proto: str) -> int:
        return max(1, nccl_facts.call_channels(size, algorithm, proto, nranks, top * per, threads) // per)
    return cap


def _loads(machine) -> tuple:
    """What bounds a call's time from below, per chunk byte: microseconds on the busiest link at full speed
    (every send step puts ``cnt`` chunks on each link of its route), and per threadblock its steps that send
    (each pays the model's fixed cost per message, :mod:`colls.simulate.engine`), the chunks it sends (wire bytes) and the chunks it receives, copies or reduces locally (data
    bytes), and its base copy rate. Threadblocks sharing one list of steps are counted once."""
    link_chunks = np.zeros(len(machine.links))
    counted = per_list(machine.steps, lambda steps: (             # sending steps, chunks sent, chunks local
        sum(1 for step in steps if step[0]),
        sum(step[3] for step in steps if step[0]),
        sum(step[3] for step in steps if not step[0] and not step[2])))
    per_tb = []
    for ti, (nsteps, sent, local) in enumerate(counted):
        for c in machine.out_conns[ti] if sent else ():
            link_chunks[machine.conn_links[c]] += sent
        per_tb.append((nsteps, sent, local, machine.tb_cap[ti]))
    steps, sent, local, cap = (np.array(x, dtype=float) for x in zip(*per_tb)) if per_tb else (np.zeros(0),) * 4
    return float((link_chunks / machine.link_cap).max()) if len(link_chunks) else 0.0, (steps, sent, local, cap)


def lower_bound(loads, model, size: float, ncpl: int, eff: int) -> float:
    """No configuration runs a call of ``size`` faster (microseconds): the launch, plus the larger of the
    busiest link's bytes at its full bandwidth and the busiest threadblock's own work, which it does one
    message at a time (:mod:`colls.simulate.engine`): at least one message per step that sends in every
    pass, each costing the model's fixed time per message, and every byte at the threadblock's copy
    rate (wire bytes at the protocol's rate for what it sends, data bytes at Simple's rate for what it handles
    locally). ``eff``: the bytes of one
    message of one chunk at most (:meth:`colls.simulate.engine.Machine.message_bytes`)."""
    link_us, (steps, sent, local, cap) = loads
    chunk = size / ncpl
    passes = len(pass_bytes(chunk, eff))
    own, rate = (np.array(x, dtype=float) for x in tb_rates(model, cap))      # not sending; sending
    tb_us = float((steps * passes * model.step_us + sent * chunk / model.data_fraction / rate + local * chunk / own)
                  .max()) if len(cap) else 0.0
    return model.launch_us + max(link_us * chunk / model.data_fraction, tb_us)


class Chain:
    """A machine's first pass as a graph of steps, for :meth:`bound`: a step starts after its threadblock's
    previous step, after the step it waits on has published, and after the first message of each step it
    receives from has arrived; it ends no sooner than its own work after its start, nor than the last message
    of each of those arrives plus one message's work. Where every step on a connection is one message (the
    call is small enough), a send also starts only after the receiver has finished the step ``fifo`` messages
    earlier, which frees its slot (:mod:`colls.simulate.engine`: the order, the flags and the FIFOs of the
    kernel). Everything else (sharing links, more messages per step) only delays a step more.

    Built on the machine's quotient where it has one (alike threadblocks act at the same instants)."""

    def __init__(self, machine):
        m = machine.quotient() or machine
        self.tb_cap = np.array(m.tb_cap, dtype=float)
        base, order_of = [], {}
        nodes = []                                      # (tb, snd, rcv, nop, cnt)
        for ti, steps in enumerate(m.steps):
            base.append(len(nodes))
            nodes += [(ti, s[0], s[1], s[2], s[3]) for s in steps]
        preds = [[] for _ in nodes]                     # (pred node, kind, conn): 0 order or flag, 1 message
        flags = []                                      # per threadblock: its publishing steps' (number, index)
        for ti, steps in enumerate(m.steps):
            order_of[ti] = [p for p, s in enumerate(steps) if s[0]]
            flags.append(sorted((s[7], p) for p, s in enumerate(steps) if s[6]))
        for ti, steps in enumerate(m.steps):
            recv_k = 0
            for p, s in enumerate(steps):
                n = base[ti] + p
                if p:
                    preds[n].append((n - 1, 0, -1))
                dt, deps = s[4], s[5]
                if dt >= 0:     # the first step of dt that publishes a number >= deps (numbers grow with the steps)
                    k = bisect.bisect_left(flags[dt], (deps, -1))
                    if k < len(flags[dt]):
                        preds[n].append((base[dt] + flags[dt][k][1], 0, -1))
                if s[1]:
                    for c in m.in_conns[ti]:
                        sends = order_of[m.conn_sender[c]]
                        if recv_k < len(sends):
                            preds[n].append((base[m.conn_sender[c]] + sends[recv_k], 1, c))
                    recv_k += 1
        self.order = _topological(preds)
        self.nodes, self.preds = nodes, preds
        self.fifo_orders: dict = {}                     # slots -> (order, FIFO predecessors of the sends)
        self.send_nodes = {ti: [base[ti] + p for p in order_of[ti]] for ti in order_of}
        self.recv_nodes = {ti: [base[ti] + p for p, s in enumerate(steps) if s[1]] for ti, steps in enumerate(m.steps)}
        self.conn_ends = [(m.conn_sender[c], m.conn_receiver[c]) for c in range(len(m.conn_key))]
        self.conn_cnt = [max([max(nodes[n][4], 1) for n in self.send_nodes.get(snd, ())] + [1])
                         for snd, _ in self.conn_ends]
        self.last = [base[ti] + len(steps) - 1 for ti, steps in enumerate(m.steps) if steps]
        self.last_tb = [ti for ti, steps in enumerate(m.steps) if steps]
        self.latency = list(m.conn_latency)
        self.net = list(m.conn_net)

    def bound(self, model, size: float, ncpl: int, eff: int, slots: int, slices: int = 1) -> float:
        """No call of ``size`` is faster (microseconds): the launch plus the longest chain of the first pass,
        each step at least its sent messages' fixed costs and its bytes at the threadblock's copy rate, and after a
        threadblock's first pass, its work in the passes after it, one step after another.

        ``slices``: the slices a message moves as (:meth:`colls.simulate.engine.Machine.slices`): a receiver
        starts once the first slice of its first message has arrived, ends no sooner than the last slice of
        its last message after its arrival, and a sender waits for the receiver's first slice of the message
        ``slots`` before."""
        if self.order is None:
            return 0.0
        passes = pass_bytes(size / ncpl, eff)
        b = passes[0]
        mac = max_allowed_count(max(int(math.ceil(size)), 1), ncpl, eff)
        order, fifo_preds = self._with_fifo(slots)
        single = [cnt <= mac for cnt in self.conn_cnt]      # connections whose steps are one message each
        wire = 1.0 / model.data_fraction
        own, rate = tb_rates(model, self.tb_cap.tolist())        # not sending (Simple's rate); sending (engine)
        step = model.step_us                                    # per slice that carries data (engine)
        head_bytes = slice_bytes(b, 0, slices)                  # one chunk's first slice, and its last
        tail_bytes = slice_bytes(b, slices - 1, slices)
        paid = data_slices(b, slices)
        lat = [x + (model.net_step_us if net else 0.0) for x, net in zip(self.latency, self.net)]
        # per step: its start, end, and the work of its first slice
        start, end, first = [0.0] * len(self.nodes), [0.0] * len(self.nodes), [0.0] * len(self.nodes)
        nodes, preds = self.nodes, self.preds
        tb_msgs, tb_bytes = [0] * len(rate), [0.0] * len(rate)     # per pass: messages, bytes per pass byte
        for n in order:
            ti, snd, rcv, nop, cnt = nodes[n]
            if nop:
                work = head = tail = 0.0
            else:
                unit = wire / rate[ti] if snd else (wire if rcv else 1.0) / own[ti]    # us per data byte
                msgs = message_count(cnt, mac) if snd else 0      # only a send pays the fixed cost (engine)
                work = msgs * paid * step + b * unit * cnt
                fixed = step if snd else 0.0
                head = fixed + (head_bytes * unit if cnt > 0 else 0.0)
                tail = (fixed if paid > 1 else 0.0) + (tail_bytes * unit if cnt > 0 else 0.0)
                tb_msgs[ti] += msgs
                tb_bytes[ti] += unit * cnt
            s0, e0 = 0.0, 0.0
            for q, c in fifo_preds.get(n, ()):
                if single[c]:
                    s0 = max(s0, end[q] if slices == 1 else start[q] + first[q])
            for q, kind, c in preds[n]:
                if kind == 0:
                    s0 = max(s0, end[q])
                else:
                    s0 = max(s0, start[q] + first[q] + lat[c])
                    e0 = max(e0, end[q] + lat[c] + tail)
            start[n], first[n] = s0, head
            end[n] = max(s0 + work, e0)
        later = sum(passes[1:])
        later_paid = sum(data_slices(x, slices) for x in passes[1:])
        tails = [end[n] + later_paid * tb_msgs[ti] * step + later * tb_bytes[ti]
                 for n, ti in zip(self.last, self.last_tb)]
        return model.launch_us + max(max(end, default=0.0), max(tails, default=0.0))

    def _with_fifo(self, slots: int) -> tuple:
        """The order of the steps and the FIFO predecessors of the sends (node -> [(receiving step,
        connection)]) for ``slots`` slots per connection; without them when they would make a cycle (the
        first pass would hang with one message per step: the simulation says so)."""
        if slots not in self.fifo_orders:
            fifo: dict = {}
            for c, (snd, rcv) in enumerate(self.conn_ends):
                recvs = self.recv_nodes.get(rcv, [])
                for k, x in enumerate(self.send_nodes.get(snd, [])):
                    if slots <= k < len(recvs) + slots:
                        fifo.setdefault(x, []).append((recvs[k - slots], c))
            preds = [p + [(q, 0, -1) for q, _ in fifo.get(n, ())] for n, p in enumerate(self.preds)]
            order = _topological(preds) if fifo else None
            self.fifo_orders[slots] = (order, fifo) if order is not None else (self.order, {})
        return self.fifo_orders[slots]


def _topological(preds: list) -> list | None:
    """The nodes in an order where each comes after its predecessors; None when there is a cycle (the
    program deadlocks in its first pass: the simulation says so)."""
    succ = [[] for _ in preds]
    left = [len(p) for p in preds]
    for n, ps in enumerate(preds):
        for q, _, _ in ps:
            succ[q].append(n)
    ready = [n for n, k in enumerate(left) if k == 0]
    order = []
    while ready:
        n = ready.pop()
        order.append(n)
        for x in succ[n]:
            left[x] -= 1
            if not left[x]:
                ready.append(x)
    return order if len(order) == len(preds) else None


class RuntimeDefault:
    """What the runtime of ``target`` runs by itself for ``kind`` at each size: the fastest, in the model, of
    the algorithms its tuner chooses among (:attr:`colls.runtimes.base.Target.algorithms`: ring, tree for
    allreduce, NVLS on NVSwitch Hopper nodes; alltoall is grouped sends, :func:`colls.simulate.defaults.
    nccl_program`), each at its best protocol, on the channels a call of the size gets. NCCL's tuner aims at
    the fastest by its own estimate; taking the model's fastest makes this the runtime at its best, so a file
    that beats it beats what the runtime does by itself.

    ``algorithms`` forces a subset (``--baseline nccl-ring`` is ``("ring",)``, like NCCL_ALGO). Algorithms that
    cannot run here are left out with the reason in :attr:`notes`; when none can, CollsError.
    """

    def __init__(self, topology, kind: str, *, root: int = 0, target: str = "exe", algorithms=None,
                 launch: str = DEFAULT_LAUNCH, protocols=PROTOCOL_ORDER):
        from colls.simulate.nvls import Nvls, nvls_reason
        tgt = get_target(target)
        self.topology, self.kind, self.target = topology, kind, tgt
        wanted = tuple(algorithms or tgt.algorithms)
        self.timers, self.algorithms, self.notes = [], [], []
        self.lead = 0                   # the timer that won the last size timed: the first one timed next
        for a in wanted:
            if a == "tree" and kind != "allreduce":
                if algorithms:
                    self.notes.append(f"NCCL's tree runs allreduce only, not {kind}")
                continue
            if a == "nvls":
                if "Simple" not in protocols:
                    self.notes.append("NVLS runs Simple only")
                    continue
                if a not in tgt.algorithms:
                    self.notes.append(f"{tgt.runtime} has no NVLS")
                    continue
                reason = nvls_reason(topology, kind)
                if reason:
                    if algorithms:
                        self.notes.append(reason)
                    continue
                self.timers.append(Nvls(topology, kind, launch=launch))
                self.algorithms.append("nvls" if self.timers[-1].nnodes == 1 else "nvls-tree")
                continue
            protos = protocols
            if kind == "alltoall":
                # grouped sends: LL below a threshold, else Simple; never LL128 (src/enqueue.cc, NCCL 2.23:
                # "protoLL[dir] &= bytes <= nChannelsMax * P2P_LL_THRESHOLD", protocol LL or SIMPLE)
                protos = tuple(p for p in protocols if p != "LL128") or protocols
            try:
                self.timers.append(Baseline(topology, kind, a, root=root, target=target, launch=launch,
                                            protocols=protos))
                self.algorithms.append("p2p" if kind == "alltoall" else a)
            except CollsError as e:            # e.g. a degraded machine with no link a tree edge needs
                # Baseline's own refusal (key --baseline) names the algorithm already; anything else does not
                self.notes.append(e.reason if e.key == "--baseline" else
                                  f"{tgt.runtime}'s {'p2p alltoall' if kind == 'alltoall' else a} is not modelled "
                                  f"on this machine: {e.reason}")
        if not self.timers:
            raise CollsError("; ".join(self.notes) or f"no algorithm of {tgt.runtime} runs {kind} here",
                             key="--baseline")

    @property
    def label(self) -> str:
        if len(self.algorithms) == 1:
            return f"{self.target.runtime} {self.algorithms[0]} (best protocol; channels by the per-call rule)"
        return f"{self.target.runtime} default ({', '.join(self.algorithms)}: the fastest at each size)"

    def pick(self, timings: list) -> Timing:
        """The fastest of one size's timings (one per algorithm, in :attr:`algorithms` order)."""
        best, algorithm = min(((t, a) for t, a in zip(timings, self.algorithms) if t is not None),
                              key=lambda x: x[0].time_us)
        best.extra = dict(best.extra, algorithm=algorithm)
        best.label = self.label
        return best

    def time(self, size: int, bound=None) -> Timing:
        """:meth:`pick` of every algorithm's timing at ``size``. The last size's winner is timed first (sizes
        near each other mostly have the same one), and the others only as far as they could beat it: a
        configuration whose lower bound is above the time to beat is not simulated (:meth:`Fastest.time`),
        so the one picked is the one timing them all in full would pick."""
        timings: list = [None] * len(self.timers)
        best = None
        for i in [self.lead] + [i for i in range(len(self.timers)) if i != self.lead]:
            t = self.timers[i].time(size, bound, beat=best)
            if t is not None and t.served:
                timings[i] = t
                best = t.time_us if best is None else min(best, t.time_us)
        if all(t is None for t in timings):
            raise CollsError(f"no algorithm of {self.target.runtime} serves {size} bytes", key="--baseline")
        self.lead = min((i for i, t in enumerate(timings) if t is not None), key=lambda i: timings[i].time_us)
        return self.pick(timings)
