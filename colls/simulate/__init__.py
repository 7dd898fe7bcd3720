"""Simulation: how long an MSCCL program takes on a machine, per call size, and where the time goes.

:func:`simulate` times one call size, :func:`sweep` a list of them; both return :class:`Timing` records
with nccl-tests' figures (time, algbw, busbw), the share of the optimum (:mod:`colls.bound`) reached and
the busiest link. The engine (:mod:`colls.simulate.engine`) and its cost model
(:mod:`colls.runtimes.costs`) say what is modelled and where each figure comes from.

Which calls a file serves follows the runtime's selection (``mscclSchedulerSelectAlgo``): the per-rank
element count must be a positive multiple of ``nchunksperloop``, the bytes within ``[minBytes, maxBytes]``
(``maxBytes=0``: no limit), and the file must allow the call's aliasing (``inplace``/``outofplace``). A size
the file does not serve gets a Timing with ``served=False`` and the reason: the runtime would run NCCL's
own algorithm for it, and the bench tables show a gap there rather than a made-up number.

Sizes follow nccl-tests: ``size`` is the whole buffer one rank passes (the output of allgather, the input
of reduce-scatter), the runtime's ``nBytes``; 1 GB/s is 1000 bytes per microsecond.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from colls.collectives import busbw_factor
from colls.program import Program
from colls.simulate.engine import Machine, RunResult, run
from colls.runtimes.costs import DEFAULT_LAUNCH, Model, model_for
from colls.topology import Topology
from colls.sizes import parse_sizes, size_text  # noqa: F401 (re-exported)

__all__ = ["Timing", "simulate", "sweep", "parse_sizes", "size_text", "SUMMARY_SIZES", "prepare"]

SIZE_MULTIPLIED = ("allgather", "reducescatter", "alltoall")   # sizeMultiplier = ngpus (msccl_setup.cc)
SUMMARY_SIZES = (1 << 10, 1 << 20, 1 << 30)                      # 1 KB, 1 MB, 1 GB: the synth summary
@dataclass
class Timing:
    """One call size of one file (or one baseline) on one machine."""

    size_bytes: int
    served: bool
    reason: str | None = None          # why the runtime would not run the file for this size
    time_us: float | None = None
    algbw_gbps: float | None = None
    busbw_gbps: float | None = None
    bound_time_us: float | None = None  # no schedule is faster (bandwidth and latency bounds)
    bound_pct: float | None = None      # 100 x bound_time / time
    busiest_link: str | None = None
    busiest_util: float | None = None   # the busiest link's bytes over what it could carry in the time
    passes: int = 0
    extrapolated_passes: int = 0
    label: str = ""
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        out = {"size_bytes": self.size_bytes, "served": self.served}
        if not self.served:
            out["reason"] = self.reason
            return out
        out.update(time_us=self.time_us, algbw_gbps=self.algbw_gbps, busbw_gbps=self.busbw_gbps,
                   bound_time_us=self.bound_time_us, bound_pct=self.bound_pct,
                   busiest_link=self.busiest_link, busiest_link_utilisation=self.busiest_util,
                   passes=self.passes, extrapolated_passes=self.extrapolated_passes, **self.extra)
        return out


def served(program: Program, kind: str, size: int, *, inplace: bool = False, dtype_bytes: int = 4,
           target: str = "exe") -> str | None:
    """None when the runtime runs ``program`` for a call of ``size`` bytes; otherwise why not, in words."""
    mult = program.ngpus if kind in SIZE_MULTIPLIED else 1
    unit = dtype_bytes * mult
    if size % unit:
        return (f"{size} bytes is not a whole number of {dtype_bytes}-byte elements per rank "
                f"({size} / ({dtype_bytes} x {mult}))")
    count = size // unit
    ncpl = program.nchunksperloop or 1
    if count % ncpl:
        return (f"the per-rank count {count} is not a multiple of nchunksperloop={ncpl}: the runtime runs "
                "its own algorithm instead")
    lo, hi = program.min_bytes or 0, program.max_bytes or 0
    if target == "old" and hi:
        hi -= 1
    if size < lo or (hi and size > hi):
        return f"{size} bytes is outside the file's [minBytes, maxBytes] = [{lo}, {hi or 'no limit'}]"
    if inplace and not program.inplace:
        return "the file does not serve in-place calls (inplace=\"0\")"
    if not inplace and program.outofplace == 0:         # absent (older files): out-of-place
        return "the file does not serve out-of-place calls (outofplace=\"0\")"
    return None


def prepare(program: Program, topology: Topology, kind: str) -> Machine:
    """The program laid out for the engine once; pass it to :func:`simulate` for many sizes."""
    return Machine(program, topology, kind)


def simulate(program: Program, topology: Topology, kind: str, size: int, *, inplace: bool = False,
             model: Model | None = None, bound=None, machine: Machine | None = None, native: bool = False,
             timeline: bool = False, extrapolate: bool = True, dtype_bytes: int = 4, target: str = "exe",
             buffsize: int | None = None, launch: str = DEFAULT_LAUNCH,
             deadline_us: float | None = None) -> tuple[Timing, RunResult | None]:
    """Time one call of ``size`` bytes.

    Parameters
    ----------
    program, topology : the file's Program and the machine it runs on (same number of GPUs).
    kind : the collective the file computes (as :func:`colls.verify.verify` infers it: ``facts["kind"]``).
    bound : a :class:`colls.bound.Bound` for the percentage of the optimum, or None.
    native : a model of the runtime's own algorithm (:mod:`colls.simulate.defaults`): no file selection rules,
        any size runs.
    timeline : keep per-link and per-threadblock intervals (:class:`~colls.simulate.engine.RunResult`).
    extrapolate : use the exact steady-state jump (off only to check it).
    launch : how calls are launched, ``"stream"`` (one kernel launch per call, nccl-tests without ``-G``) or
        ``"graph"`` (captured in a CUDA graph): the host's part of a call (:mod:`colls.runtimes.costs`).
    deadline_us : the result only matters below this time: a call that would take longer is not simulated to
        its end (:func:`colls.simulate.engine.run`) and gives :func:`out_of_reach` instead, with the time it
        had reached as its lower bound.

    Returns
    -------
    (Timing, RunResult or None when the size is not served)
    """
    reason = None if native else served(program, kind, size, inplace=inplace, dtype_bytes=dtype_bytes,
                                        target=target)
    if reason:
        return Timing(size, False, reason), None
    machine = machine or Machine(program, topology, kind)
    model = model or model_for(program.proto, topology.gpu_model(), launch=launch)
    res = run(machine, size, model, ncpl=program.nchunksperloop or 1, proto=program.proto,
              timeline=timeline, extrapolate=extrapolate, buffsize=buffsize, deadline_us=deadline_us)
    if res.cut:
        return out_of_reach(size, res.time_us), res
    algbw = size / res.time_us / 1000.0
    util = res.link_bytes / (machine.link_cap * res.time_us)
    busiest = int(util.argmax()) if len(util) else None
    t = Timing(size, True, None, res.time_us, algbw, algbw * busbw_factor(kind, program.ngpus),
               passes=res.passes, extrapolated_passes=res.extrapolated_passes)
    if busiest is not None and res.link_bytes[busiest] > 0:
        t.busiest_link, t.busiest_util = machine.link_name(busiest), float(util[busiest])
    if bound is not None:
        t.bound_time_us = bound.min_time_us(size)
        t.bound_pct = 100.0 * t.bound_time_us / res.time_us
    return t, res


def out_of_reach(size: int, lower_us: float) -> Timing:
    """A call size at which a program provably takes at least ``lower_us`` microseconds, more than it had to
    beat: not simulated further (``served`` is false, ``extra["lower_bound_us"]`` holds the bound)."""
    return Timing(size, False, f"slower than it had to be: at least {lower_us:.4g} us", extra={
        "lower_bound_us": lower_us})


def sweep(program: Program, topology: Topology, kind: str, sizes, **kw) -> list[Timing]:
    """:func:`simulate` for every size (the program is laid out once)."""
    machine = kw.pop("machine", None) or Machine(program, topology, kind)
    return [simulate(program, topology, kind, s, machine=machine, **kw)[0] for s in sizes]
