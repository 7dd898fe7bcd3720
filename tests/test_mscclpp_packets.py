"""MSCCL++ packet plans (the LL protocol): written from the Programs colls makes, proved by the plan verifier
(packets polled by flag, two scratch halves), and mutated packet plans rejected with the rule that names the
fault."""

import pytest

from colls import mscclpp
from colls.errors import CollsError
from colls.runtimes import mscclpp as rt
from colls.verify.plan import verify_plan
from test_mscclpp import CASES, program, topo

# the XML program's ring threadblock makes every step of its rings: more than 64 ops (compile and synth cut it)
REFUSED = {(2, "ring", "reducescatter"), (2, "ring", "allreduce")}


def packet_plan(nodes=1, method="ring", kind="allgather"):
    return mscclpp.plan_of(program(nodes, method, kind), topo(nodes), name=f"{method}-{kind}-ll", protocol="LL")


@pytest.mark.parametrize("nodes,method,kind", CASES, ids=lambda v: str(v))
def test_packet_plans_are_proved_for_every_call_type(nodes, method, kind):
    prog = program(nodes, method, kind)
    if (nodes, method, kind) in REFUSED:
        with pytest.raises(CollsError, match="at most 64 per threadblock"):
            packet_plan(nodes, method, kind)
        return
    plan = packet_plan(nodes, method, kind)
    assert plan["protocol"] == "LL" and plan["use_double_scratch_buffer"] is True
    assert len({g["scratch_chunks"] for g in plan["gpus"]}) == 1
    names = {op["name"] for g in plan["gpus"] for tb in g["threadblocks"] for op in tb["ops"]}
    assert names & {"ppkt", "rppkt"} and names & {"upkt", "repkt", "respkt"}
    assert not names & {"signal", "wait", "put", "pws", "pipeline"}, names      # packets carry their flag
    if nodes == 2:
        assert {"cpkt", "rppkt"} <= names       # across nodes: packed in scratch, put by the proxy
    for inplace in sorted({False} | ({True} if prog.inplace else set())):
        report = verify_plan(plan, kind, "p.json", inplace=inplace)
        assert report.ok and report.facts["semantics_checked"], [str(f) for f in report.findings]


def test_packet_plans_are_deterministic_and_read_back():
    a, b = packet_plan(2, "trees", "allreduce"), packet_plan(2, "trees", "allreduce")
    assert mscclpp.dumps(a) == mscclpp.dumps(b)
    again = mscclpp.program_of(mscclpp.load(mscclpp.dumps(a), "p.json"), topo(2), "p.json")
    assert mscclpp.dumps(mscclpp.plan_of(again, topo(2), name=a["name"], protocol="LL")) == mscclpp.dumps(a)


def test_raw_staging_sits_past_the_packets():
    """A reduce-and-send step keeps its sum in raw scratch past the packets (whose offsets the kernel doubles)."""
    plan = packet_plan(1, "ring", "allreduce")
    for g in plan["gpus"]:
        keeps, packet_end = [], 0
        for tb in g["threadblocks"]:
            for op in tb["ops"]:
                if op["name"] == "respkt" and op["dst_buff"][0]["type"] == "s":     # rrs (rrcs keeps it in o)
                    keeps.append(op["dst_buff"][0])
                for j in (range(1, len(op["src_buff"])) if op["name"] == "respkt" else
                          range(len(op["src_buff"])) if op["name"] == "upkt" else ()):
                    b = op["src_buff"][j]
                    packet_end = max(packet_end, b["index"] + b["size"])
        assert keeps and all(k["index"] >= rt.PACKET_SCRATCH_FACTOR * packet_end for k in keeps)
        assert max(k["index"] + k["size"] for k in keeps) <= rt.PACKET_SCRATCH_FACTOR * g["scratch_chunks"]


def rules(plan, kind="allgather"):
    report = verify_plan(plan, kind, "p.json")
    return {f.rule for f in report.findings if f.severity == "error"}


def first(plan, name):
    for g in plan["gpus"]:
        for tb in g["threadblocks"]:
            for k, op in enumerate(tb["ops"]):
                if op["name"] == name:
                    return tb, k, op
    raise AssertionError(name)


