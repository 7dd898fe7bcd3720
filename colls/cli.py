"""The command line: parse arguments, call one pipeline function, print. Nothing else lives here.

Exit codes: 0 success; 1 ``colls verify`` found the file invalid, or an internal error (a bug: one line,
the traceback with ``colls --debug``); 2 bad input of any kind (the message is one line on stderr naming
the file or option, and nothing is written).

Every numeric option has a range checked before any work (:class:`Whole`); values the runtime reads as
64-bit integers (``--min-bytes``, ``--max-bytes``, ``--size``) must fit in a signed 64-bit integer.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import sys
import time
import traceback

import click

from colls import __version__
from colls.collectives import KINDS, Collective
from colls.errors import CollsError, LimitError, excerpt, printable
from colls.program import PROTOCOLS
from colls.runtimes import TARGETS, get_target

EXIT_INVALID = 1
PLAN_TARGET = "mscclpp"       # an MSCCL++ JSON execution plan (colls.mscclpp), lowered as for exe
EXIT_INTERNAL = 1
EXIT_BAD_INPUT = 2
INT64_MAX = 2**63 - 1
MAX_NODES = 100_000  # = colls.inputs.hardware.MAX_NODES (not imported: this module stays quick to load)
MAX_COPIES = 1024  # --instances, --rings, --trees-per-gpu, --chunks: far beyond any runtime's channels
MAX_SMS = 10**6
_state = {"debug": False}


class Number(click.ParamType):
    """A finite number in ``[minimum, maximum]`` (``nan`` and ``inf`` refused: click's FloatRange lets ``nan``
    through, as every comparison with it is false)."""

    name = "number"

    def __init__(self, minimum: float, maximum: float):
        self.minimum, self.maximum = minimum, maximum

    def convert(self, value, param, ctx):
        try:
            x = float(value)
        except (TypeError, ValueError):
            self.fail(f"expected a number, got {excerpt(str(value))}", param, ctx)
        if not (math.isfinite(x) and self.minimum <= x <= self.maximum):
            self.fail(f"must be a number from {self.minimum:g} to {self.maximum:g}, got {excerpt(str(value))}",
                      param, ctx)
        return x


class Whole(click.ParamType):
    """A whole number in ``[minimum, maximum]``; the message names the option and quotes a short excerpt."""

    name = "integer"

    def __init__(self, minimum: int, maximum: int):
        self.minimum, self.maximum = minimum, maximum

    def convert(self, value, param, ctx):
        if isinstance(value, int) and not isinstance(value, bool):
            n = value
        else:
            text = str(value).strip().replace("_", "")
            if not re.fullmatch(r"[+-]?[0-9]+", text):
                self.fail(f"expected a whole number, got {excerpt(str(value))}", param, ctx)
            if len(text.lstrip("+-0")) > 30:
                self.fail(f"must be between {self.minimum} and {self.maximum}, got {excerpt(str(value))}",
                          param, ctx)
            n = int(text)
        if n < self.minimum:
            self.fail(f"must be >= {self.minimum}, got {n}", param, ctx)
        if n > self.maximum:
            self.fail(f"must be at most {self.maximum}, got {n}", param, ctx)
        return n


class Choice(click.Choice):
    """click's Choice, quoting at most a short excerpt of a wrong value."""

    def convert(self, value, param, ctx):
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter:
            self.fail(f"expected one of {', '.join(self.choices)}, got {excerpt(str(value))}", param, ctx)


def _keep(name):
    """A callback that keeps an option's value for :func:`_load` (options every machine-taking command has)."""
    def callback(ctx, param, value):
        _state[name] = value
        return value
    return callback


def _hardware_options(f):
    f = click.option("--taccl-time-unit", type=float, default=None, expose_value=False,
                     callback=_keep("taccl_time_unit"), metavar="US",
                     help="TACCL profile: microseconds per cost unit (default: TACCL's for 1MB/32KB/1KB files).")(f)
    f = click.option("--taccl-chunk", default=None, expose_value=False, callback=_keep("taccl_chunk"),
                     metavar="SIZE", help="TACCL profile: the chunk size it was profiled at (default: from its name).")(f)
    f = click.option("--taccl-shape", type=Choice(["DGX2", "NDv2", "HubAndSpoke", "custom"]), default=None,
                     expose_value=False, callback=_keep("taccl_shape"),
                     help="TACCL profile (--hardware FILE.json): its node shape (default: inferred).")(f)
    f = click.option("--nodes", type=Whole(1, MAX_NODES), default=1, show_default=True,
                     help=f"Number of nodes joined through their NICs (at most {MAX_NODES}).")(f)
    f = click.option("--hardware", "hardware", required=True, metavar="NAME|PATH",
                     help="A shipped profile (see `colls hardware list`) or a YAML file.")(f)
    return f


def without_option(f):
    """``--without ITEM[,ITEM...]`` (repeatable): parts of the machine that have failed, removed by
    :func:`_load` (colls.inputs.degrade). One line gives any command that loads a machine the option."""
    return click.option("--without", "without", multiple=True, expose_value=False, callback=_keep("without"),
                        metavar="ITEMS", help="Failed parts to leave out, comma-separated or repeated: "
                        "nic:NODE:INDEX, link:A-B[:K|:all] (A, B a GPU rank or a vertex such as n0.nvswitch; "
                        "K links, default 1). gpu:RANK is refused (a different job).")(f)


def _jobs_option(f):
    """--jobs of the commands that simulate in worker processes (compile, simulate)."""
    return click.option("--jobs", type=Whole(1, 1024), default=None, metavar="N",
                        help="Processes for the simulations (default: the processors available); the result is "
                             "the same.")(f)


def _terminal_lines():
    """A callback that prints ``colls: LINE`` on stderr when stderr is a terminal; None for scripts."""
    return (lambda line: click.echo(f"colls: {line}", err=True)) if sys.stderr.isatty() else None


