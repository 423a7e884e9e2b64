"""Run-length share-partition state and the batch combiner (Kafka's PersisterStateBatchCombiner).

Durable share state is a list of ``StateBatch(first_offset, last_offset,
delivery_state, delivery_count)`` runs.  :func:`combine_state_batches` folds a
new set of runs into an existing one so that repeated partial acknowledgements
do not fragment the state without bound:

* runs entirely below ``start_offset`` are dropped, and a run straddling it is
  clipped to start there (``start_offset == -1`` means "no pruning");
* where runs overlap, the one with the higher *priority* wins each offset.
  As in Kafka, priority is ``(delivery_count, delivery_state)`` compared in that
  order, not arrival order: a higher delivery count always wins, and for the
  same count the higher state (AVAILABLE 0 < ACKNOWLEDGED 2 < ARCHIVED 4) wins.
  For the writes a share-partition leader actually sends this is the same as
  "newer wins", because delivery counts only grow and terminal states are final;
* contiguous or overlapping runs with the same state and count coalesce.

The result is sorted, non-overlapping and maximally coalesced.  Kafka's
TreeSet-based merge produces the same runs except in rare orderings where it
leaves two adjacent equal runs uncoalesced; we always coalesce (same per-offset
state, fewer runs).  Runs with ``last_offset < first_offset`` are dropped.
"""
from __future__ import annotations

import heapq
from typing import Iterable, NamedTuple


class StateBatch(NamedTuple):
    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


def combine_state_batches(
    so_far: Iterable[StateBatch], new: Iterable[StateBatch], start_offset: int
) -> tuple[StateBatch, ...]:
    """Merge ``new`` into ``so_far`` (see the module docstring for the rules)."""
    runs: list[StateBatch] = []
    for b in (*so_far, *new):
        first, last = b.first_offset, b.last_offset
        if last < first or (start_offset != -1 and last < start_offset):
            continue
        if start_offset != -1 and first < start_offset:
            b = StateBatch(start_offset, last, b.delivery_state, b.delivery_count)
        runs.append(b)
    if len(runs) < 2:
        return tuple(runs)

    # Sweep the boundaries; between two consecutive boundaries the set of
    # covering runs is constant, and the highest-priority one owns the segment.
    runs.sort()
    bounds = sorted({b.first_offset for b in runs} | {b.last_offset + 1 for b in runs})
    active: list[tuple[int, int, int]] = []  # (-count, -state, last_offset): best on top
    out: list[StateBatch] = []
    i = 0
    for lo, nxt in zip(bounds, bounds[1:]):
        while i < len(runs) and runs[i].first_offset <= lo:
            r = runs[i]
            heapq.heappush(active, (-r.delivery_count, -r.delivery_state, r.last_offset))
            i += 1
        while active and active[0][2] < lo:
            heapq.heappop(active)
        if not active:
            continue
        count, state = -active[0][0], -active[0][1]
        prev = out[-1] if out else None
        if (prev is not None and prev.last_offset + 1 == lo
                and prev.delivery_state == state and prev.delivery_count == count):
            out[-1] = prev._replace(last_offset=nxt - 1)
        else:
            out.append(StateBatch(lo, nxt - 1, state, count))
    return tuple(out)
