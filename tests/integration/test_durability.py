"""Durability: acknowledged records survive kill -9 and clean restarts; torn tails are cut at start-up.

Real broker subprocesses on 127.0.0.1, real confluent-kafka clients.  The broker
writes every acknowledged batch to the segment file before it answers (page cache
survives kill -9), rebuilds idempotent-producer state from the log at start-up, and
truncates a torn or corrupt last batch instead of serving it.
"""
from __future__ import annotations

import os
import struct
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

BATCH_HEAD = struct.Struct(">qi")  # baseOffset, batchLength (bytes after this field)


def create_topic(bootstrap: str, name: str, partitions: int, configs: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=configs or {})])[name].result(15)


def producer(bootstrap: str, **extra) -> Producer:
    return Producer({
        "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
        "linger.ms": 2, "batch.num.messages": 200, "message.timeout.ms": 60000,
        "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 200,
        "retry.backoff.ms": 20, "retry.backoff.max.ms": 200, **extra})


def value_of(i: int) -> bytes:
    return (b"value-%06d-" % i) * 6


def watermarks(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)
    finally:
        c.close()


def segment_batches(path) -> list[tuple[int, int, int]]:
    """(file position, base offset, total size) of every whole batch in a segment file."""
    data = open(path, "rb").read()
    out, pos = [], 0
    while pos + 12 <= len(data):
        base, length = BATCH_HEAD.unpack_from(data, pos)
        size = 12 + length
        if pos + size > len(data):
            break
        out.append((pos, base, size))
        pos += size
    assert pos == len(data), f"{path} does not end on a batch boundary"
    return out


# --------------------------------------------------------------------------- kill -9 mid-stream
def test_kill9_mid_stream_keeps_every_acknowledged_record(broker_factory, consume_range):
    N, PARTS, WINDOW = 20000, 2, 3000
    b = broker_factory()
    port = b.port
    create_topic(b.bootstrap, "durable", PARTS)

    acked: dict[bytes, tuple[int, int, bytes]] = {}  # key -> (partition, offset, value)
    failed: list[tuple[bytes, str]] = []
    state = {"produced": 0}
    killed, restarted = threading.Event(), threading.Event()
    thread_error: list[BaseException] = []

    def on_delivery(err, msg):
        if err is None:
            acked[msg.key()] = (msg.partition(), msg.offset(), msg.value())
        else:
            failed.append((msg.key(), str(err)))

    def killer():
        try:
            deadline = time.monotonic() + 60
            while len(acked) < N // 4:
                if time.monotonic() > deadline:
                    raise AssertionError(f"only {len(acked)} acks before the kill deadline")
                time.sleep(0.001)
            state["acked_at_kill"], state["produced_at_kill"] = len(acked), state["produced"]
            b.kill9()
            killed.set()
            b.start()  # same data dir, same port
            restarted.set()
        except BaseException as e:  # surfaced in the main thread
            thread_error.append(e)
            killed.set()

    p = producer(b.bootstrap)
    t = threading.Thread(target=killer, daemon=True)
    t.start()
    deadline = time.monotonic() + 90
    for i in range(N):
        if i == 3 * N // 4:  # the kill always happens before the stream ends
            assert killed.wait(60), "the broker was not killed"
        key = b"k%06d" % i
        while True:
            try:
                p.produce("durable", value=value_of(i), key=key, partition=i % PARTS, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.01)
        state["produced"] = i + 1
        while i + 1 - len(acked) - len(failed) > WINDOW:  # keep a bounded window in flight
            assert time.monotonic() < deadline, "producer made no progress"
            p.poll(0.005)
        if i % 100 == 0:
            p.poll(0)
    remaining = p.flush(60)
    t.join(30)
    assert not thread_error, thread_error
    assert restarted.is_set()
    assert remaining == 0, f"{remaining} records still undelivered"
    assert b.port == port
    assert 0 < state["acked_at_kill"] < N and state["produced_at_kill"] < N, state
    assert len(acked) > state["acked_at_kill"], "nothing was acknowledged after the restart"
    # With idempotence and a 60 s delivery timeout, every record ends up acknowledged; a
    # failure here means the restarted broker rejected the producer's retries.
    assert not failed, f"{len(failed)} deliveries failed, e.g. {failed[:3]}"

    seen: dict[bytes, tuple[int, int, bytes]] = {}
    for part in range(PARTS):
        low, high = watermarks(b.bootstrap, "durable", part)
        assert low == 0
        msgs = consume_range(b.bootstrap, "durable", part, 0, high, extra={"check.crcs": True})
        offsets = [m.offset() for m in msgs]
        assert offsets == list(range(high)), f"partition {part}: offsets are not contiguous from 0"
        keys = [m.key() for m in msgs]
        assert len(set(keys)) == len(keys), f"partition {part}: duplicated records"
        assert keys == sorted(keys), f"partition {part}: records out of production order"
        for m in msgs:
            seen[m.key()] = (part, m.offset(), m.value())
    missing = [k for k in acked if k not in seen]
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:5]}"
    wrong = [(k, acked[k], seen[k]) for k in acked
             if seen[k][0] != acked[k][0] or seen[k][2] != acked[k][2]
             or (acked[k][1] >= 0 and seen[k][1] != acked[k][1])]
    assert not wrong, f"{len(wrong)} records differ from what was acknowledged, e.g. {wrong[:3]}"
    # unacknowledged records may or may not be there, but nothing else may be
    assert all(int(k[1:]) < N and seen[k][2] == value_of(int(k[1:])) for k in seen)


