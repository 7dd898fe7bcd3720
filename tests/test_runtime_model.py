"""Tests of the runtime model: each GPU generation's costs (colls.runtimes.costs), what the runtime runs by
itself (RuntimeDefault: ring, tree, NVLS, grouped sends for alltoall), NVLS in closed form, and the laws
those obey (NVLS only where NCCL runs it; never faster than the links allow; graph launches cheaper than
stream launches)."""

from __future__ import annotations

import math

import pytest

from colls import verify
from colls.collectives import Collective
from colls.errors import CollsError
from colls.inputs import hardware
from colls.runtimes import TARGETS, get_target
from colls.runtimes import nccl as nccl_facts
from colls.runtimes.costs import FAMILIES, family_of, is_known, model_for
from colls.simulate.baseline import RuntimeDefault
from colls.simulate.defaults import nccl_program
from colls.simulate.nvls import Nvls, nvls_reason

_cache: dict = {}


def topo(name: str, nodes: int = 1):
    if (name, nodes) not in _cache:
        _cache[(name, nodes)] = hardware.load_topology(name, nodes=nodes)
    return _cache[(name, nodes)]


@pytest.mark.parametrize("model, family", [("A100-SXM4-80GB", "Ampere"), ("H100-SXM5", "Hopper"),
                                           ("V100-SXM2", "Volta"), ("MI250X", "CDNA2"), ("MI300X", "CDNA3"),
                                           ("MI325X", "CDNA3"), ("Z999", "Ampere")])
def test_families_by_gpu_model(model, family):
    assert family_of(model).name == family


def test_every_shipped_profile_has_a_known_family():
    for name in ("dgx-a100", "dgx-h100", "dgx2", "ndv2", "mi250"):
        t = topo(name)
        assert is_known(t.gpu_model())
    assert family_of(topo("mi250").gpu_model()).runtime == "RCCL"
    assert family_of(topo("dgx-h100").gpu_model()).runtime == "NCCL"


def test_rccl_has_its_own_costs():
    amd, ampere = FAMILIES["CDNA2"], FAMILIES["Ampere"]
    assert amd.launch_us != ampere.launch_us
    assert amd.step_us["LL128"] != ampere.step_us["LL128"]


# Published rccl-tests runs of msccl-tools files on 8 x MI300X, RCCL 2.21.5, no graphs (bench/published_files.yaml):
# (file, bytes, published us). Each is dominated by one of the CDNA3 figures: the call and the hop (1 KB), the
# threadblocks' copy rates (1 GB).
MI300X_RUNS = [("ag_allpair_ll_x_2", 1 << 10, 7.02), ("ag_allpair_simple_x_1", 1 << 10, 10.65),
               ("ag_ring_simple_1_1", 1 << 10, 39.39), ("ag_ring_ll_1_1", 1 << 10, 18.72),
               ("ag_allpair_simple_x_1", 1 << 30, 12753.0), ("ag_ring_simple_1_1", 1 << 30, 86402.0),
               ("ag_allpair_ll_x_1", 1 << 30, 87035.0)]


@pytest.mark.parametrize("name, size, published", MI300X_RUNS)
def test_rccl_on_mi300x_times_published_runs_of_another_generators_files(name, size, published):
    """On the Ampere figures (what an unknown GPU got before) the 1 KB runs come out 2.5-4x slow and the LL
    one at 1 GB 1.4x fast."""
    import sys
    from pathlib import Path
    from colls.msccl import read
    from colls.simulate import simulate
    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root / "bench"))
    from msccl_files import make
    t = hardware.load_topology("mi300x")
    assert family_of(t.gpu_model()).name == "CDNA3"
    timing, _ = simulate(read(make(name), name), t, "allgather", size, inplace=True, target="rccl")
    assert timing.time_us == pytest.approx(published, rel=0.1)


def test_rccls_own_ring_on_mi300x_runs_its_searched_rings_twice():
    """RCCL's rings for 8 MI300X load every xGMI link alike (14 rings on 28 channels); the model's 32 channels
    over 16 rings (7 + 7 + 2) loaded some links 5 times and others 4, 22 % slower than the published runs from
    256 MB (bench/published_files.yaml, out-of-place: allgather 1 GB 3,079 us, allreduce 5,977 us)."""
    t = topo("mi300x")
    for kind, published in (("allgather", 3079.2), ("allreduce", 5977.3)):
        timing = RuntimeDefault(t, kind, target="rccl", launch="stream").time(1 << 30)
        assert timing.extra["channels"] == 28
        assert timing.time_us == pytest.approx(published, rel=0.05)


