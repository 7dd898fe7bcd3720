"""What the runtime would do by itself: NCCL's own ring (or tree) on the same machine, timed by the same
engine.

NCCL picks its protocol per call with its tuning model, and uses fewer channels for small calls. This
baseline gives NCCL the best of both under the simulator's model: at every size, the fastest of
LL, LL128 and Simple with 1, 2, 4, ... up to :data:`MAX_BASELINE_CHANNELS` channels (as many as the
target and the GPU's SMs allow). It is an optimistic reference (NCCL's tuner does not always find the
best), so a file that beats it beats what NCCL does by itself in this model.

A configuration is skipped without simulating it only when it provably cannot win: its time is at least
the launch cost plus the larger of its busiest link's wire bytes over that link's bandwidth and its
busiest threadblock's bytes over the threadblock's copy rate (the engine never moves bytes faster).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from colls.collectives import Collective
from colls.errors import CollsError
from colls.simulate import Timing, simulate
from colls.simulate.engine import Machine
from colls.runtimes.costs import for_protocol
from colls.runtimes import get_target

MAX_BASELINE_CHANNELS = 32          # NCCL's coll channels on 8-GPU NVSwitch nodes: 24 to 32 (NCCL_DEBUG=INFO)
PROTOCOL_ORDER = ("Simple", "LL128", "LL")


def algorithm_of(name: str) -> str:
    """``"nccl-ring"`` -> ``"ring"``."""
    return name.split("-", 1)[1]


class Fastest:
    """The fastest of several programs of one collective at each call size: each program at every
    protocol (``protocols``), each with ``extra`` facts saying which it is.

    Configurations are simulated in the order of a lower bound on their time (launch, plus the larger
    of the busiest link's and the busiest threadblock's bytes at full speed), and the search stops when
    the next bound is no better than the best time found: the result is the true best of the model.
    ``native``: programs of the runtime's own algorithms (no file selection rules); otherwise a program
    only competes at the sizes the runtime would run it for.
    """

    def __init__(self, topology, kind: str, entries, *, native: bool = False, target: str = "exe",
                 protocols=PROTOCOL_ORDER):
        self.topology, self.kind, self.native, self.target = topology, kind, native, target
        self.protocols = tuple(protocols)
        self.entries = []                       # (extra, Simple program, Machine, loads)
        for extra, program, machine in entries:
            machine = machine or Machine(program, topology, kind)
            machine.quotient()                  # once, before colls compile forks its workers
            self.entries.append((dict(extra), program, machine, _loads(machine)))

    def time(self, size: int, bound=None) -> Timing | None:
        """The fastest configuration at ``size`` (``extra`` says which, with ``protocol``), or None when
        no program serves the size."""
        candidates = []
        for index, (extra, program, machine, (link_us, tb_us)) in enumerate(self.entries):
            chunk = size / (program.nchunksperloop or 1)
            for order, proto in enumerate(self.protocols):
                model = for_protocol(proto)
                lb = model.launch_us + max(link_us, tb_us) * chunk / model.data_fraction
                candidates.append((lb, index, order, proto, model))
        candidates.sort(key=lambda c: c[:3])
        best = None
        for lb, index, _, proto, model in candidates:
            if best is not None and lb >= best[0].time_us:
                break
            extra, program, machine, _ = self.entries[index]
            prog = program if proto == program.proto else replace(program, proto=proto)
            timing, _ = simulate(prog, self.topology, self.kind, size, bound=bound, machine=machine, model=model,
                                 native=self.native, target=self.target)
            if not timing.served:
                continue
            if best is None or timing.time_us < best[0].time_us * (1 - 1e-6):
                best = (timing, dict(extra, protocol=proto))
        if best is None:
            return None
        timing, timing.extra = best
        return timing


class Baseline:
    """NCCL's ``algorithm`` for one collective on one machine, laid out once per channel count."""

    def __init__(self, topology, kind: str, algorithm: str, *, root: int = 0, target: str = "exe"):
        from colls.simulate.defaults import nccl_program
        self.topology, self.kind, self.algorithm = topology, kind, algorithm
        tgt = get_target(target)
        sms = topology.min_sms()
        top = min(MAX_BASELINE_CHANNELS, tgt.max_channels)
        entries = []
        coll = Collective(kind, topology.ngpus, root=root)
        channels = 1
        last_error = None
        while channels <= top:
            try:
                program = nccl_program(topology, coll, algorithm, channels=channels, proto="Simple",
                                       target=target)
            except CollsError as e:                 # more channels than the target or the SMs allow
                last_error = e
                break
            if program.max_tbs() > sms:
                break
            entries.append(({"channels": channels}, program, None))
            channels *= 2
        if not entries:
            raise CollsError(f"NCCL's {algorithm} cannot be modelled here: {last_error}", key="--baseline")
        self.fastest = Fastest(topology, kind, entries, native=True, target=target)

    @property
    def label(self) -> str:
        return f"NCCL {self.algorithm} (best protocol and channels)"

    def time(self, size: int, bound=None) -> Timing:
        """The fastest protocol and channel count at ``size``; ``extra`` says which."""
        timing = self.fastest.time(size, bound)
        timing.label = self.label
        return timing


def _loads(machine) -> tuple[float, float]:
    """Microseconds per chunk byte on the busiest link and in the busiest threadblock, at full speed: every
    send step puts ``cnt`` chunks on each link of its route and through its threadblock."""
    link_chunks = np.zeros(len(machine.links))
    tb_us = 0.0
    for ti, steps in enumerate(machine.steps):
        sent = sum(step[3] for step in steps if step[0])
        moved = sum(step[3] for step in steps if not step[2])
        if sent:
            link_chunks[machine.conn_links[machine.out_conn[ti]]] += sent
        tb_us = max(tb_us, moved / machine.tb_cap[ti])
    return float((link_chunks / machine.link_cap).max()), tb_us
