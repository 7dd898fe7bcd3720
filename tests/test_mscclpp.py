"""MSCCL++ execution plans: written from the Programs colls makes, proved by the plan verifier, refused
where MSCCL++'s limits do not hold them, and mutated plans rejected with the rule that names the fault."""

import copy
import dataclasses
import json

import pytest

import shell

from colls import mscclpp, pipeline
from colls.collectives import Collective
from colls.errors import CollsError
from colls.inputs import hardware
from colls.runtimes import mscclpp as rt
from colls.verify.plan import PLAN_RULES, verify_plan

KINDS = ("allgather", "reducescatter", "allreduce", "alltoall")
# what does not fit 64 ops per threadblock as the XML file's program: a ring threadblock makes every step of
# its ring (synth and compile then cut the ring for plans: test_every_method_makes_a_plan_within_64_ops)
REFUSED = {(1, "ring", "allreduce"), (2, "ring", "allgather"), (2, "ring", "reducescatter"),
           (2, "ring", "allreduce")}
# lowered for plans too: the XML program's plan fits 64 ops only unpipelined (tune.compile_for_plans wants it
# pipelined)
CUT_FOR_PIPELINES = {(1, "ring", "allgather")}
# lowered for plans although the XML program's plan fits: cut into segments, a deeper file is faster
# (the trees reductions as synth makes them: where their leaves pair, the paired trees, cut, win on one node and
# on 2 nodes: 2 x reduce-scatter's cut file, 104 threadblocks, 379 us against its paired XML program's 391 at 16
# and 256 MB, whose NIC sends the next message while the threadblock writes it; 2 x direct allreduce's XML
# program, 4 copies packed on 108 threadblocks at 2 pieces a block, fits and is faster than any cut one)
CUT_FASTER = {(1, "ring", "reducescatter"), (1, "trees", "reducescatter"), (1, "trees", "allreduce"),
              (2, "trees", "allreduce"), (2, "trees", "reducescatter")}
# what fits 64 ops only unpipelined (a pipelined step takes 2 to 3 ops more), so is written so
UNPIPELINED = {(1, "ring", "allgather")}
_TOPOS: dict = {}
_PROGRAMS: dict = {}


def topo(nodes):
    if nodes not in _TOPOS:
        _TOPOS[nodes] = hardware.load_topology("dgx-a100", nodes=nodes)
    return _TOPOS[nodes]


def program(nodes, method, kind):
    key = (nodes, method, kind)
    if key not in _PROGRAMS:
        t = topo(nodes)
        _PROGRAMS[key] = pipeline.compile_schedule(t, Collective(kind, t.ngpus), method, mode="both").program
    return _PROGRAMS[key]


CASES = [(n, m, k) for n in (1, 2) for m in ("ring", "direct", "trees") for k in KINDS
         if not (m == "trees" and k == "alltoall")]


@pytest.mark.parametrize("nodes,method,kind", CASES, ids=lambda v: str(v))
def test_plans_verify_or_are_refused_by_the_op_limit(nodes, method, kind):
    prog = program(nodes, method, kind)
    if (nodes, method, kind) in REFUSED:
        with pytest.raises(CollsError, match="at most 64 per threadblock"):
            mscclpp.plan_of(prog, topo(nodes), name=f"{method}-{kind}")
        return
    plan = mscclpp.plan_of(prog, topo(nodes), name=f"{method}-{kind}-{nodes}n")
    modes = (False, True) if nodes == 1 or (method, kind) != ("trees", "allreduce") else (True,)
    piped = (nodes, method, kind) not in UNPIPELINED
    assert mscclpp.slice_of(plan) == (rt.PIPELINE_UNIT_BYTES if piped else None)
    for inplace in modes:
        report = verify_plan(plan, kind, "<plan>", inplace=inplace)
        assert report.ok, report.format()
        assert report.facts["semantics_checked"]
        # pipelines are followed slice by slice: one unit per chunk, and two (every pipeline iterates twice)
        assert report.facts.get("units_per_chunk_checked", [1]) == ([1, 2] if piped else [1])
    flat = [sum(1 + len(op["ops"]) if op["name"] == "pipeline" else 1 for op in tb["ops"])
            for g in plan["gpus"] for tb in g["threadblocks"]]
    assert max(flat) <= 64
    # cross-node connections use port channels, one node memory channels only
    types = {ch["channel_type"] for g in plan["gpus"] for ch in g["channels"]}
    assert types == ({"memory"} if nodes == 1 else {"memory", "port"})
    # every put lands in a peer's scratch, never its input or output
    assert all(rb["type"] == "s" for g in plan["gpus"] for rb in g["remote_buffers"])
    # the program read back from the plan writes the same plan (what colls simulate FILE.json times)
    back = mscclpp.program_of(json.loads(mscclpp.dumps(plan)), topo(nodes), "p.json")
    assert back.coll == kind and len(back.gpus) == len(prog.gpus)


