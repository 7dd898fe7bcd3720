"""The runtimes colls writes for, and every fact about each of them, in one place.

A runtime's facts are its file format's limits and its selection rules (:class:`~colls.runtimes.base.Target`,
one module per runtime: :mod:`.exe`, :mod:`.rccl`, :mod:`.old`) and its costs (:mod:`.costs`). This package
imports nothing of colls above :mod:`colls.errors`, so everything else may import it; what a runtime *runs
by itself* (NCCL's ring, tree, ...) is built as programs in :mod:`colls.simulate.defaults`, on these facts.
"""

from __future__ import annotations

from colls.errors import CollsError
from colls.runtimes import exe, mscclpp, old, rccl
from colls.runtimes.base import MAX_OFFSET, Target

__all__ = ["MAX_OFFSET", "TARGETS", "Target", "get_target"]

TARGETS: dict[str, Target] = {m.TARGET.name: m.TARGET for m in (exe, rccl, old)}
# targets schedules are lowered for but no XML file is written for: MSCCL++ plans (colls.mscclpp)
LOWERINGS: dict[str, Target] = {mscclpp.LOWERING.name: mscclpp.LOWERING}


def get_target(name: str) -> Target:
    try:
        return TARGETS[name] if name in TARGETS else LOWERINGS[name]
    except KeyError:
        raise CollsError(f"unknown target {name!r} (choose from {', '.join(TARGETS)})",
                         key="--target") from None
