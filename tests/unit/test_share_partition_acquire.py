"""SharePartition acquisition: whole batches, BatchSize, record_limit, the max-record-locks window,
redeliveries first, compacted and aborted records archived, poison-record throttling (Kafka 4.2+)."""
from __future__ import annotations

import gc
import tracemalloc

from broker.share.acks import ACK_ACCEPT as ACC, ACK_RELEASE as REL
from broker.share.config import ShareGroupConfig
from broker.share.inflight import InFlightState
from broker.share.partition import ACQUIRED, ARCHIVED, AVAILABLE, RECORD_LIMIT
from tests.unit.share_partition_support import make


# ---------------------------------------------------------------- acquire

async def test_acquire_whole_batches_split_by_batch_size():
    h = await make(sizes=(5, 5, 5, 5), start=0)
    res = h.sp.acquire("a", h.log.read(0), max_records=500, batch_size=10, fetch_offset=0)
    assert res.acquired == [(0, 9, 1), (10, 19, 1)] and res.count == 20
    assert res.batches == h.log.batches
    assert h.t.pending() == [30_000, 30_000]  # one lock per acquired batch
    assert h.state(3) == (ACQUIRED, 1, "a", False)


async def test_max_records_is_soft_in_batch_optimized_mode():
    h = await make(sizes=(5, 5, 5, 5), start=0)
    res = h.sp.acquire("a", h.log.read(0), max_records=7, batch_size=500, fetch_offset=0)
    assert res.acquired == [(0, 9, 1)] and res.batches == h.log.batches[:2]


async def test_record_limit_acquires_exactly_max_records():
    h = await make(sizes=(5, 5, 5, 5), start=0)
    res = h.sp.acquire("a", h.log.read(0), max_records=7, batch_size=500, acquire_mode=RECORD_LIMIT,
                       fetch_offset=0)
    assert res.acquired == [(0, 6, 1)] and res.count == 7 and res.batches == h.log.batches[:2]
    assert h.state(7) == (AVAILABLE, 0, "", False)
    assert h.sp.next_fetch_offset() == 7
    assert h.fetch("b", max_records=2, mode=RECORD_LIMIT) == [(7, 8, 1)]
    assert h.fetch("c", max_records=100, mode=RECORD_LIMIT) == [(9, 9, 1), (10, 19, 1)]


def cached_states(sp):
    """InFlightState objects the partition holds (one per batch, or one per offset of a split batch)."""
    return sum(1 if b.offsets is None else len(b.offsets) for b in sp._cache)


def live_in_flight_states():
    return sum(isinstance(o, InFlightState) for o in gc.get_objects())


async def test_record_limit_does_not_build_a_state_per_offset_of_a_big_batch():
    h = await make(sizes=(10_000,), start=0)
    before = live_in_flight_states()
    tracemalloc.start()
    try:
        assert h.fetch("a", max_records=10, mode=RECORD_LIMIT) == [(0, 9, 1)]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 50_000                       # a state per offset would be ~1 MB
    assert cached_states(h.sp) == 2            # 0-9 acquired, 10-9999 AVAILABLE
    assert live_in_flight_states() - before <= 2
    assert h.state(10) == (AVAILABLE, 0, "", False) and h.state(9999) == (AVAILABLE, 0, "", False)
    assert h.sp.next_fetch_offset() == 10

    # Each later fetch cuts the next run off the cached rest of the log batch.
    for k in range(1, 5):
        assert h.fetch(f"m{k}", max_records=10, mode=RECORD_LIMIT) == [(10 * k, 10 * k + 9, 1)]
    assert cached_states(h.sp) == 6
    assert len(h.t.pending()) == 5             # one lock per acquired run

    # A run that comes back (lock expiry) is re-acquired in parts, still without per-offset states.
    h.t.advance(30_000)
    await h.sp.drain()
    assert h.state(0) == (AVAILABLE, 1, "", False)
    assert h.fetch("b", max_records=3, mode=RECORD_LIMIT) == [(0, 2, 2)]
    assert h.fetch("c", max_records=100, mode=RECORD_LIMIT) == [(3, 9, 2), (10, 19, 2), (20, 29, 2),
                                                                (30, 39, 2), (40, 49, 2), (50, 102, 1)]
    assert cached_states(h.sp) <= 10
    assert h.state(103) == (AVAILABLE, 0, "", False)

    # Acknowledging the acquired runs moves the SPSO over them as usual.
    assert await h.ack("b", 0, 2, ACC) == 0
    assert await h.ack("c", 3, 102, ACC) == 0
    assert h.sp.start_offset == 103 and h.sp.next_fetch_offset() == 103
    h.check_dcc()


async def test_redeliveries_first_lowest_offset_first():
    h = await make(sizes=(10,) * 3, start=0)
    assert h.fetch("a", max_records=10) == [(0, 9, 1)]
    assert h.fetch("b", max_records=10) == [(10, 19, 1)]
    assert await h.ack("b", 10, 19, REL) == 0
    assert await h.ack("a", 3, 4, REL) == 0
    assert h.sp.next_fetch_offset() == 3
    assert h.fetch("c", max_records=100) == [(3, 4, 2), (10, 19, 2), (20, 29, 1)]


async def test_max_record_locks_bounds_the_in_flight_window():
    h = await make(sizes=(5,) * 6, start=0, partition_max_record_locks=10)
    assert h.fetch("a") == [(0, 9, 1)]
    assert h.sp.in_flight_count == 10
    assert h.fetch("b") == []
    assert await h.ack("a", 7, 7, REL) == 0           # a redelivery inside the window is allowed
    assert h.fetch("b") == [(7, 7, 2)]
    assert await h.ack("a", 0, 4, ACC) == 0           # SPSO 5 frees 5 slots
    wakeups = h.wakeups
    assert h.sp.start_offset == 5 and h.sp.in_flight_count == 5
    assert h.fetch("b") == [(10, 14, 1)]
    assert wakeups >= 1


