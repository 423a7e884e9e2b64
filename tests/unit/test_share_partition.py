"""SharePartition: acquire / acknowledge / lock expiry / SPSO / persistence, with fakes.

Deterministic: a fake clock + timer scheduler, a fake persister whose writes can be
held and failed, a fake log of batch refs. No sleeps.
"""
from __future__ import annotations

import asyncio
import gc
import heapq
import tracemalloc
from typing import NamedTuple

import pytest

from protocol.errors import Errors
from protocol.messages.read_share_group_state import ReadShareGroupStateResponse
from protocol.messages.write_share_group_state import (
    WriteShareGroupStateRequest,
    WriteShareGroupStateResponse,
)

from broker.share.config import ShareGroupConfig, parse_auto_offset_reset, parse_iso_duration_ms
from broker.share.errors import ShareError
from broker.share.inflight import InFlightState
from broker.share.partition import (
    ACKNOWLEDGED, ACQUIRED, ARCHIVED, AVAILABLE, FAILED, FENCED, RECORD_LIMIT,
    SharePartition, validate_ack_batches,
)

TOPIC = bytes(range(16))
GROUP = "g1"
ACC, REL, REJ, GAP, RENEW = 1, 2, 3, 0, 4


# ---------------------------------------------------------------- fakes

class Handle:
    __slots__ = ("when", "callback", "cancelled")

    def __init__(self, when, callback):
        self.when, self.callback, self.cancelled = when, callback, False

    def cancel(self):
        self.cancelled = True


class FakeTimers:
    """Clock in ms plus a call_later(delay_s, cb) scheduler driven by advance()."""

    def __init__(self):
        self.now = 0
        self._heap = []
        self._seq = 0

    def now_ms(self):
        return self.now

    def call_later(self, delay_s, callback):
        h = Handle(self.now + round(delay_s * 1000), callback)
        self._seq += 1
        heapq.heappush(self._heap, (h.when, self._seq, h))
        return h

    def advance(self, ms):
        target = self.now + ms
        while self._heap and self._heap[0][0] <= target:
            when, _, h = heapq.heappop(self._heap)
            self.now = when
            if not h.cancelled:
                h.callback()
        self.now = target

    def pending(self):
        return sorted(h.when for _, _, h in self._heap if not h.cancelled)


class Ref(NamedTuple):
    base_offset: int
    last_offset: int
    data: bytes = b""


class FakeLog:
    def __init__(self, sizes=(), start=0):
        self.batches = []
        self.log_start_offset = start
        self.log_end_offset = start
        self.by_timestamp = None
        for n in sizes:
            self.append(n)

    @property
    def last_stable_offset(self):
        return self.log_end_offset

    def append(self, n):
        self.batches.append(Ref(self.log_end_offset, self.log_end_offset + n - 1))
        self.log_end_offset += n

    def read(self, offset, max_bytes=1 << 30, max_offset=None, min_one=True):
        return [b for b in self.batches if b.last_offset >= offset and b.last_offset >= self.log_start_offset
                and (max_offset is None or b.base_offset < max_offset)]

    def offset_for_timestamp(self, ts):
        self.asked_timestamp = ts
        return self.by_timestamp


class AckBatch(NamedTuple):
    first_offset: int
    last_offset: int
    acknowledge_types: list


class FakePersister:
    """Records WriteShareGroupState requests; can hold them or answer with an error."""

    def __init__(self, start_offset=-1, batches=(), state_epoch=3, read_error=0):
        self.start_offset, self.batches, self.state_epoch = start_offset, list(batches), state_epoch
        self.read_error = read_error
        self.writes = []
        self.errors = []          # error codes for the next writes
        self.hold = False
        self.held = []            # futures of held writes
        self._arrived = asyncio.Event()

    async def read_state(self, req):
        R = ReadShareGroupStateResponse
        t = req.topics[0]
        p = t.partitions[0]
        return R(results=[R.ReadStateResult(topic_id=t.topic_id, partitions=[R.PartitionResult(
            partition=p.partition, error_code=self.read_error, state_epoch=self.state_epoch,
            start_offset=self.start_offset,
            state_batches=[R.StateBatch(first_offset=f, last_offset=l, delivery_state=s, delivery_count=d)
                           for f, l, s, d in self.batches])])])

    async def write_state(self, req):
        self.writes.append(req)
        code = self.errors.pop(0) if self.errors else 0
        if self.hold:
            fut = asyncio.get_running_loop().create_future()
            self.held.append(fut)
            self._arrived.set()
            code = await fut
        R = WriteShareGroupStateResponse
        t = req.topics[0]
        return R(results=[R.WriteStateResult(topic_id=t.topic_id, partitions=[R.PartitionResult(
            partition=t.partitions[0].partition, error_code=code)])])

    async def wait_held(self, n):
        while len(self.held) < n:
            self._arrived.clear()
            await self._arrived.wait()

    def complete(self, index=0, code=0):
        self.held.pop(index).set_result(code)


