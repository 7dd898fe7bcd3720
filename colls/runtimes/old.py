"""microsoft/msccl, the older runtime (NCCL 2.12).

It reads the files ``MSCCL_XML_FILES`` names, in that order, ignores a file that fails with a WARN
(``"algorithm ... failed to initialize. Will be ignored."``, ``src/graph/xml.cc``), keeps at most
``MSCCL_MAX_NUM_ALGOS`` = 4, and selects sizes in ``[minBytes, maxBytes)`` with ``maxBytes`` 128 MiB when
absent ("sufficient for now").
"""

from __future__ import annotations

from colls.runtimes.base import Target
from colls.runtimes.exe import COLLS

TARGET = Target("old", "microsoft/msccl (NCCL 2.12)", 256, 216, 32, None, None, None, 72,
                ("name", "nchunksperloop", "nchannels", "ngpus", "proto", "coll", "inplace"),
                tuple(c if c != "reducescatter" else "reduce_scatter" for c in COLLS),
                own_algorithm="NCCL's own algorithm", load_order="given", max_bytes_exclusive=True,
                default_max_bytes=1 << 27, max_files=4,
                runtime="NCCL 2.12 (microsoft/msccl)", algorithms=("ring", "tree"))   # NVLS came in 2.17
