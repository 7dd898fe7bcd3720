"""colls.verify: a valid program verifies; for each rule, a mutation that breaks only that rule is rejected
with that rule id and a finding that names where (gpu / tb / step)."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oracle
from colls.errors import CollsError
from colls.msccl import emit
from colls.program import STEP_TYPES, Gpu, Program, Step, Threadblock
from colls.verify import FIFO_MESSAGES, NCCL_STEPS, RULES, fifo_messages, verify, verify_text

DATA = Path(__file__).parent / "data"


def step(s, type, srcbuf="i", srcoff=-1, dstbuf="o", dstoff=-1, cnt=1, depid=-1, deps=-1, hasdep=0):
    return Step(s, type, srcbuf, srcoff, dstbuf, dstoff, cnt, depid, deps, hasdep)


def ring_allgather(n: int = 4) -> Program:
    """A ring allgather, one channel, valid in-place and out-of-place, using deps, hasdep and a nop.

    Rank r: tb 0 sends to r+1 (its own chunk from the input, then what tb 1 received); tb 1 receives from
    r-1 into the output; tb 2 copies the input into the output (a no-op in place).
    """
    gpus = []
    for r in range(n):
        tb0 = Threadblock(0, send=(r + 1) % n, recv=-1, chan=0, steps=[
            step(0, "s", "i", 0, "o", r),
            step(1, "s", "o", (r - 1) % n, "o", (r - 1) % n, depid=1, deps=0),
            step(2, "nop", cnt=0, depid=2, deps=0),
            step(3, "s", "o", (r - 2) % n, "o", (r - 2) % n, depid=1, deps=1),
        ])
        tb1 = Threadblock(1, send=-1, recv=(r - 1) % n, chan=0, steps=[
            step(0, "r", "o", (r - 1) % n, "o", (r - 1) % n, hasdep=1),
            step(1, "r", "o", (r - 2) % n, "o", (r - 2) % n, hasdep=1),
            step(2, "r", "o", (r - 3) % n, "o", (r - 3) % n),
        ])
        tb2 = Threadblock(2, send=-1, recv=-1, chan=0, steps=[step(0, "cpy", "i", 0, "o", r, hasdep=1)])
        gpus.append(Gpu(r, 1, n, 0, [tb0, tb1, tb2]))
    return Program("ring_allgather", "allgather", n, n, 1, "Simple", 1, 1, 0, 0, gpus)


def tb(p: Program, g: int, t: int) -> Threadblock:
    return p.gpus[g].tbs[t]


def at(p: Program, g: int, t: int, s: int) -> Step:
    return p.gpus[g].tbs[t].steps[s]


def synthetic(ngpus: int, coll: str = "gather") -> Program:
    """A program of a collective the model does not cover (structure only), no thread blocks yet."""
    gpus = [Gpu(r, 1, 1, 0, []) for r in range(ngpus)]
    return Program("synthetic", coll, ngpus, 1, 1, "Simple", 0, 1, 0, 0, gpus)


def assert_located(report, rule, gpu=None, tb_id=None, step_index=None):
    found = [f for f in report.findings if f.rule == rule]
    assert found, report.format()
    f = found[0]
    assert (f.gpu, f.tb, f.step) == (gpu, tb_id, step_index), str(f)
    text = str(f)
    for name, value in (("gpu", gpu), ("tb", tb_id), ("step", step_index)):
        if value is not None:
            assert f"{name} {value}" in text
    return f


def test_the_base_program_is_valid_everywhere():
    p = ring_allgather()
    for target in ("exe", "rccl", "old"):
        report = verify(p, target)
        assert report.ok, report.format()
        assert report.findings == []
    report = verify(p, "exe")
    assert report.facts["checked"] == ["in-place", "out-of-place"]
    assert report.facts["deadlock_free"] is True
    assert report.facts["semantics_checked"] is True
    assert report.facts["chunk_factor"] == 1
    assert report.facts["max_steps_per_tb"] == 4 and report.facts["max_tbs_per_gpu"] == 3
    assert "VALID for exe" in report.format()


def test_the_emitted_base_program_verifies_as_text():
    report = verify_text(emit(ring_allgather()), "ring4.xml", "exe")
    assert report.ok, report.format()
    assert report.findings == []


# --- one mutation per rule ----------------------------------------------------------------------------

def _add_empty_tbs(p, g, ids):
    p.gpus[g].tbs.extend(Threadblock(i, -1, -1, 0, []) for i in ids)


def m_missing_minbytes(p):
    p.min_bytes = None


def m_unknown_coll(p):
    p.coll = "allgathr"


def m_unknown_proto(p):
    p.proto = "LL64"


def m_ngpus(p):
    p.ngpus = 5


def m_gpu_id(p):
    p.gpus[3].id = 7


def m_gpu_attr(p):
    p.gpus[0].s_chunks = None


def m_tb_attr(p):
    tb(p, 0, 2).chan = None


def m_declared_short(p):
    p.gpus[1].o_chunks = 3                     # gpu 1 still sends and receives output chunk 3


def m_tb_id(p):
    tb(p, 0, 2).id = 3
    at(p, 0, 0, 2).depid = 3


def m_tb_peer(p):
    tb(p, 0, 2).send = 0


def m_tb_chan(p):
    tb(p, 0, 2).chan = 1


def m_limit_steps(p):
    tb(p, 0, 2).steps += [step(i, "cpy", "i", 0, "o", 0) for i in range(1, 65)]


def m_conn_duplicate(p):
    p.gpus[0].tbs.append(Threadblock(3, send=1, recv=-1, chan=0, steps=[]))


def m_step_attr(p):
    at(p, 0, 2, 0).hasdep = None


def m_step_index_64(p):
    at(p, 0, 0, 1).s = 64                      # the loader checks each s against the step limit


def m_step_type(p):
    at(p, 0, 2, 0).type = "copy"


def m_step_buffer(p):
    at(p, 0, 0, 2).srcbuf = "x"


def m_step_offset(p):
    at(p, 0, 2, 0).dstoff = 4


def m_step_cnt_zero(p):
    at(p, 0, 2, 0).cnt = 0


def m_step_cnt_72(p):
    at(p, 0, 2, 0).cnt = 72


def m_no_send_peer(p):
    at(p, 0, 2, 0).type = "s"


def m_no_recv_peer(p):
    at(p, 0, 2, 0).type = "r"


def m_dep_target(p):
    at(p, 0, 0, 1).depid = 7


def m_dep_self(p):
    at(p, 0, 0, 1).depid = 0


def m_dep_overflow(p):
    tb(p, 0, 2).id = 129
    at(p, 0, 0, 2).depid = 129
    _add_empty_tbs(p, 0, range(2, 129))


def m_hasdep_value(p):
    at(p, 0, 1, 2).hasdep = 2


def m_hasdep_missing(p):
    at(p, 0, 1, 1).hasdep = 0                  # tb 0 step 3 waits on it; no later step publishes: a hang


def m_nop_no_dep(p):
    """A dependency-free nop at the head of gpu 0's receiving block, the waits written by position:
    the kernel numbers the receives one lower, so tb 0 waits for one receive more than meant."""
    steps = tb(p, 0, 1).steps
    steps.insert(0, step(0, "nop", cnt=0))
    for i, s in enumerate(steps):
        s.s = i
    at(p, 0, 0, 1).deps, at(p, 0, 0, 3).deps = 1, 2


def m_nop_unanchored(p):
    nop, last = at(p, 0, 0, 2), at(p, 0, 0, 3)
    nop.depid, nop.deps = last.depid, last.deps
    last.depid = last.deps = -1


def m_limit_tbs_old(p):
    _add_empty_tbs(p, 0, range(3, 218))


def m_limit_channels(p):
    p.nchannels = 33


def m_bytes(p):
    p.min_bytes, p.max_bytes = 100, 10


def m_never(p):
    p.inplace = p.outofplace = 0


def m_conn_mismatch(p):
    at(p, 1, 0, 1).cnt = 2


def m_conn_unmatched(p):
    tb(p, 1, 1).steps.pop()


def m_deadlock(p):
    at(p, 0, 1, 0).depid, at(p, 0, 1, 0).deps = 0, 1
    at(p, 0, 0, 1).hasdep = 1


def m_uninitialised(p):
    p.gpus[0].s_chunks = 1
    s = at(p, 0, 0, 0)
    s.srcbuf, s.srcoff = "s", 0


def m_input_write(p):
    p.inplace = 0
    tb(p, 0, 0).steps.append(step(4, "cpy", "o", 0, "i", 0))


# rule, mutation, where the finding must point (gpu, tb, step), verify() keywords
MUTATIONS = [
    ("algo-attr-missing", m_missing_minbytes, (None, None, None), {}),
    ("coll-unknown", m_unknown_coll, (None, None, None), {}),
    ("proto-unknown", m_unknown_proto, (None, None, None), {}),
    ("ngpus-mismatch", m_ngpus, (None, None, None), {}),
    ("gpu-id", m_gpu_id, (7, None, None), {}),
    ("gpu-attr-missing", m_gpu_attr, (0, None, None), {}),
    ("tb-attr-missing", m_tb_attr, (0, 2, None), {}),
    ("step-offset", m_declared_short, (1, 0, 3), {}),
    ("tb-id", m_tb_id, (0, None, None), {}),
    ("tb-peer", m_tb_peer, (0, 2, None), {}),
    ("tb-chan", m_tb_chan, (0, 2, None), {}),
    ("limit-steps", m_limit_steps, (0, 2, None), {}),
    ("conn-duplicate", m_conn_duplicate, (0, 3, None), {}),
    ("step-attr-missing", m_step_attr, (0, 2, 0), {}),
    ("limit-steps", m_step_index_64, (0, 0, 1), {}),
    ("step-type", m_step_type, (0, 2, 0), {}),
    ("step-buffer", m_step_buffer, (0, 0, 2), {}),
    ("step-offset", m_step_offset, (0, 2, 0), {}),
    ("step-cnt", m_step_cnt_zero, (0, 2, 0), {}),
    ("step-cnt", m_step_cnt_72, (0, 2, 0), {}),
    ("step-no-send-peer", m_no_send_peer, (0, 2, 0), {}),
    ("step-no-recv-peer", m_no_recv_peer, (0, 2, 0), {}),
    ("dep-target", m_dep_target, (0, 0, 1), {}),
    ("dep-target", m_dep_self, (0, 0, 1), {}),
    ("dep-tb-overflow", m_dep_overflow, (0, 0, 2), {}),
    ("hasdep-value", m_hasdep_value, (0, 1, 2), {}),
    ("deadlock", m_hasdep_missing, (0, 0, 3), {}),
    ("deadlock", m_nop_no_dep, (0, 0, 3), {}),
    ("nop-unanchored", m_nop_unanchored, (0, 0, 3), {}),
    ("limit-tbs", m_limit_tbs_old, (0, None, None), {"target": "old"}),
    ("limit-sms", lambda p: None, (0, None, None), {"sms": 2}),
    ("limit-channels", m_limit_channels, (None, None, None), {}),
    ("bytes-range", m_bytes, (None, None, None), {}),
    ("never-selected", m_never, (None, None, None), {}),
    ("conn-mismatch", m_conn_mismatch, (1, 0, 1), {}),
    ("conn-unmatched", m_conn_unmatched, (0, 0, 3), {}),
    ("deadlock", m_deadlock, (0, 0, 1), {}),
    ("uninitialised-read", m_uninitialised, (0, 0, 0), {}),
    ("input-write", m_input_write, (0, 0, 4), {}),
]


# mutations whose error is a consequence: the warning that names the cause comes with it
WARNS_TOO = {m_hasdep_missing: "hasdep-missing", m_nop_no_dep: "nop-no-dep"}


@pytest.mark.parametrize("rule, mutate, where, kwargs", MUTATIONS,
                         ids=[f"{m[0]}:{m[1].__name__}" for m in MUTATIONS])
def test_each_mutation_breaks_exactly_its_rule(rule, mutate, where, kwargs):
    p = ring_allgather()
    mutate(p)
    kwargs = dict(kwargs)
    target = kwargs.pop("target", "exe")
    report = verify(p, target, **kwargs)
    assert not report.ok
    assert report.rules() == {rule}, report.format()
    assert_located(report, rule, *where)
    if mutate in WARNS_TOO:
        assert WARNS_TOO[mutate] in report.rules(None), report.format()
    assert report.findings[0].severity == "error"          # errors come first
    assert report.format().splitlines()[-1].endswith(
        f"{len(report.errors)} error{'s' if len(report.errors) != 1 else ''}, "
        f"{len(report.warnings)} warning{'s' if len(report.warnings) != 1 else ''}")


def test_the_mutations_do_not_touch_the_base():
    before = emit(ring_allgather())
    for _, mutate, _, _ in MUTATIONS:
        p = ring_allgather()
        mutate(p)
    assert emit(ring_allgather()) == before


def test_missing_attribute_message_is_the_runtimes():
    p = ring_allgather()
    p.min_bytes = None
    f = verify(p, "exe").errors[0]
    assert "Attribute minBytes of node algo not found" in f.message
    assert "will not load" in str(f) and f.effect == "will not load"
    assert verify(p, "old").ok               # OLD does not read minBytes


def test_name_is_required_by_old_only():
    p = ring_allgather()
    p.name = None
    assert verify(p, "exe").ok
    assert verify(p, "old").rules() == {"algo-attr-missing"}


def test_chan_32_is_refused_even_with_33_channels():
    p = ring_allgather()
    p.nchannels = 32
    tb(p, 0, 2).chan = 31
    assert verify(p, "exe").ok
    tb(p, 0, 2).chan = 32
    assert verify(p, "exe").rules() == {"tb-chan"}


def test_limit_tbs_per_channel():
    p = synthetic(34)
    p.gpus[0].tbs = [Threadblock(i, send=i + 1, recv=-1, chan=0, steps=[]) for i in range(33)]
    report = verify(p, "exe")
    assert report.rules() == {"limit-tbs-per-channel"}, report.format()
    assert_located(report, "limit-tbs-per-channel", 0)
    assert "correctness-unchecked" in report.rules(None)
    p.gpus[0].tbs.pop()
    assert verify(p, "exe").errors == []


def test_limit_elements_per_rank():
    p = synthetic(2)
    p.gpus[0].tbs = [Threadblock(t, -1, -1, 0, [step(i, "cpy", "i", 0, "o", 0) for i in range(63)])
                     for t in range(65)]
    report = verify(p, "exe")
    assert report.rules() == {"limit-elements"}, report.format()
    assert_located(report, "limit-elements", 0)
    # 1 algo + 2 gpu + 64 tbs + 64 x 63 steps = 4099 >= 4096; 61 thread blocks: 3907 fits
    del p.gpus[0].tbs[61:]
    assert verify(p, "exe").errors == []
    assert verify(p, "old").rules() == set()


def test_limit_children_per_element():
    p = synthetic(1025)
    report = verify(p, "exe")
    assert report.rules() == {"limit-children"}, report.format()
    assert verify(synthetic(1024), "exe").errors == []


def test_nop_followed_by_a_step_without_dependency_is_rejected():
    p = ring_allgather()
    at(p, 0, 0, 3).depid = at(p, 0, 0, 3).deps = -1
    report = verify(p, "exe")
    f = assert_located(report, "nop-unanchored", 0, 0, 3)
    assert "rejects" in f.message
    assert "race" in report.rules()          # and without the dependency the send reads too early


def test_re_fusion_with_different_cnt():
    # 2-rank allreduce, 2 chunks: the two re steps share dst o0 and src buffer s, so the loader fuses them
    gpus = []
    for r in range(2):
        gpus.append(Gpu(r, 2, 2, 2, [Threadblock(0, 1 - r, 1 - r, 0, [
            step(0, "s", "i", 0, "s", 0, cnt=2),
            step(1, "r", "i", 0, "s", 0, cnt=2),
            step(2, "cpy", "i", 0, "o", 0, cnt=2),
            step(3, "re", "s", 0, "o", 0, cnt=2),
            step(4, "re", "s", 1, "o", 0, cnt=1),
        ])]))
    p = Program("fuse", "allreduce", 2, 2, 1, "Simple", 0, 1, 0, 0, gpus)
    report = verify(p, "exe")
    f = assert_located(report, "re-fusion", 0, 0, 4)
    assert "cnt=1" in f.message and "cnt=2" in f.message


def test_step_overlap():
    p = ring_allgather()
    tb(p, 0, 2).steps.append(step(1, "cpy", "o", 0, "o", 1, cnt=2))
    report = verify(p, "exe")
    assert_located(report, "step-overlap", 0, 2, 1)


# --- communication, deadlock, races, semantics -------------------------------------------------------

def test_fifo_constant_and_protocols():
    assert NCCL_STEPS == 8 and FIFO_MESSAGES == 2
    assert fifo_messages("Simple") == 2
    assert fifo_messages("LL") == fifo_messages("LL128") == 8


def test_deadlock_names_the_cycle_and_what_each_block_waits_for():
    p = ring_allgather()
    m_deadlock(p)
    report = verify(p, "exe")
    cycle = [f for f in report.errors if "wait cycle" in f.message]
    assert cycle, report.format()
    assert "gpu 0 tb 0 step 1 -> gpu 0 tb 1 step 0 -> gpu 0 tb 0 step 1" in cycle[0].message
    stuck = [f for f in report.errors if f.rule == "deadlock" and "never finishes" in f.message]
    assert any("waits for tb 1 step 0" in f.message for f in stuck)
    assert any("waits to receive" in f.message for f in stuck)
    assert report.facts["deadlock_free"] is False
    assert "semantics-skipped" in report.rules(None)


def test_receive_before_send_on_both_ranks_deadlocks():
    gpus = [Gpu(r, 1, 2, 0, [Threadblock(0, 1 - r, 1 - r, 0, [
        step(0, "r", "o", 0, "o", 1 - r), step(1, "s", "i", 0, "o", r)])]) for r in range(2)]
    p = Program("rr", "allgather", 2, 2, 1, "Simple", 0, 1, 0, 0, gpus)
    report = verify(p, "exe")
    assert report.rules() == {"deadlock"}
    assert "waits to receive message #1 from gpu 1" in report.errors[1].message


def _two_connections(proto: str) -> Program:
    """gpu 0 sends 3 chunks on channel 0, then (after that send) 1 on channel 1; gpu 1 receives the 3
    chunks only after the 1. Fine if a 3-chunk step is one message; a hang when each chunk is one."""
    g0 = Gpu(0, 3, 6, 0, [
        Threadblock(0, 1, -1, 0, [step(0, "s", "i", 0, "o", 0, cnt=3, hasdep=1)]),
        Threadblock(1, 1, -1, 1, [step(0, "s", "i", 0, "o", 3, depid=0, deps=0)]),
    ])
    g1 = Gpu(1, 3, 6, 0, [
        Threadblock(0, -1, 0, 0, [step(0, "r", "o", 0, "o", 0, cnt=3, depid=1, deps=0)]),
        Threadblock(1, -1, 0, 1, [step(0, "r", "o", 3, "o", 3, hasdep=1)]),
    ])
    return Program("big", "allgather", 2, 6, 2, proto, 0, 1, 0, 0, [g0, g1])


def test_deadlock_only_when_each_chunk_is_its_own_message():
    report = verify(_two_connections("Simple"), "exe")
    dead = [f for f in report.errors if f.rule == "deadlock"]
    assert dead and "maxAllowedCount" in dead[0].message, report.format()
    assert all(f.calls and "bytes or more" in f.calls for f in dead)
    # LL keeps 8 messages in flight: the 3 chunks fit
    assert "deadlock" not in verify(_two_connections("LL"), "exe").rules()


def test_racing_writes_name_both_steps():
    p = ring_allgather()
    s = at(p, 0, 2, 0)
    s.dstoff = 3                                  # tb 1 step 0 receives into output chunk 3 as well
    report = verify(p, "exe")
    races = [f for f in report.errors if f.rule == "race"]
    assert races, report.format()
    assert "gpu 0 tb 2 step 0" in races[0].message and "gpu 0 tb 1 step 0" in races[0].message
    assert "output chunk 3" in races[0].message


def test_a_missing_dependency_is_a_read_write_race():
    p = ring_allgather()
    at(p, 2, 0, 1).depid = at(p, 2, 0, 1).deps = -1    # gpu 2 forwards o[1] without waiting for it
    report = verify(p, "exe")
    assert "race" in report.rules(), report.format()
    f = [f for f in report.errors if f.rule == "race"][0]
    assert "gpu 2 tb 0 step 1 reads output chunk 1" in f.message
    assert "gpu 2 tb 1 step 0 writes it" in f.message


def allreduce2(extra_re: bool) -> Program:
    gpus = []
    for r in range(2):
        steps = [step(0, "s", "i", 0, "o", 0), step(1, "rrc", "i", 0, "o", 0)]
        if extra_re and r == 0:
            steps.append(step(2, "re", "i", 0, "o", 0))
        gpus.append(Gpu(r, 1, 1, 0, [Threadblock(0, 1 - r, 1 - r, 0, steps)]))
    return Program("ar", "allreduce", 2, 1, 1, "Simple", 0, 1, 0, 0, gpus)


def test_wrong_sum_counts_a_chunk_twice():
    assert verify(allreduce2(False), "exe").ok
    report = verify(allreduce2(True), "exe")
    assert report.rules() == {"double-count"}, report.format()
    f = assert_located(report, "double-count", 0, 0, 2)
    assert "input 0 of rank 0 twice" in f.message


def in_place_breaker(inplace: int, outofplace: int) -> Program:
    """Correct out of place; in place, the receive into o[r] overwrites the rank's own input first."""
    gpus = []
    for r in range(2):
        peer = 1 - r
        gpus.append(Gpu(r, 1, 2, 0, [Threadblock(0, peer, peer, 0, [
            step(0, "s", "i", 0, "o", r),
            step(1, "r", "o", r, "o", r),
            step(2, "cpy", "o", r, "o", peer),
            step(3, "cpy", "i", 0, "o", r),
        ])]))
    return Program("ip", "allgather", 2, 2, 1, "Simple", inplace, outofplace, 0, 0, gpus)


