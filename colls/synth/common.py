"""Helpers every synthesis method uses: physical routes that must exist, and bandwidth-model facts."""

from __future__ import annotations

from colls.errors import CollsError


def checked_route(topology, a: int, b: int, method: str, why: str) -> tuple:
    """The route a send from rank ``a`` to rank ``b`` takes, or CollsError naming the pair and ``why``
    the method needed it (``why`` completes "... (the fabric does not allow ...)")."""
    route = topology.route(a, b)
    if route is None:
        raise CollsError(f"{method}: no link between GPU {a} and GPU {b} on {topology.name} ({why})")
    return route


def larger_machine_hint(kind: str) -> str:
    """What to try for ``kind`` where a method refuses a machine for its size."""
    if kind in ("allgather", "reducescatter", "allreduce"):
        return "--method hier (the node's trees joined along the rails)"
    if kind == "alltoall":
        return "fewer --nodes (every GPU's data goes to every other: each method's threadblocks grow with the GPUs)"
    return "--method ring"


def too_many_gpus(method: str, collective, where: str, most: int, why: str, scope: str = "") -> CollsError:
    """The refusal of a machine beyond what ``method`` takes on (``most`` GPUs, for ``why``; ``scope``: the
    words that narrow it, " for an allreduce on exe"), with what to try instead."""
    return CollsError(f"{method} {collective.kind} on {where}: {collective.nranks} GPUs is more than this method "
                      f"takes on{scope} ({most}: {why}); try " + larger_machine_hint(collective.kind), key="--method")


def schedule_facts(schedule, topology) -> dict:
    """Bandwidth-model facts for ``Schedule.info``: algbw (GB/s), the busiest link and its class."""
    algbw, link = schedule.model_algbw(topology)
    facts = {"steps": schedule.nsteps, "model_algbw_gbps": float(algbw)}
    if link is not None:
        facts["bottleneck_link"] = f"{link[0]} -> {link[1]}"
        facts["bottleneck_class"] = topology.graph.edges[link].get("cls")
    return facts
