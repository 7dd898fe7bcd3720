"""The plan verifier's quotient (colls.verify.plan_symmetry): a plan whose GPUs run one plan relabelled is
executed on GPUs 0..shift-1 only. It must decide exactly what the whole plan decides: a mutation made alike on
every GPU (so the symmetry stays) is caught by the quotient exactly when it is caught by the whole plan."""

from __future__ import annotations

import copy
from functools import lru_cache

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import topos
from colls import mscclpp, pipeline
from colls.collectives import Collective
from colls.verify import plan as vplan
from colls.verify import plan_symmetry


@lru_cache(maxsize=None)
def _plan(case):
    machine, kind, method, proto = case
    topo = _topo(machine)
    program = pipeline.compile_schedule(topo, Collective(kind, topo.ngpus), method, target="mscclpp",
                                        in_memory=True, prove=False).program
    return mscclpp.plan_of(program, topo, name="-".join(case), inplace=False, protocol=proto)


@lru_cache(maxsize=None)
def _topo(machine):
    return {"rail2x2": lambda: topos.rail_cluster(2, 2), "rail2x4": lambda: topos.rail_cluster(2, 4),
            "switch4": lambda: topos.switch_node(4)}[machine]()


def _whole(plan, inplace=None):
    """verify_plan without the symmetry."""
    saved = plan_symmetry.find
    plan_symmetry.find = lambda m: None
    try:
        return vplan.verify_plan(plan, plan["collective"], "p", inplace=inplace)
    finally:
        plan_symmetry.find = saved


# rail2x2: GPUs 0 and 2 are a half-turn apart, so each lists their pair's two channels in the other's order
CASES = [("rail2x2", "allgather", "hier", "Simple"), ("rail2x2", "reducescatter", "hier", "Simple"),
         ("rail2x2", "allreduce", "hier", "Simple"), ("rail2x4", "allgather", "hier", "Simple"),
         ("switch4", "allgather", "ring", "Simple"), ("switch4", "allreduce", "ring", "Simple"),
         ("switch4", "reducescatter", "ring", "LL"), ("rail2x2", "allreduce", "hier", "LL")]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(c))
def test_the_plans_colls_writes_are_proved_on_one_orbit_representative_each(case):
    plan = _plan(case)
    report = vplan.verify_plan(plan, plan["collective"], "p")
    assert report.ok and report.facts["semantics_checked"], report.format()
    sym = report.facts["symmetry"]
    assert sym["ranks"] == len(plan["gpus"]) and sym["ranks_run"] < len(plan["gpus"])
    assert "by symmetry" in report.summary()
    whole = _whole(plan)
    assert whole.ok and {k: v for k, v in report.facts.items() if k != "symmetry"} == whole.facts


def test_a_gpu_that_differs_is_no_symmetry():
    plan = copy.deepcopy(_plan(("switch4", "allgather", "ring", "Simple")))
    plan["gpus"][2]["semaphores"].append({"init_value": 0})
    assert "symmetry" not in vplan.verify_plan(plan, "allgather", "p").facts


def test_channel_lists_in_another_order_are_the_same_plan():
    """A writer that lists a GPU's channels in its own order (here GPU 5's, peers reversed, its threadblocks'
    channel ids renumbered to match) writes the same plan: the proof names channels by the threadblocks that
    hold them."""
    plan = copy.deepcopy(_plan(("rail2x4", "allgather", "hier", "Simple")))
    g = plan["gpus"][5]
    for ch in g["channels"]:
        peers = ch["connected_to"]
        if len(peers) < 2:
            continue
        # peers in reverse order, each peer's channels kept in theirs (the k-th to a peer still pairs with the
        # peer's k-th back)
        groups: dict = {}
        for i, p in enumerate(peers):
            groups.setdefault(p, []).append(i)
        order = [i for p in sorted(groups, reverse=True) for i in groups[p]]
        new_index = {old: new for new, old in enumerate(order)}
        ch["connected_to"] = [peers[i] for i in order]
        for tb in g["threadblocks"]:
            for tch in tb["channels"]:
                if tch["channel_type"] == ch["channel_type"]:
                    tch["channel_ids"] = [new_index[i] for i in tch["channel_ids"]]
    report = vplan.verify_plan(plan, "allgather", "p")
    assert report.ok and report.facts.get("symmetry"), report.format()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(case=st.sampled_from(CASES), data=st.data())
