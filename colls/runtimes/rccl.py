"""AMD's RCCL, whose MSCCL path uses the executor's parser (ROCm/rccl ``src/misc/msccl/``).

It reads its folder in the order ``readdir`` returns, which is not defined, so two matching files make the
choice ambiguous and a failing file makes the outcome depend on the order.
"""

from __future__ import annotations

from colls.runtimes.base import Target
from colls.runtimes.exe import ATTRS, COLLS

# RCCL's loader refuses more than MSCCL_MAX_NUM_THREAD_BLOCKS = 64 threadblocks per GPU ("MSCCL: too
# many thread blocks are requested. Max thread blocks: 64", src/include/msccl/msccl_struct.h).
# RCCL's channels per searched ring (ROCm/rccl src/init.cc, allGather3Data[rank].nc, handed to
# ncclTopoPostset as the duplication factor): 2, and 4 when every rank is on one node and the GPU is gfx90a
# (MI250): "if (nodes[GPU].count == nRanks && IsArchMatch(gcn, "gfx90a")) allGather3Data[rank].nc = 4".
SINGLE_NODE_RING_COPIES = (("MI250-GCD", 4),)
# RCCL's blocks have at most 256 threads whatever the protocol (ROCm/rccl src/include/device.h:
# NCCL_MAX_NTHREADS 256, NCCL_LL_MAX_NTHREADS and NCCL_SIMPLE_MAX_NTHREADS = NCCL_MAX_NTHREADS,
# NCCL_LL128_MAX_NTHREADS 256).
COLL_THREADS = (("LL", 256), ("LL128", 256), ("Simple", 256))

TARGET = Target("rccl", "ROCm RCCL", 64, 64, 32, 32, 4096, 1024, 72, ATTRS, COLLS,
                own_algorithm="RCCL's own algorithm", load_order="readdir",
                # RCCL 2.27.7 (ROCm 7.1-7.2) is the last release with a built MSCCL path (its CHANGELOG lists
                # the removal under RCCL 2.28.3 / ROCm 7.13); PAT is off by default there (NCCL_PAT_ENABLE 0).
                runtime="RCCL 2.27.7 (ROCm 7.1-7.2)", algorithms=("ring", "tree"),
                single_node_ring_copies=SINGLE_NODE_RING_COPIES, coll_threads=COLL_THREADS,
                # RCCL's search on several nodes (its own speeds and NIC rules) is not modelled
                net_search=False)