def payload(req):
    """(start_offset, delivery_complete_count, [(first, last, state, count)]) of a write."""
    assert isinstance(req, WriteShareGroupStateRequest)
    assert req.group_id == GROUP and len(req.topics) == 1 and req.topics[0].topic_id == TOPIC
    p, = req.topics[0].partitions
    assert p.partition == 0 and p.state_epoch == 3 and p.leader_epoch == 7
    return (p.start_offset, p.delivery_complete_count,
            [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches])


class H:
    """One initialized share partition with its fakes."""

    def __init__(self, sp, timers, persister, log):
        self.sp, self.t, self.p, self.log = sp, timers, persister, log
        self.wakeups = 0

    def fetch(self, member, max_records=500, batch_size=500, mode=0, **kw):
        """What the manager does for one partition of a ShareFetch: follow the log start, read, acquire."""
        self.sp.update_log_start_offset(self.log.log_start_offset)
        offset = self.sp.next_fetch_offset()
        res = self.sp.acquire(member, self.log.read(offset), max_records=max_records,
                              batch_size=batch_size, acquire_mode=mode, fetch_offset=offset, **kw)
        return res.acquired

    async def ack(self, member, first, last, *types):
        return await self.sp.acknowledge(member, [AckBatch(first, last, list(types))])

    def state(self, offset):
        return self.sp.record_state(offset)

    def last_write(self):
        return payload(self.p.writes[-1])

    def check_dcc(self):
        """The maintained DeliveryCompleteCount equals a recount of settled terminal records."""
        sp = self.sp
        n = 0
        for off in range(sp.start_offset, sp.end_offset):
            st = sp.record_state(off)
            if st and st[0] in (ACKNOWLEDGED, ARCHIVED) and not st[3]:
                n += 1
        assert sp.delivery_complete_count == n


async def make(sizes=(10,) * 10, *, start=-1, batches=(), log_start=0, config=None, **cfg):
    timers = FakeTimers()
    log = FakeLog(sizes, start=log_start)
    persister = FakePersister(start_offset=start, batches=batches)
    config = config or ShareGroupConfig(**cfg)
    h = None

    def wake():
        h.wakeups += 1

    sp = SharePartition(GROUP, TOPIC, 0, log=log, persister=persister, config=config,
                        scheduler=timers, now_ms=timers.now_ms, leader_epoch=7, on_state_change=wake)
    h = H(sp, timers, persister, log)
    await sp.initialize()
    return h


# ---------------------------------------------------------------- initialization

async def test_uninitialized_spso_resets_to_latest_and_is_persisted():
    h = await make(sizes=(10,) * 10)
    assert h.sp.start_offset == 100 and h.sp.next_fetch_offset() == 100
    assert [payload(w) for w in h.p.writes] == [(100, 0, [])]
    assert h.fetch("a") == []  # nothing past the latest offset yet
    h.log.append(5)
    assert h.fetch("a") == [(100, 104, 1)]


async def test_reset_earliest_and_by_duration():
    h = await make(auto_offset_reset="earliest", log_start=20)
    assert h.sp.start_offset == 20 and payload(h.p.writes[0])[0] == 20

    timers = FakeTimers()
    timers.now = 10_000_000
    log = FakeLog((10,) * 5)
    log.by_timestamp = (30, 9_999_999)
    sp = SharePartition(GROUP, TOPIC, 0, log=log, persister=FakePersister(), scheduler=timers,
                        now_ms=lambda: 0, wall_ms=timers.now_ms, leader_epoch=7,
                        config=ShareGroupConfig(auto_offset_reset="by_duration:PT1H30M"))
    await sp.initialize()
    assert sp.start_offset == 30 and log.asked_timestamp == 10_000_000 - 5_400_000

    log.by_timestamp = None  # nothing that recent: the log end
    sp2 = SharePartition(GROUP, TOPIC, 0, log=log, persister=FakePersister(), scheduler=timers,
                         now_ms=timers.now_ms, wall_ms=timers.now_ms,
                         config=ShareGroupConfig(auto_offset_reset="by_duration:P1D"))
    await sp2.initialize()
    assert sp2.start_offset == 50


