"""Prove or refute an MSCCL program: it loads, it cannot hang, it has no data race, it computes the collective.

``verify(program, target)`` runs small passes in order, one per family of rules, each a function of the
shared :class:`~colls.verify.context.Context` (the program, the target, the findings so far):

=================  =========================================================================
pass               rules (see :data:`RULES`, which also gives each rule's effect at run time)
=================  =========================================================================
(format)           the loader's text rules, found while reading (:func:`colls.msccl.parse`)
``algo``           ``<algo>`` attributes, collective, protocol, size range, call types, shape
``structure``      ``<gpu>``/``<tb>``/``<step>`` as the loader reads them; offsets; dependencies
``limits``         what the target holds: channels, thread blocks, steps, XML elements
``communication``  one thread block per connection; FIFO matching of the messages on it
``execution``      deadlock, at every call size the file serves
``semantics``      races, and a symbolic execution against the postcondition, per aliasing
=================  =========================================================================

Each finding carries its rule, where it is (gpu / tb / step, source line), and, for an error, what the
runtime will do (:mod:`colls.verify.rules`: refuse to load the file, never use it, misread it, undefined
behaviour, hang, a wrong result) and for which calls. Warnings never make a file invalid. The report's
verdict is ``valid`` only when the result was proven for every call type the file claims.

The facts that decide each rule come from the runtimes' sources, cited in each pass: Azure/msccl-executor-nccl
``src/misc/msccl/msccl_parser.cc`` (the loader), ``msccl_setup.cc`` and ``msccl_lifecycle.cc`` (selection and
message sizes), ``src/device/msccl_kernel.cu`` (the interpreter), and ROCm/rccl's copies of them.
"""

from __future__ import annotations

from dataclasses import replace

from colls.collectives import KINDS
from colls.msccl import Finding, parse, paused_gc
from colls.program import Program
from colls.runtimes import Target, get_target
from colls.verify import algo, communication, execution, limits, semantics, structure, symmetry
from colls.verify.context import ERROR, WARNING, Context
from colls.verify.execution import FIFO_MESSAGES, NCCL_STEPS, fifo_messages
from colls.verify.report import Report
from colls.verify.rules import PROOF_CHUNKS, RULES, effect_of

__all__ = ["verify", "verify_text", "Report", "RULES", "FIFO_MESSAGES", "NCCL_STEPS", "fifo_messages"]

# errors that leave the program without the structure the simulation needs
_SIM_BLOCKERS = frozenset({
    "gpu-attr-missing", "tb-attr-missing", "step-attr-missing", "gpu-id", "tb-id", "tb-peer", "tb-chan",
    "step-type", "step-cnt", "step-no-send-peer", "step-no-recv-peer", "dep-target", "conn-duplicate",
    "conn-mismatch", "conn-unmatched", "ngpus-mismatch", "hasdep-value", "chunks-per-loop",
})
# ... and the ones that leave the symbolic execution without meaning
_SEM_BLOCKERS = _SIM_BLOCKERS | {"step-buffer", "step-offset", "step-bounds"}


def verify(program: Program, target: Target | str, *, sms: int | None = None, buffsize: int | None = None,
           findings: list[Finding] | tuple = (), source: str = "<program>", prove: bool = True,
           ranks: int | None = None) -> Report:
    """Check ``program`` against every rule and limit of ``target`` and prove (or refute) it correct.

    Parameters
    ----------
    program: the Program (from :func:`colls.msccl.parse` or built in code; ``None`` fields are reported).
    target: a :class:`~colls.runtimes.Target` or its name (``"exe"``, ``"rccl"``, ``"old"``).
    sms: the GPU's SM count; when given, more thread blocks per gpu than SMs is an error.
    buffsize: the connection buffer in bytes of the file's protocol, where a site sets it (NCCL_BUFFSIZE for
        Simple, NCCL_LL_BUFFSIZE, NCCL_LL128_BUFFSIZE); it moves the call sizes at which a hang starts.
    findings: findings already made (the parser's format findings); they lead the report.
    prove: False stops after the structure, the limits, the communication and deadlock freedom (for programs
        that are only simulated, never written: ``facts["semantics_checked"]`` stays false).
    ranks: the GPUs of the machine the file is meant for; when given, a file of another ngpus is warned about
        (its communicator never uses it).

    Returns
    -------
    Report: errors first, then warnings, each group in a deterministic order.
    """
    if isinstance(target, str):
        target = get_target(target)
    cx = Context(program, target, sms, buffsize, ranks)
    with paused_gc():
        _run(cx, prove)
    everything = [_with_effect(f) for f in findings] + cx.findings
    everything.sort(key=lambda f: f.severity != ERROR)   # stable: keeps discovery order inside a group
    return Report(source, target.name, everything, cx.facts, cx.unproven)


