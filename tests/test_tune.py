"""A method's default file is the fastest on the runtime (colls.tune): trees per GPU chosen by simulated
time, not by the link model alone."""

import pytest

from colls import bound as bounds
from colls import pipeline, tune
from colls.collectives import Collective
from colls.inputs.hardware import load_topology
from colls.simulate import simulate


def test_two_mi250_trees_take_the_count_the_runtime_runs_fastest():
    """The link model's best on 2 x MI250 under RCCL, 8 trees per GPU (97.7 % of the link optimum), is 256
    trees on the 6 lanes RCCL's 64 threadblocks leave: they run one after another, and the file simulated at
    11 % of the runtime optimum at 1 GB (busiest link 12 %). One tree per GPU runs at 67 %."""
    topo = load_topology("mi250", 2)
    coll = Collective("allgather", topo.ngpus)
    result = tune.compile_fastest(topo, coll, "trees", target="rccl")
    assert result.report.ok
    tuned = result.facts["trees_tuned"]
    times = {int(k): v for k, v in tuned["geomean_us"].items()}
    chosen = result.schedule.info["k"]
    assert times[chosen] == min(times.values()) and chosen < tuned["link_model_k"]
    assert "the fastest simulated of" in result.facts["count_note"]
    size = 1 << 30
    t, _ = simulate(result.program, topo, "allgather", size, target="rccl")
    best = bounds.runtime_optimum(topo, "allgather", "rccl").time_us(size)
    assert best / t.time_us > 0.5


def test_counts_the_runtime_runs_at_no_compared_size_leave_the_link_models_file(monkeypatch):
    """When the runtime would run none of the counts at the sizes compared, nothing is timed and the link
    model's count is the file (the search returned one value too many there, and the file was never made)."""
    topo = load_topology("mi250", 2)
    coll = Collective("allgather", topo.ngpus)
    monkeypatch.setattr(tune, "_score", lambda timer, beat=None, times=None, sizes=None: None)
    result = tune.compile_fastest(topo, coll, "trees", target="rccl", instances=1, tune_depth=False)
    assert result.report.ok and "trees_tuned" not in result.facts
    assert result.schedule.info["k"] == pipeline.compile_schedule(topo, coll, "trees", target="rccl",
                                                                  in_memory=True, prove=False).schedule.info["k"]


def test_a_count_given_is_kept_and_a_single_candidate_is_not_simulated():
    topo = load_topology("dgx-a100", 1)
    coll = Collective("allgather", 8)
    asked = tune.compile_fastest(topo, coll, "trees", options={"trees_per_gpu": 2})
    assert asked.schedule.info["k"] == 2 and "trees_tuned" not in asked.facts
    plain = tune.compile_fastest(topo, coll, "trees")          # k = 1 reaches the optimum: nothing to compare
    assert plain.schedule.info["k"] == 1 and "trees_tuned" not in plain.facts
    ring = tune.compile_fastest(topo, coll, "ring", instances=2)     # copies given: kept, not tuned
    assert ring.facts["instances"] == 2 and "copies_tuned" not in ring.facts
    assert ring.program.nchunksperloop == 2 * pipeline.compile_schedule(topo, coll, "ring").program.nchunksperloop


def test_a_ring_takes_the_copies_that_fill_the_links():
    """One ring on one NVSwitch A100 node is a chain of threadblocks, each at one threadblock's copy rate: at
    1 GB it simulated at 20 GB/s busbw (8.5 % of the runtime optimum) where NCCL's ring, on its channels,
    reaches about 227. The default file now takes copies while each doubling simulates faster."""
    topo = load_topology("dgx-a100", 1)
    coll = Collective("allgather", 8)
    one = tune.compile_fastest(topo, coll, "ring", instances=1)
    ring = tune.compile_fastest(topo, coll, "ring")
    copies = ring.facts["instances"]
    tried = {int(c): t for c, t in ring.facts["copies_tuned"]["geomean_us"].items()}
    assert copies > 1 and tried[copies] < tried[1] and f"--instances {copies}" in ring.facts["copies_note"]
    assert ring.program.nchannels == copies * one.program.nchannels <= ring.target.max_channels
    assert ring.report.ok and ring.text is not None                 # the file taken is emitted and proved
    size = 1 << 30
    fast, _ = simulate(ring.program, topo, "allgather", size)
    slow, _ = simulate(one.program, topo, "allgather", size)
    best = bounds.runtime_optimum(topo, "allgather", "exe").time_us(size)
    assert best / slow.time_us < 0.2 and best / fast.time_us > 0.85