async def test_initialize_from_persisted_state_with_gap():
    h = await make(start=10, batches=[(15, 20, ACKNOWLEDGED, 1), (21, 25, AVAILABLE, 2),
                                     (26, 30, ARCHIVED, 3)])
    assert h.p.writes == []  # a known SPSO is not rewritten
    assert h.sp.start_offset == 10 and h.sp.end_offset == 31
    assert h.sp.delivery_complete_count == 6 + 5
    assert h.state(12) == (AVAILABLE, 0, "", False)  # unknown gap: offered again
    assert h.sp.next_fetch_offset() == 10
    assert h.fetch("a") == [(10, 14, 1), (21, 25, 3), (31, 99, 1)]
    h.check_dcc()


async def test_initialize_advances_over_terminal_prefix():
    h = await make(start=10, batches=[(10, 14, ACKNOWLEDGED, 1), (15, 16, ARCHIVED, 5),
                                     (17, 19, AVAILABLE, 1)])
    assert h.sp.start_offset == 17 and h.sp.delivery_complete_count == 0
    assert h.fetch("a", max_records=3) == [(17, 19, 2)]


async def test_initialize_failure_is_sticky():
    timers = FakeTimers()
    p = FakePersister(read_error=Errors.COORDINATOR_LOAD_IN_PROGRESS)
    sp = SharePartition(GROUP, TOPIC, 0, log=FakeLog(), persister=p, config=ShareGroupConfig(),
                        scheduler=timers, now_ms=timers.now_ms)
    with pytest.raises(ShareError) as e:
        await sp.initialize()
    assert e.value.code == Errors.COORDINATOR_NOT_AVAILABLE and sp.status == FAILED
    with pytest.raises(ShareError):
        await sp.initialize()
    assert sp.acquire("a", [Ref(0, 9)], max_records=10, batch_size=10) == ([], [], 0)
    assert await sp.acknowledge("a", [AckBatch(0, 9, [1])]) == Errors.COORDINATOR_NOT_AVAILABLE


async def test_failing_to_persist_the_reset_spso_fails_initialization():
    timers = FakeTimers()
    p = FakePersister()
    p.errors = [Errors.NOT_COORDINATOR]
    sp = SharePartition(GROUP, TOPIC, 0, log=FakeLog((10,)), persister=p, config=ShareGroupConfig(),
                        scheduler=timers, now_ms=timers.now_ms)
    with pytest.raises(ShareError) as e:
        await sp.initialize()
    assert e.value.code == Errors.COORDINATOR_NOT_AVAILABLE and sp.status == FAILED


async def test_concurrent_initialize_reads_once():
    timers = FakeTimers()
    p = FakePersister(start_offset=0)
    calls = []
    orig = p.read_state

    async def counting(req):
        calls.append(req)
        return await orig(req)

    p.read_state = counting
    sp = SharePartition(GROUP, TOPIC, 0, log=FakeLog((10,)), persister=p, config=ShareGroupConfig(),
                        scheduler=timers, now_ms=timers.now_ms)
    await asyncio.gather(sp.initialize(), sp.initialize())
    assert len(calls) == 1 and sp.start_offset == 0
    assert calls[0].topics[0].topic_id == TOPIC and calls[0].group_id == GROUP


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
    h = await make(sizes=(10,) * 20, start=0, partition_max_record_locks=100)
    assert h.fetch("a", max_records=200) == [(0, 99, 1)]          # 10-record batches: exactly the cap
    h = await make(sizes=(1, 199, 10), start=0, partition_max_record_locks=100)
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


# ---------------------------------------------------------------- persist, then commit

async def test_persist_failure_rolls_back():
    h = await make(sizes=(10,) * 3, start=0)
    h.fetch("a", max_records=10)
    h.p.errors = [Errors.COORDINATOR_LOAD_IN_PROGRESS]
    assert await h.ack("a", 0, 9, ACC) == Errors.COORDINATOR_NOT_AVAILABLE
    assert h.state(0) == (ACQUIRED, 1, "a", False)
    assert h.sp.start_offset == 0 and h.sp.delivery_complete_count == 0
    assert h.t.pending() == [30_000]
    assert await h.ack("a", 0, 9, ACC) == 0
    assert h.sp.start_offset == 10


