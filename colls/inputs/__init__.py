"""Everything a user hands in: hardware profiles (:mod:`.hardware`, TACCL's JSON in :mod:`.taccl`, NCCL's
topology dumps in :mod:`.nccl_topo`), removals from a machine (:mod:`.degrade`) and sketches
(:mod:`.sketch`). Each module reads one kind of file into the project's own values and refuses bad input
with a :class:`colls.errors.CollsError` that names the file and the key."""
