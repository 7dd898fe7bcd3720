"""MSCCL++ plans on every shipped machine: each method's default plan for each collective, proved.

Run with ``python bench/plans.py`` (part of ``make bench``). For every shipped profile at 1 and 2 nodes, every
method (ring, direct, trees, milp) and allgather, reducescatter, allreduce and alltoall, it makes the plan
``colls synth --target mscclpp`` writes (:func:`colls.tune.compile_for_plans`, then the plan of its program),
checks it against MSCCL++'s loader rules and proves it (:func:`colls.verify.plan.proved_plan`: every call type
the program serves, in-place and out-of-place), and writes the table to bench/PLANS.md and the outcome of
every case to bench/plans.json. A case is *proved*, *refused* (the method makes no file for that machine, or
the plan would break a limit: the reason is recorded), or *failed*: a plan that was written but not proved,
or an error that is not a refusal. A failed case is a defect; the script exits 1 when there is one.

Every proved plan's program is also written as a packet plan (the LL protocol, ``colls synth --proto LL
--target mscclpp``) and proved the same way; a packet plan written but not proved fails the case. It is timed
at 64 KB and 1 MB against the Simple plan (each Simple unit and unpipelined, the fastest at that size).

For every proved plan it also times it (:func:`colls.simulate.plans.time_plan`, MSCCL++'s model) at 1 MB, 64 MB
and 1 GB against two MSCCL XML files under the XML target's model (exe; rccl on MI250): the program the plan was
written from (the same schedule, lowered alike), and the file ``colls synth`` writes for the XML target (the
method's default XML file, whose copies and pipeline depth may be more than a plan's 64 ops a threadblock hold).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from colls import mscclpp, tune  # noqa: E402
from colls.collectives import Collective  # noqa: E402
from colls.errors import CollsError  # noqa: E402
from colls.compile import milp_settings  # noqa: E402
from colls.inputs import hardware  # noqa: E402
from colls.simulate import simulate, size_text  # noqa: E402
from colls.simulate.plans import slices, time_plan  # noqa: E402
from colls.verify.plan import proved_plan  # noqa: E402

HERE = Path(__file__).resolve().parent
PROFILES = ("dgx-a100", "dgx-h100", "dgx2", "ndv2", "mi250")
NODES = (1, 2)
METHODS = ("ring", "direct", "trees", "milp")
KINDS = ("allgather", "reducescatter", "allreduce", "alltoall")
MILP = milp_settings()          # colls compile's budget and gap
TIMED = (1 << 20, 64 << 20, 1 << 30)
SMALL = (64 << 10, 1 << 20)     # where packet plans are timed against the Simple plans


def _ratios(plan: dict, program, xml_program, topo, kind: str, target: str) -> dict:
    """Plan time over XML time at each of TIMED, for the same program and for the XML target's default file
    (None where one of the two is not served at that size); *best*: the same program's plan pipelined by the
    unit fastest at that size (what ``colls compile`` writes for a range of sizes around it)."""
    out = {"same": [], "default": [], "best": []}
    others = [p for _, p in slices(program, topo)]
    for size in TIMED:
        t = time_plan(plan, program, topo, size, inplace=False)
        fastest = min((time_plan(p, program, topo, size, inplace=False) for p in others),
                      key=lambda x: x.time_us if x.served else math.inf, default=t)
        for key, prog, ours in (("same", program, t), ("default", xml_program, t), ("best", program, fastest)):
            x = simulate(prog, topo, kind, size, target=target)[0] if prog is not None else None
            ok = ours.served and x is not None and x.served
            out[key].append(round(ours.time_us / x.time_us, 3) if ok else None)
    return out


def _packets(program, topo, method: str, kind: str) -> dict:
    """The program as a packet plan, proved for every call type it serves, and its time over the fastest Simple
    plan's at each of SMALL (None where either does not serve the size)."""
    try:
        plan, modes = proved_plan(program, topo, name=f"{method}-{kind}-ll", inplace=not program.outofplace,
                                  slice_bytes=None, protocol="LL")
    except CollsError as e:
        return {"outcome": "refused" if "at most" in str(e) else "failed", "why": f"packet plan: {e}"}
    ll = plan if not plan["inplace"] else dict(plan, inplace=False)
    simple = [p for _, p in slices(program, topo)]
    ratios = []
    for size in SMALL:
        t = time_plan(ll, program, topo, size, inplace=False)
        best = min((time_plan(p, program, topo, size, inplace=False) for p in simple),
                   key=lambda x: x.time_us if x.served else math.inf, default=None)
        ok = t.served and best is not None and best.served
        ratios.append(round(t.time_us / best.time_us, 3) if ok else None)
    return {"outcome": "proved", "modes": ["in-place" if m else "out-of-place" for m in modes], "over_simple": ratios}


