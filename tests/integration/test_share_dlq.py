"""Share-group dead-letter queue (KIP-1191) with librdkafka's ShareConsumer against the real broker."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource
from prometheus_client.parser import text_string_to_metric_families

from broker.testing import BrokerProcess
from protocol.compression import LZ4, ZSTD
from tests.support import create_topic, set_group_configs, stored_batches, unique, until

DELIVERY_LIMIT = 3
REJECT_TEXT = "Offset rejected by client."
LIMIT_TEXT = "Offset delivery count exceeded the threshold."
CODEC_IDS = {"zstd": ZSTD, "lz4": LZ4}


def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]], partition: int = 0) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for key, value in records:
        p.produce(topic, key=key, value=value, partition=partition, headers=[("origin", b"h-" + value)])
    assert p.flush(30) == 0


def share_consumer(bootstrap: str, group: str, topic: str) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    return c


def poll_acking(c: ShareConsumer, ack, done, timeout: float, what: str) -> list:
    """Poll, acknowledge each record with ``ack(m)`` and commit, until ``done(all seen)``."""
    seen: list = []

    def step():
        got = [m for m in c.poll(0.5) or [] if m.error() is None]
        for m in got:
            seen.append((m.offset(), m.delivery_count(), m.key()))
            c.acknowledge(m, ack(m))
        if got:
            c.commit_sync(30)
        return done(seen)

    until(step, timeout, what)
    return seen


def read_all(bootstrap: str, topic: str, partition: int, count: int, timeout: float = 30.0) -> list:
    """``count`` records of one partition from the beginning (plain consumer, assign)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"), "enable.auto.commit": False})
    c.assign([TopicPartition(topic, partition, 0)])
    out: list = []
    try:
        def step():
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                out.append(m)
            return len(out) >= count
        until(step, timeout, f"{count} records in {topic}-{partition}")
        assert c.poll(1.0) is None, "more dead-letter records than expected"
    finally:
        c.close()
    return out


def dlq_topic(bootstrap: str, partitions: int = 1) -> str:
    return create_topic(bootstrap, partitions, prefix="dlq.t", errors_deadletterqueue_group_enable="true")


def headers(m) -> dict:
    return {k: v for k, v in m.headers() or []}


