"""The simulator: its laws (never faster than the bounds, monotone in bandwidth, blind to how a file lists
its threadblocks), the exact steady-state jump, which calls a file serves, and files from other tools."""

from __future__ import annotations

import copy
import random
from functools import lru_cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import topos
from colls import bound as bounds
from colls import msccl, pipeline
from colls.collectives import KINDS, Collective
from colls.errors import CollsError
from colls.inputs.hardware import load_topology
from colls.simulate import SIZE_MULTIPLIED, parse_sizes, served, simulate, size_text, sweep
from colls.simulate.engine import Machine, run
from colls.runtimes.costs import for_protocol, tb_rate
from colls.verify import verify
from colls.topology import Topology

DATA = Path(__file__).parent / "data"
MACHINES = {
    "switch3": lambda: topos.switch_node(3),
    "switch4-slow": lambda: topos.switch_node(4, bw=40),
    "mesh4": lambda: topos.mesh_node(topos.MESH4),
    "rails2x2": lambda: topos.rail_cluster(2, 2),
    "shared-nic2x4": lambda: topos.shared_nic_cluster(2, 4),
}


@lru_cache(maxsize=None)
def written(machine: str, method: str, kind: str, proto: str = "Simple"):
    topo = MACHINES[machine]()
    try:
        c = pipeline.compile_schedule(topo, Collective(kind, topo.ngpus, root=1), method, proto=proto)
    except CollsError:
        return None
    return c.program


def unit(program, kind: str) -> int:
    """The smallest call size (bytes, float32) the file serves."""
    mult = program.ngpus if kind in SIZE_MULTIPLIED else 1
    return 4 * mult * program.nchunksperloop


def scaled(topo, factor):
    g = copy.deepcopy(topo.graph)
    for _, _, d in g.edges(data=True):
        d["bw"] = d["bw"] * factor
    return Topology(topo.name, g, topo.nodes, topo.gpus_per_node, dict(topo.meta))


cases = st.tuples(st.sampled_from(sorted(MACHINES)), st.sampled_from(("ring", "direct", "trees")),
                  st.sampled_from(KINDS), st.sampled_from(("Simple", "LL", "LL128")),
                  st.sampled_from((1, 7, 1000, 2**16, 2**20)))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(case=cases)
def test_never_faster_than_the_bounds_and_never_slower_with_more_bandwidth(case):
    machine, method, kind, proto, k = case
    program = written(machine, method, kind, proto)
    assume(program is not None)
    topo = MACHINES[machine]()
    size = unit(program, kind) * k
    b = bounds.bound(topo, kind, root=1)
    t, _ = simulate(program, topo, kind, size, bound=b)
    assert t.served, t.reason
    assert t.time_us >= b.time_us(size) * (1 - 1e-9)
    assert t.time_us >= b.latency_us
    assert t.bound_pct <= 100 + 1e-6
    faster, _ = simulate(program, scaled(topo, 2), kind, size)
    assert faster.time_us <= t.time_us * (1 + 1e-9), (faster.time_us, t.time_us)


@st.composite
def small_machines(draw):
    """A random small machine: an NVLink mesh (a ring of links plus random extra ones, random widths), a
    switch node or a two-node rail cluster, with random bandwidths."""
    shape = draw(st.sampled_from(("mesh", "switch", "rails")))
    if shape == "mesh":
        n = draw(st.integers(3, 4))
        m = [[0] * n for _ in range(n)]
        for a in range(n):
            for b in range(n):
                if b == (a + 1) % n or a == (b + 1) % n:
                    m[a][b] = draw(st.integers(1, 2))
                elif a != b:
                    m[a][b] = draw(st.integers(0, 2))
        return f"mesh{m}", topos.mesh_node(m, draw(st.sampled_from((10, 25, 50))))
    if shape == "switch":
        n, bw = draw(st.integers(2, 5)), draw(st.sampled_from((20, 60, 300)))
        return f"switch{n}-{bw}", topos.switch_node(n, bw=bw)
    gpn, nic = draw(st.integers(1, 3)), draw(st.sampled_from((5, 25, 100)))
    return f"rails2x{gpn}-{nic}", topos.rail_cluster(2, gpn, nic=nic)


_RANDOM_FILES: dict = {}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.filter_too_much,
                                                                 HealthCheck.too_slow])
@given(machine=small_machines(), method=st.sampled_from(("ring", "direct", "trees")),
       kind=st.sampled_from(KINDS), k=st.sampled_from((1, 3, 5000, 2**18)))
