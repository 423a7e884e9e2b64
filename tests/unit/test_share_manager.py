"""SharePartitionManager: ShareFetch / ShareAcknowledge work, long poll and releases, with fakes.

The handlers only validate and build responses; these tests drive the manager with the
decoded request objects, a fake log, a fake persister and the real Watchers.
"""
from __future__ import annotations

import asyncio

import pytest

from protocol.errors import Errors
from protocol.messages.share_acknowledge import ShareAcknowledgeRequest
from protocol.messages.share_fetch import ShareFetchRequest

from broker.delayed import Watchers
from broker.share.errors import ShareError
from broker.share.manager import SharePartitionManager
from broker.share.partition import ACQUIRED, AVAILABLE, RECORD_LIMIT
from tests.unit.share_partition_support import AckBatch, FakeLog, FakePersister

TOPIC = bytes(range(16))
GROUP, MEMBER = "g1", "m1"


class Log(FakeLog):
    @property
    def high_watermark(self):
        return self.log_end_offset


class TopicInfo:
    def __init__(self, name, logs):
        self.name, self.logs, self.partitions = name, logs, len(logs)


class Logs:
    def __init__(self, *logs):
        self.info = TopicInfo("t", list(logs))
        self.deleted = False

    def topic_by_id(self, topic_id):
        return self.info if topic_id == TOPIC and not self.deleted else None


class Config:
    def get_int(self, name, default):
        return default


class GroupConfigs:
    values = {"share.record.lock.duration.ms": 30_000, "share.delivery.count.limit": 5,
              "share.partition.max.record.locks": 2000, "share.auto.offset.reset": "earliest",
              "share.renew.acknowledge.enable": True, "share.isolation.level": "read_uncommitted",
              "errors.deadletterqueue.topic.name": "", "errors.deadletterqueue.copy.record.enable": False,
              "share.redelivery.backoff.ms": 0, "share.redelivery.backoff.max.ms": 60_000,
              "share.fair.acquisition.enable": True}

    def get_int(self, group, name):
        return self.values[name]

    get = get_bool = get_int


class Connection:
    def __init__(self):
        self.hooks = []

    def on_close(self, hook):
        self.hooks.append(hook)

    def close(self):
        for hook in self.hooks:
            hook(self)


@pytest.fixture
async def env():
    loop = asyncio.get_running_loop()
    logs = Logs(Log((5, 5, 5)), Log((10,)))
    mgr = SharePartitionManager(Config(), logs=logs, watchers=Watchers(), persister=FakePersister(),
                                group_configs=GroupConfigs(), scheduler=loop,
                                now_ms=lambda: int(loop.time() * 1000))
    yield mgr, logs
    await mgr.close()


def fetch_req(epoch, partitions=(0,), acks=None, max_wait_ms=0, max_records=500, mode=0, forgotten=()):
    R = ShareFetchRequest
    acks = acks or {}
    return R(group_id=GROUP, member_id=MEMBER, share_session_epoch=epoch, max_wait_ms=max_wait_ms,
             max_records=max_records, batch_size=500, share_acquire_mode=mode,
             topics=[R.FetchTopic(topic_id=TOPIC, partitions=[
                 R.FetchPartition(partition_index=p, acknowledgement_batches=acks.get(p, [])) for p in partitions])],
             forgotten_topics_data=[R.ForgottenTopic(topic_id=TOPIC, partitions=list(forgotten))] if forgotten else [])


def wanted(req):
    return {(t.topic_id, p.partition_index): list(p.acknowledgement_batches) for t in req.topics for p in t.partitions}


async def fetch(mgr, conn, epoch, invalid=(), **kw):
    req = fetch_req(epoch, **kw)
    return await mgr.fetch(req, wanted(req), {(TOPIC, p) for p in invalid}, conn)


async def loaded(mgr, *partitions):
    """Share partitions whose state is loaded (a fetch skips the ones still loading once it has records)."""
    for p in partitions:
        await mgr.partition(GROUP, TOPIC, p)


def acquired(result):
    return {p.partition: p.acquired for p in result.partitions if p.acquired}