def test_mutant_one_scratch_half_lets_the_next_call_overwrite_unread_packets():
    plan = packet_plan(2, "ring", "allgather")
    assert not rules(plan)
    plan["use_double_scratch_buffer"] = False
    assert rules(plan) & {"plan-slot-race", "plan-race", "plan-deadlock"}


def test_mutant_packets_in_a_simple_plan():
    plan = packet_plan()
    plan["protocol"] = "Simple"
    assert "plan-packet-protocol" in rules(plan)


def test_mutant_scratch_sizes_differ():
    plan = packet_plan()
    plan["gpus"][1]["scratch_chunks"] += 1
    assert "plan-packet-scratch" in rules(plan)


def test_mutant_missing_unpack():
    plan = packet_plan()
    tb, k, _ = first(plan, "upkt")
    del tb["ops"][k]
    assert "plan-postcondition" in rules(plan)


def test_mutant_two_messages_into_one_place():
    plan = packet_plan()
    _, _, op = first(plan, "ppkt")
    op["dst_buff"][0]["index"] += 1
    assert "plan-packet-reuse" in rules(plan)


def test_mutant_packet_op_in_a_pipeline():
    plan = packet_plan()
    tb, k, op = first(plan, "ppkt")
    tb["ops"][k] = {"name": "pipeline", "iter_context": {"unit_size": 1 << 20, "num_chunks": 1}, "ops": [op]}
    assert "plan-pipeline" in rules(plan)


def test_mutant_packets_read_outside_scratch():
    plan = packet_plan()
    _, _, op = first(plan, "upkt")
    op["src_buff"][0]["type"] = "i"
    assert "plan-packet-form" in rules(plan)


def test_mutant_packets_copied_as_data():
    plan = packet_plan()
    tb, k, op = first(plan, "upkt")
    tb["ops"][k] = {"name": "copy", "src_buff": op["src_buff"], "dst_buff": op["dst_buff"]}
    assert "plan-packet-form" in rules(plan)


def test_mutant_ppkt_over_a_port_channel():
    plan = packet_plan(2, "direct", "allgather")
    _, _, op = first(plan, "rppkt")
    assert op["channel_type"] == "port"
    op["name"] = "ppkt"
    assert "plan-op-unsafe" in rules(plan)


def test_mutant_reduce_and_send_over_a_port_channel():
    plan = packet_plan(2, "trees", "reducescatter")
    tb, k, op = first(plan, "rppkt")
    tb["ops"][k] = dict(op, name="respkt", src_buff=[op["src_buff"][0], op["src_buff"][0]],
                        dst_buff=[op["src_buff"][0]] + op["dst_buff"], reduce_op="sum")
    assert "plan-packet-form" in rules(plan, "reducescatter")


def test_a_rank_that_can_finish_before_its_peer_starts():
    """Two GPUs: gpu 0 puts its chunk to gpu 1 and ends; gpu 1 takes it. gpu 0 never waits for gpu 1, so the
    call after next (the same scratch half) may overwrite packets gpu 1 has not read."""
    def gpu(r, ops, chans, remote, refs):
        return {"id": r, "input_chunks": 1, "output_chunks": 2, "scratch_chunks": 1,
                "channels": [{"channel_type": "memory", "connected_to": chans}] if chans else [],
                "remote_buffers": remote, "semaphores": [],
                "threadblocks": [{"id": 0, "ops": ops,
                                  "channels": [{"channel_type": "memory", "channel_ids": [0]}] if chans else [],
                                  "remote_buffer_refs": refs}]}
    send = [{"name": "ppkt", "src_buff": [{"type": "i", "index": 0, "size": 1}],
             "dst_buff": [{"buffer_id": 0, "index": 0, "size": 1}], "channel_type": "memory"},
            {"name": "copy", "src_buff": [{"type": "i", "index": 0, "size": 1}],
             "dst_buff": [{"type": "o", "index": 0, "size": 1}]}]
    take = [{"name": "upkt", "src_buff": [{"type": "s", "index": 0, "size": 1}],
             "dst_buff": [{"type": "o", "index": 0, "size": 1}]}, {"name": "nop"},
            {"name": "copy", "src_buff": [{"type": "i", "index": 0, "size": 1}],
             "dst_buff": [{"type": "o", "index": 1, "size": 1}]}]
    plan = {"name": "half", "collective": "allgather", "protocol": "LL", "inplace": False,
            "use_double_scratch_buffer": True, "max_message_size": 1 << 20,
            "gpus": [gpu(0, send, [1], [{"rank": 1, "type": "s", "access_channel_types": ["memory"]}],
                         [{"access_channel_type": "memory", "remote_buffer_ids": [0]}]),
                     gpu(1, take, [0], [], [])]}
    assert "plan-packet-call" in rules(plan)


