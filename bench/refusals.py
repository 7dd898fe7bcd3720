"""Answers at any size: `colls synth` for every shipped profile on 1 node up to 100,000, every method and
collective, timed as a user sees it (the whole command, Python's start left out), to check that whatever is
refused is refused within 5 s.

Run with ``make bench`` (or ``python bench/refusals.py [--profiles ...] [--methods ...] [--kinds ...]
[--long S] [--jobs J] [--target T --out FILE]``; defaults: 60 s, 2 jobs, target exe). Node counts: 1, 2, 4, ... while the machine has at most 1,024 GPUs (what one MSCCL file can
serve), then the first count beyond, 1,000 and 100,000. Each case runs ``colls synth ... --no-simulate`` in a
process forked from one that has imported ``colls`` (so the 0.6 s of imports is not counted), with
``--root 0`` for broadcast and reduce, and records its exit status (0: a verified file, 2: refused, with the
message), its seconds, or that it had no answer within ``--long`` seconds. Unless ``--wait-files``, a case
is over as soon as its program has been lowered within the target's limits (the pipeline's "verifying" stage:
what remains is the proof, timed with the whole file by bench/scale.py), recorded as "lowered". For MSCCL++
plans (``--target mscclpp``) the programs lowered first are candidates that may still not fit a plan's ops, so
a case is over when the file chosen starts its proof ("verifying the file"). The table goes to
``bench/REFUSALS.md`` (exe) with the machine it ran on, the refusals over 5 s and the cases over a minute listed
first. ``--rerun`` runs the cases selected again and puts their rows into the table ``--out`` already holds (after a
change that moves a few cases; its header then says how many ran again, when). A benchmark never fails the build,
it records.

``--commands bound,show,derive,simulate,verify,compile`` runs those commands instead of synth on the same
machines, plus the largest machine colls models (4,096 GPUs: colls.inputs.hardware.MAX_MODEL_GPUS) and the next
count of nodes, for ``--kinds`` (default allreduce): each must answer, refuse, or (compile) start synthesizing
within 5 s; the table goes to ``--out`` (``make bench``: bench/REFUSALS-COMMANDS.md).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

RESULTS = Path(__file__).resolve().parent / "REFUSALS.md"
PROFILES = ("dgx-a100", "dgx-h100", "dgx2", "mi250", "ndv2", "mi300x")
METHODS = ("ring", "direct", "trees", "milp", "hier")
KINDS = ("allgather", "reducescatter", "allreduce", "alltoall", "broadcast", "reduce")
MOST_GPUS = 1024         # one MSCCL file's <gpu> elements (MSCCL_MAX_SUBS)
FAR = (1000, 100_000)
REFUSE_SECONDS = 5.0     # what a refusal may take
FILE_SECONDS = 60.0      # what a file may take
VERIFYING = "verifying"  # the pipeline's stage after the lowering: the program fits the target
CHOSEN = "verifying the file"   # the same for the file written (a plan's candidates are verified in memory first)


ERR = "stderr:"           # a stage read from the command's stderr, not the pipeline's progress lines


def _machine(profile: str, nodes: int) -> list[str]:
    return ["--hardware", profile, "--nodes", str(nodes)]


def _root(kind: str) -> list[str]:
    return ["--root", "0"] if kind in ("broadcast", "reduce") else []


# --commands: every other command that builds a machine; each gives its arguments and the stage that ends its
# case early (None: it runs to its answer). compile is over once it starts synthesizing (the sweep times each
# method's file by itself); verify reads a 1-node ring allgather of the profile written before the sweep
COMMANDS = {
    "bound": lambda p, n, kind, tmp, files: (["bound", *_machine(p, n), "--collective", kind, *_root(kind)], None),
    "show": lambda p, n, kind, tmp, files: (["hardware", "show", p, "--nodes", str(n)], None),
    "derive": lambda p, n, kind, tmp, files: (["sketch", "derive", *_machine(p, n)], None),
    "simulate": lambda p, n, kind, tmp, files: (["simulate", *_machine(p, n), "--baseline", "nccl", "--collective",
                                                 kind, *_root(kind), "--jobs", "1"], None),     # one process a case
    "verify": lambda p, n, kind, tmp, files: (["verify", files[p], *_machine(p, n)], None),
    "compile": lambda p, n, kind, tmp, files: (["compile", *_machine(p, n), "--collective", kind, *_root(kind),
                                                "-o", os.path.join(tmp, "out")], ERR + "synthesizing with"),
}


def node_counts(gpus_per_node: int) -> list[int]:
    counts, n = [], 1
    while n * gpus_per_node <= MOST_GPUS:
        counts.append(n)
        n *= 2
    counts.append(MOST_GPUS // gpus_per_node + 1)
    return sorted(set(counts) | set(FAR))


def _child(args: list[str], err_path: str, stage_path: str) -> None:
    """One `colls` command in this forked process: stderr to ``err_path``, stdout discarded, and each stage the
    pipeline enters (its progress lines, all of them) appended to ``stage_path`` as it starts. The process leads
    a group of its own, so that stopping the case stops the processes it started too (compile's workers)."""
    os.setpgrp()
    fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 2)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    from colls import pipeline
    from colls.cli import main

    def stage(self, what: str) -> None:
        with open(stage_path, "a") as f:
            f.write(what + "\n")

    pipeline._Progress.__call__ = stage
    sys.argv = ["colls"] + args
    code = 0
    try:
        main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    sys.stderr.flush()
    os._exit(code)