async def test_persister_exception_and_fencing():
    h = await make(sizes=(10,) * 3, start=0)
    h.fetch("a", max_records=10)

    async def boom(req):
        raise RuntimeError("disk on fire")

    write = h.p.write_state
    h.p.write_state = boom
    assert await h.ack("a", 0, 9, ACC) == Errors.UNKNOWN_SERVER_ERROR
    h.p.write_state = write
    h.p.errors = [Errors.FENCED_STATE_EPOCH]
    assert await h.ack("a", 0, 9, ACC) == Errors.NOT_LEADER_OR_FOLLOWER
    assert h.sp.status == FENCED
    assert await h.ack("a", 0, 9, ACC) == Errors.NOT_LEADER_OR_FOLLOWER
    assert h.fetch("a") == []


async def test_records_in_transition_are_skipped_and_rejected():
    h = await make(sizes=(10,) * 3, start=0)
    h.fetch("a", max_records=10)
    h.p.hold = True
    release = asyncio.ensure_future(h.ack("a", 0, 4, REL))
    await h.p.wait_held(1)
    assert h.state(0) == (AVAILABLE, 1, "", True)
    assert h.sp.next_fetch_offset() == 10                # not offered while in transition
    assert h.sp.acquire("b", h.log.read(0), max_records=10, batch_size=10,
                        fetch_offset=0).acquired == [(10, 19, 1)]
    assert await h.ack("a", 0, 4, ACC) == Errors.INVALID_RECORD_STATE
    accept = asyncio.ensure_future(h.ack("a", 5, 9, ACC))
    await h.p.wait_held(2)
    assert h.sp.start_offset == 0 and h.sp.delivery_complete_count == 0
    assert payload(h.p.writes[-1]) == (0, 5, [(5, 9, ACKNOWLEDGED, 1)])
    h.p.complete(1, 0)
    assert await accept == 0
    assert h.sp.start_offset == 0 and h.sp.delivery_complete_count == 5
    h.p.complete(0, 0)
    assert await release == 0
    assert h.sp.next_fetch_offset() == 0
    h.check_dcc()


async def test_lock_expiring_during_a_failed_ack_write_releases_the_records():
    h = await make(sizes=(10,) * 3, start=0)
    h.fetch("a", max_records=10)
    h.p.hold = True
    accept = asyncio.ensure_future(h.ack("a", 0, 9, ACC))
    await h.p.wait_held(1)
    h.t.advance(30_000)                                   # lock runs out while writing
    assert h.state(0) == (ACKNOWLEDGED, 1, "", True)
    h.p.hold = False
    h.p.complete(0, Errors.COORDINATOR_NOT_AVAILABLE)
    assert await accept == Errors.COORDINATOR_NOT_AVAILABLE
    await h.sp.drain()
    assert h.last_write() == (0, 0, [(0, 9, AVAILABLE, 1)])
    assert h.state(0) == (AVAILABLE, 1, "", False)


async def test_lock_expiring_during_a_successful_ack_write_keeps_the_ack():
    h = await make(sizes=(10,) * 3, start=0)
    h.fetch("a", max_records=10)
    h.p.hold = True
    accept = asyncio.ensure_future(h.ack("a", 0, 9, ACC))
    await h.p.wait_held(1)
    h.t.advance(30_000)
    h.p.complete(0, 0)
    assert await accept == 0
    await h.sp.drain()
    assert len(h.p.writes) == 1 and h.sp.start_offset == 10   # nothing was left to expire


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


# ---------------------------------------------------------------- log start offset

async def test_spso_follows_the_log_start_offset():
    h = await make(sizes=(10,) * 3, start=0)
    assert h.fetch("a", max_records=10) == [(0, 9, 1)]
    assert h.fetch("b", max_records=10) == [(10, 19, 1)]
    assert await h.ack("b", 10, 14, ACC) == 0
    h.log.log_start_offset = 12
    wakeups, writes = h.wakeups, len(h.p.writes)
    assert h.sp.next_fetch_offset() == 20         # a query: the log start is followed explicitly
    assert h.sp.start_offset == 0 and len(h.p.writes) == writes and h.wakeups == wakeups
    h.sp.update_log_start_offset(h.log.log_start_offset)
    assert h.sp.next_fetch_offset() == 20
    assert h.wakeups > wakeups
    assert h.sp.start_offset == 15 and h.sp.delivery_complete_count == 0
    assert h.t.pending() == [30_000]              # a's lock is gone with its records
    assert await h.ack("a", 0, 9, ACC) == 0       # below the SPSO: skipped
    assert await h.ack("b", 10, 19, ACC) == 0
    assert h.last_write() == (15, 5, [(15, 19, ACKNOWLEDGED, 1)])
    assert h.sp.start_offset == 20
    h.sp.update_log_start_offset(50)
    assert h.sp.start_offset == 50 and h.sp.end_offset == 50 and h.sp.in_flight_count == 0
    h.log.log_start_offset = 50
    assert h.fetch("a") == []