def test_a_file_of_in_place_calls_only_is_tuned_at_the_calls_it_serves():
    """colls synth --inplace-only: the tuner timed every file at out-of-place calls, which such a file does not
    serve, so none was compared and the file kept one copy: 1 x dgx-a100's ring allgather on 2 threadblocks, 11x
    slower at 1 GB than the file of both calls at the same in-place calls."""
    topo = load_topology("dgx-a100", 1)
    coll = Collective("allgather", 8)
    both = tune.compile_fastest(topo, coll, "ring", in_memory=True, prove=False)
    inplace = tune.compile_fastest(topo, coll, "ring", mode="inplace", in_memory=True, prove=False)
    assert not inplace.program.outofplace and inplace.facts["instances"] == both.facts["instances"] > 1
    size = 1 << 30
    t_in, _ = simulate(inplace.program, topo, "allgather", size, inplace=True)
    t_both, _ = simulate(both.program, topo, "allgather", size, inplace=True)
    assert t_in.time_us <= t_both.time_us * 1.01


def test_a_ring_takes_copies_up_to_the_runtimes_own_threadblocks_when_faster_at_all(monkeypatch):
    """On 1 x DGX-2 the reduce-scatter ring at 32 copies simulated 0.9 % faster at 256 MB and 1.4 % at 1 GB than
    at 16 (9 % now that relays forward the kernel's slices): under the 1 % a doubling must gain, so the default
    stopped at 16 and ran 1.4 % behind NCCL's ring (32 channels) at 1 GB. 32 copies hold no more threadblocks
    than that ring: a doubling within them is taken when faster at all (here asked to gain 50 %, it is still
    taken), one beyond only when COPIES_GAIN faster."""
    from colls.simulate.baseline import Baseline, runtime_blocks
    topo = load_topology("dgx2", 1)
    coll = Collective("reducescatter", topo.ngpus)
    monkeypatch.setattr(tune, "COPIES_GAIN", 0.5)                   # asked of copies beyond the runtime's only
    ring = tune.compile_fastest(topo, coll, "ring")
    own = runtime_blocks(topo, "exe")
    assert own == 32 and ring.program.max_tbs() == own
    tried = {int(c): t for c, t in ring.facts["copies_tuned"]["geomean_us"].items()}
    assert tried[32] > tried[16] * (1 - tune.COPIES_GAIN)           # under the gain asked beyond the runtime's
    assert "taken when faster at all" in ring.facts["copies_note"]
    size = 1 << 30
    t, _ = simulate(ring.program, topo, "reducescatter", size)
    assert t.time_us <= Baseline(topo, "reducescatter", "ring").time(size).time_us * (1 + 1e-9)


def test_copies_whose_threadblocks_pack_into_the_target_are_tried():
    """2 x MI250's ring alltoall lays out 38 threadblocks a GPU (a send and a receive one for each peer on the
    other node); counted so, a second copy (76) was over RCCL's 64 and never tried, and the file ran at 17 GB/s
    busbw at 1 GB, 0.73x RCCL's own alltoall (23). The lowering packs a peer's send and receive on one threadblock
    when over the limit: 2 copies fit in 64 and run as fast as RCCL's."""
    from colls.simulate.baseline import RuntimeDefault
    topo = load_topology("mi250", 2)
    coll = Collective("alltoall", topo.ngpus)
    ring = tune.compile_fastest(topo, coll, "ring", target="rccl", in_memory=True, prove=False)
    assert ring.facts["instances"] == 2 and ring.program.max_tbs() <= ring.target.max_tbs
    assert "packed on one threadblock" in ring.facts["copies_note"]
    size = 1 << 30
    t, _ = simulate(ring.program, topo, "alltoall", size, target="rccl")
    assert t.time_us <= RuntimeDefault(topo, "alltoall", target="rccl").time(size).time_us * (1 + 1e-9)


