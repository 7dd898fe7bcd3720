"""The simulator's figures for a file ``colls synth`` has just written: busbw at 1 KB, 1 MB and 1 GB for
its one-line summary, and (for ``--json``) the whole curve from 1 KB to 4 GB."""

from __future__ import annotations

from colls.simulate import SUMMARY_SIZES, parse_sizes, prepare, simulate, size_text

CURVE = "1KB:4GB:4"


def add_to(compiled, curve: bool = False) -> None:
    """Put the figures into ``compiled.facts`` (``simulated``); the summary line reads them from there."""
    f = compiled.facts
    kind, topo, program = f["collective"], compiled.topology, compiled.program
    machine = prepare(program, topo, kind)
    inplace = compiled.mode == "inplace"
    sizes = sorted(set(SUMMARY_SIZES) | (set(parse_sizes(CURVE)) if curve else set()))
    timings = {s: simulate(program, topo, kind, s, inplace=inplace, machine=machine, target=compiled.target.name)[0]
               for s in sizes}
    f["simulated_busbw_gbps"] = {size_text(s): timings[s].busbw_gbps for s in SUMMARY_SIZES}
    f["simulated_not_run"] = {size_text(s): timings[s].reason for s in SUMMARY_SIZES if not timings[s].served}
    f["simulated_calls"] = "in-place" if inplace else "out-of-place"
    if curve:
        f["simulated"] = [timings[s].to_dict() for s in sorted(timings)]


def words(facts: dict) -> str | None:
    """``"modelled busbw 1KB n/a, 1MB 12.3, 1GB 180.4 GB/s"`` (n/a: the runtime does not run the file for
    that size, see ``colls simulate``)."""
    sim = facts.get("simulated_busbw_gbps")
    if not sim:
        return None
    parts = [f"{size} {'n/a' if v is None else f'{v:.3g}'}" for size, v in sim.items()]
    reasons = list((facts.get("simulated_not_run") or {}).values())
    note = f" (n/a: {reasons[0]})" if reasons else ""
    return f"simulated busbw {', '.join(parts)} GB/s{note}"
