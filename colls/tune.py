"""A method's file sized by the runtime, not by the links alone: the count a method would choose by its
bandwidth model, against the smaller counts, each simulated on the runtime (:mod:`colls.simulate`); the
fastest is the file.

Why. The trees method picks the fewest trees per GPU that reach the best rate of its link model; more trees
raise that rate by a few percent, but every tree moves its chunk as whole messages hop by hop, and trees
that share a lane (the runtime's threadblocks are few: RCCL loads 64 per GPU) run one after another. On
2 x MI250 (32 GCDs, RCCL) the link model's best, 8 trees per GPU (97.7 % of the link optimum), simulates at
38.5 GB/s busbw at 1 GB, one tree per GPU (a few percent less in the link model) at 228. So the count is
chosen where it shows: the simulated time.

What is compared. Powers of two of trees per GPU from one up, each made as ``colls synth`` makes it,
simulated at :data:`SIZES` (16 MB and 256 MB: sizes where the count matters and every such file is run by the
runtime; Simple, out-of-place), doubling while each doubling is faster, and the link model's choice (a power of
two, see :func:`colls.pipeline.compile_schedule`) when every doubling below it was; the least geometric mean of
the times wins, the link model's choice on a tie. A count the target cannot load ends the search, and one whose
proven lower bound at the last size leaves it no chance is not simulated there. ``trees_per_gpu`` given: that
count, as asked.

This module sits above :mod:`colls.pipeline` and :mod:`colls.simulate` (both below it, neither imports it):
``colls synth``, ``colls compile`` and the benchmarks call :func:`compile_fastest` for a method's default file.
"""

from __future__ import annotations

import math

from colls import lower as lowering, pipeline
from colls.errors import CollsError, LimitError
from colls.simulate.baseline import Fastest, runtime_blocks
from colls.synth import trees
from colls.sizes import size_text
from colls.verify.execution import chunk_effective_bytes

SIZES = (16 << 20, 256 << 20)


def compile_fastest(topology, collective, method: str, *, options: dict | None = None, instances: int | None = None,
                    tune_depth: bool = True, fits=None, **settings):
    """:func:`colls.pipeline.compile_schedule`, with the count of trees per GPU chosen by simulated time
    (module docstring) when the method is trees and no count was given, the copies of the schedule
    (``instances``) too when none were given (:func:`_fastest_copies`), and then the depth of the pipeline
    through the schedule (chunks a tree, pieces a direct block: :func:`deepest`) when ``tune_depth`` and no
    depth was given (``colls synth --chunks`` given: the chunk factor asked for, not tuned); ``fits``: whether
    a deeper file may be taken (an MSCCL++ plan: its ops per threadblock); a file of one copy that does not fit
    is returned as it is, neither copied nor deepened (both only add to its threadblocks' work)."""
    options = dict(options or {})
    settings["instances"] = instances or 1
    count = not (method != "trees" or options.get("trees_per_gpu") or collective.kind in ("broadcast", "reduce")
                 or trees.k_candidates(topology, collective)[0] <= 1)     # one tree per GPU: nothing to compare
    deepen = tune_depth and deepens(method, collective.kind) and "depth" not in options
    pair = pairs(method, collective.kind) and "pair_leaves" not in options
    if not count and instances is not None and not deepen and not pair:
        return pipeline.compile_schedule(topology, collective, method, options=options, **settings)
    unproved = dict(settings, in_memory=True, prove=False)      # simulated only; the one chosen is proved after
    if count:
        chosen, facts, score, timer, times = _fastest_count(topology, collective, method, options, unproved, fits)
    else:
        chosen = pipeline.compile_schedule(topology, collective, method, options=options, **unproved)
        facts, score, timer, times = {}, None, None, None
    grows = fits is None or fits(chosen)    # copies, depth and pairs only add to its threadblocks: none would fit
    grow = dict(copies=instances is None and grows, deepen=deepen and grows)
    fewer = chosen.fewer_rings if method == "ring" and "rings" not in options else None
    chosen, grown, score = _grown(chosen, topology, collective, method, options, unproved, fits, score, timer,
                                  times, **grow)
    if fewer and grows:
        chosen, grown, score = _fewer_rings(chosen, grown, score, fewer, topology, collective, method, options,
                                            unproved, fits, grow)
    if pair and grows:
        chosen, grown = _paired_or_not(chosen, grown, score, topology, collective, method, options, unproved, fits,
                                       grow)
    facts.update(grown)
    result = _as_asked(chosen, settings)
    result.facts.update(facts)
    return result


def _as_asked(chosen, settings: dict):
    """``chosen`` (made in memory, not proved, to be simulated) emitted and proved as ``settings`` ask."""
    if settings.get("in_memory") and not settings.get("prove", True):
        return chosen           # already made so: in memory, not proved
    return pipeline.proved(chosen, progress=settings.get("progress"), in_memory=settings.get("in_memory", False),
                           prove=settings.get("prove", True))


def pairs(method: str, kind: str) -> bool:
    """Whether ``method``'s file of ``kind`` may pair leaves (:func:`colls.synth.trees._pair_leaves`)."""
    return method == "trees" and kind in ("reducescatter", "reduce", "allreduce")


