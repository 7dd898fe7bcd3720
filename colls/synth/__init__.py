"""Synthesis methods: one module per method, each exposing the same function

    synthesize(topology: Topology, collective: Collective, **options) -> Schedule

``METHODS`` maps a method's name to that function; :func:`get_method` looks one up for the pipeline and
the CLI. The helpers every method shares (:func:`~colls.synth.common.checked_route`,
:func:`~colls.synth.common.schedule_facts`) live in :mod:`colls.synth.common`.
"""

from __future__ import annotations

from typing import Callable

from colls.errors import CollsError
from colls.synth import direct, hier, milp, ring, trees
from colls.synth.common import checked_route, schedule_facts  # noqa: F401  (re-exported)

METHODS: dict[str, Callable] = {"ring": ring.synthesize, "direct": direct.synthesize,
                                "trees": trees.synthesize, "hier": hier.synthesize}
METHODS["milp"] = milp.synthesize


def check_size(method: str, collective, where: str, target=None) -> None:
    """Refuse, before the machine is built, more GPUs than ``method`` takes on for ``target`` (its module's
    ``check_size``)."""
    module = {"trees": trees, "milp": milp}.get(method)
    if module is not None:
        module.check_size(collective, where, target)


def get_method(name: str) -> Callable:
    """The ``synthesize`` function of method ``name``; CollsError listing the known ones otherwise."""
    try:
        return METHODS[name]
    except KeyError:
        raise CollsError(f"unknown method {name!r} (choose from {', '.join(sorted(METHODS))})",
                         key="--method") from None
