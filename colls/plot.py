"""Charts of simulated collectives as PNG files: bandwidth curves and per-call timelines.

Two charts, each a pure function of plain numbers (this module knows nothing of how they were made):

- :func:`plot_curves`, a line chart of algorithmic bandwidth (GB/s, up is better) against message size
  (bytes, log2 axis, labelled ``1K``, ``64K``, ``1M``, ``1G``...). One line per schedule; a size a
  schedule does not run leaves a gap in its line rather than a segment across it, and every measured
  size carries a dot, so a point alone between two gaps still shows. An optional dashed black line is
  the theoretical optimum: the distance from a line up to it is what that schedule leaves on the table,
  at that size.
- :func:`plot_timeline`, a Gantt chart of one call: one row (lane) per link or threadblock, top to
  bottom in the order given, time in microseconds from left to right, one colour per kind of work
  (``send``, ``recv``, ``reduce``, ``copy``, ``wait``, a link's ``busy`` time). White space in a link's
  lane is time the link sits idle; a threadblock lane full of ``wait`` is one starved of data. Groups of
  lanes (``links``, ``threadblocks``) are split by a grey line and named at the right-hand edge. At most
  :data:`MAX_LANES` lanes are drawn; a note under the chart counts the rest.

Output is deterministic: the same input gives the same PNG bytes (no date or version is stamped into
the file), so a chart can be committed and compared. Files are replaced atomically, as every file colls
writes; a path that cannot be written raises :class:`~colls.errors.CollsError` naming it, before any
drawing is done.
"""

from __future__ import annotations

import math
import numbers
from io import BytesIO

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter
from matplotlib.transforms import blended_transform_factory

from colls.errors import CollsError
from colls.files import check_output, write_atomic

MAX_LANES = 60
LANE_INCHES = 0.22
MIN_TIMELINE_INCHES = 3.0
MAX_X_LABELS = 10
DPI = 100

_UNITS = (("P", 2**50), ("T", 2**40), ("G", 2**30), ("M", 2**20), ("K", 2**10))

# Fixed colours for the kinds a simulation reports; any other kind takes the next free colour of
# matplotlib's default cycle, in sorted order, so a kind keeps its colour from chart to chart.
_KIND_COLOURS = {
    "send": "#1f77b4",
    "recv": "#2ca02c",
    "reduce": "#d62728",
    "copy": "#9467bd",
    "wait": "#c7c7c7",
    "busy": "#ff7f0e",
}
_SPARE_COLOURS = ("#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#aec7e8", "#ffbb78",
                  "#98df8a", "#ff9896", "#c5b0d5")


def human_size(nbytes: int) -> str:
    """A byte count in the short form of nccl-tests' size columns.

    Parameters
    ----------
    nbytes : int
        A number of bytes.

    Returns
    -------
    str
        The count in the largest power-of-1024 unit (``K``, ``M``, ``G``, ``T``, ``P``) that it is an
        exact multiple of (``1024 -> '1K'``, ``3 * 2**20 -> '3M'``), else the plain number
        (``1000 -> '1000'``, ``1536 -> '1536'``).
    """
    if nbytes:
        for suffix, unit in _UNITS:
            if nbytes % unit == 0:
                return f"{nbytes // unit}{suffix}"
    return str(nbytes)


def plot_curves(curves, path, *, title="", bound=None, ylabel="algbw (GB/s)", option=None) -> None:
    """Write a line chart of bandwidth against message size to a PNG file.

    Parameters
    ----------
    curves : list of (str, list of (int, float or None))
        One ``(label, points)`` per line; a point is ``(size_bytes, gbps)``. ``gbps`` None (or NaN)
        means the size is not run: the line breaks there instead of joining its neighbours.
    path : str or os.PathLike
        The PNG file to write (replaced atomically).
    title : str, optional
        The chart's title.
    bound : (str, list of (int, float)), optional
        A ``(label, points)`` line drawn dashed and black: the theoretical optimum.
    ylabel : str, optional
        The y axis label.

    Raises
    ------
    CollsError
        When ``path`` cannot be written (its folder is missing, it is a folder or a device, writing
        fails), when there is nothing to plot, or when a size is not a positive whole number.
    """
    check_output(path, option)
    fig = _curves_figure(curves, title=title, bound=bound, ylabel=ylabel)
    _write_png(fig, path, option)


