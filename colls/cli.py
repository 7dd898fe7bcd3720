"""The command line: parse arguments, call one pipeline function, print. Nothing else lives here.

Exit codes: 0 success; 1 ``colls verify`` found the file invalid; 2 bad input of any kind (the message is
one line on stderr, and nothing is written).
"""

from __future__ import annotations

import json
import sys

import click

from colls import __version__
from colls.collectives import KINDS, Collective
from colls.errors import CollsError
from colls.program import PROTOCOLS
from colls.targets import TARGETS

EXIT_INVALID = 1
EXIT_BAD_INPUT = 2


def _hardware_options(f):
    f = click.option("--nodes", type=int, default=1, show_default=True,
                     help="Number of nodes joined through their NICs.")(f)
    f = click.option("--hardware", "hardware", required=True, metavar="NAME|PATH",
                     help="A shipped profile (see `colls hardware list`) or a YAML file.")(f)
    return f


def _load(hardware: str, nodes: int):
    from colls import hardware as hw
    if nodes < 1:
        raise CollsError(f"must be >= 1, got {nodes}", key="--nodes")
    return hw.load_topology(hardware, nodes=nodes)


def _echo_json(data) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="colls")
def cli():
    """colls: synthesize collective schedules for a machine and write MSCCL XML the runtimes load.

    Every file it writes is verified first: the runtime's format and limits, FIFO matching, freedom
    from deadlocks and races, and, by symbolic execution, that it computes the collective.
    """


@cli.group()
def hardware():
    """Inspect the hardware profiles."""


@hardware.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def hardware_list(as_json):
    """List the shipped hardware profiles."""
    from colls import hardware as hw
    profiles = hw.list_profiles()
    if as_json:
        _echo_json(profiles)
        return
    width = max(len(p["name"]) for p in profiles)
    for p in profiles:
        click.echo(f"{p['name']:<{width}}  {p['gpus']:>3} GPUs/node  {p['description']}")