def test_packet_plans_refuse_what_mscclpp_cannot_run():
    prog = program(1, "ring", "allgather")
    with pytest.raises(CollsError, match="Simple or LL"):
        mscclpp.plan_of(prog, topo(1), name="x", protocol="LL128")


# Plans of the shape MSCCL++'s own packet tests run (microsoft/mscclpp test/executor-tests/execution-plans/
# reduce_pack.json and transfer_pack.json: 2 GPUs, written by its generator, not colls): one memory channel
# shared by two threadblocks that only put packets, max_message_size left at 2^64 - 1.
def _op(name, src, dst, ct=None, **kw):
    return dict({"name": name, "src_buff": src, "dst_buff": dst}, **({"channel_type": ct} if ct else {}), **kw)


def _local(t, i):
    return {"type": t, "index": i, "size": 1}


def _peer(i):
    return {"buffer_id": 0, "index": i, "size": 1}


def _tb(tid, ops, remote=True):
    return {"id": tid, "ops": ops,
            "channels": [{"channel_type": "memory", "channel_ids": [0]}] if remote else [],
            "remote_buffer_refs": [{"access_channel_type": "memory", "remote_buffer_ids": [0]}] if remote else []}


def _two_gpus(kind, chunks, tbs0, tbs1):
    def gpu(r, tbs):
        return {"id": r, "input_chunks": chunks[0], "output_chunks": chunks[1], "scratch_chunks": chunks[2],
                "threadblocks": tbs, "channels": [{"channel_type": "memory", "connected_to": [1 - r]}],
                "remote_buffers": [{"rank": 1 - r, "type": "s", "access_channel_types": ["memory"]}],
                "semaphores": []}
    return {"name": kind, "collective": kind, "protocol": "LL", "inplace": True, "reuse_resources": False,
            "gpus": [gpu(0, tbs0), gpu(1, tbs1)], "num_threads_per_block": 1024, "use_double_scratch_buffer": True,
            "buffer_alignment": 16, "min_message_size": 0, "max_message_size": 2**64 - 1}


def mscclpp_reduce_pack():
    return _two_gpus("allreduce", (2, 2, 3), [
        _tb(0, [_op("ppkt", [_local("i", 1)], [_peer(1)], "memory")]),
        _tb(1, [_op("respkt", [_local("i", 0), _local("s", 0)], [_local("i", 0), _peer(0)], "memory", reduce_op="sum")]),
        _tb(2, [_op("upkt", [_local("s", 1)], [_local("i", 1)])], remote=False)], [
        _tb(0, [_op("ppkt", [_local("i", 0)], [_peer(0)], "memory")]),
        _tb(1, [_op("recspkt", [_local("i", 1), _local("s", 1)], [_local("i", 1), _local("s", 2), _peer(1)], "memory",
                    reduce_op="sum")]),
        _tb(2, [_op("upkt", [_local("s", 0)], [_local("i", 0)])], remote=False)])


def mscclpp_transfer_pack():
    return _two_gpus("allgather", (1, 2, 2), [
        _tb(0, [_op("ppkt", [_local("o", 0)], [_peer(0)], "memory")]),
        _tb(1, [_op("upkt", [_local("s", 1)], [_local("o", 1)])], remote=False)], [
        _tb(0, [_op("cpkt", [_local("o", 1)], [_local("s", 1)])], remote=False),
        _tb(1, [_op("rppkt", [_local("s", 1)], [_peer(1)], "memory")]),
        _tb(2, [_op("upkt", [_local("s", 0)], [_local("o", 0)])], remote=False)])


@pytest.mark.parametrize("make,kind", [(mscclpp_reduce_pack, "allreduce"), (mscclpp_transfer_pack, "allgather")])
def test_mscclpp_own_packet_plans_are_proved(make, kind):
    """Another generator's packet plans: the channel two threadblocks share carries no semaphore (packets need
    none), and a max_message_size of 2^64 - 1 is a warning naming the largest call whose offsets fit."""
    report = verify_plan(make(), kind, "p.json")
    assert report.ok and report.facts["semantics_checked"], [str(f) for f in report.findings]
    warned = [f for f in report.findings if f.rule == "plan-offset-size"]
    assert warned and "set max_message_size to" in str(warned[0])


