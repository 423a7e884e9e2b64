"""KIP-1191 ARCHIVING -> ARCHIVED and delayed redelivery in SharePartition, with the fakes of
share_partition_support (fake clock and timers, a persister that records writes, a fake log)."""
from __future__ import annotations

import asyncio

import pytest

from broker.share.acks import ACK_ACCEPT as ACC, ACK_GAP as GAP, ACK_REJECT as REJ, ACK_RELEASE as REL
from broker.share.config import ShareGroupConfig
from broker.share.dlq import _chunks, _decode
from broker.share.inflight import CAUSE_DELIVERY_COUNT, CAUSE_REJECT
from broker.share.partition import ACKNOWLEDGED, ARCHIVED, ARCHIVING, AVAILABLE, SharePartition
from protocol.records import build_batch, read_header
from tests.unit.test_batch_filter import CODECS, kp_batch
from tests.unit.share_partition_support import GROUP, TOPIC, FakeLog, FakePersister, FakeTimers, H, payload


class FakeDlq:
    """The DLQ writer: records its calls and returns when the test lets it (or at once)."""

    def __init__(self, hold: bool = False, result: bool = True):
        self.calls: list = []
        self.hold, self.result = hold, result
        self.gate = asyncio.Event()

    async def __call__(self, sp, runs):
        self.calls.append(list(runs))
        if self.hold:
            await self.gate.wait()
        return self.result


async def make(sizes=(10,) * 3, *, dlq=None, start=0, batches=(), **cfg):
    timers = FakeTimers()
    log = FakeLog(sizes)
    persister = FakePersister(start_offset=start, batches=batches)
    h = None

    def wake():
        h.wakeups += 1

    sp = SharePartition(GROUP, TOPIC, 0, log=log, persister=persister, config=ShareGroupConfig(**cfg),
                        scheduler=timers, now_ms=timers.now_ms, leader_epoch=7, on_state_change=wake, dlq=dlq)
    h = H(sp, timers, persister, log)
    await sp.initialize()
    return h


async def test_reject_goes_archiving_then_archived_after_the_dlq_write():
    dlq = FakeDlq(hold=True)
    h = await make(dlq=dlq, dlq_topic="dlq.x")
    assert h.fetch("a") == [(0, 29, 1)]
    assert await h.ack("a", 0, 9, REJ) == 0
    await asyncio.sleep(0)
    # Phase one persisted: state 3, nothing terminal yet, SPSO still 0.
    assert h.last_write() == (0, 0, [(0, 9, ARCHIVING, 1)])
    assert h.state(5) == (ARCHIVING, 1, "", False) and h.sp.start_offset == 0
    assert dlq.calls == [[(0, 9, 1, CAUSE_REJECT)]]
    # The pending DLQ write blocks nobody: other records are acknowledged meanwhile.
    assert await h.ack("a", 10, 29, ACC) == 0
    assert h.sp.start_offset == 0 and h.sp.archived_count == 0
    assert h.sp.next_fetch_offset() == 30  # ARCHIVING records are never acquirable
    dlq.gate.set()
    await h.sp.drain()
    assert h.last_write() == (0, 30, [(0, 9, ARCHIVED, 1)])
    assert h.sp.start_offset == 30 and h.sp.archived_count == 10
    h.check_dcc()


async def test_release_at_the_delivery_limit_goes_to_the_dlq_with_its_cause():
    dlq = FakeDlq()
    h = await make(sizes=(5,), dlq=dlq, dlq_topic="dlq.x", delivery_count_limit=2)
    for dc in (1, 2):
        assert h.fetch("a") == [(0, 4, dc)]
        assert await h.ack("a", 0, 4, REL) == 0
    await h.sp.drain()
    assert dlq.calls == [[(0, 4, 2, CAUSE_DELIVERY_COUNT)]]
    assert [payload(w)[2] for w in h.p.writes[-2:]] == [[(0, 4, ARCHIVING, 2)], [(0, 4, ARCHIVED, 2)]]
    assert h.sp.start_offset == 5 and h.sp.archived_count == 5


