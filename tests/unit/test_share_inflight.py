"""In-flight data structures: batches, per-offset states, split, shared locks, run coalescing."""
from __future__ import annotations

from broker.share.inflight import (
    ACKNOWLEDGED, ACQUIRED, ARCHIVED, AVAILABLE, AcquisitionLock, InFlightBatch, InFlightState, coalesce,
    terminal, unsettled,
)


class Handle:
    def __init__(self):
        self.cancelled = False

    def cancel(self):
        self.cancelled = True


def locked(first, last):
    lock = AcquisitionLock("m", first, last, 1000)
    lock.handle = Handle()
    st = InFlightState(AVAILABLE, 0)
    st.take("m", lock)
    return InFlightBatch(first, last, st), lock


def test_states_of_a_whole_batch_are_one_run_clipped():
    b = InFlightBatch(10, 19, InFlightState(AVAILABLE, 2))
    assert [(lo, hi) for lo, hi, _ in b.states(0, 100)] == [(10, 19)]
    assert [(lo, hi) for lo, hi, _ in b.states(12, 14)] == [(12, 14)]
    assert list(b.states(20, 30)) == []


def test_take_and_drop_lock_count_references():
    b, lock = locked(0, 4)
    st = b.state
    assert (st.state, st.delivery_count, st.member_id, lock.refs) == (ACQUIRED, 1, "m", 1)
    st.drop_lock()
    assert st.lock is None and lock.refs == 0 and lock.handle is None


def test_explode_shares_the_lock_between_offsets():
    b, lock = locked(0, 4)
    handle = lock.handle
    b.explode()
    assert b.state is None and len(b.offsets) == 5 and lock.refs == 5
    assert [(lo, hi) for lo, hi, _ in b.states(1, 3)] == [(1, 1), (2, 2), (3, 3)]
    for st in b.offsets[:4]:
        st.drop_lock()
    assert not handle.cancelled              # one offset still holds it
    b.offsets[4].drop_lock()
    assert handle.cancelled and lock.refs == 0


def test_split_keeps_one_state_per_part():
    b = InFlightBatch(0, 9999, InFlightState(AVAILABLE, 1))
    rest = b.split(10)
    assert (b.first, b.last, rest.first, rest.last) == (0, 9, 10, 9999)
    assert b.offsets is None and rest.offsets is None and rest.state is not b.state
    assert (rest.state.state, rest.state.delivery_count) == (AVAILABLE, 1)


def test_split_of_a_locked_batch_shares_the_lock():
    b, lock = locked(0, 9)
    rest = b.split(5)
    assert rest.state.lock is lock and lock.refs == 2
    b.state.drop_lock()
    assert not lock.handle.cancelled
    rest.state.drop_lock()
    assert lock.refs == 0


def test_coalesce_merges_adjacent_equal_runs_across_batches():
    a = InFlightBatch(0, 4, InFlightState(ACKNOWLEDGED, 1))
    b = InFlightBatch(5, 9, InFlightState(ACKNOWLEDGED, 1))
    c = InFlightBatch(10, 12, InFlightState(ARCHIVED, 1))
    c.explode()
    c.offsets[1].state = AVAILABLE
    assert coalesce([(c, 10, 12), (b, 5, 9), (a, 2, 4)]) == [
        (2, 9, ACKNOWLEDGED, 1), (10, 10, ARCHIVED, 1), (11, 11, AVAILABLE, 1), (12, 12, ARCHIVED, 1)]


def test_terminal_and_unsettled():
    assert terminal(ACKNOWLEDGED) and terminal(ARCHIVED) and not terminal(ACQUIRED)
    assert not unsettled(InFlightState(ARCHIVED, 1))
    assert unsettled(InFlightState(ARCHIVED, 1, rollback=(ACQUIRED, 1, "m")))
    assert unsettled(InFlightState(AVAILABLE, 0))