# --------------------------------------------------------------------------- clean restart
def test_sigterm_restart_keeps_data_configs_and_producer_state(broker_factory, consume_range):
    b = broker_factory()
    create_topic(b.bootstrap, "clean", 1, {"retention.ms": "123456789", "max.message.bytes": "500000"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    p = producer(b.bootstrap)
    for i in range(1000):
        p.produce("clean", key=b"k%06d" % i, value=value_of(i))
    assert p.flush(20) == 0
    tid_before = _topic_id(admin, "clean")

    assert b.stop() == 0, "SIGTERM must shut the broker down cleanly (exit code 0)"
    assert (b.data_dir / ".clean_shutdown").exists()
    b.start()
    assert any("shutting down" in line for line in b.log_lines)

    # the same idempotent producer continues after the restart
    failed = []
    for i in range(1000, 2000):
        p.produce("clean", key=b"k%06d" % i, value=value_of(i),
                  on_delivery=lambda err, msg: err and failed.append(err))
    assert p.flush(30) == 0 and not failed, failed

    assert watermarks(b.bootstrap, "clean", 0) == (0, 2000)
    msgs = consume_range(b.bootstrap, "clean", 0, 0, 2000)
    assert [m.offset() for m in msgs] == list(range(2000))
    assert [(m.key(), m.value()) for m in msgs] == [(b"k%06d" % i, value_of(i)) for i in range(2000)]

    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    assert _topic_id(admin, "clean") == tid_before
    res = ConfigResource(ResourceType.TOPIC, "clean")
    cfg = admin.describe_configs([res])[res].result(10)
    assert cfg["retention.ms"].value == "123456789"
    assert cfg["max.message.bytes"].value == "500000"


def _topic_id(admin: AdminClient, topic: str):
    desc = admin.describe_topics(TopicCollection([topic]))[topic].result(10)
    return str(desc.topic_id)


# --------------------------------------------------------------------------- torn tail
@pytest.mark.parametrize("stop", ["sigterm", "kill9"])
@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_torn_final_batch_is_truncated_at_startup(broker_factory, consume_range, stop, damage):
    b = broker_factory()
    create_topic(b.bootstrap, "torn", 1)
    acked: dict[int, bytes] = {}
    p = producer(b.bootstrap, **{"linger.ms": 0})
    i = 0
    for _ in range(6):  # several separate batches
        for _ in range(40):
            p.produce("torn", key=b"k%06d" % i, value=value_of(i),
                      on_delivery=lambda err, msg: err is None and acked.__setitem__(msg.offset(), msg.value()))
            i += 1
        assert p.flush(15) == 0
    assert sorted(acked) == list(range(i))
    del p
    if stop == "sigterm":
        assert b.stop() == 0
    else:
        b.kill9()

    seg = b.data_dir / "torn-0" / ("0" * 20 + ".log")
    batches = segment_batches(seg)
    assert len(batches) >= 2
    last_pos, last_base, last_size = batches[-1]
    end = last_pos + last_size
    if damage == "truncate":
        # the last batch was half written: it must go, everything before it stays
        os.truncate(seg, last_pos + last_size // 2)
        expected_end, expected_hwm = last_pos, last_base
    else:
        # the start of a next batch (header claiming the next offset) followed by junk
        data = open(seg, "rb").read()
        torn = bytearray(data[last_pos:end])
        struct.pack_into(">q", torn, 0, i)
        with open(seg, "ab") as f:
            f.write(bytes(torn[:len(torn) // 2]) + b"\xde\xad\xbe\xef" * 8)
        expected_end, expected_hwm = end, i

    b.start()
    assert os.path.getsize(seg) == expected_end, "the torn tail was not truncated at start-up"
    assert watermarks(b.bootstrap, "torn", 0) == (0, expected_hwm)
    msgs = consume_range(b.bootstrap, "torn", 0, 0, expected_hwm, extra={"check.crcs": True})
    assert [m.offset() for m in msgs] == list(range(expected_hwm))
    assert [m.value() for m in msgs] == [acked[o] for o in range(expected_hwm)]

    # new produces continue right after the last whole batch
    new_offsets = []
    p2 = producer(b.bootstrap)
    for j in range(25):
        p2.produce("torn", key=b"new%03d" % j, value=b"after-%d" % j,
                   on_delivery=lambda err, msg: new_offsets.append(msg.offset() if err is None else err))
    assert p2.flush(15) == 0
    assert new_offsets == list(range(expected_hwm, expected_hwm + 25))
    assert watermarks(b.bootstrap, "torn", 0) == (0, expected_hwm + 25)
    msgs = consume_range(b.bootstrap, "torn", 0, 0, expected_hwm + 25, extra={"check.crcs": True})
    assert [m.offset() for m in msgs] == list(range(expected_hwm + 25))
    assert [m.value() for m in msgs[expected_hwm:]] == [b"after-%d" % j for j in range(25)]
    assert all(m.value() == acked[m.offset()] for m in msgs[:expected_hwm])
