"""``colls simulate`` from end to end: read and prove each file, time it per size beside the optimum (and
NCCL's own algorithm), draw what was asked. It returns the text and the JSON; the CLI prints one of them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from typing import Callable

from colls import bound as bounds
from colls.collectives import KINDS
from colls.errors import CollsError
from colls.msccl import parse
from colls.simulate import prepare, simulate, size_text
from colls.simulate import report as rep
from colls.simulate.engine import MAX_TIMELINE_INTERVALS
from colls.parallel import in_processes
from colls.simulate.baseline import Baseline, RuntimeDefault, algorithm_of
from colls.runtimes.costs import DATA_FRACTION, DEFAULT_LAUNCH, family_of, is_known, model_for
from colls.verify import verify


@dataclass
class Output:
    text: str
    data: dict


@dataclass
class _Entry:
    label: str
    kind: str
    root: int
    program: object = None
    machine: object = None
    baseline: RuntimeDefault | None = None
    timings: list | None = None


def run(texts, topo, sizes, *, inplace=False, target="exe", baseline=None, collective=None, root=None,
        plot_path=None, timeline_path=None, timeline_size=None, launch: str = DEFAULT_LAUNCH,
        warn: Callable[[str], None] = lambda line: None,
        progress: Callable[[str], None] = lambda line: None, jobs: int = 1) -> Output:
    """Time each file (and the baseline) at each size; ``progress`` hears which one and size is timed next.
    ``jobs`` > 1: the (file, size) timings in that many forked processes, the largest sizes first (each timing
    is a function of its file and size alone: the same answer)."""
    entries = [_read(path, text, topo, target, warn) for path, text in texts]
    kinds = {e.kind for e in entries}
    if collective is not None and kinds and kinds != {collective}:
        raise CollsError(f"the files compute {', '.join(sorted(kinds))}, not {collective}", key="--collective")
    if len(kinds) > 1 and (plot_path or baseline):
        raise CollsError(f"the files compute different collectives ({', '.join(sorted(kinds))}): compare files "
                         "of one collective", key="FILE")
    if baseline is not None:
        kind = collective or (entries[0].kind if entries else None)
        if kind is None:
            raise CollsError("--baseline without FILE needs the collective", key="--collective")
        rooted = kind in ("broadcast", "reduce")
        b_root = entries[0].root if entries else (root or 0)
        if rooted and not entries and root is None:
            raise CollsError(f"a {kind} baseline needs its root", key="--root")
        forced = None if baseline == "nccl" else (algorithm_of(baseline),)
        base = RuntimeDefault(topo, kind, root=b_root, target=target, algorithms=forced, launch=launch)
        for note in base.notes:
            warn(f"--baseline: {note}")
        entries.append(_Entry(base.label, kind, b_root, baseline=base))
    bound_by_kind = {}
    for e in entries:
        if (e.kind, e.root) not in bound_by_kind:
            bound_by_kind[(e.kind, e.root)] = _bound(topo, e.kind, e.root)
    work = [(e, i) for e in entries for i in range(len(sizes))]
    if jobs > 1:        # the slowest first, so no long timing starts last while the other processes wait
        work.sort(key=lambda x: -sizes[x[1]])
        progress(f"timing {' and '.join(e.label for e in entries)} at {len(sizes)} sizes in "
                 f"{min(jobs, len(work))} processes")
    tasks = [(f"timing {e.label} at {size_text(sizes[i])} ({i + 1} of {len(sizes)} sizes)",
              partial(_time, e, topo, sizes[i], bound_by_kind[(e.kind, e.root)], inplace, target, launch))
             for e, i in work]
    for e in entries:
        e.timings = [None] * len(sizes)
    for (e, i), timing in zip(work, in_processes(tasks, jobs, progress)):
        e.timings[i] = timing
    timeline = None
    for e in entries:
        if timeline_path:
            timeline = _timeline(e, topo, timeline_size, inplace, target, bound_by_kind[(e.kind, e.root)],
                                 timeline_path, launch)
    if plot_path:
        _plot(entries, bound_by_kind, sizes, topo, plot_path)
    return _output(entries, bound_by_kind, topo, timeline, plot_path, timeline_path, inplace, launch)


def _time(e: _Entry, topo, size: int, b, inplace: bool, target: str, launch: str):
    """One entry's timing at ``size``: the baseline's, or the file's simulated call."""
    if e.baseline is not None:
        return e.baseline.time(size, b)
    return simulate(e.program, topo, e.kind, size, inplace=inplace, bound=b, machine=e.machine, target=target,
                    launch=launch)[0]


