"""Retention and DeleteRecords: old segments go, the log start offset moves up, readers reset.

The broker runs its maintenance pass every 200 ms (``log.retention.check.interval.ms``);
topics use the smallest segment size Kafka accepts (1 MiB) so a few MB of records
make several segments.
"""
from __future__ import annotations

import time

import pytest
from confluent_kafka import OFFSET_END, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, OffsetSpec,
                                   ResourceType)

SEGMENT = 1048576
VALUE = 1000


@pytest.fixture
def broker(broker_factory):
    return broker_factory({"log.retention.check.interval.ms": 200})


def create_topic(admin: AdminClient, name: str, partitions: int = 1, **configs) -> None:
    admin.create_topics([NewTopic(name, partitions, 1, config={k.replace("_", "."): str(v)
                                                               for k, v in configs.items()})])[name].result(15)


def value_of(i: int) -> bytes:
    head = b"%08d:" % i
    return head + bytes((i * 7 + j) % 251 for j in range(VALUE - len(head)))


def produce(bootstrap: str, topic: str, start: int, count: int, partition: int = 0,
            timestamp: int | None = None) -> list[int]:
    offsets: list = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    for i in range(start, start + count):
        kw = {"timestamp": timestamp} if timestamp is not None else {}
        while True:
            try:
                p.produce(topic, key=b"k%06d" % i, value=value_of(i), partition=partition,
                          on_delivery=lambda err, msg: offsets.append(err or msg.offset()), **kw)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(30) == 0
    assert all(isinstance(o, int) for o in offsets), [o for o in offsets if not isinstance(o, int)][:3]
    return offsets


def offsets_of(admin: AdminClient, topic: str, partition: int = 0) -> tuple[int, int]:
    tp = TopicPartition(topic, partition)
    lo = admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(10).offset
    hi = admin.list_offsets({tp: OffsetSpec.latest()})[tp].result(10).offset
    return lo, hi


def segment_bases(broker, topic: str, partition: int = 0) -> list[int]:
    d = broker.data_dir / f"{topic}-{partition}"
    return sorted(int(p.name[:-4]) for p in d.iterdir() if p.name.endswith(".log"))


def segment_sizes(broker, topic: str, partition: int = 0) -> dict[int, int]:
    """Base offset -> size in bytes of each segment file on disk (one directory listing)."""
    d = broker.data_dir / f"{topic}-{partition}"
    sizes = {}
    for p in d.iterdir():
        if p.name.endswith(".log"):
            try:
                sizes[int(p.name[:-4])] = p.stat().st_size
            except FileNotFoundError:  # a deleted segment unlinked in the background meanwhile
                pass
    return sizes


def segment_bytes_on_disk(broker, topic: str, partition: int = 0) -> int:
    return sum(segment_sizes(broker, topic, partition).values())