@pytest.mark.parametrize("copy_record", [False, True])
@pytest.mark.sharebroker({})
def test_poison_records_reach_the_dlq_after_the_delivery_limit(sharebroker, copy_record):
    bs = sharebroker.bootstrap
    topic = create_topic(bs, 2)
    dlq = dlq_topic(bs, 1)  # source partition 1 % 1 partition -> DLQ partition 0
    group = unique("g")
    set_group_configs(bs, group, share_auto_offset_reset="earliest", share_delivery_count_limit=DELIVERY_LIMIT,
                      errors_deadletterqueue_topic_name=dlq,
                      errors_deadletterqueue_copy_record_enable=str(copy_record).lower())
    keys = [b"poison" if i % 4 == 1 else b"bad" if i == 6 else b"ok-%d" % i for i in range(12)]
    produce(bs, topic, [(k, b"v%d" % i) for i, k in enumerate(keys)], partition=1)
    poison = {i for i, k in enumerate(keys) if k == b"poison"}
    ok = {i for i, k in enumerate(keys) if k.startswith(b"ok")}

    def ack(m):
        return {b"poison": AcknowledgeType.RELEASE, b"bad": AcknowledgeType.REJECT}.get(m.key(), AcknowledgeType.ACCEPT)

    before = int(time.time() * 1000)
    c = share_consumer(bs, group, topic)
    try:
        seen = poll_acking(c, ack, lambda s: {o for o, dc, _ in s if o in poison and dc == DELIVERY_LIMIT} == poison,
                           60, "the poison records' last deliveries")
        # Archived through the DLQ: not delivered again.
        extra = poll_acking(c, ack, lambda s: True, 5, "one more poll")
        assert not extra
    finally:
        c.close()
    deliveries = {o: [dc for off, dc, _ in seen if off == o] for o in range(len(keys))}
    for o in poison:
        assert deliveries[o] == [1, 2, 3], (o, deliveries[o])   # exactly share.delivery.count.limit deliveries
    for o in ok | {6}:
        assert deliveries[o] == [1], (o, deliveries[o])          # others consumed normally, once

    dead = read_all(bs, dlq, 0, len(poison) + 1)
    after = int(time.time() * 1000)
    by_offset = {int(headers(m)["__dlq.errors.offset"]): m for m in dead}
    assert set(by_offset) == poison | {6}
    for o, m in by_offset.items():
        h = headers(m)
        assert h["__dlq.errors.topic"] == topic.encode()
        assert h["__dlq.errors.partition"] == b"1"
        assert h["__dlq.errors.group"] == group.encode()
        if o == 6:
            assert h["__dlq.errors.delivery.count"] == b"1" and h["__dlq.errors.message"] == REJECT_TEXT.encode()
        else:
            assert h["__dlq.errors.delivery.count"] == b"3" and h["__dlq.errors.message"] == LIMIT_TEXT.encode()
        ts_type, ts = m.timestamp()
        assert ts_type == 1 and before <= ts <= after   # CreateTime = when the DLQ record was written
        if copy_record:
            assert (m.key(), m.value(), h["origin"]) == (keys[o], b"v%d" % o, b"h-v%d" % o)
        else:
            assert m.key() is None and m.value() is None and "origin" not in h


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
@pytest.mark.sharebroker({})
def test_copy_record_copies_compressed_source_batches(sharebroker, codec):
    """Source batches compressed by librdkafka (compression.type) are copied into the dead-letter
    records, with the optional extra sharebroker[compression] installed, as the test dependencies have it."""
    bs = sharebroker.bootstrap
    topic = create_topic(bs, 1)
    dlq = dlq_topic(bs, 1)
    group = unique("g")
    set_group_configs(bs, group, share_auto_offset_reset="earliest", errors_deadletterqueue_topic_name=dlq,
                      errors_deadletterqueue_copy_record_enable="true")
    values = [b"payload %d " % i * 40 for i in range(6)]  # compressible: librdkafka keeps the batch compressed
    p = Producer({"bootstrap.servers": bs, "linger.ms": 50, "compression.type": codec})
    for i, v in enumerate(values):
        p.produce(topic, key=b"k%d" % i, value=v, partition=0, headers=[("origin", b"h%d" % i)])
    assert p.flush(30) == 0
    assert {b.compression for b in stored_batches(bs, topic)} == {CODEC_IDS[codec]}
    c = share_consumer(bs, group, topic)
    try:
        poll_acking(c, lambda m: AcknowledgeType.REJECT, lambda s: len(s) >= len(values), 30, "every record")
    finally:
        c.close()
    dead = read_all(bs, dlq, 0, len(values))
    assert sorted((m.key(), m.value(), headers(m)["origin"], headers(m)["__dlq.errors.offset"]) for m in dead) == \
        [(b"k%d" % i, v, b"h%d" % i, str(i).encode()) for i, v in enumerate(values)]


def test_kill9_between_archiving_and_archived_loses_no_dlq_record(tmp_path):
    # The test-only setting holds every DLQ append after ARCHIVING is persisted, so the broker is
    # killed between the two phases; restarted without it, the records are written to the DLQ.
    b = BrokerProcess(tmp_path / "data", config={"sharebroker.share.dlq.test.append.delay.ms": "600000"})
    b.start()
    try:
        bs = b.bootstrap
        topic = create_topic(bs, 1)
        dlq = dlq_topic(bs, 3)  # source partition 0 % 3 -> DLQ partition 0
        group = unique("g")
        set_group_configs(bs, group, share_auto_offset_reset="earliest", errors_deadletterqueue_topic_name=dlq)
        produce(bs, topic, [(b"k%d" % i, b"v%d" % i) for i in range(5)])
        c = share_consumer(bs, group, topic)
        try:
            poll_acking(c, lambda m: AcknowledgeType.REJECT if m.offset() < 3 else AcknowledgeType.ACCEPT,
                        lambda s: len(s) >= 5, 30, "five records")
            until(lambda: any("DLQ append of" in line and "held" in line for line in b.log_lines), 30,
                  "the held DLQ append (ARCHIVING persisted)")
        finally:
            c.close()
        assert AdminClient({"bootstrap.servers": bs}).list_topics(timeout=10).topics[dlq].partitions
        assert not read_all(bs, dlq, 0, 0), "the held append reached the DLQ topic"
        b.kill9()
        b.config.pop("sharebroker.share.dlq.test.append.delay.ms")
        first_line = len(b.log_lines)
        b.start()
        # The share partition is led again on the next fetch: the ARCHIVING records are not delivered,
        # their dead-letter records are written, and the SPSO moves past them.
        c = share_consumer(bs, group, topic)
        delivered = []
        try:
            def found():
                delivered.extend(m for m in c.poll(0.2) or [] if m.error() is None)
                return any("3 record(s) found ARCHIVING" in line for line in b.log_lines[first_line:])
            until(found, 30, "ARCHIVING records found after the restart")
            delivered.extend(m for m in c.poll(1.0) or [] if m.error() is None)
            assert not delivered, "records in ARCHIVING (or accepted) were delivered again"
        finally:
            c.close()
        dead = read_all(bs, dlq, 0, 3)
        assert sorted(int(headers(m)["__dlq.errors.offset"]) for m in dead) == [0, 1, 2]
        assert all(headers(m)["__dlq.errors.message"] == REJECT_TEXT.encode() for m in dead)
    finally:
        b.close()


