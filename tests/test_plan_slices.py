"""How a plan's pipeline is timed and chosen: its slots hold whole messages (so a connection has two whole steps
in flight, however they are sliced), and each plan is pipelined by the unit that simulates fastest at the sizes
it serves."""

import math

import pytest

from colls import mscclpp, pipeline, tune
from colls.collectives import Collective
from colls.inputs import hardware
from colls.runtimes import mscclpp as rt
from colls.simulate import plans, simulate
from colls.simulate.engine import message_count

GB = 1 << 30


@pytest.fixture(scope="module")
def direct_allreduce():
    t = hardware.load_topology("dgx-a100")
    return t, pipeline.compile_schedule(t, Collective("allreduce", t.ngpus), "direct").program


def test_a_connection_holds_two_whole_messages_of_slices(direct_allreduce):
    """Pipelined by 1 MiB, a step of c chunks of 1 GB / chunks-per-loop is that many slices, and the plan's 2
    slots take 2 whole steps: the engine lets each connection run 2 x its smallest step's slices ahead of the
    receiver. Unpipelined, a message is a whole step: 2."""
    t, program = direct_allreduce
    piped = plans.machine(program, t, "allreduce", rt.PIPELINE_UNIT_BYTES)
    whole = plans.machine(program, t, "allreduce", None)
    eff = piped.message_bytes("Simple", GB)
    chunk = GB / plans.basis(program)
    npass = math.ceil(chunk / eff) if chunk > eff else 1
    mac = max(1, eff // math.ceil(chunk))
    caps = piped.fifo_caps("Simple", mac, npass)
    assert len(caps) == len(piped.conn_key) and max(caps) > mscclpp.SLOTS
    for c, ti in enumerate(piped.conn_sender):
        cnts = [st[3] for st in piped.steps[ti] if st[0] and st[3] > 0]
        assert caps[c] == mscclpp.SLOTS * npass * min(message_count(n, mac) for n in cnts)
    assert set(whole.fifo_caps("Simple", 1 << 20, 1)) == {mscclpp.SLOTS}


def test_a_pipelined_plan_keeps_up_with_its_xml_program_at_1gb(direct_allreduce):
    """1 x DGX A100 direct allreduce at 1 GB: its plan pipelined by 1 MiB took 1.019 x the same program's MSCCL
    XML time while the engine let 2 slices, not 2 whole messages, be in flight per connection, and as fast once it
    did. The XML kernel's receivers take each message's two slices on their own (colls.simulate.engine), where a
    plan's op is waited for whole: the plan now takes 1.04 x (unpipelined 1.15 x)."""
    t, program = direct_allreduce
    plan = mscclpp.plan_of(program, t, name="p", inplace=False, slice_bytes=rt.PIPELINE_UNIT_BYTES)
    ours = plans.time_plan(plan, program, t, GB, inplace=False)
    xml = simulate(program, t, "allreduce", GB, target="exe")[0]
    assert ours.served and ours.time_us <= xml.time_us * 1.06


def test_each_plan_is_pipelined_by_its_fastest_unit(direct_allreduce):
    t, program = direct_allreduce
    units = plans.slices(program, t)
    assert [u for u, _ in units][0] == rt.PIPELINE_UNIT_BYTES and units[-1][0] is None
    assert all(mscclpp.slice_of(p) == u for u, p in units)
    sizes = (64 << 20, GB)
    unit, score = plans.fastest_slice(program, t, sizes)

    def geomean(plan):
        return math.exp(sum(math.log(plans.time_plan(plan, program, t, s).time_us) for s in sizes) / len(sizes))
    scores = {u: geomean(p) for u, p in units}
    assert score == pytest.approx(scores[unit]) and score <= min(scores.values()) * (1 + 1e-9)
    # a size the plan does not serve: the default unit, and no time
    assert plans.fastest_slice(program, t, (1000,)) == (rt.PIPELINE_UNIT_BYTES, math.inf)


def test_synth_writes_the_plan_with_the_unit_it_chose():
    t = hardware.load_topology("dgx-a100", nodes=2)
    made = tune.compile_for_plans(t, Collective("allreduce", t.ngpus), "direct", in_memory=True, prove=False)
    unit = made.facts["plan_slice"]
    assert unit in rt.PIPELINE_UNITS + (None,)
    assert plans.fastest_slice(made.program, t, tune.SIZES)[0] == unit


def test_a_unit_changes_nothing_in_a_plan_but_itself(direct_allreduce):
    """slices writes the plan once and sets each other unit (mscclpp.with_unit): the same as writing it."""
    t, program = direct_allreduce
    one = mscclpp.plan_of(program, t, name="p", slice_bytes=rt.PIPELINE_UNIT_BYTES)
    for unit in rt.PIPELINE_UNITS:
        assert mscclpp.dumps(mscclpp.with_unit(one, unit)) == \
            mscclpp.dumps(mscclpp.plan_of(program, t, name="p", slice_bytes=unit))