def test_on_random_machines_every_verified_file_respects_the_bounds(machine, method, kind, k):
    name, topo = machine
    key = (name, method, kind)
    if key not in _RANDOM_FILES:
        try:
            _RANDOM_FILES[key] = pipeline.compile_schedule(topo, Collective(kind, topo.ngpus, root=1 % topo.ngpus),
                                                           method).program
        except CollsError:
            _RANDOM_FILES[key] = None
    program = _RANDOM_FILES[key]
    assume(program is not None)
    size = unit(program, kind) * k
    b = bounds.bound(topo, kind, root=1 % topo.ngpus)
    t, _ = simulate(program, topo, kind, size, bound=b)
    assert t.time_us >= b.min_time_us(size) * (1 - 1e-9)
    assert simulate(program, scaled(topo, 2), kind, size)[0].time_us <= t.time_us * (1 + 1e-9)


def renumbered(program, seed: int):
    """The same program with every GPU's threadblock ids permuted (dependencies follow) and listed in a
    shuffled order."""
    p = copy.deepcopy(program)
    rng = random.Random(seed)
    for g in p.gpus:
        ids = [tb.id for tb in g.tbs]
        new = ids[:]
        rng.shuffle(new)
        perm = dict(zip(ids, new))
        for tb in g.tbs:
            tb.id = perm[tb.id]
            for s in tb.steps:
                if s.depid is not None and s.depid >= 0:
                    s.depid = perm[s.depid]
        rng.shuffle(g.tbs)
    rng.shuffle(p.gpus)
    return p


@pytest.mark.parametrize("machine,method,kind", [("switch3", "trees", "allreduce"), ("rails2x2", "ring", "allgather"),
                                                 ("mesh4", "direct", "alltoall"), ("rails2x2", "trees", "reducescatter"),
                                                 ("shared-nic2x4", "ring", "allreduce")])
def test_the_order_of_threadblocks_in_a_file_does_not_change_its_time(machine, method, kind):
    program = written(machine, method, kind)
    topo = MACHINES[machine]()
    for size in (unit(program, kind), unit(program, kind) * 2**18):
        base = simulate(program, topo, kind, size)[0].time_us
        for seed in range(3):
            p = renumbered(program, seed)
            assert verify(p, "exe").ok
            assert simulate(p, topo, kind, size)[0].time_us == pytest.approx(base, rel=1e-9)


@pytest.mark.parametrize("machine,method,kind,proto", [
    ("switch3", "ring", "allreduce", "Simple"), ("rails2x2", "trees", "allgather", "Simple"),
    ("rails2x2", "direct", "alltoall", "Simple"), ("switch4-slow", "ring", "reducescatter", "LL128"),
    ("shared-nic2x4", "trees", "allreduce", "LL"), ("rails2x2", "ring", "broadcast", "Simple"),
    ("switch4-slow", "trees", "allgather", "Simple")])
def test_the_steady_state_jump_equals_the_full_simulation(machine, method, kind, proto):
    program = written(machine, method, kind, proto)
    topo = MACHINES[machine]()
    m = Machine(program, topo, kind)
    jumped = 0
    for passes in (9, 40, 200):
        size = unit(program, kind) * (1 << 19) // 4 * passes + unit(program, kind) * 3   # a partial last pass
        size -= size % unit(program, kind)
        kw = dict(ncpl=program.nchunksperloop, proto=proto)
        fast = run(m, size, for_protocol(proto), extrapolate=True, **kw)
        full = run(m, size, for_protocol(proto), extrapolate=False, **kw)
        assert fast.time_us == pytest.approx(full.time_us, rel=1e-9)
        assert fast.link_bytes == pytest.approx(full.link_bytes, rel=1e-9)
        assert fast.passes == full.passes
        jumped += fast.extrapolated_passes
        assert full.extrapolated_passes == 0
    # where every threadblock is held to the same pace (FIFOs, dependencies) the state recurs and is jumped;
    # where independent pipelines drift apart it recurs once the fastest have finished, and what is left is
    # jumped: every case here jumps at some size
    assert jumped > 0


