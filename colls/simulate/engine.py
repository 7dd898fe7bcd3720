"""The discrete-event engine: one call of an MSCCL program on a machine, as the runtime executes it.

What runs (``mscclRunInterpreter`` in the executor's ``msccl_kernel.cu``, ``mscclSetupCount`` in
``msccl_setup.cc``):

- **The loop.** The call's buffer of ``size`` bytes is cut into ``nchunksperloop`` chunks. The kernel runs
  the whole program once per *slice* of every chunk: slices are the protocol's chunk size
  (:func:`colls.verify.execution.chunk_effective_bytes`: 2 MiB for Simple with NCCL's default buffers),
  the last one what is left. A step of ``cnt`` chunks moves, in each pass, ``cnt`` pieces of one slice
  each; when a whole chunk is smaller than a slice the runtime joins up to ``maxAllowedCount`` chunks into
  one message instead (:func:`colls.verify.execution.max_allowed_count`). Threadblocks do not wait for
  each other between passes, so pass ``i + 1`` of one threadblock overlaps pass ``i`` of the next: that
  is the pipeline.
- **Threadblocks** run their steps in order. A step with ``depid/deps`` first waits until that
  threadblock has published step ``deps`` *of the same pass* (the kernel's flag holds the pass and the
  step). A step marked ``hasdep`` publishes when its last message is done. Nops without a dependency are
  dropped and the steps after them renumbered, as the loader does
  (:func:`colls.verify.structure.kernel_numbers`).
- **Slices.** A Simple message moves as two slices (the kernel's ``ProtoSimple<MSCCL_CHUNKSTEPS /
  MSCCL_SLICESTEPS, MSCCL_SLICESTEPS>``; NCCL's ``genericOp`` in ``src/device/prims_simple.h`` cuts ``nelem``
  into ``SlicePerChunk`` slices of at least a 32nd of a slice's slots, and waits for, copies and posts each on
  its own), so a threadblock that receives and sends forwards the first slice while the second still
  arrives: a relay's delay is a slice, not a message. NCCL's own tree, broadcast, reduce and point-to-point
  kernels take one slice per message (:meth:`Machine.slices`); LL and LL128 messages are one unit. A call whose
  every message fits its first slice moves them whole (the second slice is empty and fences nothing).
- **Connections.** Each (sender, receiver, channel) is a FIFO of :func:`colls.verify.execution.fifo_messages`
  slots (2 messages for Simple, 8 for LL and LL128), that is of 4 Simple slices. A send waits for a free
  slot, a receive for a slice that has fully arrived; the slot is freed when the receiving step is done with
  it.
- **Costs of a message.** A threadblock that sends first spends the model's fixed per-message cost (the
  system-wide fence and the flag it posts to the peer, :class:`colls.runtimes.costs.Model`), then moves the
  bytes; each slice that carries data pays it (``postPeer`` fences whenever data was stored), so a large
  Simple message pays it twice and one that fits its first slice once. A step that only receives, copies or
  reduces pays its bytes alone: the kernel's receive polls a flag the sender has already posted (``waitPeer``)
  and posts its own without a fence (``postPeer`` fences only for a send, ``prims_simple.h``), and local
  copies and reductions touch no flag at all. So a hop costs the fixed cost once per slice, at its sending
  end only, as the runtime's own tuning charges it (``hwLat`` per ring step), whether its two ends are one
  step (a ring's ``rrs``) or two (an ``s`` and an ``r``). A message that crosses the fabric is
  a *flow* over the physical links of its route (:meth:`colls.topology.Topology.route`); the bytes on the
  wire are the data bytes divided by the protocol's data fraction (LL moves 8 data bytes per 16). Every
  link's bandwidth (times its class's ``efficiency``) is shared max-min fairly among the flows crossing it
  at that moment, and no flow moves faster than its threadblock can copy. The message reaches the receiver
  when its last byte has been sent plus the route's latency (the sum of its hops' latencies).
- **Across the network** a send writes the message into the connection's buffer at the threadblock's copy
  rate, and the host's proxy hands it to the NIC slice by slice as the GPU's tail advances, giving the slot
  back when the NIC's send is done (NVIDIA/nccl ``src/transport/net.cc``, ``sendProxyProgress``: post,
  ``isend`` of what the tail covers, ``test``). So the threadblock is done with the message when it has
  written it, and goes on to its next step (the next message's fixed cost, another peer) while the NIC
  still sends; the NIC sends a connection's messages one after another, each no faster than its writing
  while that lasts and then at what the links give it; the message arrives the route's latency plus the
  network's (``net_step_us``) after its last byte left. A step that
  does not send (receiving into a buffer, local copies and reductions) works in its GPU's own memory at the
  threadblock's Simple copy rate, whatever the protocol: a receive reads the protocol's lines (LL: 16 bytes
  for 8 of data) that have already arrived, and the protocol's lower rate (NCCL's LL and LL128 caps) is
  that of its lines crossing the link flag by flag, which the sender pays. The call's fixed cost (kernel
  launch) is added once.

Max-min fairness is computed by progressive filling (all unfrozen flows grow at the same rate until a link
is full or a flow reaches its cap; those flows freeze; repeat), after every batch of events that changes
the set of flows.

**Steady state, extrapolated exactly.** Every full-size pass does the same work, so the engine watches for
the state to repeat: when the threadblock with most steps begins a pass it records the whole state *relative to that pass*
(every threadblock's pass offset and position, every connection's counts, every flow's time to its end,
every pending event's time from now), rounded to 1e-9 us. When a recorded state recurs
``d`` passes and ``P`` microseconds later, the future repeats too (the engine is deterministic and the passes
ahead are the same size), so the engine moves every threadblock ``J x d`` passes ahead, the clock ``J x P``
and the links' byte counts ``J`` times their growth over one period, for the largest ``J`` that keeps
every threadblock among the full-size passes, and simulates the rest (the last, partial pass) as usual.
The result equals the full simulation; ``tests/test_simulate.py`` checks that on small cases.

**Alike threadblocks, simulated once.** Threadblocks that run the same steps on alike connections over
alike links (a ring's ranks on a switch, the nodes of a cluster, the copies of a schedule on channels of
their own) act at the same instants, so the engine runs one of each class (:mod:`colls.simulate.symmetry`:
the quotient by the coarsest equitable partition, every link class counting how many flows of each class
cross one of its links). The result equals the whole machine's; ``tests/test_simulate.py`` checks that too.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from colls.errors import CollsError
from colls.program import STEP_SEMANTICS, Program
from colls.runtimes.costs import Model, tb_rate, tb_rates
from colls.simulate.symmetry import per_list
from colls.topology import NIC, Topology
from colls.verify.execution import (SLICE_PER_CHUNK, chunk_effective_bytes, data_slices, fifo_messages,
                                     max_allowed_count, slice_bytes)
from colls.verify.structure import kernel_numbers

BIG = 1 << 24                       # published flag = pass * BIG + step number (steps per tb < 2^24)
TIME_EPS = 1e-9                     # us: events this close are one batch
FINISH_GATE = 1e-6                  # us: no flow is done while the earliest finish is further ahead than this
_START, _LOCAL_DONE, _ARRIVE, _COPIED = 0, 1, 2, 3
MAX_TIMELINE_INTERVALS = 400_000    # per call; a timeline asks for one size, this bounds its memory


@dataclass
class RunResult:
    """One simulated call: its time and what each link carried (timeline only when asked for)."""

    time_us: float
    passes: int
    link_bytes: np.ndarray          # wire bytes each link carried
    extrapolated_passes: int = 0    # passes skipped by the steady-state jump
    events: int = 0
    tb_lanes: list = field(default_factory=list)    # [(tb index, [(start, end, kind)])]
    link_lanes: list = field(default_factory=list)  # [(link index, [(start, end, kind)])]
    truncated: bool = False
    extrapolated_steps: int = 0     # steps skipped by the jumps inside passes (of the reference threadblock)
    cut: bool = False               # stopped at ``deadline_us``: ``time_us`` is then a lower bound on the call
    drawn_us: float | None = None   # truncated timeline: no lane holds anything past this time


def pass_bytes(chunk: float, eff: int) -> list[float]:
    """The bytes of one chunk each pass moves: whole messages of ``eff`` bytes, the last what is left (one
    pass when the chunk fits one message)."""
    if chunk <= eff:
        return [chunk]
    full, rest = divmod(chunk, eff)
    return [float(eff)] * int(full) + ([rest] if rest > 1e-9 else [])


def message_count(cnt: int, mac: int) -> int:
    """The messages a step of ``cnt`` chunks is in each pass: one per chunk, or runs of up to ``mac`` chunks
    joined when the runtime joins them (``mac`` > 1, :func:`colls.verify.execution.max_allowed_count`); a step
    that moves nothing (a nop, ``cnt`` 0) still takes one turn."""
    if cnt <= 0:
        return 1
    return cnt if mac <= 1 else -(-cnt // mac)


def step_tuples(steps) -> list[tuple]:
    """A threadblock's steps as the engine runs them: (sends, receives, nop, chunks, waits-on tb id or -1, deps,
    publishes, kernel step number, kind). Nops without a dependency are kept but numbered as the loader
    numbers them (:func:`colls.verify.structure.kernel_numbers`); a nop's dependency counts only when a real
    step follows it."""
    numbers = kernel_numbers(steps)
    real_after = [False] * (len(steps) + 1)
    for i in range(len(steps) - 1, -1, -1):
        real_after[i] = real_after[i + 1] or steps[i].type != "nop"
    out = []
    for i, st in enumerate(steps):
        snd, rcv, _, _, red = STEP_SEMANTICS[st.type]
        nop = st.type == "nop"
        waits = st.depid is not None and st.depid >= 0 and (not nop or real_after[i])
        kind = ("recv+send" if snd and rcv else "send" if snd else "recv" if rcv else "nop" if nop
                else "reduce" if red else "copy")
        out.append((snd, rcv, nop, max(int(st.cnt or 0), 0), st.depid if waits else -1, int(st.deps or 0),
                    bool(st.hasdep == 1 and not nop), numbers[i], kind))
    return out


class Machine:
    """A Program laid out in flat arrays over a Topology: threadblocks, steps, connections, routes."""

    def __init__(self, program: Program, topology: Topology, kind: str | None):
        self._header(program, topology, kind)
        heads = []                                      # (gpu id, Threadblock, its steps as tuples)
        for gpu in sorted(program.gpus, key=lambda x: x.id):
            for tb in sorted(gpu.tbs, key=lambda x: x.id):
                heads.append((gpu.id, tb, step_tuples(tb.steps)))
        self._lay_out(heads)

    @classmethod
    def from_threadblocks(cls, program: Program, topology: Topology, kind: str | None, heads) -> "Machine":
        """A Machine from threadblocks given directly: ``heads`` is a list of (gpu id, threadblock, steps),
        the threadblock anything with ``id``, ``send``, ``recv`` and ``chan``, the steps as
        :func:`step_tuples` makes them (a depid is a threadblock id on the same GPU). ``program`` gives the
        header (GPU count, chunks per loop, protocol) and may have no GPUs. Threadblocks that share one
        list of steps without dependencies keep sharing it (the symmetry check then hashes it once)."""
        m = cls.__new__(cls)
        m._header(program, topology, kind)
        m._lay_out(heads)
        return m

    def _header(self, program: Program, topology: Topology, kind: str | None):
        self.program, self.topology, self.kind = program, topology, kind
        if program.ngpus != topology.ngpus:
            raise CollsError(f"the file is for {program.ngpus} GPUs but {topology.name} has "
                             f"{topology.ngpus}", key="--hardware")
        links = [(u, v) for u, v, _ in topology.links()]
        self.links = links
        g = topology.graph
        # usable bytes per microsecond on each link: GB/s x 1000 x efficiency
        self.link_cap = np.array([float(g.edges[e]["bw"]) * 1000.0 * float(g.edges[e].get("efficiency", 1))
                                  for e in links], dtype=float)
        self.link_index = {e: i for i, e in enumerate(links)}
        # how the runtime cuts a call into messages: MSCCL's, unless the algorithm is the runtime's own and
        # cuts otherwise (NCCL's tree, colls.simulate.defaults.tree_machine)
        self.chunk_steps: int | None = None      # slots of the connection's buffer a Simple message takes
        self.chunk_rule = None                   # (proto, call bytes, message bytes) -> message bytes
        # (proto, chunks joined per message, passes per chunk) -> each connection's FIFO in messages, where the
        # runtime grants room by something else than the message (an MSCCL++ plan's slot holds a whole step)
        self.fifo_rule = None
        # per protocol, each threadblock's share of a whole block's copy rate (a group of a block's threads,
        # as NCCL's tree runs them: colls.simulate.defaults.tree_machine); None: every block copies whole
        self.tb_scale: dict | None = None
        # the slices a Simple message moves as, each waited for, copied and posted on its own (the kernel's
        # ProtoSimple<SlicePerChunk, ...>): MSCCL's and NCCL's ring kernels 2, NCCL's tree, broadcast, reduce and
        # point-to-point kernels 1 (colls.runtimes.nccl.TREE_SLICE_PER_CHUNK)
        self.slice_per_chunk = SLICE_PER_CHUNK

    def message_bytes(self, proto: str | None, size: float, buffsize: int | None = None) -> int:
        """The data bytes of one message of one chunk at most, for a call of ``size`` bytes."""
        eff = chunk_effective_bytes(proto, self.kind, buffsize, self.chunk_steps)
        return self.chunk_rule(proto, size, eff) if self.chunk_rule is not None else eff

    def slices(self, proto: str | None) -> int:
        """The slices one message moves as: :attr:`slice_per_chunk` for Simple; LL and LL128 messages are
        one (their lines carry their own flags)."""
        return self.slice_per_chunk if proto in (None, "Simple") else 1

    def fifo(self, proto: str | None) -> int:
        """Messages a connection holds before its sender waits."""
        return fifo_messages(proto, self.chunk_steps)

    def fifo_caps(self, proto: str | None, mac: int, npass: int) -> list[int]:
        """Each connection's :meth:`fifo` for a call cut into ``npass`` passes of messages of up to ``mac``
        chunks."""
        if self.fifo_rule is not None:
            return self.fifo_rule(proto, mac, npass)
        return [self.fifo(proto)] * len(self.conn_key)

    def _lay_out(self, heads):
        topology, g, link_index = self.topology, self.topology.graph, self.link_index
        self.tbs = [(gid, tb.id, tb) for gid, tb, _ in heads]     # ti -> (gpu id, tb id, threadblock)
        index = {(gid, tid): ti for ti, (gid, tid, _) in enumerate(self.tbs)}
        self.tb_cap = [tb_rate(g.nodes[gid].get("model")) * 1000.0 for gid, _, _ in self.tbs]
        conns: dict = {}
        self.conn_key, self.conn_sender, self.conn_receiver = [], [], []
        self.out_conns: list[tuple] = [()] * len(self.tbs)    # a threadblock's connections: one peer each way
        self.in_conns: list[tuple] = [()] * len(self.tbs)     # in a file, several for a native NCCL group

        def conn(key):
            if key not in conns:
                conns[key] = len(self.conn_key)
                self.conn_key.append(key)
                self.conn_sender.append(-1)
                self.conn_receiver.append(-1)
            return conns[key]

        for ti, (gid, _, tb) in enumerate(self.tbs):
            outs = [conn((gid, peer, tb.chan)) for peer in _peers(tb.send)]
            ins = [conn((peer, gid, tb.chan)) for peer in _peers(tb.recv)]
            for c in outs:
                self.conn_sender[c] = ti
            for c in ins:
                self.conn_receiver[c] = ti
            self.out_conns[ti], self.in_conns[ti] = tuple(outs), tuple(ins)
        self.conn_links, self.conn_latency, self.conn_net = [], [], []
        pairs: dict = {}                                # (src, dst) -> its route's links, latency, NIC: per channel alike
        for src, dst, chan in self.conn_key:
            if (src, dst) not in pairs:
                route = topology.route(src, dst) if src != dst else None
                if route is None:
                    raise CollsError(f"gpu {src} sends to gpu {dst} on channel {chan}, but {topology.name} has no "
                                     "route between them", key="--hardware")
                pairs[src, dst] = (np.array([link_index[(u, v)] for u, v in zip(route, route[1:])], dtype=np.int64),
                                   topology.route_latency(route),
                                   any(topology.graph.nodes[v]["kind"] == NIC for v in route))
            links, latency, net = pairs[src, dst]
            self.conn_links.append(links)
            self.conn_latency.append(latency)
            self.conn_net.append(net)
        self.conn_weight = [np.ones(len(x)) for x in self.conn_links]     # flows per link (see symmetry)
        self._quotient = False
        # steps, flattened per threadblock: the dependencies resolved to threadblock indices
        self.steps = []                                 # ti -> list of tuples
        checked = per_list([template for _, _, template in heads], lambda steps: (
            next((i for i, st in enumerate(steps) if st[0]), None),     # first send, first receive, waits
            next((i for i, st in enumerate(steps) if st[1]), None),
            any(st[4] >= 0 for st in steps)))
        for ti, (gid, tb, template) in enumerate(heads):
            first_send, first_recv, waits = checked[ti]
            missing = sorted((i, what) for i, what, peers in ((first_send, "send to", self.out_conns[ti]),
                                                              (first_recv, "receive from", self.in_conns[ti]))
                             if i is not None and not peers)
            if missing:
                i, what = missing[0]
                raise CollsError(f"gpu {gid} tb {tb.id} step {i} ({template[i][8]}) has no peer to {what}", key="tb")
            if waits:
                template = [st[:4] + ((index[(gid, st[4])] if st[4] >= 0 else -1),) + st[5:] for st in template]
            self.steps.append(template)

    def quotient(self):
        """One threadblock per class of alike ones (:mod:`colls.simulate.symmetry`), or None; computed once."""
        if self._quotient is False:
            from colls.simulate.symmetry import quotient
            self._quotient = quotient(self)
        return self._quotient

    def link_bytes(self, per_link: np.ndarray) -> np.ndarray:
        return per_link

    def link_name(self, li: int) -> str:
        return " -> ".join(f"GPU {x}" if isinstance(x, int) else str(x) for x in self.links[li])

    def tb_name(self, ti: int) -> str:
        gid, tid, tb = self.tbs[ti]
        return f"gpu {gid} tb {tid} (ch {tb.chan})"


def run(machine: Machine, size_bytes: float, model: Model, *, ncpl: int, proto: str | None,
        timeline: bool = False, extrapolate: bool = True, buffsize: int | None = None,
        symmetric: bool = True, deadline_us: float | None = None) -> RunResult:
    """Simulate one call of ``size_bytes`` (the whole buffer, as the runtime counts it) and return its time.

    ``symmetric``: simulate one threadblock of each class of alike ones (:mod:`colls.simulate.symmetry`; the
    same result, off only to check it). A timeline always simulates every threadblock.
    ``deadline_us``: a time the caller only needs the result below. Once the next event lies beyond it (the
    launch counted) the call cannot end sooner, as the clock only moves forward, so the engine stops there:
    the result is ``cut``, its ``time_us`` that event's time, a lower bound on the call's (a call that ends
    within the deadline gives exactly the time it gives without one).

    Raises CollsError when the program cannot finish at this size (a hang: the verifier names the cause).
    """
    m = machine
    if symmetric and not timeline:
        m = machine.quotient() or machine
    return _Run(m, size_bytes, model, ncpl, proto, timeline, extrapolate, buffsize, deadline_us).go()


class _Run:
    def __init__(self, m: Machine, size, model, ncpl, proto, timeline, extrapolate, buffsize, deadline_us=None):
        self.m = m
        self.model = model
        self.deadline = math.inf if deadline_us is None else deadline_us
        chunk = size / ncpl                                 # bytes of one chunk
        eff = m.message_bytes(proto, size, buffsize)
        self.mac = max_allowed_count(max(int(math.ceil(size)), 1), ncpl, eff)
        self.pass_bytes = pass_bytes(chunk, eff)
        self.npass = len(self.pass_bytes)
        self.nfull = sum(1 for b in self.pass_bytes if b == self.pass_bytes[0])
        # a message moves as ``nsl`` slices (:meth:`Machine.slices`), each a unit of the FIFO and of the flows
        # below: its own wait, copy and post, so a relay forwards the first while the second arrives. Each
        # slice that carries data pays the fixed cost of a message (its post fences: ``postPeer`` fences when
        # data was stored), so a message small enough to fit its first slice pays it once, as before
        self.buffsize = buffsize
        largest = self.pass_bytes[0] * max(self.mac, 1) if self.pass_bytes else 0.0
        # a call whose every message fits its first slice moves them whole: the others are empty, fence nothing
        self.nsl = data_slices(largest, m.slices(proto), buffsize)
        self.caps = [cap * self.nsl for cap in m.fifo_caps(proto, self.mac, self.npass)]
        self.step_us = model.step_us
        self.net_us = model.net_step_us
        self.wire = 1.0 / model.data_fraction
        T, C = len(m.tbs), len(m.conn_key)
        share = None if m.tb_scale is None else (m.tb_scale.get(proto) or m.tb_scale["Simple"])
        # what a threadblock moves per us: sending, at its protocol's rate; otherwise at Simple's (the module)
        self.local_cap, self.tb_cap = tb_rates(model, m.tb_cap, share)
        self.it, self.pc, self.k = [0] * T, [0] * T, [0] * T
        self.busy = [False] * T
        self.flows_left = [0] * T                       # a sending message's flows still moving
        self.done = [len(m.steps[ti]) == 0 for ti in range(T)]
        self.published = [-1] * T
        self.waiters = [[] for _ in range(T)]
        self.sent, self.arrived, self.consumed = [0] * C, [0] * C, [0] * C
        self.heap: list = []
        self.seq = 0
        self.now = 0.0
        # the flows in flight, one slot per connection (a connection carries one message at a time): whether
        # it moves, its rate and the time it will finish at that rate (its remaining bytes are rate x (finish
        # - now), so nothing changes between rebuilds); every connection's links as (link, connection)
        # entries, laid out once. New flows wait in ``pending`` until the next rebuild.
        self.f_on = np.zeros(C, dtype=bool)
        self.f_rate = np.zeros(C)
        self.f_fin = np.full(C, math.inf)
        self.t_min = math.inf                            # the earliest finish
        self.fin_heap: list = []                         # (finish, connection) of one-link flows, pushed when it changes
        self.wide_min = math.inf                         # the earliest finish of the other flows
        self.nflows = 0
        self.conn_ti = np.array(m.conn_sender, dtype=np.int64)
        lens = [len(x) for x in m.conn_links]
        self.e_link = np.concatenate(m.conn_links) if C else np.zeros(0, dtype=np.int64)
        self.e_conn = np.repeat(np.arange(C), lens)
        self.e_w = np.concatenate(m.conn_weight) if C else np.zeros(0)    # flows of the entry's class per link
        self.pending: list = []
        self.rates_dirty = False
        # the components of the flow-link graph (see rebuild): a connection's, a link's; a connection whose
        # component is one link has that link in ``one_link`` (else -1), and that link's flows in flight in
        # ``on_link`` (connection -> (cap, flows it stands for))
        self.comp, _, self.one_link = _components(m)      # once per machine
        # each component's connections, entries and links, in index order (:meth:`_reallocate`)
        self.comp_conns, self.comp_entries, self.comp_links = _component_members(m, self.e_conn)
        self.one_arr = np.array(self.one_link, dtype=np.int64) >= 0
        self.wide_idx = np.flatnonzero(~self.one_arr)
        self.on_link = [{} for _ in range(len(m.links))]
        # per link of a one-link component: its flows' caps times their weights, summed as they come and go,
        # and whether its last fill left a flow below its cap (:meth:`rebuild`'s shortcut)
        self.one_capw = [0.0] * len(m.links)
        self.one_tight = [False] * len(m.links)
        # each connection's flow cap: its sender's copy rate; a network connection's once its message is in the
        # buffer, the route's narrowest link (no cap of its own: the NIC reads the buffer, :meth:`start`)
        self.net = m.conn_net
        self.conn_cap = np.array([self.tb_cap[ti] if ti >= 0 else 0.0 for ti in m.conn_sender], dtype=float)
        self.route_cap = [float(m.link_cap[links].min()) if net and len(links) else 0.0
                          for links, net in zip(m.conn_links, m.conn_net)]
        # a network connection's messages written (or being written) into its buffer and not yet across the
        # NIC, in order: [wire bytes, still being written]; the first is the flow in flight
        self.nic_q: dict = {c: [] for c, net in enumerate(m.conn_net) if net}
        self.recapped: list = []                         # flows whose cap changed: restarted at the next rebuild
        self.load = np.zeros(len(m.links))               # bytes/us the flows put on each link
        self.conn_bytes = [0.0] * C                      # wire bytes each connection carried (its links: below)
        self.events = 0
        self.timeline = timeline
        self.tb_iv = [[] for _ in range(T)] if timeline else None
        self.link_iv = [[] for _ in range(len(m.links))] if timeline else None
        self.iv_count = 0
        self.truncated = False
        self.drawn_us = None
        self.act_start = [0.0] * T
        self.extrapolate = extrapolate and self.nfull > 2 and T > 0
        self.extrapolate_steps = extrapolate and not timeline and T > 0
        # the reference threadblock, whose pass starts are where the state is recorded: the one with most
        # steps (it has work in every pass)
        self.ref = max(range(T), key=lambda ti: (len(m.steps[ti]), -ti)) if T else 0
        self.snapshots: dict = {}
        self.snap_due = False
        self.jumped = 0
        # the steady state inside a pass: runs of alike steps (a ring's N-2 receive-reduce-sends)
        self.run_end = _run_ends(m.steps)
        self.step_snaps: dict = {}
        self.step_snap_due = False
        self.steps_jumped = 0

    # --- helpers -------------------------------------------------------------------------------------
    def push(self, t, what, arg):
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, what, arg))

    def message(self, cnt: int, p: int, k: int) -> float:
        """Data bytes of slice ``k`` of a step of ``cnt`` chunks in pass ``p``: slice ``k % nsl`` of message
        ``k // nsl`` (:func:`message_count` of them: one chunk each, or runs of ``mac`` chunks and the rest)."""
        if cnt <= 0:
            return 0.0
        k, part = divmod(k, self.nsl)
        b = self.pass_bytes[p]
        if self.mac > 1:
            full, rest = divmod(cnt, self.mac)
            b = b * self.mac if k < full else b * rest
        return slice_bytes(b, part, self.nsl, self.buffsize)

    def wake(self, ti):
        if ti >= 0 and not self.busy[ti] and not self.done[ti]:
            self.try_run(ti)

    # --- threadblocks --------------------------------------------------------------------------------
    def try_run(self, ti):
        m = self.m
        steps = m.steps[ti]
        while not self.busy[ti] and not self.done[ti]:
            p, it, k = self.pc[ti], self.it[ti], self.k[ti]
            snd, rcv, nop, cnt, dt, deps, pub, num, kind = steps[p]
            if k == 0 and dt >= 0 and self.published[dt] < it * BIG + deps:
                self.waiters[dt].append(ti)
                return
            if nop:
                self.finish_step(ti)
                continue
            if rcv:
                for c in m.in_conns[ti]:
                    if self.arrived[c] <= self.consumed[c]:
                        return
            if snd:
                outs = m.out_conns[ti]
                for c2 in outs:
                    if self.sent[c2] - self.consumed[c2] >= self.caps[c2]:
                        return
                for c2 in outs:
                    self.sent[c2] += 1
            self.busy[ti] = True
            self.act_start[ti] = self.now
            # a hop's cost, on its send: per slice that carries data (an empty one posts no fence)
            fixed = snd and (self.nsl == 1 or k % self.nsl == 0 or self.message(cnt, it, k) > 0)
            self.push(self.now + (self.step_us if fixed else 0.0), _START, ti)
            return

    def start(self, ti):
        """The fixed cost is paid: move the message's bytes."""
        m = self.m
        p, it, k = self.pc[ti], self.it[ti], self.k[ti]
        snd, rcv, nop, cnt, dt, deps, pub, num, kind = m.steps[ti][p]
        nbytes = self.message(cnt, it, k)
        if snd:
            wire = nbytes * self.wire
            outs = m.out_conns[ti]
            for c in outs:
                self.conn_bytes[c] += wire
            if wire <= 0:               # an empty slice: its flag alone, behind what the NIC still sends
                for c in outs:
                    if self.net[c]:
                        if self.nic_q[c]:
                            self.nic_q[c].append([0.0, False])
                        else:
                            self.push(self.now + m.conn_latency[c] + self.net_us, _ARRIVE, c)
                self.complete(ti)
                return
            for c in outs:              # one flow per peer, each at the threadblock's copy rate
                if self.net[c]:
                    # into the connection's buffer at the copy rate; the NIC streams it out behind the copy
                    q = self.nic_q[c]
                    q.append([wire, True])
                    if len(q) == 1:
                        self.conn_cap[c] = self.tb_cap[ti]
                        self.pending.append((c, wire))
                    self.push(self.now + wire / self.tb_cap[ti], _COPIED, (ti, c))
                else:
                    self.pending.append((c, wire))
            self.flows_left[ti] = len(outs)
            self.rates_dirty = True
        else:
            # the GPU's own memory at Simple's rate: a receive reads the protocol's lines (see the module)
            dur = nbytes * (self.wire if rcv else 1.0) / self.local_cap[ti] if nbytes > 0 else 0.0
            self.push(self.now + dur, _LOCAL_DONE, ti)

    def complete(self, ti):
        """The message's bytes have moved (sent, copied or reduced)."""
        m = self.m
        p = self.pc[ti]
        snd, rcv, nop, cnt, dt, deps, pub, num, kind = m.steps[ti][p]
        if self.timeline:
            self.record(self.tb_iv[ti], self.act_start[ti], self.now, kind)
        if snd:
            for c in m.out_conns[ti]:
                if not self.net[c]:         # a network message arrives when the NIC has sent it (:meth:`sent_out`)
                    self.push(self.now + m.conn_latency[c], _ARRIVE, c)
        if rcv:
            for c in m.in_conns[ti]:
                self.consumed[c] += 1
                self.wake(m.conn_sender[c])
        self.busy[ti] = False
        self.k[ti] += 1
        if self.k[ti] >= message_count(cnt, self.mac) * self.nsl:
            self.finish_step(ti)
        self.wake(ti)

    def copied(self, ti: int, c: int):
        """A network message is in its connection's buffer: the NIC's transfer of it, in flight or queued, is
        no longer held to the threadblock's copy rate, and the threadblock is done with it."""
        q = self.nic_q[c]
        # the message being written is the connection's latest (unless the NIC sent its last byte this instant)
        if q and q[-1][1]:
            q[-1][1] = False
            if len(q) == 1:             # in flight, or starting at the next rebuild (which reads the cap)
                self.conn_cap[c] = self.route_cap[c]
                if self.f_on[c]:
                    self.recapped.append(c)
                    self.rates_dirty = True
        self.flows_left[ti] -= 1
        if not self.flows_left[ti]:
            self.complete(ti)

    def sent_out(self, c: int):
        """The NIC has sent a network connection's first message: it arrives the route's and the network's
        latency later, and the next message in the buffer, if any, follows."""
        m = self.m
        q = self.nic_q[c]
        q.pop(0)
        self.push(self.now + m.conn_latency[c] + self.net_us, _ARRIVE, c)
        while q and q[0][0] <= 0:       # empty slices queued behind it: their flags follow at once
            q.pop(0)
            self.push(self.now + m.conn_latency[c] + self.net_us, _ARRIVE, c)
        if q:
            wire, writing = q[0]
            self.conn_cap[c] = self.tb_cap[m.conn_sender[c]] if writing else self.route_cap[c]
            self.pending.append((c, wire))

    def finish_step(self, ti):
        steps = self.m.steps[ti]
        p = self.pc[ti]
        self.k[ti] = 0
        if steps[p][6]:
            self.published[ti] = self.it[ti] * BIG + steps[p][7]
            waiting, self.waiters[ti] = self.waiters[ti], []
            for w in waiting:
                self.wake(w)
        if p + 1 < len(steps):
            self.pc[ti] = p + 1
            if ti == self.ref and self.extrapolate_steps and self.run_end[ti][p + 1] - (p + 1) > 1:
                self.step_snap_due = True
            return
        self.pc[ti] = 0
        self.it[ti] += 1
        if self.it[ti] >= self.npass:
            self.done[ti] = True
            if ti == self.ref and self.extrapolate:      # follow a threadblock that is still running
                left = [x for x in range(len(self.done)) if not self.done[x]]
                if left:
                    self.ref = max(left, key=lambda x: (len(self.m.steps[x]), -x))
                    self.snapshots.clear()
            return
        if ti == self.ref and self.extrapolate:
            self.snap_due = True

    # --- flows ---------------------------------------------------------------------------------------
    def rebuild(self, gone=()):
        """Drop the finished flows (connections ``gone``), add the pending ones, and bring the rates up to date.

        Max-min fairness splits over the components of the machine's flow-link graph (connections joined
        when their routes share a link, :func:`_components`): a component's rates depend on its own flows
        alone, so only the components a change touches are recomputed. A component that is one link (every
        connection in it crosses that link only) is filled by itself (:func:`_fill_one`), and not at all when
        its last fill left every flow at its cap and the caps of the flows it holds now still fit it: every
        flow keeps its cap (a new one starts at it), which is what the fill would give (93 % of the fills of
        NCCL's tree allreduce on 8 x dgx-a100 at 1 GB). In a larger one the
        allocation is recomputed only when it can change: a finished flow none of whose links is full was no
        flow's bottleneck (a bottleneck link is full), so the others keep their rates; a new flow whose every
        link has room for its whole cap takes its cap and is nobody's bottleneck, so the others keep theirs
        (the allocation stays max-min fair: every old flow keeps its full bottleneck link or its cap).
        Anything else is recomputed from scratch for that component.
        """
        m = self.m
        cap, load = m.link_cap, self.load
        rate, fin = self.f_rate, self.f_fin
        one, comp, on_link = self.one_link, self.comp, self.on_link
        capw = self.one_capw
        touched: set = set()                    # one-link components whose flows changed
        redo: set = set()                       # larger components to recompute
        wide = False                            # a flow of a larger one started or ended
        if len(gone):
            full = None
            for c in gone:
                li = one[c]
                if li >= 0:
                    c_cap, w = on_link[li].pop(c)
                    capw[li] = capw[li] - c_cap * w if on_link[li] else 0.0
                    touched.add(li)
                    continue
                wide = True
                if comp[c] not in redo:
                    links = m.conn_links[c]
                    if full is None:
                        full = cap - load <= cap * 1e-9
                    if full[links].any():
                        redo.add(comp[c])
                    else:
                        np.subtract.at(load, links, rate[c] * m.conn_weight[c])
            f_on = self.f_on
            for c in gone:
                f_on[c] = False
                rate[c] = 0.0
                fin[c] = math.inf
            self.nflows -= len(gone)
        if self.pending:
            new = self.pending
            self.pending = []
            now = self.now
            for c, wire in new:
                c_cap = float(self.conn_cap[c])
                li = one[c]
                if li >= 0:
                    w = float(m.conn_weight[c][0])
                    on_link[li][c] = (c_cap, w)
                    capw[li] += c_cap * w
                    touched.add(li)
                else:
                    wide = True
                    if comp[c] not in redo:
                        links, w = m.conn_links[c], m.conn_weight[c]
                        if (cap[links] - load[links] >= c_cap * w * (1 + 1e-9)).all():
                            np.add.at(load, links, c_cap * w)
                        else:
                            redo.add(comp[c])
                self.f_on[c] = True
                rate[c] = c_cap
                fin[c] = now + wire / c_cap
                if li >= 0:
                    heapq.heappush(self.fin_heap, (float(fin[c]), c))
            self.nflows += len(new)
        now = self.now
        tight = self.one_tight
        for li in touched:
            # every flow at its cap (a new one starts at it) and room for all of them: the fill would change no
            # rate (by a margin far above the rounding of the sum)
            if not tight[li] and capw[li] <= cap[li] * (1 - 1e-9):
                load[li] = capw[li]
                continue
            load[li], tight[li] = _fill_one(on_link[li], float(cap[li]), rate, fin, now, self.fin_heap)
        if redo:
            self._reallocate(redo)
        if self.timeline:
            self.link_load = self.load / cap
        if wide:
            self.wide_min = float(fin[self.wide_idx].min())
        self._next_finish()
        self.rates_dirty = False

    def _recap(self, gone) -> list:
        """The flows whose cap changed (:meth:`copied`) end here and start again with what they have left, at
        their new cap; with the flows that ended (``gone``), the connections :meth:`rebuild` drops."""
        now, rate, fin = self.now, self.f_rate, self.f_fin
        ended = set(gone)
        out = list(gone)
        for c in self.recapped:
            if c in ended or not self.f_on[c]:
                continue
            ended.add(c)
            out.append(c)
            self.pending.append((c, float(rate[c] * (fin[c] - now))))
        self.recapped = []
        return sorted(out)

    def _reallocate(self, comps: set):
        """Max-min fair rates for every flow in flight in the components ``comps``, from scratch; each keeps
        its remaining bytes. The components share no link with the others, whose rates stay. Only the
        components' own connections, entries and links are read, in index order (the same sums, in the same
        order, as over the whole machine)."""
        m, now = self.m, self.now
        cap = m.link_cap
        ks = sorted(comps)
        if len(ks) == 1:
            conns, ents, links = self.comp_conns[ks[0]], self.comp_entries[ks[0]], self.comp_links[ks[0]]
        else:
            conns, ents, links = (np.sort(np.concatenate([part[k] for k in ks]))
                                  for part in (self.comp_conns, self.comp_entries, self.comp_links))
        self.load[links] = 0.0
        act = conns[self.f_on[conns]]
        n = len(act)
        if n == 0:
            return
        rate, fin = self.f_rate, self.f_fin
        rem = rate[act] * (fin[act] - now)
        ents = ents[self.f_on[self.e_conn[ents]]]
        idx = self.e_link[ents]
        own = np.searchsorted(act, self.e_conn[ents])
        w = self.e_w[ents]
        new_rate = _max_min(idx, own, n, cap, self.conn_cap[act], w)
        rate[act] = new_rate
        fin[act] = now + rem / new_rate
        self.load[links] = np.bincount(idx, weights=new_rate[own] * w, minlength=len(cap))[links]

    def _finished(self, t: float) -> list:
        """The flows done at ``t`` (in connection order): a flow is done when what it has left is within a
        nanosecond's worth (and a byte's billionth). One-link flows from the finish heap (an entry whose flow
        has ended or whose finish has moved since is stale and dropped); the others, whose finishes move
        together at every reallocation, by comparing them all."""
        heap, on, fin, rate = self.fin_heap, self.f_on, self.f_fin, self.f_rate
        gone, later = set(), []
        if self.wide_min <= t + FINISH_GATE:
            idx = self.wide_idx
            near = idx[fin[idx] <= t + FINISH_GATE]             # flows not in flight end at inf
            r = rate[near]
            gone.update(near[(fin[near] - t) * r <= r * TIME_EPS + 1e-9].tolist())
        while heap and heap[0][0] <= t + FINISH_GATE:
            f, c = heapq.heappop(heap)
            if not on[c] or fin[c] != f or c in gone:
                continue
            r = rate[c]
            if (f - t) * r <= r * TIME_EPS + 1e-9:
                gone.add(c)
            else:
                later.append((f, c))
        for e in later:
            heapq.heappush(heap, e)
        return sorted(gone)

    def _next_finish(self):
        """``t_min``: the earliest finish of a flow in flight (stale heap entries dropped on the way)."""
        heap, on, fin = self.fin_heap, self.f_on, self.f_fin
        while heap and (not on[heap[0][1]] or fin[heap[0][1]] != heap[0][0]):
            heapq.heappop(heap)
        self.t_min = min(heap[0][0], self.wide_min) if heap else self.wide_min

    def _link_bytes(self) -> np.ndarray:
        """The wire bytes each link carried: its connections' bytes, each counted as many times as it crosses
        the link (``conn_weight``: the flows of its class)."""
        if not len(self.e_link):
            return np.zeros(len(self.m.links))
        per = np.asarray(self.conn_bytes)[self.e_conn] * self.e_w
        return np.bincount(self.e_link, weights=per, minlength=len(self.m.links)).astype(float)

    def advance_flows(self, t):
        """The timeline's link lanes up to ``t`` (the flows themselves need no update: see ``f_fin``)."""
        if self.nflows and self.timeline and t > self.now:
            for li in np.nonzero(self.link_load > 1e-12)[0]:
                kind = "full" if self.link_load[li] >= 0.99 else "partial"
                self.record(self.link_iv[li], self.now, t, kind)

    def record(self, lane, a, b, kind):
        if self.iv_count >= MAX_TIMELINE_INTERVALS:
            self.truncated = True
            return
        self.drawn_us = b if self.drawn_us is None else max(self.drawn_us, b)     # the latest end recorded
        if lane and lane[-1][2] == kind and abs(lane[-1][1] - a) <= TIME_EPS:
            lane[-1] = (lane[-1][0], b, kind)
            return
        lane.append((a, b, kind))
        self.iv_count += 1

    # --- main loop -----------------------------------------------------------------------------------
    def go(self) -> RunResult:
        m = self.m
        for ti in range(len(m.tbs)):
            self.wake(ti)
        while True:
            t_heap = self.heap[0][0] if self.heap else math.inf
            t = min(t_heap, self.t_min)
            if t == math.inf:
                break
            if t + self.model.launch_us > self.deadline:
                # something still happens at t, so the call ends no sooner (the sum as the result's below)
                return RunResult(t + self.model.launch_us, self.npass, m.link_bytes(self._link_bytes()),
                                 self.jumped, self.events, extrapolated_steps=self.steps_jumped, cut=True)
            self.advance_flows(t)
            self.now = t
            self.events += 1
            gone = ()
            if self.t_min <= t + FINISH_GATE:
                gone = self._finished(t)
                if gone:
                    self.rates_dirty = True
                    for c in gone:
                        if self.net[c]:
                            self.sent_out(c)
                            continue
                        ti = m.conn_sender[c]
                        self.flows_left[ti] -= 1
                        if not self.flows_left[ti]:
                            self.complete(ti)
            while self.heap and self.heap[0][0] <= t + TIME_EPS:
                _, _, what, arg = heapq.heappop(self.heap)
                if what == _START:
                    self.start(arg)
                elif what == _LOCAL_DONE:
                    self.complete(arg)
                elif what == _COPIED:
                    self.copied(*arg)
                else:
                    self.arrived[arg] += 1
                    self.wake(m.conn_receiver[arg])
            if self.rates_dirty:
                if self.recapped:
                    gone = self._recap(gone)
                self.rebuild(gone)
            if self.snap_due:
                self.snap_due = False
                self.snapshot()
            if self.step_snap_due:
                self.step_snap_due = False
                self.step_snapshot()
        stuck = [ti for ti in range(len(m.tbs)) if not self.done[ti]]
        if stuck:
            ti = stuck[0]
            gid, tid, _ = m.tbs[ti]
            nstuck = int(sum(m.tb_size[x] for x in stuck)) if hasattr(m, "tb_size") else len(stuck)
            raise CollsError(f"the program hangs for calls of this size: gpu {gid} tb {tid} never gets past "
                             f"step {self.pc[ti]} of pass {self.it[ti] + 1} ({nstuck} threadblocks stuck; "
                             "colls verify explains why)")
        res = RunResult(self.now + self.model.launch_us, self.npass, m.link_bytes(self._link_bytes()), self.jumped,
                        self.events, extrapolated_steps=self.steps_jumped)
        if self.timeline:
            res.tb_lanes = [(ti, iv) for ti, iv in enumerate(self.tb_iv) if iv]
            res.link_lanes = [(li, iv) for li, iv in enumerate(self.link_iv) if iv]
            res.truncated, res.drawn_us = self.truncated, self.drawn_us if self.truncated else None
        return res

    # --- steady state --------------------------------------------------------------------------------
    def snapshot(self):
        # a timeline records every pass until it holds MAX_TIMELINE_INTERVALS; the rest of the call is only timed
        if (self.timeline and not self.truncated) or self.jumped:
            return
        base = self.it[self.ref]
        if base >= self.nfull:
            return
        now = self.now
        # a finished threadblock is the same at every pass (its last flag stays up)
        key = (
            self.ref,
            tuple(None if dn else (i - base, p, k, b) for i, p, k, b, dn
                  in zip(self.it, self.pc, self.k, self.busy, self.done)),
            tuple(None if dn else (p - base * BIG if p >= 0 else -1) for p, dn in zip(self.published, self.done)),
        ) + self._in_flight()
        seen = self.snapshots.get(key)
        if seen is None:
            self.snapshots[key] = (base, now, list(self.conn_bytes))
            return
        j, tj, bytes_j = seen
        d, period = base - j, now - tj
        # the threadblock furthest ahead now: in the state recorded ``d`` passes ago it was as far ahead, and
        # every threadblock moves on by exactly ``d`` passes a period, so none gets further in between
        ahead = max(i for i, dn in zip(self.it, self.done) if not dn) - base
        jumps = (self.nfull - 1 - ahead - base - d) // d
        if jumps < 1:
            return
        shift = jumps * d
        self.jumped = shift
        self._skip(jumps, period, bytes_j)
        self.it = [i + shift if not dn else i for i, dn in zip(self.it, self.done)]
        self.published = [p + shift * BIG if p >= 0 and not dn else p for p, dn in zip(self.published, self.done)]
        self.snapshots.clear()

    def _in_flight(self) -> tuple:
        """The part of a recorded state that is relative by nature: messages in each connection, the flows'
        times to their ends, the pending events' times from now."""
        now = self.now
        return (tuple(s - c for s, c in zip(self.sent, self.consumed)),
                tuple(a - c for a, c in zip(self.arrived, self.consumed)),
                tuple(tuple((round(w, 6), writing) for w, writing in q) for q in self.nic_q.values()),
                self._flows_left_in_time(),
                tuple(sorted((round(t - now, 9), what, arg) for t, _, what, arg in self.heap)))

    def _flows_left_in_time(self) -> tuple:
        """The flows in flight as (sending threadblock, microseconds to its end at today's rate), rounded like
        the events; with the set of flows they fix the remaining bytes (the rates are the set's max-min)."""
        act = np.flatnonzero(self.f_on)
        # a network connection's flow by its connection too: its sender may have moved on to other peers
        which = [c if self.net[c] else -1 for c in act.tolist()]
        return tuple(sorted(zip(self.conn_ti[act].tolist(), which, np.round(self.f_fin[act] - self.now, 9).tolist())))

    def _skip(self, jumps: int, period: float, bytes_then: list):
        """Move the clock ``jumps`` periods ahead, and the connections' bytes by as many times their growth
        since the earlier record (``bytes_then``)."""
        self.now += jumps * period
        self.heap = [(t + jumps * period, s, w, a) for t, s, w, a in self.heap]
        heapq.heapify(self.heap)
        self.f_fin[self.f_on] += jumps * period
        act = np.flatnonzero(self.f_on & self.one_arr)
        self.fin_heap = list(zip(self.f_fin[act].tolist(), act.tolist()))
        heapq.heapify(self.fin_heap)
        if len(self.wide_idx):
            self.wide_min = float(self.f_fin[self.wide_idx].min())
        self._next_finish()
        self.act_start = [a + jumps * period for a in self.act_start]
        self.conn_bytes = [b + jumps * (b - b0) for b, b0 in zip(self.conn_bytes, bytes_then)]

    def step_snapshot(self):
        """The steady state inside a pass. When the reference threadblock starts a step inside a run of alike
        steps, record the state relative to it (every threadblock's pass and step offsets, connection
        counts, flows, pending events, published flags as they are); when it recurs ``d`` steps and ``P``
        microseconds later with every running threadblock inside a run of alike steps that spans both
        records, the next ``J`` periods repeat it exactly (the same steps, the same messages, the same
        decisions), so every running threadblock moves ``J x d`` steps ahead and the clock ``J x P``, for
        the largest ``J`` that keeps each of them inside its run. Alike steps: the same kind, chunks and
        waits, publishing nothing (:func:`_run_ends`)."""
        ref = self.ref
        pr, ir = self.pc[ref], self.it[ref]
        now = self.now
        key = (
            tuple(None if dn else (i - ir, p - pr, k, b) for i, p, k, b, dn
                  in zip(self.it, self.pc, self.k, self.busy, self.done)),
            tuple(self.published),
        ) + self._in_flight()
        seen = self.step_snaps.get(key)
        if seen is None:
            self.step_snaps[key] = (pr, ir, now, list(self.conn_bytes))
            return
        p0, i0, t0, bytes0 = seen
        d, period = pr - p0, now - t0
        if i0 != ir or d <= 0:
            self.step_snaps.clear()
            return
        jumps = None
        for ti, (p, dn) in enumerate(zip(self.pc, self.done)):
            if dn:
                continue
            start = p - d
            if start < 0 or self.run_end[ti][start] <= p:       # the period did not stay in one run
                self.step_snaps.clear()
                return
            room = (self.run_end[ti][p] - 1 - p) // d             # the step after the jump is still alike
            jumps = room if jumps is None else min(jumps, room)
        self.step_snaps.clear()
        if not jumps or jumps < 1:
            return
        shift = jumps * d
        self._skip(jumps, period, bytes0)
        self.pc = [p + shift if not dn else p for p, dn in zip(self.pc, self.done)]
        self.steps_jumped += shift


