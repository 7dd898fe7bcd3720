"""colls.schedule's own checks and models, on schedules made by hand: what a method hands the lowering is
refused with the op at fault named, and the link loads are those of the routes each op takes."""

from __future__ import annotations

import pickle
import re
from dataclasses import FrozenInstanceError

import pytest

import topos
from colls.collectives import Collective
from colls.errors import CollsError
from colls.schedule import Op, Schedule


def _ring(n: int = 4) -> list[Op]:
    """A well-formed ring allgather of ``n`` ranks (out-of-place, one chunk)."""
    ops = [Op(0, r, r, "i", 0, "o", r) for r in range(n)]
    for t in range(n - 1):
        for r in range(n):
            c = (r - t) % n
            ops.append(Op(t, r, (r + 1) % n, "i" if t == 0 else "o", 0 if t == 0 else c, "o", c))
    return ops


@pytest.mark.parametrize("bad, message", [
    (Op(5, 1, 4, "o", 0, "o", 0), "step 5 lane 0: copy 1 chunk(s) rank 1 o[0] -> rank 4 o[0] names a rank outside 0..3"),
    (Op(5, -1, 2, "o", 0, "o", 0), "names a rank outside 0..3"),
    (Op(5, 1, 2, "o", 0, "o", 0, count=0), "moves no chunk"),
    (Op(5, 1, 2, "o", 3, "o", 3, count=2), "source is outside buffer o"),
    (Op(5, 1, 2, "i", 0, "o", 4), "target is outside buffer o"),
    (Op(5, 1, 2, "o", -1, "o", 0), "source is outside buffer o"),
    (Op(5, 1, 2, "o", 0, "x", 0), "names buffer 'x'"),
    (Op(5, 1, 2, "o", 0, "s", 0), "target is outside buffer s"),      # no scratch
])
def test_check_shape_names_the_first_op_at_fault(bad, message):
    ops = _ring()
    ops.insert(7, bad)
    ops.append(Op(6, 1, 2, "o", 0, "o", 9))        # also wrong, but after it
    with pytest.raises(CollsError, match=re.escape(message)):
        Schedule(Collective("allgather", 4), ops, "ring").check_shape()


def test_check_shape_takes_scratch_in_flight_values_and_every_buffer_in_range():
    ops = _ring() + [Op(3, 0, 1, "o", 3, "s", 1), Op(4, 1, 2, "s", 1, "t", 7, reduce=("o", 1)),
                     Op(5, 2, 3, "t", 7, "s", 0, reduce=("o", 2))]
    Schedule(Collective("allgather", 4), ops, "ring", scratch=2).check_shape()
    Schedule(Collective("allgather", 4), [], "ring").check_shape()


def test_link_loads_follow_each_op_s_route_and_name_one_without():
    topo = topos.switch_node(4)
    ops = _ring()
    loads = Schedule(Collective("allgather", 4), ops, "ring").link_loads(topo)
    expected: dict = {}
    for op in ops:
        if op.src != op.dst:
            route = topo.route(op.src, op.dst)
            for link in zip(route, route[1:]):
                expected[link] = expected.get(link, 0) + op.count
    assert loads == expected and sum(loads.values()) == 2 * 12       # 12 sends, two hops through the switch
    given = Op(0, 0, 1, "i", 0, "o", 0, route=(0, 3, 1))          # a route given by the method is the one taken
    assert Schedule(Collective("allgather", 4), [given], "ring").link_loads(topo) == {(0, 3): 1, (3, 1): 1}

    class NoRoute:
        def route(self, a, b):
            return None if (a, b) == (2, 3) else [a, b]
    first = "step 0 lane 0: copy 1 chunk(s) rank 2 i[0] -> rank 3 o[2]: no physical route from rank 2 to 3"
    with pytest.raises(CollsError, match=re.escape(first)):
        Schedule(Collective("allgather", 4), ops, "ring").link_loads(NoRoute())


def test_an_op_is_frozen_hashable_and_pickled_as_built():
    a = Op(1, 2, 3, "o", 4, "t", 5, 2, ("i", 4), 1, (2, 9, 3))
    b = Op(step=1, src=2, dst=3, src_buf="o", src_index=4, dst_buf="t", dst_index=5, count=2, reduce=("i", 4),
           lane=1, route=(2, 9, 3))
    assert a == b and hash(a) == hash(b) and pickle.loads(pickle.dumps(a)) == a
    assert Op(0, 0, 1, "i", 0, "o", 0) == Op(0, 0, 1, "i", 0, "o", 0, 1, None, 0, ())
    with pytest.raises(FrozenInstanceError):
        a.step = 2
    with pytest.raises(TypeError):
        Op(0, 0, 1, "i", 0)