def test_correct_out_of_place_but_wrong_in_place():
    assert verify(in_place_breaker(0, 1), "exe").ok
    report = verify(in_place_breaker(1, 1), "exe")
    assert report.rules() == {"postcondition"}, report.format()
    messages = [f.message for f in report.errors]
    assert "gpu 0: in-place: output chunk 0 holds input 0 of rank 1, expected input 0 of rank 0" in messages
    assert all("in-place" in m for m in messages)
    assert verify(in_place_breaker(1, 0), "exe").rules() == {"postcondition"}


def test_uninitialised_data_reaching_an_output():
    p = ring_allgather()
    m_uninitialised(p)
    f = verify(p, "exe").errors[0]
    assert "scratch chunk 0" in f.message and "before anything was written" in f.message


def test_input_write_only_out_of_place():
    p = ring_allgather()
    tb(p, 0, 0).steps.append(step(4, "cpy", "o", 0, "i", 0))
    report = verify(p, "exe")                     # in place the copy is a no-op; out of place it is not
    assert report.rules() == {"input-write"}
    assert all("out-of-place" in f.message for f in report.errors)


def test_uncovered_collective_gets_a_warning():
    p = ring_allgather()
    p.coll = "gather"
    report = verify(p, "exe")
    assert report.errors == [] and not report.ok and report.verdict == "unproven"
    assert "correctness-unchecked" in report.rules(None)
    assert report.facts["semantics_checked"] is False
    assert "NOT PROVEN for exe" in report.format() and "gather" in report.format()


