"""Which MSCCL file the runtime picks for one call, and, for every file it does not pick, the first reason.

The runtimes fall back to their own algorithms without a word when no file fits a call. :func:`explain`
replays what they do, in their order of checks, for one call (collective, ranks, bytes, datatype,
in-place or not) against a folder or a list of files:

1. **Loading** (at communicator setup). The MSCCL executor for NCCL (``exe``) reads every regular file
   and symbolic link of ``MSCCL_ALGO_DIR`` in sorted path order (``mscclInternalSchedulerInit`` in
   ``src/misc/msccl/msccl_lifecycle.cc`` keeps the names in a ``std::set<std::string>``); subfolders and
   other entries are not read. The first file that fails to load stops the folder (``NCCLCHECK`` returns):
   the files before it are loaded, the ones after it never are. RCCL (``rccl``) does the same in the
   order ``readdir`` returns, which is not defined, so two matching files make the choice ambiguous and a
   failing file makes the outcome depend on the order. microsoft/msccl (``old``) reads the files
   ``MSCCL_XML_FILES`` names, in that order; a file that fails is ignored with a WARN (``"algorithm ...
   failed to initialize. Will be ignored."`` in ``src/graph/xml.cc``), as is one whose ``ngpus`` is not
   the communicator's, and it keeps at most ``MSCCL_MAX_NUM_ALGOS`` = 4.
   Whether a file loads is decided by :func:`colls.verify.verify`: a file fails to load when it cannot be
   read, is not MSCCL XML, or has an error whose effect is ``will not load`` (a format rule, a missing
   attribute, an unknown ``coll``, a limit). Every other error loads, and makes the file run wrongly.
2. **Selection** (per call: ``mscclInternalSchedulerSelectAlgo``; ``old``: the loop over
   ``mscclAlgos`` in ``src/enqueue.cc``). A loaded file is used when, checked in this order: its
   ``ngpus`` is the communicator's size; its ``coll`` is the call's collective; the element count (times
   ``ngpus`` for allgather, reducescatter and alltoall, whose count is per rank) is a positive multiple of
   ``nchunksperloop``; the byte count is within ``[minBytes, maxBytes]`` (``maxBytes=0``: no limit; ``old``
   selects ``[minBytes, maxBytes)`` with ``maxBytes`` 128 MiB when absent); the file claims the call's
   aliasing (``inplace``/``outofplace``; ``old`` reads ``inplace`` only); and its channels fit the
   communicator's (RCCL drops such a file at load with a WARN). The first loaded file that passes runs.

Sizes are nccl-tests' ``size``: the whole buffer one rank passes (the runtime's ``nBytes``), as
``colls simulate`` uses them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from colls import files as fileio
from colls import mscclpp
from colls.errors import CollsError, excerpt, printable
from colls.msccl import parse
from colls.program import Program
from colls.simulate import SIZE_MULTIPLIED, parse_sizes, size_text
from colls.runtimes import Target, get_target
from colls.verify import Report, verify
from colls.verify.rules import EFFECTS, LOAD

__all__ = ["DTYPES", "Call", "FileResult", "Explanation", "explain"]

DTYPES = {"int8": 1, "uint8": 1, "half": 2, "float16": 2, "bfloat16": 2, "int32": 4, "uint32": 4, "float": 4,
          "float32": 4, "int64": 8, "uint64": 8, "double": 8, "float64": 8}
MAX_RANKS = 1_000_000
MAX_CHANNELS = 64                 # NCCL_MAX_NCHANNELS cannot exceed MAXCHANNELS (32 in NCCL, 64 in RCCL)
_U64 = 1 << 64

# What happened to each file, for one call.
RUNS, MATCHES, SHADOWED, SKIPPED, FAILS, NOT_LOADED = (
    "runs", "matches", "shadowed", "skipped", "fails-to-load", "not-loaded")


@dataclass(frozen=True)
class Call:
    """One collective call on one communicator."""

    kind: str
    ranks: int
    size: int                # bytes: the whole buffer a rank passes (nccl-tests' size)
    dtype: str
    inplace: bool
    channels: int            # the communicator's channel count
    channels_given: bool
    target: Target

    @property
    def dtype_bytes(self) -> int:
        return DTYPES[self.dtype]

    @property
    def elements(self) -> int:
        """The count the selection divides by nchunksperloop: count x sizeMultiplier = bytes / dtype."""
        return self.size // self.dtype_bytes

    @property
    def per_rank(self) -> bool:
        return self.kind in SIZE_MULTIPLIED

    @property
    def mode(self) -> str:
        return "in-place" if self.inplace else "out-of-place"

    def describe(self) -> str:
        return f"{size_text(self.size)} {self.kind} on {self.ranks} ranks ({self.dtype}, {self.mode})"

    def to_dict(self) -> dict:
        return {"collective": self.kind, "ranks": self.ranks, "bytes": self.size, "dtype": self.dtype,
                "dtype_bytes": self.dtype_bytes, "elements": self.elements,
                "count": self.elements // self.ranks if self.per_rank else self.elements,
                "inplace": self.inplace, "channels": self.channels, "channels_given": self.channels_given,
                "target": self.target.name}


@dataclass
class FileResult:
    """One file: whether it loads, whether it fits the call, and what the runtime does with it."""

    path: str
    position: int
    program: Program | None = None
    report: Report | None = None
    load_check: str | None = None      # "read", "parse" or "load" when the file does not load
    load_reason: str | None = None
    match_check: str | None = None     # the first selection check that fails: "ngpus", "coll", "count", ...
    match_reason: str | None = None
    status: str = ""
    reason: str = ""
    shadowed_by: str | None = None
    blocked_by: str | None = None      # the failing file that keeps this one from loading
    danger: str | None = None          # loads, but runs wrongly for this call
    notes: list[str] = field(default_factory=list)

    @property
    def loads(self) -> bool:
        return self.load_check is None

    @property
    def matches(self) -> bool:
        return self.loads and self.match_check is None

    def channels(self) -> int | None:
        return _channels(self.program) if self.program is not None else None

    def line(self) -> str:
        text = {RUNS: "runs", MATCHES: "matches", SHADOWED: "also matches", SKIPPED: "skipped",
                FAILS: "fails to load", NOT_LOADED: "not loaded"}[self.status]
        if self.reason:
            text += f"{', ' if self.status == SHADOWED else ': '}{self.reason}"
        if self.danger and self.status in (RUNS, MATCHES):
            text += f"; DANGER: {self.danger}"
        if self.notes and self.status in (RUNS, MATCHES):
            text += "; " + "; ".join(self.notes)
        return f"  {printable(self.path, 200)}: {text}"

    def to_dict(self) -> dict:
        p = self.program
        out = {"path": self.path, "position": self.position, "status": self.status, "reason": self.reason,
               "loads": self.loads, "load_check": self.load_check, "load_reason": self.load_reason,
               "matches": self.matches if self.loads else None, "match_check": self.match_check,
               "match_reason": self.match_reason, "shadowed_by": self.shadowed_by, "blocked_by": self.blocked_by,
               "danger": self.danger, "notes": list(self.notes)}
        if p is not None:
            out["file"] = {"name": p.name, "coll": p.coll, "ngpus": p.ngpus, "nchunksperloop": p.nchunksperloop,
                           "min_bytes": p.min_bytes, "max_bytes": p.max_bytes, "inplace": p.inplace,
                           "outofplace": p.outofplace, "nchannels": p.nchannels, "channels": self.channels()}
        if self.report is not None:
            r = self.report
            out["verify"] = {"verdict": r.verdict, "consequence": r.consequence(),
                             "errors": sorted(r.rules()), "unproven": list(r.unproven)}
        return out


@dataclass
class Explanation:
    """The verdict for one call and one line per file; :meth:`format` and :meth:`to_dict` say the same."""

    call: Call
    source: dict
    order: str                         # "sorted", "given" or "readdir"
    files: list[FileResult]
    ignored: list[tuple[str, str]]     # folder entries the runtime does not read, and why
    verdict: str                       # "runs", "none", "ambiguous" or "order-dependent"
    runs: str | None
    candidates: list[str]
    headline: str
    warnings: list[str]

    def format(self) -> str:
        lines = [self.headline] + [f.line() for f in self.files]
        lines += [f"  {printable(path, 200)}: ignored: {why}" for path, why in self.ignored]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"call": self.call.to_dict(), "source": dict(self.source), "order": self.order,
                "verdict": self.verdict, "runs": self.runs, "candidates": list(self.candidates),
                "summary": self.headline, "files": [f.to_dict() for f in self.files],
                "ignored": [{"path": p, "reason": why} for p, why in self.ignored],
                "warnings": list(self.warnings)}


# --------------------------------------------------------------------------------------------------
# the call
# --------------------------------------------------------------------------------------------------

def _parse_call_options(size, dtype: str, ranks: int, channels, target: str):
    tgt = get_target(target)
    if dtype not in DTYPES:
        raise CollsError(f"expected one of {', '.join(DTYPES)}, got {excerpt(str(dtype))}", key="--dtype")
    if isinstance(ranks, bool) or not isinstance(ranks, int) or not 1 <= ranks <= MAX_RANKS:
        raise CollsError(f"must be between 1 and {MAX_RANKS}, got {excerpt(str(ranks))}", key="--ranks")
    if channels is not None and not 1 <= channels <= MAX_CHANNELS:
        raise CollsError(f"must be between 1 and {MAX_CHANNELS}, got {channels}", key="--channels")
    if isinstance(size, str):
        sizes = parse_sizes(size, "--bytes")
        if len(sizes) != 1:
            raise CollsError(f"{excerpt(size)}: give one size", key="--bytes")
        size = sizes[0]
    if size % DTYPES[dtype]:
        raise CollsError(f"{size} bytes is not a whole number of {dtype} elements ({DTYPES[dtype]} bytes each)",
                         key="--bytes")
    return size, tgt


def _a(word: str) -> str:
    return f"{'an' if word[:1] in 'aeiou' else 'a'} {word}"


def _check_per_rank(call: Call) -> None:
    if call.per_rank and call.size % (call.dtype_bytes * call.ranks):
        raise CollsError(f"{call.size} bytes is not {call.ranks} equal parts of {call.dtype} elements: "
                         f"{_a(call.kind)} buffer holds one count per rank ({call.ranks} x count x {call.dtype_bytes} "
                         "bytes)", key="--bytes")


# --------------------------------------------------------------------------------------------------
# the files, in the order the runtime reads them
# --------------------------------------------------------------------------------------------------

def _entries(paths: list[str], tgt: Target):
    """[(path, text or None, read error or None)], the source, the order, and the ignored folder entries."""
    if not paths:
        raise CollsError("give a folder, or one or more files", key="DIR|FILE")
    folders = [p for p in paths if os.path.isdir(p)]
    if folders:
        if len(paths) > 1:
            raise CollsError(f"{excerpt(folders[0], 80)} is a folder: give one folder (MSCCL_ALGO_DIR), or files",
                             key="DIR|FILE")
        if tgt.name == "old":
            raise CollsError("--target old reads the files MSCCL_XML_FILES names, not a folder: give the files, "
                             "in their MSCCL_XML_FILES order", source=paths[0])
        return _folder(_algorithms_of(paths[0]), tgt)
    out = []
    for path in paths:
        if not os.path.lexists(path):
            raise CollsError("no such file or folder", source=path)
        text = fileio.read_text(path, fileio.MAX_XML_BYTES, option="FILE")
        if mscclpp.is_plan_text(text):
            raise CollsError("an MSCCL++ plan: explain reads plans from the folder `colls compile --target mscclpp` "
                             "wrote (give that folder); `colls simulate FILE.json` shows the sizes one plan serves",
                             source=path)
        out.append((path, text, None))
    return out, {"files": list(paths)}, "readdir" if tgt.name == "rccl" else "given", []


def _algorithms_of(folder: str) -> str:
    """A folder ``colls compile`` wrote holds the runtime's folder in ``algorithms/`` (with README.md and env.sh
    beside it, which the runtime must not see): explain that one."""
    from colls.compile import ALGORITHMS, written_here
    inner = os.path.join(folder, ALGORITHMS)
    return inner if written_here(folder) and os.path.isdir(inner) else folder


def _folder(folder: str, tgt: Target):
    names, ignored = [], []
    try:
        with os.scandir(folder) as it:
            for entry in it:
                # readdir's d_type: the runtimes read DT_REG and DT_LNK entries and skip everything else
                if entry.is_symlink() or entry.is_file(follow_symlinks=False):
                    names.append(entry.name)
                else:
                    kind = "a folder" if entry.is_dir(follow_symlinks=False) else "not a regular file"
                    ignored.append((os.path.join(folder, entry.name),
                                    f"{kind}: the runtime reads only regular files and symbolic links in the folder"))
    except OSError as e:
        raise CollsError(f"cannot list the folder ({(e.strerror or type(e).__name__).lower()})",
                         source=folder) from None
    names.sort(key=os.fsencode)              # std::set<std::string> of the full paths: byte order
    ignored.sort(key=lambda item: os.fsencode(item[0]))
    out = []
    for name in names:
        path = os.path.join(folder, name)
        try:
            out.append((path, fileio.read_text(path, fileio.MAX_XML_BYTES), None))
        except CollsError as e:
            out.append((path, None, _without_source(str(e), path)))
    return out, {"folder": folder}, "readdir" if tgt.name == "rccl" else "sorted", sorted(ignored)


def _without_source(message: str, path: str) -> str:
    prefix = printable(str(path), 200) + ": "
    return message[len(prefix):] if message.startswith(prefix) else message


def _load(position: int, path: str, text: str | None, error: str | None, tgt: Target) -> FileResult:
    r = FileResult(path, position)
    if error is not None:
        r.load_check, r.load_reason = "read", f"cannot be read: {error}"
        return r
    try:
        program, found = parse(text, path)
    except CollsError as e:
        r.load_check, r.load_reason = "parse", f"not an MSCCL file the loader reads: {_without_source(str(e), path)}"
        return r
    r.program = program
    r.report = verify(program, tgt, findings=found, source=path)
    refused = [f for f in r.report.errors if f.effect == LOAD]
    if refused:
        f = refused[0]
        more = f" (and {len(refused) - 1} more reasons)" if len(refused) > 1 else ""
        r.load_check, r.load_reason = "load", f"{f.message} [{f.rule}]{more}"
    return r


def _kind_of(program: Program, tgt: Target) -> str | None:
    if program.coll is None:
        return None
    kind = tgt.kind_of(program.coll)
    if kind is None and program.coll in ("reduce_scatter", "reducescatter"):
        return "reducescatter"               # a spelling the target refuses: it does not load anyway
    return kind or program.coll


def _infer_kind(results: list[FileResult], tgt: Target) -> str:
    kinds = sorted({k for r in results if r.program is not None for k in [_kind_of(r.program, tgt)] if k})
    if len(kinds) == 1:
        return kinds[0]
    if not kinds:
        raise CollsError("no file names a collective the runtime reads: say which collective the call is",
                         key="--collective")
    raise CollsError(f"the files are for {', '.join(kinds)}: say which collective the call is", key="--collective")


# --------------------------------------------------------------------------------------------------
# the selection, per file
# --------------------------------------------------------------------------------------------------

def _channels(p: Program) -> int:
    """The channels a file asks for: its nchannels (what the loader's summary reads), or more when a
    threadblock uses a higher channel."""
    used = max((tb.chan + 1 for g in p.gpus for tb in g.tbs if isinstance(tb.chan, int)), default=0)
    return max(p.nchannels or 0, used)


def _bytes(n: int) -> str:
    text = size_text(n)
    return f"{n} bytes" if text == f"{n}B" else f"{text} ({n} bytes)"


def _size_range(p: Program, call: Call) -> str | None:
    """Why the call's byte count is outside what the file is used for, or None."""
    size = call.size
    if call.target.name == "old":
        lo = p.min_bytes if p.min_bytes is not None else 0
        hi = p.max_bytes if p.max_bytes is not None else call.target.default_max_bytes
        absent = " (maxBytes absent: OLD's default, 128 MiB)" if p.max_bytes is None else ""
        if hi == 0:
            return ("maxBytes=0: OLD selects sizes in [minBytes, maxBytes), so no call selects this file (0 means "
                    "no limit for the executor and RCCL only)")
        if size < lo:
            return f"{_bytes(size)} is below minBytes={lo}"
        if size >= hi:
            return f"{_bytes(size)} is not below maxBytes={hi}{absent}: OLD selects sizes in [minBytes, maxBytes)"
        return None
    lo, hi = p.min_bytes or 0, p.max_bytes or 0
    if size < lo % _U64:                     # the runtime compares them with the unsigned nBytes
        signed = f" (read as {lo % _U64} against the call's unsigned byte count)" if lo < 0 else ""
        return f"{_bytes(size)} is below minBytes={lo}{signed}"
    if hi and size > hi % _U64:
        return f"{_bytes(size)} is above maxBytes={hi}"
    return None


def _select(p: Program, call: Call) -> tuple[str, str] | None:
    """The first selection check the file fails for ``call`` (check, reason), or None when it is used."""
    t = call.target
    if p.ngpus != call.ranks:
        why = " (OLD ignores the file at load with a WARN)" if t.name == "old" else ""
        return "ngpus", f"ngpus={p.ngpus}, the communicator has {call.ranks} ranks{why}"
    kind = _kind_of(p, t)
    if kind != call.kind:
        return "coll", f'coll="{p.coll}", the call is {_a(call.kind)}'
    ncpl = p.nchunksperloop
    if ncpl < 1:
        return "count", (f"nchunksperloop={ncpl}: the selection divides the element count by it (undefined "
                         "behaviour: a crash at the call, not a fallback)")
    if call.elements % ncpl:
        counted = (f"{call.elements} elements ({call.elements // call.ranks} per rank x {call.ranks} ranks)"
                   if call.per_rank else f"{call.elements} elements")
        return "count", f"{counted} is not a multiple of nchunksperloop {ncpl}"
    outside = _size_range(p, call)
    if outside:
        return "bytes", outside
    if t.name == "old":
        if bool(p.inplace) != call.inplace:
            return "inplace", (f'the call is {call.mode} and the file has inplace="{p.inplace}" (OLD runs an '
                               'inplace="1" file for in-place calls only, an inplace="0" one for out-of-place '
                               'calls only)')
    elif call.inplace and not p.inplace:
        return "inplace", f'the call is in-place and the file has inplace="{p.inplace}"'
    elif not call.inplace and not p.outofplace:
        return "inplace", f'the call is out-of-place and the file has outofplace="{p.outofplace}"'
    need = _channels(p)
    if need > call.channels:
        where = "--channels" if call.channels_given else "the default: give --channels N for yours"
        return "channels", (f"the file uses {need} channels, more than the communicator's {call.channels} "
                            f"({where}): the runtime drops it at load with a WARN")
    return None


def _passes(p: Program, call: Call) -> str:
    """What a selected file passed, in the order checked."""
    t = call.target
    if t.name == "old":
        hi = p.max_bytes if p.max_bytes is not None else call.target.default_max_bytes
        span = f"[{p.min_bytes or 0}, {hi})"
        mode = f'inplace="{p.inplace}"'
    else:
        span = f"[{p.min_bytes or 0}, {p.max_bytes or 'no limit'}]"
        mode = f'inplace="{p.inplace}"' if call.inplace else f'outofplace="{p.outofplace}"'
    return (f"ngpus={p.ngpus}, coll={p.coll}, {call.elements} elements / nchunksperloop {p.nchunksperloop}, "
            f"{call.size} bytes in {span}, {mode}, {_channels(p)} of {call.channels} channels")


def _concerns(f, report: Report, call: Call) -> bool:
    """Whether an error the verifier found concerns this call (its size and aliasing)."""
    if f.calls is None:
        return True
    if f.calls in ("in-place calls", "out-of-place calls"):
        return f.calls == f"{call.mode} calls"
    if f.rule == "deadlock":
        return any(lo <= call.size and (hi is None or call.size <= hi)
                   for lo, hi in report.facts.get("hangs_for_bytes", []))
    return True                              # a scope this module cannot read: assume it does


def _judge(r: FileResult, call: Call) -> None:
    """The danger and notes of a file that loads and matches the call."""
    report = r.report
    errors = [f for f in report.errors if f.effect != LOAD]
    concerning = [f for f in errors if _concerns(f, report, call)]
    if concerning:
        effects = [e for e in EFFECTS if any(f.effect == e for f in concerning)]
        rules = sorted({f.rule for f in concerning})
        r.danger = (f"it loads, but {' and '.join(effects)} for this call ({', '.join(rules)}; run colls verify "
                    f"{printable(r.path, 200)} --target {call.target.name})")
    elif errors:
        r.notes.append(f"its errors concern other calls ({report.consequence()})")
    if report.unproven:
        r.notes.append(f"what it computes was not proven ({'; '.join(report.unproven)})")
    if report.facts.get("root") is not None:
        r.notes.append(f"right only for calls with root {report.facts['root']}")


# --------------------------------------------------------------------------------------------------
# the runtime's order
# --------------------------------------------------------------------------------------------------

def _otherwise(r: FileResult) -> str:
    if not r.loads:
        return f"it fails to load itself: {r.load_reason}"
    if r.matches:
        return "it would otherwise run this call"
    return f"it would otherwise be skipped: {r.match_reason}"


def _first_wins(results: list[FileResult], call: Call, warnings: list[str]) -> FileResult | None:
    """exe (sorted folder or files as given) and old (MSCCL_XML_FILES): the first loaded match runs."""
    old = call.target.name == "old"
    winner = blocker = None
    loaded = 0
    for r in results:
        if blocker is not None:
            r.status, r.blocked_by = NOT_LOADED, blocker.path
            r.reason = f"{printable(blocker.path, 200)} before it fails to load ({_otherwise(r)})"
            continue
        if not r.loads:
            r.status, r.reason = FAILS, r.load_reason
            if old:
                r.reason += "; OLD ignores it and reads the next file"
            else:
                blocker = r
            continue
        if old and r.match_check == "ngpus":
            r.status, r.reason = SKIPPED, r.match_reason
            continue
        if old and loaded == call.target.max_files:
            r.status = NOT_LOADED
            r.reason = (f"OLD loads at most {call.target.max_files} algorithms from MSCCL_XML_FILES and ignores the rest "
                        f"({_otherwise(r)})")
            continue
        loaded += 1
        if r.match_check:
            r.status, r.reason = SKIPPED, r.match_reason
        elif winner is None:
            winner = r
            r.status, r.reason = RUNS, _passes(r.program, call)
        else:
            r.status, r.shadowed_by = SHADOWED, winner.path
            r.reason = f"shadowed by {printable(winner.path, 200)}, which comes first"
    after = [r for r in results if r.blocked_by is not None]
    if after:
        warnings.append(f"{blocker.path} fails to load, so the runtime loads none of the {len(after)} file"
                        f"{'s' if len(after) != 1 else ''} after it ({blocker.load_reason})")
        for r in after:
            if r.matches:
                warnings.append(f"{r.path} would run this call, but is never loaded: {blocker.path}, before it, "
                                "fails to load")
    shadowed = [r.path for r in results if r.status == SHADOWED]
    if shadowed:
        warnings.append(f"{', '.join(shadowed)} also match{'es' if len(shadowed) == 1 else ''} this call, shadowed by "
                        f"{winner.path}: check that the order is the one you meant")
    return winner


def _readdir_order(results: list[FileResult], call: Call, warnings: list[str]) -> list[FileResult]:
    """rccl: the order is readdir's; report the matching files and what a failing one can do."""
    failing = [r for r in results if not r.loads]
    candidates = [r for r in results if r.matches]
    names = ", ".join(printable(r.path, 200) for r in failing)
    for r in results:
        if not r.loads:
            r.status = FAILS
            r.reason = (f"{r.load_reason}; RCCL loads none of the files it reads after it, and the order it reads "
                        "the folder in is not defined")
        elif r.match_check:
            r.status, r.reason = SKIPPED, r.match_reason
        elif len(candidates) == 1 and not failing:
            r.status, r.reason = RUNS, _passes(r.program, call)
        else:
            r.status = MATCHES
            others = [printable(c.path, 200) for c in candidates if c is not r]
            parts = []
            if others:
                parts.append(f"as {'does' if len(others) == 1 else 'do'} {', '.join(others)}: which one runs depends "
                             "on the order RCCL reads the folder in")
            if failing:
                parts.append(f"runs only if RCCL reads it before {names}")
            r.reason = "; ".join(parts)
    if len(candidates) > 1:
        warnings.append(f"ambiguous: {', '.join(c.path for c in candidates)} all match this call, and RCCL reads the "
                        "folder unsorted (readdir order): which one runs is not defined; keep one per call")
    if failing:
        effect = ("whether this call runs a file depends on the order RCCL reads the folder in" if candidates
                  else "this call's outcome does not depend on it, but other calls' may")
        warnings.append(f"{', '.join(r.path for r in failing)} fail{'s' if len(failing) == 1 else ''} to load and "
                        f"stop{'s' if len(failing) == 1 else ''} RCCL from loading the files it reads after: {effect}")
    return candidates


def explain(paths, *, ranks: int, size, collective: str | None = None, dtype: str = "float",
            inplace: bool = False, target: str = "exe", channels: int | None = None) -> Explanation:
    """Which file the runtime ``target`` runs for one call, and the first reason for every other file.

    Parameters
    ----------
    paths : one folder (``MSCCL_ALGO_DIR``), or files (in the order given: ``MSCCL_XML_FILES`` for ``old``).
    ranks : the communicator's size.
    size : bytes (an int or text such as ``"1GB"``): the whole buffer a rank passes, nccl-tests' size.
    collective : the call's collective; by default the one every file names.
    dtype : the element type (:data:`DTYPES`).
    channels : the communicator's channel count; default the target's most (32).

    Raises CollsError for bad input: a missing or unreadable FILE, an empty folder, a bad size, dtype or rank
    count. A file that cannot be read inside a folder is not an error: it fails to load, as in the runtime.
    """
    size, tgt = _parse_call_options(size, dtype, ranks, channels, target)
    entries, source, order, ignored = _entries([os.fspath(p) for p in paths], tgt)
    results = [_load(i, path, text, error, tgt) for i, (path, text, error) in enumerate(entries)]
    if not results and collective is None:
        raise CollsError("holds no file the runtime would read (regular files and symbolic links): every call "
                         "runs the runtime's own algorithm; give --collective to explain a call anyway",
                         source=paths[0] if len(paths) == 1 else None, key=None if len(paths) == 1 else "DIR|FILE")
    kind = collective or _infer_kind(results, tgt)
    call = Call(kind, ranks, size, dtype, inplace, channels or tgt.max_channels, channels is not None, tgt)
    _check_per_rank(call)
    for r in results:
        if r.loads:
            found = _select(r.program, call)
            if found:
                r.match_check, r.match_reason = found
            else:
                _judge(r, call)
    warnings: list[str] = []
    desc, own = call.describe(), tgt.own_algorithm
    if tgt.name == "rccl":
        candidates = _readdir_order(results, call, warnings)
        failing = [printable(r.path, 200) for r in results if not r.loads]
        shown = " or ".join(printable(c.path, 200) for c in candidates)
        if not candidates:
            verdict, headline = "none", f"{desc}: no file matches, {own} runs"
        elif failing:
            verdict = "order-dependent"
            headline = (f"{desc}: depends on the folder's order: {shown} runs if RCCL reads it before "
                        f"{', '.join(failing)}, otherwise {own}")
        elif len(candidates) > 1:
            verdict, headline = "ambiguous", (f"{desc}: ambiguous: {shown} runs, whichever RCCL reads first (it "
                                              "reads the folder unsorted)")
        else:
            verdict, headline = "runs", f"{desc}: runs {shown}"
        runs = candidates[0].path if verdict == "runs" else None
        chosen = candidates
    else:
        winner = _first_wins(results, call, warnings)
        chosen = [winner] if winner else []
        runs = winner.path if winner else None
        if winner:
            verdict, headline = "runs", f"{desc}: runs {printable(winner.path, 200)}"
        else:
            verdict, headline = "none", f"{desc}: no file matches, {own} runs"
            lost = [r for r in results if r.status == NOT_LOADED and r.matches]
            if lost:
                why = (f"is not loaded: {printable(lost[0].blocked_by, 200)} before it fails to load"
                       if lost[0].blocked_by else f"is not loaded: {lost[0].reason}")
                headline += f" ({printable(lost[0].path, 200)} would match, but {why})"
    for c in chosen:
        if c.danger:
            headline += f"; DANGER: {printable(c.path, 200)} {c.danger}"
            warnings.append(f"{c.path}: {c.danger}")
    return Explanation(call, source, order, results, ignored, verdict, runs, [c.path for c in chosen],
                       headline, warnings)


# --------------------------------------------------------------------------------------------------
# a folder of MSCCL++ plans (colls compile --target mscclpp)
# --------------------------------------------------------------------------------------------------

def plans_folder(folder: str) -> bool:
    """Whether ``folder`` is one ``colls compile --target mscclpp`` wrote (its README, plans/ and
    register_plans.py)."""
    from colls.compile import PLANS, REGISTER, written_here
    return (os.path.isdir(folder) and written_here(folder) and os.path.isdir(os.path.join(folder, PLANS))
            and os.path.isfile(os.path.join(folder, REGISTER)))


@dataclass
class PlanExplanation:
    """Which plan of an MSCCL++ folder each loader runs for one call."""

    call: dict
    folder: str
    loaders: list                      # [{"loader", "rule", "runs", "candidates", "verdict", "why"}]
    plans: list                        # [{"path", "loads", "reason"}]
    headline: str
    warnings: list = field(default_factory=list)

    def format(self) -> str:
        lines = [self.headline]
        for entry in self.loaders:
            lines.append(f"  {entry['loader']} ({entry['rule']}): {entry['why']}")
        lines += [f"  {printable(p['path'], 200)}: {p['reason']}" for p in self.plans if p["reason"]]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"call": dict(self.call), "source": {"folder": self.folder}, "target": "mscclpp",
                "loaders": [dict(e) for e in self.loaders], "plans": [dict(p) for p in self.plans],
                "summary": self.headline, "warnings": list(self.warnings)}