async def test_lock_expiry_at_the_limit_and_gap_acks():
    dlq = FakeDlq()
    h = await make(sizes=(4,), dlq=dlq, dlq_topic="dlq.x", delivery_count_limit=2, record_lock_duration_ms=1000)
    assert h.fetch("a") == [(0, 3, 1)]
    assert await h.ack("a", 0, 0, GAP) == 0  # a gap is archived directly, never dead-lettered
    h.t.advance(1000)
    await h.sp.drain()
    assert h.fetch("b") == [(1, 3, 2)]  # the lock ran out: redelivered (count 2 = the limit)
    h.t.advance(1000)                   # and ran out again: at the limit, to the DLQ
    await h.sp.drain()
    assert dlq.calls == [[(1, 3, 2, CAUSE_DELIVERY_COUNT)]]
    assert h.sp.start_offset == 4 and h.sp.archived_count == 3  # the GAP offset is no archived record


async def test_without_a_dlq_topic_records_are_archived_at_once():
    dlq = FakeDlq()
    h = await make(sizes=(5,), dlq=dlq)
    h.fetch("a")
    assert await h.ack("a", 0, 4, REJ) == 0
    await h.sp.drain()
    assert dlq.calls == [] and h.last_write()[2] == [(0, 4, ARCHIVED, 1)]
    assert h.sp.archived_count == 5 and h.sp.start_offset == 5


async def test_a_dlq_that_gives_up_still_archives():
    dlq = FakeDlq(result=False)
    h = await make(sizes=(3,), dlq=dlq, dlq_topic="dlq.x")
    h.fetch("a")
    assert await h.ack("a", 0, 2, REJ) == 0
    await h.sp.drain()
    assert dlq.calls == [[(0, 2, 1, CAUSE_REJECT)]] and h.last_write()[2] == [(0, 2, ARCHIVED, 1)]
    assert h.sp.start_offset == 3 and h.sp.archived_count == 3


async def test_persisted_archiving_is_written_again_at_initialization():
    dlq = FakeDlq(hold=True)
    h = await make(sizes=(10,), dlq=dlq, dlq_topic="dlq.x", start=0, delivery_count_limit=3,
                   batches=[(0, 1, ACKNOWLEDGED, 1), (2, 3, ARCHIVING, 3), (4, 4, ARCHIVING, 1)])
    await asyncio.sleep(0)
    assert dlq.calls == [[(2, 3, 3, CAUSE_DELIVERY_COUNT), (4, 4, 1, CAUSE_REJECT)]]
    assert h.sp.start_offset == 2 and h.sp.next_fetch_offset() == 5
    assert h.fetch("a") == [(5, 9, 1)]
    dlq.gate.set()
    await h.sp.drain()
    assert h.last_write()[2] == [(2, 3, ARCHIVED, 3), (4, 4, ARCHIVED, 1)]
    assert h.sp.start_offset == 5


async def test_closing_cancels_the_dlq_write_and_keeps_archiving_persisted():
    dlq = FakeDlq(hold=True)
    h = await make(sizes=(3,), dlq=dlq, dlq_topic="dlq.x")
    h.fetch("a")
    await h.ack("a", 0, 2, REJ)
    await asyncio.sleep(0)
    writes = len(h.p.writes)
    h.sp.close()
    await h.sp.drain()
    assert len(h.p.writes) == writes and h.last_write()[2] == [(0, 2, ARCHIVING, 1)]


# ---------------------------------------------------------------- delayed redelivery