def test_structural_errors_skip_semantics_and_say_so():
    p = ring_allgather()
    m_conn_unmatched(p)
    report = verify(p, "exe")
    skipped = [f for f in report.warnings if f.rule == "semantics-skipped"]
    assert skipped and "conn-unmatched" in skipped[0].message


# --- other generators' files ------------------------------------------------------------------------

def test_msccl_tools_allgather_lacks_three_attributes_then_verifies():
    text = (DATA / "msccl_tools_allgather_ring8.xml").read_text()
    report = verify_text(text, "msccl_tools_allgather_ring8.xml", "exe")
    assert report.rules() == {"algo-attr-missing"}
    missing = sorted(re.search(r"Attribute (\w+) of node algo", f.message).group(1) for f in report.errors)
    assert missing == ["maxBytes", "minBytes", "outofplace"]
    fixed = text.replace('inplace="1">', 'inplace="1" outofplace="0" minBytes="0" maxBytes="0">', 1)
    for target in ("exe", "rccl", "old"):
        report = verify_text(fixed, "fixed.xml", target)
        assert report.ok, report.format()
        assert report.facts["checked"] == ["in-place"]
        assert report.facts["ngpus"] == 8


def test_taccl_reduce_scatter_spelling():
    text = (DATA / "taccl_reduce_scatter_ring4.xml").read_text()
    report = verify_text(text, "taccl.xml", "exe")
    f = [f for f in report.errors if f.rule == "coll-unknown"][0]
    assert 'coll="reducescatter"' in f.message
    assert verify_text(text, "taccl.xml", "rccl").rules() == report.rules()
    old = verify_text(text, "taccl.xml", "old")
    assert old.ok, old.format()
    assert old.facts["kind"] == "reducescatter" and old.facts["semantics_checked"]
    # the other way round
    respelled = text.replace('coll="reduce_scatter"', 'coll="reducescatter"')
    f = [f for f in verify_text(respelled, "x.xml", "old").errors if f.rule == "coll-unknown"][0]
    assert 'coll="reduce_scatter"' in f.message
    for_exe = respelled.replace('redop="nop"', 'redop="nop" outofplace="1" minBytes="0" maxBytes="0"')
    assert verify_text(for_exe, "x.xml", "exe").ok