def _peers(peer) -> tuple:
    """A threadblock's send or receive peers: one GPU (-1 or None: none), or several (a native NCCL group that
    sends to or receives from all its tree children at once)."""
    if isinstance(peer, (tuple, list)):
        return tuple(peer)
    return (peer,) if peer is not None and peer >= 0 else ()


def _run_ends(steps_of: list) -> list:
    """For each threadblock and step, where the run of alike steps it is in ends (exclusive): alike steps
    have the same kind, chunk count, wait and publish nothing (so their number in the kernel matters to
    nobody)."""
    def ends_of(steps):
        ends, end = [0] * len(steps), len(steps)
        for i in range(len(steps) - 1, -1, -1):
            s = steps[i]
            if i + 1 < len(steps):
                t = steps[i + 1]
                if s[6] or t[6] or s[:6] != t[:6] or s[8] != t[8]:
                    end = i + 1
            ends[i] = end
        return ends
    return per_list(steps_of, ends_of)


def _max_min(idx: np.ndarray, own: np.ndarray, n: int, link_cap: np.ndarray, fcap: np.ndarray,
             weight: np.ndarray | None = None) -> np.ndarray:
    """Max-min fair rates of ``n`` flows; flow ``own[e]`` crosses link ``idx[e]`` (entries grouped by flow,
    every flow with at least one link); flow f never exceeds ``fcap[f]``. ``weight[e]`` (default 1): how many
    flows like ``own[e]`` cross the link (a flow standing for a class of alike ones, see symmetry).

    Water-filling, many bottlenecks per round: a link whose fair share (what is left of it over its
    unfrozen flows) is no more than any constraint of any of its flows is a bottleneck, and its flows get
    exactly that share, because shares only grow as other flows freeze below them; likewise a flow whose
    cap is below every share it sees gets its cap. The tightest link is always such a bottleneck, so every
    round freezes something, and independent bottlenecks (each NIC of a cluster) freeze in the same round.
    The result is the allocation progressive filling gives (Bertsekas and Gallager, "Data Networks", 6.5.2).
    """
    L = len(link_cap)
    cap = fcap.astype(float)
    w = np.ones(len(idx)) if weight is None else weight.astype(float)
    # a link that would carry every one of its flows at its cap is no constraint: the allocation without it
    # fits it, so it is the allocation with it; flows that cross only such links get their caps
    tight = np.bincount(idx, weights=cap[own] * w, minlength=L) > link_cap * (1 + 1e-12)
    e_tight = tight[idx]
    if not e_tight.all():
        rate = cap.copy()
        constrained = np.zeros(n, dtype=bool)
        constrained[own[e_tight]] = True
        if not constrained.any():
            return rate
        sub = np.flatnonzero(constrained)
        renum = np.cumsum(constrained) - 1
        rate[sub] = _max_min(idx[e_tight], renum[own[e_tight]], len(sub), link_cap, cap[sub], w[e_tight])
        return rate
    rate = np.zeros(n)
    rem = link_cap.astype(float)
    flows = np.arange(n)
    while len(flows):
        cnt = np.bincount(idx, weights=w, minlength=L)
        used = cnt > 0
        share = np.full(L, np.inf)
        share[used] = rem[used] / cnt[used]
        e_share = share[idx]
        per_flow = np.bincount(own, minlength=len(flows))
        starts = np.cumsum(per_flow) - per_flow
        fmin = np.minimum(np.minimum.reduceat(e_share, starts), cap)
        linkmin = np.full(L, np.inf)
        np.minimum.at(linkmin, idx, fmin[own])
        on = (share <= linkmin * (1 + 1e-12))[idx]
        got = np.where(cap <= fmin * (1 + 1e-12), cap, np.inf)
        np.minimum.at(got, own[on], e_share[on])
        newly = got < np.inf
        rate[flows[newly]] = got[newly]
        e_new = newly[own]
        rem = rem - np.bincount(idx[e_new], weights=got[own[e_new]] * w[e_new], minlength=L)
        keep = ~newly
        renum = np.cumsum(keep) - 1
        e_keep = ~e_new
        idx, own, w = idx[e_keep], renum[own[e_keep]], w[e_keep]
        flows, cap = flows[keep], cap[keep]
    return rate