def _lowered(stage_path: str, stage: str = VERIFYING, err_path: str | None = None) -> bool:
    """Has the program passed the lowering (the target's limits), so that what follows is its proof? (A stage
    that starts with ERR: has the command's stderr a line with what follows?)"""
    try:
        if stage.startswith(ERR):
            return any(stage[len(ERR):] in line for line in Path(err_path).read_text().splitlines())
        return any(line.startswith(stage) for line in Path(stage_path).read_text().splitlines())
    except OSError:
        return False


class _Case:
    """One command running in a forked process."""

    def __init__(self, profile: str, nodes: int, per: int, method: str, kind: str, target: str = "exe",
                 files: dict | None = None):
        self.profile, self.nodes, self.per, self.method, self.kind = profile, nodes, per, method, kind
        self.stage = CHOSEN if target == "mscclpp" else VERIFYING
        self.tmp = tempfile.TemporaryDirectory()
        name = "x.json" if target == "mscclpp" else "x.xml"
        self.out, self.err, self.stages = (os.path.join(self.tmp.name, f) for f in (name, "err", "stages"))
        if method in COMMANDS:      # another command on the same machine (--commands): method names it
            args, self.stage = COMMANDS[method](profile, nodes, kind, self.tmp.name, files or {})
            self.out = None
        else:
            args = ["synth", *_machine(profile, nodes), "--method", method, "--collective", kind, "--no-simulate",
                    "-o", self.out, "--target", target, *_root(kind)]
            args += ["--quiet"] if method == "milp" else []
        self.proc = multiprocessing.get_context("fork").Process(target=_child, args=(args, self.err, self.stages))
        self.t0 = time.perf_counter()
        self.proc.start()

    def poll(self, long: float, wait_files: bool) -> dict | None:
        """The result once the case is over, else None."""
        seconds = time.perf_counter() - self.t0
        if self.proc.is_alive():
            if not wait_files and self.stage is not None and _lowered(self.stages, self.stage, self.err):
                return self._stop({"outcome": "lowered" if self.out else "working", "seconds": round(seconds, 2),
                                   "message": ""})
            if seconds < long:
                return None
            return self._stop({"outcome": f"no answer in {long:.0f} s", "seconds": round(seconds, 1), "message": ""})
        self.proc.join()
        text = Path(self.err).read_text(errors="replace").splitlines()
        lines = [ln[len("colls: error: "):] for ln in text if ln.startswith("colls: error: ")]
        outcome = {0: "file" if self.out else "answer", 2: "refused"}.get(self.proc.exitcode,
                                                                          f"exit {self.proc.exitcode}")
        if outcome == "file" and not os.path.exists(self.out):
            outcome = "exit 0 without a file"
        if self.proc.exitcode not in (0, 2):        # whatever it said last (an internal error, a signal)
            lines = lines or text[-1:]
        return self._stop({"outcome": outcome, "seconds": round(seconds, 2), "message": lines[-1] if lines else ""})

    def _stop(self, result: dict) -> dict:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)     # the case and whatever it started, if any is left
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.join()
        self.tmp.cleanup()
        return result


