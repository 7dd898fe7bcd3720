"""Scale: what the runtimes can load is refused up front, long rings are split across threadblocks, and
every method either writes a verified file or refuses naming a limit (a fast subset of bench/scale.py,
which runs the whole sweep up to 16 nodes)."""

import pytest

import shell

from colls import msccl, pipeline, verify
from colls.inputs import hardware
from colls.collectives import KINDS, Collective
from colls.errors import CollsError, LimitError
from colls.runtimes import TARGETS

# Words a refusal uses to say which limit or which applicability rule decided.
LIMIT_WORDS = ("steps", "threadblocks", "channels", "elements", "int16", "no link", "no tree schedule",
               "in-place", "route", "reachable", "cannot be reached")


def _busiest_rank_steps(program) -> int:
    return max(sum(len(tb.steps) for tb in g.tbs) for g in program.gpus)


@pytest.mark.parametrize("name,nodes", [("dgx-a100", 1), ("dgx-a100", 2), ("mi250", 1), ("ndv2", 1),
                                        ("dgx2", 1), ("dgx-h100", 1)])
def test_every_method_writes_a_verified_file_or_names_the_limit(name, nodes):
    topo = hardware.load_topology(name, nodes=nodes)
    for method in ("ring", "direct", "trees"):
        for kind in KINDS:
            coll = Collective(kind, topo.ngpus)
            try:
                result = pipeline.compile_schedule(topo, coll, method, target="rccl")
            except CollsError as e:
                msg = str(e)
                assert "\n" not in msg and "in-flight" not in msg, msg
                assert any(w in msg for w in LIMIT_WORDS), msg
                continue
            assert result.program.max_tbs() <= TARGETS["rccl"].max_tbs
            # the precheck's figure is a lower bound of what was written: it never refuses a file
            least = pipeline.least_instructions(coll, method)
            assert least <= _busiest_rank_steps(result.program), (method, kind)


def test_precheck_refuses_too_many_ranks_in_milliseconds():
    # 4160 GPUs: gpu elements alone pass 4096 (a machine colls does not build: checked from the count alone)
    with pytest.raises(LimitError, match="MSCCL_MAX_NODES"):
        pipeline.check_rank_limits(Collective("allgather", 4160), "ring", TARGETS["exe"])
    with pytest.raises(CollsError, match="at most 4,096 GPUs [(]512 nodes of this profile"):
        hardware.load_topology("dgx-a100", nodes=520)
    assert hardware.load_topology("dgx-a100", nodes=512).ngpus == hardware.MAX_MODEL_GPUS


def test_every_command_refuses_a_machine_too_large_to_model_naming_the_nodes_that_fit(tmp_path):
    """100,000 nodes of DGX A100: bound, hardware show, simulate, verify --hardware and compile built the whole
    machine (800,000 GPUs) for a minute and ran out of memory; each is refused on --nodes before it is built."""
    from colls.cli import main
    xml = tmp_path / "x.xml"
    xml.write_text(msccl.emit(pipeline.compile_schedule(hardware.load_topology("dgx-a100"),
                                                        Collective("allgather", 8), "ring").program))
    hw = ["--hardware", "dgx-a100", "--nodes", "100000"]
    for args in (["bound", *hw, "--collective", "allgather"], ["hardware", "show", "dgx-a100", "--nodes", "100000"],
                 ["simulate", *hw, "--baseline", "nccl", "--collective", "allreduce"], ["verify", str(xml), *hw],
                 ["compile", *hw, "--collective", "allgather", "-o", str(tmp_path / "out")]):
        with pytest.raises(SystemExit) as done:
            main(args)
        assert done.value.code == 2, args
    assert not (tmp_path / "out").exists()