def _component_members(m, e_conn: np.ndarray) -> tuple:
    """For each component of :func:`_components`: its connections, its entries (a connection's links, as laid
    out in ``e_conn``) and its links (those some connection crosses), each in index order. Computed once per
    machine."""
    if "_component_members" not in m.__dict__:
        comp, link_comp, _ = _components(m)
        comp = np.array(comp, dtype=np.int64)
        ncomp = int(comp.max()) + 1 if len(comp) else 0

        def split(owner: np.ndarray) -> list:      # the indices of each component, -1 (none) left out
            at = np.flatnonzero(owner >= 0)
            at = at[np.argsort(owner[at], kind="stable")]
            return np.split(at, np.cumsum(np.bincount(owner[at], minlength=ncomp))[:-1]) if ncomp else []
        m._component_members = (split(comp), split(comp[e_conn]), split(link_comp))
    return m._component_members


def _components(m) -> tuple[list[int], np.ndarray, list[int]]:
    """The connected components of ``m``'s connections, joined when their routes share a link: each
    connection's component, each link's (-1: crossed by none), and for each connection the one link of its
    component when every connection of that component crosses that link alone (else -1). Computed once per
    machine (every call size simulated on it shares them)."""
    if "_components" not in m.__dict__:
        m._components = _components_now(m)
    return m._components