def test_packed_copies_that_lose_the_large_calls_or_the_deeper_files_are_not_taken(monkeypatch):
    """Packed copies send and receive one after another on a threadblock: on 1 x DGX H100, 16 copies of the direct
    allgather (132 threadblocks) won at 16 MB but lost 1 GB (380 against 398 GB/s algbw at 8 copies on 120, while
    relays forwarded whole messages; now 8 copies are within the links' floor and 16 are not tried): such copies
    are not taken (the rule, on given times below). The 1 x DGX-2 direct allreduce's 4 packed copies win at one
    piece a block, but 2 copies made deeper win more. Where packing wins both (1 x DGX H100 direct
    reduce-scatter), it is taken."""
    h100 = load_topology("dgx-h100", 1)
    large = {"packed": 110.0, "own": 100.0}           # at PACKED_HOLD, by file
    with monkeypatch.context() as m:
        m.setattr(tune, "_timer", lambda f, topology: f)
        m.setattr(tune, "_time_at", lambda timer, size: large[timer])
        assert tune._unpacked_wins("packed", 90.0, "own", 100.0, h100, False) == "slower at 1GB"
        assert tune._unpacked_wins("packed", 99.5, "own", 100.0, h100, True) == \
            "not 1% faster once both were made deeper"
        large["packed"] = 100.5                       # within COPIES_GAIN at 1 GB: taken
        assert tune._unpacked_wins("packed", 90.0, "own", 100.0, h100, False) == ""
    rs = tune.compile_fastest(h100, Collective("reducescatter", 8), "direct", in_memory=True, prove=False)
    assert rs.facts["instances"] == 16 and "packed on one threadblock to fit the target" in rs.facts["copies_note"]
    dgx2 = load_topology("dgx2", 1)
    ar = tune.compile_fastest(dgx2, Collective("allreduce", 16), "direct", in_memory=True, prove=False)
    assert ar.facts["instances"] == 2 and "once both were made deeper" in ar.facts["copies_note"]
    assert ar.schedule.info["depth"] > 1


def test_no_copies_go_below_the_links():
    """The floor the copies search stops at: the launch plus the busiest link's bytes at full bandwidth, which
    copies never change; every copy count simulates above it."""
    from colls.simulate.baseline import Fastest
    topo = load_topology("dgx-a100", 2)
    coll = Collective("allgather", topo.ngpus)
    one = tune.compile_fastest(topo, coll, "ring", instances=1)
    timer = tune._timer(one, topo)
    floor = tune._link_floor(timer)
    for copies in (1, 2, 8):
        program = pipeline.relower(one, instances=copies, only_simulated=True).program
        fastest = Fastest(topo, "allgather", [({}, program, None)], protocols=("Simple",))
        for size in tune.SIZES:
            t, _ = simulate(program, topo, "allgather", size)
            assert fastest.link_bound(size) <= t.time_us
    assert floor <= tune._score(timer)


