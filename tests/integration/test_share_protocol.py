"""ShareFetch / ShareAcknowledge at the protocol level: what librdkafka cannot send.

v2 (ShareAcquireMode record_limit, RENEW with IsRenewAck), every share-session epoch
rule and error code, acknowledgement validation, long poll, and the response
details clients depend on (Records never null).  Driven with our own codec over a
socket against the real broker.
"""
from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from broker.share.acks import ACK_ACCEPT as ACCEPT, ACK_REJECT as REJECT, ACK_RELEASE as RELEASE, ACK_RENEW as RENEW
from broker.testing import BrokerProcess
from protocol.errors import Errors
from protocol.records import read_header
from protocol.messages.share_acknowledge import ShareAcknowledgeRequest as AckReq
from protocol.messages.share_fetch import ShareFetchRequest as FetchReq
from protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest as HbReq
from tests.wire import WireClient


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    cfg = {"group.share.min.record.lock.duration.ms": "1000", "group.share.max.share.sessions": "50"}
    with BrokerProcess(tmp_path_factory.mktemp("shareproto"), config=cfg) as b:
        yield b


class Setup:
    """A topic with records and a share group whose state is initialized for it."""

    def __init__(self, bs: str, records: int = 10, single_batch: bool = True, **group_configs):
        self.bs = bs
        self.topic = f"t-{uuid.uuid4().hex[:8]}"
        self.group = f"g-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": bs})
        admin.create_topics([NewTopic(self.topic, 1)])[self.topic].result(15)
        configs = {"share.auto.offset.reset": "earliest", **group_configs}
        res = ConfigResource(ConfigResource.Type.GROUP, self.group, incremental_configs=[
            ConfigEntry(k, str(v), incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
        admin.incremental_alter_configs([res])[res].result(15)
        self.produce(records, single_batch)
        md = admin.list_topics(self.topic, timeout=15)
        self.topic_id = md.topics[self.topic].topic_id.bytes if hasattr(md.topics[self.topic], "topic_id") else None
        self.members: dict[str, WireClient] = {}
        if self.topic_id is None:
            from protocol.messages.metadata import MetadataRequest
            with WireClient(bs) as w:
                r = w.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=self.topic)]), 12)
                self.topic_id = r.topics[0].topic_id
        self.join("init")

    def produce(self, n: int, single_batch: bool = True) -> None:
        """``n`` records as one record batch (sent with our codec: deterministic), or one batch each."""
        if n == 0:
            return
        if single_batch:
            from protocol.messages.produce import ProduceRequest as P
            from protocol.records import build_batch

            batch = build_batch([(None, b"v%d" % i, []) for i in range(n)])
            req = P(acks=-1, timeout_ms=10_000, topic_data=[P.TopicProduceData(name=self.topic, partition_data=[
                P.PartitionProduceData(index=0, records=batch)])])
            with WireClient(self.bs) as w:
                r = w.request(req, 9)
            assert r.responses[0].partition_responses[0].error_code == 0
            return
        p = Producer({"bootstrap.servers": self.bs, "linger.ms": 0})
        for i in range(n):
            p.produce(self.topic, value=b"v%d" % i, partition=0)
            p.flush(10)
        assert p.flush(15) == 0

    def conn(self, member: str) -> WireClient:
        if member not in self.members:
            self.members[member] = WireClient(self.bs)
        return self.members[member]

    def join(self, member: str) -> None:
        r = self.conn(member).request(HbReq(group_id=self.group, member_id=member, member_epoch=0,
                                            subscribed_topic_names=[self.topic]), 1)
        assert r.error_code == 0, r

    def fetch(self, member: str, epoch: int, *, version: int = 2, max_records: int = 500, batch_size: int = 500,
              mode: int = 0, max_wait_ms: int = 0, acks=None, renew: bool = False, topic_twice: bool = False,
              max_bytes: int = 1 << 20):
        batches = [FetchReq.AcknowledgementBatch(first_offset=f, last_offset=last, acknowledge_types=t)
                   for f, last, t in (acks or [])]
        topic = FetchReq.FetchTopic(topic_id=self.topic_id, partitions=[
            FetchReq.FetchPartition(partition_index=0, acknowledgement_batches=batches)])
        topics = [topic, FetchReq.FetchTopic(topic_id=self.topic_id, partitions=[
            FetchReq.FetchPartition(partition_index=0)])] if topic_twice else [topic]
        req = FetchReq(group_id=self.group, member_id=member, share_session_epoch=epoch, max_wait_ms=max_wait_ms,
                       min_bytes=1, max_bytes=max_bytes, max_records=max_records, batch_size=batch_size,
                       share_acquire_mode=mode, is_renew_ack=renew, topics=topics)
        return self.conn(member).request(req, version)

    def ack(self, member: str, epoch: int, acks, *, version: int = 2, renew: bool = False):
        req = AckReq(group_id=self.group, member_id=member, share_session_epoch=epoch, is_renew_ack=renew,
                     topics=[AckReq.AcknowledgeTopic(topic_id=self.topic_id, partitions=[
                         AckReq.AcknowledgePartition(partition_index=0, acknowledgement_batches=[
                             AckReq.AcknowledgementBatch(first_offset=f, last_offset=last, acknowledge_types=t)
                             for f, last, t in acks])])])
        return self.conn(member).request(req, version)

    def close(self) -> None:
        for w in self.members.values():
            w.close()