def _read(path, text, topo, target, warn) -> _Entry:
    program, found = parse(text, path)
    report = verify(program, target, sms=topo.min_sms(), findings=found, source=path)
    if report.verdict == "invalid":
        raise CollsError(f"INVALID for {target}: {report.consequence()}; only correct files are timed "
                         f"(`colls verify {path}` lists the findings)", source=path)
    kind = report.facts.get("kind")
    if kind not in KINDS:
        raise CollsError(f"coll=\"{program.coll}\" is not a collective the simulator can time (one of "
                         f"{', '.join(KINDS)})", source=path, key="coll")
    if program.ngpus != topo.ngpus:
        raise CollsError(f"the file is for {program.ngpus} GPUs but {topo.name} has {topo.ngpus}", source=path,
                         key="ngpus")
    if report.verdict == "unproven":
        warn(f"{path}: NOT PROVEN ({'; '.join(report.unproven)}); timing it anyway")
    return _Entry(path, kind, int(report.facts.get("root") or 0), program, prepare(program, topo, kind))


def _bound(topo, kind, root):
    try:
        return bounds.bound(topo, kind, root=root)
    except CollsError:
        return None


def _timeline(e: _Entry, topo, size, inplace, target, b, path, launch: str = DEFAULT_LAUNCH):
    from colls.plot import plot_timeline
    if e.baseline is not None:
        best = e.baseline.time(size, b)
        timer = e.baseline.timers[e.baseline.algorithms.index(best.extra["algorithm"])]
        if not isinstance(timer, Baseline):
            raise CollsError(f"{best.extra['algorithm']} is modelled in closed form (no threadblocks to draw): "
                             "force another algorithm with --baseline nccl-ring or nccl-tree", key="--timeline")
        channels, proto = best.extra["channels"], best.extra["protocol"]
        program, machine = next((p, m) for extra, p, m, _ in timer.fastest.entries
                                if extra["channels"] == channels)
        timing, res = simulate(replace(program, proto=proto), topo, e.kind, size, bound=b, machine=machine,
                               model=model_for(proto, topo.gpu_model(), launch=launch), native=True, timeline=True)
    else:
        timing, res = simulate(e.program, topo, e.kind, size, inplace=inplace, bound=b, machine=e.machine,
                               target=target, timeline=True, launch=launch)
        machine = e.machine
        if not timing.served:
            raise CollsError(f"{size_text(size)}: {timing.reason}", key="--size")
    lanes, groups = rep.timeline_lanes(machine, res)
    drawn = "" if res.drawn_us is None else f"; drawn to {res.drawn_us:.1f} us"
    plot_timeline(lanes, path, title=f"{e.label}: {e.kind}, {size_text(size)} on {topo.name} "
                                     f"({res.time_us:.1f} us{drawn})", groups=groups, option="--timeline")
    summary = rep.link_summary(machine, res)
    if res.drawn_us is not None:
        summary += (f"\nthe timeline draws the call's first {res.drawn_us:.1f} us of {res.time_us:.1f} (it keeps "
                    f"{MAX_TIMELINE_INTERVALS:,} intervals at most; a smaller --size draws a whole call)")
    return timing, summary, rep.link_use(machine, res), res.drawn_us


def _plot(entries, bound_by_kind, sizes, topo, path):
    from colls.plot import plot_curves
    curves = [(e.label, [(t.size_bytes, t.algbw_gbps if t.served else None) for t in e.timings])
              for e in entries]
    kinds = {(e.kind, e.root) for e in entries}
    b = bound_by_kind[next(iter(kinds))] if len(kinds) == 1 else None
    bound = ("optimum (colls bound)", rep.bound_curve(b, sizes)) if b is not None else None
    plot_curves(curves, path, title=f"{entries[0].kind} on {topo.name} ({topo.ngpus} GPUs)", bound=bound,
                option="--plot")