def test_verify_text_reports_format_findings_first_and_raises_on_garbage():
    text = '<?xml version="1.0"?>\n' + emit(ring_allgather())
    report = verify_text(text, "decl.xml", "exe")
    assert report.rules() == {"xml-declaration"}
    assert report.errors[0].line == 1
    with pytest.raises(CollsError, match=r"^junk\.xml: "):
        verify_text("this is not xml", "junk.xml", "exe")


def test_report_as_plain_data():
    import json
    p = ring_allgather()
    m_deadlock(p)
    data = json.loads(json.dumps(verify(p, "exe", source="d.xml").to_dict()))
    assert data["ok"] is False and data["source"] == "d.xml" and data["target"] == "exe"
    assert data["findings"][0]["rule"] == "deadlock" and data["findings"][0]["gpu"] == 0
    assert data["facts"]["deadlock_free"] is False


def test_offsets_beyond_int16_are_refused():
    p = synthetic(2)
    for g in p.gpus:
        g.i_chunks = g.o_chunks = 40000
    p.gpus[0].tbs = [Threadblock(0, -1, -1, 0, [step(0, "cpy", "i", 32767, "o", 32767),
                                                 step(1, "cpy", "i", 32768, "o", 0)])]
    report = verify(p, "exe")
    assert report.rules() == {"step-offset"}
    assert_located(report, "step-offset", 0, 0, 1)