def test_a_timeline_past_its_intervals_times_the_rest_of_the_call_as_without_one(monkeypatch):
    """A timeline keeps so many intervals; past them the call is only timed, with the steady-state jump, and
    ends at the time and link bytes the call has without a timeline. ``drawn_us`` says where the lanes end."""
    from colls.simulate import engine
    program = written("switch3", "ring", "allreduce", "Simple")
    topo = MACHINES["switch3"]()
    m = Machine(program, topo, "allreduce")
    size = unit(program, "allreduce") * (1 << 19) // 4 * 200
    kw = dict(ncpl=program.nchunksperloop, proto="Simple")
    whole = run(m, size, for_protocol("Simple"), **kw)
    monkeypatch.setattr(engine, "MAX_TIMELINE_INTERVALS", 500)
    drawn = run(m, size, for_protocol("Simple"), timeline=True, **kw)
    assert drawn.truncated and 0 < drawn.drawn_us < drawn.time_us / 2
    assert drawn.time_us == pytest.approx(whole.time_us, rel=1e-9)
    assert drawn.link_bytes == pytest.approx(whole.link_bytes, rel=1e-9)
    assert drawn.extrapolated_passes > 0
    ends = [b for _, iv in drawn.tb_lanes + drawn.link_lanes for _, b, _ in iv]
    assert max(ends) == drawn.drawn_us
    monkeypatch.setattr(engine, "MAX_TIMELINE_INTERVALS", 10 ** 9)
    full = run(m, size, for_protocol("Simple"), timeline=True, **kw)
    assert not full.truncated and full.drawn_us is None and full.extrapolated_passes == 0


def laid_out(machine, method, kind, proto):
    """A method's file on a test machine, laid out for the engine: (program, topology, Machine, the engine's
    keywords, sizes of one unit, of a thousand and of 2^17 units and a partial pass)."""
    program = written(machine, method, kind, proto)
    topo = MACHINES[machine]()
    u = unit(program, kind)
    return (program, topo, Machine(program, topo, kind), dict(ncpl=program.nchunksperloop, proto=proto),
            (u, u * 1000, u * (1 << 17) + 3 * u))


@pytest.mark.parametrize("machine,method,kind,proto", [
    ("switch3", "ring", "allreduce", "Simple"), ("rails2x2", "trees", "allgather", "Simple"),
    ("shared-nic2x4", "trees", "allreduce", "LL"), ("switch4-slow", "ring", "reducescatter", "LL128")])
def test_a_deadline_stops_only_calls_that_end_after_it_and_bounds_them_from_below(machine, method, kind, proto):
    program, topo, m, kw, sizes = laid_out(machine, method, kind, proto)
    for size in sizes:
        full = run(m, size, for_protocol(proto), **kw)
        assert not full.cut
        for f in (0.3, 0.9, 0.999):       # before the end: stopped, at a time that is no later than the end's
            cut = run(m, size, for_protocol(proto), deadline_us=full.time_us * f, **kw)
            assert cut.cut and full.time_us * f < cut.time_us <= full.time_us * (1 + 1e-12)
            assert cut.events <= full.events
        for f in (1.0, 1.5):              # at or after the end: the same call, to the last byte
            same = run(m, size, for_protocol(proto), deadline_us=full.time_us * f, **kw)
            assert not same.cut and same.time_us == full.time_us
            assert same.link_bytes == pytest.approx(full.link_bytes, rel=0, abs=0)
        timing, _ = simulate(program, topo, kind, size, model=for_protocol(proto), machine=m,
                             deadline_us=full.time_us / 2)
        assert not timing.served and timing.extra["lower_bound_us"] > full.time_us / 2


@pytest.mark.parametrize("machine,method,kind,proto", [
    ("switch3", "ring", "allreduce", "Simple"), ("rails2x2", "trees", "allgather", "LL"),
    ("mesh4", "direct", "alltoall", "Simple"), ("switch4-slow", "ring", "reducescatter", "LL128"),
    ("shared-nic2x4", "trees", "allreduce", "Simple"), ("shared-nic2x4", "ring", "allreduce", "Simple"),
    ("rails2x2", "ring", "broadcast", "Simple"), ("switch4-slow", "direct", "allgather", "Simple")])
def test_alike_threadblocks_simulated_once_give_the_full_simulation(machine, method, kind, proto):
    _, _, m, kw, sizes = laid_out(machine, method, kind, proto)
    for size in sizes:
        for extrapolate in (True, False):
            once = run(m, size, for_protocol(proto), extrapolate=extrapolate, **kw)
            whole = run(m, size, for_protocol(proto), extrapolate=extrapolate, symmetric=False, **kw)
            assert once.time_us == pytest.approx(whole.time_us, rel=1e-9)
            assert once.link_bytes == pytest.approx(whole.link_bytes, rel=1e-9)
            assert once.passes == whole.passes