@pytest.mark.parametrize("nodes,method,kind", CASES, ids=lambda v: str(v))
def test_every_method_makes_a_plan_within_64_ops(nodes, method, kind):
    """What synth and compile write for plans (tune.compile_for_plans): the XML program where its pipelined plan
    fits 64 ops (unless the cut one below is faster: CUT_FASTER), otherwise the program lowered for the mscclpp target (its threadblocks cut into step segments
    on channels of their own until every plan fits: the rings of REFUSED). Every one makes a proved plan,
    and the writer's most ops for one step (PLAN_OPS_PER_STEP) holds throughout."""
    from colls import tune
    t = topo(nodes)
    result = tune.compile_for_plans(t, Collective(kind, t.ngpus), method, in_memory=True, prove=False)
    prog = result.program
    assert (result.target.name == "mscclpp") == ((nodes, method, kind) in REFUSED | CUT_FOR_PIPELINES | CUT_FASTER)
    assert mscclpp.fits(prog, t)
    plan = mscclpp.plan_of(prog, t, name=f"{method}-{kind}-{nodes}n")
    report = verify_plan(plan, kind, "<plan>", inplace=False)
    assert report.ok and report.facts["semantics_checked"], report.format()
    whole = mscclpp.plan_of(prog, t, name="whole", slice_bytes=None)
    steps = {(g.id, tb.id): len(tb.steps) for g in prog.gpus for tb in g.tbs}
    for g in whole["gpus"]:
        for tb in g["threadblocks"]:
            assert len(tb["ops"]) <= rt.PLAN_GRANT_OPS + rt.PLAN_OPS_PER_STEP * steps[(g["id"], tb["id"])]
    # and the fewest ops each step takes pipelined (what refuses a program before it is cut) holds throughout
    assert_least_ops(prog, t)


def assert_least_ops(prog, t):
    """Every threadblock's pipelined plan has at least its steps' mscclpp.least_ops, each step at least its own
    (the ops written between one step and the next, the grants and the acquires of a run of nops aside)."""
    written = []      # (threadblock, its ops), over 64 or not (the writer refuses a GPU's once all are written)
    tb_dict = mscclpp._tb_dict

    def counted(tb, b, chans, refs):
        made = tb_dict(tb, b, chans, refs)
        written.append((tb, mscclpp.op_count(made["ops"])))
        return made
    mscclpp._tb_dict = counted
    try:
        mscclpp._plan(prog, t, "floors", None, mscclpp.SLOTS, rt.PIPELINE_UNIT_BYTES)
    except mscclpp._OverBudget:
        pass
    finally:
        mscclpp._tb_dict = tb_dict
    assert len(written) == sum(len(g.tbs) for g in prog.gpus)
    for tb, ops in written:
        assert ops >= sum(mscclpp.least_ops(st) for st in tb.steps)
    return {st.type for tb, _ in written for st in tb.steps}


def test_the_least_ops_hold_for_every_kind_of_step_across_nodes():
    """mscclpp.least_ops' floors (colls.runtimes.mscclpp PLAN_*_STEP_OPS) under the writer, on memory and port
    channels (two nodes), for programs as the XML file's and as cut for plans: sends, receives, both kinds of
    relay and a receive that sums."""
    t = topo(2)
    kinds = set()
    for method, kind in (("ring", "allreduce"), ("ring", "allgather"), ("direct", "reducescatter"),
                         ("trees", "allreduce")):
        for target in ("exe", "mscclpp"):
            prog = pipeline.compile_schedule(t, Collective(kind, t.ngpus), method, target=target, in_memory=True,
                                             prove=False).program if target == "mscclpp" else program(2, method, kind)
            kinds |= assert_least_ops(prog, t)
    assert {"s", "r", "rcs", "rrs", "rrc"} <= kinds


def test_emission_is_deterministic_and_round_trips():
    prog = program(1, "direct", "allreduce")
    a = mscclpp.dumps(mscclpp.plan_of(prog, topo(1), name="d"))
    b = mscclpp.dumps(mscclpp.plan_of(copy.deepcopy(prog), topo(1), name="d"))
    assert a == b and a.endswith("\n")
    assert list(json.loads(a))[:6] == ["name", "collective", "protocol", "inplace", "reuse_resources", "gpus"]
    assert mscclpp.load(a, "d.json") == json.loads(a)