def _grown(chosen, topology, collective, method, options: dict, unproved: dict, fits, score, timer, times, *,
           copies: bool, deepen: bool) -> tuple:
    """``chosen`` with its copies (:func:`_fastest_copies`) and then its depth (:func:`deepest`) chosen, as asked:
    (the file, the facts that say what was tried, its score at :data:`SIZES` or None when not known). Where the
    fastest copies are packed (a peer's sends and receives on one threadblock) and the fastest unpacked copies
    are fewer, both are made deeper (when asked) and the packed file is taken only when then still
    :data:`COPIES_GAIN` faster, and not slower at :data:`PACKED_HOLD` (:func:`_unpacked_wins`): packing serializes
    what deeper files overlap (1 x dgx2 direct allreduce: 4 packed copies beat 2 at one piece a block, 1,510
    against 2,335 us, but no deeper file of them was faster, and 2 copies at 8 pieces took 1,285)."""
    facts: dict = {}
    own = None                  # the fastest copies of threadblocks of their own, when packed ones were faster
    if copies:
        chosen, more, score, times, own = _fastest_copies(chosen, topology, score, timer, times)
        facts.update(more)
    more = {}
    grown = chosen
    if deepen:
        grown, more = deepest(chosen, topology, collective, method, options, unproved, score, fits, hold=True,
                              times=times)
    if own is not None:         # copies and depth both cut a threadblock's work: the deeper of each may win
        o_file, o_facts, o_score = own
        o_grown, o_more = o_file, {}
        if deepen:
            o_grown, o_more = deepest(o_file, topology, collective, method, options, unproved, o_score, fits,
                                      hold=True)
        why = _unpacked_wins(grown, _deepened_score(grown, more, score), o_grown,
                             _deepened_score(o_grown, o_more, o_score), topology, deepen)
        if why:
            o_facts["copies_note"] = (f"{o_facts.get('copies_note', 'one copy of the schedule')}; "
                                      f"{chosen.facts['instances']} copies, a peer's sends and receives packed on "
                                      f"one threadblock to fit, {why}")
            facts.update(o_facts)
            grown, more, chosen = o_grown, o_more, o_file
    facts.update(more)
    if grown is not chosen:
        chosen, score = grown, None
    return chosen, facts, score


# The call size at which copies packed on shared threadblocks must not be slower than those with their own: the
# packed threadblock sends and receives one after another, and where its copy rate binds (the large calls) that
# loses what the extra channels gained at the middle sizes (1 x dgx-h100 direct allgather: 16 packed copies on
# 132 threadblocks, 16 MB 194 -> 210 GB/s algbw, 1 GB 398 -> 380, against 8 copies on 120, while relays
# forwarded whole messages).
PACKED_HOLD = 1 << 30


def _unpacked_wins(packed, p_score, own, o_score, topology, deepened: bool) -> str:
    """Why the file whose copies have threadblocks of their own (``own``, score ``o_score``) is taken over the one
    whose copies share them (``packed``, ``p_score``), both with their depth chosen when ``deepened``; "" when
    the packed one is taken: at least :data:`COPIES_GAIN` faster at :data:`SIZES` (it holds more of the GPU) and
    not slower by that at :data:`PACKED_HOLD`."""
    if p_score is None or (o_score is not None and p_score >= o_score * (1 - COPIES_GAIN)):
        return (f"not {COPIES_GAIN:.0%} faster once both were made deeper" if deepened else
                f"not {COPIES_GAIN:.0%} faster")
    p_large, o_large = (_time_at(_timer(f, topology), PACKED_HOLD) for f in (packed, own))
    if p_large is None or (o_large is not None and p_large > o_large * (1 + COPIES_GAIN)):
        return f"slower at {size_text(PACKED_HOLD)}"
    return ""


def _deepened_score(deeper, facts: dict, score: float | None) -> float | None:
    """The score at :data:`SIZES` of ``deeper``, the file :func:`deepest` returned with ``facts`` from a file whose
    score was ``score``."""
    tried = facts.get("depth_tuned", {}).get("geomean_us", {})
    return tried.get(str(deeper.schedule.info.get("depth", 1)), score)


def _fewer_rings(chosen, facts: dict, score, fewer: int, topology, collective, method, options: dict, unproved: dict,
                 fits, grow: dict) -> tuple:
    """``chosen`` (a ring file whose count the link model grew from ``fewer`` on one node, copies and depth chosen;
    ``facts`` say how, ``score`` its score when known) or the file of ``fewer`` rings, its copies and depth chosen
    the same way, whichever simulates faster at :data:`SIZES` (geometric mean; a tie keeps the link model's).
    Where 7 rings would divide no call, the ring count doubles while the link model does not fall; more rings
    spread the links' load evenly, and fewer rings with their copies hold as many threadblocks, each copy a
    share of every chunk: on 8 NDv2 32 rings (allgather 113 GB/s busbw at 1 GB against 8 rings at 4 copies,
    104) win every collective (they lost broadcast's 256 MB while relays forwarded whole messages, not the
    kernel's slices). Returns (file, facts, score)."""
    opts = dict(options, rings=fewer)
    try:
        other = pipeline.compile_schedule(topology, collective, method, options=opts, **unproved)
    except CollsError:
        return chosen, facts, score
    if fits is not None and not fits(other):    # not a plan's: nothing to compare
        return chosen, facts, score
    mine = score if score is not None else _score(_timer(chosen, topology))
    other, o_facts, theirs = _grown_rival(other, opts, mine, topology, collective, method, unproved, fits, grow)
    rings = chosen.schedule.info["rings"]
    sizes = " and ".join(size_text(s) for s in SIZES)
    if theirs is None or (mine is not None and mine <= theirs):
        facts["count_note"] = (f"{rings} rings: faster simulated at {sizes} than {fewer}, each with its copies, "
                               "where the link model grew")
        return chosen, facts, mine
    o_facts["count_note"] = (f"{fewer} rings: faster simulated at {sizes}, with {other.facts['instances']} copies, "
                             f"than the {rings} the link model grew to")
    return other, o_facts, theirs