@pytest.fixture
def setup(broker):
    made = []

    def make(**kw):
        s = Setup(broker.bootstrap, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def part(resp):
    return resp.responses[0].partitions[0]


def acquired(resp) -> list[tuple[int, int, int]]:
    out = []
    for t in resp.responses:
        for p in t.partitions:
            out += [(a.first_offset, a.last_offset, a.delivery_count) for a in p.acquired_records]
    return out


def offsets(resp) -> set[int]:
    return {o for f, last, _ in acquired(resp) for o in range(f, last + 1)}


# ------------------------------------------------------------------ acquisition
def test_record_limit_mode_acquires_exactly_max_records(setup):
    s = setup(records=100)
    r = s.fetch("m1", 0, max_records=10, mode=1)
    assert r.error_code == 0
    assert offsets(r) == set(range(10))
    assert bytes(part(r).records)  # the whole batch is sent, the acquired range says which records


def test_batch_optimized_mode_takes_whole_batches(setup):
    # Kafka 4.4 (fair acquisition off): the whole 100-record batch for MaxRecords 10.
    s = setup(records=100, **{"share.fair.acquisition.enable": "false"})
    r = s.fetch("m1", 0, max_records=10, mode=0)
    assert offsets(r) == set(range(100))
    # Fair acquisition (ours, the default): a batch bigger than MaxRecords is acquired MaxRecords at
    # a time, and only those records are sent (tests/integration/test_share_fair_acquisition.py).
    s = setup(records=100)
    r = s.fetch("m1", 0, max_records=10, mode=0)
    assert offsets(r) == set(range(10))
    assert read_header(bytes(part(r).records)).records_count == 10


def test_max_bytes_zero_acquires_nothing_and_fails_the_partition(setup):
    """Kafka 4.4's DelayedShareFetch shares MaxBytes out with PartitionMaxBytesStrategy, which refuses 0
    (IllegalArgumentException): the partition is answered UNKNOWN_SERVER_ERROR and nothing is acquired
    (librdkafka's 0180 test_fetch_max_bytes_zero_returns_no_records expects no records); the records
    stay available to the next fetch."""
    s = setup()
    r = s.fetch("init", 0, max_bytes=0, max_wait_ms=200)
    p = part(r)
    assert (r.error_code, p.error_code, acquired(r)) == (0, -1, [])
    assert offsets(s.fetch("init", 1)) == set(range(10))


def test_records_field_is_never_null(setup):
    s = setup(records=0)
    r = s.fetch("m1", 0)
    p = part(r)
    assert p.records is not None and len(p.records) == 0
    assert p.acquired_records == []


def test_same_topic_twice_is_merged(setup):
    s = setup(records=5)
    r = s.fetch("m1", 0, topic_twice=True)
    assert r.error_code == 0
    assert sum(len(t.partitions) for t in r.responses) == 1
    assert offsets(r) == set(range(5))


def test_acquisition_lock_timeout_is_reported(setup):
    s = setup(records=1, **{"share.record.lock.duration.ms": "4000"})
    r = s.fetch("m1", 0)
    assert r.acquisition_lock_timeout_ms == 4000


def test_long_poll_wakes_on_new_data(setup):
    s = setup(records=0)
    assert acquired(s.fetch("m1", 0)) == []
    result = {}

    def waiter():
        t0 = time.monotonic()
        result["resp"] = s.fetch("m1", 1, max_wait_ms=20_000)
        result["elapsed"] = time.monotonic() - t0

    th = threading.Thread(target=waiter)
    th.start()
    s.produce(3)
    th.join(30)
    assert offsets(result["resp"]) == {0, 1, 2}
    assert result["elapsed"] < 15


# ------------------------------------------------------------------ acknowledgements
def test_acks_on_fetch_and_on_acknowledge(setup):
    s = setup(records=10, single_batch=False)
    r = s.fetch("m1", 0)
    assert offsets(r) == set(range(10))
    r = s.fetch("m1", 1, acks=[(0, 4, [ACCEPT])])
    assert part(r).acknowledge_error_code == 0
    r = s.ack("m1", 2, [(5, 9, [RELEASE, REJECT, ACCEPT, ACCEPT, RELEASE])])
    assert r.error_code == 0 and part(r).error_code == 0
    again = s.fetch("m2", 0)
    assert {(f, d) for f, last, d in acquired(again)} == {(5, 2), (9, 2)}


def test_ack_of_records_not_acquired_is_invalid_record_state(setup):
    s = setup(records=5)
    s.fetch("m1", 0)
    s.fetch("m2", 0)  # opens m2's session; m2 holds nothing
    r = s.ack("m2", 1, [(0, 4, [ACCEPT])])
    assert part(r).error_code == Errors.INVALID_RECORD_STATE


@pytest.mark.parametrize("batches,version,renew", [
    ([(5, 4, [ACCEPT])], 2, False),                      # first > last
    ([(0, 3, [ACCEPT]), (2, 4, [ACCEPT])], 2, False),    # overlapping
    ([(3, 4, [ACCEPT]), (0, 1, [ACCEPT])], 2, False),    # unordered
    ([(0, 4, [])], 2, False),                            # empty type list
    ([(0, 4, [ACCEPT, ACCEPT])], 2, False),              # neither 1 nor last-first+1 types
    ([(0, 4, [5])], 2, False),                           # type out of range on v2
    ([(0, 4, [RENEW])], 1, False),                       # RENEW does not exist on v1
    ([(0, 4, [RENEW])], 2, False),                       # RENEW without IsRenewAck
])
def test_invalid_acknowledgement_batches(setup, batches, version, renew):
    s = setup(records=5)
    s.fetch("m1", 0, version=version)
    r = s.ack("m1", 1, batches, version=version, renew=renew)
    assert part(r).error_code == Errors.INVALID_REQUEST
    # nothing was applied: the records are still acquired by m1 and can be accepted
    r = s.ack("m1", 2, [(0, 4, [ACCEPT])], version=version)
    assert part(r).error_code == 0


def test_renew_extends_the_lock(setup):
    s = setup(records=3, **{"share.record.lock.duration.ms": "1000"})
    assert offsets(s.fetch("m1", 0)) == {0, 1, 2}
    epoch = 1
    start = time.monotonic()
    while time.monotonic() - start < 2.5:  # well past the 1 s lock
        # another member waits 300 ms and gets nothing: the records stay locked
        assert acquired(s.fetch("m2", 0 if epoch == 1 else epoch - 1, max_wait_ms=300)) == []
        r = s.ack("m1", epoch, [(0, 2, [RENEW])], renew=True)
        assert part(r).error_code == 0
        assert r.acquisition_lock_timeout_ms == 1000
        epoch += 1
    r = s.ack("m1", epoch, [(0, 2, [ACCEPT])])
    assert part(r).error_code == 0


def test_renew_refused_when_the_group_disables_it(setup):
    s = setup(records=3, **{"share.renew.acknowledge.enable": "false"})
    s.fetch("m1", 0)
    r = s.ack("m1", 1, [(0, 2, [RENEW])], renew=True)
    assert part(r).error_code == Errors.INVALID_RECORD_STATE


def test_lock_expiry_without_renew_redelivers(setup):
    s = setup(records=3, **{"share.record.lock.duration.ms": "1000"})
    assert offsets(s.fetch("m1", 0)) == {0, 1, 2}
    r = s.fetch("m2", 0, max_wait_ms=10_000)  # woken by the lock expiry, not by a poll loop
    assert {(f, d) for f, last, d in acquired(r)} == {(0, 2)}
    r = s.ack("m1", 1, [(0, 2, [ACCEPT])])
    assert part(r).error_code == Errors.INVALID_RECORD_STATE


# ------------------------------------------------------------------ share sessions
def test_opening_request_with_acks_is_invalid(setup):
    s = setup(records=1)
    r = s.fetch("m1", 0, acks=[(0, 0, [ACCEPT])])
    assert r.error_code == Errors.INVALID_REQUEST


def test_unknown_session_and_wrong_epoch(setup):
    s = setup(records=1)
    assert s.fetch("m1", 5).error_code == Errors.SHARE_SESSION_NOT_FOUND
    assert s.fetch("m1", 0).error_code == 0
    assert s.fetch("m1", 2).error_code == Errors.INVALID_SHARE_SESSION_EPOCH
    assert s.fetch("m1", 1).error_code == 0
    assert s.fetch("m1", 2).error_code == 0
    assert s.ack("m1", 2, []).error_code == Errors.INVALID_SHARE_SESSION_EPOCH
    assert s.ack("m1", 3, []).error_code == 0


def test_share_acknowledge_cannot_open_a_session(setup):
    s = setup(records=1)
    assert s.ack("m1", 0, [(0, 0, [ACCEPT])]).error_code == Errors.INVALID_SHARE_SESSION_EPOCH
    assert s.ack("m1", 1, [(0, 0, [ACCEPT])]).error_code == Errors.SHARE_SESSION_NOT_FOUND


def test_final_epoch_closes_and_releases(setup):
    s = setup(records=4, **{"share.record.lock.duration.ms": "60000"})
    assert offsets(s.fetch("m1", 0)) == {0, 1, 2, 3}
    r = s.fetch("m1", -1, acks=[(0, 0, [ACCEPT])])
    assert r.error_code == 0 and part(r).acknowledge_error_code == 0
    assert acquired(r) == []  # a closing fetch acquires nothing
    # released at once, long before the 60 s lock; the release keeps the delivery count (KAFKA-19972)
    assert {(f, last, d) for f, last, d in acquired(s.fetch("m2", 0))} == {(1, 3, 2)}
    assert s.fetch("m1", 1).error_code == Errors.SHARE_SESSION_NOT_FOUND


def test_closing_the_connection_closes_sessions_and_releases(setup):
    s = setup(records=4, **{"share.record.lock.duration.ms": "60000"})
    assert offsets(s.fetch("m1", 0)) == {0, 1, 2, 3}
    s.members.pop("m1").close()
    r = s.fetch("m2", 0, max_wait_ms=10_000)
    assert offsets(r) == {0, 1, 2, 3}


def test_session_limit_reached(tmp_path):
    cfg = {"group.share.max.share.sessions": "3"}
    with BrokerProcess(tmp_path / "d", config=cfg) as b:
        s = Setup(b.bootstrap, records=1)
        try:
            for m in ("a", "b", "c"):
                assert s.fetch(m, 0).error_code == 0
            assert s.fetch("d", 0).error_code == Errors.SHARE_SESSION_LIMIT_REACHED
            assert s.fetch("a", -1).error_code == 0
            assert s.fetch("d", 0).error_code == 0
        finally:
            s.close()


def test_idle_session_is_evicted_and_its_records_released(tmp_path):
    cfg = {"sharebroker.share.session.idle.timeout.ms": "1500"}
    with BrokerProcess(tmp_path / "d", config=cfg) as b:
        s = Setup(b.bootstrap, records=4, **{"share.record.lock.duration.ms": "60000"})
        try:
            assert offsets(s.fetch("idle", 0)) == {0, 1, 2, 3}
            # "idle" says nothing more; its session is evicted and its records released
            # long before the 60 s lock would run out.
            start = time.monotonic()
            r = s.fetch("busy", 0, max_wait_ms=20_000)
            assert offsets(r) == {0, 1, 2, 3}
            assert time.monotonic() - start < 15
            assert s.fetch("idle", 1).error_code == Errors.SHARE_SESSION_NOT_FOUND
        finally:
            s.close()
