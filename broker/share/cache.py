"""The in-flight cache of one share partition: batches sorted by first offset (Kafka's cachedState).

``InFlightCache`` keeps the :class:`~broker.share.inflight.InFlightBatch` runs of a share
partition in a sorted list with a parallel list of first offsets (``bisect``), and walks
them: the state of an offset, the runs in a given state, the states under a lock, the
first acquirable offset, the settled terminal prefix. It changes the *shape* of the cache
(insert, split, explode a batch that a walk cuts through, trim settled batches below the
SPSO) but never a record's state: ``SharePartition`` (partition.py) makes every transition.
"""
from __future__ import annotations

import bisect
from typing import Any, Iterable, Iterator

from broker.share.inflight import (
    ACQUIRED, ARCHIVING, AVAILABLE, CAUSE_DELIVERY_COUNT, CAUSE_REJECT, AcquisitionLock, InFlightBatch, InFlightState,
    terminal, unsettled,
)

Run = tuple[InFlightBatch, int, int, InFlightState]   # (batch, first, last, state) of a run of records


class InFlightCache:
    """In-flight batches sorted by first offset; ``batches[i]`` starts at ``firsts[i]``.

    Both lists are written only through this class's methods (and read by ``SharePartition``,
    which walks ``batches`` by index while it splits during an acquire)."""

    __slots__ = ("firsts", "batches")

    def __init__(self) -> None:
        self.firsts: list[int] = []
        self.batches: list[InFlightBatch] = []

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[InFlightBatch]:
        return iter(self.batches)

    # ------------------------------------------------------------------ shape

    def floor(self, offset: int) -> int:
        """Index of the last batch whose first offset is <= offset, or -1."""
        return bisect.bisect_right(self.firsts, offset) - 1

    def insert(self, b: InFlightBatch) -> None:
        i = bisect.bisect_left(self.firsts, b.first)
        self.firsts.insert(i, b.first)
        self.batches.insert(i, b)

    def split(self, i: int, at: int) -> InFlightBatch:
        """Split the i-th batch (one state, not in transition) before `at`; returns the second part."""
        rest = self.batches[i].split(at)
        self.firsts.insert(i + 1, at)
        self.batches.insert(i + 1, rest)
        return rest

    def trim(self, start: int) -> None:
        """Drop the leading batches that lie wholly below `start` and are settled."""
        k = 0
        while k < len(self.batches) and self.batches[k].last < start:
            b = self.batches[k]
            if any(unsettled(st) for _, _, st in b.states(b.first, b.last)):
                break
            k += 1
        if k:
            del self.batches[:k], self.firsts[:k]

    def load(self, start: int, state_batches: Iterable[Any], delivery_count_limit: int) -> tuple[int, int]:
        """Fill the empty cache from persisted StateBatches (ReadShareGroupState), clipped at `start`
        (the SPSO). ACQUIRED comes back AVAILABLE; a hole between batches is AVAILABLE with delivery
        count 0 (unknown records, offered again: Kafka's gap window); an ARCHIVING batch gets its
        cause back (the reason is not persisted: at the delivery count limit it ran out of
        deliveries, else it was rejected). Returns (end offset, terminal records)."""
        end, done = start, 0
        for sb in sorted(state_batches, key=lambda s: s.first_offset):
            first, last = max(sb.first_offset, end), sb.last_offset
            if first > last:
                continue
            if first > end:
                self.insert(InFlightBatch(end, first - 1, InFlightState(AVAILABLE, 0)))
            state = AVAILABLE if sb.delivery_state == ACQUIRED else sb.delivery_state
            cause = 0
            if state == ARCHIVING:
                cause = CAUSE_DELIVERY_COUNT if sb.delivery_count >= delivery_count_limit else CAUSE_REJECT
            self.insert(InFlightBatch(first, last, InFlightState(state, sb.delivery_count, cause=cause)))
            if terminal(state):
                done += last - first + 1
            end = last + 1
        return end, done

    # ------------------------------------------------------------------ walks

    def state_at(self, offset: int) -> InFlightState | None:
        i = self.floor(offset)
        if i < 0 or self.batches[i].last < offset:
            return None
        b = self.batches[i]
        return b.state if b.offsets is None else b.offsets[offset - b.first]

    def runs(self) -> Iterator[Run]:
        """Every (batch, first, last, state) run of the cache, ascending."""
        for b in self.batches:
            for lo, hi, st in b.states(b.first, b.last):
                yield b, lo, hi, st

    def in_state(self, lo: int, hi: int, state: int) -> Iterator[Run]:
        """The runs within lo..hi that are in `state` with no transition in flight; a whole-state
        batch reaching past lo..hi is exploded first."""
        i = max(self.floor(lo), 0)
        while i < len(self.batches) and self.batches[i].first <= hi:
            b = self.batches[i]
            i += 1
            if b.last < lo:
                continue
            if b.offsets is None:
                st = b.state
                if st.state != state or st.rollback is not None:
                    continue
                if b.first < lo or b.last > hi:
                    b.explode()
            for s_lo, s_hi, st in b.states(lo, hi):
                if st.state == state and st.rollback is None:
                    yield b, s_lo, s_hi, st

    def held_by(self, member: str, lo: int, hi: int, per_offset: bool) -> list[Run] | None:
        """The runs of lo..hi when every cached record there is ACQUIRED by `member` with no
        transition in flight, else None. A batch within lo..hi is one run unless `per_offset`;
        a batch that is not (or reaches past lo..hi) is exploded, one run per offset."""
        out: list[Run] = []
        for b in self.batches[max(self.floor(lo), 0):self.floor(hi) + 1]:
            if b.last < lo:
                continue
            if b.offsets is None:
                if not _held(b.state, member):
                    return None
                if not per_offset and b.first >= lo and b.last <= hi:
                    out.append((b, b.first, b.last, b.state))
                    continue
                b.explode()
            for off, _, st in b.states(lo, hi):
                if not _held(st, member):
                    return None
                out.append((b, off, off, st))
        return out

    def under_lock(self, lock: AcquisitionLock) -> Iterator[Run]:
        """The runs whose state holds `lock`."""
        i = max(self.floor(lock.first), 0)
        while i < len(self.batches) and self.batches[i].first <= lock.last:
            b = self.batches[i]
            i += 1
            for lo, hi, st in b.states(lock.first, lock.last):
                if st.lock is lock:
                    yield b, lo, hi, st

    def first_acquirable(self, start: int, now_ms: int) -> int | None:
        """The lowest offset at/after `start` that is AVAILABLE, not in transition and due."""
        for b in self.batches:
            if b.offsets is None:
                st = b.state
                if st.state == AVAILABLE and st.rollback is None and st.due_ms <= now_ms and b.last >= start:
                    return max(b.first, start)
            else:
                for k, st in enumerate(b.offsets):
                    if st.state == AVAILABLE and st.rollback is None and st.due_ms <= now_ms \
                            and b.first + k >= start:
                        return b.first + k
        return None

    def settled_prefix(self, start: int) -> tuple[int, int, bool]:
        """(end, terminal records passed, blocked): the contiguous settled terminal records from
        `start` end before `end`; holes between batches hold no record. `blocked`: a record
        still unsettled stops the walk (else `end` is past the last cached batch)."""
        pos, removed = start, 0
        i = max(self.floor(pos), 0)
        while i < len(self.batches):
            b = self.batches[i]
            i += 1
            if b.last < pos:
                continue
            pos = max(pos, b.first)
            if b.offsets is None:
                if unsettled(b.state):
                    return pos, removed, True
                removed += b.last - pos + 1
                pos = b.last + 1
            else:
                offs, k0 = b.offsets, pos - b.first
                k = k0
                while k < len(offs) and not unsettled(offs[k]):
                    k += 1
                removed += k - k0
                pos = b.first + k
                if k < len(offs):
                    return pos, removed, True
        return pos, removed, False

    def terminal_count(self, start: int) -> int:
        """Settled terminal records at or after `start` (the DeliveryCompleteCount, recounted)."""
        return sum(s_hi - max(s_lo, start) + 1 for b in self.batches
                   for s_lo, s_hi, st in b.states(start, b.last) if terminal(st.state) and st.rollback is None)


def _held(st: InFlightState, member: str) -> bool:
    return st.state == ACQUIRED and st.rollback is None and st.member_id == member
