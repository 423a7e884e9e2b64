"""The log batch refs a ShareFetch read for one share partition, as the acquire path sees them.

Pure functions over batch refs (objects with ``base_offset`` and ``last_offset``, ascending)
and offset ranges; ``SharePartition.acquire`` (partition.py) uses them.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence


def last_of_batch_with(batches: Sequence[Any], offset: int) -> int:
    """Last offset of the fetched batch containing `offset` (whole batches are acquired)."""
    found = None
    for bt in batches:
        if bt.base_offset > offset:
            break
        found = bt
    if found is not None and offset <= found.last_offset:
        return found.last_offset
    return offset


def overlapping(batches: Sequence[Any], ranges: list[tuple[int, int, int]]) -> list[Any]:
    """The refs of `batches` that overlap the ascending (first, last, ...) `ranges`."""
    out, k = [], 0
    for bt in batches:
        while k < len(ranges) and ranges[k][1] < bt.base_offset:
            k += 1
        if k == len(ranges):
            break
        if ranges[k][0] <= bt.last_offset:
            out.append(bt)
    return out


def without_ranges(acquired: list[tuple[int, int, int]], spans: Iterable[tuple[int, int]]
                   ) -> tuple[list[tuple[int, int, int]], list[tuple[int, int]]]:
    """The (first, last, delivery count) `acquired` ranges with the (first, last) `spans` cut out,
    and the (first, last) parts that fell inside the spans."""
    spans = sorted(spans)
    kept: list[tuple[int, int, int]] = []
    dropped: list[tuple[int, int]] = []
    for first, last, dc in acquired:
        cur = first
        for af, al in spans:
            if al < cur or af > last:
                continue
            if af > cur:
                kept.append((cur, af - 1, dc))
            dropped.append((max(af, cur), min(al, last)))
            cur = al + 1
            if cur > last:
                break
        if cur <= last:
            kept.append((cur, last, dc))
    return kept, dropped