async def test_log_start_moving_during_a_write():
    h = await make(sizes=(10,) * 3, start=0)
    h.fetch("a", max_records=10)
    h.p.hold = True
    accept = asyncio.ensure_future(h.ack("a", 0, 9, ACC))
    await h.p.wait_held(1)
    h.sp.update_log_start_offset(5)
    await h.p.wait_held(2)
    # the moved SPSO is written at once; of the acknowledgement in flight only 5-9 count (KIP-1226)
    assert payload(h.p.writes[-1]) == (5, 5, [])
    h.p.complete(0, Errors.COORDINATOR_NOT_AVAILABLE)
    assert await accept == Errors.COORDINATOR_NOT_AVAILABLE
    h.p.complete(0)
    await h.sp.drain()
    assert h.state(2) == (ARCHIVED, 1, "", False) and h.state(5) == (ACQUIRED, 1, "a", False)
    assert h.sp.start_offset == 5
    h.check_dcc()


async def test_close_stops_timers_and_refuses_work():
    h = await make(sizes=(10,) * 3, start=0)
    h.fetch("a", max_records=10)
    h.sp.close()
    assert h.t.pending() == [] and h.sp.status == FENCED
    h.t.advance(60_000)
    await h.sp.drain()
    assert h.p.writes == []
    assert await h.ack("a", 0, 9, ACC) == Errors.NOT_LEADER_OR_FOLLOWER
    assert h.fetch("b") == []
    with pytest.raises(ShareError):
        await h.sp.initialize()


# ---------------------------------------------------------------- config

async def test_group_config_changes_apply_to_a_live_partition():
    cfg = ShareGroupConfig()
    h = await make(sizes=(10,) * 3, start=0, config=cfg)
    cfg.update(record_lock_duration_ms=15_000)
    h.fetch("a", max_records=10)
    assert h.t.pending() == [15_000] and h.sp.acquisition_lock_timeout_ms == 15_000
    cfg.update(delivery_count_limit=1)
    h.t.advance(15_000)
    await h.sp.drain()
    assert h.last_write() == (0, 10, [(0, 9, ARCHIVED, 1)])
    with pytest.raises(ShareError) as e:
        cfg.update(isolation_level="read_commit", record_lock_duration_ms=1)
    assert e.value.code == Errors.INVALID_CONFIG and cfg.record_lock_duration_ms == 15_000


@pytest.mark.parametrize("text, ms", [
    ("PT1H", 3_600_000), ("P1D", 86_400_000), ("PT1.5S", 1500), ("PT-0.5S", -500),
    ("P1DT2H3M4.005S", 93_784_005), ("-PT1M", -60_000), ("pt10m", 600_000),
])
def test_iso_durations(text, ms):
    assert parse_iso_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["P", "PT", "1H", "P1H", "PT1D", ""])
def test_bad_iso_durations(text):
    with pytest.raises(ValueError):
        parse_iso_duration_ms(text)


def test_auto_offset_reset_values():
    assert parse_auto_offset_reset("Latest") == ("latest", None)
    assert parse_auto_offset_reset("earliest") == ("earliest", None)
    assert parse_auto_offset_reset("by_duration:PT5M") == ("by_duration", 300_000)
    for bad in ("by_duration:-PT5M", "by_duration:", "none", "by_duration"):
        with pytest.raises(ValueError):
            parse_auto_offset_reset(bad)


# ---------------------------------------------------------------- KIP-1226 DeliveryCompleteCount

class CoordinatorModel:
    """What the share coordinator keeps of the writes: the last StartOffset and DeliveryCompleteCount,
    and the state of every offset at or after the StartOffset (later writes win)."""

    def __init__(self, persister):
        """Starts from the state the persister answered the partition's ReadShareGroupState with."""
        self.start, self.states, self.seen = persister.start_offset, {}, 0
        for first, last, state, count in persister.batches:
            for off in range(max(first, self.start), last + 1):
                self.states[off] = (state, count)
        self.dcc = sum(1 for st, _ in self.states.values() if st in (ACKNOWLEDGED, ARCHIVED))

    def take(self, persister, upto=None):
        """Apply the writes not taken yet (up to index `upto`: later ones were lost in a crash)."""
        upto = len(persister.writes) if upto is None else upto
        for req in persister.writes[self.seen:upto]:
            start, dcc, batches = payload(req)
            self.start, self.dcc = start, dcc
            for first, last, state, count in batches:
                for off in range(first, last + 1):
                    self.states[off] = (state, count)
            self.states = {o: v for o, v in self.states.items() if o >= start}
        self.seen = upto

    def lag(self, leo):
        return leo - self.start - self.dcc

    def batches(self):
        return [(o, o, st, dc) for o, (st, dc) in sorted(self.states.items())]


