"""Facts about what NCCL runs by itself, for the algorithms that are not MSCCL programs (NVLS, NVLS-tree,
and the message sizes of its tree).

The MSCCL executor is built on NCCL 2.23.4 (Azure/msccl-executor-nccl ``makefiles/version.mk``), so these are
that version's figures where the source has them; where only a later version states a figure, the line says
which.

NVLS (NVLink SHARP) reduces and multicasts inside the NVSwitch: each GPU loads the sum of one slice from all
GPUs (``multimem.ld_reduce``) and stores it to all of them (``multimem.st``), so each GPU's links carry the
buffer once in each direction instead of the ring's ``2(n-1)/n`` times.
"""

from __future__ import annotations

# src/transport/nvls.cc: NCCL_PARAM(NvlsEnable, "NVLS_ENABLE", 2) -- on by default where the GPUs support
# multicast (Hopper and later behind an NVSwitch) and there are more than 2 GPUs.
NVLS_MIN_GPUS = 3
NVLS_FAMILIES = ("Hopper",)
# src/transport/nvls.cc: NCCL_PARAM(NvlsChannels, "NVLS_NCHANNELS", 16); NCCL_PARAM(NvlsChunkSize, ...,
# 128*1024).
NVLS_CHANNELS = 16
NVLS_CHUNK = 128 << 10
# src/enqueue.cc calcCollChunking (NCCL 2.23): with concurrentOps = nChannels x nHeads (one head per GPU),
# the chunk is 64 KB when nBytes < 64 x concurrentOps x 128 KB, 32 KB under 8 x, 16 KB under 2 x.
NVLS_CHUNK_STEPS = ((2, 16 << 10), (8, 32 << 10), (64, 64 << 10))
# NVLS-tree (multi-node): chunks of at most 64 KB from 4 nodes on (NCCL_NVLSTREE_MAX_CHUNKSIZE).
NVLS_TREE_MAX_CHUNK_4_NODES = 64 << 10
# src/graph/tuning.cc hwLat[NVLINK][NVLS][Simple] = 25 us (23 in 2.20): NCCL's latency of an NVLS call,
# which has no baseLat; hwLat[NET][NVLSTree][Simple] = 14 us per network step of the tree.
NVLS_LAT_US = 25.0
NVLS_TREE_NET_LAT_US = 14.0
# src/tuning/nvls.cc (NCCL 2.27+, the first version that states it): nvlsEfficiency[Hopper] = 0.85, and the
# bandwidth is scaled by (nChannels - 1) / nChannels.
NVLS_EFFICIENCY = 0.85
# Measured: each round of the NVLS loop (every channel's chunk of every head reduced and multicast once) ends
# with the GPUs synchronizing through the switch. The published H100 curve (Azure/AI-benchmarking-guide, ND
# H100 v5, 16 MB-8 GB) rises as the chunk size above shrinks at smaller sizes; a fixed 4 us per round
# accounts for it (bench/CALIBRATION.md checks it against every published H100 point).
NVLS_ROUND_US = 4.0

# src/device/all_reduce.h runTreeSplit: a tree block's threads split between the group that reduces up
# and the one that broadcasts down, each group moving every byte of the channel's chunks; a root's block
# runs both in one primitive on all its threads. Simple: "nthreadsSplit = nthreads/2; if (nthreadsSplit >=
# 256) nthreadsSplit += 64", LL and LL128: "(nthreads*7/(10*WARP_SIZE))*WARP_SIZE" ("Use 70% for reduce and
# 30% for bcast"); the block has the protocol's threads, and Simple 4 warps more on a tree
# (src/enqueue.cc topoGetAlgoInfo: "if (info->algorithm == NCCL_ALGO_TREE) nt += 4*WARP_SIZE").
TREE_EXTRA_WARPS = 4
WARP = 32