@pytest.mark.parametrize("proto", ["LL", "LL128", "Simple"])
def test_model_costs_add_up(proto):
    fam = FAMILIES["Hopper"]
    stream = model_for(proto, "H100", launch="stream")
    graph = model_for(proto, "H100", launch="graph")
    assert stream.launch_us == pytest.approx(fam.host_us["stream"] + fam.launch_us[proto])
    assert graph.launch_us == pytest.approx(fam.launch_us[proto])
    assert graph.launch_us < stream.launch_us
    assert stream.step_us == fam.step_us[proto]
    assert 0 < stream.tb_factor <= 1


def test_targets_say_which_runtime_they_model():
    assert "2.23.4" in get_target("exe").runtime
    assert "RCCL" in get_target("rccl").runtime
    assert "nvls" in get_target("exe").algorithms
    assert "nvls" not in get_target("rccl").algorithms and "nvls" not in get_target("old").algorithms
    assert all(t.runtime for t in TARGETS.values())


# ------------------------------------------------------------------------------------------------------
# NVLS
# ------------------------------------------------------------------------------------------------------
def test_nvls_only_where_nccl_runs_it():
    assert nvls_reason(topo("dgx-h100"), "allreduce") is None
    assert nvls_reason(topo("dgx-h100"), "allgather") is None
    assert nvls_reason(topo("dgx-h100", 2), "allreduce") is None          # NVLS-tree
    assert "one node" in nvls_reason(topo("dgx-h100", 2), "allgather")
    assert "Hopper" in nvls_reason(topo("dgx-a100"), "allreduce")
    assert nvls_reason(topo("dgx-h100"), "alltoall") is not None
    with pytest.raises(CollsError):
        Nvls(topo("dgx-a100"), "allreduce")


def test_nvls_time_is_monotone_and_bounded_by_its_links():
    n = Nvls(topo("dgx-h100"), "allreduce")
    times = [n.time(1 << k).time_us for k in range(10, 34)]
    assert all(b >= a for a, b in zip(times, times[1:]))
    # each GPU's links carry the buffer once each way: no faster than the links at NVLS efficiency
    gbps = 18 * 25 * 0.824
    for k in range(20, 34):
        t = n.time(1 << k)
        assert t.algbw_gbps <= gbps * nccl_facts.NVLS_EFFICIENCY + 1e-9
    assert n.time(1 << 30).bound_pct is None              # switch reduction: the sends' optimum is no bound


def test_nvls_chunks_shrink_for_smaller_calls():
    n = Nvls(topo("dgx-h100"), "allreduce")
    assert n.chunk(8 << 30) == nccl_facts.NVLS_CHUNK
    assert n.chunk(1 << 20) < n.chunk(256 << 20) < n.chunk(8 << 30)


def test_nvls_tree_is_slower_with_more_nodes():
    t2 = Nvls(topo("dgx-h100", 2), "allreduce").time(1 << 30)
    t4 = Nvls(topo("dgx-h100", 4), "allreduce").time(1 << 30)
    assert t2.label == "NCCL nvls-tree"
    assert t4.time_us > t2.time_us


# ------------------------------------------------------------------------------------------------------
# What the runtime runs by itself
# ------------------------------------------------------------------------------------------------------
def test_h100_allreduce_default_takes_nvls_for_large_calls():
    d = RuntimeDefault(topo("dgx-h100"), "allreduce")
    assert d.algorithms == ["ring", "tree", "nvls"]
    big = d.time(1 << 30)
    assert big.extra["algorithm"] == "nvls"
    small = d.time(1 << 10)
    assert small.extra["algorithm"] in ("ring", "tree")
    assert small.extra["protocol"] == "LL"


@pytest.mark.parametrize("name, nodes, winners", [("dgx-h100", 1, {"nvls"}), ("dgx-a100", 4, {"ring", "tree"})])
def test_default_prunes_only_what_cannot_win(name, nodes, winners):
    """RuntimeDefault.time times the last winner first and the others only as far as they could beat it:
    the same algorithm, protocol, channels and time as timing every algorithm in full, sizes in any order."""
    t = topo(name, nodes)
    pruned, full = RuntimeDefault(t, "allreduce"), RuntimeDefault(t, "allreduce")
    algorithms = set()
    for size in (1 << 30, 1 << 10, 1 << 24, 1 << 16, 1 << 20):
        got = pruned.time(size)
        want = full.pick([timer.time(size) for timer in full.timers])
        assert (got.extra, got.time_us) == (want.extra, want.time_us)
        algorithms.add(got.extra["algorithm"])
    assert winners <= algorithms and len(algorithms) >= 2     # the lead changed at least once