class _NoRoom(list):
    """An engine's ``one_capw`` that says every link's flows would overfill it at their caps: no fill is
    skipped."""

    def __getitem__(self, i):
        return float("inf")

    def __setitem__(self, i, value):
        pass


def _mi250_trees_allgather():
    """2 x MI250's trees allgather at one tree a GPU and one chunk a tree, laid out: its xGMI links carry more
    flows than they hold at their caps while every tree runs, and fewer as trees end."""
    topo = load_topology("mi250", 2)
    made = pipeline.compile_schedule(topo, Collective("allgather", topo.ngpus), "trees",
                                     options={"trees_per_gpu": 1}, in_memory=True, prove=False)
    p = made.program
    return Machine(p, topo, "allgather"), dict(ncpl=p.nchunksperloop, proto=p.proto), p.proto, (1 << 20, 1 << 30)


@pytest.mark.parametrize("case", [
    ("switch3", "ring", "allreduce", "Simple"), ("rails2x2", "trees", "allgather", "LL"),
    ("mesh4", "direct", "alltoall", "Simple"), ("switch4-slow", "ring", "reducescatter", "LL128"),
    ("shared-nic2x4", "trees", "allreduce", "Simple"), "mi250 x2 trees allgather"])
def test_fills_skipped_where_every_flow_keeps_its_cap_change_nothing(case, monkeypatch):
    """The engine skips the fill of a link of its own when no flow there was below its cap and the caps all
    fit (a new flow starts at its cap): the same times and bytes as filling every time, also where a link
    holds fewer flows than it did (2 x MI250's trees: a flow kept below its cap there is raised only by a
    fill)."""
    from colls.simulate import engine
    if isinstance(case, str):
        m, kw, proto, sizes = _mi250_trees_allgather()
    else:
        _, _, m, kw, sizes = laid_out(*case)
        proto = case[3]
    fast = [run(m, size, for_protocol(proto), **kw) for size in sizes]
    made = engine._Run.__init__

    def every_fill(self, *args, **kwargs):
        made(self, *args, **kwargs)
        self.one_capw = _NoRoom()
    monkeypatch.setattr(engine._Run, "__init__", every_fill)
    for size, f in zip(sizes, fast):
        slow = run(m, size, for_protocol(proto), **kw)
        assert f.time_us == slow.time_us and f.passes == slow.passes
        assert f.link_bytes == pytest.approx(slow.link_bytes, rel=1e-12)


def _reallocate_over_the_machine(self, comps: set):
    """The engine's reallocation as it was, reading every connection, entry and link of the machine: the
    reference the per-component one must equal."""
    import numpy as np
    from colls.simulate.engine import _components, _max_min
    m, now = self.m, self.now
    cap = m.link_cap
    comp, link_comp, _ = _components(m)
    mine = np.zeros(max(comp, default=-1) + 1, dtype=bool)
    mine[list(comps)] = True
    on = self.f_on & mine[np.array(comp, dtype=np.int64)]
    act = np.flatnonzero(on)
    n = len(act)
    links = np.flatnonzero((link_comp >= 0) & mine[link_comp])
    self.load[links] = 0.0
    if n == 0:
        return
    rate, fin = self.f_rate, self.f_fin
    rem = rate[act] * (fin[act] - now)
    e_on = on[self.e_conn]
    idx = self.e_link[e_on]
    renum = np.zeros(len(on), dtype=np.int64)
    renum[act] = np.arange(n)
    own = renum[self.e_conn[e_on]]
    w = self.e_w[e_on]
    new_rate = _max_min(idx, own, n, cap, self.conn_cap[act], w)
    rate[act] = new_rate
    fin[act] = now + rem / new_rate
    self.load[links] = np.bincount(idx, weights=new_rate[own] * w, minlength=len(cap))[links]


def test_reallocating_components_alone_gives_what_the_whole_machine_gives(monkeypatch):
    """The engine recomputes max-min rates reading only the components a change touches (one at a time or
    several at once: NCCL's tree and ring through the NICs of 4 x dgx-a100): the same times and bytes, to
    the last bit, as reading the whole machine each time (a 256-GPU trees file spent a fifth of its time
    there)."""
    from colls import bound as bounds
    from colls.simulate import baseline, engine
    topo = load_topology("dgx-a100", 4)
    b = bounds.bound(topo, "allreduce")

    def times():
        base = baseline.RuntimeDefault(topo, "allreduce")
        return [base.time(size, b).time_us for size in (1 << 20, 64 << 20)]
    fast = times()
    monkeypatch.setattr(engine._Run, "_reallocate", _reallocate_over_the_machine)
    assert times() == fast


