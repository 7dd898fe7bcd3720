"""MSCCL++ (microsoft/mscclpp): the facts about its JSON execution plans that :mod:`colls.mscclpp` writes
by and :mod:`colls.verify.plan` checks against.

Every figure below was read in microsoft/mscclpp at commit 00668b4a (the snapshot the file paths name; its
VERSION says 0.9.x) unless another commit is given. File abbreviations:

- EC = ``src/core/include/execution_common.hpp`` (limits, the Operation struct)
- EK = ``src/core/include/execution_kernel.hpp`` (what each op does on the GPU)
- EP = ``src/core/executor/execution_plan.cc`` (the loader)
- EX = ``src/core/executor/executor.cc`` @011094ce (connections, scratch, launch)
- DSL = ``python/mscclpp/language/internal/operations.py`` (how MSCCL++'s own generator writes plans)

This module is not a :class:`~colls.runtimes.base.Target`: that registry describes MSCCL XML loaders.
"""

from __future__ import annotations

import dataclasses

from colls.runtimes import exe

NAME = "mscclpp"
DESCRIPTION = "MSCCL++ executor, JSON execution plans (format of v0.8.0 and later)"

# Versions. The JSON keys written here (``input_chunks``, ``channel_type``, ``src_buff``, ...) are the format
# the loader reads from v0.8.0 on (tag v0.8.0 = b1a88d75, "New DSL implementation", PR #579); v0.7.0 and
# earlier read camelCase keys (``inputChunks``, ``i_cids``, ...) and cannot load these files, nor can
# v0.8.0+ load theirs.
FIRST_VERSION = "0.8.0"
VERSIONS = "MSCCL++ 0.8.0 and later (current format); 0.7.0 and earlier read another format"

# Top-level keys the loader reads with ``obj[...]`` (throws when missing) and those read with
# ``obj.value(key, default)`` (EP: ExecutionPlan::Impl::Impl and loadExecutionPlan).
REQUIRED_KEYS = ("name", "collective", "protocol", "inplace", "gpus")
OPTIONAL_KEYS = {"num_threads_per_block": 1024, "min_message_size": 0, "max_message_size": 2**64 - 1,
                 "buffer_alignment": 16, "reuse_resources": False, "use_double_scratch_buffer": False}
# Per GPU: ``gpu["id"]`` must equal the rank ("GPU rank does not match"), and ``input_chunks``,
# ``output_chunks``, ``scratch_chunks``, ``channels``, ``remote_buffers``, ``threadblocks`` are read with
# ``[]`` (EP: loadExecutionPlan, parseChannels, parseRemoteBuffer, setupOperations).
GPU_KEYS = ("id", "input_chunks", "output_chunks", "scratch_chunks", "threadblocks", "channels",
            "remote_buffers")
TB_KEYS = ("id", "ops", "channels")
# The collective names of MSCCL++'s DSL (python/mscclpp/language/collectives.py).
COLLECTIVES = ("allgather", "reducescatter", "allreduce", "alltoall", "sendrecv")
# EP loadExecutionPlan: "LL" turns on packets; any other value means Simple.
PROTOCOLS = ("Simple", "LL")

# Op names the loader maps (EP getOpType); anything else throws "Invalid operation type".
OP_NAMES = ("nop", "barrier", "put", "pws", "pwsf", "get", "copy", "signal", "wait", "flush", "re", "res",
            "rre", "rres", "ppkt", "rppkt", "respkt", "cpkt", "upkt", "repkt", "recpkt", "recspkt", "glres",
            "gstore", "rlxsignal", "rlxwait", "pipeline", "sem_acquire", "sem_release")
BUFFER_TYPES = ("i", "o", "s")                         # EP convertToBufferType
CHANNEL_TYPES = ("memory", "port", "none", "switch")   # EP convertToChannelType

# Limits (EC).
MAX_OPERATIONS = 64                  # MAX_OPERATION: ops per threadblock, pipeline bodies counted (EP
                                     # setupOperations flattens them; EX throws above it)