def test_verify_accepts_target_names_and_rejects_unknown_ones():
    assert verify(ring_allgather(), "rccl").target == "rccl"
    with pytest.raises(CollsError):
        verify(ring_allgather(), "nccl")


# --- scale and laws ----------------------------------------------------------------------------------

def multi_ring(n: int, rings: int, proto: str = "Simple") -> Program:
    """In-place allgather over 2 x ``rings`` rings (a forward and a backward one), one channel each."""
    c = 2 * rings
    gpus = []
    for r in range(n):
        tbs = []
        for k in range(c):
            d = 1 if k % 2 == 0 else -1
            steps = [step(0, "s", "o", r * c + k, "o", r * c + k)]
            for h in range(1, n):
                src = ((r - d * h) % n) * c + k
                steps.append(step(h, "rcs" if h < n - 1 else "r", "o", src, "o", src))
            tbs.append(Threadblock(k, (r + d) % n, (r - d) % n, k, steps))
        gpus.append(Gpu(r, c, n * c, 0, tbs))
    return Program("multi", "allgather", n, n * c, c, proto, 1, 0, 0, 0, gpus)


def test_a_larger_program_verifies():
    report = verify(multi_ring(16, 8), "exe")
    assert report.ok, report.format()
    assert report.facts["max_tbs_per_gpu"] == 16 and report.facts["max_steps_per_tb"] == 16


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 9), rings=st.integers(1, 3), proto=st.sampled_from(["Simple", "LL", "LL128"]))
def test_every_ring_allgather_verifies(n, rings, proto):
    p = multi_ring(n, rings, proto)
    assert verify(p, "exe").ok
    assert verify_text(emit(p), "ring.xml", "rccl").ok


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 6), g=st.data())
def test_dropping_any_receive_is_caught(n, g):
    p = multi_ring(n, 1)
    rank = g.draw(st.integers(0, n - 1))
    k = g.draw(st.integers(1, n - 1))
    victim = copy.deepcopy(p)
    victim.gpus[rank].tbs[0].steps[k].type = "s" if k == n - 1 else "r"
    assert not verify(victim, "exe").ok