def _progress_on_a_terminal():
    """Stage lines on stderr from a second into the work, when stderr is a terminal (scripts get none)."""
    from colls.pipeline import _Progress
    return _Progress(_terminal_lines())


def _binding_option(check, chunks: int | None, instances: int | None, nodes: int, rings: int | None = None) -> str:
    """The option a refusal of ``check(chunk factor, copies, rings)`` names: --chunks, --instances or --rings
    when the request passes with that one back at 1 (the rings: at the method's own count), else --nodes on
    several nodes, else --method (one node of this machine holds no such file whatever the options)."""
    asked = (chunks or 1, instances or 1, rings)
    for key, trial in (("--chunks", (1, instances or 1, rings)), ("--instances", (chunks or 1, 1, rings)),
                       ("--rings", (chunks or 1, instances or 1, None))):
        if trial != asked:
            try:
                check(*trial)
            except CollsError:
                continue
            return key
    return "--nodes" if nodes > 1 else "--method"


def _load(hardware: str, nodes: int, option: str = "--hardware", precheck=None):
    """The topology, without the parts ``--without`` names (where the command has that option)."""
    topo = _load_machine(hardware, nodes, option, precheck)
    if _state.get("without"):
        from colls.inputs.degrade import degrade
        topo = degrade(topo, _state["without"])
    return topo


def _load_machine(hardware: str, nodes: int, option: str, precheck):
    """The topology; an error that names no file (an unknown name, an empty one) names ``option``."""
    from colls.inputs import hardware as hw
    if nodes < 1:
        raise CollsError(f"must be >= 1, got {nodes}", key="--nodes")
    taccl = {k: _state.get(f"taccl_{k}") for k in ("shape", "chunk", "time_unit")}
    if _is_json(hardware):
        from colls.inputs.taccl import load_taccl_profile
        return load_taccl_profile(hardware, taccl["shape"], nodes, chunk=taccl["chunk"],
                                  time_unit=taccl["time_unit"])
    for name, value in taccl.items():
        if value is not None:
            raise CollsError("applies to a TACCL profile (--hardware FILE.json) only",
                             key=f"--taccl-{name.replace('_', '-')}")
    try:
        return hw.load_topology(hardware, nodes=nodes, precheck=precheck)
    except CollsError as e:
        if e.source is None and e.key is None:
            raise CollsError(str(e), key=option) from None
        raise


def _is_json(spec: str) -> bool:
    """A TACCL profile: a ``.json`` path, or a file whose first non-space character is ``{``."""
    if spec.lower().endswith(".json"):
        return True
    try:
        if not stat.S_ISREG(os.stat(spec).st_mode):     # a FIFO or device is never opened here
            return False
        with open(spec, "rb") as fh:
            return fh.read(4096).lstrip()[:1] == b"{"
    except OSError:
        return False


def _echo_json(data) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="colls")
@click.option("--debug", is_flag=True, help="On an internal error, show the whole traceback.")
def cli(debug):
    """colls: synthesize collective schedules for a machine and write MSCCL XML the runtimes load.

    Every file it writes is verified first: the runtime's format and limits, FIFO matching, freedom
    from deadlocks and races, and, by symbolic execution, that it computes the collective.
    """
    _state.clear()  # the options kept for _load are this invocation's only
    _state["debug"] = debug


@cli.group()
def hardware():
    """Inspect the hardware profiles, or import one from NCCL's topology dump."""


@hardware.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def hardware_list(as_json):
    """List the shipped hardware profiles."""
    from colls.inputs import hardware as hw
    profiles = hw.list_profiles()
    if as_json:
        _echo_json(profiles)
        return
    width = max(len(p["name"]) for p in profiles)
    for p in profiles:
        click.echo(f"{p['name']:<{width}}  {p['gpus']:>3} GPUs/node  {p['description']}")


