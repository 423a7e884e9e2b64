"""Share groups with ``share.isolation.level=read_committed`` (issue 11): librdkafka's ShareConsumer gets
every record of committed transactions and none of aborted or still-open ones, before and after a
broker restart; transaction markers are never delivered; KIP-1226 lag ends at 0 once all is handled."""
from __future__ import annotations

from confluent_kafka import Producer, ShareConsumer

from protocol.messages.describe_share_group_offsets import DescribeShareGroupOffsetsRequest as DescReq
from tests.integration.test_transactions import list_offset, txn_producer
from tests.support import create_topic, set_group_configs, unique, until
from tests.wire import WireClient


def share_lag(bs: str, group: str, topic: str) -> int:
    with WireClient(bs) as w:
        r = w.request(DescReq(groups=[DescReq.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=[
            DescReq.DescribeShareGroupOffsetsRequestTopic(topic_name=topic, partitions=[0])])]), 1)
    return r.groups[0].topics[0].partitions[0].lag


def drain(c: ShareConsumer, want: int, seen: list[bytes], timeout: float = 30) -> None:
    def got():
        for m in c.poll(0.3) or []:
            if m.error() is None:
                seen.append(m.value())
        return len(seen) >= want
    until(got, timeout, f"{want} records")
    for m in c.poll(1.0) or []:  # nothing more arrives
        if m.error() is None:
            seen.append(m.value())
    c.commit_sync()


def transactions(bs: str, topic: str, tag: str, p: Producer | None = None) -> Producer:
    """Commit 10 ``<tag>-c`` records, abort 5 ``<tag>-a``, commit 5 ``<tag>-d`` (one partition)."""
    p = p or txn_producer(bs, unique("tx"))
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, b"%s-c%d" % (tag.encode(), i), partition=0)
    p.commit_transaction(15)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, b"%s-a%d" % (tag.encode(), i), partition=0)
    p.flush(10)
    p.abort_transaction(15)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, b"%s-d%d" % (tag.encode(), i), partition=0)
    p.commit_transaction(15)
    return p


def committed_of(tag: str) -> set[bytes]:
    return {b"%s-c%d" % (tag.encode(), i) for i in range(10)} | {b"%s-d%d" % (tag.encode(), i) for i in range(5)}


def test_read_committed_share_group_across_restart(sharebroker):
    bs = sharebroker.bootstrap
    topic = create_topic(bs)
    group = unique("g")
    set_group_configs(bs, group, share_auto_offset_reset="earliest", share_isolation_level="read_committed")
    p = transactions(bs, topic, "one")
    opener = txn_producer(bs, unique("open"))
    opener.begin_transaction()
    opener.produce(topic, b"open-0", partition=0)
    opener.flush(10)
    c = ShareConsumer({"bootstrap.servers": bs, "group.id": group})
    c.subscribe([topic])
    seen: list[bytes] = []
    try:
        drain(c, 15, seen)
        assert set(seen) == committed_of("one") and len(seen) == 15  # no aborted, open or marker records
        opener.commit_transaction(15)  # the open transaction ends: its record becomes visible
        drain(c, 16, seen)
        assert seen[-1] == b"open-0" and len(seen) == 16
    finally:
        c.close()
    # 10 + 5 aborted + 5 + 1 data records and 4 markers: every offset handled, nothing left behind
    until(lambda: share_lag(bs, group, topic) == 0, 15, "share lag 0")

    sharebroker.stop()
    sharebroker.start()
    transactions(bs, topic, "two", txn_producer(bs, unique("tx")))
    c = ShareConsumer({"bootstrap.servers": bs, "group.id": group})
    c.subscribe([topic])
    seen2: list[bytes] = []
    try:
        drain(c, 15, seen2)
    finally:
        c.close()
    assert set(seen2) == committed_of("two") and len(seen2) == 15
    until(lambda: share_lag(bs, group, topic) == 0, 15, "share lag 0 after the restart")
    assert list_offset(bs, topic, 1) == list_offset(bs, topic, 0)


def test_read_uncommitted_share_group_gets_aborted_records_but_no_markers(sharebroker):
    bs = sharebroker.bootstrap
    topic = create_topic(bs)
    group = unique("g")
    set_group_configs(bs, group, share_auto_offset_reset="earliest")
    transactions(bs, topic, "u")
    c = ShareConsumer({"bootstrap.servers": bs, "group.id": group})
    c.subscribe([topic])
    seen: list[bytes] = []
    try:
        drain(c, 20, seen)
    finally:
        c.close()
    assert len(seen) == 20 and committed_of("u") <= set(seen)
    until(lambda: share_lag(bs, group, topic) == 0, 15, "share lag 0")
