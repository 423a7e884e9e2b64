"""In-flight record state of a share partition: the data structures, no transitions.

A share partition caches the records it has handed out (or loaded from the share
coordinator) as :class:`InFlightBatch` runs keyed by first offset. A batch has one
:class:`InFlightState` for all its offsets, or one per offset after ``explode()``
(acknowledgements that differ inside the batch, a partial acquire, throttling).
``split(at)`` cuts a batch in two runs that each keep one state, which is how a
record_limit acquisition takes N records of a bigger batch without a state per offset.

An :class:`AcquisitionLock` is the timer of one acquired run; the states that point at
it are counted in ``refs`` and the timer is cancelled when the count reaches zero.

``SharePartition`` (broker/share/partition.py) owns these objects and decides which
records transition and when; this module shapes them and holds the rules of one record's
transition (Kafka's ``InFlightState.startStateTransition`` / ``completeStateTransition``).
"""
from __future__ import annotations

from typing import Any, Iterator

# Record states, as persisted in StateBatch.DeliveryState (ARCHIVING: KIP-1191, on its way to the
# dead-letter queue; neither terminal nor acquirable).
AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVING, ARCHIVED = 0, 1, 2, 3, 4
# Why a record goes to the dead-letter queue (Kafka's ShareGroupDLQManager causes).
CAUSE_REJECT, CAUSE_DELIVERY_COUNT = 1, 2


def terminal(state: int) -> bool:
    return state == ACKNOWLEDGED or state == ARCHIVED


def unsettled(st: "InFlightState") -> bool:
    """Not terminal, or in a transition that awaits the persister."""
    return st.rollback is not None or not terminal(st.state)


class AcquisitionLock:
    """One acquisition lock: a timer shared by the `refs` states that point at it."""

    __slots__ = ("member_id", "first", "last", "deadline_ms", "handle", "refs", "expired")

    def __init__(self, member_id: str, first: int, last: int, deadline_ms: int):
        self.member_id, self.first, self.last, self.deadline_ms = member_id, first, last, deadline_ms
        self.handle: Any = None
        self.refs = 0
        self.expired = False


class InFlightState:
    """State of a batch or of one offset. `rollback` is set while a transition awaits the persister.

    `due_ms` (event-loop clock) is when an AVAILABLE record may be acquired again after a delayed
    redelivery (share.redelivery.backoff.ms; 0 = at once); `cause` says why an ARCHIVING record
    goes to the dead-letter queue (CAUSE_REJECT or CAUSE_DELIVERY_COUNT)."""

    __slots__ = ("state", "delivery_count", "member_id", "lock", "rollback", "due_ms", "cause")

    def __init__(self, state: int, delivery_count: int, member_id: str = "",
                 lock: AcquisitionLock | None = None, rollback: tuple | None = None,
                 due_ms: int = 0, cause: int = 0):
        self.state, self.delivery_count, self.member_id = state, delivery_count, member_id
        self.lock, self.rollback = lock, rollback
        self.due_ms, self.cause = due_ms, cause

    def copy(self) -> "InFlightState":
        """The same state for other offsets; a lock is shared (one more reference)."""
        if self.lock is not None:
            self.lock.refs += 1
        return InFlightState(self.state, self.delivery_count, self.member_id, self.lock, self.rollback,
                             self.due_ms, self.cause)

    def take(self, member: str, lock: AcquisitionLock) -> None:
        """AVAILABLE -> ACQUIRED by `member` under `lock` (acquisition is not persisted)."""
        self.state, self.member_id = ACQUIRED, member
        self.delivery_count += 1
        self.lock = lock
        lock.refs += 1

    def start_transition(self, target: int, *, delivery_count_limit: int, dlq: bool, reject: bool = False) -> bool:
        """Start a persisted transition (the record leaves its member); False when it is not allowed.

        The delivery count is left alone (Kafka's `DeliveryCountOps.NO_OP`: acquisition
        counts a delivery, nothing else does); a record made AVAILABLE at the delivery
        count limit is archived instead (Kafka's tryUpdateState), through ARCHIVING when
        the group has a dead-letter queue (`dlq`), as a REJECTed record is (KIP-1191)."""
        cur = self.state
        if self.rollback is not None or cur == ARCHIVING:
            return False
        cause = 0
        if target == AVAILABLE and self.delivery_count >= delivery_count_limit:
            target, cause = ARCHIVED, CAUSE_DELIVERY_COUNT
        elif reject:
            cause = CAUSE_REJECT
        if cause and target == ARCHIVED and dlq:
            target = ARCHIVING
        if cur == target or terminal(cur) or (cur == AVAILABLE and target != ACQUIRED):
            return False
        self.cause = cause
        self.rollback = (cur, self.delivery_count, self.member_id)
        self.state, self.member_id = target, ""
        return True

    def complete_transition(self, commit: bool) -> tuple[int, int, str] | None:
        """End the transition in flight: keep the new state (`commit`) or restore the old one.
        Returns the old (state, delivery count, member), or None when none was in flight."""
        prev = self.rollback
        if prev is not None:
            self.rollback = None
            if not commit:
                self.state, self.delivery_count, self.member_id = prev
        return prev

    def archive(self) -> None:
        """ARCHIVED in memory at once (log start moved past it, compacted away, aborted); a
        transition in flight keeps it archived whether it commits or rolls back."""
        self.state, self.member_id = ARCHIVED, ""
        self.drop_lock()
        if self.rollback is not None:
            self.rollback = (ARCHIVED, self.delivery_count, "")

    def relock(self, lock: AcquisitionLock) -> None:
        """Hold `lock` instead of the current one (RENEW)."""
        self.drop_lock()
        self.lock = lock
        lock.refs += 1

    def drop_lock(self) -> None:
        lock = self.lock
        if lock is not None:
            self.lock = None
            lock.refs -= 1
            if lock.refs <= 0 and lock.handle is not None:
                lock.handle.cancel()
                lock.handle = None

    def __repr__(self) -> str:
        t = "*" if self.rollback else ""
        return f"({self.state}{t} dc={self.delivery_count} {self.member_id!r})"