def test_pipelined_steps_hand_over_slice_by_slice():
    """Each step's data movement is a pipeline of num_chunks = its chunks: the receiver waits for every slice
    inside it, the sender signals every slice inside it, the credit for a message (its wait before the
    sender's pipeline, its signal after the receiver's) stays per message; one-chunk steps that depend on each
    other release and acquire their semaphore once per slice."""
    plan = mscclpp.plan_of(program(1, "trees", "allreduce"), topo(1), name="t")
    pipes = [op for g in plan["gpus"] for tb in g["threadblocks"] for op in tb["ops"] if op["name"] == "pipeline"]
    assert pipes and all(p["iter_context"] == {"unit_size": 1 << 20, "num_chunks": 1} for p in pipes)
    bodies = [[op["name"] for op in p["ops"]] for p in pipes]
    assert any(b[:1] == ["wait"] or b[:2] == ["sem_acquire", "wait"] for b in bodies)
    assert any(b[-2:] == ["nop", "signal"] or b[-3:] == ["nop", "signal", "sem_release"] for b in bodies)
    assert any("sem_acquire" in b for b in bodies) and any("sem_release" in b for b in bodies)
    for g in plan["gpus"]:
        for tb in g["threadblocks"]:
            ops = tb["ops"]
            for i, op in enumerate(ops):
                if op["name"] == "pipeline" and any(x["name"] == "put" for x in op["ops"]):
                    assert ops[i - 1]["name"] == "wait"            # the credit, once per message
    unpiped = mscclpp.plan_of(program(1, "trees", "allreduce"), topo(1), name="t", slice_bytes=None)
    assert mscclpp.slice_of(unpiped) is None
    assert verify_plan(unpiped, "allreduce", "<plan>", inplace=False).ok
    with pytest.raises(CollsError, match="multiple of 16"):
        mscclpp.plan_of(program(1, "trees", "allreduce"), topo(1), name="t", slice_bytes=1000)


def test_load_names_the_file_and_key():
    plan = json.loads(mscclpp.dumps(mscclpp.plan_of(program(1, "direct", "allgather"), topo(1), name="d")))
    del plan["gpus"][2]["threadblocks"][1]["ops"]
    with pytest.raises(CollsError, match=r"p\.json: gpus\[2\]\.threadblocks\[1\]\.ops: missing"):
        mscclpp.load(json.dumps(plan), "p.json")
    with pytest.raises(CollsError, match="p.json: not JSON"):
        mscclpp.load("{", "p.json")


def test_non_sum_reduction_and_unknown_collective_are_refused():
    prog = copy.deepcopy(program(1, "direct", "reducescatter"))
    prog.extra["redop"] = "max"
    with pytest.raises(CollsError, match="always sums"):
        mscclpp.plan_of(prog, topo(1), name="x")
    prog = copy.deepcopy(program(1, "direct", "allgather"))
    prog.coll = "broadcast"
    with pytest.raises(CollsError, match="not 'broadcast'"):
        mscclpp.plan_of(prog, topo(1), name="x")


def test_max_message_size_keeps_offsets_in_uint32():
    plan = mscclpp.plan_of(program(1, "direct", "allgather"), topo(1), name="d")
    g = plan["gpus"][0]
    chunk = plan["max_message_size"] // g["output_chunks"]
    assert chunk % 16 == 0
    assert max(g["input_chunks"], g["output_chunks"], g["scratch_chunks"]) * chunk <= 2**32 - 1


def test_a_max_message_size_past_the_limits_is_a_warning_naming_the_size_to_set():
    """MSCCL++'s generator writes max_message_size 2^64 - 1: the calls past uint32 offsets (and past 65,535 pipeline
    iterations) are named, the plan is proved for the rest; past them at min_message_size, it is an error."""
    plan = dict(mscclpp.plan_of(program(1, "direct", "allgather"), topo(1), name="d"), max_message_size=2**64 - 1)
    report = verify_plan(plan, "allgather", "p.json")
    assert report.ok and report.facts["semantics_checked"]
    warned = {f.rule: str(f) for f in report.findings if f.severity == "warning"}
    assert {"plan-offset-size", "plan-pipeline-size"} <= set(warned), warned
    assert "set max_message_size to" in warned["plan-offset-size"]
    assert {"plan-offset-range", "plan-pipeline"} <= rules(dict(plan, min_message_size=2**60))


# --------------------------------------------------------------------------------------------------
# mutations: each must be rejected with the rule that names it
# --------------------------------------------------------------------------------------------------

def base(method="ring", kind="allgather"):
    return json.loads(mscclpp.dumps(mscclpp.plan_of(program(1, method, kind), topo(1), name="m")))


def ops_of(plan, gpu, tb):
    return plan["gpus"][gpu]["threadblocks"][tb]["ops"]


def flat(ops):
    """The ops with pipeline bodies in line (the same op objects, so a mutation lands in the plan)."""
    return [x for op in ops for x in ([op] + op["ops"] if op["name"] == "pipeline" else [op])]


def first(ops, name, start=0):
    return next(i for i, op in enumerate(ops) if i >= start and op["name"] == name)


def rules(plan, kind="allgather"):
    report = verify_plan(plan, kind, "<mutant>", inplace=False)
    assert not report.ok
    return report.rules()


