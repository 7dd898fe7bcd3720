"""The cost model: what one call, one message and one threadblock cost, per GPU generation and its runtime.

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

One GPU generation's row (:data:`FAMILIES`) holds, per protocol, the runtime's own figures:

- ``launch_us``: the fixed cost of a call on the GPU (kernel start and set-up): NCCL's ``baseLat`` of the
  ring (``src/graph/tuning.cc``: LL 6.6, LL128 14.0, Simple 8.4 us); RCCL's own ``baseLat`` on AMD GPUs
  (ROCm/rccl ``src/graph/tuning.cc``: LL 12, LL128 12, Simple 17 us).
- ``step_us``: the fixed cost of one hop, paid by the threadblock that sends the message (the system-wide
  fence before it posts its flag, ``postPeer`` in ``prims_simple.h``; a receive polls a flag already set and
  posts its own without a fence, so a step that only receives pays none, :mod:`colls.simulate.engine`): the
  runtime's ``hwLat`` of one ring step over NVLink/xGMI, which is per hop, less the LL figure (which is the
  transfer itself, already carried by the profile's per-hop latencies). NCCL: LL .6, LL128 1.9, Simple
  3.4 us -> 0, 1.3, 2.8; RCCL (``tuning_model_0``/``_4``, xGMI): LL .8, LL128 2.2, Simple 3.6 us -> 0, 1.4,
  2.8.
- ``tb_gbps``: one threadblock's rate when it sends (one SM copying with loads and stores), in wire bytes;
  a step that does not send works in its own GPU's memory at the Simple rate (:mod:`colls.simulate.engine`:
  the LL and LL128 caps are those of lines crossing the link flag by flag). NCCL's
  tuning caps a channel at ``perChMaxTreeBws`` for Simple (Volta 26.5, Ampere 24.0, Hopper 38.7 GB/s, one
  node) and ``perChMaxRingLL128Bws`` for LL128 (Volta 20.0, Ampere 20.0, Hopper 36.7). LL is capped for the
  whole call at ``llMaxBws`` busbw (one node: Volta 39.0, Ampere 87.7, Hopper 141.0 GB/s): spread over NCCL's
  32 channels (``MAXCHANNELS``) that is 1.2, 2.7 and 4.4 GB/s of data per channel, twice that on the wire
  (LL moves 8 data bytes per 16). RCCL publishes no
  per-channel figure for MI250 (its 16-GCD tuning model gives only a node total, ``baseBw=161.4``): the
  Ampere Simple figure is used and said so, with RCCL's own ratios for LL and LL128 (below).
- ``host_us``: what a call costs on the host before the GPU starts, by how calls are launched: ``stream``
  (a kernel launch and the proxy's start per call, as nccl-tests runs without ``-G``) or ``graph`` (calls
  captured in a CUDA graph, ``-G 1``: nothing per call beyond the kernel). No runtime publishes it; it is
  measured: published 8-GPU nccl-tests floors without graphs are 34.7-35.3 us (A100, microsoft/
  superbenchmark's nccl-tests logs; H100, togethercomputer/together-nccl-tests) against 9.3-17 us with
  ``-G 1`` (Azure/msccl docs/performance-nd-h100-v5.md, microsoft/mscclpp docs/performance-ndmv4.md), so
  a stream launch costs about 22 us more. MI250X (ROCm/rccl pull request 929, 16 GCDs): 25 us allreduce
  floor without graphs.

- ``net_step_us``: how much later a message that crosses the network arrives than its route's latency says
  (a latency, not a threadblock's busy time: the proxy keeps several messages in flight): the host proxy
  polls the GPU's flag, posts the RDMA write, and the receiving proxy polls its completion before the GPU
  sees the data. NCCL's own estimate of a network step is 2.7-14 us by protocol (``hwLat[NET][RING]``);
  published pairs of runs on one and two nodes with the same software give about 10 us per network step
  (A100, CUDA graphs: allreduce 1 KB 16.96 -> 35.85 us over a tree's two network steps, allgather 12.53 ->
  33.74 us, microsoft/mscclpp docs/performance-ndmv4.md; ring allreduce 8 B 34.7 us on one node,
  microsoft/superbenchmark, and 93.1 us on two, NVIDIA/nccl issue 318, over four), of which the profiles'
  NIC hops already carry about 2.6 us: 7.5 us.

The MSCCL executor launches its own kernel per call and starts the proxy on the host like NCCL
(``mscclRunAlgo`` in ``src/collectives/msccl.cc``), so a file pays the same ``host_us`` as NCCL's own
algorithms.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Data bytes per wire byte, per protocol (see the module docstring).
DATA_FRACTION = {"Simple": 1.0, "LL128": 120 / 128, "LL": 8 / 16}

DEFAULT_LAUNCH = "stream"


@dataclass(frozen=True)
class Family:
    """One GPU generation and the runtime that drives it: its costs per protocol (see the module)."""

    name: str
    runtime: str
    launch_us: dict
    step_us: dict
    tb_gbps: dict
    host_us: dict
    net_step_us: float = 7.5


_NCCL_LAUNCH = {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}       # NCCL tuning.cc baseLat[RING]
_NCCL_STEP = {"LL": 0.0, "LL128": 1.3, "Simple": 2.8}          # NCCL tuning.cc hwLat[NVLINK][RING] less LL
_NCCL_HOST = {"stream": 22.0, "graph": 0.0}                    # measured, see the module docstring
MAX_CHANNELS = 32                                              # NCCL src/include/device.h MAXCHANNELS


def _ll(ll_max_busbw: float) -> float:
    """A threadblock's LL wire rate from NCCL's llMaxBws (one node): the cap over MAXCHANNELS, x2 for the flags."""
    return 2 * ll_max_busbw / MAX_CHANNELS


FAMILIES = {
    "Volta": Family("Volta", "NCCL", _NCCL_LAUNCH, _NCCL_STEP,
                    {"LL": _ll(39.0), "LL128": 20.0, "Simple": 26.5}, _NCCL_HOST),
    "Ampere": Family("Ampere", "NCCL", _NCCL_LAUNCH, _NCCL_STEP,
                     {"LL": _ll(87.7), "LL128": 20.0, "Simple": 24.0}, _NCCL_HOST),
    "Hopper": Family("Hopper", "NCCL", _NCCL_LAUNCH, _NCCL_STEP,
                     {"LL": _ll(141.0), "LL128": 36.7, "Simple": 38.7}, _NCCL_HOST),
    # RCCL on MI250 (gfx90a): baseLat {12, 12, 17}; hwLat xGMI ring {.8, 2.2, 3.6}; the 16-GCD node's tuning
    # model (rome_model_65: tuning=4) rates ring LL at .15 and LL128 at .41 of Simple's bandwidth (bwRatio,
    # up to 2 nodes) -- data rates, so x2 and x128/120 on the wire (ROCm/rccl src/graph/tuning.cc)
    "CDNA2": Family("CDNA2", "RCCL", {"LL": 12.0, "LL128": 12.0, "Simple": 17.0},
                    {"LL": 0.0, "LL128": 1.4, "Simple": 2.8},
                    {"LL": 2 * 0.15 * 24.0, "LL128": 128 / 120 * 0.41 * 24.0, "Simple": 24.0},
                    {"stream": 10.0, "graph": 0.0}),
    # RCCL on MI300X (gfx942). Its tuning figures (baseLat {12, 12, 17}, hwLat xGMI ring {.8, .8, 2.1} in
    # tuning_model_5, ROCm/rccl src/graph/tuning.cc) are estimates its own runs undercut: published rccl-tests
    # runs of MSCCL XML files on 8 x MI300X (RCCL 2.21.5, ROCm 6.3, no graphs; rouge3877/ns3-msccl-data,
    # Validation/SingleCollective/GroundTruth) give the figures here, fitted on the runs whose time one cost
    # dominates (bench/FILES.md compares every run with the model):
    # - the call: 5.3 us before the first message, all of it the host's (a stream launch): an all-pairs LL
    #   allgather's 1 KB call (one hop) takes 7.0-7.4 us, of which the hop 1.7 us (hardware/mi300x.yaml);
    #   with HIP graphs RCCL's own 1 KB allreduce takes 5.6 us less (13.11 -> 7.47 us, RCCL 2.22.3; AMD ROCm
    #   blogs, "MI300X RCCL xGMI"), so a graph launch costs nothing more;
    # - a message: LL 0 (its cost is the hop's latency), Simple 2.8 us (RCCL's hwLat Simple less LL,
    #   tuning_model_0, as CDNA2): ring files whose one threadblock alternates sends and receives pay 4.6
    #   us a Simple hop at 1 KB (39.4 us for 7 hops) and 1.7 an LL hop (18.7 us);
    # - a threadblock's copy rate: Simple 21.5 GB/s, LL 3.8 GB/s on the wire (1.9 of data) when it sends: files
    #   whose threadblocks each send and receive 128 MB a loop at 1 GB (ring 1 channel, all-pairs 1 channel)
    #   take 86.4 and 12.8 ms (Simple), 599 and 87.0 ms (LL);
    # - LL128: RCCL enables it on gfx942 from 2.22.3 and then not by default (rome_model_79 sets no
    #   ll128Enabled); files that ask for it ran at least 210 us a call on 2.21.5 and took 61.4 ms (all-pairs)
    #   and 406 ms (ring) at 1 GB: 200 us more a call and 2.5 GB/s on the wire here, so colls never picks it.
    "CDNA3": Family("CDNA3", "RCCL", {"LL": 0.0, "LL128": 200.0, "Simple": 0.0},
                    {"LL": 0.0, "LL128": 0.0, "Simple": 2.8},
                    {"LL": 3.8, "LL128": 2.5, "Simple": 21.5},
                    {"stream": 5.3, "graph": 0.0}),
}
DEFAULT_FAMILY = "Ampere"     # a GPU model no row names: the Ampere figures, said wherever results are shown

# GPU model names -> family; the key is matched against the profile's GPU model name, first match wins.
_MODELS = (("H100", "Hopper"), ("H200", "Hopper"), ("H800", "Hopper"), ("H20", "Hopper"),
           ("A100", "Ampere"), ("A800", "Ampere"), ("A30", "Ampere"), ("V100", "Volta"),
           ("MI250", "CDNA2"), ("MI210", "CDNA2"), ("MI200", "CDNA2"),
           ("MI300", "CDNA3"), ("MI308", "CDNA3"), ("MI325", "CDNA3"))


def family_of(gpu_model: str | None) -> Family:
    """The generation of a GPU model name (``A100-SXM4`` -> Ampere); unknown names get :data:`DEFAULT_FAMILY`."""
    name = (gpu_model or "").upper()
    for key, fam in _MODELS:
        if key in name:
            return FAMILIES[fam]
    return FAMILIES[DEFAULT_FAMILY]


def is_known(gpu_model: str | None) -> bool:
    name = (gpu_model or "").upper()
    return any(key in name for key, _ in _MODELS)


@dataclass(frozen=True)
class Model:
    """The fixed costs one simulation uses.

    Attributes
    ----------
    launch_us : the fixed cost of one call (us), added once: the host's part and the kernel's start.
    step_us : the fixed cost of one message a threadblock sends (us): the fence and the flag; once per hop.
    data_fraction : data bytes per byte on the wire.
    tb_gbps : a threadblock's copy rate (GB/s) for every threadblock; None: by GPU model (:func:`tb_rate`)
        times ``tb_factor``.
    tb_factor : the protocol's copy rate relative to Simple's (LL128 is capped lower than Simple).
    net_step_us : how much later than its route's latency a message that crosses a NIC arrives.
    """

    launch_us: float
    step_us: float
    data_fraction: float
    tb_gbps: float | None = None
    tb_factor: float = 1.0
    net_step_us: float = 0.0
    notes: tuple = field(default=(), compare=False)


def model_for(proto: str | None, gpu_model: str | None = None, *, launch: str = DEFAULT_LAUNCH,
              tb_gbps: float | None = None) -> Model:
    """The costs of a call with protocol ``proto`` on a GPU model (its family's row), launched ``launch``."""
    proto = proto if proto in DATA_FRACTION else "Simple"
    fam = family_of(gpu_model)
    return Model(fam.host_us[launch] + fam.launch_us[proto], fam.step_us[proto], DATA_FRACTION[proto], tb_gbps,
                 fam.tb_gbps[proto] / fam.tb_gbps["Simple"], fam.net_step_us)


def tb_rates(model: Model, caps, share=None) -> tuple[list, list]:
    """Each threadblock's rates in bytes per us, from its base copy rate ``caps`` (bytes per us, by GPU) and
    its ``share`` of a whole block's threads (None: whole blocks): what it moves in its own GPU's memory
    (Simple's rate: receives, copies, reductions) and what it sends (its protocol's rate,
    :mod:`colls.simulate.engine`). A model with a fixed ``tb_gbps`` gives that rate to both."""
    share = share if share is not None else [1.0] * len(caps)
    own = [(model.tb_gbps * 1000.0 if model.tb_gbps else c) * f for c, f in zip(caps, share)]
    return own, (own if model.tb_gbps else [x * model.tb_factor for x in own])


def for_protocol(proto: str | None, tb_gbps: float | None = None, *, gpu_model: str | None = None,
                 launch: str = DEFAULT_LAUNCH) -> Model:
    """:func:`model_for` with the threadblock rate optionally fixed (tests and what-if runs)."""
    return model_for(proto, gpu_model, launch=launch, tb_gbps=tb_gbps)


def tb_rate(gpu_model: str | None) -> float:
    """A threadblock's Simple copy rate (GB/s) for a GPU model name (``A100-SXM4`` -> the Ampere figure)."""
    return family_of(gpu_model).tb_gbps["Simple"]
