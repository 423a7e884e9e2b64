"""Real clients move records end to end through the real broker, byte-exact.

confluent-kafka with every compression codec (acks=all, idempotence on), then
kafka-python and aiokafka producers and consumers crossed with each other.
"""
from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

N = 100_000
BASE_TS = 1_700_000_000_000


def record(i: int) -> tuple[bytes, bytes, list[tuple[str, bytes]], int]:
    key = b"k%d" % i
    value = (b"value-%d-" % i) * (1 + i % 7)
    headers = [("idx", b"%d" % i), ("kind", b"even" if i % 2 == 0 else b"odd")]
    return key, value, headers, BASE_TS + i


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions)])[name].result(15)


def produce_confluent(bootstrap: str, topic: str, n: int, compression: str) -> None:
    errors = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "compression.type": compression, "linger.ms": 20})
    for i in range(n):
        key, value, headers, ts = record(i)
        while True:
            try:
                p.produce(topic, value=value, key=key, headers=headers, timestamp=ts,
                          on_delivery=lambda err, msg: err and errors.append(err))
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0
    assert not errors, errors[:3]


def consume_confluent(bootstrap: str, topic: str, n: int) -> list[tuple]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + 120
    try:
        while len(out) < n and time.monotonic() < deadline:
            for m in c.consume(5000, 1.0):
                assert m.error() is None, m.error()
                out.append((m.offset(), m.key(), m.value(), list(m.headers() or []), m.timestamp()[1]))
    finally:
        c.close()
    return out


def check(records: list[tuple], n: int) -> None:
    assert len(records) == n
    for i, (offset, key, value, headers, ts) in enumerate(records):
        ek, ev, eh, ets = record(i)
        assert offset == i
        assert (key, value, headers, ts) == (ek, ev, eh, ets), f"record {i} differs"


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_every_compression(sharebroker, compression):
    topic = f"c-{compression}"
    create_topic(sharebroker.bootstrap, topic)
    produce_confluent(sharebroker.bootstrap, topic, N, compression)
    check(consume_confluent(sharebroker.bootstrap, topic, N), N)


# ------------------------------------------------------------------ other clients
def produce_kafka_python(bootstrap: str, topic: str, n: int) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                      compression_type="lz4", linger_ms=20, batch_size=256 * 1024)
    futures = []
    for i in range(n):
        key, value, headers, ts = record(i)
        futures.append(p.send(topic, value=value, key=key, headers=headers, timestamp_ms=ts, partition=0))
    p.flush(120)
    for f in futures[:: max(1, n // 100)]:
        assert f.get(30).offset >= 0
    p.close()


def consume_kafka_python(bootstrap: str, topic: str, n: int) -> list[tuple]:
    from kafka import KafkaConsumer
    from kafka.structs import TopicPartition as KTP

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                      max_poll_records=5000, fetch_max_bytes=16 * 1024 * 1024)
    tp = KTP(topic, 0)
    c.assign([tp])
    c.seek(tp, 0)
    out = []
    deadline = time.monotonic() + 180
    try:
        while len(out) < n and time.monotonic() < deadline:
            for msgs in c.poll(timeout_ms=1000).values():
                out += [(m.offset, m.key, m.value, [(k, v) for k, v in m.headers], m.timestamp) for m in msgs]
    finally:
        c.close()
    return out


async def _produce_aiokafka(bootstrap: str, topic: str, n: int) -> None:
    from aiokafka import AIOKafkaProducer

    p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                         compression_type="gzip", linger_ms=20, max_batch_size=256 * 1024)
    await p.start()
    try:
        batch = []
        for i in range(n):
            key, value, headers, ts = record(i)
            batch.append(await p.send(topic, value=value, key=key, headers=headers, timestamp_ms=ts, partition=0))
            if len(batch) >= 5000:
                await asyncio.gather(*batch)
                batch = []
        await asyncio.gather(*batch)
    finally:
        await p.stop()


async def _consume_aiokafka(bootstrap: str, topic: str, n: int) -> list[tuple]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATP

    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                         fetch_max_bytes=16 * 1024 * 1024, max_partition_fetch_bytes=8 * 1024 * 1024)
    await c.start()
    tp = ATP(topic, 0)
    c.assign([tp])
    c.seek(tp, 0)
    out = []
    deadline = time.monotonic() + 180
    try:
        while len(out) < n and time.monotonic() < deadline:
            for msgs in (await c.getmany(timeout_ms=1000, max_records=5000)).values():
                out += [(m.offset, m.key, m.value, [(k, v) for k, v in m.headers], m.timestamp) for m in msgs]
    finally:
        await c.stop()
    return out


PRODUCERS = {
    "confluent": lambda b, t, n: produce_confluent(b, t, n, "snappy"),
    "kafka-python": produce_kafka_python,
    "aiokafka": lambda b, t, n: asyncio.run(_produce_aiokafka(b, t, n)),
}
CONSUMERS = {
    "confluent": consume_confluent,
    "kafka-python": consume_kafka_python,
    "aiokafka": lambda b, t, n: asyncio.run(_consume_aiokafka(b, t, n)),
}
CROSSED = [("kafka-python", "aiokafka"), ("aiokafka", "confluent"), ("confluent", "kafka-python")]


@pytest.mark.parametrize("producer,consumer", CROSSED, ids=[f"{p}->{c}" for p, c in CROSSED])
def test_crossing_clients(sharebroker, producer, consumer):
    topic = f"x-{producer}-{consumer}"
    create_topic(sharebroker.bootstrap, topic)
    PRODUCERS[producer](sharebroker.bootstrap, topic, N)
    check(CONSUMERS[consumer](sharebroker.bootstrap, topic, N), N)