def _grown_rival(rival, opts: dict, beat: float | None, topology, collective, method, unproved: dict, fits,
                 grow: dict) -> tuple:
    """``rival`` (the other file a choice compares, made with ``opts``, which ``fits`` takes) with its copies and
    depth chosen as the file it is compared with had them (``grow``), and its score at :data:`SIZES` (None where
    it cannot be below ``beat``, :func:`_score`): (file, facts, score)."""
    rival, facts, score = _grown(rival, topology, collective, method, opts, unproved, fits, None, None, None, **grow)
    if score is None:
        score = _score(_timer(rival, topology), beat)
    return rival, facts, score


def _paired_or_not(grown, facts: dict, score, topology, collective, method, options: dict, unproved: dict, fits,
                   grow: dict) -> tuple:
    """``grown`` (a trees reduction with its copies and depth chosen, not proved; ``facts`` say how, ``score``
    its score when known) or the same trees with their leaves paired (:func:`colls.synth.trees._pair_leaves`),
    its copies and depth chosen the same way, whichever simulates faster at :data:`SIZES` (geometric mean; a tie
    keeps the trees as packed). The two files differ at first in nothing but a vertex's chain of additions, yet
    which is faster depends on the machine and on the copies and depth each then takes (on 2 x DGX A100 the
    paired reduce-scatter; on 2 x DGX H100, paired at one copy was faster at those sizes, and as packed with
    its 2 copies and 8 chunks a tree, faster still): so both are grown before they are compared. Returns
    (file, facts)."""
    opts = dict(options, trees_per_gpu=grown.schedule.info["k"], pair_leaves=True)
    try:
        paired = pipeline.compile_schedule(topology, collective, method, options=opts, **unproved)
    except CollsError:
        return grown, facts
    moved = paired.schedule.info.get("leaves_paired", 0)
    if not moved or (fits is not None and not fits(paired)):
        return grown, facts
    if score is None:
        score = _score(_timer(grown, topology))
    if score is None:                   # not run by the runtime at the sizes compared: nothing to compare
        return grown, facts
    paired, more, p_score = _grown_rival(paired, opts, score, topology, collective, method, unproved, fits, grow)
    tuned = {"pairing_tuned": {"sizes": [size_text(s) for s in SIZES], "leaves_paired": moved,
                               "geomean_us": {"as packed": round(score, 3),
                                              "leaves paired": None if p_score is None else round(p_score, 3)}}}
    if p_score is None or p_score >= score:
        return grown, dict(facts, **tuned)
    more.update(tuned, pairing_note=(
        f"{moved} leaves send their partial sums to a sibling, which adds them to its own and sends both on (a "
        f"vertex's additions one after another: half as many): faster simulated at "
        f"{' and '.join(size_text(s) for s in SIZES)} than the trees as packed, each with its copies and depth"))
    return paired, more


