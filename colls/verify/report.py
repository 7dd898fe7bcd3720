"""The report: every finding, the facts, and one verdict a user can act on.

The verdict is ``valid`` (no error, and the result was proven for every call type the file claims),
``invalid`` (an error: the summary names the worst thing the runtime will do, and for which calls) or
``unproven`` (no error was found, but what the file computes could not be checked: a collective outside
the model, a shape it cannot follow). Only ``valid`` is ok.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from colls.msccl import Finding
from colls.verify.context import ERROR
from colls.verify.rules import EFFECTS, LOAD


@dataclass
class Report:
    """What :func:`colls.verify.verify` found. ``ok`` is True only for a proven file."""

    source: str
    target: str
    findings: list[Finding]
    facts: dict = field(default_factory=dict)
    unproven: list[str] = field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == ERROR]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity != ERROR]

    @property
    def verdict(self) -> str:
        if self.errors:
            return "invalid"
        return "unproven" if self.unproven else "valid"

    @property
    def ok(self) -> bool:
        return self.verdict == "valid"

    def rules(self, severity: str | None = ERROR) -> set[str]:
        """The rule ids found (errors only by default; ``None`` for all)."""
        return {f.rule for f in self.findings if severity is None or f.severity == severity}

    def consequence(self) -> str | None:
        """What the runtime will do with the file, in words ("will not load", "loads, but hangs for ...")."""
        errors = self.errors
        if not errors:
            return None
        effects = {f.effect for f in errors}
        if LOAD in effects:
            return LOAD
        parts = []
        for effect in EFFECTS:
            if effect not in effects:
                continue
            calls = sorted({f.calls for f in errors if f.effect == effect and f.calls})
            everywhere = any(f.effect == effect and not f.calls for f in errors)
            parts.append(effect if everywhere or not calls else f"{effect} for {' and '.join(calls)}")
        return "loads, but " + "; ".join(parts)

    def summary(self) -> str:
        nerr, nwarn = len(self.errors), len(self.warnings)
        counts = f"{nerr} error{'s' if nerr != 1 else ''}, {nwarn} warning{'s' if nwarn != 1 else ''}"
        if self.verdict == "invalid":
            return f"{self.source}: INVALID for {self.target}: {self.consequence()}: {counts}"
        if self.verdict == "unproven":
            checked = ("loads and cannot deadlock, but what it computes was not checked"
                       if self.facts.get("deadlock_free") else
                       "loads, but whether it deadlocks and what it computes were not checked")
            return (f"{self.source}: NOT PROVEN for {self.target}: {checked} ({'; '.join(self.unproven)}): "
                    f"{counts}")
        modes = ", ".join(self.facts.get("checked", []))
        extra = f" ({nwarn} warning{'s' if nwarn != 1 else ''})" if nwarn else ""
        return (f"{self.source}: VALID for {self.target}: loads, cannot deadlock, computes {self.facts.get('coll')} "
                f"correctly ({modes}){extra}{symmetry_words(self.facts)}")

    def to_dict(self) -> dict:
        """Plain data for JSON output: source, target, verdict, findings (errors first), facts."""
        return {"source": self.source, "target": self.target, "ok": self.ok, "verdict": self.verdict,
                "consequence": self.consequence(), "unproven": list(self.unproven), "summary": self.summary(),
                "errors": len(self.errors), "warnings": len(self.warnings),
                "findings": [f.to_dict() for f in self.findings], "facts": dict(self.facts)}

    def format(self, per_rule: int | None = None) -> str:
        """The findings one per line, then the summary. ``per_rule``: at most that many findings of each rule
        and severity (default :data:`SHOWN_PER_RULE`; one broken attribute can repeat a finding on every
        threadblock), with a line saying how many more there are; ``to_dict`` keeps every one."""
        cap = SHOWN_PER_RULE if per_rule is None else per_rule
        shown, lines, more_at = {}, [], {}
        for f in self.findings:
            key = (f.severity, f.rule)
            shown[key] = shown.get(key, 0) + 1
            if shown[key] <= cap:
                lines.append(str(f))
            elif key not in more_at:
                more_at[key] = len(lines)       # where the first finding left out would have been
                lines.append("")
        for (severity, rule), at in more_at.items():
            lines[at] = (f"{severity} [{rule}]: {shown[(severity, rule)] - cap} more like the {cap} above "
                         "(--json lists every finding)")
        return "\n".join(lines + [self.summary()])


# findings of one rule a text report shows before it counts the rest (``Report.format``)
SHOWN_PER_RULE = 10


def symmetry_words(facts: dict) -> str:
    """``"; proved on ranks 0-63 for all 1024 by symmetry (rank r runs rank r mod 64's program, relabelled)"``
    where the execution and semantics passes ran on a quotient (:mod:`colls.verify.symmetry`), else ``""``."""
    sym = facts.get("symmetry")
    if not sym:
        return ""
    run, n = sym["ranks_run"], sym["ranks"]
    ranks = "rank 0" if run == 1 else f"ranks 0-{run - 1}"
    return f"; proved on {ranks} for all {n} by symmetry (rank r runs rank r mod {run}'s program, relabelled)"