def test_alike_threadblocks_are_found():
    """A ring allreduce on a switch: every rank does the same, so one threadblock stands for all; a ring on
    a two-node rail cluster: the two nodes are alike."""
    program = written("switch3", "ring", "allreduce")
    m = Machine(program, MACHINES["switch3"](), "allreduce")
    q = m.quotient()
    assert q is not None and len(q.tbs) * 3 == len(m.tbs)
    program = written("shared-nic2x4", "ring", "allreduce")
    m = Machine(program, MACHINES["shared-nic2x4"](), "allreduce")
    q = m.quotient()
    assert q is not None and len(q.tbs) < len(m.tbs)


def test_a_large_call_costs_about_as_much_to_simulate_as_a_small_one():
    program = written("rails2x2", "ring", "allreduce")
    topo = MACHINES["rails2x2"]()
    m = Machine(program, topo, "allreduce")
    kw = dict(ncpl=program.nchunksperloop, proto="Simple")
    mid = run(m, 2**28, for_protocol("Simple"), **kw)
    big = run(m, 2**34, for_protocol("Simple"), **kw)
    assert big.passes == 64 * mid.passes
    assert big.events < 3 * mid.events


def test_which_calls_a_file_serves():
    program = written("switch4-slow", "ring", "allgather")      # 4 ranks, 4 chunks per loop
    assert served(program, "allgather", 64) is None             # count 4, multiple of 4
    assert "not a multiple of nchunksperloop" in served(program, "allgather", 32)
    assert "elements" in served(program, "allgather", 66)
    program.max_bytes = 1000
    assert "outside" in served(program, "allgather", 1024)
    program.max_bytes = 0
    program.inplace = 0
    assert "in-place" in served(program, "allgather", 64, inplace=True)
    t, res = simulate(program, MACHINES["switch4-slow"](), "allgather", 32)
    assert not t.served and res is None and "not run" not in t.reason


def test_sizes():
    assert parse_sizes("1KB:8KB") == [1024, 2048, 4096, 8192]
    assert parse_sizes("1K:1G:1024") == [1 << 10, 1 << 20, 1 << 30]
    assert parse_sizes("8, 1MB,8") == [8, 1 << 20]
    assert size_text(3 << 20) == "3MB" and size_text(1000) == "1000B"
    for bad in ("", "1KB:", "4KB:1KB", "1XB", "0", "1KB:1GB:1", "2TB", "-5"):
        with pytest.raises(CollsError):
            parse_sizes(bad)


def test_a_hang_at_some_size_is_an_error_not_a_time():
    program, _ = msccl.parse((DATA / "size_dependent_hang.xml").read_text(), "f")
    topo = topos.switch_node(program.ngpus)
    kind = "allgather" if program.coll == "allgather" else program.coll
    with pytest.raises(CollsError, match="hangs"):
        simulate(program, topo, kind, 1 << 30, native=True)


@pytest.mark.parametrize("name,machine", [("mscclang_allreduce_inplace.xml", lambda: topos.switch_node(4)),
                                          ("forestcoll_allreduce_tree3.xml", lambda: topos.switch_node(3)),
                                          ("msccl_tools_allgather_ring8.xml", lambda: load_topology("dgx-a100")),
                                          ("taccl_reduce_scatter_ring4.xml", lambda: topos.switch_node(4)),
                                          ("teccl_allgather_inplace.xml", None)])
