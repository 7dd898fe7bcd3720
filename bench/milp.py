"""Benchmarks of the sketch-guided CP-SAT method (colls.synth.milp).

Run with ``python bench/milp.py``. Two parts, both written to ``bench/milp.json`` with the machine
(bench/run.py's ``machine()``), so no figure is quoted without its machine:

1. Solve times against targets, on TACCL's own sketches (microsoft/taccl examples, shipped here as
   tests/data/taccl/; TACCL, Shah et al., NSDI 2023, arXiv:2111.04867): 2 x NDv2 allgather with
   sk1-ndv2-n2 (target 30 s), 2 x NDv2 alltoall with sk1-ndv2-n2 (120 s), 2 x DGX-2 allgather with
   sk2-dgx2-n2 (120 s). Each time covers the whole pipeline (solve, lower, verify).
2. The simulated time of the MILP file against ring and trees from 1 KB to 1 MB (each at its best
   protocol), allgather, alltoall and allreduce on every shipped profile at 1 and 2 nodes (the derived
   sketch), one process per case; the table goes into bench/RESULTS.md between its markers.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from run import machine  # noqa: E402

from colls import bound, pipeline  # noqa: E402
from colls.inputs import hardware  # noqa: E402
from colls.collectives import Collective  # noqa: E402
from colls.errors import CollsError  # noqa: E402
from colls.simulate import simulate, size_text  # noqa: E402
from colls.simulate.baseline import Fastest  # noqa: E402
from colls.inputs.sketch import load_sketch  # noqa: E402

RESULTS = ROOT / "bench" / "milp.json"
SKETCHES = ROOT / "tests" / "data" / "taccl"
TIME_LIMIT = 30.0    # CP-SAT deterministic seconds per stage (colls.synth.milp)

# (name, profile, nodes, collective, TACCL sketch, target seconds)
SOLVES = [
    ("allgather-ndv2x2-sk1", "ndv2", 2, "allgather", "sk1-ndv2-n2.json", 30.0),
    ("alltoall-ndv2x2-sk1", "ndv2", 2, "alltoall", "sk1-ndv2-n2.json", 120.0),
    ("allgather-dgx2x2-sk2", "dgx2", 2, "allgather", "sk2-dgx2-n2.json", 120.0),
]
PROFILES = ("dgx-a100", "dgx-h100", "dgx2", "ndv2", "mi250")
COMPARE_KINDS = ("allgather", "alltoall", "allreduce")
COMPARE_SIZES = tuple(1 << k for k in range(10, 21, 2))       # 1KB, 4KB, ..., 1MB
COMPARE_TIME_LIMIT = 10.0
MILP_BEGIN, MILP_END = "<!-- bench/milp.py -->", "<!-- /bench/milp.py -->"


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


def compare_case(profile, nodes, kind) -> dict:
    """milp, ring and trees files of ``kind`` on ``profile`` x ``nodes``, each timed at its best protocol."""
    topo = hardware.load_topology(profile, nodes=nodes)
    b = bound.bound(topo, kind)
    out = {}
    for method in ("milp", "ring", "trees"):
        options = {"time_limit": COMPARE_TIME_LIMIT} if method == "milp" else {}
        t0 = time.perf_counter()
        try:
            result = pipeline.compile_schedule(topo, Collective(kind, topo.ngpus), method, options=options)
        except CollsError as e:
            out[method] = {"error": str(e)}
            continue
        row = {"synth_seconds": round(time.perf_counter() - t0, 2), "chunks_per_loop": result.program.nchunksperloop}
        if method == "milp":
            info = result.schedule.info
            row.update(objective_us=info["objective_us"], lower_bound_us=info["lower_bound_us"])
        fastest = Fastest(topo, kind, [({}, result.program, None)])
        for size in COMPARE_SIZES:
            t = fastest.time(size, b)
            row[size_text(size)] = ({"time_us": round(t.time_us, 3), "protocol": t.extra["protocol"],
                                     "bound_pct": round(t.bound_pct, 1)} if t is not None
                                    else {"not_served": simulate(result.program, topo, kind, size)[0].reason})
        out[method] = row
    out["latency_floor_us"] = b.latency_us
    return out


def _run_compare(profile, nodes, kind, timeout) -> dict:
    """One case in its own process, so a slow solve or a crash costs only that case."""
    code = (f"import json, sys; sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / 'bench')!r}]; import milp; "
            f"print(json.dumps(milp.compare_case({profile!r}, {nodes}, {kind!r})))")
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"over the {timeout:g} s limit"}
    if proc.returncode:
        return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(proc.stdout)


def compare_markdown(results: dict) -> str:
    """The section of bench/RESULTS.md: per case and size, the fastest of milp, ring and trees."""
    m = results["machine"]
    lines = [MILP_BEGIN, "## Sketch-guided milp against ring and trees, 1 KB to 1 MB", "",
             "Written by `python bench/milp.py` (part of `make bench`). Simulated time (us) of one out-of-place call "
             "(`colls simulate`'s model), each file at its best protocol; milp with the derived sketch and a "
             f"{COMPARE_TIME_LIMIT:g} s deterministic limit. Machine: {m['cpu']}, {m['cores']} cores; {m['date']}; reference loop (bench/run.py) {m['reference_loop_s']} s.",
             "`n/a`: the file does not serve that size (its chunks per loop do not divide it).", "",
             "| machine | collective | " + " | ".join(size_text(s) for s in COMPARE_SIZES) + " | milp wins | "
             "milp model / solver bound (us) |", "|---|---|" + "---|" * len(COMPARE_SIZES) + "---|---|"]
    why = []
    for key, row in results["compare"].items():
        profile_nodes, kind = key.rsplit("/", 1)
        if "error" in row:
            lines.append(f"| {profile_nodes} | {kind} | " + " | ".join("-" for _ in COMPARE_SIZES)
                         + f" | not run: {row['error'][:80]} | |")
            continue
        cells, wins = [], 0
        for s in COMPARE_SIZES:
            times = {meth: row[meth][size_text(s)].get("time_us") for meth in ("milp", "ring", "trees")
                     if "error" not in row[meth]}
            timed = {k: v for k, v in times.items() if v is not None}
            best = min(timed, key=timed.get) if timed else None
            wins += best == "milp"
            cells.append(" / ".join(f"{'**' if k == best else ''}{k[0]} {'n/a' if v is None else f'{v:.3g}'}"
                                    f"{'**' if k == best else ''}" for k, v in times.items()))
        mi = row["milp"]
        model = "refused" if "error" in mi else f"{mi['objective_us']:.3g} / {mi['lower_bound_us']:.3g}"
        lines.append(f"| {profile_nodes} | {kind} | " + " | ".join(cells) + f" | {wins} of {len(COMPARE_SIZES)} | "
                     f"{model} |")
        if "error" in mi:
            why.append(f"- {profile_nodes} {kind}: milp refused: {mi['error'][:160]}")
    lines += ["", "m = milp, r = ring, t = trees; the fastest in bold (a tie goes to the first listed, and counts as a milp win); `n/a` for ring or trees on the NDv2 and MI250 meshes: their chunks per loop (48, 96, 224, 416) have odd factors, which no power-of-two size divides (the runtime would run its own algorithm); trees makes no alltoall.", "",
              "Where milp does not win: its model is alpha-beta on links only (one transfer per link at a time, a "
              "fixed latency per transfer), while the runtime (and the simulator) also charges the launch, a fixed "
              "cost per message and one threadblock's copy rate; trees and rings pipeline more chunks over more "
              "threadblocks, which the milp model does not reward. `colls synth --method milp` prints this "
              "comparison at the model's size for every file it writes."] + why + [MILP_END]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-solves", action="store_true", help="Only the comparison (part 2).")
    ap.add_argument("--timeout", type=float, default=600.0, help="Seconds per comparison case.")
    args = ap.parse_args()
    old = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results = {"machine": machine(), "time_limit": TIME_LIMIT, "solves": old.get("solves", {}), "compare": {}}
    if not args.skip_solves:
        for name, profile, nodes, kind, sketch_file, target in SOLVES:
            try:
                row = solve_case(profile, nodes, kind, sketch_file)
            except CollsError as e:
                row = {"error": str(e)}
            row["target_seconds"] = target
            results["solves"][name] = row
            print(f"{name}: {row.get('seconds', '-')} s (target {target:g} s), objective "
                  f"{row.get('objective_us', '-')} us, bound {row.get('lower_bound_us', '-')} us, "
                  f"gap {row.get('gap', '-')}", flush=True)
    for profile in PROFILES:
        for nodes in (1, 2):
            for kind in COMPARE_KINDS:
                key = f"{profile} x{nodes}/{kind}"
                t0 = time.perf_counter()
                results["compare"][key] = row = _run_compare(profile, nodes, kind, args.timeout)
                print(f"{key}: {'error: ' + row['error'] if 'error' in row else 'done'} "
                      f"({time.perf_counter() - t0:.0f} s)", flush=True)
                RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    report = ROOT / "bench" / "RESULTS.md"
    text = report.read_text() if report.exists() else ""
    section = compare_markdown(results)
    if MILP_BEGIN in text and MILP_END in text:
        text = text[:text.index(MILP_BEGIN)] + section + text[text.index(MILP_END) + len(MILP_END) + 1:]
    else:
        text = text + ("\n" if text else "") + section
    report.write_text(text)
    print(f"wrote {RESULTS.relative_to(ROOT)} and {report.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
