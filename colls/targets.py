"""The runtimes that load MSCCL XML and what each of them accepts, read from their loaders' sources
(Azure/msccl-executor-nccl ``src/misc/msccl/msccl_parser.cc`` and ``src/include/msccl/msccl_struct.h``;
ROCm/rccl's copies of them; microsoft/msccl for the older runtime).

EXE = the MSCCL executor for NCCL (current), RCCL = AMD's RCCL (same parser), OLD = microsoft/msccl.
"""

from __future__ import annotations

from dataclasses import dataclass

from colls.errors import CollsError


# Every runtime stores step offsets as int16_t (mscclTransmission in msccl_struct.h).
MAX_OFFSET = 2**15 - 1


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    max_steps: int                 # steps per threadblock (step index s < max_steps)
    max_tbs: int                   # threadblocks per GPU (also capped by the GPU's SM count)
    max_channels: int              # chan < max_channels
    max_tbs_per_channel: int | None  # threadblocks with a send peer (and with a recv peer) per channel
    max_elements: int | None       # XML elements parsed per rank (algo + gpu elements + own tbs/steps)
    max_children: int | None       # children of one element
    max_cnt: int                   # cnt < max_cnt
    required_algo_attrs: tuple[str, ...]
    colls: tuple[str, ...]         # the `coll` spellings it accepts

    def coll_name(self, kind: str) -> str:
        """How this runtime spells a collective in the `coll` attribute."""
        if kind == "reducescatter" and self.name == "old":
            return "reduce_scatter"
        return kind

    def kind_of(self, coll: str) -> str | None:
        """The collective a `coll` spelling means for this runtime, or None if it does not know it."""
        if coll not in self.colls:
            return None
        return "reducescatter" if coll == "reduce_scatter" else coll


_EXE_COLLS = ("allgather", "reducescatter", "allreduce", "alltoall", "broadcast", "reduce",
              "gather", "scatter", "send", "recv", "alltoallv")
_EXE_ATTRS = ("nchunksperloop", "nchannels", "ngpus", "proto", "coll", "minBytes", "maxBytes",
              "inplace", "outofplace")

TARGETS: dict[str, Target] = {
    "exe": Target("exe", "MSCCL executor for NCCL 2.23", 64, 1024, 32, 32, 4096, 1024, 72,
                  _EXE_ATTRS, _EXE_COLLS),
    # RCCL's loader refuses more than MSCCL_MAX_NUM_THREAD_BLOCKS = 64 threadblocks per GPU ("MSCCL: too
    # many thread blocks are requested. Max thread blocks: 64", src/include/msccl/msccl_struct.h).
    "rccl": Target("rccl", "ROCm RCCL", 64, 64, 32, 32, 4096, 1024, 72, _EXE_ATTRS, _EXE_COLLS),
    "old": Target("old", "microsoft/msccl (NCCL 2.12)", 256, 216, 32, None, None, None, 72,
                  ("name", "nchunksperloop", "nchannels", "ngpus", "proto", "coll", "inplace"),
                  tuple(c if c != "reducescatter" else "reduce_scatter" for c in _EXE_COLLS)),
}


def get_target(name: str) -> Target:
    try:
        return TARGETS[name]
    except KeyError:
        raise CollsError(f"unknown target {name!r} (choose from {', '.join(TARGETS)})",
                         key="--target") from None