def _fastest_count(topology, collective, method, options: dict, unproved: dict, fits=None):
    """The trees file with the count of trees per GPU that simulates fastest (not proved), with the facts that
    say how it was chosen, its score and its timer (:func:`_timer`; None when no count was timed), for
    :func:`_fastest_copies`. ``fits`` (:func:`compile_fastest`'s): a count whose file it refuses ends the search
    as a slower one would; refused at one tree per GPU, that file is returned untimed (a plan is then written
    from the program cut for plans, whose counts :func:`compile_for_plans` searches again).

    Counts are tried from one tree per GPU up, doubling while each doubling simulates faster than every count
    before it, below the link model's count (:func:`colls.synth.trees.k_candidates`); the link model's own file
    (its count, or the power of two beside it that the runtime runs, :func:`colls.pipeline.compile_schedule`)
    comes last, only when every doubling before it was faster, and wins a tie. The search stops at the first
    doubling that is not faster, as for copies (:func:`_fastest_copies`): the larger counts are the slowest to
    lower and to simulate, and where one doubling already loses (the trees queue on the threadblocks the target
    allows) the next rarely wins; a count between two that lost is not looked for."""
    k = trees.k_candidates(topology, collective)[0]
    made, timed, timers, scored = {}, {}, {}, {}
    best = None                     # the fastest count so far
    stopped = None                  # the count that was not faster, where the search stopped

    def time_it(count):
        timers[count] = _timer(made[count], topology)
        return _score(timers[count], timed[best] if best is not None else None, scored.setdefault(count, {}))

    count = 1
    while count < k:
        try:
            made[count] = pipeline.compile_schedule(
                topology, collective, method, options=dict(options, trees_per_gpu=count), **unproved)
        except LimitError as e:
            if count == 1 and e.limit == "threadblocks":    # the fewest trees hold the fewest threadblocks
                raise LimitError(f"trees {collective.kind} on {topology.name}: no number of trees per GPU fits, "
                                 f"one already needs too many threadblocks: {e}", limit="threadblocks") from None
            break               # more than the target loads (more trees would not load either)
        except CollsError:
            break               # no packing
        if fits is not None and not fits(made[count]):
            if best is None:
                return made[count], {}, None, None, None
            stopped = count
            break
        score = time_it(count)
        if score is not None:
            timed[count] = score
        if best is not None and (score is None or score >= timed[best]):
            stopped = count
            break
        if score is not None:
            best = count
        count *= 2
    first = None
    if stopped is None:
        first = pipeline.compile_schedule(topology, collective, method, options=options, **unproved)
        k = first.schedule.info.get("k") or k
        if k not in made:
            made[k] = first
            score = time_it(k)
            if score is not None:
                timed[k] = score
    chosen = min(timed, key=lambda c: (timed[c], c != k, c)) if timed else k
    if chosen not in made:          # nothing timed (the runtime runs none of them at the sizes compared)
        first = first or pipeline.compile_schedule(topology, collective, method, options=options, **unproved)
        made[chosen] = first
    facts: dict = {}
    if first is not None and made[chosen] is first:
        for key in ("trees_per_gpu_tried", "limited_by", "chunks_note"):    # why the link model took k
            if key in first.facts:
                facts[key] = first.facts[key]
        if "trees_per_gpu_tried" not in first.facts:
            facts["trees_per_gpu_tried"] = [k]
    if len(made) < 2 or not timed:
        return made[chosen], facts, timed.get(chosen), timers.get(chosen), scored.get(chosen)
    facts["trees_tuned"] = {"sizes": [size_text(s) for s in SIZES], "link_model_k": k,
                            "geomean_us": {str(c): round(t, 3) for c, t in sorted(timed.items())}}
    if made[chosen] is not first:
        others = ", ".join(str(c) for c in sorted(made))
        why = (f"{k}, the link model's best, is slower on the runtime" if stopped is None else
               f"{stopped} was slower, so more were not tried; the link model's best is {k}")
        facts["count_note"] = (f"{chosen} tree{'s' if chosen != 1 else ''} per GPU: the fastest simulated of "
                               f"{others} at {' and '.join(size_text(s) for s in SIZES)} ({why})")
        facts["trees_per_gpu_tried"] = [k, chosen]
    return made[chosen], facts, timed.get(chosen), timers.get(chosen), scored.get(chosen)


# A doubling of the copies must make the file this much faster to be taken: every copy holds threadblocks (SMs)
# the model's compute cannot use, so a tie goes to fewer. Copies that leave a GPU no more threadblocks than the
# runtime's own ring holds (colls.simulate.baseline.runtime_blocks) are taken when faster at all: they cost no SM
# the runtime's own call would not, and at 1 GB their last percent can be what keeps a ring level with the
# runtime's (1 x dgx2 ring reduce-scatter at 16 and 32 copies, the runtime's ring 32: 256 MB 0.9 % faster, 1 GB
# 1.4 %, while relays forwarded whole messages; 9 % at both since they forward the kernel's slices).
COPIES_GAIN = 0.01


def _fastest_copies(chosen, topology, score: float | None = None, timer=None, times: dict | None = None):
    """``chosen`` (made once, not proved) at 1, 2, 4, ... copies (``--instances``: the schedule replicated on
    channels of its own, each copy a share of every chunk), simulated at :data:`SIZES`: each doubling is taken
    while it is at least :data:`COPIES_GAIN` faster, and the search stops at the first that is not, or that the
    target cannot load (its channels, or the threadblocks it or ``--max-threadblocks`` allows), or when the
    links alone (:func:`_link_floor`) leave no such gain to find. Why: a ring is
    one chain of threadblocks, each moving its bytes at one threadblock's copy rate (about a tenth of an
    NVSwitch A100's links), so one copy fills a tenth of the links whatever the link model says; NCCL runs its
    ring on up to 32 channels for the same reason. ``score``, ``timer`` and ``times`` (at each size):
    ``chosen``'s, when already made. Copies may share the GPU's threadblocks, packed as the lowering packs a
    program over the target's limit (:func:`own_channels`). Returns the file, the facts that say what was tried,
    the file's score and its times at each size (None when not timed), and, when the file's copies are packed,
    the fastest whose copies have threadblocks of their own (file, facts, score) to compare once both are made
    deeper (:func:`_grown`), else None."""
    # a plan's program cut into segments (the mscclpp lowering) is not packed too: each copy tried is cut and
    # laid out again, 6 -> 46 s for 4 x ndv2's ring alltoall plan, which took none of them
    pack = chosen.target.name != "mscclpp"
    if not own_channels(chosen, 2, packed=pack):    # no second copy fits: nothing to compare or simulate
        return chosen, {}, score, times, None
    timer = timer or _timer(chosen, topology)
    if score is None:
        times = {}
        score = _score(timer, times=times)
    if score is None:                   # not run by the runtime at the sizes compared: nothing to compare
        return chosen, {}, None, None, None
    floor = _link_floor(timer)          # what no number of copies goes below
    made, blocks = chosen.facts["instances"], chosen.program.max_tbs()
    own = runtime_blocks(topology, chosen.target.name)

    def gain(copies: int) -> float:     # none asked of copies that hold no more SMs than the runtime's own ring
        return 0.0 if blocks * copies // made <= own else COPIES_GAIN

    files = {1: chosen}

    def copied(copies: int, before: float):
        if not own_channels(chosen, copies, packed=pack) or floor >= before * (1 - gain(copies)):
            return None
        files[copies] = pipeline.relower(chosen, instances=copies, only_simulated=True)
        return files[copies]

    timed, best, copies, times = _doubling(chosen, score, copied, topology, times=times, gain=gain)
    unpacked = max(c for c in timed if c <= copies and own_channels(chosen, c))
    alternative = None
    if unpacked < copies:
        alternative = (files[unpacked], _copies_facts(timed, unpacked, own), timed[unpacked])
    return best, _copies_facts(timed, copies, own, unpacked < copies), timed[copies], times, alternative