def case(topo, method: str, kind: str, profile: str = "") -> dict:
    t0 = time.perf_counter()
    coll = Collective(kind, topo.ngpus)
    options = dict(MILP) if method == "milp" else {}
    try:
        result = tune.compile_for_plans(topo, coll, method, options=options, in_memory=True)
    except CollsError as e:
        return {"outcome": "refused", "why": str(e), "seconds": round(time.perf_counter() - t0, 2)}
    program = result.program
    try:
        plan, modes = proved_plan(program, topo, name=f"{method}-{kind}", inplace=not program.outofplace,
                                  slice_bytes=result.facts["plan_slice"])
    except CollsError as e:
        outcome = "refused" if "at most" in str(e) or "limit" in str(e) else "failed"
        return {"outcome": outcome, "why": str(e), "seconds": round(time.perf_counter() - t0, 2)}
    ops = max(mscclpp.op_count(tb["ops"]) for g in plan["gpus"] for tb in g["threadblocks"])
    target = "rccl" if profile == "mi250" else "exe"      # as bench/speedup.py
    try:
        xml = tune.compile_fastest(topo, coll, method, target=target, options=dict(options), in_memory=True,
                                   prove=False).program
    except CollsError:
        xml = None
    timed = plan if not plan["inplace"] else mscclpp.plan_of(program, topo, name="oop", inplace=False,
                                                             slice_bytes=result.facts["plan_slice"])
    packets = _packets(program, topo, method, kind)
    if packets["outcome"] == "failed":
        return dict(packets, seconds=round(time.perf_counter() - t0, 2))
    return {"outcome": "proved", "packets": packets, "modes": ["in-place" if m else "out-of-place" for m in modes],
            "lowered_for": result.target.name, "threadblocks": max(len(g["threadblocks"]) for g in plan["gpus"]),
            "max_ops": ops, "pipelined": mscclpp.slice_of(plan) is not None, "unit": mscclpp.slice_of(plan),
            "plan_over_xml": _ratios(timed, program, xml, topo, kind, target),
            "seconds": round(time.perf_counter() - t0, 2)}


