"""Tests of colls.plot: valid, deterministic PNGs; what each chart draws; the errors a user can cause."""

from __future__ import annotations

import os

import matplotlib.image
import numpy as np
import pytest
from matplotlib.collections import PolyCollection
from matplotlib.lines import Line2D

from colls.errors import CollsError
from colls.plot import (MAX_LANES, _curves_figure, _timeline_figure, human_size, plot_curves,
                        plot_timeline)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SIZES = [2**e for e in range(10, 31)]  # 1K .. 1G


def _curves():
    ring = [(s, 100.0 * s / (s + 2**22)) for s in SIZES]
    tree = [(s, None if 2**16 < s < 2**20 else 120.0 * s / (s + 2**24)) for s in SIZES]
    lone = [(s, 50.0 if s == 2**26 else None) for s in SIZES]  # one point between two gaps
    return [("ring", ring), ("tree", tree), ("direct", lone)]


BOUND = ("optimum", [(s, 150.0) for s in SIZES])


def _lanes(n: int, per_lane: int = 50):
    kinds = ("send", "recv", "reduce", "copy", "wait")
    lanes = []
    for i in range(n):
        intervals = [(2.0 * j, 2.0 * j + 1.5, kinds[(i + j) % len(kinds)]) for j in range(per_lane)]
        lanes.append((f"tb {i}", intervals))
    return lanes


def _read_png(path):
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    return matplotlib.image.imread(path)


def _texts(fig):
    return [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))]


# --------------------------------------------------------------------------------------------------------
# Curves
# --------------------------------------------------------------------------------------------------------
def test_curves_with_gaps_write_a_readable_png(tmp_path):
    path = tmp_path / "curves.png"
    plot_curves(_curves(), path, title="allreduce", bound=BOUND)
    image = _read_png(path)
    height, width = image.shape[:2]
    assert 400 <= width <= 1500 and 300 <= height <= 1000
    assert [p.name for p in tmp_path.iterdir()] == ["curves.png"]  # no temporary file left behind


def test_curves_are_deterministic(tmp_path):
    a, b = tmp_path / "a.png", tmp_path / "b.png"
    plot_curves(_curves(), a, title="t", bound=BOUND)
    plot_curves(_curves(), str(b), title="t", bound=BOUND)
    assert a.read_bytes() == b.read_bytes()


def test_curves_draw_one_line_each_and_a_dashed_black_bound():
    fig = _curves_figure(_curves(), bound=BOUND)
    lines = [ln for ln in fig.axes[0].get_lines() if isinstance(ln, Line2D)]
    assert [ln.get_label() for ln in lines] == ["ring", "tree", "direct", "optimum"]
    dashed = [ln for ln in lines if ln.get_linestyle() == "--"]
    assert [ln.get_label() for ln in dashed] == ["optimum"]
    assert dashed[0].get_color() == "black"
    assert len(_curves_figure(_curves()).axes[0].get_lines()) == 3


def test_curves_break_at_missing_sizes():
    fig = _curves_figure(_curves())
    tree = fig.axes[0].get_lines()[1]
    y = np.asarray(tree.get_ydata(), dtype=float)
    assert np.isnan(y).sum() == 3  # 128K, 256K, 512K: a gap, not a segment from 64K to 1M
    assert fig.axes[0].get_xscale() == "log"


def test_curves_label_the_x_axis_in_human_sizes():
    fig = _curves_figure(_curves())
    fig.canvas.draw()
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels() if t.get_text()]
    assert labels and all(label[-1] in "KMG" for label in labels)
    assert len(labels) <= 11


# --------------------------------------------------------------------------------------------------------
# Timeline
# --------------------------------------------------------------------------------------------------------
def test_timeline_writes_a_deterministic_png(tmp_path):
    a, b = tmp_path / "a.png", tmp_path / "b.png"
    lanes = _lanes(8)
    for path in (a, b):
        plot_timeline(lanes, path, title="allreduce 64M", groups=[("links", 0), ("threadblocks", 4)])
    assert a.read_bytes() == b.read_bytes()
    height, width = _read_png(a).shape[:2]
    assert width >= 400 and height >= 3 * 100 - 1  # at least 3 inches at 100 dpi


def test_timeline_with_100_lanes_draws_60_and_a_note():
    fig = _timeline_figure(_lanes(100, per_lane=5))
    ax = fig.axes[0]
    assert len(ax.get_yticks()) == MAX_LANES
    assert ax.get_yticklabels()[0].get_text() == "tb 0"
    assert ax.get_yticklabels()[-1].get_text() == f"tb {MAX_LANES - 1}"
    assert "+40 more lanes" in _texts(fig)
    assert fig.get_figheight() == pytest.approx(0.22 * MAX_LANES + 1.6)


