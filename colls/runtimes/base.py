"""What one runtime is: the limits of its loader, how it picks a file for a call, and what it runs when no
file fits. One :class:`Target` per runtime, defined in its own module (:mod:`.exe`, :mod:`.rccl`,
:mod:`.old`) and registered in :mod:`colls.runtimes`."""

from __future__ import annotations

from dataclasses import dataclass



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
    own_algorithm: str = "NCCL's own algorithm"   # what runs a call no file takes
    load_order: str = "sorted"     # how it reads a folder: "sorted" (path byte order), "readdir" (undefined)
    max_bytes_exclusive: bool = False  # selects sizes in [minBytes, maxBytes) instead of [minBytes, maxBytes]
    default_max_bytes: int | None = None  # the maxBytes of a file without one (None: no limit)
    max_files: int | None = None   # files it keeps at most (None: every file of its folder)
    runtime: str = ""              # the runtime whose own algorithms run calls no file takes, and its version
    algorithms: tuple[str, ...] = ("ring", "tree")  # what that runtime runs by itself (colls.simulate.defaults)
    # channels per ring its topology search finds: the channels after the searched ones run those rings again
    # (NCCL src/graph/connect.cc ncclTopoPostset doubles them; colls.simulate.defaults.searched_rings)
    ring_copies: int = 2
    single_node_ring_copies: tuple = ()   # (GPU model, copies) when every rank is on one node
    # a user's budget of threadblocks per GPU (--max-threadblocks), already folded into max_tbs; None: none
    tbs_budget: int | None = None
    # why max_tbs is below the target's own, when something other than the SMs or --max-threadblocks set it
    tbs_why: str | None = None
    # the threads of one of its own collective kernel's blocks, per protocol (comm->maxThreads): with the bytes
    # each thread must have (colls.runtimes.nccl.THREAD_THRESHOLDS) they set how many channels a call uses
    coll_threads: tuple = (("LL", 512), ("LL128", 640), ("Simple", 512))
    # its channels on several nodes follow NCCL's topology search (colls.runtimes.nccl.net_channels); False:
    # not checked against its source, the model takes the fastest channel count
    net_search: bool = True
    # the steps that send or receive one threadblock can hold, where fewer than max_steps: a limit counted in
    # other units that such a step takes several of (an MSCCL++ plan's ops: colls.runtimes.mscclpp); None:
    # max_steps. The bound a count of rings or lanes is refused by before any lowering (colls.synth.ring.fits)
    max_remote_steps: int | None = None
    # the steps that both receive and send (a relay: rcs, rrs, rrcs) one threadblock can hold, where fewer than
    # max_remote_steps (an MSCCL++ plan's relay step takes more ops than one that only sends or receives); None:
    # max_remote_steps
    max_relay_steps: int | None = None
    # the highest threadblock id a step may wait on: the MSCCL runtimes keep it in an int8_t (dependentBid of
    # mscclThreadBlock in src/include/msccl/msccl_struct.h, read as int8_t by the kernel's dependency wait);
    # None: no such limit (an MSCCL++ plan's threadblocks wait on semaphores)
    max_dep_tb: int | None = 127

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