def test_mutant_operand_out_of_range():
    plan = base()
    ops = ops_of(plan, 0, 0)
    ops[first(ops, "copy")]["dst_buff"][0]["index"] = 8
    assert "plan-operand" in rules(plan)


def test_mutant_missing_wait():
    plan = base()
    ops = ops_of(plan, 3, 0)
    del ops[first(ops, "wait")]
    assert "plan-signal-wait" in rules(plan)


def test_mutant_deleted_signal():
    plan = base()
    ops = ops_of(plan, 2, 0)
    del ops[first(ops, "signal", first(ops, "put"))]
    assert "plan-signal-wait" in rules(plan)


def test_mutant_wrong_peer():
    plan = base("direct", "allgather")
    g = plan["gpus"][0]
    used = {rb["rank"] for rb in g["remote_buffers"]}
    g["remote_buffers"][0]["rank"] = next(p for p in range(1, 8) if p != g["remote_buffers"][0]["rank"]
                                          and p in used)
    assert "plan-wrong-peer" in rules(plan)


def test_mutant_chunk_count_mismatch():
    plan = base()
    plan["gpus"][1]["output_chunks"] += 1
    assert "plan-chunks" in rules(plan)


def test_mutant_too_many_ops():
    plan = base()
    ops_of(plan, 0, 0).extend({"name": "nop"} for _ in range(30))
    assert "plan-op-count" in rules(plan)


def test_mutant_threadblock_ids_out_of_order():
    plan = base()
    tbs = plan["gpus"][4]["threadblocks"]
    tbs[0]["id"], tbs[1]["id"] = tbs[1]["id"], tbs[0]["id"]
    assert "plan-tb-id" in rules(plan)


def test_mutant_channel_id_out_of_range():
    plan = base()
    ops = ops_of(plan, 5, 0)
    ops[first(ops, "wait")]["channel_ids"] = [5]
    assert "plan-channel-id" in rules(plan)


def test_mutant_put_into_an_unconsumed_slot():
    """The third put of a connection goes into the second slot, whose message the receiver may not have
    consumed: its credit so far only says the first slot is free."""
    plan = base()
    ops = ops_of(plan, 0, 0)
    puts = [i for i, op in enumerate(ops) if op["name"] == "put"]
    slot1 = ops[puts[1]]["dst_buff"][0]["index"]
    ops[puts[2]]["dst_buff"][0]["index"] = slot1
    assert "plan-slot-race" in rules(plan)


def test_mutant_non_sum_reduce_op():
    plan = base("ring", "reducescatter")
    ops = flat(ops_of(plan, 0, 0))                  # pipelined: the res is in a pipeline body
    ops[first(ops, "res")]["reduce_op"] = "max"
    assert "plan-reduce-op" in rules(plan, "reducescatter")


def test_mutant_missing_nop_after_wait():
    plan = base()
    ops = ops_of(plan, 6, 0)
    w = first(ops, "wait")
    assert ops[w + 1]["name"] == "nop"
    del ops[w + 1]
    assert "plan-thread-sync" in rules(plan)


def test_many_dependencies_are_acquired_in_one_op():
    """A threadblock the XML lowering makes wait for many dependencies (the in-place alltoall's own block,
    after every send has read it: one nop step each, as milp's alltoall stages them) acquires them in one
    sem_acquire of several ids, each at least two and at most 16; read back, they are the same nop steps."""
    prog = program(1, "milp", "alltoall")
    plan = mscclpp.plan_of(prog, topo(1), name="a")
    runs = [(g["id"], tb["id"], k) for g in plan["gpus"] for tb in g["threadblocks"]
            for k, op in enumerate(tb["ops"]) if op["name"] == "sem_acquire" and len(op["semaphore_ids"]) > 1]
    assert runs
    for gid, tid, k in runs:
        ops = ops_of(plan, gid, tid)
        assert 2 <= len(ops[k]["semaphore_ids"]) <= rt.MAX_SEMAPHORES_PER_OP
        assert ops[k + 1]["name"] in ("nop", "sem_acquire")       # an acquire commutes with acquires
    for g in prog.gpus:                 # fewer acquire ops than dependencies wherever a run was merged
        acquires = {tb["id"]: sum(op["name"] == "sem_acquire" for op in flat(tb["ops"]))
                    for tb in plan["gpus"][g.id]["threadblocks"]}
        for tb in g.tbs:
            deps = sum(st.depid is not None and st.depid >= 0 for st in tb.steps)
            assert acquires[tb.id] < deps if (g.id, tb.id) in {r[:2] for r in runs} else acquires[tb.id] == deps
    back = mscclpp.program_of(json.loads(mscclpp.dumps(plan)), topo(1), "a.json")
    assert [[len(tb.steps) for tb in g.tbs] for g in back.gpus] == [[len(tb.steps) for tb in g.tbs] for g in prog.gpus]
    for inplace in (False, True):
        assert verify_plan(plan, "alltoall", "<plan>", inplace=inplace).ok