def test_trees_carry_as_many_chunks_a_tree_as_simulate_fastest():
    """One chunk a tree on 2 x dgx-a100: every vertex's chain of reductions runs one threadblock at a time
    (the runtime finishes a step's chunk before the next threadblock starts), 56 GB/s busbw at 16 MB and 64 at
    64 MB for the reduce-scatter where NCCL's ring reaches about 100 and 150. The default file carries the
    chunks a tree that simulate fastest (8: 95 and 168 GB/s); --chunks given (tune_depth=False) keeps one. (The
    trees as packed: with their leaves paired the chains are half as long,
    test_trees_reductions_pair_their_leaves...)"""
    topo = load_topology("dgx-a100", 2)
    coll = Collective("reducescatter", topo.ngpus)
    as_packed = {"pair_leaves": False}
    deep = tune.compile_fastest(topo, coll, "trees", options=as_packed)
    one = tune.compile_fastest(topo, coll, "trees", options=as_packed, tune_depth=False)
    depth = deep.schedule.info["depth"]
    tried = {int(d): t for d, t in deep.facts["depth_tuned"]["geomean_us"].items()}
    assert depth > 1 and tried[depth] == min(tried.values()) and "depth_tuned" not in one.facts
    assert one.schedule.info["chunks_per_tree"] == 1
    assert f"{depth} chunks a tree" in deep.summary() and deep.report.ok
    assert deep.program.max_tbs() == one.program.max_tbs()          # the same threadblocks, busier
    for size in (16 << 20, 64 << 20):
        fast, _ = simulate(deep.program, topo, "reducescatter", size)
        slow, _ = simulate(one.program, topo, "reducescatter", size)
        assert fast.time_us < slow.time_us / 1.5


def test_no_deeper_file_beyond_the_ops_budget_is_made():
    """Each doubling of the depth makes and lowers the file again, in proportion to its ops: a file whose next
    depth would pass DEEP_OPS (16 x dgx-a100's allgather at one chunk a tree) is kept, nothing made."""
    from types import SimpleNamespace
    big = SimpleNamespace(schedule=SimpleNamespace(ops=[None] * tune.DEEP_OPS, info={"method": "direct"}),
                          facts={"instances": 1})
    kept, facts = tune.deepest(big, None, None, "direct", {}, {}, score=1.0)
    assert kept is big and "depth_note" not in facts and facts["depth_tuned"]["geomean_us"] == {"1": 1.0}


def test_a_patient_depth_search_goes_past_one_doubling_that_gains_nothing(monkeypatch):
    """At 1 GB a trees file's chunk is larger than the runtime's 2 MB slice until its depth cuts it below that:
    a doubling before then adds steps and leaves the messages (2 x DGX A100 reduce-scatter at 1 GB, 2 copies:
    228, 228, 240, 246 GB/s busbw at 8, 16, 32, 64 chunks a tree). The patient search goes past one doubling
    that gains nothing, when asked to, and stops at the second in a row."""
    scores = {2: 100.0, 4: 90.0, 8: 95.0, 16: 94.0, 32: 50.0}
    made = []
    monkeypatch.setattr(tune, "_timer", lambda more, topology: more)
    monkeypatch.setattr(tune, "_score", lambda timer, beat=None, times=None, sizes=None: scores[timer])

    def make(n, before):
        made.append(n)
        return n
    timed, best, n, _ = tune._doubling(1, 100.0, make, None, patient=lambda k, more: True)
    assert (best, n, made) == (4, 4, [2, 4, 8, 16]) and timed == {1: 100.0, 2: 100.0, 4: 90.0, 8: 95.0, 16: 94.0}
    made.clear()
    assert tune._doubling(1, 100.0, make, None)[2] == 1 and made == [2]          # not patient: the first miss ends it
    made.clear()
    assert tune._doubling(1, 100.0, make, None, patient=lambda k, more: k != 8)[2] == 4 and made == [2, 4, 8]
    made.clear()
    scores[2] = None                    # ruled out by its lower bound (not simulated): a miss like another
    assert tune._doubling(1, 100.0, make, None, patient=lambda k, more: True)[2] == 4 and made == [2, 4, 8, 16]


def test_trees_allreduce_on_two_mi250_runs_its_queued_trees_deeper():
    """Under RCCL's 64 threadblocks the trees allreduce on 2 x MI250 deals its 32 trees a way onto 8 lanes, one
    after another: 56 GB/s busbw at 1 GB, 16 % of the runtime optimum, with whole messages; 104 GB/s now that a
    message moves as two slices, so a chain's next threadblock starts on the first while the second arrives.
    Carrying several chunks a tree keeps each chain's threadblocks busy at once: 156 GB/s."""
    topo = load_topology("mi250", 2)
    coll = Collective("allreduce", topo.ngpus)
    deep = tune.compile_fastest(topo, coll, "trees", target="rccl", in_memory=True, prove=False)
    one = tune.compile_fastest(topo, coll, "trees", target="rccl", tune_depth=False, in_memory=True, prove=False)
    assert deep.schedule.info["depth"] > 1 and deep.program.max_tbs() <= 64
    size = 1 << 30
    fast, _ = simulate(deep.program, topo, "allreduce", size, target="rccl")
    slow, _ = simulate(one.program, topo, "allreduce", size, target="rccl")
    assert fast.time_us < slow.time_us / 1.3


