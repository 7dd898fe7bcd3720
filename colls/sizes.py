"""Call sizes as users write them (``1KB``, ``4GB``, ``1KB:1GB:4``) and as the tools print them.

Units are binary (1 KB = 1024 bytes), as nccl-tests prints its sizes.
"""

from __future__ import annotations

import re

from colls.errors import CollsError, excerpt

MAX_SIZE = 1 << 40                                               # 1 TiB per call: beyond any GPU memory
MAX_SIZES = 64                                                   # sizes in one sweep
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
          "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30, "T": 1 << 40, "TB": 1 << 40,
          "TIB": 1 << 40}


def size_text(nbytes: int) -> str:
    """``1024`` -> ``"1KB"``, ``3 << 20`` -> ``"3MB"``; other sizes in bytes (``"1000B"``)."""
    for unit, scale in (("TB", 1 << 40), ("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return f"{nbytes}B"


def parse_size(text: str, key: str = "--size") -> int:
    """One size as users write it: ``4096``, ``1GB``."""
    text = str(text)
    m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).upper() not in _UNITS:
        raise CollsError(f"{text!r} is not a size (a whole number with an optional unit B, KB, MB, GB, TB; "
                         "1KB = 1024 bytes)", key=key)
    value = int(m.group(1)) * _UNITS[m.group(2).upper()]
    if not 1 <= value <= MAX_SIZE:
        raise CollsError(f"{text!r} is out of range: sizes are 1 byte to 1TB", key=key)
    return value


def parse_sizes(text: str, key: str = "--sizes") -> list[int]:
    """``"1KB:4GB"`` (every power-of-two multiple from the first to the last), ``"1KB:1GB:4"`` (times 4
    each time) or a comma list ``"8,1MB,1GB"``; sorted, without repeats."""
    text = str(text)
    if ":" in text:
        parts = text.split(":")
        if len(parts) not in (2, 3):
            raise CollsError(f"{text!r}: write FIRST:LAST or FIRST:LAST:FACTOR", key=key)
        lo, hi = parse_size(parts[0], key), parse_size(parts[1], key)
        factor = 2
        if len(parts) == 3:
            if not parts[2].strip().isdigit() or not 2 <= int(parts[2]) <= 1024:
                raise CollsError(f"{text!r}: the factor must be a whole number from 2 to 1024", key=key)
            factor = int(parts[2])
        if hi < lo:
            raise CollsError(f"{text!r}: the last size is smaller than the first", key=key)
        sizes = []
        s = lo
        while s <= hi and len(sizes) <= MAX_SIZES:
            sizes.append(s)
            s *= factor
    else:
        parts = text.split(",")
        if len(parts) > 1 and not all(part.strip() for part in parts):
            raise CollsError(f"{excerpt(text)}: an empty item in the comma list", key=key)
        sizes = [parse_size(part, key) for part in parts if part.strip()]
        if not sizes:
            raise CollsError("no sizes given", key=key)
    sizes = sorted(set(sizes))
    if len(sizes) > MAX_SIZES:
        raise CollsError(f"{text!r} gives more than {MAX_SIZES} sizes", key=key)
    return sizes
