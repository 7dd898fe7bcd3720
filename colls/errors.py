"""The project's one error type.

Everything below the CLI raises :class:`CollsError` for anything a user can cause (a malformed file, an
unknown key, an infeasible problem, a limit a schedule cannot meet). The CLI prints ``str(error)`` as one
line on stderr and exits with code 2; nothing else is written. Internal bugs stay ordinary exceptions.
"""

from __future__ import annotations

import re

EXCERPT_CHARS = 40
MAX_MESSAGE_CHARS = 1000


def printable(text: str, limit: int) -> str:
    """``text`` with non-printable characters escaped (``\\n``, ``\\x1b``), cut to ``limit`` characters
    of the original with ``...`` when longer."""
    cut = text[:limit]
    out = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in cut)
    return out + ("..." if len(text) > limit else "")


def excerpt(value, limit: int = EXCERPT_CHARS) -> str:
    """A short quotation of a value a user gave, for messages: text in single quotes, escaped and cut
    to ``limit`` characters (``...`` when cut); a huge whole number by its digit count."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"a number of about {int(value.bit_length() * 0.30103) + 1} digits"
    if isinstance(value, str):
        return "'" + printable(value, limit) + "'"
    return printable(str(value), limit)


class CollsError(Exception):
    """A user-facing error whose message is one line that names the file and key where known.

    The line is printable (control characters escaped) and at most about MAX_MESSAGE_CHARS long, so
    no input can reach the terminal in full through an error.

    ``rule_family``: for a generated program the verifier refused, the family of the first rule it broke
    (:data:`colls.verify.rules.RULES`), so a caller can tell a loader limit, which every layout of the same
    schedule meets again, from an error of one layout.
    """

    def __init__(self, message: str, *, source: str | None = None, key: str | None = None,
                 rule_family: str | None = None):
        self.source = source
        self.key = key
        self.rule_family = rule_family
        self.reason = printable(" ".join(str(message).split()), MAX_MESSAGE_CHARS)   # without source and key
        parts = []
        if source:
            parts.append(printable(str(source), 200))
        if key:
            parts.append(printable(str(key), 200))
        prefix = ": ".join(parts)
        text = f"{prefix}: {message}" if prefix else message
        super().__init__(printable(" ".join(text.split()), MAX_MESSAGE_CHARS))


class LimitError(CollsError):
    """A schedule that does not fit a runtime target's limits (steps, threadblocks, channels).

    A method with a smaller variant (fewer trees per GPU) may catch it and try again; anywhere else it
    is an ordinary user-facing error. ``limit`` names the limit where a caller tells them apart
    (``"threadblocks"``: more threadblocks per GPU than the target or the GPU runs), ``any_layout`` says the
    schedule breaks it in every layout the lowering could try, ``one_segment`` that the layout that broke it
    had one step segment and no connection cut (a schedule of fewer steps, on the same peers and lanes, would
    be laid out alike: colls.pipeline._compile_hier).
    """

    def __init__(self, message: str, *, limit: str | None = None, any_layout: bool = False,
                 one_segment: bool = False, **kw):
        super().__init__(message, **kw)
        self.limit = limit
        self.any_layout = any_layout
        self.one_segment = one_segment


def xml_reason(message: str) -> str:
    """libxml2's reason for refusing a text, without its advice to the programmer: "Excessive depth in document:
    256 use XML_PARSE_HUGE option" is a limit colls keeps (a file nested that deep is no MSCCL file nor NCCL
    dump), said in the user's terms."""
    message = re.sub(r",?\s*use XML_PARSE_HUGE option", "", message)
    message = re.sub(r"Excessive depth in document: (\d+)", r"elements nested more than \1 deep", message)
    return " ".join(message.split())