def test_every_rule_is_exercised():
    exercised = {m[0] for m in MUTATIONS} | {
        "limit-tbs-per-channel", "limit-elements", "limit-children", "re-fusion", "step-overlap", "race",
        "double-count", "postcondition", "semantics-skipped", "correctness-unchecked",
        "hasdep-missing", "nop-no-dep",                  # with the mutations that now hang
    } | {  # tests/test_verify_files.py
        "root-fixed", "chunks-mismatch", "format-doctype", "chunks-per-loop", "step-index", "step-bounds",
        "nop-trailing",
    }
    parser_rules = {"xml-declaration", "format-tab", "format-multiline-tag", "format-single-quote",
                    "format-number", "format-too-many-attrs", "format-long-value", "format-text",
                    "format-comment", "unknown-element", "attr-unknown"}     # tests/test_msccl.py
    exercised.add("root-assumed")                        # test_root_of_a_broadcast_is_inferred
    exercised.add("bytes-unreachable")                   # tests/test_cli.py, a minBytes beyond any call
    exercised.add("machine-ranks")                       # tests/test_cli.py, a file of 8 GPUs on 16
    assert set(RULES) - exercised - parser_rules == set()


def test_root_of_a_broadcast_is_inferred():
    # rank 1 broadcasts to ranks 0 and 2 along a chain 1 -> 0 -> 2
    g0 = Gpu(0, 1, 1, 0, [Threadblock(0, 2, 1, 0, [step(0, "rcs", "i", 0, "o", 0)])])
    g1 = Gpu(1, 1, 1, 0, [Threadblock(0, 0, -1, 0, [step(0, "s", "i", 0, "o", 0), step(1, "cpy", "i", 0, "o", 0)])])
    g2 = Gpu(2, 1, 1, 0, [Threadblock(0, -1, 0, 0, [step(0, "r", "i", 0, "o", 0)])])
    p = Program("bc", "broadcast", 3, 1, 1, "Simple", 0, 1, 0, 0, [g0, g1, g2])
    assert verify(p, "exe").ok
    g2.tbs[0].recv = -1
    g2.tbs[0].steps = []
    g0.tbs[0].send = -1
    g0.tbs[0].steps[0].type = "r"
    report = verify(p, "exe")                           # now two ranks receive nothing: root unknown
    assert "root-assumed" in report.rules(None)