def test_forced_algorithm_and_its_refusal():
    ring = RuntimeDefault(topo("dgx-h100"), "allreduce", algorithms=("ring",))
    assert ring.algorithms == ["ring"]
    assert ring.time(1 << 30).time_us > RuntimeDefault(topo("dgx-h100"), "allreduce").time(1 << 30).time_us
    with pytest.raises(CollsError, match="Hopper"):
        RuntimeDefault(topo("dgx-a100"), "allreduce", algorithms=("nvls",))
    with pytest.raises(CollsError, match="no NVLS"):
        RuntimeDefault(topo("dgx-h100"), "allreduce", algorithms=("nvls",), target="rccl")


def test_alltoall_is_grouped_sends_without_ll128():
    d = RuntimeDefault(topo("dgx-a100"), "alltoall")
    assert d.algorithms == ["p2p"]
    for size in (1 << 10, 1 << 20, 1 << 30):
        t = d.time(size)
        assert t.extra["algorithm"] == "p2p" and t.extra["protocol"] != "LL128"
    # link-bound at large sizes: close to each GPU's NVLink out (300 GB/s at NCCL's 80 %) x (n-1)/n
    assert d.time(1 << 30).busbw_gbps > 0.8 * 240 * 7 / 8


@pytest.mark.parametrize("channels", [1, 2, 4])
def test_p2p_program_verifies_and_has_no_order_between_peers(channels):
    t = topo("dgx-a100")
    p = nccl_program(t, Collective("alltoall", t.ngpus), "ring", channels=channels)
    assert p.nchunksperloop == t.ngpus * channels
    report = verify.verify(p, "exe", sms=t.min_sms())
    assert report.ok
    for g in p.gpus:
        assert all(s.depid == -1 for tb in g.tbs for s in tb.steps)
        peers = {tb.send for tb in g.tbs if tb.send != -1}
        assert peers == set(range(t.ngpus)) - {g.id}


def test_rccl_default_on_mi250_uses_rccl_costs():
    d = RuntimeDefault(topo("mi250"), "allreduce", target="rccl")
    assert "nvls" not in d.algorithms
    t = d.time(8)
    fam = FAMILIES["CDNA2"]
    assert t.time_us >= fam.host_us["stream"] + fam.launch_us["LL"]


def test_graph_launch_is_faster_by_the_host_cost():
    s = RuntimeDefault(topo("dgx-a100"), "allgather", algorithms=("ring",), launch="stream").time(1 << 10)
    g = RuntimeDefault(topo("dgx-a100"), "allgather", algorithms=("ring",), launch="graph").time(1 << 10)
    assert math.isclose(s.time_us - g.time_us, FAMILIES["Ampere"].host_us["stream"], rel_tol=1e-6)


# ------------------------------------------------------------------------------------------------------
# The command line
# ------------------------------------------------------------------------------------------------------
def _cli(*args):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-c", "from colls.cli import main; main()", *args],
                          capture_output=True, text=True)


def test_simulate_baseline_nccl_names_its_choices(tmp_path):
    proc = _cli("simulate", "--baseline", "nccl", "--collective", "allreduce", "--hardware", "dgx-h100",
                "--sizes", "1KB,1GB")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "NCCL 2.23.4 default (ring, tree, nvls" in out
    assert "1GB nvls Simple/16ch" in out and "does not bound it" in out
    proc = _cli("simulate", "--baseline", "nccl", "--collective", "allreduce", "--hardware", "dgx-h100",
                "--timeline", str(tmp_path / "t.png"), "--size", "1GB")
    assert proc.returncode == 2 and "closed form" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "t.png").exists()


def test_simulate_forced_nvls_where_there_is_none():
    proc = _cli("simulate", "--baseline", "nccl-nvls", "--collective", "allreduce", "--hardware", "dgx-a100",
                "--sizes", "1MB")
    assert proc.returncode == 2 and "--baseline" in proc.stderr and "Hopper" in proc.stderr