def first_message(bootstrap: str, topic: str, offset: int, reset: str, timeout: float = 15.0):
    """Assign at ``offset`` and return the first message or error event the consumer delivers."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"first-{topic}-{reset}", "enable.auto.commit": False,
                  "auto.offset.reset": reset})
    try:
        c.assign([TopicPartition(topic, 0, offset)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None:
                return m
        pytest.fail(f"no message or error from {topic} within {timeout}s")
    finally:
        c.close()


def test_size_retention_deletes_old_segments_and_consumers_reset(broker, wait_until, consume_range):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    create_topic(admin, "by-size", segment_bytes=SEGMENT, retention_bytes=SEGMENT)
    n = 4096  # ~4.2 MB: four or five segments of 1 MiB
    assert produce(broker.bootstrap, "by-size", 0, n) == list(range(n))

    def settled():
        # Kafka's rule (UnifiedLog.deleteRetentionSizeBreachedSegments): the oldest segment goes
        # while the log without it still holds retention.bytes. Wait until the files on disk are a
        # log from which no later pass deletes anything (nothing is produced any more), so the
        # state checked below cannot change under the test.
        lo, hi = offsets_of(admin, "by-size")
        sizes = segment_sizes(broker, "by-size")
        total = sum(sizes.values())
        stable = lo > 0 and sizes and min(sizes) == lo and total - sizes[lo] < SEGMENT
        return (lo, hi) if stable else None

    lo, hi = wait_until(settled, 15, "retention to delete the oldest segments")
    assert hi == n
    assert segment_bytes_on_disk(broker, "by-size") >= SEGMENT, "retention deleted more than it should"
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "wm"})
    try:
        assert c.get_watermark_offsets(TopicPartition("by-size", 0), timeout=10, cached=False) == (lo, hi)
    finally:
        c.close()

    # offset 0 is gone: the broker answers OFFSET_OUT_OF_RANGE and the consumer applies its reset policy
    err = first_message(broker.bootstrap, "by-size", 0, "error")
    assert err.error() is not None and err.error().code() == KafkaError._AUTO_OFFSET_RESET, err.error()
    first = first_message(broker.bootstrap, "by-size", 0, "earliest")
    assert first.error() is None and first.offset() == lo and first.value() == value_of(lo)

    msgs = consume_range(broker.bootstrap, "by-size", 0, lo, hi, reset="error")
    assert [m.offset() for m in msgs] == list(range(lo, hi))
    assert all(m.value() == value_of(m.offset()) for m in msgs)


def test_time_retention_deletes_expired_segments_then_everything(broker, wait_until, consume_range):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    create_topic(admin, "by-time", segment_bytes=SEGMENT, retention_ms=60000)
    old_ts = int(time.time() * 1000) - 3600_000
    n_old, n_new = 2600, 100
    assert produce(broker.bootstrap, "by-time", 0, n_old, timestamp=old_ts) == list(range(n_old))
    assert produce(broker.bootstrap, "by-time", n_old, n_new) == list(range(n_old, n_old + n_new))

    def settled():
        # every segment before the one holding offset n_old (the first recent record) holds only
        # expired records; a pass deletes them, and no later pass deletes anything more
        lo, hi = offsets_of(admin, "by-time")
        bases = segment_bases(broker, "by-time")
        stable = lo > 0 and bases and bases[0] == lo and (len(bases) == 1 or bases[1] > n_old)
        return (lo, hi) if stable else None

    lo, hi = wait_until(settled, 15, "expired segments to be deleted")
    assert hi == n_old + n_new
    assert lo <= n_old, "records within retention.ms were deleted"
    msgs = consume_range(broker.bootstrap, "by-time", 0, lo, hi)
    assert [m.offset() for m in msgs] == list(range(lo, hi))
    assert all(m.value() == value_of(m.offset()) for m in msgs)
    assert all(m.timestamp()[1] > old_ts + 3000_000 for m in msgs[-n_new:])

    # shrink retention.ms at run time: everything expires, the log start reaches the end
    res = ConfigResource(ResourceType.TOPIC, "by-time", incremental_configs=[
        ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(10)
    assert wait_until(lambda: offsets_of(admin, "by-time") == (hi, hi), 15, "all segments to expire")
    assert produce(broker.bootstrap, "by-time", hi, 3) == [hi, hi + 1, hi + 2]


def test_delete_records_moves_the_low_watermark(broker, consume_range):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    create_topic(admin, "delrec", 2)
    for part in (0, 1):
        assert produce(broker.bootstrap, "delrec", 0, 100, partition=part) == list(range(100))

    tp0 = TopicPartition("delrec", 0, 30)
    assert admin.delete_records([tp0])[tp0].result(10).low_watermark == 30
    tp1 = TopicPartition("delrec", 1, OFFSET_END)
    assert admin.delete_records([tp1])[tp1].result(10).low_watermark == 100
    assert offsets_of(admin, "delrec", 0) == (30, 100)
    assert offsets_of(admin, "delrec", 1) == (100, 100)

    # a lower offset than the current start changes nothing
    tp = TopicPartition("delrec", 0, 10)
    assert admin.delete_records([tp])[tp].result(10).low_watermark == 30
    # beyond the high watermark: OFFSET_OUT_OF_RANGE
    tp = TopicPartition("delrec", 0, 101)
    with pytest.raises(KafkaException) as e:
        admin.delete_records([tp])[tp].result(10)
    assert e.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
    assert offsets_of(admin, "delrec", 0) == (30, 100)

    first = first_message(broker.bootstrap, "delrec", 0, "earliest")
    assert first.offset() == 30 and first.value() == value_of(30)
    msgs = consume_range(broker.bootstrap, "delrec", 0, 30, 100)
    assert [m.offset() for m in msgs] == list(range(30, 100))

    # the log start offset is durable (kill -9, no clean shutdown)
    broker.kill9()
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert offsets_of(admin, "delrec", 0) == (30, 100)
    assert offsets_of(admin, "delrec", 1) == (100, 100)
    assert produce(broker.bootstrap, "delrec", 100, 5, partition=1) == list(range(100, 105))
    msgs = consume_range(broker.bootstrap, "delrec", 1, 100, 105)
    assert [m.value() for m in msgs] == [value_of(i) for i in range(100, 105)]