# --- an independent oracle (tests/oracle.py): a verified program is right in every execution order ---------

BASES = {"ring": ring_allgather, "multi": lambda: multi_ring(3, 1), "allreduce": lambda: allreduce2(False),
         "in-place-breaker": lambda: in_place_breaker(0, 1)}


def test_the_oracle_sees_a_race_and_a_hang():
    """The oracle the test above trusts: without the dependency that orders a forward after its receive, some
    random orders send garbage and others do not; a send that waits for its own rank's receive hangs."""
    import random
    racy = ring_allgather()
    for g in racy.gpus:
        g.tbs[0].steps[1].depid = g.tbs[0].steps[1].deps = -1
    right = [oracle.computes(racy, False, random.Random(seed)) for seed in range(20)]
    assert any(right) and not all(right)
    assert all(oracle.computes(ring_allgather(), False, random.Random(seed)) for seed in range(5))
    stuck = ring_allgather()
    for g in stuck.gpus:
        g.tbs[0].steps[0].depid, g.tbs[0].steps[0].deps = 1, 0
    assert oracle.run(stuck, False, random.Random(0)) is None


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_a_verified_program_is_right_in_every_execution_order(data):
    """Mutate valid programs at random: verify never crashes, and whenever it says valid, random
    execution orders all finish with the right outputs (so its race and deadlock verdicts hold)."""
    p = BASES[data.draw(st.sampled_from(sorted(BASES)))]()
    for _ in range(data.draw(st.integers(1, 2))):
        s = data.draw(st.sampled_from([s for g in p.gpus for b in g.tbs for s in b.steps]))
        field = data.draw(st.sampled_from(["srcoff", "dstoff", "depid", "deps", "hasdep", "type", "srcbuf",
                                            "dstbuf"]))
        value = (data.draw(st.sampled_from(STEP_TYPES)) if field == "type"
                 else data.draw(st.sampled_from("ios")) if field.endswith("buf")
                 else data.draw(st.integers(-1, 4)))
        setattr(s, field, value)
    oracle.verdict_holds(p, seeds=8)
