"""Pass 3, limits: what the target runtime can hold (channels, thread blocks, steps, XML elements).

Each limit is the runtime's own constant (``msccl_struct.h``, ``msccl_parser.h``), listed per target in
:mod:`colls.runtimes`; beyond it the loader refuses the file or overruns a fixed array.
"""

from __future__ import annotations

from collections import defaultdict

from colls.verify.context import Context


def check(cx: Context) -> None:
    p, t = cx.p, cx.t
    if p.nchannels is not None and not 1 <= p.nchannels <= t.max_channels:
        cx.add("limit-channels", f"nchannels={p.nchannels}: must be between 1 and {t.max_channels}")
    if t.max_children is not None and len(p.gpus) > t.max_children:
        cx.add("limit-children", f"<algo> has {len(p.gpus)} <gpu> children; the loader holds at most "
               f"{t.max_children} children per element (MSCCL_MAX_SUBS) and overflows")
    for g in p.gpus:
        _check_gpu(cx, g)
        for tb in g.tbs:
            _check_tb(cx, g, tb)


def _check_gpu(cx: Context, g) -> None:
    t, p = cx.t, cx.p
    ntb = len(g.tbs)
    if ntb > t.max_tbs:
        cx.add("limit-tbs", f"{ntb} thread blocks; {t.name} allows {t.max_tbs} per gpu (\"too many thread blocks "
               f"are requested. Max thread blocks: {t.max_tbs}\")", g.id, line=g.line)
    if cx.sms is not None and ntb > cx.sms:
        cx.add("limit-sms", f"{ntb} thread blocks but the GPU has {cx.sms} SMs: all thread blocks must be resident "
               "at once, or the ones waiting for an SM hang the others", g.id, line=g.line)
    if t.max_children is not None and ntb > t.max_children:
        cx.add("limit-children", f"<gpu> has {ntb} <tb> children; the loader holds at most {t.max_children} per "
               "element and overflows", g.id, line=g.line)
    if t.max_tbs_per_channel is not None:
        for what in ("send", "recv"):
            per_chan: dict = defaultdict(int)
            for tb in g.tbs:
                if getattr(tb, what) is not None and getattr(tb, what) >= 0 and tb.chan is not None:
                    per_chan[tb.chan] += 1
            for chan, count in sorted(per_chan.items()):
                if count > t.max_tbs_per_channel:
                    cx.add("limit-tbs-per-channel", f"{count} thread blocks with a {what} peer on channel {chan}; at "
                           f"most {t.max_tbs_per_channel} (\"too many {what}s per channel\")", g.id, line=g.line)
    if t.max_elements is not None:
        elements = 1 + len(p.gpus) + ntb + sum(len(tb.steps) for tb in g.tbs)
        if elements >= t.max_elements:
            cx.add("limit-elements", f"rank {g.id}'s loader reads {elements} elements (1 algo + {len(p.gpus)} gpu + "
                   f"its thread blocks and steps); it stops at {t.max_elements} (MSCCL_MAX_NODES) before reading "
                   f"the next tag, closing tags included, so at most {t.max_elements - 1} fit", g.id, line=g.line)


def _check_tb(cx: Context, g, tb) -> None:
    t = cx.t
    if len(tb.steps) > t.max_steps:
        cx.at("limit-steps", f"{len(tb.steps)} steps; {t.name} allows {t.max_steps} per thread block "
              "(MSCCL_MAX_NUM_STEPS)", g, tb)
    else:
        bad = next((i for i, st in enumerate(tb.steps) if st.s is not None and not 0 <= st.s < t.max_steps), None)
        if bad is not None:
            cx.at("limit-steps", f"s={tb.steps[bad].s}: the loader refuses s outside [0, {t.max_steps}) (\"too many "
                  "steps are requested\")", g, tb, bad)
    if t.max_children is not None and len(tb.steps) > t.max_children:
        cx.at("limit-children", f"{len(tb.steps)} <step> children; the loader holds at most {t.max_children} per "
              "element and overflows", g, tb)