def verify_text(text: str, source: str, target: Target | str, *, sms: int | None = None,
                buffsize: int | None = None, ranks: int | None = None) -> Report:
    """Parse MSCCL XML text (any generator's) and verify it. Raises CollsError when it is not MSCCL XML."""
    program, found = parse(text, source)
    return verify(program, target, sms=sms, buffsize=buffsize, findings=found, source=source, ranks=ranks)


def _with_effect(f: Finding) -> Finding:
    """A parser finding with its rule's effect (the parser does not know the rule table)."""
    if f.severity == ERROR and f.effect is None:
        return replace(f, effect=effect_of(f.rule))
    return f


def _run(cx: Context, prove: bool = True) -> None:
    p = cx.p
    algo.check(cx)
    structure.check(cx)
    limits.check(cx)
    communication.check(cx)
    cx.facts.update({
        "target": cx.t.name, "coll": p.coll, "kind": cx.kind, "ngpus": p.ngpus,
        "nchannels": p.nchannels, "nchunksperloop": p.nchunksperloop, "proto": p.proto,
        "chunk_factor": cx.coll.chunks if cx.coll else None,
        "max_steps_per_tb": p.max_steps(), "max_tbs_per_gpu": p.max_tbs(),
        "max_elements_per_rank": max((1 + len(p.gpus) + len(g.tbs) + sum(len(b.steps) for b in g.tbs)
                                      for g in p.gpus), default=1 + len(p.gpus)),
        "fifo_messages": fifo_messages(p.proto),
        "checked": [], "deadlock_free": None, "semantics_checked": False,
    })
    blockers = cx.has(_SIM_BLOCKERS)
    if blockers:
        _skip(cx, "deadlock, race and correctness checks were not run: they need the structure these errors "
              f"break ({', '.join(blockers)})")
        return
    sym = symmetry.find(cx) if not cx.has(_SEM_BLOCKERS) else None
    if sym is not None:
        found, facts, unproven = len(cx.findings), dict(cx.facts), list(cx.unproven)
        if _execute(cx, prove, sym) and len(cx.findings) == found:
            cx.facts["symmetry"] = {"ranks": sym.nranks, "ranks_run": sym.shift}
            return
        # the quotient found something: the whole program again, so that the report names every rank
        del cx.findings[found:]
        cx.facts, cx.unproven[:] = facts, unproven
    _execute(cx, prove, None)


def _execute(cx: Context, prove: bool, sym) -> bool:
    """The execution and semantics passes (on ranks 0..shift-1 with a symmetry); false when one is skipped."""
    p = cx.p
    if not execution.check(cx, sym):
        _skip(cx, "race and correctness checks were not run: the program deadlocks")
        return False
    if not prove:
        return True
    if cx.kind not in KINDS:
        cx.add("correctness-unchecked", f"coll={p.coll!r}: the model covers {', '.join(KINDS)}; only the "
               "structure, the communication and deadlock freedom were checked, not races or the result")
        return False
    blockers = cx.has(_SEM_BLOCKERS)
    if blockers or cx.coll is None:
        why = ", ".join(blockers) if blockers else "the collective's shape is unknown"
        _skip(cx, f"race and correctness checks were not run ({why})")
        return False
    if not cx.modes:
        _skip(cx, "race and correctness checks were not run: the file claims neither in-place nor out-of-place")
        return False
    coll = cx.coll
    states = sum(coll.out_chunks + coll.in_chunks + max(g.s_chunks or 0, 0)
                 for g in p.gpus if sym is None or (g.id is not None and g.id < sym.shift))
    if states > PROOF_CHUNKS:
        _skip(cx, f"race and correctness checks were not run: its buffers hold {states:,} chunks on the ranks "
              f"the proof runs, over the {PROOF_CHUNKS:,} it follows")
        return False
    for inplace in cx.modes:
        semantics.check(cx, inplace)
    cx.facts["checked"] = ["in-place" if m else "out-of-place" for m in cx.modes]
    cx.facts["semantics_checked"] = True
    return True


def _skip(cx: Context, why: str) -> None:
    cx.add("semantics-skipped", why, severity=WARNING)
    cx.unproven.append(why.split(":")[0].split(" (")[0])
