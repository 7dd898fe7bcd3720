"""Files from another generator: colls' simulation of published runs of MSCCL XML files.

Run with ``python bench/files.py [--jobs N]`` (part of ``make bench``); writes ``bench/FILES.md`` and
``bench/files.json``. The runs are ``bench/published_files.yaml``: msccl-tools files (rings spread over 1 to
8 channels, all-pairs allgathers and allreduces on 1 to 8 channels; LL, LL128 and Simple) timed by
rccl-tests on 8 x MI300X with RCCL 2.21.5, and in the same logs RCCL's own algorithm. Each file is rebuilt
from its rules (``bench/msccl_files.py``), proved (``colls.verify``) and simulated as the run was made: in
place, the RCCL target, stream launch, on the shipped ``mi300x`` profile (8 MI300X, every pair joined by one
xGMI link). RCCL's own algorithm is ``colls simulate --baseline nccl``
there. Each row gives published time / model time (above 1 the model is optimistic), judged against the
bands of ``bench/calibrate.py``.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from calibrate import BANDS, band  # noqa: E402
from msccl_files import make  # noqa: E402

RUNS = HERE / "published_files.yaml"
MACHINE = "mi300x"
OUT = HERE / "FILES.md"
JSON_OUT = HERE / "files.json"
SOURCE = "github.com/rouge3877/ns3-msccl-data, Validation/SingleCollective/GroundTruth"


def _file_times(run: dict) -> dict:
    """The simulated time of the run's file at each published size (None: the file does not serve it)."""
    from colls.inputs.hardware import load_topology
    from colls.msccl import read
    from colls.simulate import Machine, simulate
    from colls.verify import verify
    topo = load_topology(MACHINE)
    text = make(run["file"])
    prog = read(text, run["file"])
    report = verify(prog, target="rccl")
    machine = Machine(prog, topo, run["collective"])
    out = {}
    for size in sorted(run["file_us"]):
        t, _ = simulate(prog, topo, run["collective"], int(size), inplace=True, machine=machine, target="rccl")
        out[int(size)] = t.time_us if t.served else None
    return {"file": run["file"], "times": out, "verdict": report.verdict,
            "finding": report.errors[0].message if report.errors else None}


def _rccl_times(kind: str, sizes: list[int]) -> dict:
    from colls.inputs.hardware import load_topology
    from colls.simulate.baseline import RuntimeDefault
    topo = load_topology(MACHINE)
    base = RuntimeDefault(topo, kind, target="rccl", launch="stream")
    out = {}
    for size in sizes:
        t = base.time(size)
        out[size] = (t.time_us, f"{t.extra.get('algorithm')} {t.extra.get('protocol')} {t.extra.get('channels')}ch")
    return {"kind": kind, "times": out}


