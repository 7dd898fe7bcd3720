"""The verifier's quotient (colls.verify.symmetry): a program whose ranks run one program relabelled is run on
ranks 0..shift-1 only. It must decide exactly what the whole program decides: the collective's conditions
are invariant under the rotation, and a mutation made alike on every rank (so the symmetry stays) is caught
by the quotient exactly when it is caught by the whole program."""

from __future__ import annotations

import copy
from functools import lru_cache

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import topos
from colls import pipeline
from colls.collectives import Collective
from colls.inputs.hardware import load_topology
from colls.verify import symmetry, verify
from colls.verify.context import Context


def _divisors(n):
    return [d for d in range(1, n) if n % d == 0]


@pytest.mark.parametrize("kind", symmetry.ROTATION_INVARIANT)
@pytest.mark.parametrize("n", [2, 3, 4, 6])
@pytest.mark.parametrize("chunks", [1, 2, 6])
def test_the_collective_is_invariant_under_the_rotation(kind, n, chunks):
    """Step 1 of the argument: with the per-rank slices find() uses, rank r + d's initial state, aliasing,
    writable input and expected outputs are the images of rank r's, for every shift d."""
    coll = Collective(kind, n, chunks)
    choices = coll.rotation_slices()
    assert choices
    sizes = {"i": coll.in_chunks, "o": coll.out_chunks}
    for ti, to in choices:
        for d in _divisors(n):
            sym = symmetry.Symmetry(n, d, {"i": ti, "o": to}, sizes)

            def move(storage, t=d):
                buf, j = storage
                step = {"i": ti, "o": to}.get(buf, 0)
                return buf, (j + t * step) % sizes[buf] if step else j

            for r in range(n):
                r2 = (r + d) % n
                for inplace in (False, True):
                    a, b = coll.initial_state(r, inplace, 2), coll.initial_state(r2, inplace, 2)
                    assert {move(k): sym.image(v, 1) for k, v in a.items()} == b
                    for buf in ("i", "o", "s"):
                        for j in range(coll.size(buf, 2)):
                            assert move(coll.alias(r, buf, j, inplace)) == coll.alias(r2, *move((buf, j)), inplace)
                    for j in range(coll.in_chunks):
                        assert coll.input_writable(r, j, inplace) == coll.input_writable(r2, move(("i", j))[1],
                                                                                           inplace)
                for j in range(coll.out_chunks):
                    want = coll.expected(r, j)
                    assert coll.expected(r2, move(("o", j))[1]) == (None if want is None else sym.image(want, 1))


@lru_cache(maxsize=None)
def _program(case):
    machine, kind, method = case
    topo = {"dgx-a100x2": lambda: load_topology("dgx-a100", nodes=2), "switch4": lambda: topos.switch_node(4),
            "switch6": lambda: topos.switch_node(6)}[machine]()
    return pipeline.compile_schedule(topo, Collective(kind, topo.ngpus), method, in_memory=True, prove=False).program


def _whole(program):
    """verify without the symmetry."""
    saved = symmetry.find
    symmetry.find = lambda cx: None
    try:
        return verify(program, "exe")
    finally:
        symmetry.find = saved


CASES = [("dgx-a100x2", "allgather", "hier"), ("dgx-a100x2", "reducescatter", "hier"),
         ("dgx-a100x2", "allreduce", "hier"), ("switch4", "allgather", "ring"), ("switch4", "allreduce", "ring"),
         ("switch6", "reducescatter", "ring")]


@pytest.mark.parametrize("case", CASES)
def test_the_methods_files_are_proved_on_one_orbit_representative_each(case):
    program = _program(case)
    report = verify(program, "exe")
    assert report.ok and report.facts["semantics_checked"]
    sym = report.facts["symmetry"]
    assert sym["ranks"] == program.ngpus and sym["ranks_run"] < program.ngpus
    whole = _whole(program)
    assert whole.ok and {k: v for k, v in report.facts.items() if k != "symmetry"} == whole.facts


def test_a_rank_that_differs_is_no_symmetry():
    program = copy.deepcopy(_program(("switch4", "allgather", "ring")))
    tb = next(tb for tb in program.gpus[2].tbs if tb.steps)
    tb.steps[0].hasdep = 1 - (tb.steps[0].hasdep or 0)
    report = verify(program, "exe")
    assert "symmetry" not in report.facts


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(case=st.sampled_from(CASES), data=st.data())
def test_a_mutation_made_alike_on_every_rank_is_caught_by_the_quotient_as_by_the_whole(case, data):
    """Every rank's threadblock ``i``, step ``k`` changed the same way (offsets and peers moved by the same
    amount, dependencies, counts and types set alike), so the program stays symmetric; the verdict and the
    rules broken must be those of the whole program."""
    p = copy.deepcopy(_program(case))
    n = p.ngpus
    g0 = p.gpus[0]
    i = data.draw(st.integers(0, len(g0.tbs) - 1))
    assume(g0.tbs[i].steps)
    k = data.draw(st.integers(0, len(g0.tbs[i].steps) - 1))
    field = data.draw(st.sampled_from(["srcoff", "dstoff", "cnt", "peer", "depid", "deps", "hasdep", "type",
                                       "swap"]))
    delta = data.draw(st.integers(-3, 3))
    typ = data.draw(st.sampled_from(["s", "r", "rcs", "rrc", "rrs", "cpy", "re", "nop"]))
    for g in p.gpus:
        tb = sorted(g.tbs, key=lambda tb: tb.id)[i]
        st_ = tb.steps[k]
        if field in ("srcoff", "dstoff"):
            setattr(st_, field, max(getattr(st_, field) + delta, 0))
        elif field == "peer":
            attr = "send" if tb.send >= 0 else "recv"
            setattr(tb, attr, (getattr(tb, attr) + delta) % n)
        elif field in ("cnt", "depid", "deps"):
            setattr(st_, field, max(getattr(st_, field) + delta, -1))
        elif field == "hasdep":
            st_.hasdep = 1 - (st_.hasdep or 0)
        elif field == "type":
            st_.type = typ
        elif k + 1 < len(tb.steps):
            tb.steps[k], tb.steps[k + 1] = tb.steps[k + 1], tb.steps[k]
            tb.steps[k].s, tb.steps[k + 1].s = k, k + 1
    quotient, whole = verify(p, "exe"), _whole(p)
    assert quotient.ok == whole.ok
    assert quotient.rules() == whole.rules()
    assert [str(f) for f in quotient.findings] == [str(f) for f in whole.findings]