def _model_text(topo, entries, launch: str = DEFAULT_LAUNCH) -> str:
    models = sorted({str(topo.graph.nodes[r].get("model")) for r in topo.gpus})
    effs = sorted({(d["cls"], d.get("efficiency", 1)) for _, _, d in topo.graph.edges(data=True)})
    eff = ", ".join(f"{c} at {100 * x:.0f}%" for c, x in effs if x != 1) or "all links at their full bandwidth"
    protos = sorted({e.program.proto for e in entries if e.program is not None} or {"Simple"})
    fam = family_of(models[0] if models else None)
    known = "" if all(is_known(m) for m in models) else f" (GPU not known: the {fam.name} figures)"
    costs = "; ".join(f"{p}: {fam.host_us[launch]:g} + {fam.launch_us[p]:g} us per call ({launch} launch), "
                      f"{fam.step_us[p]:g} us per message sent, {DATA_FRACTION[p]:.3g} data per wire byte, a "
                      f"threadblock sends at most {fam.tb_gbps[p]:g} GB/s (copies in its own memory at "
                      f"{fam.tb_gbps['Simple']:g})" for p in protos)
    return f"model ({fam.runtime} on {fam.name}{known}): {costs}; {eff}"


def _output(entries, bound_by_kind, topo, timeline, plot_path, timeline_path, inplace,
            launch: str = DEFAULT_LAUNCH) -> Output:
    lines, results = [], []
    for e in entries:
        b = bound_by_kind[(e.kind, e.root)]
        head = f"{e.label}: {e.kind} on {topo.name} ({topo.ngpus} GPUs)"
        if e.program is not None:
            p = e.program
            head += (f", {p.proto}, {p.nchunksperloop} chunks per loop, {p.nchannels} channels, "
                     f"{'in-place' if inplace else 'out-of-place'} calls")
        if b is not None:
            head += f"; optimum {float(b.algbw):.1f} GB/s algbw, binding cut: {b.cut_words}"
        lines += [head, rep.table(e.timings)]
        if e.baseline is not None:
            picks = sorted({(t.extra['algorithm'], t.extra['protocol'], t.extra['channels']) for t in e.timings})
            lines.append("  (best configuration per size: " + ", ".join(
                f"{size_text(t.size_bytes)} {t.extra['algorithm']} {t.extra['protocol']}/{t.extra['channels']}ch"
                for t in e.timings) + ")" if len(picks) > 1
                else f"  ({picks[0][0]}, {picks[0][1]}, {picks[0][2]} channels at every size)")
            if any(t.extra["algorithm"].startswith("nvls") for t in e.timings):
                lines.append("  (NVLS reduces inside the NVSwitch, which no schedule of sends can: the optimum above "
                             "does not bound it, and no percentage is given for it)")
        lines.append("")
        results.append({"label": e.label, "collective": e.kind, "root": e.root if e.kind in ("broadcast", "reduce")
                        else None, "baseline": e.baseline is not None,
                        "proto": e.program.proto if e.program is not None else None,
                        "nchunksperloop": e.program.nchunksperloop if e.program is not None else None,
                        "bound": b.to_dict() if b is not None else None,
                        "sizes": [t.to_dict() for t in e.timings]})
    lines.append(_model_text(topo, entries, launch))
    data = {"hardware": topo.name, "gpus": topo.ngpus, "inplace": inplace, "results": results,
            "model": _model_text(topo, entries, launch)}
    if plot_path:
        lines.append(f"wrote {plot_path}")
        data["plot"] = plot_path
    if timeline is not None:
        timing, summary, use, drawn_us = timeline
        lines += [summary, f"wrote {timeline_path}"]
        # drawn_us: the lanes end there when the call had more intervals than a timeline keeps (None: whole call)
        data["timeline"] = {"file": timeline_path, "call": timing.to_dict(), "links": use, "drawn_us": drawn_us}
    return Output("\n".join(lines), data)