def test_mutant_data_op_right_after_a_multi_acquire():
    """Thread i acquires semaphore_ids[i]: what follows must wait for a nop, or it runs before the other
    threads' acquires."""
    plan = json.loads(mscclpp.dumps(mscclpp.plan_of(program(1, "milp", "alltoall"), topo(1), name="m")))
    gid, tid, k = next((g["id"], tb["id"], k) for g in plan["gpus"] for tb in g["threadblocks"]
                       for k, op in enumerate(tb["ops"])
                       if op["name"] == "sem_acquire" and len(op["semaphore_ids"]) > 1)
    ops = ops_of(plan, gid, tid)
    assert ops[k + 1]["name"] == "sem_acquire" and ops[k + 2]["name"] == "pipeline"
    assert ops[k + 2]["ops"][0]["name"] == "nop"
    ops[k], ops[k + 1] = ops[k + 1], ops[k]         # the step's own acquire first, then the run's
    del ops[k + 2]["ops"][0]                        # and the copy right after the run's acquire
    assert rules(plan, "alltoall") == {"plan-thread-sync"}


def test_mutant_grants_after_the_first_receive_deadlock():
    """The receiver grants its slots only after its first receive: the sender waits for a credit the
    receiver gives only once it has received, and neither moves."""
    plan = base()
    for g in plan["gpus"]:
        for tb in g["threadblocks"]:
            ops = tb["ops"]
            grants = []
            while ops and ops[0]["name"] == "signal":
                grants.append(ops.pop(0))
            ops.extend([{"name": "nop"}] + grants)
    assert rules(plan) == {"plan-deadlock"}


def test_mutant_gpu_id_and_missing_key():
    plan = base()
    plan["gpus"][3]["id"] = 4
    assert "plan-gpu-id" in rules(plan)
    plan = base()
    del plan["protocol"]
    assert rules(plan) == {"plan-key"}


def test_mutant_unsafe_ops():
    plan = base()
    ops = ops_of(plan, 0, 0)
    ops[first(ops, "put")]["name"] = "pws"
    assert "plan-op-unsafe" in rules(plan)


def pipelines(plan, names):
    """(threadblock ops, index, pipeline op) of every pipeline whose body has all ``names``."""
    for g in plan["gpus"]:
        for tb in g["threadblocks"]:
            for i, op in enumerate(tb["ops"]):
                if op["name"] == "pipeline" and set(names) <= {x["name"] for x in op["ops"]}:
                    yield tb["ops"], i, op


def test_mutant_missing_wait_inside_a_pipeline_body():
    """The receiver waits for no slice: the sender signals once per iteration of a pipeline of 1 MiB slices of 1
    chunk, the receiver never; counted per kind of pipeline, so at every call size."""
    plan = base("direct", "allgather")
    _, _, pipe = next(pipelines(plan, ["wait", "copy"]))
    del pipe["ops"][first(pipe["ops"], "wait")]
    assert rules(plan) == {"plan-signal-wait"}


def test_mutant_pipeline_iterations_overrun_the_slot():
    """num_chunks 2 on a put of one chunk: the second chunk's iterations compute size - offset below zero
    (uint32) and write unit_size bytes past the slot, into the next slot, whose message may be unconsumed."""
    plan = base("direct", "allgather")
    _, _, pipe = next(pipelines(plan, ["put"]))
    pipe["iter_context"]["num_chunks"] = 2
    assert "plan-pipeline" in rules(plan)
    plan = base("direct", "allgather")
    for _, _, pipe in pipelines(plan, []):
        pipe["iter_context"]["unit_size"] = (1 << 20) + 8
    assert rules(plan) == {"plan-pipeline"}


def test_mutant_slice_read_before_its_wait():
    """The receiver copies a slice out of its slot before waiting for it: the put of the slice and the copy
    are unordered."""
    plan = base("direct", "allgather")
    _, _, pipe = next(pipelines(plan, ["wait", "copy"]))
    pipe["ops"].append(pipe["ops"].pop(first(pipe["ops"], "wait")))
    assert "plan-slot-race" in rules(plan)


def test_mutant_dependency_acquired_per_step_but_released_per_slice():
    """A consumer acquires once before its pipeline what its producer releases once per slice: one unit per
    chunk is right, but at two the second release lets the next call's acquire return before the producer's
    slice is written; only the execution with pipelines iterating twice finds it."""
    plan = base("trees", "allreduce")
    ops, i, pipe = next(pipelines(plan, ["sem_acquire"]))
    assert pipe["ops"][0]["name"] == "sem_acquire"
    ops.insert(i, pipe["ops"].pop(0))
    report = verify_plan(plan, "allreduce", "<mutant>", inplace=False)
    assert not report.ok and "plan-race" in report.rules()
    assert all("2 pipeline units" in f.message for f in report.findings if f.rule == "plan-race")


