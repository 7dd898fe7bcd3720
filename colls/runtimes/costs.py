"""The cost model of the simulator: what one threadblock, one step and one protocol cost.

Every figure here comes from the outside world and carries its source. The machine's own figures (link
bandwidths, per-hop latencies) come from the hardware profile; a link class may also give an
``efficiency``, the fraction of its bandwidth that GPU-initiated transfers reach (see
:mod:`colls.inputs.hardware`).

Protocols (NCCL ``src/include/device.h``, ``src/device/prims_ll.h``, ``prims_ll128.h``):

- **Simple** moves data as is and synchronizes once per message with a flag (and a memory fence): full
  bandwidth, the highest fixed cost per step.
- **LL128** writes 128-byte lines of which 120 bytes are data and 8 a flag
  (``NCCL_LL128_DATAELEMS``/``NCCL_LL128_LINEELEMS`` = 15/16).
- **LL** writes 16-byte lines of 8 bytes of data and 8 of flag: half the bandwidth, the lowest latency.

Fixed costs follow NCCL's own tuning model (``src/graph/tuning.cc``, NCCL 2.20.3): ``baseLat`` is the
fixed cost of a call (kernel launch and set-up) and ``hwLat`` the latency of one step of a ring over
NVLink, per protocol: LL 0.6 us, LL128 1.9 us, Simple 3.4 us. The LL figure is the transfer itself (a
16-byte line and its flag), which the profile's per-hop latencies already model; what Simple and LL128 cost
beyond it is their synchronization (flags, fences), charged here once per message as
:attr:`Model.step_us`: LL 0, LL128 1.3 us, Simple 2.8 us.

A threadblock moves at most :attr:`Model.tb_gbps` GB/s (one SM copying with loads and stores); NCCL's
tuning caps one channel at 24 GB/s on Ampere, 38.7 GB/s on Hopper and 26.5 GB/s on Volta
(``perChMaxTreeBws``, one node), the figures used here per GPU generation. AMD GPUs take the Ampere figure:
no per-channel figure for RCCL was found, and the choice is stated wherever a result is shown.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Data bytes per wire byte, per protocol (see the module docstring).
DATA_FRACTION = {"Simple": 1.0, "LL128": 120 / 128, "LL": 8 / 16}

# NCCL src/graph/tuning.cc: baseLat[NCCL_ALGO_RING] = { LL 6.6, LL128 14.0, Simple 8.4 } us per call.
LAUNCH_US = {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}
# NCCL src/graph/tuning.cc: hwLat[NCCL_HW_NVLINK][NCCL_ALGO_RING] = { LL .6, LL128 1.9, Simple 3.4 } us per
# step, less the LL figure (the transfer itself, which the profile's hop latencies carry).
STEP_US = {"LL": 0.0, "LL128": 1.3, "Simple": 2.8}

# One threadblock's copy rate, GB/s, by GPU generation (NCCL src/graph/tuning.cc perChMaxTreeBws, one
# node). The key is matched against the profile's GPU model name, first match wins.
TB_GBPS = (("H100", 38.7), ("H200", 38.7), ("H800", 38.7), ("A100", 24.0), ("A800", 24.0),
           ("V100", 26.5))
DEFAULT_TB_GBPS = 24.0


@dataclass(frozen=True)
class Model:
    """The fixed costs one simulation uses (defaults: the figures above, for the file's protocol).

    Attributes
    ----------
    launch_us : the fixed cost of one call (us), added once.
    step_us : the fixed cost of one message in a threadblock (us): flag polling and fences.
    data_fraction : data bytes per byte on the wire.
    tb_gbps : a threadblock's copy rate (GB/s); None: by GPU model (:func:`tb_rate`).
    """

    launch_us: float
    step_us: float
    data_fraction: float
    tb_gbps: float | None = None
    notes: tuple = field(default=(), compare=False)


def for_protocol(proto: str | None, tb_gbps: float | None = None) -> Model:
    proto = proto if proto in DATA_FRACTION else "Simple"
    return Model(LAUNCH_US[proto], STEP_US[proto], DATA_FRACTION[proto], tb_gbps)


def tb_rate(gpu_model: str | None) -> float:
    """A threadblock's copy rate (GB/s) for a GPU model name (``A100-SXM4`` -> the Ampere figure)."""
    name = (gpu_model or "").upper()
    for key, rate in TB_GBPS:
        if key in name:
            return rate
    return DEFAULT_TB_GBPS