def test_a_default_file_is_not_made_deeper_where_it_loses_the_large_sizes():
    """1 x ndv2 trees allgather: 2 chunks a tree simulate faster at 16 and 256 MB together (16 MB 37 -> 46 GB/s
    busbw) but slower at 256 MB and 1 GB (80 -> 75, 97 -> 95; at 8 chunks a tree 1 GB 89). synth's one file serves
    every size, so a doubling of the depth slower at the largest size compared is not taken (compile, which keeps
    the one-chunk files beside, takes the deeper one)."""
    topo = load_topology("ndv2", 1)
    coll = Collective("allgather", topo.ngpus)
    made = tune.compile_fastest(topo, coll, "trees", in_memory=True, prove=False)
    one = tune.compile_fastest(topo, coll, "trees", tune_depth=False, in_memory=True, prove=False)
    for size in (256 << 20, 1 << 30):
        t, _ = simulate(made.program, topo, "allgather", size)
        t1, _ = simulate(one.program, topo, "allgather", size)
        assert t.time_us <= t1.time_us * (1 + tune.COPIES_GAIN)
    assert "slower at 256MB" in made.facts["depth_note"]


def test_a_file_of_one_copy_that_does_not_fit_is_neither_copied_nor_deepened(monkeypatch):
    """compile_for_plans' first candidate (the XML program) is thrown away when its plan is over 64 ops; copies
    and depth only add to its threadblocks, so they are not simulated for it (2 rings of a 128-GPU allreduce:
    3 of the 7 s its refusal took)."""
    topo = load_topology("dgx-a100")
    monkeypatch.setattr(tune, "_fastest_copies", lambda *a, **k: pytest.fail("copies simulated"))
    monkeypatch.setattr(tune, "deepest", lambda *a, **k: pytest.fail("depth simulated"))
    made = tune.compile_fastest(topo, Collective("allgather", 8), "ring", fits=lambda made: False,
                                in_memory=True, prove=False)
    assert made.facts["instances"] == 1 and "copies_tuned" not in made.facts


def _counted_trees(monkeypatch) -> list:
    """The trees counts (``trees_per_gpu``, None for the link model's) compile_schedule is asked for, in order."""
    calls = []
    made = pipeline.compile_schedule

    def spy(*args, **kw):
        calls.append((kw.get("options") or {}).get("trees_per_gpu"))
        return made(*args, **kw)
    monkeypatch.setattr(pipeline, "compile_schedule", spy)
    return calls


def test_trees_refused_at_one_tree_per_gpu_are_not_lowered_at_more(monkeypatch):
    """The count search starts at one tree per GPU, the fewest threadblocks; refused there for threadblocks, the
    request is refused at once. It went on to the link model's count and every count down to one again (4 x
    MI250's allreduce for plans: 3, 2 and 1 trees lowered and cut, 14.7 s; 6.2 s)."""
    from colls.errors import LimitError
    topo = load_topology("mi250", nodes=1)
    calls = _counted_trees(monkeypatch)
    with pytest.raises(LimitError, match="one already needs too many threadblocks") as e:
        tune.compile_fastest(topo, Collective("allreduce", topo.ngpus), "trees", options={"max_threadblocks": 6},
                             in_memory=True, prove=False, target="exe")
    assert e.value.limit == "threadblocks" and "more than --max-threadblocks 6" in str(e.value)
    assert calls == [1]