def test_every_rule_has_an_effect_or_is_a_warning():
    assert all(text for _, text in PLAN_RULES.values())


def test_verify_command_reads_plans(tmp_path):
    """``colls verify`` on a plan: exit 0 when proved, 1 when invalid (with the rule), 2 with one line when the
    file is not a plan at all."""
    def run(*args):
        return shell.run(args, timeout=600)

    plan = json.loads(mscclpp.dumps(mscclpp.plan_of(program(1, "direct", "allgather"), topo(1), name="d")))
    good = tmp_path / "good.json"
    good.write_text(json.dumps(plan))
    rc, out, err = run("verify", str(good))
    assert rc == 0, (out, err)
    ops = next(op["ops"] for op in plan["gpus"][1]["threadblocks"][0]["ops"] if op["name"] == "pipeline")
    del ops[next(i for i, op in enumerate(ops) if op["name"] == "wait")]     # the wait for a slice
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(plan))
    rc, out, err = run("verify", str(bad))
    assert rc == 1 and "plan-signal-wait" in out, (out, err)
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    rc, out, err = run("verify", str(broken))
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "broken.json" in err and "Traceback" not in err
    # the XML runtimes' options are refused with a plan, not ignored
    for option in (["--target", "old"], ["--hardware", "dgx-a100"], ["--sms", "20"], ["--buffsize", "65536"]):
        rc, out, err = run("verify", str(good), *option)
        assert rc == 2 and out == "" and err.startswith(f"colls: error: {good}: {option[0]}: "), (option, out, err)


def test_only_the_threadblocks_over_64_ops_are_cut():
    """milp's alltoall on 2 x NDv2 lowers (as for the XML executor) to 41 threadblocks of up to 22 steps, some
    of them over 64 ops as plans. Cutting every threadblock into two step segments would need 83 threadblocks
    on GPUs of 80 SMs; cutting only the connections of those onto channels of their own fits every
    threadblock within 64 ops on fewer than 80 threadblocks, and the plan is proved. (One deterministic
    second of solving makes a schedule of that shape as the default ten do, in half the time.)"""
    from colls import tune
    t = hardware.load_topology("ndv2", nodes=2)
    result = tune.compile_for_plans(t, Collective("alltoall", t.ngpus), "milp", in_memory=True, prove=False,
                                    options={"time_limit": 1})
    prog = result.program
    assert result.target.name == "mscclpp" and mscclpp.fits(prog, t) and prog.max_tbs() <= t.min_sms()
    plan = mscclpp.plan_of(prog, t, name="milp-a2a")
    report = verify_plan(plan, "alltoall", "<plan>", inplace=False)
    assert report.ok and report.facts["semantics_checked"], report.format()


def test_plans_take_the_cut_program_only_when_it_is_faster():
    """1 x DGX A100 ring reduce-scatter: the XML program fits 64 ops a threadblock as a pipelined plan, and the
    program lowered for plans (cut into segments, with more copies) simulates at least 1 % faster at
    tune.SIZES as a plan: that one is written."""
    import math
    from colls import tune
    from colls.simulate.plans import time_plan
    t = topo(1)
    coll = Collective("reducescatter", t.ngpus)
    fit = tune.compile_fastest(t, coll, "ring", target="exe", in_memory=True, prove=False,
                               fits=lambda d: mscclpp.fits(d.program, t))
    assert mscclpp.fits(fit.program, t)
    chosen = tune.compile_for_plans(t, coll, "ring", in_memory=True, prove=False)
    assert chosen.target.name == "mscclpp"

    def score(made):
        plan = mscclpp.plan_of(made.program, t, name="s")
        return math.prod(time_plan(plan, made.program, t, s).time_us for s in tune.SIZES)
    assert score(chosen) < score(fit) * (1 - tune.COPIES_GAIN) ** len(tune.SIZES)


def test_an_acquire_on_several_threads_is_joined_by_a_nop_before_the_next_op():
    """A run of waits written as one sem_acquire of several semaphores runs on as many threads; the next op
    (here a thread-0 wait) must follow a nop. 16 x DGX A100's hier allgather plan had a run with no release
    after it and failed its own proof (plan-thread-sync) until the writer joined the threads."""
    b = mscclpp._TB()
    b.add({"name": "sem_acquire", "semaphore_ids": [0, 1]}, "all")
    b.add({"name": "sem_acquire", "semaphore_ids": [2]}, "t0")
    b.add({"name": "wait", "channel_ids": [0], "channel_type": "memory"}, "t0")
    b.add({"name": "wait", "channel_ids": [1], "channel_type": "memory"}, "t0")
    assert [op["name"] for op in b.ops] == ["sem_acquire", "sem_acquire", "nop", "wait", "wait"]
    one = mscclpp._TB()
    one.add({"name": "sem_acquire", "semaphore_ids": [0]}, "t0")
    one.add({"name": "wait", "channel_ids": [0], "channel_type": "memory"}, "t0")
    assert [op["name"] for op in one.ops] == ["sem_acquire", "wait"]      # one thread: nothing to join