def test_files_from_other_generators_simulate_and_respect_the_bound(name, machine):
    program, found = msccl.parse((DATA / name).read_text(), name)
    report = verify(program, "exe", findings=found)
    kind = report.facts["kind"]
    topo = machine() if machine else topos.switch_node(program.ngpus)
    b = bounds.bound(topo, kind)
    first = -(-max(program.min_bytes or 0, 1) // unit(program, kind))
    sizes = [unit(program, kind) * k for k in (first, first << 10, first << 18)]
    timings = sweep(program, topo, kind, sizes, bound=b, inplace=bool(program.inplace))
    for t in timings:
        assert t.served, t.reason
        assert t.time_us >= b.min_time_us(t.size_bytes)
    assert timings[-1].algbw_gbps > timings[0].algbw_gbps


def test_the_runtime_loop_pipelines_passes():
    """Passes overlap: in a broadcast chain, pass 2 leaves the root while pass 1 is still on its way, so a
    two-pass call costs much less than two one-pass calls."""
    program = written("rails2x2", "ring", "broadcast")
    topo = MACHINES["rails2x2"]()
    u = unit(program, "broadcast")
    one = u * ((512 << 10) * program.nchunksperloop // u)   # every chunk one slice (512 KiB) or a little less
    t1 = simulate(program, topo, "broadcast", one)[0]
    t2 = simulate(program, topo, "broadcast", 2 * one)[0]
    assert t1.passes == 1 and t2.passes == 2
    assert t2.time_us < 1.7 * t1.time_us


def test_a_file_for_another_machine_is_refused():
    program = written("switch3", "ring", "allgather")
    with pytest.raises(CollsError, match="3 GPUs"):
        simulate(program, topos.switch_node(4), "allgather", unit(program, "allgather") * 100)


def progressive_filling(idx, own, n, link_cap, fcap):
    """Max-min fairness the slow, obvious way: raise every unfrozen flow together until a link fills or a
    flow reaches its cap, freeze those, repeat."""
    import numpy as np
    rate, frozen, rem = np.zeros(n), np.zeros(n, dtype=bool), link_cap.astype(float).copy()
    while not frozen.all():
        live = ~frozen[own]
        cnt = np.bincount(idx[live], minlength=len(link_cap))
        used = cnt > 0
        d = min(float((rem[used] / cnt[used]).min()) if used.any() else float("inf"),
                float((fcap - rate)[~frozen].min()))
        rate[~frozen] += d
        rem -= d * cnt
        newly = (~frozen) & (rate >= fcap * (1 - 1e-12))
        full = used & (rem <= link_cap * 1e-12)
        newly[own[live & full[idx]]] = True
        frozen |= newly
    return rate


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_water_filling_gives_the_max_min_fair_rates(data):
    import numpy as np
    from colls.simulate.engine import _max_min
    nlinks = data.draw(st.integers(1, 7))
    n = data.draw(st.integers(1, 8))
    entries = []
    for f in range(n):
        links = data.draw(st.sets(st.integers(0, nlinks - 1), min_size=1, max_size=3))
        entries += [(link, f) for link in sorted(links)]
    idx = np.array([e[0] for e in entries])
    own = np.array([e[1] for e in entries])
    cap = np.array(data.draw(st.lists(st.integers(1, 6), min_size=nlinks, max_size=nlinks)), float) * 10
    fcap = np.array(data.draw(st.lists(st.integers(1, 9), min_size=n, max_size=n)), float) * 3
    assert _max_min(idx, own, n, cap, fcap) == pytest.approx(progressive_filling(idx, own, n, cap, fcap))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_links_of_their_own_are_filled_one_by_one(data):
    """Flows that each cross one link (the engine's usual case inside a node): max-min water-filling (equal
    caps, and different caps with weights), and the pure-Python fill of one link the engine keeps up to date
    between events, give the rates progressive filling gives."""
    import numpy as np
    from colls.simulate.engine import _fill_one, _max_min
    nlinks = data.draw(st.integers(1, 5))
    n = data.draw(st.integers(1, 9))
    idx = np.array(sorted(data.draw(st.lists(st.integers(0, nlinks - 1), min_size=n, max_size=n))))
    own = np.arange(n)
    cap = np.array(data.draw(st.lists(st.integers(1, 6), min_size=nlinks, max_size=nlinks)), float) * 10
    same = data.draw(st.booleans())
    fcap = (np.full(n, 3.0 * data.draw(st.integers(1, 9))) if same
            else np.array(data.draw(st.lists(st.integers(1, 9), min_size=n, max_size=n)), float) * 3)
    want = progressive_filling(idx, own, n, cap, fcap)
    assert _max_min(idx, own, n, cap, fcap) == pytest.approx(want)
    # weights: a flow standing for w alike ones is w flows of the same rate
    w = np.array(data.draw(st.lists(st.integers(1, 3), min_size=n, max_size=n)), float)
    rep = np.repeat(np.arange(n), w.astype(int))
    wide = progressive_filling(idx[rep], np.arange(len(rep)), len(rep), cap, fcap[rep])
    got = _max_min(idx, own, n, cap, fcap, w)
    assert got[rep] == pytest.approx(wide)
    # one link at a time, keeping each flow's remaining bytes
    rate, fin = fcap.copy(), np.full(n, 5.0)
    for li in range(nlinks):
        flows = {f: (float(fcap[f]), float(w[f])) for f in range(n) if idx[f] == li}
        load, below = _fill_one(flows, float(cap[li]), rate, fin, 1.0)
        assert load == pytest.approx(sum(got[f] * w[f] for f in flows))
        assert below == any(got[f] < fcap[f] * (1 - 1e-9) for f in flows)
    assert rate == pytest.approx(got)
    assert rate * (fin - 1.0) == pytest.approx(fcap * 4.0)


@pytest.mark.parametrize("machine", ["shared-nic2x4", "rails2x2", "switch4-slow"])
@pytest.mark.parametrize("kind", ["allreduce", "allgather", "reducescatter"])
@pytest.mark.parametrize("proto", ["Simple", "LL", "LL128"])
def test_the_jump_inside_a_pass_equals_the_full_simulation(machine, kind, proto):
    """A ring's N-2 alike steps settle into a period; jumping over the repeats gives the full simulation's
    time and link bytes, with one ring or several, one pass or many."""
    from colls.simulate.defaults import ring_machine, ring_orders
    topo = MACHINES[machine]()
    for rings, orders in ring_orders(topo, kind, [1, 3]).items():
        head, m = ring_machine(topo, kind, orders)
        u = 4 * head.nchunksperloop
        for size in (u, u * 4096, u * (1 << 19) * 9 + 3 * u):
            kw = dict(ncpl=head.nchunksperloop, proto=proto)
            fast = run(m, size, for_protocol(proto), **kw)
            full = run(m, size, for_protocol(proto), extrapolate=False, **kw)
            assert fast.time_us == pytest.approx(full.time_us, rel=1e-9)
            assert fast.link_bytes == pytest.approx(full.link_bytes, rel=1e-9)
            assert full.extrapolated_steps == 0


def test_a_long_ring_costs_its_transient_not_its_length():
    """A 32-rank ring allreduce on two DGX-2: once the pipeline settles, its 2 x 30 alike steps are jumped."""
    from colls.simulate.defaults import ring_machine, ring_orders
    topo = load_topology("dgx2", nodes=2)
    head, m = ring_machine(topo, "allreduce", ring_orders(topo, "allreduce", [1])[1])
    kw = dict(ncpl=head.nchunksperloop, proto="Simple")
    fast = run(m, 1 << 16, for_protocol("Simple"), **kw)
    full = run(m, 1 << 16, for_protocol("Simple"), extrapolate=False, **kw)
    assert fast.time_us == pytest.approx(full.time_us, rel=1e-9)
    assert fast.extrapolated_steps >= 30 and fast.events * 4 < full.events


@pytest.mark.parametrize("hw,nodes,target,searched", [("dgx-a100", 2, "exe", 16), ("mi250", 2, "rccl", 16),
                                                       ("mi250", 1, "rccl", 8)])
def test_the_runtimes_ring_channels_beyond_the_searched_rings_run_them_again(hw, nodes, target, searched):
    """NCCL and RCCL search at most half their channels' rings and copy them onto the channels after them
    (channel c + n runs channel c's ring); RCCL copies four times on one MI250 node. The baseline's 32-channel
    ring does the same, so its channels past the searched ones are alike and simulated once."""
    from colls.runtimes import get_target
    from colls.simulate.defaults import ring_orders, searched_rings
    topo = load_topology(hw, nodes=nodes)
    assert searched_rings(topo, get_target(target), 32) == searched
    orders = ring_orders(topo, "allreduce", [4, 32], searched)
    assert len(orders[32]) == 32
    assert all(orders[32][j] == orders[32][j % searched] for j in range(32))
    assert len(set(orders[4])) == 4 == len(orders[4])


PAIR_XML = """<algo name="pair" proto="{proto}" nchannels="1" nchunksperloop="2" ngpus="2" coll="allgather"
      inplace="1" outofplace="0" minBytes="0" maxBytes="0">
  <gpu id="0" i_chunks="1" o_chunks="2" s_chunks="0">
    <tb id="0" send="1" recv="-1" chan="0"><step s="0" type="s" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/></tb>
    <tb id="1" send="-1" recv="1" chan="0"><step s="0" type="r" srcbuf="o" srcoff="1" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/></tb>
  </gpu>
  <gpu id="1" i_chunks="1" o_chunks="2" s_chunks="0">
    <tb id="0" send="0" recv="-1" chan="0"><step s="0" type="s" srcbuf="o" srcoff="1" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/></tb>
    <tb id="1" send="-1" recv="0" chan="0"><step s="0" type="r" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/></tb>
  </gpu>
</algo>"""


@pytest.mark.parametrize("proto", ["Simple", "LL"])
def test_a_hop_pays_its_fixed_cost_once_and_a_receive_works_at_the_local_rate(proto):
    """One message from an ``s`` step to an ``r`` step: the sender pays the fixed cost per message (its fence
    and flag) and moves the wire bytes at its protocol's rate; the receiver, whose data has arrived, pays no
    fixed cost and reads the wire bytes from its own memory at Simple's rate (msccl_kernel.cu, and
    prims_simple.h postPeer: only a send fences)."""
    program, _ = msccl.parse(PAIR_XML.format(proto=proto), "pair.xml")
    assert verify(program, "exe").verdict == "valid"
    topo = topos.switch_node(2, bw=10_000)          # links far faster than a threadblock
    chunk = 4096                                    # one chunk a rank: one message, one pass
    model = for_protocol(proto, gpu_model=topo.gpu_model())
    assert model.step_us > 0 or proto == "LL"
    simple_rate = tb_rate(topo.gpu_model()) * 1000.0                  # bytes per us
    wire = chunk / model.data_fraction
    hop = topo.route_latency(topo.route(0, 1))
    expect = model.launch_us + model.step_us + wire / (simple_rate * model.tb_factor) + hop + wire / simple_rate
    timing, _ = simulate(program, topo, "allgather", 2 * chunk, native=True, inplace=True)
    assert timing.time_us == pytest.approx(expect, rel=1e-9)


def _lanes_across_the_network(lanes: int, messages: int) -> str:
    """GPU 0 sends ``messages`` chunks to GPU 1 (the other node) on each of ``lanes`` channels, one after another;
    GPU 1 receives them."""
    ncpl = lanes * messages

    def tbs(gpu, kind, peer):
        out = []
        for lane in range(lanes):
            steps = "".join(f'<step s="{k}" type="{kind}" srcbuf="i" srcoff="{lane * messages + k}" dstbuf="o" '
                            f'dstoff="{lane * messages + k}" cnt="1" depid="-1" deps="-1" hasdep="0"/>'
                            for k in range(messages))
            send, recv = (peer, -1) if kind == "s" else (-1, peer)
            out.append(f'<tb id="{lane}" send="{send}" recv="{recv}" chan="{lane}">{steps}</tb>')
        return "".join(out)
    return (f'<algo name="lanes" proto="Simple" nchannels="{lanes}" nchunksperloop="{ncpl}" ngpus="2" '
            f'coll="alltoall" inplace="0"><gpu id="0" i_chunks="{ncpl}" o_chunks="{ncpl}" s_chunks="0">'
            f'{tbs(0, "s", 1)}</gpu><gpu id="1" i_chunks="{ncpl}" o_chunks="{ncpl}" s_chunks="0">'
            f'{tbs(1, "r", 0)}</gpu></algo>')


def test_a_nic_shared_by_lanes_does_not_idle_while_their_senders_pay_a_message_s_fixed_cost():
    """A send across the network writes the message into the connection's buffer at the threadblock's copy rate,
    and the proxy hands it to the NIC slice by slice (NCCL src/transport/net.cc, sendProxyProgress: isend as
    the GPU's tail advances; the slot comes back when the send is done), so the threadblock pays its next
    message's fixed cost while the NIC still sends this one. Four lanes sharing one NIC, 8 messages each: the
    NIC is busy from the first message to the last, and the call takes the NIC's time plus one message's
    way in and out. A send that held its threadblock until the NIC had sent the message ran the lanes in
    lockstep, the NIC idle during every round's fixed cost (8 x 2.8 us)."""
    topo = topos.rail_cluster(2, 1)
    program, _ = msccl.parse(_lanes_across_the_network(4, 8), "lanes")
    m = Machine(program, topo, "alltoall")
    model = for_protocol("Simple")
    chunk = 256 << 10
    size = chunk * program.nchunksperloop
    res = run(m, size, model, ncpl=program.nchunksperloop, proto="Simple")
    nic = next(i for i, (u, v) in enumerate(m.links) if u == 0)      # GPU 0's way to its NIC
    busy = size / m.link_cap[nic]
    rate = tb_rate("test") * 1000.0
    route = topo.route(0, 1)
    way = (model.step_us + chunk / rate + topo.route_latency(route) + model.net_step_us + chunk / rate)
    assert busy + model.launch_us < res.time_us <= busy + model.launch_us + way
