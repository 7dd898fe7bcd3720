"""Benchmarks of the sketch-guided CP-SAT method (colls.synth.milp).

Run with ``python bench/milp.py``. Two parts, both written to ``bench/milp.json`` with the machine
(bench/run.py's ``machine()``), so no figure is quoted without its machine:

1. Solve times against targets, on TACCL's own sketches (microsoft/taccl examples, shipped here as
   tests/data/taccl/; TACCL, Shah et al., NSDI 2023, arXiv:2111.04867): 2 x NDv2 allgather with
   sk1-ndv2-n2 (target 30 s), 2 x NDv2 alltoall with sk1-ndv2-n2 (120 s), 2 x DGX-2 allgather with
   sk2-dgx2-n2 (120 s). Each time covers the whole pipeline (solve, lower, verify).
2. The simulated time of the MILP's allgather file against ring and trees at 1 KB and 1 MB, on ndv2
   and dgx2 at 1 and 2 nodes (the derived sketch: ``colls.sketch.derive_sketch``).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from run import machine  # noqa: E402

from colls import bound, hardware, pipeline  # noqa: E402
from colls.collectives import Collective  # noqa: E402
from colls.errors import CollsError  # noqa: E402
from colls.simulate import simulate, size_text  # noqa: E402
from colls.sketch import load_sketch  # noqa: E402

RESULTS = ROOT / "bench" / "milp.json"
SKETCHES = ROOT / "tests" / "data" / "taccl"
TIME_LIMIT = 30.0    # CP-SAT deterministic seconds per stage (colls.synth.milp)

# (name, profile, nodes, collective, TACCL sketch, target seconds)
SOLVES = [
    ("allgather-ndv2x2-sk1", "ndv2", 2, "allgather", "sk1-ndv2-n2.json", 30.0),
    ("alltoall-ndv2x2-sk1", "ndv2", 2, "alltoall", "sk1-ndv2-n2.json", 120.0),
    ("allgather-dgx2x2-sk2", "dgx2", 2, "allgather", "sk2-dgx2-n2.json", 120.0),
]
COMPARE = [("ndv2", 1), ("ndv2", 2), ("dgx2", 1), ("dgx2", 2)]
SIZES = (1 << 10, 1 << 20)


def solve_case(profile, nodes, kind, sketch_file) -> dict:
    topo = hardware.load_topology(profile, nodes=nodes)
    sketch = load_sketch(SKETCHES / sketch_file, topo)
    t0 = time.perf_counter()
    result = pipeline.compile_schedule(topo, Collective(kind, topo.ngpus, chunks=sketch.chunkup), "milp",
                                       options={"sketch": sketch, "time_limit": TIME_LIMIT})
    seconds = time.perf_counter() - t0
    info = result.schedule.info
    return {"seconds": round(seconds, 2), "verified": result.report.ok,
            "objective_us": info["objective_us"], "lower_bound_us": info["lower_bound_us"],
            "gap": info["gap"], "stages": info["stages"], "notes": info["notes"],
            "model_algbw_gbps": result.facts.get("model_algbw_gbps")}


def compare_case(profile, nodes) -> dict:
    topo = hardware.load_topology(profile, nodes=nodes)
    b = bound.bound(topo, "allgather")
    out = {}
    for method in ("milp", "ring", "trees"):
        options = {"time_limit": TIME_LIMIT} if method == "milp" else {}
        t0 = time.perf_counter()
        try:
            result = pipeline.compile_schedule(topo, Collective("allgather", topo.ngpus), method, options=options)
        except CollsError as e:
            out[method] = {"error": str(e)}
            continue
        row = {"synth_seconds": round(time.perf_counter() - t0, 2)}
        for size in SIZES:
            timing, _ = simulate(result.program, topo, "allgather", size, bound=b)
            row[size_text(size)] = ({"time_us": round(timing.time_us, 3), "algbw_gbps": round(timing.algbw_gbps, 4),
                                     "bound_pct": round(timing.bound_pct, 1)} if timing.served
                                    else {"not_served": timing.reason})
        out[method] = row
    return out


def main() -> None:
    results = {"machine": machine(), "time_limit": TIME_LIMIT, "solves": {}, "allgather_simulated": {}}
    for name, profile, nodes, kind, sketch_file, target in SOLVES:
        try:
            row = solve_case(profile, nodes, kind, sketch_file)
        except CollsError as e:
            row = {"error": str(e)}
        row["target_seconds"] = target
        results["solves"][name] = row
        print(f"{name}: {row.get('seconds', '-')} s (target {target:g} s), objective "
              f"{row.get('objective_us', '-')} us, bound {row.get('lower_bound_us', '-')} us, gap {row.get('gap', '-')}")
    for profile, nodes in COMPARE:
        key = f"{profile}x{nodes}"
        results["allgather_simulated"][key] = row = compare_case(profile, nodes)
        for size in SIZES:
            cells = [f"{m} {row[m][size_text(size)].get('time_us', '-') if 'error' not in row[m] else 'error'}"
                     for m in ("milp", "ring", "trees")]
            print(f"allgather {key} {size_text(size)}: " + ", ".join(cells) + " us")
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
