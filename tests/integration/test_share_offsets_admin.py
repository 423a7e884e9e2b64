"""Share-group offset admin (APIs 90-92) and KIP-1226 lag against a real broker (issue 13, points 1-2).

- DescribeShareGroupOffsets v1 lag equals a brute-force count from the test's own ledger
  (records not yet in a terminal state) at many checkpoints of a run where librdkafka's
  ShareConsumer (explicit mode) accepts, releases and rejects, next to a silent member (our
  codec) whose acquisition locks expire; before and after a SIGTERM restart and a kill -9.
- AlterShareGroupOffsets: consumption then starts exactly at the new offset; NON_EMPTY_GROUP
  while a member is live.  DeleteShareGroupOffsets: ``share.auto.offset.reset`` applies again.
- Every error code Kafka documents for the three APIs, over the socket; ApiVersions advertises them.
"""
from __future__ import annotations

import time

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer

from broker.testing import BrokerProcess
from protocol.errors import Errors
from protocol.messages.alter_share_group_offsets import AlterShareGroupOffsetsRequest as AlterReq
from protocol.messages.api_versions import ApiVersionsRequest
from protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest as CgHbReq
from protocol.messages.delete_share_group_offsets import DeleteShareGroupOffsetsRequest as DeleteReq
from protocol.messages.describe_share_group_offsets import DescribeShareGroupOffsetsRequest as DescReq
from protocol.messages.share_fetch import ShareFetchRequest as FetchReq
from protocol.messages.share_group_describe import ShareGroupDescribeRequest
from protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest as HbReq
from tests.support import create_topic, set_group_configs, unique, until
from tests.wire import WireClient

CONFIG = {
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.min.heartbeat.interval.ms": "200",
    "group.share.heartbeat.interval.ms": "300",
    "group.share.min.session.timeout.ms": "1000",
    "group.share.session.timeout.ms": "4000",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("share-offsets"), config=CONFIG) as b:
        yield b


def topic_id(bs: str, topic: str) -> bytes:
    from protocol.messages.metadata import MetadataRequest
    with WireClient(bs) as w:
        return w.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 12).topics[0].topic_id


def produce(bs: str, topic: str, n: int, partitions: int = 1) -> None:
    p = Producer({"bootstrap.servers": bs, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, value=b"v%d" % i, partition=i % partitions)
    assert p.flush(30) == 0


def describe(bs: str, group: str, version: int = 1, topics: dict | None = None):
    rg = DescReq.DescribeShareGroupOffsetsRequestGroup(group_id=group)
    rg.topics = None if topics is None else [
        DescReq.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=list(ps)) for t, ps in topics.items()]
    with WireClient(bs) as w:
        return w.request(DescReq(groups=[rg]), version).groups[0]


def lags(bs: str, group: str) -> dict[tuple[str, int], tuple[int, int]]:
    g = describe(bs, group)
    assert g.error_code == 0, g
    return {(t.topic_name, p.partition_index): (p.start_offset, p.lag) for t in g.topics for p in t.partitions}


def alter(bs: str, group: str, topic: str, offsets: dict[int, int]):
    req = AlterReq(group_id=group, topics=[AlterReq.AlterShareGroupOffsetsRequestTopic(topic_name=topic, partitions=[
        AlterReq.AlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=o) for p, o in offsets.items()])])
    with WireClient(bs) as w:
        return w.request(req, 0)


def delete(bs: str, group: str, *topics: str):
    req = DeleteReq(group_id=group, topics=[DeleteReq.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics])
    with WireClient(bs) as w:
        return w.request(req, 0)


def group_state(bs: str, group: str) -> str:
    with WireClient(bs) as w:
        return w.request(ShareGroupDescribeRequest(group_ids=[group]), 1).groups[0].group_state


def consumer(bs: str, group: str, topic: str, mode: str = "implicit") -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": bs, "group.id": group, "share.acknowledgement.mode": mode})
    c.subscribe([topic])
    return c


def take(c: ShareConsumer, n: int, timeout: float = 30.0) -> list:
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        for m in c.poll(0.2) or []:
            assert m.error() is None, m.error()
            out.append(m)
    assert len(out) >= n, f"got {len(out)} of {n} records"
    return out


# ------------------------------------------------------------------ KIP-1226 lag against a ledger
class Silent:
    """A share-group member on our codec that acquires records and then says nothing: its
    acquisition locks expire and the records become available again."""

    def __init__(self, bs: str, group: str, topic: str, tid: bytes):
        self.w = WireClient(bs)
        self.group, self.tid = group, tid
        self.epoch = 0
        r = self.w.request(HbReq(group_id=group, member_id="silent", member_epoch=0, subscribed_topic_names=[topic]), 1)
        assert r.error_code == 0, r

    def acquire(self, n: int) -> set[int]:
        """Acquire up to ``n`` records (ShareFetch v2, record_limit mode); their offsets."""
        def fetch():
            req = FetchReq(group_id=self.group, member_id="silent", share_session_epoch=self.epoch, max_wait_ms=200,
                           min_bytes=1, max_bytes=1 << 20, max_records=n, batch_size=n, share_acquire_mode=1,
                           topics=[FetchReq.FetchTopic(topic_id=self.tid, partitions=[
                               FetchReq.FetchPartition(partition_index=0)])])
            r = self.w.request(req, 2)
            assert r.error_code == 0, r
            self.epoch += 1
            return {o for t in r.responses for p in t.partitions for a in p.acquired_records
                    for o in range(a.first_offset, a.last_offset + 1)}

        return until(fetch, 20, "the silent member to acquire records")

    def close(self) -> None:
        self.w.close()


