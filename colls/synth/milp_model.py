"""The routing-and-scheduling model of the ``milp`` method: problem data, a greedy start, the CP-SAT model.

A :class:`Problem` is what one solve needs, independent of the collective's buffers: the ranks, the
*connections* (GPU pairs the sketch allows, each with its alpha-beta cost and the physical links its
route crosses), the chunks (a source and the ranks that must receive it), each chunk's candidate
connections, the relay rule (``senders_of``), ``own_chunks_first`` and the symmetry group.
:func:`solve` builds the CP-SAT model of :mod:`colls.synth.milp` (see its docstring for the
formulation), solves it and returns a :class:`Solution`: every chosen transfer with its start and
arrival time. Times are integers in units of ``Problem.unit_us`` microseconds.

A problem is stated in its *world*: for allgather, alltoall and broadcast the real machine; for a
reduce-scatter the reversed one (a connection ``(u, v)`` of the problem is the real transfer ``v -> u``,
see :func:`colls.synth.milp.synthesize`), so one model serves both directions.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from itertools import starmap

from colls.errors import CollsError

# CP-SAT statuses by name (ortools.sat.python.cp_model: OPTIMAL 4, FEASIBLE 2, INFEASIBLE 3, UNKNOWN 0,
# MODEL_INVALID 1)
_OPTIMAL, _FEASIBLE, _INFEASIBLE = 4, 2, 3


@dataclass(frozen=True)
class Connection:
    """One GPU pair the schedule may use: ``alpha`` (latency) and ``beta`` (occupancy of each link on
    its route, the chunk's bytes over the route's bandwidth) in time units, ``links`` the physical
    links it holds, ``inter`` whether it crosses nodes, ``sender`` the local index of the GPU that
    sends in the real machine (relay rules are stated for it)."""

    alpha: int
    beta: int
    links: tuple
    inter: bool
    sender: int
    busy: int = 0          # how long a transfer holds a threadblock of the pair (0: not modelled)
    # how long a transfer holds a message of the pair's FIFO, from its start until the receiver has freed the
    # slot the transfer after next waits for (its first slice's); 0: until it is received (alpha + beta)
    hold: int = 0

    @property
    def held(self) -> int:
        return self.hold or self.alpha + self.beta


@dataclass(frozen=True)
class Chunk:
    """A chunk to move: from ``src`` to every rank of ``dests`` (one, for alltoall). ``owner`` is the
    local index the relay rule ``senders_of`` is looked up with."""

    src: int
    dests: frozenset
    owner: int


@dataclass
class Problem:
    nranks: int
    gpus_per_node: int
    conns: dict                      # (u, v) -> Connection
    chunks: list                     # Chunk
    multicast: bool                  # every rank but the source receives (allgather, broadcast)
    senders_of: tuple | None         # local GPU -> allowed senders (None: any)
    own_chunks_first: bool
    group: list = field(default_factory=list)   # rank permutations (the identity first)
    chunk_maps: dict = field(default_factory=dict)  # element of ``group`` -> its chunk map (:func:`closure`)
    switch_pairs: frozenset = frozenset()       # connections inside a sketch switch list
    switch_strategy: str | None = None          # "uc-min" | "uc-max" | None
    link_strategy: str | None = None            # "minmax" | "maxmin" | None
    any_path: bool = False                      # multicast over every connection, not shortest paths
    # time units apart that one rank's transfers of one chunk must start: a reduction solved on the reversed
    # machine, whose transfers out of a rank are, in real time, the partial sums it adds one after another
    fan: int = 0
    # threadblocks a GPU pair's transfers share (the lowering's lanes): at most this many of its transfers hold
    # one at a time, each for its connection's ``busy`` (0: not modelled)
    pair_lanes: int = 0
    # the most transfers a GPU pair's lane holds before the lowering spreads them over more lanes (milp's
    # LANE_OPS): while no pair can carry more, its transfers from a chunk's source are on one lane and those a
    # relay forwards on the other (the hop's parity, milp._lanes), one threadblock each, so each class holds one
    # at a time (0: the pair's pair_lanes threadblocks, any transfer on any)
    lane_ops: int = 0
    # messages a connection holds (the runtime's FIFO): a transfer on a lane starts only while fewer than this many
    # of the lane's transfers are in flight, from their start until the receiver has them (0: not modelled)
    fifo: int = 0
    unit_us: float = 1.0
    notes: list = field(default_factory=list)
    # (chunk owner, relay) -> each rank's next ranks over the connections allowed to such a chunk, in the
    # connections' order: the same for every chunk of one owner, so made once (:meth:`_out`)
    _outs: dict = field(default_factory=dict, repr=False, compare=False)

    def node(self, rank: int) -> int:
        return rank // self.gpus_per_node

    # --- candidates -----------------------------------------------------------------------------------
    def allowed(self, chunk: Chunk, u: int, v: int, relay: bool = True) -> bool:
        conn = self.conns[u, v]
        if relay and conn.inter and self.senders_of is not None:
            return conn.sender in self.senders_of[chunk.owner]
        return True

    def _out(self, chunk: Chunk, relay: bool) -> dict:
        """Each rank's next ranks over the connections :meth:`allowed` for ``chunk`` (they depend on its
        owner only)."""
        key = (chunk.owner, relay)
        if key not in self._outs:
            out = defaultdict(list)
            for (u, v) in self.conns:
                if self.allowed(chunk, u, v, relay):
                    out[u].append(v)
            self._outs[key] = out
        return self._outs[key]

    def candidates(self, chunk: Chunk, relay: bool = True) -> list:
        """The connections on hop-shortest paths from the chunk's source to its destinations (TACCL's
        shortest-path sets; every connection with ``any_path``), in a deterministic order; [] if a
        destination cannot be reached."""
        out = self._out(chunk, relay)
        dist = _bfs(out, chunk.src)
        if any(d not in dist for d in chunk.dests):
            return []
        if self.multicast:
            return sorted((u, v) for u in dist for v in out[u]
                          if v != chunk.src and (self.any_path or dist[v] == dist[u] + 1))
        (dest,) = chunk.dests
        back = defaultdict(list)
        for u, vs in out.items():
            for v in vs:
                back[v].append(u)
        rest = _bfs(back, dest)
        need = dist[dest]
        return sorted((u, v) for u in dist for v in out[u]
                      if v in rest and dist[u] + 1 + rest[v] == need)

    def unreachable(self, relay: bool = True) -> tuple | None:
        """(chunk, a rank it cannot reach) for the first chunk some destination of which is cut off."""
        reached: dict = {}                 # (owner, source) -> the ranks such a chunk reaches
        for chunk in self.chunks:
            key = (chunk.owner, chunk.src)
            if key not in reached:
                reached[key] = _bfs(self._out(chunk, relay), chunk.src)
            dist = reached[key]
            for d in sorted(chunk.dests):
                if d not in dist:
                    return chunk, d
        return None


def _bfs(out: dict, src) -> dict:
    dist = {src: 0}
    frontier = [src]
    while frontier:
        nxt = []
        for u in frontier:
            for v in sorted(out.get(u, ())):
                if v not in dist:
                    dist[v] = dist[u] + 1
                    nxt.append(v)
        frontier = nxt
    return dist


@dataclass
class Solution:
    """A solved problem: ``sends`` are ``(chunk index, u, v, start, arrival)`` in time units."""

    sends: list
    makespan: int
    bound: int
    status: str               # "optimal" | "optimal to a step of N units" (OBJECTIVE_STEPS) | "gap limit" |
    #                           "time limit"
    seconds: float
    greedy: int               # the greedy start's makespan
    variables: int
    notes: list

    @property
    def gap(self) -> float:
        return 0.0 if self.makespan <= 0 else max(0.0, (self.makespan - self.bound) / self.makespan)


# --- symmetry -----------------------------------------------------------------------------------------
def chunk_map(problem: Problem, perm: list) -> dict | None:
    """Chunk index -> index of its image under the rank permutation ``perm``, or None when ``perm``
    does not map the chunk set, the connections (with their costs) and the relay rule onto
    themselves. Chunks with equal source and destinations (chunkup > 1) map in order."""
    same: dict = defaultdict(list)
    for i, c in enumerate(problem.chunks):
        same[c.src, c.dests].append(i)
    out = {}
    for key, idx in same.items():
        img = same.get((perm[key[0]], frozenset(perm[d] for d in key[1])), [])
        if len(img) != len(idx):
            return None
        out.update(zip(idx, img))
    for (u, v), conn in problem.conns.items():
        img = problem.conns.get((perm[u], perm[v]))
        if img is None or (img.alpha, img.beta, img.inter) != (conn.alpha, conn.beta, conn.inter):
            return None
    if problem.senders_of is not None:
        inter = [(u, v) for (u, v), conn in problem.conns.items() if conn.inter]
        checked = set()             # (owner, image's owner) pairs already found alike: allowed() reads only these
        for i, c in enumerate(problem.chunks):
            d = problem.chunks[out[i]]
            if (c.owner, d.owner) in checked:
                continue
            if any(problem.allowed(c, u, v) != problem.allowed(d, perm[u], perm[v]) for u, v in inter):
                return None
            checked.add((c.owner, d.owner))
    return out


def closure(perms: list, n: int, maps: list, count: int) -> tuple[list, dict]:
    """The group the permutations generate (the identity first), in a deterministic order, and each element's
    chunk map (:func:`chunk_map`) composed from ``maps``, those of ``perms`` (of ``count`` chunks): an element is
    a product of the permutations, each of which maps the chunks, the connections and the relay rule onto
    themselves (checked by :func:`chunk_map`), so the product does too, and its chunk map is the product of
    theirs (chunks alike map in order under each factor, so in order under the product). Checking every
    element instead costs chunks x destinations x elements."""
    ident = tuple(range(n))
    group = [ident]
    of = {ident: list(range(count))}
    frontier = [ident]
    while frontier:
        nxt = []
        for g in frontier:
            for p, mp in zip(perms, maps):
                h = tuple(p[g[r]] for r in range(n))
                if h not in of:
                    of[h] = [mp[i] for i in of[g]]
                    group.append(h)
                    nxt.append(h)
        frontier = nxt
    return group, of


# --- greedy start -------------------------------------------------------------------------------------
def greedy(problem: Problem, cands: dict, orbits: dict, shared_times: bool, parity: dict | None = None) -> dict:
    """A feasible schedule by list scheduling: repeatedly the candidate transfer that arrives first
    (after its links' last transfers), applied to the chunk's whole symmetry orbit at once. Returns
    {(chunk, u, v): start}. Links carry one transfer after another, so the schedule satisfies the model
    (except own_chunks_first, which the solver repairs from this start)."""
    conns = problem.conns
    free: dict = defaultdict(int)
    have: dict = {c: {problem.chunks[c].src: 0} for c in range(len(problem.chunks))}
    at: dict = {c: problem.chunks[c].src for c in orbits}     # unicast: where the chunk is now
    out_of: dict = {}
    for c in orbits:
        out = defaultdict(list)
        for (u, v) in cands[c]:
            out[u].append(v)
        out_of[c] = out
    chosen: dict = {}
    heap: list = []
    images: dict = {}       # (c, u, v) -> per orbit member (its arrivals, its u, its links): looked up once
    fanned: dict = defaultdict(int)   # (chunk, rank) -> when its next transfer of the chunk may start (fan)
    lanes: dict = {}                  # GPU pair (and class) -> when each of its threadblocks is free (pair_lanes)
    flight: dict = {}                 # GPU pair (and class) -> when each of its FIFO's messages is received (fifo)

    def lane(g, c, u, v):
        return ((g[u], g[v]), parity[c][u]) if parity is not None else (g[u], g[v])

    def earliest(arrived, gu, links, img, pair):
        """When a transfer from ``gu`` may start: its chunk there, the rank's transfer of it before ``fan``
        ago, a threadblock of the pair (the lane of its hop's parity, with ``parity``) free, a message of its FIFO
        received, and each of its links free."""
        t = max(arrived[gu], fanned[img, gu], lanes[pair][0] if pair in lanes else 0,
                flight[pair][0] if pair in flight else 0)
        for link in links:
            if free[link] > t:
                t = free[link]
        return t

    def begin(img, g, c, u, v):
        return earliest(have[img], g[u], conns[g[u], g[v]].links, img, lane(g, c, u, v))

    def ready(c, u, v):
        key = (c, u, v)
        members = images.get(key)
        if members is None:
            members = images[key] = [(have[img], g[u], conns[g[u], g[v]].links, img, lane(g, c, u, v))
                                     for g, img in orbits[c]]
        conn = conns[u, v]
        return max(starmap(earliest, members)) + conn.alpha + conn.beta

    def push(c, u):
        for v in out_of[c][u]:
            if v not in have[c]:
                heapq.heappush(heap, (ready(c, u, v), c, u, v))

    for c in orbits:
        push(c, problem.chunks[c].src)
    while heap:
        arrive, c, u, v = heapq.heappop(heap)
        if v in have[c] or (not problem.multicast and at[c] != u):
            continue
        now = ready(c, u, v)
        if now > arrive:
            heapq.heappush(heap, (now, c, u, v))
            continue
        conn = conns[u, v]
        for g, img in orbits[c]:
            start = now - conn.alpha - conn.beta if shared_times else begin(img, g, c, u, v)
            chosen[img, g[u], g[v]] = start
            have[img][g[v]] = start + conn.alpha + conn.beta
            fanned[img, g[u]] = start + problem.fan
            if problem.pair_lanes:      # on the pair's threadblock free first (each runs its transfers in turn)
                ends = lanes.setdefault(lane(g, c, u, v), [0] * (1 if parity is not None else problem.pair_lanes))
                heapq.heapreplace(ends, start + conns[g[u], g[v]].busy)
            if problem.pair_lanes and problem.fifo:     # and its FIFO's message received first
                held = flight.setdefault(lane(g, c, u, v), [0] * (problem.fifo * len(ends)))
                heapq.heapreplace(held, start + conn.held)
            for link in conns[g[u], g[v]].links:
                free[link] = max(free[link], start + conn.beta)
        at[c] = v
        if problem.multicast or v not in problem.chunks[c].dests:
            push(c, v)
    return chosen


# --- the CP-SAT model ---------------------------------------------------------------------------------
# The makespan is minimized in steps of 1/OBJECTIVE_STEPS of the greedy start's (a coarse variable K, T <= K *
# step; the times themselves stay in whole units). Minimizing T itself, CP-SAT's search lowers the incumbent one
# unit at a time on large machines: on 16 x DGX A100 (128 GPUs, makespans of ~150,000 units) it found 1,238
# schedules in compile's 2 deterministic seconds (63 s of wall time), each one unit (0.0006 %) better than the
# one before. In steps of 0.1 % the same budget reached a 19 % shorter makespan there (146,891 -> at most 119,320
# units), and compile's allgather, reducescatter and allreduce solves took 33, 11 and 40 s instead of 64, 37 and
# 101, their files no slower at 4 KB, 64 KB and 1 MB (1-4 % faster at 1 MB). Steps of 0.5 %: 19 s, 125,100
# units; 0.02 %: 50 s, 115,400. A model whose greedy makespan is under OBJECTIVE_STEPS units keeps one-unit steps,
# but few do: 2-node models take steps of 10 to 43 units. There the steps cost: synth's alltoall on 2 x DGX A100
# (10 deterministic seconds) took 7.2 -> 16.4 s for the same schedule, 4 x NDv2's reducescatter 45.9 -> 56.3 s,
# and 2 x MI250's reducescatter came out as another schedule of the same makespan, slower at 4 KB (35.9 -> 43.1 us).
OBJECTIVE_STEPS = 1000


@dataclass
class Settings:
    time_limit: float = 60.0
    gap: float = 0.0
    seed: int = 0
    threads: int = 1
    relay: bool = True           # the sketch's senders_of rule
    ordering: bool = True        # own_chunks_first
    symmetry: bool = True


def solve(problem: Problem, settings: Settings) -> Solution:
    """Build and solve the model; CollsError when it has no solution (naming the constraint family)
    or when the time limit ran out before any."""
    from ortools.sat.python import cp_model

    t0 = time.perf_counter()
    cut = problem.unreachable(relay=settings.relay)
    if cut is not None:
        raise _unreachable_error(problem, settings, *cut)
    conns = problem.conns
    group = problem.group if settings.symmetry else problem.group[:1]
    orbits, origin = _orbits(problem, group)
    cands = {}
    for c, members in orbits.items():
        cands[c] = problem.candidates(problem.chunks[c], settings.relay)
        for g, img in members[1:]:
            cands[img] = sorted((g[u], g[v]) for (u, v) in cands[c])
    shared = len(group) > 1 and _shares_times(problem, group, cands)
    notes = list(problem.notes)
    if len(group) > 1:
        notes.append(f"symmetry: {len(group)} symmetric copies of every decision"
                     + (" (routes and times)" if shared else
                        " share their routes (not their times: their transfers would share links)"))
    # one lane per class of a pair's transfers (Problem.lane_ops) while no pair carries more than a lane holds:
    # where its candidates could, the pairs are held to a lane's transfers (``capped``), when the greedy start
    # shows that some schedule keeps them there (else any two of a pair's transfers at once, as the lowering's
    # extra lanes may run them)
    carried: dict = defaultdict(int)
    for members in cands.values():
        for (u, v) in members:
            carried[frozenset((u, v))] += 1
    classes = bool(problem.pair_lanes and problem.lane_ops and not problem.any_path)
    parity = _hop_parity(problem, cands) if classes else None
    hint = greedy(problem, cands, orbits, shared, parity)
    capped = classes and max(carried.values(), default=0) > problem.lane_ops
    if capped and max(Counter(frozenset((u, v)) for (_, u, v) in hint).values()) > problem.lane_ops:
        classes = capped = False
        parity = None
        hint = greedy(problem, cands, orbits, shared, parity)
    greedy_makespan = max(s + conns[u, v].alpha + conns[u, v].beta for (c, u, v), s in hint.items())
    ordering = problem.own_chunks_first and settings.ordering
    horizon = greedy_makespan if not ordering else \
        sum(conns[e].alpha + conns[e].beta for es in cands.values() for e in es) + 1

    m = cp_model.CpModel()
    T = m.new_int_var(0, horizon, "T")
    x: dict = {}
    start: dict = {}
    arrive: dict = {}
    by_link: dict = defaultdict(list)
    load: dict = defaultdict(list)
    for c, members in orbits.items():
        for (u, v) in cands[c]:
            lit = m.new_bool_var(f"x{c}_{u}_{v}")
            own = m.new_int_var(0, horizon, f"s{c}_{u}_{v}")
            for g, img in members:
                key = (img, g[u], g[v])
                x[key] = lit
                start[key] = own if shared or img == c else m.new_int_var(0, horizon, f"s{key}")
    # Symmetric copies share their variables (above), so a copy's interval is the same (start, size, literal)
    # as its representative's: one interval each, used on every link the copies cross (a second use on one
    # link gets an interval of its own, as before: two equal transfers on a link cannot overlap). On a machine
    # of many alike GPUs this keeps the model the size of its distinct parts instead of leaving CP-SAT's
    # presolve to find the copies (tens of thousands of duplicate constraints at 128 ranks).
    made: dict = {}
    placed: set = set()          # (link, interval signature) whose shared interval is on that link
    for key, s in start.items():
        c, u, v = key
        conn = conns[u, v]
        sig = (s.index, x[key].index, conn.beta)
        if sig not in made:
            made[sig] = m.new_optional_fixed_size_interval_var(s, conn.beta, x[key], f"i{key}")
        for link in conn.links:
            if (link, sig) in placed:
                by_link[link].append(m.new_optional_fixed_size_interval_var(s, conn.beta, x[key], f"i{key}{link}"))
            else:
                placed.add((link, sig))
                by_link[link].append(made[sig])
            load[link].append((conn.beta, x[key]))
    for c in range(len(problem.chunks)):
        ch = problem.chunks[c]
        rep, g = origin[c]
        back = _inverse(g) if shared and rep != c else None
        for w in sorted({ch.src} | {w for e in cands[c] for w in e}):
            if w == ch.src:
                arrive[c, w] = 0
            elif back is not None:
                arrive[c, w] = arrive[rep, back[w]]
            else:
                arrive[c, w] = m.new_int_var(0, horizon, f"a{c}_{w}")
    for c in (orbits if shared else range(len(problem.chunks))):
        ch = problem.chunks[c]
        into, outof = defaultdict(list), defaultdict(list)
        for (u, v) in cands[c]:
            into[v].append(x[c, u, v])
            outof[u].append(x[c, u, v])
        if not problem.multicast:
            m.add(sum(outof[ch.src]) == 1)
        for w in sorted((set(into) | set(outof)) - {ch.src}):
            if problem.multicast or w in ch.dests:
                m.add(sum(into[w]) == 1)
            else:
                m.add(sum(into[w]) == sum(outof[w]))
        for (u, v) in cands[c]:
            key = (c, u, v)
            conn = conns[u, v]
            if u != ch.src:
                m.add(start[key] >= arrive[c, u]).only_enforce_if(x[key])
            m.add(arrive[c, v] == start[key] + conn.alpha + conn.beta).only_enforce_if(x[key])
        for d in sorted(ch.dests):
            m.add(T >= arrive[c, d])
    if ordering:
        _own_first(m, problem, x, start)
    if capped:              # no GPU pair carries more transfers than a lane holds (both ways: milp._lanes)
        pairs: dict = defaultdict(list)
        for key, lit in x.items():
            pairs[frozenset(key[1:])].append(lit)
        stated: set = set()
        for pair in sorted(pairs, key=sorted):
            lits = pairs[pair]
            sig = tuple(sorted(lit.index for lit in lits))
            if len(lits) > problem.lane_ops and sig not in stated:
                stated.add(sig)
                m.add(sum(lits) <= problem.lane_ops)
    if problem.pair_lanes:  # a GPU pair's transfers share its threadblocks (one per class of them: ``classes``)
        lanes: dict = defaultdict(list)
        for key, s in start.items():
            c, u, v = key
            lanes[(u, v), parity[c][u] if classes else 0].append((s, x[key]))
        once: dict = {}     # a symmetric copy's lane holds its representative's variables: stated once
        for pk in sorted(lanes):
            once.setdefault(tuple(sorted((s.index, lit.index) for s, lit in lanes[pk])), pk)
        cap = 1 if classes else problem.pair_lanes
        for pk in once.values():        # each transfer holds a threadblock of its lane for its ``busy``
            ivs, busy = lanes[pk], conns[pk[0]].busy
            if busy <= 0 or len(ivs) <= cap:
                continue
            intervals = [m.new_optional_fixed_size_interval_var(s, busy, lit, f"b{pk}{k}")
                         for k, (s, lit) in enumerate(ivs)]
            if cap == 1:
                m.add_no_overlap(intervals)
            else:
                m.add_cumulative(intervals, [1] * len(ivs), cap)
        for pk in once.values() if problem.fifo else ():    # and a message of its FIFO from start to receipt
            ivs, held = lanes[pk], conns[pk[0]].held
            if len(ivs) <= problem.fifo * cap:
                continue
            m.add_cumulative([m.new_optional_fixed_size_interval_var(s, held, lit, f"h{pk}{k}")
                              for k, (s, lit) in enumerate(ivs)], [1] * len(ivs), problem.fifo * cap)
    if problem.fan > 0:     # a rank's transfers of one chunk start fan apart (shared times: once per orbit)
        for c in (orbits if shared else range(len(problem.chunks))):
            out = defaultdict(list)
            for (u, v) in cands[c]:
                out[u].append(m.new_optional_fixed_size_interval_var(start[c, u, v], problem.fan, x[c, u, v],
                                                                      f"f{c}_{u}_{v}"))
            for ivs in out.values():
                if len(ivs) > 1:
                    m.add_no_overlap(ivs)
    stated: set = set()          # a link whose intervals and loads are another's (a symmetric copy) adds nothing
    for link in sorted(by_link, key=str):
        same = (tuple(sorted(iv.index for iv in by_link[link])),
                tuple(sorted((b, lit.index) for b, lit in load[link])))
        if same in stated:
            continue
        stated.add(same)
        if len(by_link[link]) > 1:
            m.add_no_overlap(by_link[link])
        m.add(sum(b * lit for b, lit in load[link]) <= T)   # TACCL's stage-1 load bound, redundant
    weight, tie, tie_max = _tie_break(m, problem, x, load, horizon)
    step = max(1, greedy_makespan // OBJECTIVE_STEPS)        # see OBJECTIVE_STEPS
    K = m.new_int_var(0, -(-horizon // step), "K")
    m.add(T <= K * step)
    m.minimize(K * weight + tie)
    for key, lit in x.items():
        if key[0] in orbits:
            m.add_hint(lit, key in hint)
            if key in hint:
                m.add_hint(start[key], hint[key])
    if not ordering:
        for key, s in hint.items():
            if not shared and key[0] not in orbits:
                m.add_hint(start[key], s)
        m.add_hint(T, greedy_makespan)
        m.add_hint(K, -(-greedy_makespan // step))

    solver = cp_model.CpSolver()
    p = solver.parameters
    p.num_workers = settings.threads
    p.random_seed = settings.seed
    p.max_deterministic_time = settings.time_limit
    p.max_time_in_seconds = 30 * settings.time_limit + 60     # a backstop only (see colls.synth.milp)
    if settings.gap > 0:
        p.relative_gap_limit = settings.gap
    status = solver.solve(m)
    seconds = time.perf_counter() - t0
    if status == _INFEASIBLE:
        raise _infeasible_error(problem, settings)
    if status not in (_OPTIMAL, _FEASIBLE):
        raise CollsError(f"milp: the time limit of {settings.time_limit:g} s ran out before the solver "
                         f"found any schedule; give a longer --time-limit")
    sends = []
    for (c, u, v), lit in sorted(x.items()):
        if solver.boolean_value(lit):
            s = solver.value(start[c, u, v])
            sends.append((c, u, v, s, s + conns[u, v].alpha + conns[u, v].beta))
    # T lies anywhere between the last arrival and K * step: the makespan is the last arrival
    makespan = max(solver.value(arrive[c, d]) for c, ch in enumerate(problem.chunks) for d in ch.dests)
    # a bound on K bounds the makespan one step lower: K's optimum is ceil(T's / step)
    k_bound = max(0, math.ceil((solver.best_objective_bound - tie_max) / weight))
    bound = min(makespan, max(0, (k_bound - 1) * step + 1))
    # CP-SAT also says OPTIMAL when it stopped at the relative gap limit: the bound tells which
    if bound >= makespan:
        state = "optimal"
    elif status == _OPTIMAL and solver.objective_value <= solver.best_objective_bound:
        state = f"optimal to a step of {step} units"
    else:
        state = "gap limit" if status == _OPTIMAL else "time limit"
    return Solution(sends, makespan, bound, state, seconds, greedy_makespan, len(x), notes)


def _hop_parity(problem: Problem, cands: dict) -> dict:
    """Per chunk, each rank it can leave from -> the parity of its hops from the chunk's source there: every
    candidate lies on a hop-shortest path (:meth:`Problem.candidates`, without ``any_path``), so a transfer's hop
    is fixed by where it leaves, and the lowering's lane of it is that hop's parity (milp._lanes: a relay's
    receive and its forward on two threadblocks). A pair's transfers of one parity run one after another."""
    out = {}
    for c, members in cands.items():
        nxt = defaultdict(list)
        for (u, v) in members:
            nxt[u].append(v)
        out[c] = {u: d % 2 for u, d in _bfs(nxt, problem.chunks[c].src).items()}
    return out


def _orbits(problem: Problem, group: list) -> tuple[dict, dict]:
    """Representative chunk -> [(g, image chunk)] (the identity first), and chunk -> (its
    representative, the group element that maps the representative onto it)."""
    maps = [problem.chunk_maps[tuple(g)] for g in group]
    orbits, origin = {}, {}
    for c in range(len(problem.chunks)):
        if c in origin:
            continue
        orbits[c] = []
        for g, mp in zip(group, maps):
            if mp[c] not in origin:
                origin[mp[c]] = (c, g)
                orbits[c].append((g, mp[c]))
    return orbits, origin


def _inverse(g) -> list:
    inv = [0] * len(g)
    for r, p in enumerate(g):
        inv[p] = r
    return inv


def _shares_times(problem: Problem, group: list, cands: dict) -> bool:
    """Whether symmetric transfers may share their times: no group element maps a candidate
    connection onto one that shares a physical link with it (they would collide)."""
    edges = sorted({e for es in cands.values() for e in es})     # many chunks share candidate connections
    links: dict = {}

    def of(u, v) -> frozenset:
        if (u, v) not in links:
            links[u, v] = frozenset(problem.conns[u, v].links)
        return links[u, v]

    for g in group[1:]:
        for (u, v) in edges:
            if of(u, v) & of(g[u], g[v]):
                return False
    return True


def _own_first(m, problem: Problem, x: dict, start: dict) -> None:
    """On every inter-node connection, a chunk of the sending GPU goes before relayed ones
    (TACCL's enforce_ordering)."""
    by_conn: dict = defaultdict(list)
    for (c, u, v) in x:
        if problem.conns[u, v].inter:
            by_conn[u, v].append(c)
    for (u, v), cs in sorted(by_conn.items()):
        beta = problem.conns[u, v].beta
        own = [c for c in cs if problem.chunks[c].src == u]
        other = [c for c in cs if problem.chunks[c].src != u]
        for o in own:
            for r in other:
                m.add(start[r, u, v] >= start[o, u, v] + beta).only_enforce_if([x[o, u, v], x[r, u, v]])


def _tie_break(m, problem: Problem, x: dict, load: dict, horizon: int):
    """The sketch's secondary objective (lexicographic after the makespan): uc-min / uc-max count the
    distinct connections used inside switch lists; minmax / maxmin the busiest / least busy link.
    Returns (weight of T, tie expression, its largest value)."""
    terms, top = [], 0
    if problem.switch_strategy and problem.switch_pairs:
        used = {}
        for (c, u, v), lit in x.items():
            if (u, v) in problem.switch_pairs:
                used.setdefault((u, v), []).append(lit)
        sign = 1 if problem.switch_strategy == "uc-min" else -1
        for (u, v), lits in sorted(used.items()):
            y = m.new_bool_var(f"y{u}_{v}")
            if sign > 0:
                for lit in lits:
                    m.add_implication(lit, y)
            else:
                m.add(y <= sum(lits))
            terms.append(sign * y)
        top += len(used)
    if problem.link_strategy and load:
        z = m.new_int_var(0, horizon, "linkload")
        for link, items in sorted(load.items(), key=lambda kv: str(kv[0])):
            expr = sum(b * lit for b, lit in items)
            m.add(z >= expr) if problem.link_strategy == "minmax" else m.add(z <= expr)
        terms.append(z if problem.link_strategy == "minmax" else -z)
        top += horizon
    return top + 1, sum(terms), top


def _unreachable_error(problem: Problem, settings: Settings, chunk: Chunk, rank: int) -> CollsError:
    if settings.relay and problem.unreachable(relay=False) is None:
        return CollsError(f"milp: the sketch's senders_of rule leaves no way for the chunk of GPU "
                          f"{chunk.src} to reach GPU {rank} (relay constraints: senders_of)")
    return CollsError(f"milp: the sketch's relay connections (internode_conn) and the machine's links "
                      f"leave no way from GPU {chunk.src} to GPU {rank}")


def _infeasible_error(problem: Problem, settings: Settings) -> CollsError:
    """Solve again with one constraint family off at a time and name the first that makes it solvable."""
    families = [("ordering", "own_chunks_first (a sender's own chunks first)"),
                ("symmetry", "symmetry (equal decisions for symmetric chunks)"),
                ("relay", "senders_of (relay constraints)")]
    for attr, words in families:
        if getattr(settings, attr):
            relaxed = Settings(**{**settings.__dict__, attr: False, "time_limit": max(settings.time_limit, 5)})
            try:
                solve(problem, relaxed)
            except CollsError:
                continue
            return CollsError(f"milp: the model is infeasible because of the sketch's {words}; "
                              f"it is solvable without them")
    return CollsError("milp: the model is infeasible (no schedule meets the sketch's connections)")
