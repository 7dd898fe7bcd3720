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

# src/enqueue.cc (NCCL 2.23, computeColl): "chunkSteps = (SIMPLE && RING) ? info->chunkSteps : 1", so a tree
# message is one slot of the connection's buffer (buffSize / NCCL_STEPS: 512 KB with Simple's default
# 4 MB), and the 8 slots hold 8 messages; the ring's Simple primitives take 4 slots. Only LL128 shrinks the
# tree's chunk for smaller calls ("nstepsLL128 = 1 + log2i(nNodes) + 0.1 * ppn").
TREE_CHUNK_STEPS = 1


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
