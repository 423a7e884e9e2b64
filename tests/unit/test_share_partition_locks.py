"""SharePartition acquisition locks and releases: expiry (persisted, retried), the delivery count
limit, a member's records released when its share session closes, locks running out during writes."""
from __future__ import annotations

from protocol.errors import Errors

from broker.share.acks import ACK_ACCEPT as ACC, ACK_RELEASE as REL
from broker.share.partition import ACQUIRED, ARCHIVED, AVAILABLE
from tests.unit.share_partition_support import make


# ---------------------------------------------------------------- lock expiry and release

async def test_lock_expiry_persists_then_makes_records_available():
    h = await make(sizes=(10,) * 3, start=0)
    h.fetch("a", max_records=10)
    h.t.advance(29_999)
    assert h.state(0)[0] == ACQUIRED
    h.t.advance(1)
    assert h.state(0) == (AVAILABLE, 1, "", True)    # in transition until written
    assert h.sp.next_fetch_offset() == 10
    wakeups = h.wakeups
    await h.sp.drain()
    assert h.last_write() == (0, 0, [(0, 9, AVAILABLE, 1)])
    assert h.state(0) == (AVAILABLE, 1, "", False) and h.wakeups > wakeups
    assert await h.ack("a", 0, 9, ACC) == Errors.INVALID_RECORD_STATE
    assert h.fetch("b", max_records=10) == [(0, 9, 2)]


async def test_delivery_count_limit_archives_on_expiry():
    h = await make(sizes=(10,) * 3, start=0, delivery_count_limit=2)
    h.fetch("a", max_records=10)
    h.t.advance(30_000)
    await h.sp.drain()
    assert h.fetch("a", max_records=10) == [(0, 9, 2)]
    h.t.advance(30_000)
    await h.sp.drain()
    assert h.last_write() == (0, 10, [(0, 9, ARCHIVED, 2)])
    assert h.sp.start_offset == 10 and h.sp.delivery_complete_count == 0
    assert h.fetch("b", max_records=10) == [(10, 19, 1)]


async def test_expiry_write_failure_is_retried():
    h = await make(sizes=(10,) * 3, start=0)
    h.fetch("a", max_records=10)
    h.p.errors = [Errors.COORDINATOR_NOT_AVAILABLE]
    h.t.advance(30_000)
    await h.sp.drain()
    assert h.state(0) == (ACQUIRED, 1, "a", False)   # not written, not applied
    assert h.t.pending() == [31_000]
    h.t.advance(1000)
    await h.sp.drain()
    assert h.state(0) == (AVAILABLE, 1, "", False)
    assert len(h.p.writes) == 2


async def test_release_member_on_session_close():
    h = await make(sizes=(5,) * 4, start=0)
    assert h.fetch("a", max_records=5) == [(0, 4, 1)]
    assert h.fetch("b", max_records=5) == [(5, 9, 1)]
    assert await h.ack("a", 0, 4, REL) == 0
    assert h.fetch("a", max_records=5) == [(0, 4, 2)]
    assert await h.ack("a", 2, 2, ACC) == 0
    assert await h.sp.release_member("a") == 0
    # as Kafka 4.3+ (KAFKA-19972): the release keeps the delivery count the acquisition gave
    assert h.last_write() == (0, 1, [(0, 1, AVAILABLE, 2), (3, 4, AVAILABLE, 2)])
    assert h.state(7) == (ACQUIRED, 1, "b", False)
    assert h.t.pending() == [30_000]
    assert await h.sp.release_member("nobody") == 0 and len(h.p.writes) == 3
    assert h.fetch("c", max_records=4) == [(0, 1, 3), (3, 4, 3)]


async def test_session_close_releases_count_toward_the_delivery_limit():
    # A consumer that crashes on a poison record (its session closes every time) no longer
    # gets it forever: each release keeps the count and the limit archives it.
    h = await make(sizes=(1, 4), start=0, delivery_count_limit=3)
    for attempt in (1, 2, 3):
        assert h.fetch(f"m{attempt}", max_records=1) == [(0, 0, attempt)]
        assert await h.sp.release_member(f"m{attempt}") == 0
    assert h.last_write() == (0, 1, [(0, 0, ARCHIVED, 3)])
    assert h.sp.start_offset == 1 and h.state(0) is None   # archived, below the SPSO
    assert h.fetch("m4") == [(1, 4, 1)]
    h.check_dcc()
