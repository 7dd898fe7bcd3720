"""AMD's RCCL, whose MSCCL path uses the executor's parser (ROCm/rccl ``src/misc/msccl/``).

It reads its folder in the order ``readdir`` returns, which is not defined, so two matching files make the
choice ambiguous and a failing file makes the outcome depend on the order.
"""

from __future__ import annotations

from colls.runtimes.base import Target
from colls.runtimes.exe import ATTRS, COLLS

# RCCL's loader refuses more than MSCCL_MAX_NUM_THREAD_BLOCKS = 64 threadblocks per GPU ("MSCCL: too
# many thread blocks are requested. Max thread blocks: 64", src/include/msccl/msccl_struct.h).
TARGET = Target("rccl", "ROCm RCCL", 64, 64, 32, 32, 4096, 1024, 72, ATTRS, COLLS,
                own_algorithm="RCCL's own algorithm", load_order="readdir")
