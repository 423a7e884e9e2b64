"""The share-partition start offset (SPSO) follows the log start offset: records removed by
DeleteRecords or by retention are never delivered to a share group, end to end.

Kafka (KIP-932; ``SharePartition`` / ``ShareFetchUtils``): when a share partition's fetch offset
falls below the log start offset (OFFSET_OUT_OF_RANGE), the share partition moves its start and
end offsets up to the log start offset and fetches from there. Acknowledgements are persisted with ``WriteShareGroupState``
carrying the share partition's start offset as it was when the acknowledgement arrived
(``SharePartition.writeShareGroupState`` uses ``startOffset``; the cached state and offsets move
up only once the write completed: ``maybeUpdateCachedStateAndOffsets``), and
``ReadShareGroupStateSummary`` (API 87) reports that persisted start offset. So after the log
start offset moved past the SPSO, the next acknowledgement persists a start offset at or above
the new log start offset.
"""
from __future__ import annotations

import time
import uuid

from confluent_kafka import Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, OffsetSpec

from broker.share.acks import ACK_ACCEPT as ACCEPT
from broker.share.partition import RECORD_LIMIT  # ShareAcquireMode (ShareFetch v2): at most MaxRecords records
from protocol.messages.produce import ProduceRequest as P
from protocol.messages.read_share_group_state_summary import ReadShareGroupStateSummaryRequest as Summary
from protocol.messages.share_acknowledge import ShareAcknowledgeRequest as Ack
from protocol.messages.share_fetch import ShareFetchRequest as SF
from protocol.records import build_batch
from tests.support import create_topic, set_group_configs, share_member_assigned, topic_id, unique, until
from tests.wire import WireClient


def spso(bs: str, group: str, tid: bytes, partition: int = 0) -> int:
    """The persisted share-partition start offset (ReadShareGroupStateSummary v1)."""
    with WireClient(bs) as w:
        r = w.request(Summary(group_id=group, topics=[Summary.ReadStateSummaryData(topic_id=tid, partitions=[
            Summary.PartitionData(partition=partition, leader_epoch=0)])]), 1)
    p = r.results[0].partitions[0]
    assert p.error_code == 0, p
    return p.start_offset


def log_start(admin: AdminClient, topic: str) -> int:
    tp = TopicPartition(topic, 0)
    return admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(10).offset


def share_consume(bs: str, group: str, topic: str, until_offset: int, timeout: float = 30.0) -> list[int]:
    """Offsets a fresh ShareConsumer receives until it has seen ``until_offset``; accepts them
    (commit_sync) and closes."""
    c = ShareConsumer({"bootstrap.servers": bs, "group.id": group})
    c.subscribe([topic])
    got: list[int] = []
    try:
        def more():
            for m in c.poll(0.2) or []:
                assert m.error() is None, m.error()
                got.append(m.offset())
            return got and max(got) >= until_offset

        until(more, timeout, f"the share consumer to reach offset {until_offset}")
        c.commit_sync()
    finally:
        c.close()
    return got


def test_delete_records_moves_the_spso_and_deleted_records_are_never_delivered(sharebroker):
    bs = sharebroker.bootstrap
    topic = create_topic(bs, 1, prefix="spso-dr")
    tid = topic_id(bs, topic)
    group = unique("g")
    set_group_configs(bs, group, share_auto_offset_reset="earliest")
    p = Producer({"bootstrap.servers": bs, "linger.ms": 0})
    for i in range(10):
        p.produce(topic, value=b"a%d" % i, partition=0)
    assert p.flush(15) == 0

    assert sorted(share_consume(bs, group, topic, 9)) == list(range(10))
    persisted = spso(bs, group, tid)
    assert 0 <= persisted < 10, "acknowledgements of 0..9 persist the start offset they found"

    for i in range(20):
        p.produce(topic, value=b"b%d" % i, partition=0)  # offsets 10..29, none delivered yet
    assert p.flush(15) == 0
    admin = AdminClient({"bootstrap.servers": bs})
    tp = TopicPartition(topic, 0, 20)
    assert admin.delete_records([tp])[tp].result(15).low_watermark == 20
    assert spso(bs, group, tid) == persisted, "DeleteRecords alone writes no share state"

    got = share_consume(bs, group, topic, 29)
    assert sorted(got) == list(range(20, 30)), "offsets 10..19 were deleted before any delivery"
    until(lambda: spso(bs, group, tid) >= 20, 15, "the persisted SPSO to follow the log start offset (20)")