def test_find_needs_the_whole_rank_set():
    """No symmetry is claimed for a program whose ranks are not 0..N-1 (the structure pass reports it)."""
    program = copy.deepcopy(_program(("switch4", "allgather", "ring")))
    program.gpus[3].id = 7
    cx = Context(program, pipeline.get_target("exe"), None)
    from colls.verify import algo, structure
    algo.check(cx)
    structure.check(cx)
    assert symmetry.find(cx) is None


def _racing_pair(n: int):
    """Every rank r: tb 0 (to r + 1) copies its input to output chunk r, then sends its input; tb 1 (from
    r - 1) receives chunk r - 1, then copies output chunk r to scratch. Rank r's copy and its read of chunk r
    are ordered only through rank r - 1's copy (its message), not rank r's: a race at every rank, which a
    search that forgot which rank a path reached would take for an order."""
    from colls.program import Gpu, Program, Step, Threadblock
    gpus = []
    for r in range(n):
        sender = Threadblock(0, send=(r + 1) % n, recv=-1, chan=0, steps=[
            Step(0, "cpy", "i", 0, "o", r, 1), Step(1, "s", "i", 0, "i", 0, 1)])
        receiver = Threadblock(1, send=-1, recv=(r - 1) % n, chan=0, steps=[
            Step(0, "r", "i", 0, "o", (r - 1) % n, 1), Step(1, "cpy", "o", r, "s", 0, 1)])
        gpus.append(Gpu(r, 1, n, 1, [sender, receiver]))
    return Program("racing", "allgather", n, n, 1, "Simple", 0, 1, gpus=gpus)


@pytest.mark.parametrize("n", [2, 4])
def test_a_race_ordered_only_through_another_rank_is_a_race(n):
    program = _racing_pair(n)
    whole = _whole(program)
    assert "race" in whole.rules(), whole.format()        # (and, beyond 2 ranks, a missing chunk)
    assert verify(program, "exe").rules() == whole.rules()
    from colls.verify.context import Context as Cx
    from colls.verify import algo, communication, structure
    cx = Cx(program, pipeline.get_target("exe"), None)
    for check in (algo.check, structure.check, communication.check):
        check(cx)
    assert symmetry.find(cx).shift == 1          # the quotient runs rank 0 alone
    program.gpus[0].tbs[1].steps[1].depid, program.gpus[0].tbs[1].steps[1].deps = 0, 0   # ordered on rank 0 only
    assert "symmetry" not in verify(program, "exe").facts


def test_a_ring_whose_every_rank_receives_first_hangs_in_the_quotient_too():
    from colls.program import Gpu, Program, Step, Threadblock
    gpus = [Gpu(r, 1, 4, 0, [Threadblock(0, send=(r + 1) % 4, recv=(r - 1) % 4, chan=0, steps=[
        Step(0, "r", "i", 0, "o", (r - 1) % 4, 1), Step(1, "s", "i", 0, "i", 0, 1),
        Step(2, "cpy", "i", 0, "o", r, 1)])]) for r in range(4)]
    program = Program("hang", "allgather", 4, 4, 1, "Simple", 0, 1, gpus=gpus)
    assert "deadlock" in verify(program, "exe").rules()
    gpus[0].tbs[0].steps[:2] = gpus[0].tbs[0].steps[1::-1]      # rank 0 sends first: the ring turns
    for k, st_ in enumerate(gpus[0].tbs[0].steps):
        st_.s = k
    assert "deadlock" not in verify(program, "exe").rules()


def test_a_schedule_without_the_symmetry_is_lowered_whole():
    from colls import lower
    from colls.runtimes import get_target
    from colls.synth import get_method
    topo = load_topology("dgx-a100", nodes=2)
    schedule = get_method("ring")(topo, Collective("allreduce", topo.ngpus))
    assert schedule.rotation() is None
    assert lower.lower_by_symmetry(schedule, get_target("exe")) is None


def test_a_program_lowered_by_symmetry_that_does_not_verify_is_lowered_whole(monkeypatch):
    """The pipeline proves what the symmetric lowering makes; should that proof fail, every rank is lowered and
    the file is that one."""
    from colls import lower
    topo = load_topology("dgx-a100", nodes=2)
    made = []

    def broken(schedule, target, options=None):
        program = lower.lower(schedule, target, options)
        tb = next(tb for tb in program.gpus[3].tbs if tb.steps)
        tb.steps[0].dstoff = (tb.steps[0].dstoff + 1) % 32 if tb.steps[0].dstoff >= 0 else tb.steps[0].dstoff
        tb.steps[0].srcoff = (tb.steps[0].srcoff + 1) % 32
        made.append(program)
        return program
    monkeypatch.setattr(lower, "lower_by_symmetry", broken)
    result = pipeline.compile_schedule(topo, Collective("allgather", topo.ngpus), "hier")
    assert made and result.program is not made[0] and result.report.ok
