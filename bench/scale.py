"""Scale sweep: every method and collective on 1 to 16 nodes of DGX A100 and MI250, then the hierarchical
method's allgather, reducescatter and allreduce on 1,024 GPUs (128 x DGX A100, 64 x MI250; the MI250 ones again
for RCCL, its runtime), one subprocess each.

Run with ``make bench`` (or ``python bench/scale.py [--profiles dgx-a100,mi250] [--nodes 1,2,4,8,16]
[--methods ...] [--kinds ...] [--timeout S] [--no-large]``). Each case runs the whole pipeline (precheck, synthesize,
check, lower, emit, verify) in a fresh Python process, and records its wall time, its peak resident
memory (``ru_maxrss``) and its outcome: a verified file (with threadblocks, channels, steps and the
link model's share of the link optimum, which is not a simulated time) or the refusal's one-line message. The table goes to ``bench/SCALE.md``
with the machine, Python and library versions; a case that takes longer than ``--timeout`` is recorded
as such. A benchmark never fails the build, it records.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

RESULTS = Path(__file__).resolve().parent / "SCALE.md"
PROFILES = ("dgx-a100", "mi250")
NODES = (1, 2, 4, 8, 16)
METHODS = ("ring", "direct", "trees", "hier")
# 1,024 GPUs: the method whose steps grow with the nodes over the GPUs per node, on the collectives it makes
LARGE = (("dgx-a100", 128), ("mi250", 64))
LARGE_OWN_RUNTIME = (("mi250", 64, "rccl"),)   # the 1,024-GPU cases again under the machine's own runtime
LARGE_METHODS = ("hier",)
LARGE_KINDS = ("allgather", "reducescatter", "allreduce")
KINDS = ("allgather", "reducescatter", "allreduce", "alltoall", "broadcast", "reduce")
LIMIT_SECONDS = 60  # what a case may take on 2 cores


def run_one(profile: str, nodes: int, method: str, kind: str, target: str) -> dict:
    """One case in this process: the outcome and its figures (called in the per-case subprocess)."""
    from colls import pipeline
    from colls.inputs import hardware
    from colls.collectives import Collective
    from colls.errors import CollsError, LimitError
    t0 = time.perf_counter()
    topo = hardware.load_topology(profile, nodes=nodes)
    t_load = time.perf_counter() - t0
    out = {"gpus": topo.ngpus, "load_s": round(t_load, 3)}
    t0 = time.perf_counter()
    try:
        result = pipeline.compile_schedule(topo, Collective(kind, topo.ngpus), method, target=target)
    except LimitError as e:
        out.update(outcome="refused (limit)", message=str(e))
    except CollsError as e:
        out.update(outcome="refused", message=str(e))
    else:
        f = result.facts
        out.update(outcome="file", threadblocks=f["threadblocks"], channels=f["channels"],
                   steps=f["steps"], kib=len(result.text) // 1024,
                   percent=round(100 * f["fraction_of_bound"], 1) if f.get("fraction_of_bound") else None)
    out["seconds"] = round(time.perf_counter() - t0, 2)
    out["maxrss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return out


def run_case(profile: str, nodes: int, method: str, kind: str, target: str, timeout: float) -> dict:
    cmd = [sys.executable, __file__, "--case", profile, str(nodes), method, kind, "--target", target]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"outcome": f"timeout after {timeout:.0f} s", "seconds": round(time.perf_counter() - t0, 1)}
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"outcome": "crash", "message": last, "seconds": round(time.perf_counter() - t0, 1)}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _row(profile, nodes, method, kind, r, target=None) -> str:
    what = r["outcome"]
    if what == "file":
        pct = "" if r.get("percent") is None else f", link model {r['percent']}% of the link optimum"
        what = f"file: {r['threadblocks']} tbs, {r['channels']} ch, {r['steps']} steps{pct}"
    elif r.get("message"):
        what += ": " + r["message"].replace("|", "/")
    mem = r.get("maxrss_mb", "")
    where = f"{profile} x{nodes}" + (f" ({target})" if target else "")
    return (f"| {where} | {r.get('gpus', '')} | {method} | {kind} | {r['seconds']} | {mem} | "
            f"{what} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", nargs=4, metavar=("PROFILE", "NODES", "METHOD", "KIND"))
    ap.add_argument("--target", default="exe")
    ap.add_argument("--profiles", default=",".join(PROFILES))
    ap.add_argument("--nodes", default=",".join(map(str, NODES)))
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--no-large", action="store_true", help="leave out the 1,024-GPU cases")
    args = ap.parse_args()
    if args.case:
        profile, nodes, method, kind = args.case
        print(json.dumps(run_one(profile, int(nodes), method, kind, args.target)))
        return
    from run import machine  # the machine block every benchmark records
    m = machine()
    lines = [
        "# Scale sweep", "",
        f"`make bench` (bench/scale.py), target {args.target}, one subprocess per case, on {m['cpu']} "
        f"({m['cores']} cores), Python {m['python']}, {m['platform']}; "
        + ", ".join(f"{k} {v}" for k, v in sorted(m["versions"].items()) if v) + f"; {m['date']}; reference loop (bench/run.py) {m['reference_loop_s']} s.", "",
        "Seconds: the whole pipeline after loading the profile (precheck, synthesis, lowering, emit, "
        "verification; the schedule's own check only where the file's proof fails). Memory: the case's peak resident set (ru_maxrss). A case either "
        "writes a file that verifies or is refused with the limit it would break. A machine marked (rccl) "
        "is made for that target instead. \"link model N% of the link optimum\" is the schedule's bandwidth "
        "with the links alone at full speed, not a simulated time: what a file takes on the runtime (launch, "
        "messages' costs, threadblocks' copy rates) is `colls simulate`'s, in bench/RESULTS.md.", "",
        "| machine | GPUs | method | collective | seconds | peak MB | outcome |",
        "|---|---|---|---|---|---|---|",
    ]
    slow = []
    cases = [(profile, nodes, method, kind, None) for profile in args.profiles.split(",")
             for nodes in map(int, args.nodes.split(",")) for method in args.methods.split(",")
             for kind in args.kinds.split(",")]
    if not args.no_large:
        cases += [(profile, nodes, method, kind, None) for profile, nodes in LARGE for method in LARGE_METHODS
                  for kind in LARGE_KINDS]
        cases += [(profile, nodes, method, kind, target) for profile, nodes, target in LARGE_OWN_RUNTIME
                  for method in LARGE_METHODS for kind in LARGE_KINDS if target != args.target]
    for profile, nodes, method, kind, target in cases:
        r = run_case(profile, nodes, method, kind, target or args.target, args.timeout)
        lines.append(_row(profile, nodes, method, kind, r, target))
        print(lines[-1], flush=True)
        if r["seconds"] > LIMIT_SECONDS or r["outcome"] in ("crash",) or r["outcome"].startswith("timeout"):
            slow.append(lines[-1])
    lines += ["", f"Cases over {LIMIT_SECONDS} s, timed out or crashed: {len(slow)}"] + slow
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
