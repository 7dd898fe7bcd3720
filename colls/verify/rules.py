"""Every finding the checker can make: its rule id, its pass, and what the runtime does with such a file.

A rule's *effect* is what happens at run time, read from the runtimes' own sources (Azure/msccl-executor-nccl
``src/misc/msccl/msccl_parser.cc``, ``msccl_setup.cc``, ``msccl_lifecycle.cc`` and ``src/device/msccl_kernel.cu``;
ROCm/rccl carries the same files). A rule without an effect is advice: a warning, which never makes a
file invalid. A finding may carry a different effect than its rule's default where the consequence
differs (a step offset past the loader's bound is refused at load time; one that passes the loader's check
but runs past the real buffer is undefined behaviour).
"""

from __future__ import annotations

from dataclasses import dataclass

# What the runtime does, from the worst to the least bad. The verdict names the worst one found. A file
# that will not load also stops the executor and RCCL from loading the files after it in their folder;
# undefined behaviour is an out-of-bounds access, an overflowing loader buffer or a division by zero.
LOAD = "will not load"
UNUSED = "is never used"
MISREAD = "is read differently than written"
UB = "has undefined behaviour"
HANG = "hangs"
WRONG = "computes a wrong result"
EFFECTS = (LOAD, UNUSED, MISREAD, UB, HANG, WRONG)

# The chunk states the symbolic execution keeps at most (every buffer chunk of the ranks it runs, per call it
# follows): 4 M, about half a gigabyte. A file needs more only when it declares buffers no call could fill
# (s_chunks="2147483648"); colls' 1,024-GPU hier allreduce on 128 x DGX A100 needs 139,392 on the 64 ranks
# its symmetry runs, 2,230,272 on all 1,024. Beyond it the file is not proven, and says why.
PROOF_CHUNKS = 1 << 22
# A plan's execution keeps more for each (its memory per call and pipeline unit, every access checked as it is
# made): about 1 KB a state (655,360 states: 665 MB and 14 s), so it follows a quarter as many: 1 M, about a
# gigabyte.
PLAN_PROOF_CHUNKS = 1 << 20

FORMAT, ALGO, LIMITS, STRUCTURE, COMMUNICATION, EXECUTION, SEMANTICS = (
    "format", "algo", "limits", "structure", "communication", "execution", "semantics")


@dataclass(frozen=True)
class Rule:
    family: str            # the pass that makes it (colls/verify/<family>.py; "format" is colls.msccl.parse)
    effect: str | None     # None: a warning
    text: str