class Member:
    """One share-group member speaking ShareFetch / ShareAcknowledge v2 over our codec."""

    def __init__(self, bs: str, group: str, topic: str, tid: bytes):
        self.w = WireClient(bs)
        self.group, self.tid = group, tid
        self.member = uuid.uuid4().hex[:22]
        self.epoch = 0
        share_member_assigned(self.w, group, self.member, topic, tid)

    def fetch(self, max_records: int) -> list[int]:
        """Acquired offsets (ShareAcquireMode record_limit: at most ``max_records``)."""
        r = self.w.request(SF(group_id=self.group, member_id=self.member, share_session_epoch=self.epoch,
                              max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, max_records=max_records,
                              batch_size=max_records, share_acquire_mode=RECORD_LIMIT,
                              topics=[SF.FetchTopic(topic_id=self.tid, partitions=[
                                  SF.FetchPartition(partition_index=0)])]), 2)
        assert r.error_code == 0, r
        self.epoch += 1
        out = []
        for t in r.responses:
            for part in t.partitions:
                assert part.error_code == 0, part
                for a in part.acquired_records:
                    out += range(a.first_offset, a.last_offset + 1)
        return out

    def accept(self, first: int, last: int) -> None:
        r = self.w.request(Ack(group_id=self.group, member_id=self.member, share_session_epoch=self.epoch,
                               topics=[Ack.AcknowledgeTopic(topic_id=self.tid, partitions=[Ack.AcknowledgePartition(
                                   partition_index=0, acknowledgement_batches=[Ack.AcknowledgementBatch(
                                       first_offset=first, last_offset=last, acknowledge_types=[ACCEPT])])])]), 2)
        assert r.error_code == 0, r
        self.epoch += 1
        assert [p.error_code for t in r.responses for p in t.partitions] == [0], r

    def close(self) -> None:
        self.w.close()


def test_retention_moves_the_spso_past_records_it_deleted(broker_factory):
    b = broker_factory({"log.retention.check.interval.ms": 200})
    bs = b.bootstrap
    # segment.ms 60 s: a batch 2 h newer than the segment's first rolls a new segment (Kafka's
    # time roll compares record timestamps); retention stays at the default until we lower it
    topic = create_topic(bs, 1, prefix="spso-ret", segment_ms=60_000)
    tid = topic_id(bs, topic)
    group = unique("g")
    set_group_configs(bs, group, share_auto_offset_reset="earliest")
    two_hours_ago = int(time.time() * 1000) - 2 * 3600 * 1000
    with WireClient(bs) as w:
        def produce(values, ts):
            r = w.request(P(acks=-1, timeout_ms=10_000, topic_data=[P.TopicProduceData(name=topic, partition_data=[
                P.PartitionProduceData(index=0, records=build_batch([(None, v, []) for v in values],
                                                                    timestamp=ts))])]), 9)
            assert r.responses[0].partition_responses[0].error_code == 0

        produce([b"old%d" % i for i in range(10)], two_hours_ago)  # offsets 0..9, one old segment
        m = Member(bs, group, topic, tid)
        try:
            assert until(lambda: m.fetch(5), 15, "the first five records") == [0, 1, 2, 3, 4]
            m.accept(0, 4)  # the SPSO is 5 now; 5..9 are available, not delivered
            assert spso(bs, group, tid) < 5, "the write of that acknowledgement carried the SPSO before it"

            produce([b"new%d" % i for i in range(10)], None)  # offsets 10..19, a new segment
            admin = AdminClient({"bootstrap.servers": bs})
            res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
                ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
            admin.incremental_alter_configs([res])[res].result(15)
            until(lambda: log_start(admin, topic) == 10, 15, "retention to delete the old segment")

            # 5..9 are gone: what is delivered next starts at the new log start offset
            got = until(lambda: m.fetch(500), 15, "records after the retention")
            assert got == list(range(10, 20)), got
            m.accept(10, 19)
            assert spso(bs, group, tid) == 10, "the SPSO had moved to the log start offset (10)"
        finally:
            m.close()
