"""A law: every file a method writes verifies, and after one random mutation of one step (offset, count,
peer, dependency) ``verify`` either rejects the file or the mutated file still computes the collective.

"Still computes" is decided here, independently of the verifier: a chunk-level re-execution of the file in
many random orders (every order the runtime allows: dependencies, FIFO room and messages respected, steps
whole), with the kernel's own step numbering, must finish and leave every output chunk right.
"""

from __future__ import annotations

import copy
from functools import lru_cache

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import oracle
import topos
from colls import msccl, pipeline
from colls.collectives import KINDS, Collective
from colls.errors import CollsError
from colls.verify import verify

MACHINES = {"switch3": lambda: topos.switch_node(3), "switch4": lambda: topos.switch_node(4),
            "rails2x2": lambda: topos.rail_cluster(2, 2)}
METHODS = ("ring", "direct", "trees")


@lru_cache(maxsize=None)
def written(machine: str, method: str, kind: str, chunks: int) -> str | None:
    """The XML a method writes for this case (verified by the pipeline), or None where it refuses."""
    topo = MACHINES[machine]()
    try:
        return pipeline.compile_schedule(topo, Collective(kind, topo.ngpus, chunks=chunks, root=1), method).text
    except CollsError:
        return None


cases = st.tuples(st.sampled_from(sorted(MACHINES)), st.sampled_from(METHODS), st.sampled_from(KINDS),
                  st.integers(1, 2))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(case=cases, data=st.data())
def test_a_written_file_verifies_and_a_mutation_is_caught_or_harmless(case, data):
    text = written(*case)
    assume(text is not None)
    program, findings = msccl.parse(text, "<written>")
    assert verify(program, "exe", findings=findings).ok
    p = copy.deepcopy(program)
    g = data.draw(st.sampled_from(p.gpus))
    b = data.draw(st.sampled_from(g.tbs))
    assume(b.steps)
    s = data.draw(st.sampled_from(b.steps))
    field = data.draw(st.sampled_from(["srcoff", "dstoff", "cnt", "peer", "depid", "deps"]))
    value = data.draw(st.integers(-1, max(p.nchunksperloop, p.ngpus, len(g.tbs)) + 1))
    if field == "peer":
        setattr(b, "send" if b.send >= 0 else "recv", value)
    else:
        setattr(s, field, value)
    oracle.verdict_holds(p, seeds=6, root=1, why=(case, field, value))