@hardware.command("show")
@click.argument("name", metavar="NAME|PATH")
@click.option("--nodes", type=Whole(1, MAX_NODES), default=1, show_default=True, help="Number of nodes.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def hardware_show(name, nodes, as_json):
    """Summarize a profile (at --nodes N): GPUs, switches, NICs, link classes, bandwidths."""
    from colls.inputs import hardware as hw
    topo = _load(name, nodes, option="NAME")
    if as_json:
        _echo_json(hw.summarize(topo))
    else:
        click.echo(hw.format_summary(topo))


@hardware.command("import")
@click.argument("path", metavar="TOPO.xml")
@click.option("-o", "--output", default=None, metavar="FILE",
              help="Write the profile here (atomically) instead of printing it.")
@click.option("--name", default=None, help="The profile's name (default: from the file name).")
@click.option("--gpu-model", default=None, metavar="NAME", help="GPU model, for a GPU colls does not know.")
@click.option("--sms", type=Whole(1, MAX_SMS), default=None,
              help="SMs (or CUs) per GPU, for a GPU colls does not know.")
@click.option("--link-bandwidth", default=None, metavar="GBPS",
              help="GB/s per NVLink or xGMI link and direction, for a generation colls does not know.")
def hardware_import(path, output, name, gpu_model, sms, link_bandwidth):
    """Turn one node's NCCL (or RCCL) topology dump (NCCL_TOPO_DUMP_FILE) into a node profile."""
    from colls import files
    from colls.inputs import nccl_topo
    if output is not None:
        files.check_output(output, "-o")
    result = nccl_topo.import_dump(path, name=name, gpu_model=gpu_model, sms=sms, link_bandwidth=link_bandwidth)
    for line in result.notes:
        click.echo(f"colls: note: {line}", err=True)
    if output is None:
        click.echo(result.text, nl=False)
    else:
        files.write_atomic(output, result.text)
        click.echo(f"wrote {output}: {result.summary}")


@cli.command()
@_hardware_options
@without_option
@click.option("--collective", required=True, type=Choice(KINDS), help="The collective.")
@click.option("--method", default="ring", show_default=True, metavar="NAME",
              help="Synthesis method: ring, direct, trees, milp, hier (several nodes: node trees and rail rings).")
@click.option("-o", "--output", required=True, metavar="FILE",
              help="Where to write the XML, or the plan for --target mscclpp (written only after it verified): a "
                   "regular file or a new name.")
@click.option("--target", type=Choice(sorted(TARGETS) + [PLAN_TARGET]), default="exe", show_default=True,
              help="Runtime: exe (MSCCL executor for NCCL), rccl, old (microsoft/msccl), mscclpp (an MSCCL++ JSON "
                   "execution plan, MSCCL++ 0.8 and later).")
@click.option("--instances", type=Whole(1, MAX_COPIES), default=None,
              help="Independent copies of the schedule, each on its own channels (default: 1, 2, 4, ... while "
                   "each doubling simulates faster at 16MB and 256MB).")
@click.option("--proto", type=Choice(PROTOCOLS), default="Simple", show_default=True)
@click.option("--min-bytes", type=Whole(0, INT64_MAX), default=0, show_default=True,
              help="Smallest call (bytes) this file is used for.")
@click.option("--max-bytes", type=Whole(0, INT64_MAX), default=0, show_default=True,
              help="Largest call (bytes) this file is used for; 0 means no limit.")
@click.option("--inplace-only", is_flag=True, help="Claim in-place calls only.")
@click.option("--outofplace-only", is_flag=True, help="Claim out-of-place calls only (alltoall's default).")
@click.option("--inplace-and-outofplace", is_flag=True,
              help="Claim both in-place and out-of-place calls (the default, but for alltoall: in place it stages "
                   "blocks in scratch, which slows every call).")
@click.option("--chunks", type=Whole(1, MAX_COPIES), default=None,
              help="Chunk factor: chunks per rank's share (a method may need more; default 1, and trees "
                   "and direct cut their schedule into as many chunks as simulate fastest).")
@click.option("--root", type=Whole(0, MAX_NODES * MAX_COPIES), default=None,
              help="Root rank: required for broadcast and reduce (a file serves one root only).")
@click.option("--rings", type=Whole(1, MAX_COPIES), default=None, help="ring: number of rings (default: best found).")
@click.option("--trees-per-gpu", type=Whole(1, MAX_COPIES), default=None,
              help="trees: spanning trees per GPU (default: the best that fits the target).")
@click.option("--leaves", type=Choice(("paired", "packed")), default=None,
              help="trees reductions (reducescatter, reduce, allreduce): leaf children add their partial sums "
                   "pairwise first, or the trees as packed (default: the faster simulated at 16MB and 256MB).")
@click.option("--sketch", "sketch_path", default=None, metavar="FILE",
              help="milp: a communication sketch (colls YAML or TACCL JSON; default: derived from the machine).")
@click.option("--time-limit", type=float, default=None, metavar="SECONDS",
              help="milp: solver time per stage, CP-SAT deterministic seconds (default 10).")
@click.option("--gap", type=float, default=None, metavar="FRACTION",
              help="milp: stop at this relative gap to the solver's bound (default 0.01).")
@click.option("--max-threadblocks", type=Whole(1, 1024), default=None, metavar="N",
              help="At most N threadblocks (SMs or CUs) per GPU for the file: each is one the model's compute "
                   "cannot use. The methods fit their counts to it; default: the target's and the GPU's limit.")
@click.option("--quiet", is_flag=True, help="milp: no solver progress lines on stderr.")
@click.option("--simulate/--no-simulate", "simulate", default=True, show_default=True,
              help="Time the file with the simulator: busbw at 1KB, 1MB and 1GB in the summary, the whole curve "
                   "in --json.")
@click.option("--json", "as_json", is_flag=True, help="Print the facts as JSON instead of one line.")
def synth(hardware, nodes, collective, method, output, target, instances, proto, min_bytes, max_bytes,
          inplace_only, outofplace_only, inplace_and_outofplace, chunks, root, rings, trees_per_gpu, leaves, sketch_path, time_limit, gap,
          max_threadblocks, quiet, simulate, as_json):
    """Synthesize a schedule, prove it, and write it as MSCCL XML (or, with --target mscclpp, as an MSCCL++
    JSON execution plan)."""
    from colls import files, pipeline
    from colls.synth import METHODS
    plan_target = target == PLAN_TARGET
    if plan_target:
        if proto not in ("Simple", "LL"):
            raise CollsError(f"MSCCL++ plans run Simple or LL (packets), not {proto}", key="--proto")
        from colls.mscclpp import SUPPORTED
        if collective not in SUPPORTED:     # refused before any work, not once the plan is written
            raise CollsError(f"MSCCL++ plans are written for {', '.join(SUPPORTED)}, not {collective}",
                             key="--collective")
        target = "exe"          # lowered as for the MSCCL executor (cut to fit a plan's ops), written as a plan
    if method not in METHODS:
        raise CollsError(f"expected one of {', '.join(sorted(METHODS))}, got {excerpt(method)}", key="--method")
    calls = [key for key, given in (("--inplace-only", inplace_only), ("--outofplace-only", outofplace_only),
                                    ("--inplace-and-outofplace", inplace_and_outofplace)) if given]
    if len(calls) > 1:
        raise CollsError(f"choose at most one of --inplace-only, --outofplace-only and --inplace-and-outofplace, "
                         f"not {' and '.join(calls)}", key="/".join(calls))
    mode = {"--inplace-only": "inplace", "--outofplace-only": "outofplace",
            "--inplace-and-outofplace": "both"}[calls[0]] if calls else None
    files.check_output(output, "-o")
    _check_root_given([collective], root, collective)
    options = {}
    if rings is not None:
        options["rings"] = rings
    if trees_per_gpu is not None:
        options["trees_per_gpu"] = trees_per_gpu
    if options and method not in ("ring", "trees"):
        raise CollsError(f"does not apply to method {excerpt(method)}",
                         key="--rings" if rings is not None else "--trees-per-gpu")
    if leaves is not None:
        from colls.tune import pairs
        if not pairs(method, collective):
            raise CollsError(f"applies to the trees method's reducescatter, reduce and allreduce, not {method} "
                             f"{collective}", key="--leaves")
        options["pair_leaves"] = leaves == "paired"
    if max_threadblocks is not None:
        options["max_threadblocks"] = max_threadblocks
    milp_given = [(key, value) for key, value in (("--sketch", sketch_path), ("--time-limit", time_limit),
                                                  ("--gap", gap), ("--quiet", quiet or None)) if value is not None]
    if milp_given and method != "milp":
        raise CollsError(f"applies to method milp only, not {excerpt(method)}", key=milp_given[0][0])
    if time_limit is not None:
        options["time_limit"] = time_limit
    if gap is not None:
        options["gap"] = gap

    def precheck(ngpus: int) -> None:    # what the runtime cannot load is refused before the machine is built
        if ngpus < 2:
            return

        where = f"{nodes} node{'s' if nodes != 1 else ''} of {excerpt(hardware)}"

        def check(chunk_factor: int, copies: int, ring_count: int | None = rings) -> None:
            pipeline.check_rank_limits(Collective(collective, ngpus, chunks=chunk_factor), method, get_target(target),
                                       copies, dict(options, rings=ring_count), where=where, nodes=nodes)
        try:
            check(chunks or 1, instances or 1)
        except CollsError as e:
            raise type(e)(e.reason, key=_binding_option(check, chunks, instances, nodes, rings)) from None

    topo = _load(hardware, nodes, precheck=precheck)
    root = root or 0
    _check_root(root, topo)
    if method == "milp":
        if sketch_path is not None:
            from colls.inputs.sketch import load_sketch
            options["sketch"] = load_sketch(sketch_path, topo, nodes)
        elif not quiet:
            from colls.inputs.sketch import derive_sketch, sketch_text
            click.echo(f"colls: no --sketch: using this one, derived from the machine (`colls sketch derive "
                       f"--hardware {hardware} --nodes {nodes} -o FILE` saves it to edit):", err=True)
            for line in sketch_text(derive_sketch(topo)).splitlines():
                click.echo(f"colls:   {line}", err=True)
        echo = _terminal_lines()
        if not quiet and echo is not None:
            options["progress"] = echo
    coll = Collective(collective, topo.ngpus, chunks=chunks or 1, root=root)
    from colls import tune
    make = tune.compile_for_plans if plan_target else tune.compile_fastest
    try:
        result = make(topo, coll, method, target=target, instances=instances, tune_depth=chunks is None, proto=proto,
                      min_bytes=min_bytes, max_bytes=max_bytes, mode=mode, options=options,
                      progress=_terminal_lines())
    except LimitError as e:
        if e.key is not None:
            raise
        # the file's threadblocks, channels and steps grow with the copies and the chunk factor asked for
        key = "--instances" if (instances or 1) > 1 else "--chunks" if (chunks or 1) > 1 else "--method"
        raise LimitError(e.reason, key=key) from None
    result.facts["without"] = list(topo.meta.get("without", []))
    if plan_target:
        _write_plan(result, topo, output, mode, simulate, as_json)
        return
    if simulate:
        from colls.simulate import summary
        summary.add_to(result, curve=as_json)
        if method == "milp":
            summary.add_milp_comparison(result)
    pipeline.write_atomic(output, result.text)
    if as_json:
        _echo_json(dict(result.facts, output=output))
    else:
        click.echo(f"wrote {output}: {result.summary()}")


def _write_plan(result, topo, output: str, mode: str, simulate: bool, as_json: bool) -> None:
    """synth --target mscclpp: the lowered program written as an MSCCL++ plan, proved for every call type the
    program serves, then written atomically; the summary line as for XML."""
    from colls import files, mscclpp
    from colls.verify.plan import proved_plan
    program = result.program
    inplace = mode == "inplace"
    name = f"{program.name}-{'ip' if inplace else 'oop'}"
    from colls.simulate import plans
    protocol = "LL" if program.proto == "LL" else "Simple"
    plan, modes = proved_plan(program, topo, name=name, inplace=inplace, slice_bytes=result.facts["plan_slice"],
                              protocol=protocol)
    text = mscclpp.dumps(plan)
    f = dict(result.facts, target=PLAN_TARGET, plan_name=name, inplace=inplace, outofplace=not inplace,
             proved_calls=[("in-place" if m else "out-of-place") for m in modes],
             max_ops_per_threadblock=max(mscclpp.op_count(tb["ops"]) for g in plan["gpus"]
                                         for tb in g["threadblocks"]),
             min_bytes=plan["min_message_size"], max_bytes=plan["max_message_size"],
             pipeline_unit_bytes=mscclpp.slice_of(plan), protocol=protocol)
    for key in ("model_algbw_gbps", "bound_algbw_gbps", "fraction_of_bound", "simulated_busbw_gbps",
                "runtime_optimum_pct", "simulated_not_run"):
        f.pop(key, None)
    if simulate:
        from colls.simulate import SUMMARY_SIZES, size_text
        machine = plans.machine(program, topo, f["collective"], mscclpp.slice_of(plan), protocol)
        timings = {s: plans.time_plan(plan, program, topo, s, mach=machine) for s in SUMMARY_SIZES}
        f["simulated_busbw_gbps"] = {size_text(s): t.busbw_gbps for s, t in timings.items()}
        f["simulated_not_run"] = {size_text(s): t.reason for s, t in timings.items() if not t.served}
    files.write_atomic(output, text)
    if protocol == "LL":
        from colls.runtimes import mscclpp as rt
        click.echo(f"colls: warning: {output}: {rt.PACKET_GRAPH_HAZARD}", err=True)
    if as_json:
        _echo_json(dict(f, output=output))
        return
    from colls.pipeline import simulated_words
    line = (f"{f['collective']} {f['method']} on {f['hardware']}: {f['gpus']} gpus, {f['threadblocks']} "
            f"threadblocks/gpu, {f['max_ops_per_threadblock']} ops max/threadblock (MSCCL++ runs 64), "
            f"{f['chunks_per_loop']} chunks per loop; plan {name} for {'in-place' if inplace else 'out-of-place'} "
            f"calls of {f['min_bytes']} to {f['max_bytes']} bytes, {plans.unit_words(f['pipeline_unit_bytes'], protocol)}; "
            f"verified for {PLAN_TARGET} "
            f"({mscclpp.calls_words(modes)} calls proved)")
    words = simulated_words({"simulated_busbw_gbps": f.get("simulated_busbw_gbps"),
                             "simulated_not_run": f.get("simulated_not_run")})
    if words:
        line += f"; {words} (MSCCL++ plan model)"
    click.echo(f"wrote {output}: {line}")


NCCL_STEPS_BYTES = 8          # a buffer holds NCCL_STEPS slots of at least a byte each


@cli.command(name="compile")
@_hardware_options
@without_option
@click.option("--collective", required=True, type=Choice(list(KINDS) + ["all"]),
              help="The collective, or all (allreduce, allgather, reducescatter, alltoall; with --root also "
                   "broadcast and reduce).")
@click.option("-o", "--output", required=True, metavar="DIR",
              help="The folder to write: new, empty, or one colls compile wrote before (replaced whole).")
@click.option("--target", type=Choice(sorted(TARGETS) + [PLAN_TARGET]), default="exe", show_default=True,
              help="Runtime: exe (MSCCL executor for NCCL), rccl, old (microsoft/msccl), mscclpp (MSCCL++ plans, "
                   "with env.sh for 0.8 and register_plans.py for current MSCCL++).")
@click.option("--root", type=Whole(0, MAX_NODES * MAX_COPIES), default=None,
              help="Root rank of broadcast/reduce (a file serves one root only).")
@click.option("--methods", default=None, metavar="LIST",
              help="The methods to try, comma-separated (default: ring,direct,trees,milp, and hier on more than "
                   "one node).")
@click.option("--sizes", default="1KB:1GB:4", show_default=True,
              help="The call sizes to simulate and choose at (as colls simulate --sizes); ranges change "
                   "hands only at these sizes.")
@click.option("--sketch", "sketch_path", default=None, metavar="FILE",
              help="milp: a communication sketch (default: derived from the machine).")
@click.option("--time-limit", type=float, default=None, metavar="SECONDS",
              help="milp: solver time per stage, CP-SAT deterministic seconds (default 2 here, 10 in synth).")
@_jobs_option
@click.option("--margin", type=Number(0, 99), default=None, metavar="PCT",
              help="How much faster (percent) a file must be than the runtime's own algorithm to take a size "
                   "(default: the simulator's measured error in the size's band, bench/CALIBRATION.md).")
@click.option("--max-threadblocks", type=Whole(1, 1024), default=None, metavar="N",
              help="At most N threadblocks (SMs or CUs) per GPU for the files (every method, every copy): each is one the model's compute "
                   "cannot use. The methods fit their counts to it; default: the target's and the GPU's limit.")
@click.option("--packets", is_flag=True,
              help="--target mscclpp: also write each schedule as a packet plan (LL protocol) and give it the sizes "
                   "where it is fastest. Packet plans are wrong under CUDA graph capture (see the README).")
@click.option("--quiet", is_flag=True, help="No progress lines on stderr.")
@click.option("--json", "as_json", is_flag=True, help="Print the ranges as JSON.")
def compile_cmd(hardware, nodes, collective, output, target, root, methods, sizes, sketch_path, time_limit, jobs,
                margin, max_threadblocks, packets, quiet, as_json):
    """Choose the fastest file for every range of call sizes and write a folder the runtime loads.

    Every method is synthesized, proved and simulated from the smallest to the largest size beside
    NCCL's own algorithm; each range goes to its fastest file, or stays with NCCL where NCCL is as fast.
    See the README's "Deploying" section.
    """
    from colls import compile as comp
    from colls.parallel import default_jobs
    from colls.simulate import parse_sizes
    known = comp.METHODS + comp.OPTIONAL_METHODS
    names = None            # compile's default for the machine (colls.compile.default_methods)
    if methods is not None:
        names = [m.strip() for m in methods.split(",") if m.strip()]
        bad = [m for m in names if m not in known]
        if not names or bad or len(set(names)) != len(names):
            raise CollsError(f"expected a comma list of distinct {', '.join(known)}, got {excerpt(methods)}",
                             key="--methods")
    if (sketch_path is not None or time_limit is not None) and names is not None and "milp" not in names:
        raise CollsError("applies to method milp, which --methods leaves out",
                         key="--sketch" if sketch_path is not None else "--time-limit")
    size_list = parse_sizes(sizes, "--sizes")
    if packets and target != PLAN_TARGET:
        raise CollsError(f"packet plans are MSCCL++ plans: use it with --target {PLAN_TARGET}", key="--packets")
    if collective == "all":
        kinds = list(comp.ALL) + (["broadcast", "reduce"] if root is not None else [])
    else:
        kinds = [collective]
    _check_root_given(kinds, root, collective)
    comp.check_out(output)
    topo = _load(hardware, nodes)
    if root is not None:
        _check_root(root, topo)
    milp_options = {}
    if time_limit is not None:
        milp_options["time_limit"] = time_limit
    sketch = None
    if sketch_path is not None:
        from colls.inputs.sketch import load_sketch
        sketch = load_sketch(sketch_path, topo, nodes)
    started = time.perf_counter()
    say = (lambda line: None) if quiet else \
        (lambda line: click.echo(f"colls: [{time.perf_counter() - started:5.0f} s] {line}", err=True))
    common = dict(sizes=size_list, methods=names, sketch=sketch, milp_options=milp_options,
                  jobs=jobs or default_jobs(), progress=say, margin=None if margin is None else margin / 100,
                  max_threadblocks=max_threadblocks)
    if target == PLAN_TARGET:
        if root is not None:
            raise CollsError("MSCCL++ plans are written for allreduce, allgather, reducescatter and alltoall",
                             key="--root")
        plans = comp.plan_mscclpp(topo, kinds, packets=packets, **common)
        _check_some_method_made_a_file(plans, names)
        say("writing and proving the chosen plans")
        comp.lower_plans(plans)
        written = comp.write_plans(plans, output, topo)
        what = f"plan(s) in {output}/{comp.PLANS}, README.md, env.sh, {comp.REGISTER}"
    else:
        plans = comp.plan(topo, kinds, target=target, root=root, **common)
        _check_some_method_made_a_file(plans, names)
        say("proving the chosen files")
        comp.lower_files(plans, target, jobs or default_jobs())
        written = comp.write(plans, output, topo, target)
        what = f"file(s) in {output}/{comp.ALGORITHMS}, README.md, env.sh"
    if as_json:
        _echo_json(comp.to_json(plans, output, written, target))
        return
    click.echo(f"wrote {output}: {len(written)} {what} (modelled on {topo.name}, {topo.ngpus} GPUs, target {target})")
    for line in comp.summary_lines(plans, target):
        click.echo(f"  {line}")


def _check_some_method_made_a_file(plans, names) -> None:
    """``--methods`` given and none of them made a file for any collective: refused, with why (as synth
    refuses), rather than a folder of the runtime's own algorithms the user did not ask for."""
    if names is None or any(m.variants for p in plans for m in p.methods):
        return
    why = "; ".join(f"{m.name} for {p.kind}: {m.refused}" for p in plans for m in p.methods if m.refused)
    raise CollsError(f"no method given made a file ({printable(why, 240) or 'none applies'})", key="--methods")


@cli.group()
def sketch():
    """Communication sketches for the milp method (see sketches/README.md)."""


@sketch.command("derive")
@_hardware_options
@without_option
@click.option("-o", "--output", default=None, metavar="FILE", help="Write the sketch here (default: print it).")
def sketch_derive(hardware, nodes, output):
    """Print the sketch the milp method uses when none is given: a starting point to edit."""
    from colls import files
    from colls.inputs.sketch import derive_sketch, sketch_text
    if output is not None:
        files.check_output(output, "-o")
    topo = _load(hardware, nodes)
    text = sketch_text(derive_sketch(topo), comment=f"derived by colls sketch derive for {topo.name}; "
                       "edit it and pass it with --sketch")
    if output is None:
        click.echo(text, nl=not text.endswith("\n"))
    else:
        files.write_atomic(output, text, option="-o")
        click.echo(f"wrote {output}")


@sketch.command("check")
@click.argument("path", metavar="FILE")
@_hardware_options
@without_option
def sketch_check(path, hardware, nodes):
    """Check a sketch (colls YAML or TACCL JSON) against a machine; exit 2 with the first problem."""
    from colls.inputs.sketch import load_sketch
    topo = _load(hardware, nodes)
    load_sketch(path, topo, nodes)
    click.echo(f"{path}: a valid sketch for {topo.name}")


@cli.command(name="verify")
@click.argument("path", metavar="FILE")
@click.option("--target", type=Choice(sorted(TARGETS)), default="exe", show_default=True)
@click.option("--hardware", default=None, metavar="NAME|PATH",
              help="Check threadblocks per GPU against this machine's SM count, and ngpus against its GPUs.")
@click.option("--nodes", type=Whole(1, MAX_NODES), default=1, show_default=True)
@click.option("--sms", type=Whole(1, MAX_SMS), default=None, help="SMs per GPU (instead of --hardware).")
@click.option("--buffsize", type=Whole(NCCL_STEPS_BYTES, INT64_MAX), default=None, metavar="BYTES",
              help="The connection buffer your site sets for the file's protocol (NCCL_BUFFSIZE for Simple, "
                   "NCCL_LL_BUFFSIZE, NCCL_LL128_BUFFSIZE); default NCCL's. It moves the sizes at which a hang "
                   "starts.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report.")
def verify_cmd(path, target, hardware, nodes, sms, buffsize, as_json):
    """Check any MSCCL XML file against the runtime's contract and prove what it computes.

    Exit 0 only if the file is valid; 1 if it is invalid or not proven; 2 if it cannot be read at all.
    """
    from colls import files, verify
    from colls import mscclpp
    text = files.read_text(path, files.MAX_XML_BYTES, option="FILE")
    if mscclpp.is_plan_text(text):               # an MSCCL++ JSON plan: its collective is in the plan
        from colls.verify.plan import verify_plan
        # the XML runtimes' options would be silently ignored: the plan's checks are MSCCL++'s own
        given = [f"--{name}" for name in ("target", "hardware", "nodes", "sms", "buffsize")
                 if click.get_current_context().get_parameter_source(name) != click.core.ParameterSource.DEFAULT]
        if given:
            raise CollsError("applies to MSCCL XML files, not to an MSCCL++ execution plan (checked against "
                             "MSCCL++'s loader and kernel alone)", source=path, key=given[0])
        plan = mscclpp.load(text, path, shape=False)     # a JSON plan of the wrong shape is an invalid file
        kind = plan.get("collective") if isinstance(plan, dict) else None
        report = verify_plan(plan, kind if isinstance(kind, str) else "unknown", path)
    else:
        ranks = None
        if hardware is not None:
            topo = _load(hardware, nodes)
            sms, ranks = topo.min_sms() if sms is None else sms, topo.ngpus
        report = verify.verify_text(text, path, get_target(target), sms=sms, buffsize=buffsize, ranks=ranks)
    if as_json:
        _echo_json(report.to_dict())
    else:
        click.echo(report.format())
    if not report.ok:
        sys.exit(EXIT_INVALID)


@cli.command(name="bound")
@_hardware_options
@without_option
@click.option("--collective", required=True, type=Choice(KINDS))
@click.option("--size", default=None, metavar="SIZE",
              help="A call size (4096, 1GB; 1KB = 1024 bytes): also print the time at it.")
@click.option("--root", type=Whole(0, MAX_NODES * MAX_COPIES), default=0, show_default=True)
@click.option("--trees", is_flag=True, help="Also pack spanning trees with no step limit and compare.")
@click.option("--target", type=Choice(sorted(TARGETS)), default="exe", show_default=True,
              help="The runtime whose costs the runtime optimum counts.")
@click.option("--json", "as_json", is_flag=True)
def bound_cmd(hardware, nodes, collective, size, root, trees, target, as_json):
    """The best possible algorithmic bandwidth on this machine and the cut that limits it (the link
    optimum), and the least time any file can take on the runtime at 1 KB, 1 MB and 1 GB or --size (the
    runtime optimum: the links as the runtime reaches them, its launch and message costs, its threadblocks'
    copy rate)."""
    from colls import bound
    from colls.simulate import SUMMARY_SIZES
    from colls.sizes import parse_size
    size = parse_size(size, "--size") if size is not None else None
    topo = _load(hardware, nodes)
    _check_root(root, topo)
    b = bound.bound(topo, collective, root=root)
    runtime = bound.runtime_optimum(topo, collective, target, root=root, link_optimum=b)
    sizes = [size] if size is not None else list(SUMMARY_SIZES)
    data = dict(b.to_dict(size), without=list(topo.meta.get("without", [])), runtime_optimum=runtime.to_dict(sizes))
    if trees:
        from colls.synth import trees as trees_mod
        data["trees"] = trees_mod.unconstrained_report(topo, collective, root=root)
    if as_json:
        _echo_json(data)
    else:
        if data["without"]:
            click.echo(f"machine: {topo.name}")
        click.echo(b.format(size))
        click.echo(runtime.format(sizes))
        if trees:
            click.echo(data["trees"]["text"])


BASELINES = ("nccl", "nccl-ring", "nccl-tree", "nccl-nvls")


@cli.command(name="simulate")
@click.argument("paths", metavar="[FILE.xml|FILE.json]...", nargs=-1)
@_hardware_options
@click.option("--sizes", default="1KB:4GB", show_default=True,
              help="Call sizes: FIRST:LAST (every power of two between), FIRST:LAST:FACTOR or a comma list; "
                   "1KB = 1024 bytes; size = one rank's whole buffer, as nccl-tests prints it.")
@click.option("--inplace", is_flag=True, help="Time in-place calls (default: out-of-place).")
@click.option("--launch", type=Choice(("stream", "graph")), default="stream", show_default=True,
              help="How calls are launched: 'stream', one kernel launch and proxy start per call (nccl-tests "
                   "without -G), or 'graph', captured in a CUDA graph (-G 1: no host cost per call).")
@click.option("--target", type=Choice(sorted(TARGETS)), default="exe", show_default=True)
@click.option("--baseline", type=Choice(BASELINES), default=None,
              help="Also time what the runtime of --target runs by itself on this machine: 'nccl' its default "
                   "(the fastest of its algorithms at each size: ring, tree for allreduce, NVLS on NVSwitch "
                   "Hopper nodes; alltoall as grouped sends), or one algorithm forced like NCCL_ALGO; each at its "
                   "best protocol, on the channels NCCL gives a call of that size.")
@click.option("--collective", type=Choice(KINDS), default=None,
              help="The collective of --baseline when no FILE is given.")
@click.option("--root", type=Whole(0, MAX_NODES * MAX_COPIES), default=None,
              help="Root rank of a broadcast/reduce --baseline without FILE (a file's root is its own).")
@click.option("--plot", "plot_path", default=None, metavar="PNG", help="Draw algbw against size, one line per "
              "file (and the baseline), with the optimum as a dashed line.")
@click.option("--timeline", "timeline_path", default=None, metavar="PNG",
              help="Draw one call (--size) per link and per threadblock, and print the links' utilisation.")
@click.option("--size", "timeline_size", default=None, metavar="SIZE", help="The call size --timeline shows.")
@click.option("--json", "as_json", is_flag=True, help="Every number, as JSON.")
@_jobs_option
def simulate_cmd(paths, hardware, nodes, sizes, inplace, launch, target, baseline, collective, root, plot_path,
                 timeline_path, timeline_size, as_json, jobs):
    """Time MSCCL files (from any generator), or MSCCL++ plans colls wrote (FILE.json), on a machine, per call
    size, and show where the time goes.

    Each file is verified first: an invalid file is refused. See the README's "Simulating" section for
    the model and how to read its output.
    """
    from colls import simulate as sim
    from colls.parallel import default_jobs
    from colls.simulate import cli_run
    if not paths and baseline is None:
        raise CollsError("give at least one FILE, or --baseline with --collective", key="FILE")
    size_list = sim.parse_sizes(sizes, "--sizes")
    shown = None
    if timeline_path is not None or timeline_size is not None:
        if timeline_path is None or timeline_size is None:
            raise CollsError("--timeline PNG and --size SIZE go together", key="--timeline/--size")
        if len(paths) + (baseline is not None) != 1:
            raise CollsError("a timeline shows one call of one FILE (or of the baseline alone)", key="--timeline")
        shown = sim.parse_sizes(timeline_size, "--size")
        if len(shown) != 1:
            raise CollsError("one size", key="--size")
        shown = shown[0]
    outputs = [(p, o) for p, o in ((plot_path, "--plot"), (timeline_path, "--timeline")) if p is not None]
    from colls import files
    for p, o in outputs:
        files.check_output(p, o)
    if len(outputs) == 2 and os.path.abspath(plot_path) == os.path.abspath(timeline_path):
        raise CollsError("--plot and --timeline name the same file", key="--timeline")
    texts = [(p, files.read_text(p, files.MAX_XML_BYTES, option="FILE")) for p in paths]
    from colls import mscclpp
    plans = [p for p, text in texts if mscclpp.is_plan_text(text)]     # MSCCL++ plans colls wrote
    if plans:
        if len(plans) != len(texts):
            raise CollsError(f"{excerpt(plans[0], 80)} is an MSCCL++ plan and the other FILEs are not: time plans "
                             "and MSCCL files in separate runs", key="FILE")
        given = [o for o, v in (("--plot", plot_path), ("--timeline", timeline_path), ("--collective", collective),
                                ("--root", root)) if v is not None]
        if given or target != "exe":
            raise CollsError("applies to MSCCL files, not MSCCL++ plans", key=given[0] if given else "--target")
        from colls.simulate import plans as plan_sim
        topo = _load(hardware, nodes)
        text, data = plan_sim.run_files(texts, topo, size_list, inplace=inplace, baseline=baseline, launch=launch,
                                        warn=lambda line: click.echo(f"colls: warning: {line}", err=True))
        if as_json:
            _echo_json(data)
        else:
            click.echo(text)
        return
    topo = _load(hardware, nodes)
    if root is not None:
        _check_root(root, topo)
    out = cli_run.run(texts, topo, size_list, inplace=inplace, target=target, baseline=baseline, launch=launch,
                      collective=collective, root=root, plot_path=plot_path, timeline_path=timeline_path,
                      timeline_size=shown, warn=lambda line: click.echo(f"colls: warning: {line}", err=True),
                      progress=_progress_on_a_terminal(), jobs=jobs or default_jobs())
    if as_json:
        _echo_json(out.data)
    else:
        click.echo(out.text)


@cli.command(name="explain")
@click.argument("paths", metavar="DIR|FILE...", nargs=-1, required=True)
@click.option("--ranks", type=Whole(1, 1_000_000), required=True, help="The communicator's size.")
@click.option("--bytes", "size", required=True, metavar="SIZE",
              help="The call's size as nccl-tests prints it (one rank's whole buffer): 1000, 64KB, 1GB; 1KB = 1024.")
@click.option("--dtype", default="float", show_default=True,
              help="int8 uint8 half float16 bfloat16 int32 uint32 float float32 int64 uint64 double float64.")
@click.option("--inplace", is_flag=True, help="An in-place call (default: out-of-place).")
@click.option("--target", type=Choice(sorted(TARGETS)), default="exe", show_default=True)
@click.option("--collective", type=Choice(KINDS), default=None,
              help="The call's collective (default: the one every file names).")
@click.option("--channels", type=Whole(1, 64), default=None,
              help="The communicator's channel count (NCCL_MAX_NCHANNELS; default 32).")
@click.option("--json", "as_json", is_flag=True, help="The same facts as JSON.")
def explain_cmd(paths, ranks, size, dtype, inplace, target, collective, channels, as_json):
    """Which file of a folder (or of FILEs, in order) the runtime runs for one call, and why not the others.

    Exit 0 whether or not a file matches; 2 for bad input.
    """
    from colls import explain
    if len(paths) == 1 and explain.plans_folder(paths[0]):     # colls compile --target mscclpp wrote it
        if channels is not None:
            raise CollsError("applies to MSCCL folders, not MSCCL++ plans", key="--channels")
        result = explain.explain_plans(paths[0], ranks=ranks, size=size, collective=collective, dtype=dtype,
                                       inplace=inplace)
    else:
        result = explain.explain(list(paths), ranks=ranks, size=size, collective=collective, dtype=dtype,
                                 inplace=inplace, target=target, channels=channels)
    for line in result.warnings:
        click.echo(f"colls: warning: {printable(' '.join(line.split()), 600)}", err=True)
    if as_json:
        _echo_json(result.to_dict())
    else:
        click.echo(result.format())


def _check_root_given(kinds, root, collective: str) -> None:
    """``--root`` is required when a rooted collective (broadcast, reduce) is among ``kinds``, and refused
    when none is."""
    rooted = [k for k in kinds if k in ("broadcast", "reduce")]
    if rooted and root is None:
        raise CollsError(f"a {rooted[0]} file computes the right result for one root only, and the runtime "
                         f"uses it for every {rooted[0]} call whatever its root: give the root your calls use",
                         key="--root")
    if not rooted and root is not None:
        raise CollsError(f"applies to broadcast and reduce only, not {collective}", key="--root")


def _check_root(root: int, topo) -> None:
    if root >= topo.ngpus:
        raise CollsError(f"{root} is not a rank of {topo.name} (ranks 0..{topo.ngpus - 1})", key="--root")


def _click_message(e: click.ClickException) -> str:
    """Click's message, led by the option it concerns (``--chunks: must be >= 1, got 0``)."""
    if type(e) is click.BadParameter and e.param is not None:
        name = "/".join(e.param.opts) if isinstance(e.param, click.Option) else e.param.human_readable_name
        message = f"{name}: {e.message}"
    else:
        message = e.format_message()
    return printable(" ".join(message.split()), 300)


def main(argv: list[str] | None = None) -> None:
    """Entry point: turn every user error into one line on stderr and exit code 2, and every internal
    error into one line and exit code 1 (its traceback with ``colls --debug``)."""
    _state["debug"] = False
    try:
        rc = cli.main(args=argv, prog_name="colls", standalone_mode=False)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        click.echo("colls: aborted", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except click.ClickException as e:
        click.echo(f"colls: error: {_click_message(e)}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except CollsError as e:
        click.echo(f"colls: error: {e}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except Exception as e:  # a bug, not the user's input
        if _state["debug"]:
            traceback.print_exc()
        click.echo(f"colls: internal error: {type(e).__name__}: {printable(' '.join(str(e).split()), 200)}; "
                   f"please report it with the output of --debug", err=True)
        sys.exit(EXIT_INTERNAL)
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    main()
