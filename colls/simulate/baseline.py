"""What the runtime would do by itself: NCCL's own ring (or tree) on the same machine, timed by the same
engine.

NCCL picks its protocol per call with its tuning model, and uses fewer channels for small calls. This
baseline gives NCCL the best of both under the simulator's model: at every size, the fastest of
LL, LL128 and Simple with 1, 2, 4, ... up to :data:`MAX_BASELINE_CHANNELS` channels (as many as the
target and the GPU's SMs allow). It is an optimistic reference (NCCL's tuner does not always find the
best), so a file that beats it beats what NCCL does by itself in this model.

A configuration is skipped without simulating it only when it provably cannot win: its time is at least
the launch cost plus its busiest link's wire bytes over that link's bandwidth, and those bytes are the
Simple run's bytes (same channels, same size) times the protocol's wire factor.
"""

from __future__ import annotations

from dataclasses import replace

from colls.collectives import Collective
from colls.errors import CollsError
from colls.simulate import Timing, simulate
from colls.simulate.engine import Machine
from colls.simulate.model import for_protocol
from colls.targets import get_target

MAX_BASELINE_CHANNELS = 32          # NCCL's coll channels on 8-GPU NVSwitch nodes: 24 to 32 (NCCL_DEBUG=INFO)
PROTOCOL_ORDER = ("Simple", "LL128", "LL")


def algorithm_of(name: str) -> str:
    """``"nccl-ring"`` -> ``"ring"``."""
    return name.split("-", 1)[1]


class Baseline:
    """NCCL's ``algorithm`` for one collective on one machine, laid out once per channel count."""

    def __init__(self, topology, kind: str, algorithm: str, *, root: int = 0, target: str = "exe"):
        from colls.simulate.nccl import nccl_program
        self.topology, self.kind, self.algorithm = topology, kind, algorithm
        tgt = get_target(target)
        sms = topology.min_sms()
        top = min(MAX_BASELINE_CHANNELS, tgt.max_channels)
        self.configs = []                       # (channels, Simple program, Machine)
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
            self.configs.append((channels, program, Machine(program, topology, kind)))
            channels *= 2
        if not self.configs:
            raise CollsError(f"NCCL's {algorithm} cannot be modelled here: {last_error}", key="--baseline")

    @property
    def label(self) -> str:
        return f"NCCL {self.algorithm} (best protocol and channels)"

    def time(self, size: int, bound=None) -> Timing:
        """The fastest configuration at ``size``; ``extra`` says which."""
        best = None
        for channels, program, machine in self.configs:
            simple = None
            for proto in PROTOCOL_ORDER:
                model = for_protocol(proto)
                if simple is not None and best is not None:
                    wire = float((simple.link_bytes / machine.link_cap).max()) / model.data_fraction
                    if model.launch_us + wire >= best[0].time_us:
                        continue
                prog = program if proto == "Simple" else replace(program, proto=proto)
                timing, res = simulate(prog, self.topology, self.kind, size, bound=bound, machine=machine,
                                       model=model, native=True)
                if proto == "Simple":
                    simple = res
                if best is None or timing.time_us < best[0].time_us * (1 - 1e-6):
                    best = (timing, proto, channels)
        timing, proto, channels = best
        timing.extra = {"protocol": proto, "channels": channels}
        timing.label = self.label
        return timing
