"""What ``colls simulate`` prints and draws: tables of timings, link utilisation, timeline lanes.

Reading the table. ``time`` is one call, launch included; ``algbw`` = size / time and ``busbw`` = algbw x
nccl-tests' factor (allreduce 2(n-1)/n; allgather, reduce-scatter, alltoall (n-1)/n; broadcast, reduce 1);
``% of bound`` is how close the call comes to the fastest any schedule could be at that size
(:meth:`colls.bound.Bound.min_time_us`: the larger of the bandwidth and latency bounds, with the links'
raw bandwidths); the busiest link is the one whose bytes fill the largest share of what it could carry
in that time (its ``efficiency`` included).
"""

from __future__ import annotations

import re

from colls.simulate import Timing, size_text

MAX_LINK_LANES = 24
MAX_TB_LANES = 36


def table(timings: list[Timing]) -> str:
    """The per-size table (sizes the file does not serve say why, once for a run of them)."""
    head = f"  {'size':>8} {'time (us)':>12} {'algbw GB/s':>11} {'busbw GB/s':>11} {'of bound':>9}  busiest link"
    lines = [head]
    pending: list[Timing] = []

    def flush():
        if pending:
            first, last = size_text(pending[0].size_bytes), size_text(pending[-1].size_bytes)
            span = first if first == last else f"{first}..{last}"
            lines.append(f"  {span:>8} not run: {pending[0].reason}")
            pending.clear()

    for t in timings:
        if not t.served:
            if pending and _shape(pending[0].reason) != _shape(t.reason):
                flush()
            pending.append(t)
            continue
        flush()
        pct = f"{t.bound_pct:8.1f}%" if t.bound_pct is not None else f"{'-':>9}"
        link = f"{t.busiest_link} ({100 * t.busiest_util:.0f}%)" if t.busiest_link else "-"
        lines.append(f"  {size_text(t.size_bytes):>8} {t.time_us:12.2f} {t.algbw_gbps:11.2f} "
                     f"{t.busbw_gbps:11.2f} {pct}  {link}")
    flush()
    return "\n".join(lines)


def _shape(reason: str) -> str:
    """A reason without its numbers: sizes failing for the same reason share one line of the table."""
    return re.sub(r"\d+", "#", reason)


def link_use(machine, res) -> list[dict]:
    """Every link that carried data, busiest first: its bytes and their share of what it could carry."""
    util = res.link_bytes / (machine.link_cap * res.time_us)
    order = sorted(range(len(util)), key=lambda i: (-util[i], i))
    return [{"link": machine.link_name(i), "bytes": float(res.link_bytes[i]), "utilisation": float(util[i])}
            for i in order if res.link_bytes[i] > 0]


def link_summary(machine, res, top: int = 12) -> str:
    """The links that carried the most, as a share of what each could carry during the call."""
    used = link_use(machine, res)
    lines = [f"link utilisation over the {res.time_us:.2f} us call ({len(used)} of {len(machine.links)} links "
             "carry data):"]
    for u in used[:top]:
        lines.append(f"  {100 * u['utilisation']:5.1f}%  {u['bytes'] / 1e6:12.3f} MB  {u['link']}")
    if len(used) > top:
        lines.append(f"  ... {len(used) - top} more links")
    return "\n".join(lines)


def timeline_lanes(machine, res) -> tuple[list, list]:
    """Lanes for :func:`colls.plot.plot_timeline`: the busiest links, then the threadblocks, and the two
    groups' titles."""
    links = sorted(res.link_lanes, key=lambda lane: (-res.link_bytes[lane[0]], lane[0]))[:MAX_LINK_LANES]
    lanes = [(machine.link_name(li), iv) for li, iv in links]
    tbs = res.tb_lanes[:MAX_TB_LANES]
    groups = [("links (full: at 99% of capacity or more)", 0), ("threadblocks", len(lanes))]
    lanes += [(machine.tb_name(ti), iv) for ti, iv in tbs]
    return lanes, groups


def bound_curve(bound, sizes) -> list[tuple[int, float]]:
    """The best algbw any schedule reaches at each size (bandwidth and latency bounds together)."""
    return [(s, s / bound.min_time_us(s) / 1000.0) for s in sizes]
