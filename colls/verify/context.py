"""What the passes share: the program, the target, the findings so far, and the tables earlier passes built.

Each pass is a function ``check(cx)`` that reads ``cx.p`` (the Program) and ``cx.t`` (the Target), adds
findings with :meth:`Context.add` / :meth:`Context.at`, and may leave tables for the passes after it (the
collective's shape, the thread blocks by id, the connections, the firing order). Nothing else is shared.
"""

from __future__ import annotations

from colls.collectives import Collective
from colls.msccl import Finding
from colls.program import Program
from colls.runtimes import Target
from colls.verify.rules import effect_of

ERROR = "error"
WARNING = "warning"
REPORT_CAP = 10    # findings of one rule (per aliasing) listed before a summary line

BUFFERS = ("i", "o", "s")
BUFFER_NAMES = {"i": "input", "o": "output", "s": "scratch"}


class Context:
    def __init__(self, program: Program, target: Target, sms: int | None, buffsize: int | None = None,
                 ranks: int | None = None):
        self.p = program
        self.t = target
        self.sms = sms
        self.ranks = ranks                    # the machine's GPUs, where the caller names a machine
        self.buffsize = buffsize              # the protocol's connection buffer, where not NCCL's default
        self.findings: list[Finding] = []
        self.facts: dict = {}
        # filled by the algo pass
        self.kind: str | None = None          # the collective the file means (lenient about spelling)
        self.coll: Collective | None = None   # its shape, when the model covers it
        self.modes: list[bool] = []           # aliasings the file claims: True = in-place
        self.unproven: list[str] = []         # why the result could not be checked, where it could not
        # filled by the structure pass
        self.nranks = 0
        self.gpu_by_id: dict = {}
        self.tb_by_id: dict = {}              # gpu id -> {tb id -> Threadblock}
        self.waited: dict = {}                # (gpu, tb, step) -> first waiter (gpu, tb, step)
        # filled by the communication pass: (src, dst, chan) -> ((gpu, tb) | None, (gpu, tb) | None)
        self.connections: dict = {}
        # filled by the execution pass: the simulated machine (firing order, happens-before edges)
        self.machine = None

    # --- findings ----------------------------------------------------------------------------------
    def add(self, rule, message, gpu=None, tb=None, step=None, line=None, *, severity=None, effect=None,
            calls=None):
        """Record a finding. Its severity follows the rule's effect (none: a warning) unless given."""
        effect = effect or effect_of(rule)
        if severity is None:
            severity = ERROR if effect else WARNING
        if severity != ERROR:
            effect = calls = None
        self.findings.append(Finding(rule, message, gpu, tb, step, line, severity, effect, calls))

    def at(self, rule, message, gpu, tb, step_index=None, **kw):
        """A finding located at a thread block (and step) of ``gpu`` (objects from the Program)."""
        step_obj = tb.steps[step_index] if step_index is not None and step_index < len(tb.steps) else None
        line = step_obj.line if step_obj is not None else tb.line
        self.add(rule, message, gpu.id, tb.id, step_index, line, **kw)

    def has(self, rules) -> list[str]:
        """The error rules among ``rules`` found so far, sorted."""
        return sorted({f.rule for f in self.findings if f.severity == ERROR and f.rule in rules})

    def modes_text(self, inplace: bool) -> str:
        return "in-place calls" if inplace else "out-of-place calls"