MAX_CHANNELS_PER_TB = 16             # MAX_CHANNEL: Channels::memoryChannels[16] / portChannels[16]
MAX_CHANNELS_PER_OP = 8              # MAX_CHANNEL_PER_OPERATION: Operation::channelIndexes[8]
MAX_OPERANDS = 10                    # MAX_LOCAL_BUFFER_PER_OPERATION (2) + MAX_CHANNEL_PER_OPERATION (8)
MAX_REMOTE_BUFFERS_PER_TB = 16       # RemoteBuffers::memoryChannelBufferPtrs[MAX_CHANNEL]
MAX_BARRIERS = 16                    # MAX_DEVICE_SYNCERS: deviceSyncers[16] (EK), indexed by barrier_id
MAX_SEMAPHORES_PER_OP = 16           # MAX_DEVICE_SEMAPHORES: Operation::deviceSemaphoreIds[16]
MAX_OFFSET = 2**32 - 1               # Operation::inputOffsets / inputBufferSizes are uint32_t (EC); the
                                     # loader also computes chunk end offsets in uint32_t (EP getBufferSize)
MAX_THREADS_PER_BLOCK = 1024         # executionKernel is __launch_bounds__(1024, 1) (EK)
# What a threadblock of a plan colls writes holds (colls.mscclpp): its incoming channel's credit grants at the
# start (one signal per slot, colls.mscclpp.SLOTS = 2), then for each XML step at most 11 ops written whole
# (a semaphore acquire; a wait for the message and the credit, two when one comes over a memory channel and
# the other over a port channel, as when a step receives inside the node and sends across; a nop; the data
# ops: at most a reduce or copy into a staging slot, a nop, a copy and a put with signal; a nop and one signal
# for the credit; a semaphore release of up to MAX_SEMAPHORES_PER_OP steps waiting on it). A plan whose
# pipelined form has more ops is written whole (colls.mscclpp.plan_of). So a program whose threadblocks have
# at most PLAN_MAX_STEPS steps always makes a plan within MAX_OPERATIONS.
PLAN_GRANT_OPS = 2
PLAN_OPS_PER_STEP = 11
PLAN_MAX_STEPS = (MAX_OPERATIONS - PLAN_GRANT_OPS) // PLAN_OPS_PER_STEP
# The schedules of plans are lowered as for the MSCCL executor (the XML program is what colls proves and
# then writes as a plan), its threadblocks cut into step segments on channels of their own until every
# threadblock's plan, pipelined as colls.mscclpp.plan_of writes it, fits MAX_OPERATIONS (colls.lower.LowerOptions
# .fits, colls.mscclpp.over_budget): a ring allreduce's step takes about 8 ops pipelined (257 for 31 steps, 226
# whole), so its threadblocks hold 6 to 7 steps; a one-step segment always fits, so the cutting ends. A step is at least one
# op: more than PLAN_STEP_BOUND steps never fit. Cut for the whole (unpipelined) form instead, a 2 x DGX A100
# ring allreduce took 1.59 times its XML file at 1 GB (each hop waits for whole 2 MiB messages).
PLAN_STEP_BOUND = MAX_OPERATIONS - PLAN_GRANT_OPS
# The segments' channels: a plan has no count of channels per GPU (EP reads each GPU's "connected_to" list
# whole; the limits are per threadblock, MAX_CHANNELS_PER_TB of each type, which the writer checks), and the XML
# program's channel numbers only group its connections, so the lowering is not held to the executor's 32. A
# GPU's threadblocks bound them in practice (every channel holds one at each end); 256 bounds the segment search.
# The 2 x DGX A100 ring allreduce above: 2 copies of 8 rings cut into 6 segments, 96 channels and threadblocks.
PLAN_MAX_CHANNELS = 256
# What colls proves of a plan (colls.verify.plan) follows both calls' threadblocks with a vector clock each, so its
# memory grows with the square of the plan's threadblocks in all (GPUs x threadblocks a GPU): 32 GPUs x 96 took
# 1.3 GB and 21 s with 64-bit clocks, 0.53 GB and 12 s with 16-bit ones (colls verify on 4 x DGX A100's ring
# allreduce plan, 2026-11-28), and 128 x 100 (16 x DGX A100's ring allreduce cut for plans) passed 18 GB. Programs
# for plans hold at most this many in all (colls.tune.compile_for_plans), so every plan colls writes is proved
# within 2 GB; the proof holds itself to the clocks of that many (colls.verify.plan.proved_plan: max_clocks). A
# plan whose GPUs run one plan relabelled is proved on one orbit (colls.verify.plan_symmetry): only its
# threadblocks run, each with a clock of every threadblock, (orbit x T) x (GPUs x T) entries for T a GPU.
PLAN_PROOF_THREADBLOCKS = 3072
# The fewest ops a step takes in a threadblock's pipelined plan (colls.mscclpp._tb_plan), which every program
# colls lowers for plans fits within MAX_OPERATIONS (colls.tune.compile_for_plans takes the XML program only when
# its pipelined plan fits; otherwise the lowering cuts until it does: colls.lower.LowerOptions.fits). A step that
# receives: the pipeline op (counted beside its body, EP setupOperations), the wait for each slice, the nop that
# orders that wait before the data, its data op, and the signal that frees its slot for the next message (a
# grant before the threadblock's first step for the first SLOTS messages of a connection, a credit after the
# step for the others: one each either way) (5). One that sends: the wait for the message's credit before the
# pipeline, the pipeline, a nop, its put (memory channel) or copy into staging (port), then a nop and the signal
# (memory) or a nop and the port's put with signal (6). One that receives and sends (a relay): both waits, the
# pipeline, a nop, its data op, then a nop and the signal or the port's put with signal, and its slot's signal
# (8: a relay's sum rides one ``res`` over a memory channel; every other relay takes more). tests/test_mscclpp.py
# checks each threadblock's ops against the sum of these over its steps. So a threadblock holds at most
# MAX_OPERATIONS / 5 steps that send or receive and MAX_OPERATIONS / 8 relays, and a rank's steps over those
# refuse a count of rings before it is lowered (colls.synth.ring.fits), as a program's steps over 64 ops a
# threadblock refuse it before the lowering cuts it (colls.mscclpp.least_threadblocks).
PLAN_RECEIVE_STEP_OPS = 5
PLAN_SEND_STEP_OPS = 6
PLAN_RELAY_STEP_OPS = 8
PLAN_REMOTE_STEP_OPS = min(PLAN_RECEIVE_STEP_OPS, PLAN_SEND_STEP_OPS)
LOWERING = dataclasses.replace(exe.TARGET, name="mscclpp", description="MSCCL++ execution plans (0.8 and later)",
                               max_steps=PLAN_STEP_BOUND, max_channels=PLAN_MAX_CHANNELS,
                               max_remote_steps=MAX_OPERATIONS // PLAN_REMOTE_STEP_OPS,
                               max_relay_steps=MAX_OPERATIONS // PLAN_RELAY_STEP_OPS, max_dep_tb=None)
BUFFER_ALIGNMENT = 16                # default buffer_alignment (EP); offsets are in these units
# With reuse_resources the executor's own 128 MiB buffer is the scratch (EX defaultScratchBufferSize =
# 1 << 27) and chunks beyond PREDFINED_SCRATCH_SIZE = 64 MiB (EC) wrap; colls never sets reuse_resources,
# so the scratch is allocated for the plan at chunk x scratch_chunks bytes (EX setupScratchBuffer,
# EP calScratchBufferSize) and only the uint32 offsets bound it.
DEFAULT_SCRATCH_BYTES = 1 << 27
PREDEFINED_SCRATCH_BYTES = 1 << 26

# The ``pipeline`` op (EK handlePipeline; EP setupOperations, setupOperation; EC struct Operation). The loader
# stores a pipeline's body right after it (setupOperations: the body counts toward MAX_OPERATION) and sets
# unitSize = iter_context.unit_size (bytes) and nIterations = ceil(num_chunks x chunk / unit_size), the chunk
# being getUpperBoundChunkSize (setupOperation). The kernel runs the body nIterations times; iteration i runs
# every body op with offset = i x unit_size added to *every* operand's offset, local and remote, and each data
# op moves min(size - offset, unit_size) bytes of its operand (handleCopy, handlePut, handleReduceSend). Every
# other op runs whole in every iteration: a ``signal``/``wait``/``sem_*`` in a body signals, waits, releases
# or acquires once per iteration (handleSignal/handleWait ignore the offset), and channel semaphores count
# (include/mscclpp/semaphore_device.hpp: wait() raises the expected token by one and polls until the inbound
# token reaches it), so a body's wait consumes exactly one signal per iteration. MSCCL++'s own generator puts
# signals, waits and semaphore ops inside pipelines (python/mscclpp/language/internal/operations.py
# PipelineOperation, add_data_sync recursing into its operations). Consequences colls relies on:
# - a slice lands at the same offset inside the destination as in the source, so a scratch slot must hold the
#   whole message (slots cannot hold slices unless reuse_resources wraps scratch offsets, which colls never sets);
# - the size is uint32 and ``size - offset`` wraps when an operand is shorter than the iterations cover, so
#   every body operand must be num_chunks chunks (then the last offset is below the operand's size: the executor
#   runs only sizes whose chunks are equal, EP checkMessageSize);
# - handlePipeline reads nIterations into a uint16_t; reductions index 16-byte int4 vectors from offset / 16
#   (handleReduceSend), so unit_size must be a multiple of 16.
PIPELINE_MAX_ITERATIONS = 2**16 - 1
PIPELINE_UNIT_ALIGNMENT = 16
# The slice colls pipelines by: 1 MiB, the unit of MSCCL++'s own pipelined plans (python/mscclpp/language/
# tests/single_node/allreduce_pipeline.py LoopIterationContext(unit=2**20, ...); test/executor-tests/
# execution-plans/reduce_nvls_pipeline.json "unit_size": 1048576), half the MSCCL executor's Simple slice (2 MiB,
# colls.verify.execution.chunk_effective_bytes).
PIPELINE_UNIT_BYTES = 1 << 20
# The units a plan may be pipelined by, the default first: colls times a schedule's plan at each (and
# unpipelined) and writes the fastest (colls.simulate.plans.fastest_slice). A larger unit pays fewer messages'
# fixed costs (a signal and a wait, on a port channel the proxy's), a smaller one fills a chain of hops sooner;
# which wins depends on the schedule and the call size. 512 KiB keeps a 4 GiB operand within 8,192 iterations.
PIPELINE_UNITS = (PIPELINE_UNIT_BYTES, 1 << 19, 2 << 20, 4 << 20)

# Packets: the LL protocol (EK @00668b4a handlePutPackets, handleReadPutPackets, handleUnpackPackets,
# handleCopyPackets, handleReduceSendPackets, handleReduceCopySendPackets; include/mscclpp/packet_device.hpp
# @00d00b6c). A packet carries data and the call's flag in one store (LL16Packet: 16 bytes {data1, flag1,
# data2, flag2}, 8 of data; LL8Packet {data, flag}, 4 of 8), so a packet in scratch takes twice its data's
# bytes: every packet operand's offset is doubled by the kernel (``offset << 1``), the loader's are data
# offsets, and an LL plan's scratch is 2 x chunk x scratch_chunks bytes (EP calScratchBufferSize; x2 more with
# use_double_scratch_buffer). A packet op that reads packets polls every packet until its flag is the call's
# (LLPacket::read spins; no timeout in release builds), so packets need no signal or wait; one that writes
# stamps the call's flag. All threads of the block take part, strided by thread. What each op reads and writes:
# - ppkt: src raw (local) -> packets in each dst (remote scratch); memory channels. Over a port channel the
#   kernel puts src as if it were packets already and names the source memory without the context's base
#   (localMemoryIdBegin_ is not added, unlike handlePut): refused (colls.verify.plan);
# - rppkt: packets of src[0] (local scratch, polled) -> packets in each dst (remote scratch); over a port
#   channel all threads poll, then one thread per channel has the proxy put the packets (no signal follows);
# - cpkt: src raw -> packets in dst (local); upkt: packets of src (local scratch, polled) -> raw dst;
# - repkt: src[0] raw + packets of src[1:] (always read from local scratch, whatever their type says) -> raw
#   dst[0]; respkt also writes the sum as packets to dst[1:] (remote scratch, memory channels only);
# - recpkt: as repkt, and a local packet copy in dst[1]; recspkt: and packets to dst[2:] (remote, memory).
# Packet handlers take no pipeline offset (handlePipeline passes one; they ignore it): a pipeline would move
# the whole operand in every iteration, so packet ops are never pipelined.
# The flag (EX @011094ce Executor::Impl::launchKernel): ``static uint32_t flag = 0`` incremented on every
# execute() of the process, whatever the plan; with use_double_scratch_buffer an odd flag uses the scratch's
# lower half, an even one the upper (launchKernelHelper: scratchOffset = scratchBufferSize >> 1), and a
# sender adds its own scratchOffset_ to the peer's address, so every rank's scratch must be the same size.
# The scratch is zeroed when allocated (GpuBuffer) and the first flag is 1, so no packet is read before it is
# written. Under CUDA graph capture the flag is a kernel argument frozen at capture: every replay writes and
# polls the same flag into the same half, so a replay can read the previous replay's packets as its own. colls
# says so wherever it writes a packet plan (ROCm/TheRock issue 7871 reports wrong LL allreduce results under
# graph capture with MSCCL++ on, in RCCL's embedded copy).
# Which packet runs is the caller's choice, not the plan's: Executor::execute takes a PacketType (default LL16,
# include/mscclpp/executor.hpp); MSCCL++ 0.8's NCCL API library asks LL8 for allreduce and the default for the
# others (apps/nccl/src/nccl.cu). Both take twice the data's bytes, so a plan's scratch and offsets are the same.
PACKET_OPS = frozenset({"ppkt", "rppkt", "cpkt", "upkt", "repkt", "respkt", "recpkt", "recspkt"})
PACKET_REDUCE_OPS = frozenset({"repkt", "respkt", "recpkt", "recspkt"})     # src[0] data + packets, summed


def packet_operands(op: dict) -> tuple[range, range]:
    """The positions of an op's src_buff and dst_buff operands that are packets (the list above); the others
    are data."""
    name = op["name"]
    ns, nd = len(op.get("src_buff") or []), len(op.get("dst_buff") or [])
    if name in ("ppkt", "cpkt"):
        return range(0), range(nd)
    if name == "rppkt":
        return range(min(ns, 1)), range(nd)
    if name == "upkt":
        return range(ns), range(0)
    if name in PACKET_REDUCE_OPS:
        return range(1, ns), range(1, nd)
    return range(0), range(0)
PACKET_SCRATCH_FACTOR = 2           # bytes of packet per byte of data (LL16 and LL8 alike)
PACKET_REMOTE_MEMORY_ONLY = frozenset({"respkt", "recspkt"})
PACKET_GRAPH_HAZARD = ("a packet plan must not run under CUDA graph capture: the executor's per-call flag is "
                       "frozen in the captured launch, so a replay can read the previous replay's packets")


# Which threads run an op (EK handle*): signal/wait/flush/sem ops and port-channel puts run on threads
# tid < (number of channels, operands or semaphores); copies, reductions and memory-channel puts are
# spread over all threads of the block. ``nop`` is __syncthreads() (EK handleNop) and ``barrier`` starts
# with one (DeviceSyncer::sync). MSCCL++'s generator separates the two kinds with a nop (DSL
# add_data_sync: a nop before a signal, after a wait, around sem_acquire/sem_release).
THREAD0_OPS = frozenset({"signal", "wait", "rlxsignal", "rlxwait", "flush", "sem_acquire", "sem_release"})
ALL_THREAD_OPS = frozenset({"copy", "re", "res", "rre", "rres", "get"})

# Hazards read in EK (not run on hardware):
# - ``pws`` on a *memory* channel only copies: handlePut returns after the copy without signalling, so a
#   memory-channel put needs its own ``signal``.
# - ``pwsf`` passes ``(uint64_t)srcOffsets`` (the address of the offsets array) as the source offset to
#   putWithSignalAndFlush, so it reads from the wrong place: never written, refused by the verifier.
# - ``get`` copies with the source and destination offsets swapped (handleGet): refused unless they equal.
# - ``flush`` loops over ``op.nOutputs``, which is 0 for a flush, so it flushes nothing.
# - ``reduce_op`` is never read by the loader; the kernels sum (OpType = SUM defaults): non-sum reductions
#   are refused.
UNSAFE_OPS = {"pwsf": "its source offset is the address of the offsets array (execution_kernel.hpp handlePut)",
              "flush": "it loops over op.nOutputs, 0 for a flush, so it flushes nothing (execution_kernel.hpp)"}
REDUCE_OPS = ("sum",)

# Channel pairing (EX setupConnections): each element of a GPU's ``connected_to`` lists is one connection,
# tagged by a per-peer counter over memory channels first, then port channels; the k-th channel from A to
# B therefore pairs with the k-th from B to A. Unmatched extras are created by the loader (EP
# getUnpairedChannelInfos) and never used by an op.

# --------------------------------------------------------------------------------------------------
# How a job loads plans (colls compile --target mscclpp writes for both)
# --------------------------------------------------------------------------------------------------
# MSCCL++ 0.8.x (the only release that both reads this format and scans a folder): libmscclpp_nccl.so,
# preloaded in place of NCCL, loads every file of MSCCLPP_EXECUTION_PLAN_DIR at ncclCommInitRank and runs the
# first plan of the call's collective with min_message_size <= bytes < max_message_size (half-open) and the
# call's in-place flag (apps/nccl/src/nccl.cu @b1a88d75 loadExecutionPlan/planKey; @11e62024 L406-417).
# Calls no plan takes go to the real NCCL named by MSCCLPP_NCCL_LIB_PATH once MSCCLPP_ENABLE_NCCL_FALLBACK is
# TRUE; MSCCLPP_FORCE_NCCL_FALLBACK_OPERATION lists the collectives sent there whatever the plans (default
# "all": every collective without a plan) (docs quickstart, "NCCL API" section, v0.8.0 era; nccl.cu
# mscclppNcclDlopenInit reads MSCCLPP_NCCL_LIB_PATH).
PLAN_DIR_ENV = "MSCCLPP_EXECUTION_PLAN_DIR"
NCCL_SHIM = "libmscclpp_nccl.so"
FALLBACK_ENV = {"MSCCLPP_ENABLE_NCCL_FALLBACK": "TRUE", "MSCCLPP_FORCE_NCCL_FALLBACK_OPERATION": None,
                "MSCCLPP_NCCL_LIB_PATH": None}
SHIM_VERSIONS = "0.8.x"
# Current MSCCL++ (after PR #620; the variable was renamed MSCCLPP_CACHE_DIR in PR #733) scans no folder: a
# plan is an Algorithm built from ExecutionPlan(path, rank) with a Constraint(world_size, n_ranks_per_node)
# (python/mscclpp/_core/compiler.py DslCompiler.compile does exactly this for the plans it writes) and
# registered on the AlgorithmCollectionBuilder singleton before the communicator is created; a selector
# set with set_algorithm_selector(fn) gets (algorithms[collective][name], request) and returns an Algorithm
# or None (python/mscclpp/ext/algorithm_collection_builder.py; examples/torch-integration/
# dsl_with_nccl_api.py). Without the selector, DSL plans match by world size, ranks per node, collective,
# buffer mode and min <= size <= max (inclusive; allgather's size times the world size) (src/ext/nccl/
# algorithm_selector.cc, src/core/algorithm.cc @1f5f065d).
CURRENT_VERSIONS = "main since PR #620, 2025-10"

# --------------------------------------------------------------------------------------------------
# Costs of a plan (colls.simulate.plans), each from a published MSCCL++ figure or, where MSCCL++ publishes
# none, the NCCL executor's figure of colls.runtimes.costs, said so
# --------------------------------------------------------------------------------------------------
# One-way signal -> wait on a memory channel: the semaphore ping-pong between two H100s takes 2.595 us per
# round trip with the store-based signal() of the releases this format targets (2.345 us with the later
# red.release signal; mp_unit SemaphorePerfTest.SignalPingPong, microsoft/mscclpp branch
# chhwang/new-atomic-add, "Performance (H100, 2 ranks, signal+wait round-trip)"): 1.3 us one way, of which
# the hardware profiles' NVLink route latency already carries 0.3 us. What is left is a message's fixed
# cost in a threadblock (the wait, the signal, the __syncthreads around them). Measured on H100 only; used
# for every GPU.
SIGNAL_WAIT_US = 2.595 / 2
STEP_US = 1.0                       # SIGNAL_WAIT_US less the 0.3 us NVLink route latency, rounded
# The kernel's fixed cost: the memory-channel tutorial's bidirectional put between two H100s, one
# graph-launched kernel per iteration (start, a signal/wait handshake, a 1 KiB put, a signal and a wait),
# takes 6.55 us at 1 KiB (docs/tutorials/03-memory-channel.md, "GPU 0: bytes 1024, elapsed 0.00654806
# ms/iter"; the page says it is no benchmark). Less its two signal -> wait exchanges (2 x 1.3 us): 4 us.
KERNEL_US = 4.0
# A port channel (cross-node) message: the GPU pushes a request into the proxy's FIFO (about 2 us per
# trigger on H200, microsoft/mscclpp pull request 864), the host proxy posts the transfer and the signal.
# The port-channel tutorial's iteration (a signal/wait handshake and a putWithSignal + wait, both through the
# proxy) takes 20.49 us at 1 KiB (docs/tutorials/04-port-channel.md, "[Bidir PutWithSignal] bytes 1024,
# elapsed 0.0204875 ms/iter") against 6.55 us for the same exchange over a memory channel: 14 us more for two
# proxied messages, 7.0 us each, on top of the route's own latency (the engine's net_step_us).
PORT_PROXY_US = (20.49 - 6.55) / 2
# A packet message (the LL protocol) has no fixed cost of its own: the packets carry the flag, so there is no
# signal, no wait and no fence (execution_kernel.hpp handlePutPackets writes them, the receiver's op polls
# them as they land); what it pays is the route's latency, which the hardware profile carries, and twice the
# bytes on the wire (colls.runtimes.costs DATA_FRACTION["LL"]). Its threadblock copies packets at the rate NCCL's
# tuning gives LL (colls.runtimes.costs tb_gbps["LL"], from llMaxBws: MSCCL++ publishes no LL figure of its own).
PACKET_STEP_US = 0.0
# A threadblock's copy rate with 1,024 threads: MSCCL++ publishes no per-threadblock figure (its tutorials
# time 32 or more blocks together, bound by the link), so the NCCL executor's per-channel figure of the GPU's
# family is used (colls.runtimes.costs tb_gbps["Simple"]: NCCL's perChMaxTreeBws, e.g. 24 GB/s on A100).
# The host's part of a call (kernel launch from a stream, or nothing under a CUDA graph): MSCCL++ publishes no
# figure apart from NCCL's; the NCCL executor's measured figure is used (colls.runtimes.costs host_us).
