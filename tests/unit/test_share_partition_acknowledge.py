"""SharePartition acknowledgements: ACCEPT / RELEASE / REJECT / GAP / RENEW per batch or per offset,
SPSO advance, Kafka's error codes, all-or-nothing batches."""
from __future__ import annotations

import asyncio

from protocol.errors import Errors

from broker.share.acks import (
    ACK_ACCEPT as ACC, ACK_GAP as GAP, ACK_REJECT as REJ, ACK_RELEASE as REL, ACK_RENEW as RENEW,
)
from broker.share.partition import ACKNOWLEDGED, ACQUIRED, ARCHIVED, AVAILABLE
from tests.unit.share_partition_support import AckBatch, Ref, make


# ---------------------------------------------------------------- acknowledge

async def test_accept_moves_spso_and_persists_then_commits():
    h = await make(sizes=(10,) * 3, start=0)
    h.fetch("a", max_records=10)
    assert await h.ack("a", 0, 9, ACC) == 0
    assert h.last_write() == (0, 10, [(0, 9, ACKNOWLEDGED, 1)])
    assert h.sp.start_offset == 10 and h.sp.delivery_complete_count == 0
    assert h.t.pending() == []  # lock cancelled
    assert h.state(5) is None   # dropped from the cache


async def test_partial_acks_split_the_batch():
    h = await make(sizes=(10,) * 3, start=0)
    h.fetch("a", max_records=10)
    assert await h.ack("a", 0, 9, ACC, ACC, REL, REJ, GAP, ACC, ACC, ACC, ACC, ACC) == 0
    assert h.last_write() == (0, 9, [(0, 1, ACKNOWLEDGED, 1), (2, 2, AVAILABLE, 1),
                                     (3, 4, ARCHIVED, 1), (5, 9, ACKNOWLEDGED, 1)])
    assert h.sp.start_offset == 2 and h.sp.delivery_complete_count == 7
    assert h.state(2) == (AVAILABLE, 1, "", False) and h.state(4) == (ARCHIVED, 1, "", False)
    assert h.t.pending() == []  # no offset of the batch holds the lock any more
    assert h.fetch("b", max_records=1) == [(2, 2, 2)]
    assert await h.ack("b", 2, 2, ACC) == 0
    assert h.sp.start_offset == 10
    h.check_dcc()


async def test_sub_range_ack_keeps_the_rest_locked():
    h = await make(sizes=(10,) * 3, start=0)
    h.fetch("a", max_records=10)
    assert await h.ack("a", 0, 3, ACC) == 0
    assert h.last_write() == (0, 4, [(0, 3, ACKNOWLEDGED, 1)])
    assert h.sp.start_offset == 4 and h.state(4) == (ACQUIRED, 1, "a", False)
    assert h.t.pending() == [30_000]
    h.t.advance(30_000)
    await h.sp.drain()
    assert h.last_write() == (4, 0, [(4, 9, AVAILABLE, 1)])


async def test_gap_acknowledgements_archive_offsets_without_records():
    h = await make(sizes=(10,) * 3, start=0)
    h.fetch("a", max_records=10)
    assert await h.ack("a", 0, 9, GAP) == 0
    assert h.last_write() == (0, 10, [(0, 9, ARCHIVED, 1)])
    assert h.sp.start_offset == 10


async def test_spso_advances_only_over_a_contiguous_terminal_prefix():
    h = await make(sizes=(5,) * 4, start=0)
    assert h.fetch("a", max_records=5) == [(0, 4, 1)]
    assert h.fetch("b", max_records=5) == [(5, 9, 1)]
    assert await h.ack("b", 5, 9, ACC) == 0
    assert h.sp.start_offset == 0 and h.sp.delivery_complete_count == 5
    assert await h.ack("a", 0, 4, REJ) == 0
    assert h.last_write() == (0, 10, [(0, 4, ARCHIVED, 1)])
    assert h.sp.start_offset == 10 and h.sp.delivery_complete_count == 0
    assert h.sp.in_flight_count == 0


async def test_ack_errors_like_kafka():
    h = await make(sizes=(10,) * 3, start=0)
    h.fetch("a", max_records=10)
    h.fetch("b", max_records=10)
    assert await h.ack("b", 0, 9, ACC) == Errors.INVALID_RECORD_STATE     # not b's records
    assert await h.ack("a", 5, 14, ACC) == Errors.INVALID_RECORD_STATE    # 10-14 are b's
    assert await h.ack("a", 0, 25, ACC) == Errors.INVALID_REQUEST         # past what was handed out
    assert await h.ack("a", 25, 26, ACC) == Errors.INVALID_REQUEST
    assert h.state(5) == (ACQUIRED, 1, "a", False)                        # nothing changed
    assert h.p.writes == []
    assert await h.ack("a", 0, 4, ACC) == 0
    assert await h.ack("a", 0, 4, ACC) == 0                               # below the SPSO: skipped
    assert len(h.p.writes) == 1
    assert await h.ack("a", 4, 4, ACC) == 0
    assert await h.ack("a", 5, 5, 9) == Errors.INVALID_REQUEST


