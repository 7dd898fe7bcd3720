"""The simulator's figures for a file ``colls synth`` has just written: busbw at 1 KB, 1 MB and 1 GB for
its one-line summary, and (for ``--json``) the whole curve from 1 KB to 4 GB. They go into the file's
facts; :meth:`colls.pipeline.Compiled.summary` words them."""

from __future__ import annotations

import math

from colls import bound as bounds
from colls.errors import CollsError
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
    try:
        best = bounds.runtime_optimum(topo, kind, compiled.target.name, root=f.get("root") or 0)
    except CollsError:                      # no bound on this machine: the figures stand alone
        best = None
    if best is not None:
        # the share of the runtime optimum each served size reaches: the least time any file can take on the
        # runtime over the time this file takes
        f["runtime_optimum_pct"] = {size_text(s): 100.0 * best.time_us(s) / timings[s].time_us
                                    for s in SUMMARY_SIZES if timings[s].served and timings[s].time_us > 0}
    f["simulated_not_run"] = {size_text(s): timings[s].reason for s in SUMMARY_SIZES if not timings[s].served}
    why = _why_short(f, timings[SUMMARY_SIZES[-1]])
    if why:
        f["short_note"] = why
    f["simulated_calls"] = "in-place" if inplace else "out-of-place"
    if curve:
        f["simulated"] = [timings[s].to_dict() for s in sorted(timings)]


SHORT_OF = 85.0        # % of the runtime optimum at the largest summary size below which the summary says why


def _why_short(f: dict, largest) -> str | None:
    """Why the file is below :data:`SHORT_OF` % of the runtime optimum at the largest summary size, or None:
    the schedule's own use of the links when its link model is that far from the link optimum (every byte it
    moves is on the links the model counts), else the runtime's costs the link model leaves out, with how busy
    the busiest link was over the call."""
    pct = (f.get("runtime_optimum_pct") or {}).get(size_text(largest.size_bytes))
    if pct is None or pct >= SHORT_OF or not largest.served:
        return None
    head = f"{pct:.0f}% of the runtime optimum at {size_text(largest.size_bytes)}"
    model, link = f.get("model_algbw_gbps"), f.get("bound_algbw_gbps")
    share = 100.0 * model / link if model and link else None
    if share is not None and share < SHORT_OF:
        return (f"{head}: the schedule's own use of the links, which the link model puts at {share:.0f}% of the link "
                f"optimum (its busiest link, {f.get('busiest_link')}, carries more than the optimum needs)")
    util = f" ({largest.busiest_link} is busy {100 * largest.busiest_util:.0f}% of the call)" \
        if largest.busiest_util is not None and largest.busiest_link else ""
    return (f"{head}: not the links{util}"
            + (f", which the link model uses at {share:.0f}% of the link optimum" if share is not None else "")
            + "; the runtime's costs: threadblocks moving one message at a time at their copy rate, waits between "
            "them and the pipeline's fill")


def add_milp_comparison(compiled) -> None:
    """For a milp file: its model's objective, the solver's bound and the latency floor, and the simulated
    time at the size the model was solved for beside the ring and trees files for the same machine
    (``facts["milp_compare"]``); the summary line says which is fastest and, when it is not milp, why."""
    from colls import pipeline
    from colls.collectives import Collective
    f = compiled.facts
    info = f.get("method_info") or {}
    kind, topo = f["collective"], compiled.topology
    out = {"objective_us": info.get("objective_us"), "lower_bound_us": info.get("lower_bound_us")}
    try:
        out["latency_floor_us"] = bounds.bound(topo, kind, root=f.get("root") or 0).latency_us
    except CollsError:
        out["latency_floor_us"] = None
    inplace = compiled.mode == "inplace"
    programs = {"milp": compiled.program}
    if compiled.facts.get("instances", 1) > 1:     # the model solved one copy: its time is that file's
        programs["solved"] = pipeline.relower(compiled, instances=1, only_simulated=True).program
    coll = Collective(kind, topo.ngpus, root=f.get("root") or 0)
    for other in ("ring", "trees"):
        try:
            programs[other] = pipeline.compile_schedule(topo, coll, other, target=compiled.target.name,
                                                        proto=compiled.program.proto, mode=compiled.mode).program
        except CollsError as e:
            out[f"{other}_refused"] = str(e)
    size = _served_size(int(info.get("message_bytes") or (1 << 20)), programs.values(), kind)
    out["size_bytes"] = size
    timings = {name: (simulate(p, topo, kind, size, inplace=inplace, target=compiled.target.name)[0],
                      p.nchunksperloop) for name, p in programs.items()}
    for name, (t, ncpl) in timings.items():
        out[f"{name}_us"] = t.time_us if t.served else None
        out[f"{name}_chunks_per_loop"] = ncpl
        if not t.served:
            out[f"{name}_not_run"] = t.reason
    f["milp_compare"] = out


def _served_size(message: int, programs, kind: str) -> int:
    """The smallest size >= ``message`` every program serves (whole 4-byte elements, a multiple of each
    program's chunks per loop)."""
    from colls.simulate import SIZE_MULTIPLIED
    unit = 1
    for p in programs:
        unit = math.lcm(unit, 4 * (p.ngpus if kind in SIZE_MULTIPLIED else 1) * (p.nchunksperloop or 1))
    return max(unit, -(-message // unit) * unit)