RULES: dict[str, Rule] = {r_id: Rule(*spec) for r_id, spec in {
    # the loader's text format (made by colls.msccl.parse)
    "xml-declaration": (FORMAT, LOAD, "an <?xml ...?> declaration: the loader fails on it"),
    "format-doctype": (FORMAT, LOAD, "a <!DOCTYPE ...>: the loader reads it as an element that is never closed"),
    "format-tab": (FORMAT, LOAD, "a tab character: the loader accepts only spaces and line breaks"),
    "format-multiline-tag": (FORMAT, LOAD, "an element's attributes span several lines: the loader reads one line"),
    "format-single-quote": (FORMAT, LOAD, "a single-quoted value: the loader reads up to the next double quote"),
    "format-number": (FORMAT, MISREAD, "a number C strtol misreads (a leading 0 is octal); '+', hex, < -1: warnings"),
    "format-too-many-attrs": (FORMAT, MISREAD, "more than 16 attributes on an element: the loader drops the rest"),
    "format-long-value": (FORMAT, UB, "a name or value over 255 characters: the loader's buffer size"),
    "format-text": (FORMAT, LOAD, "text or a processing instruction outside the elements: the loader expects '<'"),
    "format-comment": (FORMAT, LOAD, "a comment whose first word is over 255 characters: the loader reads it as a name"),
    "unknown-element": (FORMAT, None, "an element the runtime ignores"),
    "attr-unknown": (FORMAT, None, "an attribute of gpu/tb/step the runtime ignores"),
    # <algo>
    "algo-attr-missing": (ALGO, LOAD, "an <algo> attribute the target requires is missing"),
    "coll-unknown": (ALGO, LOAD, "coll is not a collective the target knows (reduce_scatter vs reducescatter)"),
    "proto-unknown": (ALGO, LOAD, "proto is not Simple, LL128 or LL"),
    "ngpus-mismatch": (ALGO, UB, "ngpus differs from the number of <gpu> elements"),
    "never-selected": (ALGO, UNUSED, "neither inplace nor outofplace is 1"),
    "bytes-range": (ALGO, UNUSED, "minBytes > maxBytes (maxBytes != 0): no size selects the file"),
    "bytes-unreachable": (ALGO, None, "minBytes above any buffer a GPU holds: the file loads, no call selects it"),
    "machine-ranks": (ALGO, None, "ngpus is not the machine's GPU count (--hardware): its communicator never uses "
                                  "the file"),
    "chunks-per-loop": (ALGO, UB, "nchunksperloop < 1: the runtime divides by it"),
    "chunks-mismatch": (ALGO, None, "nchunksperloop does not fit the collective's shape: the result is not checked"),
    "root-fixed": (ALGO, None, "a broadcast/reduce file is right for one root only; the runtime never checks the root"),
    "root-assumed": (ALGO, None, "the root of a rooted collective was guessed"),
    # <gpu>
    "gpu-attr-missing": (STRUCTURE, LOAD, "a <gpu> attribute is missing"),
    "gpu-id": (STRUCTURE, UB, "gpu ids are not exactly 0..ngpus-1"),
    "limit-channels": (LIMITS, LOAD, "nchannels is not in [1, 32]"),
    "limit-tbs": (LIMITS, LOAD, "more thread blocks on a gpu than the target allows"),
    "limit-sms": (LIMITS, HANG, "more thread blocks on a gpu than SMs: they cannot all be resident"),
    "limit-tbs-per-channel": (LIMITS, LOAD, "more than 32 thread blocks with a send (or recv) peer on one channel"),
    "limit-elements": (LIMITS, LOAD, "a rank's loader would hold 4096 or more XML elements"),
    "limit-children": (LIMITS, UB, "an element with more than 1024 children: the loader overflows"),
    "limit-steps": (LIMITS, LOAD, "more steps in a thread block than the target allows"),
    # <tb>
    "tb-attr-missing": (STRUCTURE, LOAD, "a <tb> attribute is missing"),
    "tb-id": (STRUCTURE, LOAD, "thread block ids are not unique and contiguous from 0"),
    "tb-peer": (STRUCTURE, LOAD, "send/recv is not -1 or another gpu's id"),
    "tb-chan": (STRUCTURE, UB, "chan is not in [0, nchannels) or >= 32"),
    "conn-duplicate": (STRUCTURE, WRONG, "two thread blocks of a gpu use one (peer, direction, channel)"),
    # <step>
    "step-attr-missing": (STRUCTURE, LOAD, "a step lacks one of its ten attributes"),
    "step-index": (STRUCTURE, None, "s is not the step's position in its thread block (the kernel counts positions)"),
    "step-type": (STRUCTURE, LOAD, "type is not one of s r rcs rrs rrc rrcs cpy re nop"),
    "step-buffer": (STRUCTURE, LOAD, "srcbuf/dstbuf is not i, o or s"),
    "step-offset": (STRUCTURE, LOAD, "an offset outside [-1, n) of the declared buffer: the loader refuses it"),
    "step-bounds": (STRUCTURE, UB, "chunks [off, off + cnt) run past the buffer the call really has"),
    "step-cnt": (STRUCTURE, LOAD, "cnt is not in [1, 72) for a real step"),
    "step-no-send-peer": (STRUCTURE, LOAD, "a step sends but its thread block has send=-1"),
    "step-no-recv-peer": (STRUCTURE, LOAD, "a step receives but its thread block has recv=-1"),
    "dep-target": (STRUCTURE, HANG, "depid/deps name no step of another thread block of this gpu"),
    "dep-tb-overflow": (STRUCTURE, MISREAD, "depid > 127: the executor stores it in an int8_t"),
    "hasdep-value": (STRUCTURE, LOAD, "hasdep is not 0 or 1"),
    "hasdep-missing": (STRUCTURE, None, "a waited-on step does not publish progress: the wait lasts until a later one"),
    "nop-no-dep": (STRUCTURE, None, "a nop without a dependency: the kernel numbers later steps one lower"),
    "nop-unanchored": (STRUCTURE, LOAD, "nops carrying dependencies, then a real step that carries none"),
    "nop-trailing": (STRUCTURE, None, "nops carrying dependencies at the end of a thread block: dropped by the loader"),
    "re-fusion": (STRUCTURE, WRONG, "consecutive re steps the loader fuses have different cnt (the fused step uses the last)"),
    # communication and execution
    "conn-mismatch": (COMMUNICATION, HANG, "the cnt sequence sent differs from the one received on a connection"),
    "conn-unmatched": (COMMUNICATION, HANG, "a send without a matching receive, or a receive without a matching send"),
    "deadlock": (EXECUTION, HANG, "thread blocks that can never finish, and what each waits for"),
    "race": (SEMANTICS, WRONG, "two accesses to one chunk from different thread blocks, one a write, not ordered"),
    "step-overlap": (SEMANTICS, WRONG, "a step whose source and destination overlap without being equal"),
    "double-count": (SEMANTICS, WRONG, "a reduction counts an input twice"),
    "uninitialised-read": (SEMANTICS, WRONG, "an output holds data read from a chunk nothing had written"),
    "input-write": (SEMANTICS, WRONG, "a write to the caller's input buffer"),
    "postcondition": (SEMANTICS, WRONG, "an output chunk does not hold what the collective requires"),
    "semantics-skipped": (SEMANTICS, None, "execution checks not run because of the errors before them"),
    "correctness-unchecked": (SEMANTICS, None, "a collective the model does not cover: structure checked only"),
}.items()}


def effect_of(rule: str) -> str | None:
    r = RULES.get(rule)
    return r.effect if r else None
