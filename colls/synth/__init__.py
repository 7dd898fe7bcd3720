"""Synthesis methods: one module per method, each exposing the same function

    synthesize(topology: Topology, collective: Collective, **options) -> Schedule

``METHODS`` maps a method's name to that function; :func:`get_method` looks one up for the pipeline and
the CLI. Two small helpers every method needs live here too, above the imports of the methods (which
use them): :func:`checked_route` (the physical route of a transfer, or a CollsError naming the pair)
and :func:`schedule_facts` (the bandwidth-model facts a method puts in ``Schedule.info``).
"""

from __future__ import annotations

from typing import Callable

from colls.errors import CollsError


def checked_route(topology, a: int, b: int, method: str, why: str) -> tuple:
    """The route a send from rank ``a`` to rank ``b`` takes, or CollsError naming the pair and ``why``
    the method needed it (``why`` completes "... (the fabric does not allow ...)")."""
    route = topology.route(a, b)
    if route is None:
        raise CollsError(f"{method}: no link between GPU {a} and GPU {b} on {topology.name} ({why})")
    return route


def schedule_facts(schedule, topology) -> dict:
    """Bandwidth-model facts for ``Schedule.info``: algbw (GB/s), the busiest link and its class."""
    algbw, link = schedule.model_algbw(topology)
    facts = {"steps": schedule.nsteps, "model_algbw_gbps": float(algbw)}
    if link is not None:
        facts["bottleneck_link"] = f"{link[0]} -> {link[1]}"
        facts["bottleneck_class"] = topology.graph.edges[link].get("cls")
    return facts


from colls.synth import direct, ring  # noqa: E402  (both import the helpers above)

METHODS: dict[str, Callable] = {"ring": ring.synthesize, "direct": direct.synthesize}


def get_method(name: str) -> Callable:
    """The ``synthesize`` function of method ``name``; CollsError listing the known ones otherwise."""
    try:
        return METHODS[name]
    except KeyError:
        raise CollsError(f"unknown method {name!r} (choose from {', '.join(sorted(METHODS))})",
                         key="--method") from None