async def test_fetch_opens_a_session_and_acquires_from_every_partition(env):
    mgr, _ = env
    conn = Connection()
    res = await fetch(mgr, conn, 0, partitions=(0, 1))
    assert res.acquisition_lock_timeout_ms == 30_000
    # As Kafka's DelayedShareFetch: once a partition has records, partitions whose share state is still
    # loading are skipped (their load goes on); the next fetch takes them.
    first = acquired(res)
    assert len(first) == 1 and first in ({0: [(0, 14, 1)]}, {1: [(0, 9, 1)]})
    assert [p.partition for p in res.partitions] == [0, 1]   # a full fetch answers every partition
    res = await fetch(mgr, conn, 1, partitions=(0, 1))
    assert {**first, **acquired(res)} == {0: [(0, 14, 1)], 1: [(0, 9, 1)]}


async def test_max_records_spans_the_request_and_record_limit_is_exact(env):
    mgr, _ = env
    conn = Connection()
    # The partition order rotates with the session epoch (1 after opening): partition 1 goes first.
    res = await fetch(mgr, conn, 0, partitions=(0, 1), max_records=7, mode=RECORD_LIMIT)
    assert acquired(res) == {1: [(0, 6, 1)]}
    res = await fetch(mgr, conn, 1, partitions=(), max_records=20, mode=RECORD_LIMIT)
    assert acquired(res) == {0: [(0, 14, 1)], 1: [(7, 9, 1)]}


async def test_piggy_backed_acks_and_an_invalid_partition(env):
    mgr, _ = env
    conn = Connection()
    await loaded(mgr, 0, 1)  # both partitions acquire in the first fetch
    await fetch(mgr, conn, 0, partitions=(0, 1))
    res = await fetch(mgr, conn, 1, partitions=(0, 1), invalid=(1,),
                      acks={0: [AckBatch(0, 4, [1])], 1: [AckBatch(3, 1, [1])]})
    by_p = {p.partition: p for p in res.partitions}
    assert by_p[0].ack_error == Errors.NONE and by_p[1].error == Errors.INVALID_REQUEST
    sp = await mgr.partition(GROUP, TOPIC, 0)
    assert sp.start_offset == 5


async def test_acks_in_an_opening_fetch_are_refused(env):
    mgr, _ = env
    with pytest.raises(ShareError) as e:
        await fetch(mgr, Connection(), 0, acks={0: [AckBatch(0, 4, [1])]})
    assert e.value.code == Errors.INVALID_REQUEST


async def test_final_epoch_releases_and_fetches_nothing(env):
    mgr, _ = env
    conn = Connection()
    await fetch(mgr, conn, 0)
    res = await fetch(mgr, conn, -1, acks={0: [AckBatch(0, 4, [1])]})
    assert acquired(res) == {} and [p.ack_error for p in res.partitions] == [Errors.NONE]
    sp = await mgr.partition(GROUP, TOPIC, 0)
    assert sp.start_offset == 5 and sp.record_state(5)[:2] == (AVAILABLE, 1)   # count kept (KAFKA-19972)
    with pytest.raises(ShareError) as e:
        await fetch(mgr, conn, 1)
    assert e.value.code == Errors.SHARE_SESSION_NOT_FOUND


async def test_long_poll_is_woken_by_new_data(env):
    mgr, logs = env
    conn = Connection()
    await fetch(mgr, conn, 0)                               # takes 0-14
    waiting = asyncio.ensure_future(fetch(mgr, conn, 1, max_wait_ms=5_000))
    await asyncio.sleep(0)
    assert not waiting.done()
    logs.info.logs[0].append(3)
    mgr.watchers.notify(("log", "t", 0))
    res = await asyncio.wait_for(waiting, 1)
    assert acquired(res) == {0: [(15, 17, 1)]}


async def test_long_poll_times_out_empty(env):
    mgr, _ = env
    conn = Connection()
    await fetch(mgr, conn, 0)
    res = await fetch(mgr, conn, 1, max_wait_ms=20)
    assert acquired(res) == {}


async def test_acknowledge_and_its_final_epoch(env):
    mgr, _ = env
    conn = Connection()
    await loaded(mgr, 0, 1)  # both partitions acquire in the first fetch
    await fetch(mgr, conn, 0, partitions=(0, 1))
    A = ShareAcknowledgeRequest
    req = A(group_id=GROUP, member_id=MEMBER, share_session_epoch=-1, topics=[A.AcknowledgeTopic(
        topic_id=TOPIC, partitions=[A.AcknowledgePartition(partition_index=0, acknowledgement_batches=[
            A.AcknowledgementBatch(first_offset=0, last_offset=9, acknowledge_types=[1])])])])
    res = await mgr.acknowledge(req, {(TOPIC, 0): req.topics[0].partitions[0].acknowledgement_batches,
                                      (TOPIC, 1): []}, {(TOPIC, 1): Errors.INVALID_REQUEST})
    assert res.acquisition_lock_timeout_ms == 30_000
    assert res.partitions == [(TOPIC, 0, Errors.NONE), (TOPIC, 1, Errors.INVALID_REQUEST)]
    sp0, sp1 = await mgr.partition(GROUP, TOPIC, 0), await mgr.partition(GROUP, TOPIC, 1)
    assert sp0.start_offset == 10 and sp0.record_state(10)[0] == AVAILABLE   # the rest was released
    assert sp1.record_state(0)[0] == AVAILABLE