@hardware.command("show")
@click.argument("name", metavar="NAME|PATH")
@click.option("--nodes", type=int, default=1, show_default=True, help="Number of nodes.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def hardware_show(name, nodes, as_json):
    """Summarize a profile (at --nodes N): GPUs, switches, NICs, link classes, bandwidths."""
    from colls import hardware as hw
    topo = _load(name, nodes)
    if as_json:
        _echo_json(hw.summarize(topo))
    else:
        click.echo(hw.format_summary(topo))


@cli.command()
@_hardware_options
@click.option("--collective", required=True, type=click.Choice(KINDS), help="The collective.")
@click.option("--method", default="ring", show_default=True, metavar="NAME",
              help="Synthesis method: ring, direct, trees.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Where to write the XML (written only after it verified).")
@click.option("--target", type=click.Choice(sorted(TARGETS)), default="exe", show_default=True,
              help="Runtime: exe (MSCCL executor for NCCL), rccl, old (microsoft/msccl).")
@click.option("--instances", type=int, default=1, show_default=True,
              help="Independent copies of the schedule, each on its own channels.")
@click.option("--proto", type=click.Choice(PROTOCOLS), default="Simple", show_default=True)
@click.option("--min-bytes", type=int, default=0, show_default=True,
              help="Smallest call (bytes) this file is used for.")
@click.option("--max-bytes", type=int, default=0, show_default=True,
              help="Largest call (bytes) this file is used for; 0 means no limit.")
@click.option("--inplace-only", is_flag=True, help="Claim in-place calls only.")
@click.option("--outofplace-only", is_flag=True, help="Claim out-of-place calls only.")
@click.option("--chunks", type=int, default=1, show_default=True,
              help="Chunk factor: chunks per rank's share (a method may need more).")
@click.option("--root", type=int, default=0, show_default=True, help="Root rank (broadcast, reduce).")
@click.option("--rings", type=int, default=None, help="ring: number of rings (default: best found).")
@click.option("--trees-per-gpu", type=int, default=None,
              help="trees: spanning trees per GPU (default: the best that fits the target).")
@click.option("--json", "as_json", is_flag=True, help="Print the facts as JSON instead of one line.")
def synth(hardware, nodes, collective, method, output, target, instances, proto, min_bytes, max_bytes,
          inplace_only, outofplace_only, chunks, root, rings, trees_per_gpu, as_json):
    """Synthesize a schedule, prove it, and write it as MSCCL XML."""
    from colls import pipeline
    if inplace_only and outofplace_only:
        raise CollsError("choose at most one of --inplace-only and --outofplace-only")
    mode = "inplace" if inplace_only else "outofplace" if outofplace_only else "both"
    topo = _load(hardware, nodes)
    coll = Collective(collective, topo.ngpus, chunks=chunks, root=root)
    options = {}
    if rings is not None:
        options["rings"] = rings
    if trees_per_gpu is not None:
        options["trees_per_gpu"] = trees_per_gpu
    if options and method not in ("ring", "trees"):
        raise CollsError(f"--rings/--trees-per-gpu do not apply to method {method!r}")
    result = pipeline.compile_schedule(topo, coll, method, target=target, instances=instances,
                                       proto=proto, min_bytes=min_bytes, max_bytes=max_bytes,
                                       mode=mode, options=options,
                                       progress=(lambda line: click.echo(f"colls: {line}", err=True))
                                       if sys.stderr.isatty() else None)
    pipeline.write_atomic(output, result.text)
    if as_json:
        _echo_json(dict(result.facts, output=output))
    else:
        click.echo(f"wrote {output}: {result.summary()}")


@cli.command(name="verify")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--target", type=click.Choice(sorted(TARGETS)), default="exe", show_default=True)
@click.option("--hardware", default=None, metavar="NAME|PATH",
              help="Check threadblocks per GPU against this machine's SM count.")
@click.option("--nodes", type=int, default=1, show_default=True)
@click.option("--sms", type=int, default=None, help="SMs per GPU (instead of --hardware).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report.")
def verify_cmd(path, target, hardware, nodes, sms, as_json):
    """Check any MSCCL XML file against the runtime's contract and prove what it computes.

    Exit 0 only if the file is valid; 1 if it is not; 2 if it cannot be read at all.
    """
    from colls import verify
    from colls.targets import get_target
    try:
        with open(path, encoding="utf-8", errors="strict") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as e:
        raise CollsError(f"cannot read ({getattr(e, 'strerror', None) or e})", source=path) from None
    if hardware is not None:
        topo = _load(hardware, nodes)
        sms = topo.min_sms() if sms is None else sms
    report = verify.verify_text(text, path, get_target(target), sms=sms)
    if as_json:
        _echo_json(report.to_dict())
    else:
        click.echo(report.format())
    if not report.ok:
        sys.exit(EXIT_INVALID)


@cli.command(name="bound")
@_hardware_options
@click.option("--collective", required=True, type=click.Choice(KINDS))
@click.option("--size", type=int, default=None, help="Message size in bytes: also print the time.")
@click.option("--root", type=int, default=0, show_default=True)
@click.option("--trees", is_flag=True, help="Also pack spanning trees with no step limit and compare.")
@click.option("--json", "as_json", is_flag=True)
def bound_cmd(hardware, nodes, collective, size, root, trees, as_json):
    """The best possible algorithmic bandwidth on this machine, and the cut that limits it."""
    from colls import bound
    topo = _load(hardware, nodes)
    if size is not None and size <= 0:
        raise CollsError(f"must be > 0, got {size}", key="--size")
    if not 0 <= root < topo.ngpus:
        raise CollsError(f"root {root} is not a rank of {topo.ngpus}", key="--root")
    b = bound.bound(topo, collective, root=root)
    data = b.to_dict(size)
    if trees:
        from colls.synth import trees as trees_mod
        data["trees"] = trees_mod.unconstrained_report(topo, collective, root=root)
    if as_json:
        _echo_json(data)
    else:
        click.echo(b.format(size))
        if trees:
            click.echo(data["trees"]["text"])


def main(argv: list[str] | None = None) -> None:
    """Entry point: turn every user error into one line on stderr and exit code 2."""
    try:
        rc = cli.main(args=argv, prog_name="colls", standalone_mode=False)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        click.echo("colls: aborted", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except click.ClickException as e:
        click.echo(f"colls: error: {' '.join(e.format_message().split())}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except CollsError as e:
        click.echo(f"colls: error: {e}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    main()