def test_a_mutation_made_alike_on_every_gpu_is_caught_by_the_quotient_as_by_the_whole(case, data):
    """Every GPU's threadblock ``t``, op ``j`` (or op ``j`` of a pipeline's body) changed the same way, so the
    plan stays symmetric; the verdict, the rules broken and the findings must be those of the whole plan."""
    plan = copy.deepcopy(_plan(case))
    g0 = plan["gpus"][0]
    t = data.draw(st.integers(0, len(g0["threadblocks"]) - 1))
    ops0 = g0["threadblocks"][t]["ops"]
    assume(ops0)
    j = data.draw(st.integers(0, len(ops0) - 1))
    inner = None
    if ops0[j]["name"] == "pipeline" and ops0[j]["ops"] and data.draw(st.booleans()):
        inner = data.draw(st.integers(0, len(ops0[j]["ops"]) - 1))
    change = data.draw(st.sampled_from(["delete", "nop", "index", "swap", "size", "channel"]))
    delta = data.draw(st.sampled_from([-1, 1]))
    for g in plan["gpus"]:
        ops = g["threadblocks"][t]["ops"]
        if inner is not None:
            ops, k = ops[j]["ops"], inner
        else:
            k = j
        op = ops[k]
        buffers = [b for key in ("src_buff", "dst_buff") for b in op.get(key, [])]
        if change == "delete":
            del ops[k]
        elif change == "nop":
            ops[k] = {"name": "nop"}
        elif change == "swap":
            assume(k + 1 < len(ops))
            ops[k], ops[k + 1] = ops[k + 1], ops[k]
        elif change in ("index", "size"):
            assume(buffers)
            buffers[0][change] = max(buffers[0][change] + delta, 0)
        else:
            assume(op.get("channel_ids"))
            op["channel_ids"] = [max(c + delta, 0) for c in op["channel_ids"]]
    inplace = data.draw(st.booleans())      # in-place calls alias input and output: moved alike by the rotation
    quotient, whole = vplan.verify_plan(plan, plan["collective"], "p", inplace=inplace), _whole(plan, inplace)
    assert quotient.ok == whole.ok
    assert quotient.verdict == whole.verdict
    assert [str(f) for f in quotient.findings] == [str(f) for f in whole.findings]