def _files(profiles: list[str], folder: str) -> dict:
    """A 1-node ring allgather file of each profile, for the verify cases."""
    from colls import pipeline
    from colls.collectives import Collective
    from colls.inputs import hardware
    out = {}
    for profile in profiles:
        topo = hardware.load_topology(profile, nodes=1)
        out[profile] = os.path.join(folder, f"{profile}.xml")
        Path(out[profile]).write_text(pipeline.compile_schedule(topo, Collective("allgather", topo.ngpus), "ring",
                                                                prove=False).text)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", default=",".join(PROFILES))
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--kinds", default=None, help=f"default: {','.join(KINDS)}")
    ap.add_argument("--nodes", default=None, help="comma list (default: per profile, see the module docstring)")
    ap.add_argument("--long", type=float, default=FILE_SECONDS,
                    help="seconds after which a case is given up (it is then listed among the slow ones either way)")
    ap.add_argument("--wait-files", action="store_true",
                    help="wait for every file to be proved and written (default: a case is over once its program "
                         "is lowered within the target's limits, the proof being timed by bench/scale.py)")
    ap.add_argument("--jobs", type=int, default=2, help="cases at once (each is one process)")
    ap.add_argument("--target", default="exe", help="the target every case is made for")
    ap.add_argument("--commands", default=None,
                    help=f"instead of synth, these commands on the same machines (of {', '.join(COMMANDS)}; "
                         "--kinds defaults to allreduce)")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--rerun", action="store_true",
                    help="put the rows of the cases run into the table --out holds (the same machine, method and "
                         "collective replaced, the others kept) instead of writing a table of these alone; its "
                         "header then says which cases were run again, when")
    args = ap.parse_args()
    import colls.cli  # noqa: F401  (imported once: every case is forked from here)
    from colls.inputs import hardware
    from colls.inputs.hardware import MAX_MODEL_GPUS
    from run import machine
    m = machine()
    late, slow = [], []
    counts: dict = {}
    t_all = time.perf_counter()
    todo = []
    commands = args.commands.split(",") if args.commands else None
    kinds = args.kinds if args.kinds is not None else ("allreduce" if commands else ",".join(KINDS))
    folder = tempfile.TemporaryDirectory()      # the verify cases' files, removed when the sweep ends
    files = _files(args.profiles.split(","), folder.name) if commands else {}
    for profile in args.profiles.split(","):
        per = hardware.load_topology(profile, nodes=1).ngpus
        nodes_list = [int(x) for x in args.nodes.split(",")] if args.nodes else node_counts(per)
        if commands and not args.nodes:
            nodes_list = sorted(set(nodes_list) | {MAX_MODEL_GPUS // per, MAX_MODEL_GPUS // per + 1})
        todo += [(profile, nodes, per, method, kind, args.target, files) for nodes in nodes_list
                 for method in commands or args.methods.split(",") for kind in kinds.split(",")]
    done: dict = {}
    running: list = []
    total = len(todo)
    while todo or running:
        while todo and len(running) < args.jobs:
            running.append((total - len(todo), _Case(*todo.pop(0))))
        time.sleep(0.05)
        for item in list(running):
            order, case = item
            r = case.poll(args.long, args.wait_files)
            if r is None:
                continue
            running.remove(item)
            row = (f"| {case.profile} x{case.nodes} | {case.per * case.nodes} | {case.method} | {case.kind} | "
                   f"{r['seconds']} | {r['outcome']} | {r['message'].replace('|', '/')} |")
            done[order] = row
            print(row, flush=True)
    rows = [done[k] for k in sorted(done)]
    minutes = (time.perf_counter() - t_all) / 60
    run_line = (f"{m['date']}; reference loop (bench/run.py) {m['reference_loop_s']} s; {len(rows)} cases in "
                f"{minutes:.0f} minutes")
    if args.rerun:
        rows, run_line = _merged(Path(args.out), rows, m)
    for row in rows:
        outcome, seconds = _cell(row, 6), float(_cell(row, 5))
        counts[outcome] = counts.get(outcome, 0) + 1
        if outcome in ("refused", "answer", "working") and seconds > REFUSE_SECONDS:
            late.append(row)
        elif outcome not in ("refused", "answer", "working") and (
                outcome not in ("file", "lowered") or seconds > FILE_SECONDS):
            slow.append(row)
    refused = [float(_cell(r, 5)) for r in rows if _cell(r, 6) == "refused"]
    header = (f"| machine | GPUs | {'command' if commands else 'method'} | collective | seconds | outcome | message |"
              "\n|---|---|---|---|---|---|---|")
    what = (f"`colls {' / '.join(commands)}` on each machine (compile until it starts synthesizing: outcome "
            "'working'; an exit 0 is 'answer')" if commands else "`colls synth ... --no-simulate`")
    lines = [
        "# Answers at any size" + (": every command" if commands else ""), "",
        f"`make bench` (bench/refusals.py): {what} per case, forked from a process that has "
        f"imported colls (Python's start, about 0.6 s, not counted), {args.jobs} at once, target {args.target}, on {m['cpu']} ({m['cores']} "
        f"cores), Python {m['python']}; " + ", ".join(f"{k} {v}" for k, v in sorted(m["versions"].items()) if v)
        + f"; {run_line}.", "",
        "Outcomes: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) + ". "
        + (f"Slowest refusal: {max(refused):.2f} s." if refused else ""), "",
        (f"## Over {REFUSE_SECONDS:.0f} s to refuse, answer or start working: {len(late)}" if commands else
         f"## Refused after more than {REFUSE_SECONDS:.0f} s: {len(late)}"), ""] + ([header] + late if late else []) + [
        "", f"## No answer, or a file after more than {FILE_SECONDS:.0f} s: {len(slow)}", ""] + (
        [header] + slow if slow else []) + ["", "## Every case", "", header] + rows
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


def _cell(row: str, k: int) -> str:
    """Column ``k`` (from 1) of a table row."""
    return row.split("|")[k].strip()


def _merged(path: Path, rows: list[str], m: dict) -> tuple[list[str], str]:
    """The rows of the table at ``path`` with those of the same machine, method and collective as ``rows``
    replaced by them (new ones added at the end), and its header's account of when it ran, with these cases
    run again added."""
    text = path.read_text()
    old = [r for r in text.split("## Every case", 1)[1].splitlines() if r.startswith("| ") and not r.startswith("| machine")]

    def key(r):
        return _cell(r, 1), _cell(r, 3), _cell(r, 4)

    new = {key(r): r for r in rows}
    merged = [new.pop(key(r), r) for r in old] + list(new.values())
    first = next(ln for ln in text.splitlines() if "reference loop" in ln)
    ran = re.search(r"(\d{4}-\d\d-\d\d [\d:]+ UTC; reference loop .*)\.$", first).group(1)
    return merged, (f"{ran}; {len(rows)} of them run again on {m['date']} (reference loop "
                    f"{m['reference_loop_s']} s) after a change")


if __name__ == "__main__":
    main()