def brute_lag(sp, leo):
    """LEO - SPSO - (settled ACKNOWLEDGED/ARCHIVED offsets at or after the SPSO), counted offset by offset."""
    done = 0
    for off in range(sp.start_offset, sp.end_offset):
        st = sp.record_state(off)
        if st is not None and st[0] in (ACKNOWLEDGED, ARCHIVED) and not st[3]:
            done += 1
    return leo - sp.start_offset - done


async def settle(h, coord):
    """Let every write finish, feed them to the coordinator model and check what was sent."""
    await h.sp.drain()
    coord.take(h.p)
    h.check_dcc()
    leo = h.log.log_end_offset
    assert coord.lag(leo) == brute_lag(h.sp, leo), (coord.start, coord.dcc, h.sp)
    # the count agrees with the terminal states the coordinator was sent (what a restart loads)
    assert coord.dcc == sum(1 for st, _ in coord.states.values() if st in (ACKNOWLEDGED, ARCHIVED))


async def restarted(h, coord, log=None):
    """A new leader of the same partition, loaded from what the coordinator kept."""
    h2 = H(None, FakeTimers(), FakePersister(start_offset=coord.start, batches=coord.batches()), log or h.log)
    h2.sp = SharePartition(GROUP, TOPIC, 0, log=h2.log, persister=h2.p, config=h.sp.config, scheduler=h2.t,
                           now_ms=h2.t.now_ms, leader_epoch=7)
    await h2.sp.initialize()
    return h2


async def test_delivery_complete_count_sent_gives_the_exact_lag():
    h = await make(sizes=(10,) * 6, start=0, delivery_count_limit=3)
    coord = CoordinatorModel(h.p)
    await settle(h, coord)
    assert h.fetch("a", max_records=10) == [(0, 9, 1)]
    assert h.fetch("b", max_records=10) == [(10, 19, 1)]
    # acknowledgements of every type, partial: 0-2 ACCEPT, 3 REJECT, 4 GAP, 5-6 RELEASE, 7-9 held
    assert await h.ack("a", 0, 6, ACC, ACC, ACC, REJ, GAP, REL, REL) == 0
    await settle(h, coord)
    assert (coord.start, coord.dcc) == (0, 5) and h.sp.start_offset == 5
    assert await h.ack("b", 12, 13, ACC) == 0                    # terminal records past a hole
    await settle(h, coord)
    assert await h.sp.release_member("a") == 0                   # session closed: 7-9 released
    await settle(h, coord)
    h.t.advance(30_000)                                          # b's locks run out
    await settle(h, coord)
    # redeliveries up to the delivery count limit: RELEASE, then lock expiry, archive at the limit
    for attempt in (2, 3):
        got = h.fetch("c", max_records=50)
        assert got and {dc for _, _, dc in got} <= {attempt, attempt + 1, 1}
        if attempt == 2:
            assert await h.sp.acknowledge("c", [AckBatch(f, last, [REL]) for f, last, _ in got]) == 0
        else:
            h.t.advance(30_000)
        await settle(h, coord)
    # retention moves the log start into the in-flight records (acquired ones included)
    h.fetch("d", max_records=25)
    h.log.log_start_offset = 23
    h.sp.update_log_start_offset(23)
    await settle(h, coord)
    assert coord.start == h.sp.start_offset >= 23
    # a clean restart: the new leader's state gives the same lag as the coordinator's numbers
    assert await h.sp.acknowledge("d", [AckBatch(h.sp.start_offset, h.sp.start_offset, [ACC])]) in (0, Errors.INVALID_RECORD_STATE)
    await settle(h, coord)
    h2 = await restarted(h, coord)
    leo = h.log.log_end_offset
    assert brute_lag(h2.sp, leo) == coord.lag(leo)
    assert h2.sp.delivery_complete_count + h2.sp.start_offset == coord.dcc + coord.start
    # kill -9 with an acknowledgement in flight: the coordinator never got it, the restart agrees
    got = h2.fetch("e", max_records=5)
    h2.p.hold = True
    lost = asyncio.ensure_future(h2.sp.acknowledge("e", [AckBatch(got[0][0], got[0][0], [ACC])]))
    await h2.p.wait_held(1)
    coord2 = CoordinatorModel(h2.p)
    coord2.take(h2.p, upto=len(h2.p.writes) - 1)       # everything but the write still held
    assert payload(h2.p.writes[-1])[2] == [(got[0][0], got[0][0], ACKNOWLEDGED, got[0][2])]
    h3 = await restarted(h2, coord2)
    assert brute_lag(h3.sp, leo) == coord2.lag(leo)
    lost.cancel()
    # retention while no leader ran: the new leader persists the moved SPSO at once
    h.log.log_start_offset = 41
    h4 = await restarted(h3, coord2)
    coord2.seen = 0
    coord2.take(h4.p)
    assert coord2.start == 41 and coord2.lag(leo) == brute_lag(h4.sp, leo)
    for x in (h, h2, h3, h4):
        x.sp.close()