class LagRun:
    """One group consuming a 1-partition topic, and what the test knows of it: the records produced,
    those in a terminal state (ACCEPT / REJECT acknowledged and committed; a RELEASE or an expired
    lock leaves a record to be delivered again), the records released once, and every lag checkpoint
    taken (produced, terminal, (SPSO, lag) described) for the failure message."""

    def __init__(self, bs: str, group: str, topic: str):
        self.bs, self.group, self.topic = bs, group, topic
        self.produced = 0
        self.terminal: set[int] = set()
        self.released: set[int] = set()
        self.checkpoints: list = []

    def lag(self) -> int:
        return self.produced - len(self.terminal)

    def produce(self, n: int) -> None:
        produce(self.bs, self.topic, n)
        self.produced += n

    def check(self) -> None:
        """DescribeShareGroupOffsets v1's lag is the ledger's."""
        got = lags(self.bs, self.group)[(self.topic, 0)]
        self.checkpoints.append((self.produced, len(self.terminal), got))
        assert got[1] == self.lag(), \
            f"lag {got[1]} (SPSO {got[0]}), ledger says {self.lag()}; history {self.checkpoints}"

    def consume_round(self, c: ShareConsumer) -> int:
        """One poll of the explicit-mode consumer: ACCEPT most records, REJECT every 5th, RELEASE
        every 7th on its first delivery (later deliveries are accepted); then commit_sync. Returns
        how many records were handled."""
        msgs = c.poll(1.0) or []
        done = []
        for m in msgs:
            assert m.error() is None, m.error()
            off = m.offset()
            if off % 7 == 3 and off not in self.released:
                c.acknowledge(m, AcknowledgeType.RELEASE)
                self.released.add(off)
            elif off % 5 == 1:
                c.acknowledge(m, AcknowledgeType.REJECT)
                done.append(off)
            else:
                c.acknowledge(m, AcknowledgeType.ACCEPT)
                done.append(off)
        if msgs:
            c.commit_sync()
            self.terminal.update(done)
        return len(msgs)

    def consume(self, c: ShareConsumer, timeout: float = 20.0) -> None:
        """Rounds until every produced record is in a terminal state (the silent member's records
        come back once their 1 s locks expired); a checkpoint after each round that handled records."""
        deadline = time.monotonic() + timeout
        while self.lag() and time.monotonic() < deadline:
            if self.consume_round(c):
                self.check()
        assert self.lag() == 0, (self.lag(), self.checkpoints)


def test_lag_matches_the_ledger_through_restarts(tmp_path):
    """KIP-1226: the lag DescribeShareGroupOffsets v1 reports (log end - SPSO - DeliveryCompleteCount)
    equals the records the test itself knows are not yet in a terminal state, at every checkpoint of
    a run where librdkafka's ShareConsumer accepts, releases and rejects next to a silent member
    (our codec) whose acquisition locks expire; and again after a SIGTERM restart and after a kill -9,
    where only what the share coordinator persisted is left to answer from."""
    with BrokerProcess(tmp_path / "d", config=CONFIG) as b:
        run = LagRun(b.bootstrap, unique("lag"), create_topic(b.bootstrap, 1))
        set_group_configs(run.bs, run.group, share_auto_offset_reset="earliest", share_record_lock_duration_ms=1000)
        silent = Silent(run.bs, run.group, run.topic, topic_id(run.bs, run.topic))
        until(lambda: lags(run.bs, run.group).get((run.topic, 0)), 20, "the share partition to be initialized")
        c = consumer(run.bs, run.group, run.topic, "explicit")
        held_total: set[int] = set()
        try:
            for _phase in range(4):
                run.produce(12)
                held_total |= silent.acquire(4)  # locked for 1 s, never acknowledged
                run.check()
                run.consume(c)
            # the silent member's records came back and were handled by the consumer
            assert held_total <= run.terminal
            run.produce(10)  # left for after the restarts
            run.check()
            silent.acquire(3)
            run.check()
        finally:
            c.close()
            silent.close()

        b.restart()  # SIGTERM
        run.check()
        b.kill9()
        b.start()
        run.check()

        c = consumer(run.bs, run.group, run.topic, "explicit")
        try:
            run.consume(c, timeout=60)
        finally:
            c.close()
        run.check()
        assert len(run.checkpoints) >= 10, run.checkpoints