def test_a_file_of_more_gpus_than_the_loaders_children_per_element_is_refused_up_front(monkeypatch):
    """The loader keeps an element's children in subs[MSCCL_MAX_SUBS = 1024] (msccl_parser.h) without a check:
    129 x dgx-a100 (1,032 GPUs) would overrun <algo>'s; refused before anything is made, 1,024 GPUs are not."""
    topo = hardware.load_topology("dgx-a100", nodes=129)
    with monkeypatch.context() as m:
        m.setattr(pipeline, "_planned", lambda *a, **k: pytest.fail("a schedule was made"))
        with pytest.raises(LimitError, match="at most 1024 children per element"):
            pipeline.compile_schedule(topo, Collective("allgather", topo.ngpus), "hier")
    pipeline.check_limits(topo, Collective("allgather", topo.ngpus), "hier", TARGETS["old"])   # no such limit
    big = hardware.load_topology("dgx-a100", nodes=128)
    pipeline.check_limits(big, Collective("allgather", big.ngpus), "hier", TARGETS["exe"])


def test_precheck_refuses_chunk_factors_whose_offsets_overflow_int16():
    topo = hardware.load_topology("dgx-a100", nodes=1)
    with pytest.raises(LimitError, match="int16"):
        pipeline.compile_schedule(topo, Collective("allgather", 8, chunks=100_000), "ring")
    # the largest buffer that still fits is not refused by the precheck
    coll = Collective("alltoall", 8, chunks=(32767 + 70 + 1) // 8)
    pipeline.check_limits(topo, coll, "direct", TARGETS["old"])


def test_precheck_counts_each_ranks_own_steps():
    # ring allreduce: 2(N-1) steps per rank and ring; 1 + N + 2(N-1) + threadblocks passes 4096 at
    # N = 1352 ranks whatever the ring count
    coll = Collective("allreduce", 1400)
    assert pipeline.least_instructions(coll, "ring") == 2 * 1399
    topo = hardware.load_topology("dgx-a100", nodes=175)
    with pytest.raises(LimitError, match="XML elements"):
        pipeline.check_limits(topo, coll, "ring", TARGETS["exe"])
    # the older runtime has no element limit: not refused there
    pipeline.check_limits(topo, coll, "ring", TARGETS["old"])


def test_direct_on_more_peers_than_threadblocks_is_refused_up_front():
    topo = hardware.load_topology("dgx-a100", nodes=16)  # 127 peers, 108 SMs
    with pytest.raises(LimitError, match="127 peers"):
        pipeline.check_limits(topo, Collective("allgather", 128), "direct", TARGETS["exe"])


@pytest.mark.parametrize("kind", ["allreduce", "reducescatter"])
def test_long_rings_are_split_across_threadblocks_and_channels(kind):
    """A ring of 72 ranks: a reduce-scatter chain of 71 steps in flight does not fit one threadblock of
    64 steps; the partial sum is stored where the chain crosses into the next segment's channel."""
    topo = hardware.load_topology("dgx-a100", nodes=9)
    result = pipeline.compile_schedule(topo, Collective(kind, 72), "ring", options={"rings": 1})
    assert result.report.ok
    assert result.program.max_steps() <= 64 and result.program.nchannels >= 2
    parsed, findings = msccl.parse(result.text, "<test>")
    assert verify.verify(parsed, TARGETS["rccl"], sms=topo.min_sms(), findings=findings).ok


def test_too_many_rings_for_the_channels_name_the_limit_and_what_to_try():
    # 17 rings of 40 ranks, two chunks each: 78 steps a ring, two segments of channels at least
    topo = hardware.load_topology("dgx-a100", nodes=5)
    with pytest.raises(LimitError, match="channels.*--rings"):
        pipeline.compile_schedule(topo, Collective("reducescatter", 40, chunks=34), "ring",
                                  options={"rings": 17})


def test_progress_lines_go_to_the_callback_only_after_a_second():
    topo = hardware.load_topology("dgx-a100", nodes=1)
    lines = []
    pipeline.compile_schedule(topo, Collective("allgather", 8), "ring", progress=lines.append)
    assert lines == []  # a fast run says nothing
    progress = pipeline._Progress(lines.append)
    progress.start -= 5.0  # as if the work had started five seconds ago
    progress("verifying the file (1 KiB)")
    assert lines == ["verifying the file (1 KiB) (5 s so far)"]
    pipeline._Progress(None)("nothing to call")  # no callback: silent


@pytest.mark.parametrize("method,kind,most", [("trees", "allgather", 256), ("trees", "broadcast", 256),
                                              ("trees", "allreduce", 128), ("milp", "allreduce", 128),
                                              ("milp", "alltoall", 64)])
def test_a_method_refuses_more_gpus_than_it_takes_on_before_the_machine_is_built(method, kind, most, tmp_path):
    """trees packs a spanning tree a GPU at a time (a max-flow over the machine each) and milp's model has a
    connection per pair of GPUs: beyond their measured reach (module constants) they are refused at once, naming
    the reach and what makes files that large (after what the runtime cannot load: 100,000 nodes name that);
    at the reach the method's own synthesize says nothing about size."""
    from colls.synth import check_size, milp, trees
    exe = TARGETS["exe"]
    assert most == {"trees": trees.MAX_GPUS_ALLREDUCE if kind == "allreduce" else trees.MAX_GPUS,
                    "milp": milp.MAX_GPUS_ALLTOALL if kind == "alltoall" else milp.MAX_GPUS}[method]
    check_size(method, Collective(kind, most), "here", exe)
    with pytest.raises(CollsError, match=f"{most + 1} GPUs is more than this method takes on (for an allreduce on "
                                         f"exe )?\\({most}"):
        check_size(method, Collective(kind, most + 1), "here", exe)
    if method == "trees" and kind == "allreduce":   # a limit of threadblocks per channel decides it: not on old
        check_size(method, Collective(kind, trees.MAX_GPUS), "here", TARGETS["old"])
    out = tmp_path / "x.xml"
    for nodes in (most // 8 + 1, 100_000):
        rc, stdout, stderr = shell.run(["synth", "--hardware", "dgx-a100", "--nodes", str(nodes), "--method", method,
                                        "--collective", kind, "-o", str(out)]
                                       + (["--root", "0"] if kind == "broadcast" else []))
        assert rc == 2, stderr
        if nodes < 1000:        # beyond, what the runtime cannot load is named first
            assert f"{8 * nodes} GPUs is more than this method takes on" in stderr
            assert ("--method hier" if kind != "broadcast" and kind != "alltoall" else
                    "fewer --nodes" if kind == "alltoall" else "--method ring") in stderr
        assert len(stderr.strip().splitlines()) == 1 and not out.exists() and not stdout
    topo = hardware.load_topology("dgx-a100", nodes=most // 8 + 1)
    with pytest.raises(CollsError, match="more than this method takes on"):
        pipeline.check_limits(topo, Collective(kind, topo.ngpus), method, TARGETS["exe"])


@pytest.mark.parametrize("kind", ["allreduce", "broadcast", "reduce"])
def test_rings_whose_segments_no_count_of_channels_holds_are_refused_up_front(kind):
    """A ring of 1,024 ranks runs 2,046 allreduce instructions per rank (a broadcast's chain spans as many
    steps): 33 segments of 64 steps, each on a channel of its own, and exe has 32: refused before the machine
    is built at any count of rings (the lowering refused it after 40 s); the allgather (1,023 steps, 17
    segments) is not, nor is anything for the older runtime's 256 steps."""
    coll = Collective(kind, 1024)      # the check takes ranks, not a machine
    with pytest.raises(LimitError, match="33 step segments of at most 64 steps on channels of their own, more "
                                         "than the 32 channels exe has at any count of rings"):
        pipeline.check_rank_limits(coll, "ring", TARGETS["exe"], where="here")
    with pytest.raises(LimitError, match="32 channels exe has; try"):
        pipeline.check_rank_limits(coll, "ring", TARGETS["exe"], options={"rings": 1}, where="here")
    pipeline.check_rank_limits(Collective("allgather", 1024), "ring", TARGETS["exe"], where="here")
    pipeline.check_rank_limits(coll, "ring", TARGETS["old"], where="here")


def test_an_alltoall_in_place_beyond_the_threadblocks_a_step_can_wait_on_is_refused_up_front():
    """32 x MI300X (256 GPUs, 304 CUs): in place, the last rank takes the blocks of 255 peers into scratch, each
    through the threadblock receiving from that peer, and copies them out on threadblocks that wait for those;
    a step names the one it waits on in an int8_t: refused before any synthesis (it took 5-7 s of planning and
    lowering), pointing to out-of-place calls, which pass this check."""
    topo = hardware.load_topology("mi300x", nodes=32)
    coll = Collective("alltoall", topo.ngpus)
    for method in ("direct", "ring"):
        with pytest.raises(LimitError, match=r"in place, GPU 255 takes the blocks of its 255 peers into scratch.*"
                                             r"int8_t dependentBid.*try out-of-place calls only"):
            pipeline.check_limits(topo, coll, method, TARGETS["exe"])
        pipeline.check_limits(topo, coll, method, TARGETS["exe"], options={"inplace": False})


@pytest.mark.parametrize("kind", ["reducescatter", "allreduce", "reduce"])
def test_a_direct_sum_beyond_the_threadblocks_a_step_can_wait_on_is_refused_up_front(kind):
    """A direct sum on 256 GPUs adds its 255 peers' blocks one after another, each receiving threadblock waiting
    for the one before: 254 threadblocks waited on, where a step names at most 128. Refused before synthesis
    (the lowering found it after 10-12 s); on 128 GPUs (126) the check lets it through to the lowering."""
    topo = hardware.load_topology("mi300x", nodes=32)
    with pytest.raises(LimitError, match=r"255 peers one after another.*254 threadblocks waited on.*int8_t dependentBid"):
        pipeline.check_limits(topo, Collective(kind, topo.ngpus), "direct", TARGETS["exe"])
    pipeline.check_limits(topo, Collective("allgather", topo.ngpus), "direct", TARGETS["exe"])
    smaller = hardware.load_topology("mi300x", nodes=16)
    pipeline.check_limits(smaller, Collective(kind, smaller.ngpus), "direct", TARGETS["exe"])


@pytest.mark.parametrize("kind", ["allgather", "reducescatter"])
def test_a_hierarchical_file_beyond_a_plans_threadblocks_is_refused_before_synthesis(kind):
    """1,024 GCDs of MI250 for an MSCCL++ plan: 3 threadblocks a GPU (colls proves 3,072 in all). A GCD sends to
    every GCD of its node it has an xGMI link to (up to 4) and to the next on its rail: 5 peers, a threadblock
    each, counted from the node's routes in milliseconds (the schedule alone took 3-5 s). 16 x DGX A100 (NVSwitch,
    7 peers and the rail: 8) fits the 24 a plan of 128 GPUs may hold, and is let through."""
    from colls.synth import hier
    topo = hardware.load_topology("mi250", nodes=64)
    coll = Collective(kind, topo.ngpus)
    assert hier.least_peers(topo, coll) == 5
    tgt, opts = pipeline._method_options(topo, coll, "hier", "exe", 1, {"proof_threadblocks": 3072})
    with pytest.raises(LimitError, match="hier .* on mi250 x64: a rank talks to 5 peers, one threadblock each, more "
                                         "than the 3 a plan of 1024 GPUs may hold .*; try fewer --nodes"):
        pipeline.check_limits(topo, coll, "hier", tgt, 1, opts)
    both = Collective("allreduce", topo.ngpus)      # its steps already: 318, more than 3 threadblocks hold
    tgt, opts = pipeline._method_options(topo, both, "hier", "exe", 1, {"proof_threadblocks": 3072})
    with pytest.raises(LimitError, match="at least 318 steps"):
        pipeline.check_limits(topo, both, "hier", tgt, 1, opts)
    a100 = hardware.load_topology("dgx-a100", nodes=16)
    coll = Collective(kind, a100.ngpus)
    assert hier.least_peers(a100, coll) == 8 and hier.least_peers(hardware.load_topology("dgx-a100"), coll) == 0
    tgt, opts = pipeline._method_options(a100, coll, "hier", "exe", 1, {"proof_threadblocks": 3072})
    pipeline.check_limits(a100, coll, "hier", tgt, 1, opts)