def _proto(name: str) -> str:
    return {"ll": "LL", "LL128": "LL128", "simple": "Simple"}[name.split("_")[2]]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=max(1, min(2, multiprocessing.cpu_count())))
    args = ap.parse_args()
    from bench.run import machine
    runs = yaml.safe_load(RUNS.read_text())["runs"]
    rccl_sizes: dict = {}
    for run in runs:
        for size in run["rccl_us"]:
            rccl_sizes.setdefault(run["collective"], {}).setdefault(int(size), []).append(float(run["rccl_us"][size]))
    with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
        done = list(pool.imap_unordered(_file_times, runs))
        files = {r["file"]: r["times"] for r in done}
        verdicts = {r["file"]: (r["verdict"], r["finding"]) for r in done}
        work = [(k, sorted(v)) for k, v in rccl_sizes.items()]
        rccl = {r["kind"]: r["times"] for r in pool.starmap(_rccl_times, work)}
    data = []
    for run in runs:
        for size, published in sorted((int(s), float(t)) for s, t in run["file_us"].items()):
            model = files[run["file"]][size]
            entry = {"file": run["file"], "proto": _proto(run["file"]), "collective": run["collective"],
                     "bytes": size, "published_us": published, "model_us": model}
            if model is not None:
                (lo, hi), name = band(size)
                entry.update(ratio=published / model, band=name, within=lo <= published / model <= hi)
            data.append(entry)
    info = machine()
    lines = ["# Files from another generator: simulated against their published runs", "",
             "Written by `python bench/files.py` (part of `make bench`) from `bench/published_files.yaml`; do not "
             "edit by hand.", "", f"Machine: {info['cpu']}, {info['cores']} cores, Python {info['python']}; "
             f"{info['date']}.", "",
             "msccl-tools files run by rccl-tests on 8 x MI300X, RCCL 2.21.5, no graphs (" + SOURCE + "), each "
             "rebuilt by `bench/msccl_files.py`, proved, and simulated in place on the `mi300x` profile "
             "with RCCL's costs for MI300X (`colls/runtimes/costs.py`, CDNA3, fitted on the runs named there). "
             "Ratio: published time / model time (above 1 the model is optimistic); bands as "
             "bench/CALIBRATION.md (16 MB and above 0.85-1.15, 64 KB to 16 MB 0.67-1.5, below 0.5-2).", "",
             "| protocol | band | within | points | geometric mean | lowest | highest |",
             "|---|---|---|---|---|---|---|"]
    for proto in ("Simple", "LL", "LL128"):
        for _, _, name in BANDS:
            rs = [e for e in data if e["proto"] == proto and e.get("band") == name]
            if not rs:
                continue
            ratios = [e["ratio"] for e in rs]
            gm = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
            lines.append(f"| {proto} | {name} | {sum(e['within'] for e in rs)} | {len(rs)} | {gm:.2f} | "
                         f"{min(ratios):.2f} | {max(ratios):.2f} |")
    lines += ["", "RCCL's own algorithm in the same runs (out-of-place column; the median of the logs' figures at "
              "each size) against `--baseline nccl` on the same machine:", "",
              "| collective | size | published (us) | model (us) | ratio | model ran |", "|---|---|---|---|---|---|"]
    from colls.sizes import size_text
    rccl_rows = []
    for kind, sizes in sorted(rccl_sizes.items()):
        for size, values in sorted(sizes.items()):
            published = sorted(values)[len(values) // 2]
            model, ran = rccl[kind][size]
            rccl_rows.append({"collective": kind, "bytes": size, "published_us": published, "model_us": model,
                              "ratio": published / model, "ran": ran})
            lines.append(f"| {kind} | {size_text(size)} | {published:g} | {model:.1f} | {published / model:.2f} | "
                         f"{ran} |")
    lines += ["", "`colls verify` on the rebuilt files (target rccl): "
              + f"{sum(v == 'valid' for v, _ in verdicts.values())} of {len(verdicts)} valid."]
    for run in runs:
        verdict, finding = verdicts[run["file"]]
        if verdict != "valid":
            hung = run.get("hung") or "no hang recorded"
            lines.append(f"- {run['file']}: {verdict}: {finding} Published run: {hung}.")
    lines += ["", "Every point (published / model; `n/a`: the file does not serve the size, RCCL ran its own "
              "algorithm there):", "", "| file | " + " | ".join(size_text(s) for s in _sizes(data)) + " |",
              "|---|" + "---|" * len(_sizes(data))]
    for run in runs:
        cells = []
        for size in _sizes(data):
            e = next((x for x in data if x["file"] == run["file"] and x["bytes"] == size), None)
            if e is None:
                cells.append("")
            elif e["model_us"] is None:
                cells.append(f"{e['published_us']:g} / n/a")
            else:
                mark = "" if e["within"] else " (out)"
                cells.append(f"{e['published_us']:g} / {e['model_us']:.1f} = {e['ratio']:.2f}{mark}")
        lines.append(f"| {run['file']} | " + " | ".join(cells) + " |")
    OUT.write_text("\n".join(lines) + "\n")
    verdict_of = {k: v[0] for k, v in sorted(verdicts.items())}
    JSON_OUT.write_text(json.dumps({"machine": info, "files": data, "rccl": rccl_rows, "verdicts": verdict_of},
                                   indent=1, sort_keys=True) + "\n")
    modelled = [e for e in data if e.get("band")]
    print(f"{sum(e['within'] for e in modelled)} of {len(modelled)} file points within their band; wrote {OUT}")


def _sizes(data) -> list[int]:
    return sorted({e["bytes"] for e in data})


if __name__ == "__main__":
    main()
