"""Deleting a topic under live readers: long polls return, share partitions go quietly.

Kafka: a delayed Fetch whose partition disappears is completed at once (``DelayedFetch.tryComplete``:
"the partition is no longer available on this broker" -> ``forceComplete``), answering
UNKNOWN_TOPIC_OR_PARTITION (or UNKNOWN_TOPIC_ID by id); ``ReplicaManager`` completes the delayed
share fetches of a partition it stops leading (``delayedShareFetchPurgatory.checkAndComplete``
with the partition's key), and the share-partition is removed from the share-partition manager.
A ShareFetch naming a topic id the metadata no longer has gets UNKNOWN_TOPIC_ID for it
(``KafkaApis.handleShareFetchRequest``). The share-group coordinator drops the deleted topic
from the members' assignments. None of this may make the broker log a traceback (checked for
every test by conftest).
"""
from __future__ import annotations

import threading
import time
import uuid

from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import AdminClient

from protocol.errors import Errors
from protocol.messages.fetch import FetchRequest as F
from protocol.messages.share_fetch import ShareFetchRequest as SF
from protocol.messages.share_group_describe import ShareGroupDescribeRequest
from tests.support import create_topic, set_group_configs, share_member_assigned, topic_id, unique, until
from tests.wire import WireClient

MAX_WAIT_MS = 25_000  # far longer than a deletion takes; the WireClient socket timeout is 30 s
GONE = {Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.UNKNOWN_TOPIC_ID}


def delete_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([name])[name].result(15)


def delete_soon(bootstrap: str, name: str) -> threading.Thread:
    """Delete ``name`` from another thread (while this one waits on a long poll)."""
    errors = []

    def run():
        try:
            delete_topic(bootstrap, name)
        except Exception as e:  # reported by the caller
            errors.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.errors = errors
    t.start()
    return t


def test_fetch_long_poll_returns_when_its_topic_is_deleted(sharebroker):
    bs = sharebroker.bootstrap
    name = create_topic(bs, 1, prefix="del")
    tid = topic_id(bs, name)
    with WireClient(bs) as w:
        for version, topic in ((16, {"topic_id": tid}), (12, {"topic": name})):
            if version == 12:  # second round: the name again, as a new topic, fetched by name
                create_topic_again(bs, name, 1)
            sent = time.monotonic()
            corr = w.send(F(max_wait_ms=MAX_WAIT_MS, min_bytes=1, max_bytes=1 << 20, session_id=0, session_epoch=-1,
                            topics=[F.FetchTopic(**topic, partitions=[
                                F.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])]),
                         version)
            deleter = delete_soon(bs, name)
            got, r = w.receive(F.API_KEY, version)
            took = time.monotonic() - sent
            deleter.join(15)
            assert not deleter.errors, deleter.errors
            assert got == corr and r.error_code == 0
            part = r.responses[0].partitions[0]
            assert took < MAX_WAIT_MS / 2000, f"v{version}: the long poll ran {took:.1f}s, to its MaxWaitMs"
            assert part.error_code in GONE, f"v{version}: {part}"
            assert not part.records


class ShareMember:
    """A share-group member on its own connection, assigned partition 0 of a fresh topic."""

    def __init__(self, bs: str):
        self.bs = bs
        self.name = create_topic(bs, 1, prefix="sdel")
        self.tid = topic_id(bs, self.name)
        self.group = unique("g")
        set_group_configs(bs, self.group, share_auto_offset_reset="earliest")
        self.member = uuid.uuid4().hex[:22]
        self.w = WireClient(bs)
        share_member_assigned(self.w, self.group, self.member, self.name, self.tid)

    def send_fetch(self, epoch: int, max_wait_ms: int) -> int:
        return self.w.send(SF(group_id=self.group, member_id=self.member, share_session_epoch=epoch,
                              max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, max_records=500,
                              batch_size=500, topics=[SF.FetchTopic(topic_id=self.tid, partitions=[
                                  SF.FetchPartition(partition_index=0)])]), 1)

    def receive(self, corr: int):
        got, r = self.w.receive(SF.API_KEY, 1)
        assert got == corr and r.error_code == 0, r
        return [p for t in r.responses for p in t.partitions]