async def test_malformed_batches_reaching_the_partition_are_invalid_requests():
    h = await make(sizes=(10,), start=0)
    h.fetch("a")
    for batch in (AckBatch(0, 9, [1, 1]), AckBatch(5, 4, [1]), AckBatch(0, 9, [])):
        assert await h.sp.acknowledge("a", [batch]) == Errors.INVALID_REQUEST
    assert h.state(0) == (ACQUIRED, 1, "a", False)


async def test_spso_does_not_pass_records_whose_ack_is_not_written_yet():
    h = await make(sizes=(5,) * 4, start=0)
    h.fetch("a", max_records=5)
    h.fetch("b", max_records=5)
    h.p.hold = True
    first = asyncio.ensure_future(h.ack("a", 0, 4, ACC))
    await h.p.wait_held(1)
    second = asyncio.ensure_future(h.ack("b", 5, 9, ACC))
    await h.p.wait_held(2)
    h.p.complete(1, 0)
    assert await second == 0
    assert h.sp.start_offset == 0 and h.sp.delivery_complete_count == 5
    h.p.complete(0, 0)
    assert await first == 0
    assert h.sp.start_offset == 10 and h.sp.delivery_complete_count == 0


async def test_a_whole_batch_in_transition_is_not_offered():
    h = await make(sizes=(10,) * 3, start=0)
    h.fetch("a", max_records=10)
    h.fetch("b", max_records=10)
    assert await h.ack("b", 10, 19, REL) == 0
    h.p.hold = True
    release = asyncio.ensure_future(h.ack("a", 0, 9, REL))
    await h.p.wait_held(1)
    assert h.state(0) == (AVAILABLE, 1, "", True)
    assert h.sp.next_fetch_offset() == 10
    res = h.sp.acquire("b", h.log.read(0), max_records=100, batch_size=100, fetch_offset=0)
    assert res.acquired == [(10, 19, 2), (20, 29, 1)]
    h.p.complete(0, 0)
    assert await release == 0
    assert h.sp.next_fetch_offset() == 0
    assert h.fetch("c") == [(0, 9, 2)]


async def test_compaction_holes_between_cached_batches():
    h = await make(sizes=(), start=0)
    h.log.batches = [Ref(0, 4), Ref(10, 14), Ref(15, 19)]
    h.log.log_end_offset = 20
    assert h.fetch("a", max_records=5) == [(0, 4, 1)]
    assert h.sp.next_fetch_offset() == 5
    assert h.fetch("b", max_records=5) == [(10, 14, 1)]   # read at 5 finds the batch at 10
    assert await h.ack("b", 10, 14, ACC) == 0
    assert h.sp.start_offset == 0 and h.sp.delivery_complete_count == 5
    assert await h.ack("a", 0, 4, ACC) == 0
    assert h.sp.start_offset == 15 and h.sp.delivery_complete_count == 0
    h.check_dcc()


async def test_one_bad_batch_fails_the_whole_acknowledgement():
    h = await make(sizes=(10,) * 3, start=0)
    h.fetch("a", max_records=10)
    h.fetch("b", max_records=10)
    code = await h.sp.acknowledge("a", [AckBatch(0, 4, [ACC]), AckBatch(10, 12, [ACC])])
    assert code == Errors.INVALID_RECORD_STATE
    assert h.state(0) == (ACQUIRED, 1, "a", False) and h.p.writes == []


async def test_release_at_the_delivery_limit_archives():
    h = await make(sizes=(10,) * 3, start=0, delivery_count_limit=2)
    h.fetch("a", max_records=10)
    assert await h.ack("a", 0, 9, REL) == 0
    assert h.last_write() == (0, 0, [(0, 9, AVAILABLE, 1)])
    assert h.fetch("a", max_records=10) == [(0, 9, 2)]
    assert await h.ack("a", 0, 9, REL) == 0
    assert h.last_write() == (0, 10, [(0, 9, ARCHIVED, 2)])
    assert h.sp.start_offset == 10


async def test_renew_extends_the_lock():
    h = await make(sizes=(10,) * 3, start=0)
    h.fetch("a", max_records=10)
    h.t.advance(20_000)
    assert await h.ack("a", 0, 9, RENEW) == 0
    assert h.p.writes == [] and h.t.pending() == [50_000]
    h.t.advance(15_000)
    assert h.state(0) == (ACQUIRED, 1, "a", False)
    assert await h.ack("a", 0, 9, RENEW, RENEW, ACC, ACC, ACC, ACC, ACC, ACC, ACC, ACC) == 0
    assert h.last_write() == (0, 8, [(2, 9, ACKNOWLEDGED, 1)])
    assert h.t.pending() == [65_000]
    h.t.advance(30_000)
    await h.sp.drain()
    assert h.last_write() == (0, 8, [(0, 1, AVAILABLE, 1)])


async def test_renew_refused_when_the_group_disables_it():
    h = await make(sizes=(10,), start=0, renew_acknowledge_enable=False)
    h.fetch("a")
    assert await h.ack("a", 0, 9, RENEW) == Errors.INVALID_RECORD_STATE
    assert h.t.pending() == [30_000]