def _copies_facts(timed: dict, copies: int, own: int, packed: bool = False) -> dict:
    """What :func:`_fastest_copies` says of taking ``copies`` (``packed``: sharing threadblocks): the scores it
    timed (by copies) and a note."""
    facts: dict = {"copies_tuned": {"sizes": [size_text(s) for s in SIZES],
                                    "geomean_us": {str(c): round(t, 3) for c, t in sorted(timed.items())}}}
    if copies > 1:
        tried = ", ".join(str(c) for c in sorted(timed))
        facts["copies_note"] = (f"{copies} copies of the schedule on channels of their own (--instances {copies}): "
                                f"the fastest simulated of {tried} at {' and '.join(size_text(s) for s in SIZES)}")
        if packed:
            facts["copies_note"] += ", a peer's sends and receives packed on one threadblock to fit the target"
        if any(timed[c] > timed[c // 2] * (1 - COPIES_GAIN) for c in timed if 1 < c <= copies):
            facts["copies_note"] += (f" (copies within the {own} threadblocks a GPU the runtime's own ring holds "
                                     f"are taken when faster at all, more only when {COPIES_GAIN:.0%} faster)")
    return facts


def _doubling(chosen, score: float, make, topology, accept=None, times: dict | None = None, gain=None,
              sizes: tuple = SIZES, patient=None) -> tuple:
    """The search :func:`_fastest_copies` and :func:`deepest` share: ``make(n, score of the best so far)`` is the
    file at n = 2, 4, 8, ... (None, or CollsError: more than the target loads, and the search ends), simulated at
    ``sizes``; each doubling is taken while it is at least ``gain(n)`` (default :data:`COPIES_GAIN`)
    faster than the one before and ``accept(n, its time at each size)`` (when given) agrees, and the first that
    is not ends the search; ``patient(n, file)``: whether one at n that is not may be followed by the next
    doubling all the same (once: a second in a row that is not ends the search), which is taken if that much
    faster than the best before it. ``times``: ``chosen``'s time at each size, when known. Returns
    the scores by n, the file taken, its n and its times at each size (None when unknown)."""
    gain = gain or (lambda n: COPIES_GAIN)
    timed, best, n, k = {1: score}, chosen, 1, 1
    misses = 0
    while True:
        try:
            more = make(k * 2, timed[n])
        except CollsError:
            break
        if more is None:
            break
        k *= 2
        more_times: dict = {}
        need = timed[n] * (1 - gain(k))
        t = _score(_timer(more, topology), need, more_times, sizes=sizes)
        if t is not None:
            timed[k] = t
        if t is None or t > need or (accept is not None and not accept(k, more_times)) or (t == need and not gain(k)):
            misses += 1
            if patient is not None and misses < 2 and patient(k, more):
                continue
            break
        best, n, times, misses = more, k, more_times, 0
    return timed, best, n, times


# What a file's facts say of how its count of trees was chosen (kept when it is made again deeper)
_COUNT_FACTS = ("trees_per_gpu_tried", "limited_by", "chunks_note", "count_note", "trees_tuned", "pairing_note",
                "pairing_tuned")

# The methods whose schedules take a depth option (the pieces a part of the schedule is cut into, one after
# another on its threadblocks), for which collectives, and how a summary names the depth: trees, whose vertices
# sum or forward their children's chunks one per step; direct, whose ranks sum the other ranks' shares one
# sender at a time, and whose alltoall copies blocks out of scratch as they arrive (colls.synth.direct).
DEPTH_METHODS = {"trees": (None, "chunks a tree, one after another on its lane"),
                 "direct": (("reducescatter", "reduce", "allreduce", "alltoall"),
                            "pieces a block, one after another on each threadblock")}


# The most ops a deeper file may have (its schedule's, copies included): each doubling of the depth makes and
# lowers the file again, which costs in proportion to its ops. 16 x dgx-a100's allgather has 16,384 ops at one
# chunk a tree (its allreduce 32,512); there depth 2 gained 4-11 % at a few sizes and took compile's synthesis
# stage from 20 to 49 s (2 processes), while on 2 x mi250 the allreduce (1,984 ops) runs 2.4x faster at 1 GB
# at depth 8 (56 -> 137 GB/s busbw: its 32 trees queue on 8 lanes a way under RCCL's 64 threadblocks).
DEEP_OPS = 16384

# The most ops times GPUs a file compile makes deeper for its largest calls may have (:func:`colls.compile._deeper`):
# making a file takes about 0.1 ms an op on 16 GPUs and 0.24 ms on 128 (a trees reduce-scatter of 30,720 ops on
# 2 x dgx-a100 in 3.1 s, the allgather of 16,384 on 16 x dgx-a100 in 4.0 s), and simulating it grows with it too,
# so the budget is :data:`DEEP_OPS` on 128 GPUs (16 x dgx-a100, whose compile must stay within two minutes) and
# more on fewer: 131,072 ops on 16 GPUs, 65,536 on 32.
DEEP_WORK = DEEP_OPS * 128


def deepens(method: str, kind: str) -> bool:
    """Whether ``method``'s schedules of ``kind`` take a depth (:data:`DEPTH_METHODS`)."""
    kinds = DEPTH_METHODS.get(method, ((),))[0]
    return kinds is None or kind in kinds


def depth_words(method: str, depth: int) -> str:
    """``"8 chunks a tree"``: a depth as the summary and compile's README say it."""
    return f"{depth} {DEPTH_METHODS[method][1].split(',')[0]}"


def deepest(chosen, topology, collective, method: str, options: dict, unproved: dict, score: float | None = None,
            fits=None, hold: bool = False, times: dict | None = None, sizes: tuple = SIZES, patient: bool = False,
            max_ops: int = DEEP_OPS, made: dict | None = None):
    """``chosen`` made again at twice, four times, ... its depth (``depth``: each tree carries that many chunks
    one after another on its lane, :func:`colls.synth.trees._deal`; a direct block is summed in that many pieces,
    :mod:`colls.synth.direct`), at its count and copies, simulated at ``sizes`` (default :data:`SIZES`); each
    doubling is taken while it is at least :data:`COPIES_GAIN` faster, and the search stops at the first that is
    not (``patient``: or, when its messages at the largest of ``sizes`` are still the runtime's whole slices, the
    next one, and a later doubling that much faster than the best before it is taken), or
    that the target cannot load (steps per threadblock, offsets) or ``fits`` refuses, or the file would have more
    than ``max_ops`` ops (default :data:`DEEP_OPS`). Why: a vertex that sums its children one per step runs each
    step on a threadblock of its own that waits for the step before, and the runtime finishes a step's whole
    chunk before that: with one chunk a tree the chain's threadblocks take turns, with several they work on
    successive chunks at once (2 x dgx-a100 reduce-scatter, 2 copies: 16 MB 52 -> 104 GB/s busbw at depth 8,
    64 MB 59 -> 173). Each chunk more is a message more per step, so small calls lose: the depth is chosen at the
    sizes the copies are. Why patient: while a chunk is at least the runtime's slice (2 MB for Simple), a
    doubling adds steps and leaves the messages, and so the pipeline's fill, as they were; the gain comes at the
    doubling after (2 x dgx-a100 reduce-scatter at 1 GB, 2 copies: 228, 228, 240 GB/s busbw at 8, 16, 32 chunks
    a tree). ``hold``: no doubling may be slower (by :data:`COPIES_GAIN`) than the file before it at the largest
    of ``sizes``: synth's one file serves every size, and a deeper file can win the mean with the middle sizes
    and lose the large ones (1 x ndv2 trees allgather at 2 chunks a tree: 16 MB 37 -> 46 GB/s busbw, 256 MB 80
    -> 75, 1 GB 97 -> 95; at 8, 1 GB 89). ``score`` and ``times`` (at each size): ``chosen``'s, when already
    simulated. ``made``: the files (or the refusals) by depth of searches before this one from the same file,
    taken from and added to instead of made again.
    Returns the file and the facts that say what was tried."""
    if score is None and len(chosen.schedule.ops) * 2 > max_ops:
        # no doubling within the budget: not simulated for nothing (a 128-GPU trees file, simulated whole, takes
        # 13-15 s at 1 GB)
        return chosen, {}
    if score is None:
        times = {}
        score = _score(_timer(chosen, topology), times=times, sizes=sizes)
    if score is None:                   # not run by the runtime at the sizes compared: nothing to compare
        return chosen, {}
    base = chosen.schedule.info.get("depth", 1)     # the doublings are of the depth it has
    opts = dict(options)
    if method == "trees":
        opts["trees_per_gpu"] = chosen.schedule.info["k"]
        if chosen.schedule.info.get("leaves_paired"):     # made deeper with its leaves paired, as chosen
            opts["pair_leaves"] = True
    settings = dict(unproved, instances=chosen.facts["instances"])

    top = sizes[-1]
    held = {1: times[top]} if times and top in times else {}   # each doubling's time there, when taken
    lost = []                           # the depth slower there, if the search ended so

    memo = {} if made is None else made

    def deeper(n: int, before: float):
        if len(chosen.schedule.ops) * n > max_ops:
            return None
        if base * n not in memo:
            try:
                memo[base * n] = pipeline.compile_schedule(topology, collective, method,
                                                           options=dict(opts, depth=base * n), **settings)
            except CollsError as e:
                memo[base * n] = e
        more = memo[base * n]
        if isinstance(more, CollsError):
            raise more
        return more if fits is None or fits(more) else None

    def holds(n: int, times: dict) -> bool:
        if not hold:
            return True
        if 1 not in held:
            held[1] = _time_at(_timer(chosen, topology), top)
        held[n] = times.get(top)
        if held[n] is None or held[n // 2] is None or held[n] > held[n // 2] * (1 + COPIES_GAIN):
            lost.append(base * n)
            return False
        return True

    def whole_slices(n: int, more) -> bool:    # its messages at the largest size are whole slices still
        return top / more.program.nchunksperloop >= chunk_effective_bytes(more.program.proto,
                                                                           more.facts["collective"])

    timed, best, n, _ = _doubling(chosen, score, deeper, topology, accept=holds, sizes=sizes,
                                  patient=whole_slices if patient else None)
    facts: dict = {"depth_tuned": {"sizes": [size_text(s) for s in sizes],
                                   "geomean_us": {str(base * d): round(t, 3) for d, t in sorted(timed.items())}}}
    facts.update({k: chosen.facts[k] for k in _COUNT_FACTS if k in chosen.facts})    # how the count was chosen
    if base * n > 1:
        tried = ", ".join(str(base * d) for d in sorted(timed))
        facts["depth_note"] = (f"{base * n} {DEPTH_METHODS[method][1]}: the fastest simulated of {tried} at "
                               f"{' and '.join(size_text(s) for s in sizes)}")
    if lost:
        unit = DEPTH_METHODS[method][1].split(",")[0]
        first, rest = unit.split(" ", 1)
        head = facts.get("depth_note", f"one {first[:-1]} {rest}")
        facts["depth_note"] = f"{head} (at {lost[0]} {unit}, slower at {size_text(top)})"
    return best, facts


def _time_at(timer, size: int) -> float | None:
    """The simulated time at ``size`` (microseconds) of ``timer``'s file (:func:`_timer`), None when the runtime
    would not run it there."""
    t = timer.time(size)
    return t.time_us if t is not None and t.served else None


def own_channels(compiled, copies: int, packed: bool = False) -> bool:
    """Whether ``copies`` copies of ``compiled``'s schedule (as made, ``facts["instances"]`` of them) each get
    channels of their own within the target's, and threadblocks of their own within what the target runs on
    the GPU (every copy has its own threadblocks): copies that would share channels are rarely faster and slow
    to lay out, and copies the GPU cannot hold would be refused only after a whole lowering, which on 1,024 GPUs
    takes longer than the file itself (:func:`_fastest_copies`, and colls compile's copies). ``packed``: a copy's
    threadblocks counted as the lowering packs them when over the limit (:func:`colls.lower.fewest_packed`: a
    peer's send and receive on one; the copies then share the GPU's threadblocks but still have channels of
    their own): on 2 x mi250 the ring alltoall lays out 38 a GPU, and 2 copies pack into RCCL's 64 and run
    1.75x faster at 1 GB (out-of-place)."""
    made = compiled.facts["instances"]
    limit = min(compiled.target.max_tbs, compiled.topology.min_sms())
    blocks = lowering.fewest_packed(compiled.program) if packed else compiled.program.max_tbs()
    return (compiled.program.nchannels * copies // made <= compiled.target.max_channels
            and blocks * copies // made <= limit)


def _timer(result, topology) -> Fastest:
    """The simulator for ``result``'s program at its own protocol (laid out once: :func:`_score` and
    :func:`_link_floor` both read it)."""
    return Fastest(topology, result.facts["collective"], [({}, result.program, None)], target=result.target.name,
                   protocols=(result.program.proto,))


def _score(timer: Fastest, beat: float | None = None, times: dict | None = None,
           sizes: tuple = SIZES) -> float | None:
    """The geometric mean of the simulated times at ``sizes`` (default :data:`SIZES`; microseconds) of
    ``timer``'s program (:func:`_timer`); None when the runtime would not run the file at one of them, or when it
    cannot be below ``beat``: the last size is simulated only if its proven lower bound
    (:class:`colls.simulate.baseline.Fastest`) leaves the mean a chance to be. ``times``: filled with the time at
    each size simulated."""
    logs = []
    for i, size in enumerate(sizes):
        limit = None
        if beat is not None and i == len(sizes) - 1:    # the time this size must stay under for the mean to win
            limit = math.exp(len(sizes) * math.log(beat) - sum(logs))
        t = timer.time(size, beat=limit)
        if t is None or not t.served:
            return None
        logs.append(math.log(t.time_us))
        if times is not None:
            times[size] = t.time_us
    return math.exp(sum(logs) / len(logs))


def _link_floor(timer: Fastest) -> float:
    """The geometric mean over :data:`SIZES` of the launch plus the busiest link's bytes at full bandwidth
    (:meth:`colls.simulate.baseline.Fastest.link_bound`): copies cut each threadblock's work, never the
    links' bytes, so no number of copies is faster than this."""
    return math.exp(sum(math.log(timer.link_bound(size)) for size in SIZES) / len(SIZES))


def compile_for_plans(topology, collective, method: str, **settings):
    """:func:`compile_fastest` for an MSCCL++ plan (:mod:`colls.mscclpp`): lowered as for the MSCCL executor
    (the program the XML file would have) within the 64 ops MSCCL++ runs in a threadblock of a pipelined plan,
    and for the ``mscclpp`` lowering (:data:`colls.runtimes.mscclpp.LOWERING`: threadblocks cut into step
    segments on channels of their own until each pipelined plan fits), which always fits: the second when its
    plan simulates at least :data:`COPIES_GAIN` faster at :data:`SIZES` (geometric mean, each program's plan
    pipelined by its fastest unit), as a doubling of the copies must (cutting holds more threadblocks). The
    result's ``facts["plan_slice"]`` is the unit its plan is written with. The first holds fewer copies or a shallower pipeline where
    the deeper file's threadblocks would be over 64 ops; cut into segments, the deeper one can be faster: 2 x
    MI250 trees allgather, 46 threadblocks and 4 chunks a tree as the first, 151 / 1,292 / 3,806 us at 16 MB /
    256 MB / 1 GB; 92 threadblocks and 2 copies cut, 119 / 1,295 / 3,825 us. Both can also stop at the same file
    (1 x DGX-2 direct allreduce: 2 pieces a block in both, where the XML file has 8). With ``proto`` LL the plan
    is a packet plan (never pipelined): the two are compared by their packet plans' times
    (:func:`colls.simulate.plans.packet_score`)."""
    from colls import mscclpp
    from colls.runtimes.mscclpp import PLAN_PROOF_THREADBLOCKS
    from colls.simulate.plans import fastest_slice, packet_score
    settings.pop("target", None)
    packets = settings.get("proto") == "LL"         # a packet plan: not pipelined, timed as packets
    unit = None if packets else False               # _with_unit: unpipelined, or the fastest unit
    def score(made) -> tuple:
        if packets:
            return None, packet_score(made.program, topology, SIZES)
        return fastest_slice(made.program, topology, SIZES)
    # every plan written is proved, which holds memory in the square of its threadblocks in all
    settings["options"] = dict(settings.get("options") or {}, proof_threadblocks=PLAN_PROOF_THREADBLOCKS)
    # both candidates made in memory and not proved; only the one taken is proved, as compile_fastest does
    unproved = dict(settings, in_memory=True, prove=False)
    last: list = [None, None]   # (candidate, whether it fits): compile_fastest asks of the file it returns too

    def fits(made) -> bool:     # a program proved by symmetry: one orbit's GPUs written
        if last[0] is not made:
            last[:] = made, mscclpp.fits(made.program, topology, made.report.facts.get("symmetry", {}).get("ranks_run"))
        return last[1]
    first = compile_fastest(topology, collective, method, target="exe", fits=fits, **unproved)
    if not fits(first):
        _check_cut(first, method)
        return _with_unit(compile_fastest(topology, collective, method, target="mscclpp", **settings), topology, unit)
    try:
        cut = compile_fastest(topology, collective, method, target="mscclpp", **unproved)
    except CollsError:
        return _with_unit(_as_asked(first, settings), topology, unit)
    scored = {id(made): score(made) for made in (first, cut)}
    chosen = cut if scored[id(cut)][1] < scored[id(first)][1] * (1 - COPIES_GAIN) else first
    return _with_unit(_as_asked(chosen, settings), topology, scored[id(chosen)][0])


def _check_cut(first, method: str) -> None:
    """Refuse, before it is lowered again and cut, a program for a plan (as the XML file's: ``first``, which its
    plan cannot hold) whose cut threadblocks cannot fit the plan's threadblocks a GPU
    (:func:`colls.mscclpp.least_threadblocks`; 128 GPUs: one tree per GPU cut to 27-29 threadblocks of the 24
    allowed, refused after 5-7 s). The cut program is the same schedule: trees at the fewest trees per GPU,
    copies and depth (``first`` grew none, its plan did not fit), which the cut grows only once it fits; direct's
    schedule itself. Not rings, which the cut may run fewer of (colls.synth.ring.fits bounds each count first),
    hier, which may pass more chunks a rail op (fewer steps), nor milp, whose solver may answer otherwise the
    second time."""
    from colls import mscclpp
    from colls.topology import node_rotation
    if method not in ("trees", "direct"):
        return
    program, tgt = first.program, first.target
    ranks = first.report.facts.get("symmetry", {}).get("ranks_run")
    ranks = node_rotation(ranks, first.topology.node_major()) if ranks else None
    least, gpu = mscclpp.least_threadblocks(program, ranks)
    limit = min(tgt.max_tbs, first.topology.min_sms())
    if least <= limit:
        return
    why = tgt.tbs_why if tgt.tbs_why and limit == tgt.max_tbs else f"the {limit} threadblocks a GPU runs"
    raise LimitError(f"{method} {program.coll} on {first.topology.name}: GPU {gpu}'s steps take at least "
                     f"{sum(mscclpp.least_ops(st) for tb in program.gpus[gpu].tbs for st in tb.steps):,} ops in an "
                     f"MSCCL++ plan, at least {least} threadblocks of 64 ops, more than {why}; try fewer --nodes or "
                     "another --method", limit="threadblocks")


def _with_unit(made, topology, unit=False):
    """``made`` with ``facts["plan_slice"]``: the pipeline unit its plan is written with (the fastest at
    :data:`SIZES`, :func:`colls.simulate.plans.fastest_slice`; None: unpipelined)."""
    from colls.simulate.plans import fastest_slice
    made.facts["plan_slice"] = fastest_slice(made.program, topology, SIZES)[0] if unit is False else unit
    return made