@pytest.mark.parametrize("seed", range(12))
async def test_delivery_complete_count_against_brute_force_counts(seed):
    """Random acquisitions, acknowledgements of every type, releases, lock expiries, delivery-limit
    archiving, log start moves, appends and restarts: after every step the last WriteShareGroupState
    gives LEO - StartOffset - DeliveryCompleteCount = the lag counted record by record."""
    import random
    rnd = random.Random(seed)
    h = await make(sizes=[rnd.randint(1, 8) for _ in range(12)], start=0, delivery_count_limit=rnd.choice((2, 3, 5)),
                   partition_max_record_locks=rnd.choice((10, 40, 2000)))
    coord = CoordinatorModel(h.p)
    await settle(h, coord)
    members = ["a", "b", "c"]
    for _ in range(60):
        op = rnd.random()
        sp = h.sp
        if op < 0.3:
            h.fetch(rnd.choice(members), max_records=rnd.randint(1, 12), mode=rnd.choice((0, RECORD_LIMIT)))
        elif op < 0.6:
            m = rnd.choice(members)
            held = [o for o in range(sp.start_offset, sp.end_offset)
                    if (st := sp.record_state(o)) and st[0] == ACQUIRED and st[2] == m and not st[3]]
            if held:
                i = rnd.randrange(len(held))
                j = i
                while j + 1 < len(held) and held[j + 1] == held[j] + 1 and rnd.random() < 0.8:
                    j += 1
                first, last = held[i], held[j]
                if rnd.random() < 0.5:
                    types = [rnd.choice((ACC, REL, REJ, GAP))]
                else:
                    types = [rnd.choice((ACC, REL, REJ, GAP)) for _ in range(last - first + 1)]
                assert await sp.acknowledge(m, [AckBatch(first, last, types)]) == 0
        elif op < 0.68:
            await sp.release_member(rnd.choice(members))
        elif op < 0.78:
            h.t.advance(rnd.choice((10_000, 30_000)))
        elif op < 0.86:
            h.log.append(rnd.randint(1, 6))
        elif op < 0.93:
            lso = min(h.log.log_end_offset, h.log.log_start_offset + rnd.randint(1, 6))
            h.log.log_start_offset = max(h.log.log_start_offset, lso)
            sp.update_log_start_offset(h.log.log_start_offset)
        else:
            await settle(h, coord)
            h.sp.close()
            h = await restarted(h, coord)
            coord.seen = 0
        await settle(h, coord)
    h.sp.close()


# ---------------------------------------------------------------- KIP-932 example table