def test_plans_lowered_by_symmetry_are_those_every_rank_lowered_makes():
    """The lowering for plans cuts the connections of threadblocks over MSCCL++'s 64 ops; by symmetry it asks
    the ops of one orbit's GPUs under a rotation by whole nodes (a GPU's ops read whether its peers share its
    node) and cuts each connection's images alike. 4 x DGX A100's ring allgather is rotated by two nodes and
    cut several times: the program is the one the whole lowering makes, and the threadblocks over the budget
    seen from one orbit are the images of those seen from every GPU."""
    from colls import lower
    from colls.pipeline import _plan_fits
    from colls.synth import ring
    topo = hardware.load_topology("dgx-a100", 4)
    tgt = dataclasses.replace(rt.LOWERING, max_tbs=64)
    schedule = ring.synthesize(topo, Collective("allgather", topo.ngpus), max_steps=tgt.max_steps,
                               max_channels=tgt.max_channels)
    assert schedule.rotation()[0] == 2 * topo.gpus_per_node
    cuts = []
    options = lower.LowerOptions(sms=topo.min_sms(), shape=topo.node_major(), fits=_plan_fits(tgt, topo))
    whole = lower.lower(schedule, tgt, options)
    spy = dataclasses.replace(options, fits=lambda p, ranks=None: cuts.append(ranks) or options.fits(p, ranks))
    assert lower.lower_by_symmetry(schedule, tgt, spy) == whole
    assert cuts[0] == 16 and len(cuts) > 2            # cut more than once, one orbit of 16 GPUs asked
    uncut = lower.lower(schedule, tgt, lower.LowerOptions(sms=topo.min_sms(), shape=topo.node_major()))
    every = set(mscclpp.over_budget(uncut, topo, rt.PIPELINE_UNIT_BYTES))
    orbit = set(mscclpp.over_budget(uncut, topo, rt.PIPELINE_UNIT_BYTES, 16))
    assert orbit and every == {(g + k, t) for g, t in orbit for k in (0, 16)}
    assert not mscclpp.fits(uncut, topo, 2 * topo.gpus_per_node) and mscclpp.fits(whole, topo, 16)


def test_a_threadblock_of_more_than_32_steps_that_send_or_receive_never_fits(monkeypatch):
    """Each such step takes two of a plan's 64 ops at least (its data op and the pipeline or wait around it):
    the XML program of 4 x DGX A100's one-ring allreduce (62 steps a threadblock) does not fit, said before
    any plan is written; the plan, written, agrees."""
    topo = hardware.load_topology("dgx-a100", nodes=4)
    made = pipeline.compile_schedule(topo, Collective("allreduce", 32), "ring", options={"rings": 1},
                                     in_memory=True, prove=False)
    assert max(len(tb.steps) for g in made.program.gpus for tb in g.tbs) > 32
    assert mscclpp.over_budget(made.program, topo, rt.PIPELINE_UNIT_BYTES)
    monkeypatch.setattr(mscclpp, "over_budget", lambda *a, **k: pytest.fail("planned to be counted"))
    assert not mscclpp.fits(made.program, topo)


def test_buffers_beyond_what_the_proof_follows_are_not_proven_and_say_so():
    """Chunk counts of 2^40 on every GPU (the allgather's shape kept): the execution would keep a state per
    chunk (terabytes), so the plan is not proven, at once, and the verdict does not claim the deadlock search it
    did not run."""
    plan = base()
    for g in plan["gpus"]:
        g["input_chunks"], g["output_chunks"] = 1 << 40, len(plan["gpus"]) << 40
    report = verify_plan(plan, "allgather", "huge.json", inplace=False)
    assert report.verdict == "unproven" and report.facts["deadlock_free"] is None
    assert any("too large to prove: its buffers hold" in f.message for f in report.findings)
    assert "whether it deadlocks and what it computes were not checked" in report.summary()