def test_mutant_packing_into_the_wrong_place():
    """transfer_pack's rppkt polls the packets the other threadblock's cpkt writes; packed where the peer's packets
    land instead, they are written twice there and the rppkt polls forever."""
    plan = mscclpp_transfer_pack()
    plan["gpus"][1]["threadblocks"][0]["ops"][0]["dst_buff"][0]["index"] = 0
    assert "plan-deadlock" in rules(plan)


def test_mutant_two_threadblocks_signal_on_one_channel():
    """A Simple plan's threadblocks signal and wait on their channels: two on one channel share its counter."""
    simple = mscclpp.plan_of(program(1, "direct", "allgather"), topo(1), name="s")
    assert not rules(simple)
    tbs = simple["gpus"][0]["threadblocks"]
    with_channel = [tb for tb in tbs if tb["channels"]]
    with_channel[1]["channels"] = with_channel[0]["channels"]
    assert "plan-channel-shared" in rules(simple)


def mscclpp_reduce():
    """A Simple plan of the shape of MSCCL++'s own test/executor-tests/execution-plans/reduce.json (in-place
    allreduce on 2 GPUs): each copies what its peer will read into scratch, then reads the peer's chunks
    (rres, rre, get) and writes the sums into both GPUs' inputs."""
    def wait_for_peer():
        return [{"name": "nop"}, {"name": "signal", "channel_ids": [0], "channel_type": "memory"}, {"name": "nop"},
                {"name": "wait", "channel_ids": [0], "channel_type": "memory"}, {"name": "nop"}]

    def ranged(t, i, n=1):
        return {"type": t, "index": i, "size": n}

    def theirs(b, i, n=1):
        return {"buffer_id": b, "index": i, "size": n}
    ops0 = [_op("copy", [ranged("i", 2, 2)], [ranged("s", 2, 2)])] + wait_for_peer() + [
        _op("rres", [ranged("i", 0), theirs(0, 0)], [ranged("i", 0), theirs(1, 0)], "memory", reduce_op="sum"),
        _op("get", [theirs(0, 1)], [ranged("s", 1)], "memory", channel_ids=[0]), {"name": "nop"},
        _op("res", [ranged("i", 1), ranged("s", 1)], [ranged("i", 1), theirs(1, 1)], "memory", reduce_op="sum")] \
        + wait_for_peer()
    ops1 = [_op("copy", [ranged("i", 0, 2)], [ranged("s", 0, 2)])] + wait_for_peer() + [
        _op("rre", [ranged("i", 2, 2), theirs(0, 2, 2)], [ranged("i", 2, 2)], "memory", reduce_op="sum"),
        {"name": "nop"}, _op("copy", [ranged("i", 2, 2)], [ranged("s", 2, 2)]), {"name": "nop"},
        _op("put", [ranged("s", 2, 2)], [theirs(0, 2, 2)], "memory")] + wait_for_peer()
    plan = _two_gpus("allreduce", (4, 4, 4), [_tb(0, ops0)], [_tb(0, ops1)])
    plan.update(protocol="Simple", use_double_scratch_buffer=False)
    plan["gpus"][0]["remote_buffers"].append({"rank": 1, "type": "i", "access_channel_types": ["memory"]})
    plan["gpus"][0]["threadblocks"][0]["remote_buffer_refs"][0]["remote_buffer_ids"] = [0, 1]
    plan["gpus"][1]["remote_buffers"][0]["type"] = "i"
    return plan


def test_remote_reads_are_followed():
    """rre, rres and get read a peer's buffer: proved when the signal and wait order the read after the peer's
    copy; reading before them is a race on the peer's chunk."""
    report = verify_plan(mscclpp_reduce(), "allreduce", "p.json")
    assert report.ok and report.facts["semantics_checked"], [str(f) for f in report.findings]
    plan = mscclpp_reduce()
    ops = plan["gpus"][0]["threadblocks"][0]["ops"]
    ops.insert(1, ops.pop(next(k for k, op in enumerate(ops) if op["name"] == "rres")))
    assert {"plan-race", "plan-uninitialised-read"} & rules(plan, "allreduce")