def test_the_fastest_configuration_is_within_the_tolerance_of_the_true_best():
    """Fastest skips a configuration only when its lower bound shows it cannot beat the best found by more
    than TOLERANCE: its answer is within that of the best of every configuration the runtime would run
    (the channels its per-call rule allows) simulated."""
    from dataclasses import replace
    from colls.simulate import simulate
    from colls.simulate.baseline import TOLERANCE, Baseline
    from colls.runtimes.costs import model_for
    t = topo("dgx-a100")
    base = Baseline(t, "allreduce", "ring")
    cap = base.fastest.channel_cap
    for size in (1 << 12, 1 << 22, 1 << 30):
        every = min(simulate(replace(p, proto=proto), t, "allreduce", size, machine=m, native=True,
                             model=model_for(proto, t.gpu_model()))[0].time_us
                    for extra, p, m, _ in base.fastest.entries for proto in ("Simple", "LL128", "LL")
                    if extra["channels"] <= cap(size, proto))
        got = base.time(size).time_us
        assert every <= got <= every * (1 + TOLERANCE)


@pytest.mark.parametrize("kind", ["allreduce", "allgather"])
def test_the_lower_bounds_are_never_above_the_simulated_time(kind):
    """Fastest's pruning is sound only if no configuration simulates faster than its bounds (the loads bound
    and the first pass's longest chain): the runtime's ring and tree, and the ring, direct, trees and milp
    files with copies, every protocol, small to large calls (with recv-only steps, whose bytes are data, not
    wire, bytes, flags between threadblocks, several passes). The chain bound is also exact where a call is
    one latency-bound chain (the runtime's ring at 4 KB with LL128)."""
    from dataclasses import replace
    from colls import compile as comp
    from colls.simulate import simulate
    from colls.simulate.baseline import Baseline, Chain, _loads, lower_bound
    from colls.simulate.engine import Machine
    from colls.runtimes.costs import model_for
    t = topo("dgx-a100", 2)
    entries = [(p, m, loads) for alg in (("ring", "tree") if kind == "allreduce" else ("ring",))
               for _, p, m, loads in Baseline(t, kind, alg).fastest.entries[:2]]
    for method in ("ring", "direct", "trees", "milp"):
        for v in comp._variants(t, Collective(kind, t.ngpus), method, "exe", {}).variants[:2]:
            m = Machine(v.program, t, kind)
            entries.append((v.program, m, _loads(m)))
    exact = 0
    for program, machine, loads in entries:
        chain = Chain(machine)
        for proto in ("Simple", "LL128", "LL"):
            model = model_for(proto, t.gpu_model())
            for size in (1 << 12, 1 << 20, 1 << 24, 1 << 27):
                timing, _ = simulate(replace(program, proto=proto), t, kind, size, machine=machine,
                                     model=model, native=True)
                eff = machine.message_bytes(proto, size)
                assert lower_bound(loads, model, size, program.nchunksperloop, eff) <= timing.time_us * (1 + 1e-9)
                chained = chain.bound(model, size, program.nchunksperloop, eff, machine.fifo(proto),
                                      machine.slices(proto))
                assert chained <= timing.time_us * (1 + 1e-9)
                exact += chained >= timing.time_us * (1 - 1e-9)
    assert exact


def test_a_time_to_beat_prunes_only_what_cannot_beat_it(monkeypatch):
    """Fastest.time with ``beat``: the same answer when the best is below it; otherwise "out of reach" with a
    lower bound that is proven (no faster than the true best) and above ``beat``; and nothing is simulated
    when every configuration's bound is above it."""
    from colls.simulate import baseline
    from colls.simulate.baseline import Baseline
    t = topo("dgx-a100")
    fastest = Baseline(t, "allreduce", "ring").fastest
    for size in (1 << 12, 1 << 24):
        best = fastest.time(size)
        assert fastest.time(size, beat=best.time_us * 1.01).time_us == best.time_us
        out = fastest.time(size, beat=best.time_us * 0.99)
        assert not out.served and best.time_us * 0.99 < out.extra["lower_bound_us"] <= best.time_us * (1 + 1e-9)
        calls = []
        monkeypatch.setattr(baseline, "simulate", lambda *a, **k: calls.append(a) or None)
        out = fastest.time(size, beat=1.0)
        monkeypatch.undo()
        assert calls == [] and not out.served and out.extra["lower_bound_us"] > 1.0