class InFlightBatch:
    """Offsets first..last: one `state` for all, or `offsets[i]` for first+i after `explode()`."""

    __slots__ = ("first", "last", "state", "offsets")

    def __init__(self, first: int, last: int, state: InFlightState | None):
        self.first, self.last, self.state = first, last, state
        self.offsets: list[InFlightState] | None = None

    def states(self, lo: int, hi: int) -> Iterator[tuple[int, int, InFlightState]]:
        """(first, last, state) runs covering lo..hi clipped to this batch."""
        lo, hi = max(lo, self.first), min(hi, self.last)
        if lo > hi:
            return
        if self.offsets is None:
            yield lo, hi, self.state
        else:
            base, offs = self.first, self.offsets
            for off in range(lo, hi + 1):
                yield off, off, offs[off - base]

    def explode(self) -> None:
        """Keep one state per offset from now on (each a copy of the batch state)."""
        st, n = self.state, self.last - self.first + 1
        if st.lock is not None:
            st.lock.refs += n - 1
        self.offsets = [InFlightState(st.state, st.delivery_count, st.member_id, st.lock, st.rollback,
                                      st.due_ms, st.cause) for _ in range(n)]
        self.state = None

    def split(self, at: int) -> "InFlightBatch":
        """Cut a whole-state batch before offset `at` (first < at <= last): this batch keeps
        first..at-1, the returned one (a copy of the state) holds at..last.

        Only for a batch no pending persister write refers to (no `rollback`): a write
        remembers its (batch, lo, hi) ranges and would miss the part moved out."""
        st = self.state
        assert self.offsets is None and st is not None and st.rollback is None and self.first < at <= self.last
        rest = InFlightBatch(at, self.last, st.copy())
        self.last = at - 1
        return rest

    def __repr__(self) -> str:
        return f"Batch({self.first}-{self.last} {self.state if self.offsets is None else self.offsets})"


def merge_runs(runs: list[tuple[int, int, int, int]]) -> list[tuple[int, int, int, int]]:
    """(first, last, a, b) runs sorted, adjacent runs with equal (a, b) merged."""
    merged: list[tuple[int, int, int, int]] = []
    for lo, hi, a, b in sorted(runs):
        if merged and merged[-1][1] == lo - 1 and merged[-1][2:] == (a, b):
            merged[-1] = (merged[-1][0], hi, a, b)
        else:
            merged.append((lo, hi, a, b))
    return merged


def coalesce(changes: list[tuple[InFlightBatch, int, int]]) -> list[tuple[int, int, int, int]]:
    """(first, last, state, delivery_count) runs of the changed records, adjacent equal runs merged."""
    runs: list[tuple[int, int, int, int]] = []
    for b, lo, hi in sorted(changes, key=lambda c: c[1]):
        for s_lo, s_hi, st in b.states(lo, hi):
            if runs and runs[-1][1] == s_lo - 1 and runs[-1][2] == st.state \
                    and runs[-1][3] == st.delivery_count:
                runs[-1] = (runs[-1][0], s_hi, st.state, st.delivery_count)
            else:
                runs.append((s_lo, s_hi, st.state, st.delivery_count))
    return runs