def markdown(results: dict) -> str:
    lines = ["# MSCCL++ plans on every shipped machine", "",
             "Written by `python bench/plans.py` (part of `make bench`): each method's default plan, as "
             "`colls synth --target mscclpp` writes it, checked against MSCCL++'s loader rules and proved for "
             "every call type its program serves (ip: in-place, oop: out-of-place). `refused`: the method makes "
             "no file for the machine, or its plan would break a limit (the reason below). Machine: "
             f"{results['machine']}.", "",
             "| machine | method | " + " | ".join(KINDS) + " |", "|---|---|" + "---|" * len(KINDS)]
    why = []
    for key, row in results["cases"].items():
        machine, method = key.rsplit("/", 1)
        cells = []
        for kind in KINDS:
            r = row[kind]
            if r["outcome"] == "proved":
                modes = "+".join("ip" if m == "in-place" else "oop" for m in r["modes"])
                ll = r["packets"]["outcome"]
                cells.append(f"proved ({modes}; {r['threadblocks']} tbs, {r['max_ops']} ops; LL {ll})")
                if ll != "proved":
                    why.append(f"- {machine} {method} {kind}: LL {ll}: {r['packets']['why'][:200]}")
            else:
                cells.append(f"**{r['outcome']}**" if r["outcome"] == "failed" else r["outcome"])
                why.append(f"- {machine} {method} {kind}: {r['outcome']}: {r['why'][:200]}")
        lines.append(f"| {machine} | {method} | " + " | ".join(cells) + " |")
    counts = {o: sum(r["outcome"] == o for row in results["cases"].values() for r in row.values())
              for o in ("proved", "refused", "failed")}
    packed = [r["packets"] for row in results["cases"].values() for r in row.values() if r["outcome"] == "proved"]
    lines += ["", f"{counts['proved']} proved, {counts['refused']} refused, {counts['failed']} failed. Packet plans "
                  f"(LL) of the proved ones: {sum(p['outcome'] == 'proved' for p in packed)} proved, "
                  f"{sum(p['outcome'] == 'refused' for p in packed)} refused.", ""]
    small = [(key, kind, r["packets"]["over_simple"]) for key, row in results["cases"].items()
             for kind, r in row.items() if r["outcome"] == "proved" and r["packets"]["outcome"] == "proved"]
    for i, size in enumerate(SMALL):
        vals = [v[i] for _, _, v in small if v[i] is not None]
        if vals:
            lines.append(f"- Packet plan over the fastest Simple plan of the same program at {size_text(size)}: "
                         f"{min(vals):.2f} to {max(vals):.2f}, faster in {sum(v < 1 for v in vals)} of {len(vals)}.")
    lines.append("")
    lines += ["## Plan time over XML time", "",
              "Each proved plan, out-of-place, at 1 MB / 64 MB / 1 GB: its time on MSCCL++'s model over the MSCCL XML "
              "file's on the XML target's (exe; rccl on MI250). *same*: the program the plan was written from; "
              "*default*: the file `colls synth` writes for the XML target. Below 1: the plan is faster. n/a: one "
              "of the two does not serve that size. In brackets: the unit the plan is pipelined by (the fastest at 16 MB "
              "and 256 MB, as `colls synth` chooses it), `whole`: not pipelined. *best*: the same program's plan "
              "pipelined by the unit fastest at that size, as `colls compile` writes a plan for a range of sizes.", "",
              "| machine | method | " + " | ".join(KINDS) + " |", "|---|---|" + "---|" * len(KINDS)]
    same, default, best, above = [], [], [], []
    for key, row in results["cases"].items():
        machine, method = key.rsplit("/", 1)
        cells = []
        for kind in KINDS:
            r = row[kind]
            if r["outcome"] != "proved":
                cells.append("")
                continue
            ratios = r["plan_over_xml"]
            same += [v for v in ratios["same"] if v is not None]
            default += [v for v in ratios["default"] if v is not None]
            best += [v for v in ratios.get("best", ()) if v is not None]
            above += [f"{machine} {method} {kind} at {size_text(size)}: same {v:.3f}, best {b:.3f}"
                      for size, v, b in zip(TIMED, ratios["same"], ratios.get("best", ratios["same"]))
                      if v is not None and b is not None and max(v, b) > 1]
            text = {k: "/".join("n/a" if v is None else f"{v:.3f}" for v in ratios[k]) for k in ratios}
            unit = f" ({size_text(r['unit'])})" if r["pipelined"] else " (whole)"
            cells.append(f"same {text['same']}{unit}; best {text.get('best', 'n/a')}; default {text['default']}")
        lines.append(f"| {machine} | {method} | " + " | ".join(cells) + " |")
    if same:
        lines += ["", f"Same program: {min(same):.3f} to {max(same):.3f}, {sum(v > 1 for v in same)} of {len(same)} "
                      f"above 1; with the unit fastest at each size: {min(best):.3f} to {max(best):.3f}, "
                      f"{sum(v > 1 for v in best)} above 1. Default XML file: {min(default):.2f} to "
                      f"{max(default):.2f}, {sum(v > 1.05 for v in default)} of {len(default)} above 1.05.", "",
                  "Same program above 1:", ""] + [f"- {a}" for a in above] + [""]
    return "\n".join(lines + why) + "\n"


def _row(task) -> tuple:
    profile, nodes, method = task
    topo = hardware.load_topology(profile, nodes=nodes)
    row = {kind: case(topo, method, kind, profile) for kind in KINDS}
    print(f"{profile} x{nodes} {method}: " + ", ".join(f"{k} {r['outcome']} ({r['seconds']} s)"
                                                     for k, r in row.items()), flush=True)
    return f"{profile} x{nodes}/{method}", row


def main() -> int:
    import multiprocessing
    import platform
    from colls.parallel import default_jobs
    results = {"machine": f"{platform.processor() or platform.machine()}, Python {platform.python_version()}; "
                          f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}", "cases": {}}
    tasks = [(profile, nodes, method) for profile in PROFILES for nodes in NODES for method in METHODS]
    # one row per process, as many as the machine runs at once (each case's seconds are its own process's)
    with multiprocessing.get_context("spawn").Pool(default_jobs()) as pool:
        results["cases"] = dict(pool.map(_row, tasks, chunksize=1))
    (HERE / "plans.json").write_text(json.dumps(results, indent=1) + "\n")
    (HERE / "PLANS.md").write_text(markdown(results))
    print("wrote bench/plans.json and bench/PLANS.md")
    return 1 if any(r["outcome"] == "failed" for row in results["cases"].values() for r in row.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