SHARE_MAX_WAIT_MS = 10_000


def test_share_fetch_long_poll_returns_when_its_topic_is_deleted(sharebroker):
    m = ShareMember(sharebroker.bootstrap)
    try:
        sent = time.monotonic()
        corr = m.send_fetch(0, SHARE_MAX_WAIT_MS)  # the topic is empty: a long poll
        deleter = delete_soon(m.bs, m.name)
        parts = m.receive(corr)
        took = time.monotonic() - sent
        deleter.join(15)
        assert not deleter.errors, deleter.errors
        assert all(not p.acquired_records for p in parts), parts
        assert took < SHARE_MAX_WAIT_MS / 2000, f"the share long poll ran {took:.1f}s, to its MaxWaitMs"
    finally:
        m.w.close()


def test_share_fetch_after_its_topic_is_deleted_gets_unknown_topic(sharebroker):
    m = ShareMember(sharebroker.bootstrap)
    try:
        parts = m.receive(m.send_fetch(0, 0))  # opens the share session on the topic
        assert [p.error_code for p in parts] == [0]
        delete_topic(m.bs, m.name)
        # the next fetch on the session names a topic id the broker no longer has
        parts = m.receive(m.send_fetch(1, 0))
        assert parts and all(p.error_code in GONE and not p.acquired_records for p in parts), parts
    finally:
        m.w.close()


def describe_share_group(bs: str, group: str):
    with WireClient(bs) as w:
        r = w.request(ShareGroupDescribeRequest(group_ids=[group]), 1)
    assert r.groups[0].error_code == 0, r.groups[0]
    return r.groups[0]


def test_share_consumers_survive_their_topic_being_deleted_and_recreated(sharebroker):
    bs = sharebroker.bootstrap
    name = create_topic(bs, 2, prefix="scdel")
    old_id = topic_id(bs, name)
    group = unique("g")
    set_group_configs(bs, group, share_auto_offset_reset="earliest")
    p = Producer({"bootstrap.servers": bs, "linger.ms": 0})
    for i in range(20):
        p.produce(name, value=b"old-%d" % i, partition=i % 2)
    assert p.flush(15) == 0

    consumers = []
    for _ in range(2):
        c = ShareConsumer({"bootstrap.servers": bs, "group.id": group})
        c.subscribe([name])
        consumers.append(c)
    seen: list[bytes] = []

    def poll_all() -> None:
        for c in consumers:
            for m in c.poll(0.2) or []:
                if m.error() is None:
                    seen.append(m.value())
            c.commit_sync()

    try:
        until(lambda: poll_all() or len(seen) >= 20, 30, "the old records")
        assert sorted(seen) == sorted(b"old-%d" % i for i in range(20))

        delete_topic(bs, name)

        def unassigned():
            poll_all()  # the consumers keep polling (and fetching) while the topic goes
            members = describe_share_group(bs, group).members
            return members and all(not any(tp.topic_id == old_id for tp in m.assignment.topic_partitions)
                                   for m in members)

        until(unassigned, 30, "the deleted topic to leave the members' assignments")

        # the same name again: a new topic, which the still-subscribed consumers read from its start
        create_topic_again(bs, name, 2)
        new_id = topic_id(bs, name)
        assert new_id != old_id
        for i in range(10):
            p.produce(name, value=b"new-%d" % i, partition=i % 2)
        assert p.flush(15) == 0
        seen.clear()
        until(lambda: poll_all() or len(seen) >= 10, 45, "the new topic's records")
        assert sorted(seen) == sorted(b"new-%d" % i for i in range(10)), "no old record comes back"
    finally:
        for c in consumers:
            c.close()


def create_topic_again(bootstrap: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    until(lambda: name not in admin.list_topics(timeout=10).topics, 10, "the topic to be gone")
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)