def plot_timeline(lanes, path, *, title="", total_us=None, groups=None, option=None) -> None:
    """Write a Gantt chart of one simulated call to a PNG file.

    Parameters
    ----------
    lanes : list of (str, list of (float, float, str))
        One ``(name, intervals)`` per lane, drawn top to bottom; an interval is
        ``(start_us, end_us, kind)``. Only the first :data:`MAX_LANES` lanes are drawn; a note under
        the chart says how many more there are.
    path : str or os.PathLike
        The PNG file to write (replaced atomically).
    title : str, optional
        The chart's title.
    total_us : float, optional
        The end of the time axis; by default the latest end of any interval (of all lanes, drawn or not).
    groups : list of (str, int), optional
        ``(title, first_lane_index)`` pairs: a separator above that lane and the title beside it.

    Raises
    ------
    CollsError
        When ``path`` cannot be written, when there are no lanes, when an interval ends before it
        starts or is not finite, or when a group's lane index is negative.
    """
    check_output(path, option)
    fig = _timeline_figure(lanes, title=title, total_us=total_us, groups=groups)
    _write_png(fig, path, option)


# --------------------------------------------------------------------------------------------------------
# Figures (kept apart from the file writing so tests can look at the artists)
# --------------------------------------------------------------------------------------------------------
def _curves_figure(curves, *, title="", bound=None, ylabel="algbw (GB/s)") -> Figure:
    """The :class:`~matplotlib.figure.Figure` that :func:`plot_curves` saves."""
    curves = list(curves or ())
    if not curves:
        raise CollsError("nothing to plot: no curves")
    series = [(str(label), _points(label, points)) for label, points in curves]
    bound_series = (str(bound[0]), _points(bound[0], bound[1])) if bound is not None else None
    sizes = [s for _, pts in series + ([bound_series] if bound_series else []) for s, _ in pts]
    if not sizes:
        raise CollsError("nothing to plot: the curves have no points")

    fig = Figure(figsize=(9, 5.5), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for label, pts in series:
        ax.plot([s for s, _ in pts], [v for _, v in pts], marker="o", markersize=3, linewidth=1.5,
                label=label)
    if bound_series:
        label, pts = bound_series
        ax.plot([s for s, _ in pts], [v for _, v in pts], linestyle="--", color="black", linewidth=1.2,
                label=label)

    ax.set_xscale("log", base=2)
    lo, hi = math.floor(math.log2(min(sizes))), math.ceil(math.log2(max(sizes)))
    if hi == lo:
        lo, hi = lo - 1, hi + 1
    step = max(1, math.ceil((hi - lo + 1) / MAX_X_LABELS))
    labelled = [2.0**e for e in range(lo, hi + 1) if e % step == 0]
    ax.xaxis.set_major_locator(FixedLocator(labelled))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: human_size(int(round(x)))))
    ax.xaxis.set_minor_locator(FixedLocator([2.0**e for e in range(lo, hi + 1)]))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlim(2.0**lo, 2.0**hi)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.5)
    ax.grid(True, which="minor", axis="x", alpha=0.2)
    if title:
        ax.set_title(title)
    if len(series) + bool(bound_series) > 8:
        fig.legend(loc="outside right upper", fontsize="small")
    else:
        ax.legend(loc="best", fontsize="small")
    return fig