def test_timeline_draws_one_collection_per_lane_and_kind():
    lanes = [("link 0", [(0, 1, "busy"), (2, 3, "busy"), (4, 5, "busy")]),
             ("tb 0", [(0, 1, "send"), (1, 2, "wait"), (2, 3, "send")])]
    fig = _timeline_figure(lanes)
    bars = [c for c in fig.axes[0].collections if isinstance(c, PolyCollection)]
    assert len(bars) == 3  # busy; send, wait
    assert fig.get_figheight() == 3.0
    legend = fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == ["send", "wait", "busy"]


def test_timeline_axis_end_and_groups():
    lanes = _lanes(6, per_lane=3)  # latest end 5.5
    ax = _timeline_figure(lanes).axes[0]
    assert ax.get_xlim() == pytest.approx((0, 5.5))
    fig = _timeline_figure(lanes, total_us=20, groups=[("links", 0), ("threadblocks", 2), ("gone", 99)])
    assert fig.axes[0].get_xlim() == pytest.approx((0, 20))
    texts = _texts(fig)
    assert "links" in texts and "threadblocks" in texts and "gone" not in texts


def test_timeline_refuses_a_backward_interval(tmp_path):
    with pytest.raises(CollsError, match="tb 0"):
        plot_timeline([("tb 0", [(3.0, 1.0, "send")])], tmp_path / "t.png")


# --------------------------------------------------------------------------------------------------------
# Sizes
# --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("nbytes, text", [
    (1024, "1K"), (2**20, "1M"), (3 * 2**20, "3M"), (1000, "1000"), (2**30, "1G"), (4 * 2**30, "4G"),
    (1536, "1536"), (2048, "2K"), (2**40, "1T"), (0, "0"), (1, "1"), (1023 * 2**20, "1023M"),
])
def test_human_size(nbytes, text):
    assert human_size(nbytes) == text


# --------------------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------------------
def _plot_both(path):
    yield lambda: plot_curves(_curves(), path)
    yield lambda: plot_timeline(_lanes(2), path)


def test_missing_folder_names_the_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a short path: messages quote at most 80 characters of one
    for call in _plot_both("no such folder/out.png"):
        with pytest.raises(CollsError) as info:
            call()
        message = str(info.value)
        assert "no such folder/out.png" in message and "\n" not in message
    assert not (tmp_path / "no such folder").exists()


def test_unwritable_paths_are_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a file").write_text("x")
    (tmp_path / "a folder").mkdir()
    for path in ("a folder", "a file/out.png"):
        for call in _plot_both(path):
            with pytest.raises(CollsError, match=path):
                call()
    assert (tmp_path / "a file").read_text() == "x"
    assert list((tmp_path / "a folder").iterdir()) == []


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes to read-only folders")
def test_read_only_folder_is_refused(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        for call in _plot_both(folder / "out.png"):
            with pytest.raises(CollsError, match="out.png"):
                call()
    finally:
        folder.chmod(0o755)


def test_existing_file_is_replaced_whole(tmp_path):
    path = tmp_path / "c.png"
    path.write_bytes(b"old contents")
    plot_curves(_curves(), path)
    assert path.read_bytes().startswith(PNG_SIGNATURE)


@pytest.mark.parametrize("call", [
    lambda p: plot_curves([], p),
    lambda p: plot_curves([("empty", [])], p),
    lambda p: plot_timeline([], p),
])
def test_empty_input_is_nothing_to_plot(tmp_path, call):
    with pytest.raises(CollsError, match="nothing to plot"):
        call(tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_sizes_must_be_positive_whole_numbers(tmp_path):
    for bad in (0, -1024, 1.5):
        with pytest.raises(CollsError, match="positive whole number"):
            plot_curves([("ring", [(bad, 1.0)])], tmp_path / "x.png")


def test_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "c.png"
    path.write_bytes(b"old contents")

    def refuse(src, dst):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(CollsError, match="cannot write .permission denied."):
        plot_curves(_curves(), path)
    assert path.read_bytes() == b"old contents"
    assert [p.name for p in tmp_path.iterdir()] == ["c.png"]


def test_png_carries_no_version_or_date(tmp_path):
    path = tmp_path / "c.png"
    plot_curves(_curves(), path)
    data = path.read_bytes()
    assert b"Software" not in data and b"matplotlib" not in data.lower()


def test_numpy_sizes_and_values_are_accepted():
    sizes = np.array(SIZES, dtype=np.int64)
    fig = _curves_figure([("ring", list(zip(sizes, np.linspace(1.0, 100.0, len(sizes)))))])
    assert len(fig.axes[0].get_lines()) == 1
