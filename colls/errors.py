"""The project's one error type.

Everything below the CLI raises :class:`CollsError` for anything a user can cause (a malformed file, an
unknown key, an infeasible problem, a limit a schedule cannot meet). The CLI prints ``str(error)`` as one
line on stderr and exits with code 2; nothing else is written. Internal bugs stay ordinary exceptions.
"""

from __future__ import annotations


class CollsError(Exception):
    """A user-facing error whose message is one line that names the file and key where known."""

    def __init__(self, message: str, *, source: str | None = None, key: str | None = None):
        self.source = source
        self.key = key
        parts = []
        if source:
            parts.append(str(source))
        if key:
            parts.append(str(key))
        prefix = ": ".join(parts)
        text = f"{prefix}: {message}" if prefix else message
        super().__init__(" ".join(text.split()))


class LimitError(CollsError):
    """A schedule that does not fit a runtime target's limits (steps, threadblocks, channels).

    A method with a smaller variant (fewer trees per GPU) may catch it and try again; anywhere else it
    is an ordinary user-facing error.
    """