# ------------------------------------------------------------------------------------------------------
# How many channels a call runs on, and how a tree block's threads split
# ------------------------------------------------------------------------------------------------------
NCCL_THREADS = dict(get_target("exe").coll_threads)


@pytest.mark.parametrize("nbytes, algorithm, proto, nranks, want", [
    (64 << 10, "ring", "LL", 8, 2),          # 512 threads x 8 bytes x 8 ranks = 32 KB per channel
    (256 << 10, "ring", "LL", 8, 8), (1 << 20, "ring", "LL", 8, 32), (1 << 30, "ring", "LL", 8, 32),
    (1 << 20, "ring", "LL", 16, 16),         # the ring's LL threshold grows with the ranks
    (64 << 10, "ring", "LL128", 8, 12),      # 640 threads x 8 bytes
    (64 << 10, "ring", "Simple", 8, 2),      # 512 threads x 64 bytes
    (16 << 10, "tree", "LL", 16, 4),         # a tree's LL threshold does not grow with the ranks
    (8, "ring", "LL", 8, 1)])
def test_a_call_runs_on_the_channels_nccls_rule_gives(nbytes, algorithm, proto, nranks, want):
    assert nccl_facts.call_channels(nbytes, algorithm, proto, nranks, 32, NCCL_THREADS) == want


def test_rccls_blocks_have_256_threads():
    threads = dict(get_target("rccl").coll_threads)
    assert nccl_facts.call_channels(64 << 10, "ring", "LL", 8, 32, threads) == 4


def test_the_baseline_keeps_to_the_per_call_channels():
    """A 64 KB allreduce on one DGX H100 runs NCCL's ring LL on 2 channels, however many the model could
    use; a 1 GB one on as many as it likes."""
    small = RuntimeDefault(topo("dgx-h100"), "allreduce", algorithms=("ring",), protocols=("LL",)).time(64 << 10)
    assert small.extra["channels"] <= 2
    big = RuntimeDefault(topo("dgx-h100"), "allreduce", algorithms=("ring",)).time(1 << 30)
    assert big.extra["channels"] == 32


@pytest.mark.parametrize("name, want", [("dgx-a100", 16), ("dgx2", 16), ("ndv2", 2)])
def test_several_nodes_run_the_channels_the_search_finds_through_the_nics(name, want):
    """One channel per NIC at the highest search speed under the NIC's rate (HDR 25 GB/s -> 24, EDR 12.5 ->
    12: no duplication below 25 GB/s), then every channel twice (ncclTopoPostset)."""
    from colls.simulate.defaults import runtime_channels
    assert runtime_channels(topo(name, 2), get_target("exe")) == want
    assert runtime_channels(topo(name), get_target("exe")) is None      # one node: the NVLink search
    assert runtime_channels(topo(name, 2), get_target("rccl")) is None   # not checked for RCCL


def test_the_search_duplicates_fast_channels_except_on_hopper_below_50():
    assert nccl_facts.net_channels([25.0] * 8, False, 2) == 16
    assert nccl_facts.net_channels([30.0] * 4, False, 2) == 16        # 4 at 30 GB/s, doubled, then twice
    assert nccl_facts.net_channels([50.0] * 8, True, 2) == 16         # Hopper, 48 < 50 with 8 > 4 channels
    assert nccl_facts.net_channels([50.0] * 2, True, 2) == 8          # only 2 channels: doubled
    assert nccl_facts.net_channels([0.5], False, 2) == 2              # slower than every speed: one channel


@pytest.mark.parametrize("proto, up", [("Simple", 0.6), ("LL", 352 / 512), ("LL128", 0.7)])
def test_a_tree_blocks_threads_split_between_its_groups(proto, up):
    assert nccl_facts.tree_up_share(proto, NCCL_THREADS) == pytest.approx(up)


def test_tree_groups_copy_at_their_share_of_a_block():
    """The up and down groups of a non-root tree block copy at their share of its threads; a root's block,
    one primitive, at the whole rate. On 2 nodes of one GPU each every tree is a root and a leaf."""
    from colls.simulate.defaults import tree_machine
    _, m = tree_machine(topo("dgx-a100", 2), 1)
    shares = sorted(set(m.tb_scale["Simple"]))
    assert shares == [pytest.approx(0.4), pytest.approx(0.6), 1.0]
    assert sorted(set(m.tb_scale["LL128"])) == [pytest.approx(0.3), pytest.approx(0.7), 1.0]