@pytest.mark.parametrize("mutate,key", [
    (lambda p: p.update(gpus=None), "gpus: must be a non-empty list"),
    (lambda p: p["gpus"][0]["threadblocks"][0].update(ops=None), "gpus[0].threadblocks[0].ops: must be a list"),
    (lambda p: p["gpus"][0]["threadblocks"][0].update(channels=None), "gpus[0].threadblocks[0].channels: must be"),
    (lambda p: p["gpus"][0].update(semaphores=[None]), "gpus[0].semaphores[0].init_value: must be an integer"),
    (lambda p: p["gpus"][0].update(semaphores=[{"init_value": "0"}]), "gpus[0].semaphores[0].init_value"),
    (lambda p: p["gpus"][0].update(semaphores=[{}]), "gpus[0].semaphores[0].init_value"),
])
def test_verify_calls_a_plan_of_the_wrong_shape_invalid_naming_the_key(tmp_path, capsys, mutate, key):
    """null where the loader reads a list or a number, a semaphore without its init_value: an invalid plan
    (exit 1, the key named), never an internal error; text that is not JSON at all cannot be read (exit 2)."""
    from colls.cli import main
    plan = base()
    mutate(plan)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(plan))
    with pytest.raises(SystemExit) as done:
        main(["verify", str(path)])
    out, err = capsys.readouterr()
    assert done.value.code == 1 and f"error [plan-key]: will not load: {key}" in out and err == ""
    path.write_text("[1,")
    with pytest.raises(SystemExit) as done:
        main(["verify", str(path)])
    assert done.value.code == 2 and "not JSON" in capsys.readouterr().err


def test_semaphore_and_signal_ops_without_ids_do_nothing_as_the_loader_reads_them():
    """The loader sets an op's semaphores and channels only when the op has them (op.contains): a sem_release
    without semaphore_ids releases nothing, so its partner's acquire waits for ever: a hang, not a KeyError."""
    plan = base()
    releases = [op for g in plan["gpus"] for tb in g["threadblocks"] for op in flat(tb["ops"])
                if op["name"] == "sem_release"]
    if not releases:
        pytest.skip("the ring plan has no semaphores")
    del releases[0]["semaphore_ids"]
    report = verify_plan(plan, "allgather", "p.json", inplace=False)
    assert not report.ok and "hangs" in report.consequence()


def test_a_plan_of_no_threads_per_block_will_not_load():
    plan = base()
    plan["num_threads_per_block"] = 0
    assert rules(plan) == {"plan-threads"}


def test_simulate_prints_a_plans_name_escaped():
    """A name is any string to the loader; one with a terminal escape and a newline must not reach the terminal
    as they are (it set the title and forged an output line)."""
    from colls.simulate.plans import run_files
    plan = base()
    plan["name"] = "x\x1b]0;t\x07\nFAKE LINE"
    text, _ = run_files([("p.json", mscclpp.dumps(plan))], topo(1), [1 << 20])
    assert "\x1b" not in text and "\x07" not in text and "\nFAKE LINE" not in text and "\\x1b" in text


@pytest.mark.parametrize("method,kind,options", [("trees", "allreduce", {"trees_per_gpu": 1}),
                                                 ("trees", "allgather", {"trees_per_gpu": 2}),
                                                 ("direct", "reducescatter", {}), ("ring", "allreduce", {"rings": 2}),
                                                 ("hier", "allgather", {})])
def test_the_least_threadblocks_of_a_cut_program_bound_the_cut(method, kind, options):
    """mscclpp.least_threadblocks of the XML file's program is at most what the same schedule has once cut for
    plans (the lowering for the mscclpp target), on every GPU: what colls.tune refuses by it, the cut would
    have refused after lowering it again."""
    t = topo(2)
    coll = Collective(kind, t.ngpus)
    made = {target: pipeline.compile_schedule(t, coll, method, target=target, options=dict(options), in_memory=True,
                                              prove=False).program for target in ("exe", "mscclpp")}
    for g in made["mscclpp"].gpus:
        alone = dataclasses.replace(made["exe"], gpus=[made["exe"].gpus[g.id]])
        assert mscclpp.least_threadblocks(alone)[0] <= len(g.tbs)
    assert 1 < mscclpp.least_threadblocks(made["exe"])[0] <= max(len(g.tbs) for g in made["mscclpp"].gpus)


def test_a_program_whose_cut_cannot_fit_a_plan_is_refused_before_it_is_cut():
    """16 x DGX H100 (128 GPUs, 24 threadblocks a GPU in a plan colls proves): one tree per GPU as the XML file's
    program fits 24 threadblocks but not 64 ops in each; its steps alone take 1,394 ops or more on GPU 0, whose
    peers need 29 threadblocks at least: refused without lowering it again to cut it."""
    from colls import tune
    from colls.errors import LimitError
    t = hardware.load_topology("dgx-h100", nodes=16)
    with pytest.raises(LimitError, match=r"trees reducescatter on dgx-h100 x16: GPU 0's steps take at least 1,394 ops "
                                         r"in an MSCCL\+\+ plan, at least 29 threadblocks of 64 ops, more than the 24 a "
                                         r"plan of 128 GPUs may hold"):
        tune.compile_for_plans(t, Collective("reducescatter", t.ngpus), "trees", in_memory=True, prove=False)