def test_a_trees_count_no_plan_holds_ends_the_count_search(monkeypatch):
    """For a plan, a trees count whose file does not fit (``fits``: its ops per threadblock) is not timed and
    ends the search as a slower count would; at one tree per GPU its file is returned as it is, and the plan is
    written from the program cut for plans, whose counts are searched again (4 x MI250's allreduce for plans
    was refused after one and two trees were made and timed as XML files: 6.2 s; 2.3 s)."""
    topo = load_topology("mi250", nodes=1)
    calls = _counted_trees(monkeypatch)
    monkeypatch.setattr(tune, "_timer", lambda *a: pytest.fail("a file no plan holds was timed"))
    r = tune.compile_fastest(topo, Collective("allreduce", topo.ngpus), "trees", fits=lambda made: False,
                             in_memory=True, prove=False, target="exe")
    assert calls == [1] and r.facts["instances"] == 1


def test_trees_reductions_pair_their_leaves_where_that_simulates_faster():
    """The trees as packed and with their leaves paired differ in nothing but a vertex's chain of additions;
    which is faster depends on the machine, so the default file is the faster at the sizes copies and depth
    are chosen at, and says so; compile makes both (colls.compile._pairings), each with its copies and depth."""
    from colls import compile as comp
    topo = load_topology("dgx-a100", 2)
    made = tune.compile_fastest(topo, Collective("reducescatter", topo.ngpus), "trees", in_memory=True, prove=False)
    tuned = made.facts["pairing_tuned"]
    times = tuned["geomean_us"]
    assert tuned["leaves_paired"] > 0 and None not in times.values()
    assert (made.schedule.info["leaves_paired"] > 0) == (times["leaves paired"] < times["as packed"])
    assert ("pairing_note" in made.facts) == (made.schedule.info["leaves_paired"] > 0)
    assert [o.get("pair_leaves") for o in comp._pairings("trees", "allreduce", {})] == [False, True]
    assert comp._pairings("trees", "allgather", {}) == [{}] and comp._pairings("ring", "reducescatter", {}) == [{}]
    assert comp._pairings("trees", "reduce", {"pair_leaves": True}) == [{"pair_leaves": True}]


def test_a_ring_count_the_link_model_grew_to_is_kept_only_where_it_simulates_faster(monkeypatch):
    """8 NDv2, 6 rings (48 chunks a loop, no power-of-two call): the ring count doubles while the link model does
    not fall, to 32. Against 8 rings with their copies (as many threadblocks), 32 win the allgather at 1 GB (113
    against 104 GB/s busbw, NCCL's ring 104) and broadcast's too (they lost its 256 MB while a relay forwarded
    whole messages): each collective keeps the count that simulates faster at 16 MB and 256 MB, and says so;
    where the 8 rings are faster (made so here), they are kept."""
    topo = load_topology("ndv2", 1)
    made = {kind: tune.compile_fastest(topo, Collective(kind, 8, root=0), "ring", in_memory=True, prove=False)
            for kind in ("allgather", "broadcast")}
    ag, bc = made["allgather"], made["broadcast"]
    for m in (ag, bc):
        assert m.schedule.info["rings"] == 32 and "32 rings: faster simulated at 16MB and 256MB than 8" in \
            m.facts["count_note"]
    real = tune._grown_rival

    def faster_rival(rival, opts, beat, *rest):
        other, facts, score = real(rival, opts, None, *rest)
        return other, facts, score / 2
    monkeypatch.setattr(tune, "_grown_rival", faster_rival)
    bc = tune.compile_fastest(topo, Collective("broadcast", 8, root=0), "ring", in_memory=True, prove=False)
    assert bc.schedule.info["rings"] == 8 and bc.facts["count_note"].startswith("8 rings: faster simulated")
    size = 1 << 30
    eight = tune.compile_fastest(topo, Collective("allgather", 8), "ring", options={"rings": 8}, in_memory=True,
                                 prove=False)
    assert simulate(ag.program, topo, "allgather", size)[0].time_us < \
        simulate(eight.program, topo, "allgather", size)[0].time_us / 1.05
