"""The MSCCL executor for NCCL (Azure/msccl-executor-nccl, built on NCCL 2.23.4: ``makefiles/version.mk``).

Its loader is ``src/misc/msccl/msccl_parser.cc``; its limits are the constants of
``src/include/msccl/msccl_struct.h``. It reads every regular file and symbolic link of ``MSCCL_ALGO_DIR`` in
sorted path order (``mscclInternalSchedulerInit`` in ``src/misc/msccl/msccl_lifecycle.cc`` keeps the names in
a ``std::set<std::string>``) and stops at the first file that fails to load.
"""

from __future__ import annotations

from colls.runtimes.base import Target

# The `coll` spellings the parser knows, and the <algo> attributes it requires.
COLLS = ("allgather", "reducescatter", "allreduce", "alltoall", "broadcast", "reduce",
         "gather", "scatter", "send", "recv", "alltoallv")
ATTRS = ("nchunksperloop", "nchannels", "ngpus", "proto", "coll", "minBytes", "maxBytes",
         "inplace", "outofplace")

TARGET = Target("exe", "MSCCL executor for NCCL 2.23", 64, 1024, 32, 32, 4096, 1024, 72, ATTRS, COLLS,
                own_algorithm="NCCL's own algorithm", load_order="sorted",
                # makefiles/version.mk: NCCL 2.23.4. NVLS arrived in NCCL 2.17; PAT (2.23) runs only with one
                # GPU per node (src/graph/tuning.cc ncclPatEnable), which no shipped profile has.
                runtime="NCCL 2.23.4", algorithms=("ring", "tree", "nvls"))