def tree_up_share(proto: str, threads: dict) -> float:
    """The share of a tree block's threads in its up group (the down group has the rest), by protocol:
    Simple 384 of 640 (0.6), LL 352 of 512, LL128 448 of 640 (0.7). ``threads``: the protocol's threads
    per block (:attr:`colls.runtimes.base.Target.coll_threads`)."""
    nt = threads[proto] + (TREE_EXTRA_WARPS * WARP if proto == "Simple" else 0)
    if proto == "Simple":
        split = nt // 2 + (64 if nt // 2 >= 256 else 0)
    else:
        split = (nt * 7 // (10 * WARP)) * WARP
    return split / nt

# src/enqueue.cc (NCCL 2.23, computeColl): "chunkSteps = (SIMPLE && RING) ? info->chunkSteps : 1", so a tree
# message is one slot of the connection's buffer (buffSize / NCCL_STEPS: 512 KB with Simple's default
# 4 MB), and the 8 slots hold 8 messages; the ring's Simple primitives take 4 slots. Only LL128 shrinks the
# tree's chunk for smaller calls ("nstepsLL128 = 1 + log2i(nNodes) + 0.1 * ppn").
TREE_CHUNK_STEPS = 1
# The slices a Simple message of the runtime's own kernels moves as (ProtoSimple<SlicePerChunk, StepPerSlice>,
# src/device/prims_simple.h): the ring's allreduce, allgather and reduce-scatter 2 (*_CHUNKSTEPS / *_SLICESTEPS
# = NCCL_STEPS/2 / NCCL_STEPS/4, src/include/collectives.h), as MSCCL's kernel; the tree
# (runTreeSplit<T, RedOp, ProtoSimple<1, 1>>, src/device/all_reduce.h), the ring's broadcast and reduce
# (BROADCAST_CHUNKSTEPS = BROADCAST_SLICESTEPS = 1) and point-to-point sends (runSend<ProtoSimple<1,1>>,
# src/device/sendrecv.h) 1.
TREE_SLICE_PER_CHUNK = 1
OTHER_SLICE_PER_CHUNK = 1


def tree_chunk_bytes(proto: str, nbytes: float, nchannels: int, nranks: int, nnodes: int, chunk: int) -> int:
    """The bytes of one of NCCL's tree messages for a call of ``nbytes`` on ``nchannels`` channels (NCCL's
    count: both trees of a pair), from the protocol's full ``chunk`` (src/enqueue.cc, NCCL 2.23): LL128
    halves it while each channel would move fewer than ``nstepsLL128 x 64 / ppn`` chunks (down to 128 KB),
    then fewer than ``nstepsLL128 x 16 / ppn`` (down to 32 KB)."""
    if proto != "LL128":
        return chunk
    ppn = nranks / max(nnodes, 1)
    steps = 1 + (max(nnodes, 1).bit_length() - 1) + 0.1 * ppn
    for factor, floor in ((64, 131072), (16, 32768)):
        while nbytes // (nchannels * chunk) < steps * factor / ppn and chunk > floor:
            chunk //= 2
    return chunk


# src/include/comm.h: NCCL_LL_THREAD_THRESHOLD 8, NCCL_LL128_THREAD_THRESHOLD 8, NCCL_SIMPLE_THREAD_THRESHOLD 64,
# the bytes each thread of a channel must have before a call takes another channel; src/graph/tuning.cc
# multiplies the ring's LL figure by the ranks ("threadThresholds[NCCL_ALGO_RING][NCCL_PROTO_LL] *= nRanks").
# The same in NCCL 2.12 to 2.28 and in RCCL (whose rcclUpdateThreadThreshold changes it only for tuned
# multi-node allgather and reducescatter on MI300 and later).
THREAD_THRESHOLDS = {"LL": 8, "LL128": 8, "Simple": 64}


def call_channels(nbytes: float, algorithm: str, proto: str, nranks: int, channels: int, threads: dict) -> int:
    """The channels NCCL runs a ring or tree call of ``nbytes`` on (``nBytes``: the whole buffer, as
    nccl-tests counts it) when the communicator has ``channels``: src/enqueue.cc topoGetAlgoInfo (NCCL 2.23;
    the same loop from 2.12 to 2.28) drops one channel at a time "while (nBytes < nc * nt * threadThreshold)",
    down to one. ``threads``: the protocol's threads per block (:attr:`colls.runtimes.base.Target.coll_threads`)."""
    threshold = THREAD_THRESHOLDS[proto] * (nranks if algorithm == "ring" and proto == "LL" else 1)
    per_channel = threads[proto] * threshold
    return max(1, min(channels, int(nbytes // per_channel)))

# src/graph/search.cc (NCCL 2.23): the per-channel speeds the topology search tries across nodes, highest
# first, from the first one no higher than the GPU's path to its NIC; sm90SpeedArrayInter on Hopper and later.
SPEEDS_INTER = (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2)
SPEEDS_INTER_SM90 = (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2)
# src/init.cc: the search finds at most MAXCHANNELS / 2 channels (ringGraph->maxChannels, treeGraph too)
SEARCH_MAX_CHANNELS = 16


def net_channels(nic_gbps: list, hopper: bool, copies: int) -> int:
    """``comm->nChannels`` of a ring or tree on several nodes, whose node reaches the network through NICs
    of ``nic_gbps`` each (the GPU's path to it): the search (src/graph/search.cc ncclTopoCompute) takes the
    highest speed of its list no higher than the best path and finds as many channels at that speed as the
    NICs carry (one channel takes ``speed`` of a NIC); ncclTopoDupChannels doubles them when that speed is
    25 GB/s or more, except on Hopper below 50 GB/s with more than 4 channels; ncclTopoPostset then runs
    every channel ``copies`` times (src/graph/connect.cc)."""
    speeds = SPEEDS_INTER_SM90 if hopper else SPEEDS_INTER
    best = max(nic_gbps)
    speed = next((s for s in speeds if s <= best), speeds[-1])
    found = min(SEARCH_MAX_CHANNELS, max(1, sum(int(b // speed) for b in nic_gbps)))
    if speed >= 25.0 and not (hopper and speed < 50.0 and found > 4):
        found = min(2 * found, SEARCH_MAX_CHANNELS)
    return found * copies