async def test_kip932_examples_with_share_group_state():
    """The KIP-932 "Examples with share-group state" sequence, with Kafka 4.4's payloads.

    Where the KIP text differs it is noted: Kafka sends the SPSO at the time of the
    write (never -1), and an acknowledgement that moves the SPSO is written with the
    acknowledged batches; the moved SPSO goes out with the next write.
    """
    # Starting state, latest offset 100 (KIP: StartOffset 100, no batches).
    timers, persister = FakeTimers(), FakePersister()
    log = FakeLog(start=100)
    sp = SharePartition(GROUP, TOPIC, 0, log=log, persister=persister, config=ShareGroupConfig(),
                        scheduler=timers, now_ms=timers.now_ms, leader_epoch=7)
    h = H(sp, timers, persister, log)
    await sp.initialize()
    assert [payload(w) for w in persister.writes] == [(100, 0, [])]

    # Fetch 100-109, acknowledge 100-109 (KIP: StartOffset 110, no batches).
    log.append(10)
    assert h.fetch("c1") == [(100, 109, 1)]
    assert await h.ack("c1", 100, 109, ACC) == 0
    assert h.last_write() == (100, 10, [(100, 109, ACKNOWLEDGED, 1)])
    assert sp.start_offset == 110

    # Fetch 110-119: consumer 1 gets 110-112, consumer 2 113-118, consumer 3 119.
    for n in (3, 6, 1):
        log.append(n)
    assert h.fetch("c1", max_records=3) == [(110, 112, 1)]
    timers.advance(1000)
    assert h.fetch("c2", max_records=6) == [(113, 118, 1)]
    assert h.fetch("c3", max_records=1) == [(119, 119, 1)]

    # Release 110 (consumer 1) (KIP: StartOffset -1).
    assert await h.ack("c1", 110, 110, REL) == 0
    assert h.last_write() == (110, 0, [(110, 110, AVAILABLE, 1)])

    # Acknowledge 119 (consumer 3).
    assert await h.ack("c3", 119, 119, ACC) == 0
    assert h.last_write() == (110, 1, [(119, 119, ACKNOWLEDGED, 1)])

    # Fetch records 110, 120 (consumer 1).
    log.append(1)
    timers.advance(9000)
    assert h.fetch("c1", max_records=2) == [(110, 110, 2), (120, 120, 1)]

    # Lock timeout elapsed 111, 112 (consumer 1's records): one write.
    writes = len(persister.writes)
    timers.advance(20_000)
    await sp.drain()
    assert len(persister.writes) == writes + 1
    assert h.last_write() == (110, 1, [(111, 112, AVAILABLE, 1)])

    # Acknowledge 113-118 (consumer 2).
    assert await h.ack("c2", 113, 118, ACC) == 0
    assert h.last_write() == (110, 7, [(113, 118, ACKNOWLEDGED, 1)])

    # Fetch records 111, 112 (consumer 3).
    assert h.fetch("c3", max_records=2) == [(111, 112, 2)]

    # Acknowledge 110 (consumer 1): SPSO 111.
    assert await h.ack("c1", 110, 110, ACC) == 0
    assert h.last_write() == (110, 8, [(110, 110, ACKNOWLEDGED, 2)])
    assert sp.start_offset == 111

    # Acknowledge 111, 112 (consumer 3): SPSO 120 (KIP: StartOffset 120, no batches).
    assert await h.sp.acknowledge("c3", [AckBatch(111, 112, [ACC, ACC])]) == 0
    assert h.last_write() == (111, 9, [(111, 112, ACKNOWLEDGED, 2)])
    assert sp.start_offset == 120 and sp.delivery_complete_count == 0
    assert h.state(120) == (ACQUIRED, 1, "c1", False)
    h.check_dcc()


# ---------------------------------------------------------------- acknowledgement batch validation

@pytest.mark.parametrize("batches, version, renew, code", [
    ([(0, 9, [1])], 1, False, 0),
    ([(0, 2, [1, 2, 0])], 1, False, 0),
    ([(5, 4, [1])], 1, False, Errors.INVALID_REQUEST),                 # first > last
    ([(0, 9, [1]), (5, 12, [1])], 1, False, Errors.INVALID_REQUEST),   # overlap
    ([(10, 12, [1]), (0, 9, [1])], 1, False, Errors.INVALID_REQUEST),  # unordered
    ([(0, 9, [1]), (9, 12, [1])], 1, False, 0),                        # Kafka compares with <
    ([(0, 9, [])], 1, False, Errors.INVALID_REQUEST),                  # no type
    ([(0, 9, [1, 1])], 1, False, Errors.INVALID_REQUEST),              # neither 1 nor 10 types
    ([(0, 1, [1, 5])], 1, False, Errors.INVALID_REQUEST),              # type > 4
    ([(0, 1, [-1])], 1, False, Errors.INVALID_REQUEST),
    ([(0, 1, [4])], 1, True, Errors.INVALID_REQUEST),                  # RENEW needs v2
    ([(0, 1, [4])], 2, False, Errors.INVALID_REQUEST),                 # and IsRenewAck
    ([(0, 1, [4])], 2, True, 0),
    ([], 2, False, 0),
])
def test_validate_ack_batches(batches, version, renew, code):
    assert validate_ack_batches([AckBatch(*b) for b in batches], version, renew) == code