# ------------------------------------------------------------------ Alter / Delete end to end
def drained(bs: str, n: int) -> tuple[str, str]:
    """A 1-partition topic with ``n`` records, all consumed (implicit acks) by a group that then
    became empty."""
    topic = create_topic(bs, 1)
    group = unique("g")
    set_group_configs(bs, group, share_auto_offset_reset="earliest")
    produce(bs, topic, n)
    c = consumer(bs, group, topic)
    try:
        take(c, n)
        c.commit_sync()
    finally:
        c.close()
    until(lambda: group_state(bs, group) == "Empty", 20, "the group to become empty")
    until(lambda: lags(bs, group).get((topic, 0), (None, None))[1] == 0, 20, "no lag left")
    return topic, group


def test_alter_then_consumption_starts_at_the_new_offset(broker):
    bs = broker.bootstrap
    topic, group = drained(bs, 10)
    r = alter(bs, group, topic, {0: 4})
    assert r.error_code == 0 and r.responses[0].partitions[0].error_code == 0, r
    assert lags(bs, group)[(topic, 0)] == (4, 6)
    c = consumer(bs, group, topic)
    try:
        got = take(c, 6)
        assert sorted(m.offset() for m in got) == [4, 5, 6, 7, 8, 9]
        # NON_EMPTY_GROUP while a member is live (Delete too)
        until(lambda: group_state(bs, group) == "Stable", 20, "the group to be Stable")
        assert alter(bs, group, topic, {0: 0}).error_code == Errors.NON_EMPTY_GROUP
        assert delete(bs, group, topic).error_code == Errors.NON_EMPTY_GROUP
    finally:
        c.close()


def test_delete_then_auto_offset_reset_applies_again(broker):
    bs = broker.bootstrap
    topic, group = drained(bs, 5)
    r = delete(bs, group, topic)
    assert r.error_code == 0 and [(t.topic_name, t.error_code) for t in r.responses] == [(topic, 0)]
    g = describe(bs, group)
    assert g.error_code == 0 and g.topics == []
    c = consumer(bs, group, topic)  # share.auto.offset.reset=earliest: from the log start again
    try:
        assert sorted(m.offset() for m in take(c, 5)) == [0, 1, 2, 3, 4]
    finally:
        c.close()


# ------------------------------------------------------------------ error codes
def test_error_codes(broker):
    bs = broker.bootstrap
    topic, group = drained(bs, 2)
    missing = unique("missing")
    other = create_topic(bs, 1)
    # a consumer (KIP-848) group: another type
    with WireClient(bs) as w:
        cg = unique("cg")
        r = w.request(CgHbReq(group_id=cg, member_id="", member_epoch=0, rebalance_timeout_ms=30000,
                              subscribed_topic_names=[topic], topic_partitions=[]), 0)
        assert r.error_code == 0, r
    # DescribeShareGroupOffsets
    assert describe(bs, unique("nobody")).error_code == Errors.GROUP_ID_NOT_FOUND
    assert describe(bs, cg).error_code == Errors.GROUP_ID_NOT_FOUND
    assert describe(bs, "").error_code == Errors.INVALID_GROUP_ID
    g = describe(bs, group, topics={missing: [0]})
    assert g.error_code == 0 and g.topics[0].topic_id == bytes(16) and g.topics[0].partitions[0].start_offset == -1
    g = describe(bs, group, version=0)  # no Lag on v0
    assert [(t.topic_name, p.partition_index, p.start_offset >= 0) for t in g.topics for p in t.partitions] == [
        (topic, 0, True)]
    # AlterShareGroupOffsets
    assert alter(bs, "", topic, {0: 0}).error_code == Errors.INVALID_GROUP_ID
    assert alter(bs, cg, topic, {0: 0}).error_code == Errors.GROUP_ID_NOT_FOUND
    r = alter(bs, group, missing, {0: 0})
    assert r.error_code == 0 and r.responses[0].partitions[0].error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    r = alter(bs, group, topic, {3: 0})
    assert r.error_code == 0 and r.responses[0].partitions[0].error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    # DeleteShareGroupOffsets
    assert delete(bs, "", topic).error_code == Errors.INVALID_GROUP_ID
    assert delete(bs, unique("nobody"), topic).error_code == Errors.GROUP_ID_NOT_FOUND
    assert delete(bs, cg, topic).error_code == Errors.GROUP_ID_NOT_FOUND
    r = delete(bs, group, missing, other)
    assert r.error_code == 0
    assert {t.topic_name: t.error_code for t in r.responses} == {
        missing: Errors.UNKNOWN_TOPIC_OR_PARTITION, other: Errors.UNKNOWN_TOPIC_OR_PARTITION}


def test_api_versions_advertises_the_offset_apis(broker):
    with WireClient(broker.bootstrap) as w:
        r = w.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
    ranges = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
    assert ranges[90] == (0, 1) and ranges[91] == (0, 0) and ranges[92] == (0, 0)