def _points(label, points) -> list[tuple[int, float]]:
    """``points`` as ``(size, gbps)`` with NaN for a missing value; refuses a size that is not a
    positive whole number (a log axis has no place for it)."""
    out = []
    for size, value in points:
        if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size <= 0:
            raise CollsError(f"size {size!r} is not a positive whole number of bytes", source=str(label))
        out.append((int(size), math.nan if value is None else float(value)))
    return out


def _timeline_figure(lanes, *, title="", total_us=None, groups=None) -> Figure:
    """The :class:`~matplotlib.figure.Figure` that :func:`plot_timeline` saves."""
    lanes = list(lanes or ())
    if not lanes:
        raise CollsError("nothing to plot: no lanes")
    shown = lanes[:MAX_LANES]
    hidden = len(lanes) - len(shown)

    latest = 0.0
    bars = []  # per drawn lane: {kind: [(start, width), ...]}
    for index, (name, intervals) in enumerate(lanes):
        by_kind: dict[str, list[tuple[float, float]]] = {}
        for start, end, kind in intervals:
            start, end = float(start), float(end)
            if not (math.isfinite(start) and math.isfinite(end)) or end < start:
                raise CollsError(f"interval ({start}, {end}) is not a finite span forward in time",
                                 source=str(name))
            latest = max(latest, end)
            if index < MAX_LANES:
                by_kind.setdefault(str(kind), []).append((start, end - start))
        if index < MAX_LANES:
            bars.append(by_kind)
    x_end = float(total_us) if total_us is not None else latest
    if not x_end > 0:
        x_end = 1.0

    known = list(_KIND_COLOURS)
    kinds = sorted({k for lane in bars for k in lane},
                   key=lambda k: (known.index(k) if k in _KIND_COLOURS else len(known), k))
    spare = iter(_SPARE_COLOURS * (1 + len(kinds) // len(_SPARE_COLOURS)))
    colours = {k: _KIND_COLOURS[k] if k in _KIND_COLOURS else next(spare) for k in kinds}

    height = max(MIN_TIMELINE_INCHES, LANE_INCHES * len(shown) + 1.6)
    fig = Figure(figsize=(11, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for y, by_kind in enumerate(bars):
        for kind in kinds:
            if kind in by_kind:
                ax.broken_barh(by_kind[kind], (y - 0.4, 0.8), facecolors=colours[kind], linewidth=0)
    ax.set_yticks(range(len(shown)), [str(name) for name, _ in shown], fontsize="small")
    ax.set_ylim(len(shown) - 0.5, -0.5)  # first lane on top
    ax.set_xlim(0, x_end)
    ax.set_xlabel("time (µs)")
    ax.grid(True, axis="x", alpha=0.4)
    ax.set_axisbelow(True)
    if title:
        ax.set_title(title)

    beside = blended_transform_factory(ax.transAxes, ax.transData)
    for group_title, first in groups or ():
        if isinstance(first, bool) or not isinstance(first, int) or first < 0:
            raise CollsError(f"lane index {first!r} is not a whole number from 0", source=str(group_title))
        if first >= len(shown):
            continue
        if first > 0:
            ax.axhline(first - 0.5, color="0.3", linewidth=1)
        ax.text(1.005, first - 0.5, str(group_title), transform=beside, ha="left", va="top",
                fontsize="small", fontweight="bold")

    if kinds:
        handles = [Patch(facecolor=colours[k], label=k) for k in kinds]
        fig.legend(handles=handles, loc="outside lower center", ncols=min(len(kinds), 8),
                   fontsize="small", frameon=False)
    if hidden:
        fig.supxlabel(f"+{hidden} more lanes", fontsize="small", x=0.01, ha="left")
    return fig


# --------------------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------------------
def _write_png(fig: Figure, path, option) -> None:
    """Render ``fig`` to PNG bytes in memory and replace ``path`` with them atomically
    (:func:`colls.files.write_atomic`); ``option`` names the command-line option in errors."""
    buffer = BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    write_atomic(path, buffer.getvalue(), option)