async def test_acknowledge_cannot_open_a_session(env):
    mgr, _ = env
    req = ShareAcknowledgeRequest(group_id=GROUP, member_id=MEMBER, share_session_epoch=0, topics=[])
    with pytest.raises(ShareError) as e:
        await mgr.acknowledge(req, {}, {})
    assert e.value.code == Errors.INVALID_SHARE_SESSION_EPOCH


async def test_closing_the_connection_releases_the_members_records(env):
    mgr, _ = env
    conn = Connection()
    await fetch(mgr, conn, 0)
    sp = await mgr.partition(GROUP, TOPIC, 0)
    assert sp.record_state(0)[0] == ACQUIRED
    conn.close()
    for _ in range(5):
        await asyncio.sleep(0)
    await sp.drain()
    assert sp.record_state(0)[:2] == (AVAILABLE, 1)
    assert all(s.member_id != MEMBER for s in mgr.sessions.sessions())


async def test_final_acknowledge_of_a_session_is_applied(env):
    # Kafka: leaving the group (heartbeat epoch -1, session timeout) does not end the share session
    # (nothing tells the share-partition manager); librdkafka's close() sends its final
    # ShareAcknowledge after the leave heartbeat, and it is applied.
    mgr, _ = env
    conn = Connection()
    await fetch(mgr, conn, 0)                                # takes 0-14
    sp = await mgr.partition(GROUP, TOPIC, 0)
    assert sp.record_state(0) == (ACQUIRED, 1, MEMBER, False)
    A = ShareAcknowledgeRequest
    batches = [A.AcknowledgementBatch(first_offset=0, last_offset=14, acknowledge_types=[1])]
    req = A(group_id=GROUP, member_id=MEMBER, share_session_epoch=-1, topics=[A.AcknowledgeTopic(
        topic_id=TOPIC, partitions=[A.AcknowledgePartition(partition_index=0, acknowledgement_batches=batches)])])
    res = await mgr.acknowledge(req, {(TOPIC, 0): batches}, {})
    assert res.partitions == [(TOPIC, 0, Errors.NONE)]
    assert sp.start_offset == 15 and mgr.sessions.get(GROUP, MEMBER) is None


async def test_long_poll_returns_when_the_topic_is_deleted(env):
    mgr, logs = env
    conn = Connection()
    await fetch(mgr, conn, 0)                                # takes 0-14: nothing left to acquire
    loop = asyncio.get_running_loop()
    started = loop.time()
    waiting = asyncio.ensure_future(fetch(mgr, conn, 1, max_wait_ms=30_000))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not waiting.done()
    logs.deleted = True                                      # as Topics.delete: the log goes, then listeners
    mgr.topic_deleted("t", TOPIC)
    res = await asyncio.wait_for(waiting, 1)
    assert loop.time() - started < 1
    assert [(p.partition, p.error) for p in res.partitions] == [(0, Errors.UNKNOWN_TOPIC_OR_PARTITION)]
    assert acquired(res) == {}


async def test_long_poll_still_waits_when_only_an_already_failed_partition_is_known(env):
    # a partition that failed before the wait does not end the long poll of the others
    mgr, logs = env
    conn = Connection()
    await loaded(mgr, 0, 1)  # both partitions acquire in the first fetch
    await fetch(mgr, conn, 0, partitions=(0, 1))
    waiting = asyncio.ensure_future(fetch(mgr, conn, 1, partitions=(0, 1, 7), max_wait_ms=5_000))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not waiting.done()
    logs.info.logs[1].append(2)
    mgr.watchers.notify(("log", "t", 1))
    res = await asyncio.wait_for(waiting, 1)
    assert acquired(res) == {1: [(10, 11, 1)]}
    assert {p.partition: p.error for p in res.partitions if p.error} == {7: Errors.UNKNOWN_TOPIC_OR_PARTITION}