def _plan_table(folder: str) -> list:
    """register_plans.py's PLANS table (a literal: read, never run)."""
    import ast
    from colls.compile import REGISTER
    path = os.path.join(folder, REGISTER)
    text = fileio.read_text(path, fileio.MAX_PROFILE_BYTES)
    try:
        tree = ast.parse(text)
        node = next(n.value for n in tree.body if isinstance(n, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "PLANS" for t in n.targets))
        rows = ast.literal_eval(node)
        return [tuple(r) for r in rows if len(r) == 7]
    except (SyntaxError, StopIteration, ValueError, TypeError):
        raise CollsError("has no PLANS table colls wrote", source=path, key="PLANS") from None


def explain_plans(folder: str, *, ranks: int, size, collective: str | None = None, dtype: str = "float",
                  inplace: bool = False) -> PlanExplanation:
    """Which plan of ``folder`` a call gets under each loader the folder is written for: MSCCL++ 0.8.x's NCCL
    API library (every plan of MSCCLPP_EXECUTION_PLAN_DIR; the first of the call's collective with min <=
    bytes < max and the call's in-place flag, in an order it does not define; no world-size check), and
    current MSCCL++ with register_plans.py (the first row of its table matching collective, world size,
    buffer mode and min <= bytes <= max). Sizes are nccl-tests' (the whole buffer one rank passes)."""
    from colls.compile import PLANS
    from colls.runtimes import mscclpp as rt
    size, _ = _parse_call_options(size, dtype, ranks, None, "exe")
    table = _plan_table(folder)
    plans_dir = os.path.join(folder, PLANS)
    plans, loaded = [], []
    for name in sorted(os.listdir(plans_dir), key=os.fsencode):
        path = os.path.join(plans_dir, name)
        try:
            plan = mscclpp.load(fileio.read_text(path, fileio.MAX_XML_BYTES), path)
        except CollsError as e:
            plans.append({"path": path, "loads": False, "reason": f"fails to load: {_without_source(str(e), path)}"})
            continue
        loaded.append((path, plan))
        plans.append({"path": path, "loads": True, "reason": ""})
    kinds = sorted({plan["collective"] for _, plan in loaded} | {row[1] for row in table})
    if collective is None:
        if len(kinds) != 1:
            raise CollsError(f"the plans compute {', '.join(kinds) or 'nothing'}: give --collective",
                             key="--collective")
        collective = kinds[0]
    mode = "in-place" if inplace else "out-of-place"
    per_rank = collective in SIZE_MULTIPLIED
    if per_rank and size % (DTYPES[dtype] * ranks):
        raise CollsError(f"{size} bytes is not {ranks} equal parts of {dtype} elements", key="--bytes")
    call = {"collective": collective, "ranks": ranks, "bytes": size, "dtype": dtype, "inplace": inplace,
            "target": "mscclpp"}
    desc = f"{size_text(size)} {collective} on {ranks} ranks ({dtype}, {mode})"
    warnings: list = []

    def refused_by_executor(plan) -> str | None:
        from colls.simulate.plans import executor_refuses
        why = executor_refuses(plan, size)
        return f"{why}, an error, not a fallback" if why else None

    # MSCCL++ 0.8.x: the NCCL API library's folder scan
    old = [(path, plan) for path, plan in loaded if plan["collective"] == collective
           and plan.get("min_message_size", 0) <= size < plan.get("max_message_size", 2**64 - 1)
           and bool(plan["inplace"]) == inplace]
    entry = {"loader": f"MSCCL++ {rt.SHIM_VERSIONS}", "rule": "min <= bytes < max, in-place flag, any world size",
             "candidates": [p for p, _ in old]}
    if not old:
        entry.update(verdict="none", runs=None, why="no plan matches: the real NCCL runs it "
                     "(MSCCLPP_ENABLE_NCCL_FALLBACK=TRUE, env.sh)")
    else:
        path, plan = old[0]
        entry.update(verdict="runs" if len(old) == 1 else "ambiguous", runs=path if len(old) == 1 else None)
        why = f"runs {printable(path, 200)}" if len(old) == 1 else \
            f"ambiguous: {', '.join(printable(p, 200) for p, _ in old)} all match, and it reads them in no set order"
        danger = [f"{printable(p, 200)} is for {len(pl['gpus'])} ranks, the communicator has {ranks}: this loader "
                  "does not check, and the plan runs wrongly" for p, pl in old if len(pl["gpus"]) != ranks]
        danger += [f"{printable(p, 200)}: {r}" for p, pl in old for r in [refused_by_executor(pl)] if r]
        if danger:
            why += "; DANGER: " + "; ".join(danger)
            warnings += danger
        entry["why"] = why
    loaders = [entry]
    # current MSCCL++: register_plans.py's selector
    bytes_ok = [row for row in table if row[1] == collective and row[4] <= size <= row[5]]
    rows = [row for row in bytes_ok if row[2] == ranks and row[6] == inplace]
    entry = {"loader": "current MSCCL++", "rule": "register_plans.py: collective, world size, ranks per node, "
             "buffer mode, min <= bytes <= max", "candidates": [os.path.join(folder, r[0]) for r in rows]}
    if rows:
        path = os.path.join(folder, rows[0][0])
        entry.update(verdict="runs", runs=path, why=f"runs {printable(path, 200)} (with {rows[0][3]} ranks per "
                     "node, as the plans were written for)")
        plan = next((pl for p, pl in loaded if os.path.normpath(p) == os.path.normpath(path)), None)
        problem = "its file fails to load" if plan is None else refused_by_executor(plan)
        if problem:
            entry["why"] += f"; DANGER: {problem}"
            warnings.append(f"{path}: {problem}")
    else:
        if bytes_ok and not any(row[2] == ranks for row in bytes_ok):
            reason = f"the plans for these bytes are for {bytes_ok[0][2]} ranks"
        elif bytes_ok:
            reason = f"the plans for these bytes serve {'out-of-place' if inplace else 'in-place'} calls only"
        else:
            reason = "no plan's byte range holds the call"
        entry.update(verdict="none", runs=None, why=f"no plan matches ({reason}): MSCCL++'s own choice runs it")
    loaders.append(entry)
    a, b = loaders[0].get("runs"), loaders[1].get("runs")
    if a == b:
        head = f"{desc}: runs {printable(a, 200)}" if a else f"{desc}: no plan matches, NCCL's own (or MSCCL++'s) runs"
    else:
        head = (f"{desc}: MSCCL++ {rt.SHIM_VERSIONS} runs {printable(a, 200) if a else 'the real NCCL'}, current "
                f"MSCCL++ runs {printable(b, 200) if b else 'its own choice'}")
    return PlanExplanation(call, folder, loaders, plans, head, warnings)