async def test_max_record_locks_binds_at_log_batch_boundaries_as_kafka_4_4():
    # Kafka 4.4 SharePartition: lastOffsetAndMaxRecordsToAcquire caps the records to acquire at
    # min(MaxRecords, locks - in flight); in batch_optimized mode acquireNewBatchRecords then extends
    # to the end of the log batch holding the last allowed record (lastOffsetFromBatchWithRequestOffset)
    # (with fair acquisition off: broker/share/fair.py cuts such a batch at the cap).
    h = await make(sizes=(10,) * 20, start=0, partition_max_record_locks=100, fair_acquisition=False)
    assert h.fetch("a", max_records=200) == [(0, 99, 1)]          # 10-record batches: exactly the cap
    h = await make(sizes=(1, 199, 10), start=0, partition_max_record_locks=100, fair_acquisition=False)
    assert h.fetch("a", max_records=200) == [(0, 199, 1)]         # the batch holding offset 99 is whole
    assert h.sp.in_flight_count == 200 and h.fetch("b") == []
    assert await h.ack("a", 0, 150, ACC) == 0                     # 49 in flight: 51 locks free
    assert h.fetch("b", max_records=200) == [(200, 209, 1)]
    h = await make(sizes=(200,), start=0, partition_max_record_locks=100)
    assert h.fetch("a", max_records=200, mode=RECORD_LIMIT) == [(0, 99, 1)]   # record_limit is exact


async def test_window_shrinks_with_config_change():
    cfg = ShareGroupConfig()
    h = await make(sizes=(5,) * 6, start=0, config=cfg)
    assert h.fetch("a", max_records=10) == [(0, 9, 1)]
    cfg.update(partition_max_record_locks=10)
    assert h.fetch("b") == []
    cfg.update(partition_max_record_locks=15)
    assert h.fetch("b") == [(10, 14, 1)]


async def test_compacted_batches_that_vanished_are_archived():
    h = await make(sizes=(5,) * 4, start=0)
    assert h.fetch("a", max_records=5) == [(0, 4, 1)]
    assert await h.ack("a", 0, 4, REL) == 0
    del h.log.batches[0]                              # compaction removed offsets 0-4
    res = h.sp.acquire("b", h.log.read(0), max_records=5, batch_size=5, fetch_offset=0)
    assert res.acquired == [(5, 9, 1)]
    assert h.state(2) is None and h.sp.start_offset == 5
    h.check_dcc()


async def test_aborted_transactions_are_archived_not_delivered():
    h = await make(sizes=(5,) * 3, start=0)
    res = h.sp.acquire("a", h.log.read(0), max_records=100, batch_size=100, fetch_offset=0,
                       aborted=[(5, 9)])
    assert res.acquired == [(0, 4, 1), (10, 14, 1)] and res.count == 10
    assert res.batches == [h.log.batches[0], h.log.batches[2]]
    assert h.state(7) == (ARCHIVED, 1, "", False)
    assert h.sp.delivery_complete_count == 5
    h.check_dcc()

# ---------------------------------------------------------------- poison records

async def test_throttling_and_last_attempt_delivered_alone():
    h = await make(sizes=(10,) * 3, start=0, delivery_count_limit=5)   # throttled from dc 3

    async def redeliver(expected, *types):
        got = h.fetch("a", max_records=100, batch_size=10)
        assert got == expected
        for first, last, _ in got:
            assert await h.ack("a", first, last, *(types or (REL,))) == 0

    for dc in (1, 2, 3):
        await redeliver([(0, 9, dc), (10, 19, dc), (20, 29, dc)])
    await redeliver([(0, 4, 4)], ACC, ACC, ACC, ACC, REL)  # dc 3: half the batch, nothing after it
    assert h.sp.start_offset == 4
    await redeliver([(4, 4, 5)])                  # its last attempt: alone
    assert h.state(4) == (ARCHIVED, 5, "", False) and h.sp.start_offset == 5
    await redeliver([(5, 9, 4)])
    assert h.fetch("a", max_records=100, batch_size=10) == [(5, 5, 5)]
    assert h.fetch("a", max_records=100, batch_size=10) == [(6, 6, 5)]


async def test_a_throttled_batch_is_not_joined_to_other_records():
    h = await make(sizes=(10,) * 3, start=0, delivery_count_limit=5)   # throttled from dc 3
    h.fetch("a", max_records=10)
    for dc in (1, 2, 3):
        assert h.fetch("b", max_records=10) == [(10, 19, dc)]
        assert await h.ack("b", 10, 19, REL) == 0
    assert await h.ack("a", 0, 9, REL) == 0
    assert h.fetch("c", batch_size=10) == [(0, 9, 2)]    # 10-19 waits for a fetch of its own
    assert h.fetch("c", batch_size=10) == [(10, 14, 4)]


async def test_record_on_its_last_attempt_is_not_batched_with_earlier_ones():
    h = await make(sizes=(10,), start=0, delivery_count_limit=10)       # throttled from dc 5
    h.fetch("a", max_records=10)
    assert await h.ack("a", 1, 1, REL) == 0
    for dc in range(2, 10):                       # offset 1 alone, the rest held by a
        assert h.fetch("b") == [(1, 1, dc)]
        assert await h.ack("b", 1, 1, REL) == 0
    assert await h.ack("a", 0, 0, REL) == 0
    assert h.fetch("c") == [(0, 0, 2)]            # offset 1 (next attempt is its last) waits
    assert h.fetch("c") == [(1, 1, 10)]