async def test_released_records_wait_backoff_times_two_to_the_deliveries():
    h = await make(sizes=(2,), redelivery_backoff_ms=500, redelivery_backoff_max_ms=1500, delivery_count_limit=10)
    expected = {1: 500, 2: 1000, 3: 1500, 4: 1500}  # 500 x 2^(n-1), capped at 1500
    for dc in (1, 2, 3, 4):
        assert h.fetch("a") == [(0, 1, dc)]
        assert await h.ack("a", 0, 1, REL) == 0
        wakeups = h.wakeups
        assert h.sp.next_fetch_offset() == 2 and h.fetch("b") == []      # not yet acquirable
        h.t.advance(expected[dc] - 1)
        assert h.fetch("b") == []
        h.t.advance(1)                                                   # due: the long polls are woken
        assert h.wakeups > wakeups and h.sp.next_fetch_offset() == 0
    assert h.state(0) == (AVAILABLE, 4, "", False)


async def test_lock_expiry_is_delayed_session_release_and_backoff_zero_are_not():
    h = await make(sizes=(1, 1), redelivery_backoff_ms=300, record_lock_duration_ms=1000)
    assert h.fetch("a", max_records=1) == [(0, 0, 1)]
    h.t.advance(1000)  # lock expired
    await h.sp.drain()
    assert h.state(0)[0] == AVAILABLE and h.fetch("b", max_records=1) == [(1, 1, 1)]
    h.t.advance(300)
    assert h.fetch("b") == [(0, 0, 2)]
    assert await h.sp.release_member("b") == 0  # share session closed: back at once
    assert h.state(0) == (AVAILABLE, 2, "", False) and h.fetch("c", max_records=1) == [(0, 0, 3)]

    z = await make(sizes=(3,))
    assert z.fetch("a") == [(0, 2, 1)]
    assert await z.ack("a", 0, 2, REL) == 0
    assert z.fetch("b") == [(0, 2, 2)]  # backoff 0: redelivered at once, as before


# ---------------------------------------------------------------- dead-letter record building

@pytest.mark.parametrize("codec", CODECS)
def test_copy_record_reads_batches_of_every_codec(codec):
    """Source batches built by kafka-python's own codec; the wanted offsets are decoded, the others not."""
    v = b"value " * 20  # compressible: kafka-python keeps the batch compressed
    batch = kp_batch([(b"k1", v + b"1", [("h", b"x")], 0), (None, v + b"2", [], 1), (b"k3", v + b"3", [], 2)],
                     codec=codec, base_offset=40)
    assert read_header(batch).compression == codec
    recs = _decode([batch], [(40, 41)])
    assert {o: (r.key, r.value, r.headers) for o, r in recs.items()} == {40: (b"k1", v + b"1", [("h", b"x")]),
                                                                          41: (None, v + b"2", [])}


def test_records_are_split_under_max_message_bytes():
    records = [(None, b"x" * 100, [("__dlq.errors.offset", b"1")], 0) for _ in range(10)]
    chunks = list(_chunks(records, 400))
    assert sum(len(c) for c in chunks) == 10 and len(chunks) > 2
    assert all(len(build_batch(c)) <= 400 for c in chunks)
    assert [len(c) for c in _chunks(records[:1], 10)] == [1]  # too large alone: sent alone


def test_broker_dlq_settings_are_checked_at_start_up():
    from broker.config_keys import check
    from broker.log.config import ConfigError, validate_topic_configs

    assert check("errors.deadletterqueue.auto.create.topics.enable", "true")
    assert check("errors.deadletterqueue.topic.name.prefix", "")
    for key, bad in (("errors.deadletterqueue.auto.create.topics.enable", "maybe"),
                     ("sharebroker.share.dlq.retry.backoff.ms", "0")):
        with pytest.raises(ConfigError):
            check(key, bad)
    assert validate_topic_configs({"errors.deadletterqueue.group.enable": "true"}) == \
        {"errors.deadletterqueue.group.enable": True}
    with pytest.raises(ConfigError):
        validate_topic_configs({"errors.deadletterqueue.group.enable": "yes"})