async def test_a_full_record_lock_window_is_not_read_again(env):
    # Kafka's canAcquireRecords: with the window full and nothing to redeliver, the log is not read.
    mgr, logs = env
    GroupConfigs.values["share.partition.max.record.locks"] = 10
    try:
        log = logs.info.logs[1]
        reads = []
        read = log.read
        log.read = lambda *a, **kw: reads.append(a[0]) or read(*a, **kw)
        conn = Connection()
        log.append(10)
        assert acquired(await fetch(mgr, conn, 0, partitions=(1,))) == {1: [(0, 9, 1)]}
        n = len(reads)
        assert acquired(await fetch(mgr, conn, 1, partitions=(1,))) == {}
        assert len(reads) == n                                       # window full: no read
        # RELEASE 0-4: with the window full the fetch waits for its acknowledgements before it acquires
        res = await fetch(mgr, conn, 2, partitions=(1,), acks={1: [AckBatch(0, 4, [2])]})
        assert acquired(res) == {1: [(0, 4, 2)]} and len(reads) == n + 1  # a redelivery is read
    finally:
        GroupConfigs.values["share.partition.max.record.locks"] = 2000


async def test_waiters_woken_with_nothing_to_take_wait_on_without_a_pass(env):
    """An acknowledgement that frees room in a full record-lock window wakes every member waiting on the
    partition; one takes the room. A woken fetch that can take nothing (window full, nothing to redeliver)
    waits on without a pass over its partitions (Kafka's tryComplete asks canAcquireRecords first)."""
    mgr, logs = env
    GroupConfigs.values["share.partition.max.record.locks"] = 10
    try:
        log = logs.info.logs[1]  # one batch of 10 records
        holder = Connection()
        assert acquired(await fetch(mgr, holder, 0, partitions=(1,))) == {1: [(0, 9, 1)]}  # the window is full
        passes = []
        real_acquire = mgr._acquire

        async def counted(group, member, parts, req):
            passes.append(member)
            return await real_acquire(group, member, parts, req)

        mgr._acquire = counted
        req = fetch_req(0, partitions=(1,), max_wait_ms=5_000)
        req.member_id = "m2"
        waiting = asyncio.ensure_future(mgr.fetch(req, wanted(req), set(), Connection()))
        for _ in range(5):
            await asyncio.sleep(0)
        assert passes == ["m2"] and not waiting.done()                 # its first pass found no room
        log.append(5)
        for key in [("log", "t", 1), ("share", GROUP, TOPIC, 1), ("share", GROUP, TOPIC, 1)]:
            mgr.watchers.notify(key)                                   # new data, state changes: no room yet
            for _ in range(5):
                await asyncio.sleep(0)
        assert passes == ["m2"] and not waiting.done()
        A = ShareAcknowledgeRequest                                    # the holder accepts 0-4: room for 5
        batches = [A.AcknowledgementBatch(first_offset=0, last_offset=4, acknowledge_types=[1])]
        ack = A(group_id=GROUP, member_id=MEMBER, share_session_epoch=1, topics=[])
        assert (await mgr.acknowledge(ack, {(TOPIC, 1): batches}, {})).partitions == [(TOPIC, 1, Errors.NONE)]
        res = await asyncio.wait_for(waiting, 1)
        assert acquired(res) == {1: [(10, 14, 1)]} and passes == ["m2", "m2"]
    finally:
        GroupConfigs.values["share.partition.max.record.locks"] = 2000


async def test_a_fetch_acquires_while_its_piggy_backed_acks_are_persisted(env):
    """As Kafka 4.4's handleShareFetchRequest, which combines the acknowledgement and the fetch futures:
    the fetch does not wait for the share-state write of its acknowledgements before it acquires; its
    answer waits for both."""
    mgr, _ = env
    conn = Connection()
    await loaded(mgr, 0)
    assert acquired(await fetch(mgr, conn, 0, max_records=5)) == {0: [(0, 4, 1)]}
    sp, persister = await mgr.partition(GROUP, TOPIC, 0), mgr.persister
    persister.hold = True
    task = asyncio.ensure_future(fetch(mgr, conn, 1, max_records=5, acks={0: [AckBatch(0, 4, [1])]}))
    await persister.wait_held(1)
    for _ in range(5):
        await asyncio.sleep(0)
    state = sp.record_state(5)
    assert state is not None and state[0] == ACQUIRED and not task.done()  # the answer waits for the write
    persister.complete()
    res = await task
    assert acquired(res) == {0: [(5, 9, 1)]} and res.partitions[0].ack_error == Errors.NONE
    assert sp.start_offset == 5