def _components_now(m) -> tuple[list[int], np.ndarray, list[int]]:
    L = len(m.links)
    parent = list(range(L))

    def root(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for links in m.conn_links:
        ls = links.tolist()
        for x in ls[1:]:
            a, b = root(ls[0]), root(x)
            if a != b:
                parent[max(a, b)] = min(a, b)
    used = sorted({li for links in m.conn_links for li in links.tolist()})
    number: dict = {}
    for li in used:
        number.setdefault(root(li), len(number))
    link_comp = np.full(L, -1, dtype=np.int64)
    for li in used:
        link_comp[li] = number[root(li)]
    comp = [int(link_comp[links[0]]) for links in m.conn_links]
    wide = {comp[c] for c, links in enumerate(m.conn_links) if len(links) > 1}
    one = [-1 if comp[c] in wide else int(links[0]) for c, links in enumerate(m.conn_links)]
    return comp, link_comp, one


def _fill_one(flows: dict, link_cap: float, rate: np.ndarray, fin: np.ndarray, now: float,
              heap: list | None = None) -> float:
    """Max-min fair rates of the flows in flight on one link that no flow shares with another link
    (``flows``: connection -> (cap, flows it stands for)), by water-filling in the order of their caps; each
    flow keeps its remaining bytes (``rate x (fin - now)``); a finish that moves is pushed on ``heap``.
    Returns the link's load, and whether a flow is left below its cap."""
    if not flows:
        return 0.0, False
    left, weight = link_cap, sum(w for _, w in flows.values())
    level = math.inf
    for c_cap, w in sorted(flows.values()):
        if c_cap * weight <= left:
            left -= c_cap * w
            weight -= w
        else:
            level = left / weight
            break
    load = 0.0
    for c, (c_cap, w) in flows.items():
        r = c_cap if c_cap <= level else level
        old = rate[c]
        if r != old:
            fin[c] = f = float(now + old * (fin[c] - now) / r)      # a Python float, like every time
            rate[c] = r
            if heap is not None:
                heapq.heappush(heap, (f, c))
        load += r * w
    return load, level < math.inf