@pytest.mark.sharebroker({"errors.deadletterqueue.auto.create.topics.enable": "true",
                          "sharebroker.share.dlq.retry.backoff.ms": "50",
                          "sharebroker.share.dlq.retry.backoff.max.ms": "100"})
def test_dlq_topic_validation_as_kafka(sharebroker):
    bs = sharebroker.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    not_enabled = create_topic(bs, 1, prefix="dlq.off")
    # A name starting with "__" is refused as a group config already (test_share_membership.py); the writer's
    # own check of it is unit-tested (test_share_heartbeat.py).
    cases = {
        not_enabled: "DLQ is not enabled on configured DLQ topic",
        unique("other"): "does not comply with the DLQ topic prefix",
    }
    auto = unique("dlq.auto")
    for name, message in list(cases.items()) + [(auto, None)]:
        topic = create_topic(bs, 1)
        group = unique("g")
        set_group_configs(bs, group, share_auto_offset_reset="earliest", errors_deadletterqueue_topic_name=name)
        produce(bs, topic, [(b"k", b"v")])
        c = share_consumer(bs, group, topic)
        try:
            poll_acking(c, lambda m: AcknowledgeType.REJECT, lambda s: len(s) >= 1, 30, "one record")
            if message is not None:
                until(lambda: any(message in line and name in line and "archived without them" in line
                                  for line in sharebroker.log_lines), 30, f"refusal of {name}")
            # Rejected: never delivered again, whatever happened to its dead-letter record.
            assert not poll_acking(c, lambda m: AcknowledgeType.ACCEPT, lambda s: True, 3, "nothing more")
        finally:
            c.close()
    topics = admin.list_topics(timeout=10).topics
    assert not [n for n in cases if n not in (not_enabled,) and n in topics], "a refused DLQ topic was created"
    assert auto in topics
    res = ConfigResource(ConfigResource.Type.TOPIC, auto)
    entries = admin.describe_configs([res])[res].result(15)
    assert entries["errors.deadletterqueue.group.enable"].value == "true"
    assert entries["message.timestamp.type"].value == "CreateTime"
    (m,) = read_all(bs, auto, 0, 1)
    assert headers(m)["__dlq.errors.message"] == REJECT_TEXT.encode()


@pytest.mark.sharebroker({"sharebroker.metrics.listener": "127.0.0.1:0"})
def test_archived_records_metric(sharebroker):
    import urllib.request

    bs = sharebroker.bootstrap
    topic = create_topic(bs, 1)
    dlq = dlq_topic(bs)
    group = unique("g")
    set_group_configs(bs, group, share_auto_offset_reset="earliest", errors_deadletterqueue_topic_name=dlq,
                      share_delivery_count_limit=2)
    produce(bs, topic, [(b"k%d" % i, b"v%d" % i) for i in range(6)])
    c = share_consumer(bs, group, topic)
    # offsets 0, 1 rejected; 2 released until the limit (2 deliveries); the rest accepted
    policy = {0: AcknowledgeType.REJECT, 1: AcknowledgeType.REJECT, 2: AcknowledgeType.RELEASE}
    try:
        poll_acking(c, lambda m: policy.get(m.offset(), AcknowledgeType.ACCEPT),
                    lambda s: (2, 2, b"k2") in s and len(s) >= 7, 30, "all deliveries")
    finally:
        c.close()
    name = "sharebroker_share_partition_archived_records_total"
    labels = {"group": group, "topic": topic, "partition": "0"}

    def archived():
        with urllib.request.urlopen(sharebroker.metrics_url, timeout=10) as r:
            text = r.read().decode()
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == name and s.labels == labels:
                    return s.value
        return None

    until(lambda: archived() == 3, 30, "3 archived records in the metric")
    assert len(read_all(bs, dlq, 0, 3)) == 3
