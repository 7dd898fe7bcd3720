"""The simulator's measured error against published runs, by size band.

Written by ``bench/calibrate.py`` (``make bench``) from the comparison in ``bench/CALIBRATION.md``; do not edit
by hand. Each band holds the typical (median) error of the modelled points in it, as a fraction: the model's
time is within that fraction of the published time for half the points. ``colls compile`` lets a file take a
size from the runtime's own algorithm only when the file is faster by more than this.
"""

from __future__ import annotations

# (smallest size in bytes, band, typical error, points) -- largest band first
BANDS = (
    (16 << 20, '16 MB and above', 0.041, 81),
    (64 << 10, '64 KB to 16 MB', 0.198, 45),
    (0, 'below 64 KB', 0.172, 58),
)


def margin(size: int) -> tuple[float, str]:
    """The measured error of the band ``size`` falls in, and the band's name."""
    for low, name, error, _ in BANDS:
        if size >= low:
            return error, name
    return BANDS[-1][2], BANDS[-1][1]