def _ring_plan(n: int, signal_first: bool) -> dict:
    """An allgather of one chunk on ``n`` GPUs (3 or more), each alike: threadblock 0 copies the input to its
    own output chunk, puts it into GPU r + 1's scratch, signals it and waits for its credit; threadblock 1 waits
    for GPU r - 1's signal, copies its scratch to output chunk r - 1 and signals the credit back (two chunks of
    n gathered: only the postcondition fails). ``signal_first``: threadblock 0 signals before its put, so GPU
    r's read of its scratch is not ordered after GPU r - 1's put: a race on every GPU, which the quotient sees
    as the put of GPU 0's image on GPU n - 1."""
    put = {"name": "put", "src_buff": [{"type": "i", "index": 0, "size": 1}],
           "dst_buff": [{"buffer_id": 0, "index": 0, "size": 1}], "channel_type": "memory"}
    signal = {"name": "signal", "channel_ids": [0], "channel_type": "memory"}
    own = {"name": "copy", "src_buff": [{"type": "i", "index": 0, "size": 1}]}
    sends = [signal, {"name": "nop"}, put] if signal_first else [put, {"name": "nop"}, signal]
    credit = {"name": "wait", "channel_ids": [0], "channel_type": "memory"}
    gpus = []
    for r in range(n):
        tb0 = {"id": 0, "ops": [dict(own, dst_buff=[{"type": "o", "index": r, "size": 1}]), {"name": "nop"}] + sends + [credit],
               "channels": [{"channel_type": "memory", "channel_ids": [0]}],
               "remote_buffer_refs": [{"access_channel_type": "memory", "remote_buffer_ids": [0]}]}
        tb1 = {"id": 1, "ops": [{"name": "wait", "channel_ids": [0], "channel_type": "memory"}, {"name": "nop"},
                                {"name": "copy", "src_buff": [{"type": "s", "index": 0, "size": 1}],
                                 "dst_buff": [{"type": "o", "index": (r - 1) % n, "size": 1}]},
                                {"name": "nop"}, {"name": "signal", "channel_ids": [0], "channel_type": "memory"}],
               "channels": [{"channel_type": "memory", "channel_ids": [1]}], "remote_buffer_refs": []}
        gpus.append({"id": r, "input_chunks": 1, "output_chunks": n, "scratch_chunks": 1,
                     "threadblocks": [tb0, tb1],
                     "channels": [{"channel_type": "memory", "connected_to": [(r + 1) % n, (r - 1) % n]}],
                     "remote_buffers": [{"rank": (r + 1) % n, "type": "s", "access_channel_types": ["memory"]}],
                     "semaphores": []})
    return {"name": "ring", "collective": "allgather", "protocol": "Simple", "inplace": False,
            "reuse_resources": False, "num_threads_per_block": 1024, "use_double_scratch_buffer": False,
            "buffer_alignment": 16, "min_message_size": 0, "max_message_size": 1 << 20, "gpus": gpus}


@pytest.mark.parametrize("n", [3, 4])
def test_a_put_ordered_after_the_read_only_on_another_gpu_is_a_race_in_the_quotient_too(n):
    whole = _whole(_ring_plan(n, signal_first=True))
    assert "plan-race" in whole.rules() or "plan-slot-race" in whole.rules(), whole.format()
    quotient = vplan.verify_plan(_ring_plan(n, signal_first=True), "allgather", "p")
    assert [str(f) for f in quotient.findings] == [str(f) for f in whole.findings]
    # the quotient alone (GPU 0) finds the race: the whole run that names every GPU is taken because it does
    plan = _ring_plan(n, signal_first=True)
    cx = vplan._Cx(plan, "allgather", "p")
    m = vplan._Model(cx, plan, "allgather")
    m.check_static()
    sym = plan_symmetry.find(m)
    assert sym is not None and sym.shift == 1
    m.execute_all(False, sym)
    assert {"plan-race", "plan-slot-race"} & {f.rule for f in cx.findings}


@pytest.mark.parametrize("n", [3, 4])
def test_the_ordered_ring_has_no_race(n):
    report = vplan.verify_plan(_ring_plan(n, signal_first=False), "allgather", "p")
    assert report.rules() == {"plan-postcondition"}, report.format()    # each GPU gathers two chunks of n


def test_the_proof_is_held_to_its_clocks_and_a_symmetric_plan_needs_one_orbit_of_them():
    plan = _plan(("rail2x4", "allgather", "hier", "Simple"))
    per = len(plan["gpus"][0]["threadblocks"])
    whole, orbit = (8 * per) * (8 * per), (4 * per) * (8 * per)     # 8 GPUs, proved on 4
    report = vplan.verify_plan(plan, "allgather", "p", max_clocks=orbit)
    assert report.ok and report.facts["symmetry"]["ranks_run"] == 4, report.format()
    refused = vplan.verify_plan(plan, "allgather", "p", max_clocks=orbit - 1)
    assert refused.verdict == "unproven" and not refused.facts["semantics_checked"]
    assert "too large to prove: 4 of its 8 GPUs run" in refused.format()
    asymmetric = copy.deepcopy(plan)
    asymmetric["gpus"][3]["semaphores"].append({"init_value": 0})
    assert vplan.verify_plan(asymmetric, "allgather", "p", max_clocks=whole).ok
    assert vplan.verify_plan(asymmetric, "allgather", "p", max_clocks=whole - 1).verdict == "unproven"
