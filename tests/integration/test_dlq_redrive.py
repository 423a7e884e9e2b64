"""``sharebroker-dlq-redrive`` (admin/redrive.py) as a subprocess against a real broker.

DLQ records are produced with confluent-kafka exactly as Kafka 4.4's ShareGroupDLQStateManager
writes them (headers ``__dlq.errors.topic/partition/offset/group/delivery.count/message``, the
original key and value only with copy-record on, DLQ partition = source partition mod DLQ
partitions); the redriven records are read back with a confluent-kafka Consumer."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from admin.client import uuid_str
from broker.testing import BrokerProcess
from protocol.compression import LZ4, ZSTD
from tests.integration.cli_helpers import ROOT
from tests.support import create_topic, stored_batches, topic_id, unique

CODEC_IDS = {"zstd": ZSTD, "lz4": LZ4}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("redrive")) as b:
        yield b


def redrive(bootstrap: str, dlq: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "admin.redrive", "--bootstrap-server", bootstrap,
                           "--dlq-topic", dlq, *args], capture_output=True, text=True, cwd=ROOT, timeout=60)


def redrive_json(bootstrap: str, dlq: str, *args: str, code: int = 0) -> dict:
    r = redrive(bootstrap, dlq, *args, "--json")
    assert r.returncode == code, f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return json.loads(r.stdout)


def dlq_headers(topic: str, partition: int, offset: int) -> list[tuple[str, bytes]]:
    return [("__dlq.errors.topic", topic.encode()), ("__dlq.errors.partition", str(partition).encode()),
            ("__dlq.errors.offset", str(offset).encode()), ("__dlq.errors.group", b"workers"),
            ("__dlq.errors.delivery.count", b"5"),
            ("__dlq.errors.message", b"Offset delivery count exceeded the threshold.")]


def write_dlq(bootstrap: str, dlq: str, dlq_partitions: int, records: list[dict], compression: str = "none") -> None:
    """Each record: source topic/partition/offset, key, value, extra headers, timestamp (optional)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": compression})
    for r in records:
        kwargs = {"timestamp": r["timestamp"]} if "timestamp" in r else {}
        p.produce(dlq, key=r.get("key"), value=r.get("value"), partition=r["partition"] % dlq_partitions,
                  headers=dlq_headers(r["topic"], r["partition"], r["offset"]) + r.get("headers", []), **kwargs)
    assert p.flush(30) == 0


def end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("wm")})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)]
    finally:
        c.close()


def read_all(bootstrap: str, topic: str, partitions: int, consume_range) -> dict[int, list[tuple]]:
    """Every record of every partition: {partition: [(key, value, headers)]}."""
    out = {}
    for p, end in enumerate(end_offsets(bootstrap, topic, partitions)):
        out[p] = [(m.key(), m.value(), m.headers() or []) for m in consume_range(bootstrap, topic, p, 0, end)]
    return out


def source_records(topic: str, partitions: int, n: int) -> list[dict]:
    return [{"topic": topic, "partition": i % partitions, "offset": 100 + i, "key": b"k%d" % i,
             "value": b"v%d" % i, "headers": [("trace", b"t%d" % i), ("empty", None)]} for i in range(n)]


def expected(records: list[dict], partitions: int) -> dict[int, list[tuple]]:
    out = {p: [] for p in range(partitions)}
    for r in records:
        out[r["partition"]].append((r["key"], r["value"], [(k, v) for k, v in r.get("headers", [])]))
    return out


def test_records_move_back_once_and_a_second_run_moves_nothing(broker, consume_range):
    bs = broker.bootstrap
    src = create_topic(bs, 3, prefix="orders")
    dlq = create_topic(bs, 2, prefix="dlq.orders")
    recs = source_records(src, 3, 9)
    write_dlq(bs, dlq, 2, recs)

    dry = redrive_json(bs, dlq, "--dry-run")
    assert dry["executed"] is False and dry["moved"] == 9 and dry["examined"] == 9
    assert end_offsets(bs, src, 3) == [0, 0, 0], "a dry run produces nothing"
    assert all(p["committed_offset"] is None for p in dry["partitions"]), "a dry run commits nothing"

    r = redrive(bs, dlq, "--execute")
    assert r.returncode == 0, r.stderr
    assert f"Moved 9 records from DLQ topic '{dlq}'" in r.stderr
    assert read_all(bs, src, 3, consume_range) == expected(recs, 3)

    again = redrive_json(bs, dlq, "--execute")
    assert again["moved"] == 0 and again["examined"] == 0
    assert [p["committed_offset"] for p in again["partitions"]] == end_offsets(bs, dlq, 2)
    assert end_offsets(bs, src, 3) == [3, 3, 3]

    # progress resumes: records added to the DLQ later are moved by the next run, the earlier ones are not
    more = [{"topic": src, "partition": 2, "offset": 500, "key": b"late", "value": b"late-v"}]
    write_dlq(bs, dlq, 2, more)
    assert redrive_json(bs, dlq, "--execute")["moved"] == 1
    assert read_all(bs, src, 3, consume_range) == expected(recs + more, 3)


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_compressed_dlq_batches_are_redriven(broker, consume_range, codec):
    """DLQ batches compressed by librdkafka (compression.type) are read with the optional extra
    sharebroker[compression] installed, as the test dependencies have it."""
    bs = broker.bootstrap
    src = create_topic(bs, 2, prefix="orders")
    dlq = create_topic(bs, 1, prefix="dlq.orders")
    recs = [dict(r, value=r["value"] * 40) for r in source_records(src, 2, 8)]  # compressible
    write_dlq(bs, dlq, 1, recs, compression=codec)
    assert {b.compression for b in stored_batches(bs, dlq)} == {CODEC_IDS[codec]}
    assert redrive_json(bs, dlq, "--execute")["moved"] == 8
    assert read_all(bs, src, 2, consume_range) == expected(recs, 2)


def test_records_are_produced_by_an_idempotent_producer(broker):
    bs = broker.bootstrap
    src = create_topic(bs, 1, prefix="orders")
    dlq = create_topic(bs, 1, prefix="dlq.orders")
    write_dlq(bs, dlq, 1, source_records(src, 1, 3))
    redrive_json(bs, dlq, "--execute")
    write_dlq(bs, dlq, 1, source_records(src, 1, 2))
    redrive_json(bs, dlq, "--execute")

    batches = stored_batches(bs, src)
    assert [(b.base_offset, b.records_count) for b in batches] == [(0, 3), (3, 2)]
    assert all(b.producer_id >= 0 and b.producer_epoch >= 0 for b in batches)
    # one producer id per run, each starting its sequence at 0
    assert batches[0].producer_id != batches[1].producer_id
    assert [b.base_sequence for b in batches] == [0, 0]


def test_filters_select_partitions_offsets_and_times(broker, consume_range):
    bs = broker.bootstrap
    src = create_topic(bs, 2, prefix="orders")
    dlq = create_topic(bs, 2, prefix="dlq.orders")
    t0 = int(time.time() * 1000) - 60_000
    recs = [dict(r, timestamp=t0 + 1000 * i) for i, r in enumerate(source_records(src, 2, 8))]
    write_dlq(bs, dlq, 2, recs)

    by_partition = redrive_json(bs, dlq, "--dry-run", "--source-partition", "1")
    assert by_partition["moved"] == 4 and by_partition["passed_over"] == 4
    assert by_partition["destinations"] == [{"topic": src, "partition": 1, "records": 4}]

    by_offset = redrive_json(bs, dlq, "--dry-run", "--from-offset", "102", "--to-offset", "104")
    assert by_offset["moved"] == 3
    by_other_topic = redrive_json(bs, dlq, "--dry-run", "--source-topic", unique("other"))
    assert by_other_topic["moved"] == 0 and by_other_topic["passed_over"] == 8

    # records 2..5 by DLQ timestamp, moved for real
    r = redrive_json(bs, dlq, "--execute", "--from-time", str(t0 + 2000), "--to-time", str(t0 + 5000))
    assert r["moved"] == 4 and r["passed_over"] == 4
    assert read_all(bs, src, 2, consume_range) == expected(recs[2:6], 2)


def test_headers_only_records_are_refused(broker, consume_range):
    bs = broker.bootstrap
    src = create_topic(bs, 1, prefix="orders")
    dlq = create_topic(bs, 1, prefix="dlq.orders")
    good = source_records(src, 1, 2)
    headers_only = [{"topic": src, "partition": 0, "offset": 7}, {"topic": src, "partition": 0, "offset": 8}]
    write_dlq(bs, dlq, 1, [good[0]] + headers_only + [good[1]])

    r = redrive(bs, dlq, "--execute")
    assert r.returncode == 1
    assert (f"Error: refused 2 headers-only DLQ records (no key and no value: written with "
            f"errors.deadletterqueue.copy.record.enable=false, so there is nothing to redrive): "
            f"{dlq}-0@1, {dlq}-0@2") in r.stderr
    assert read_all(bs, src, 1, consume_range) == expected(good, 1)

    again = redrive_json(bs, dlq, "--execute")  # refused records are not examined again
    assert again["examined"] == 0 and again["refused"]["headers_only"] == 0


def test_refusals_are_counted_in_json(broker):
    bs = broker.bootstrap
    src = create_topic(bs, 1, prefix="orders")
    dlq = create_topic(bs, 1, prefix="dlq.orders")
    gone = unique("gone")
    p = Producer({"bootstrap.servers": bs})
    p.produce(dlq, key=b"k", value=b"v", headers=[("other", b"x")])     # no __dlq headers
    p.produce(dlq, key=b"k", value=b"v", headers=dlq_headers(gone, 0, 1))  # source topic missing
    p.produce(dlq, headers=dlq_headers(src, 0, 2))                       # headers only
    assert p.flush(30) == 0

    out = redrive_json(bs, dlq, "--dry-run", code=1)
    assert out["refused"] == {"headers_only": 1, "not_dlq_record": 1, "unknown_topic": 1}
    assert [(r["offset"], r["reason"]) for r in sorted(out["refused_records"], key=lambda r: r["offset"])] == [
        (0, "not_dlq_record"), (1, "unknown_topic"), (2, "headers_only")]
    assert out["moved"] == 0


def test_a_partition_that_no_longer_exists_is_chosen_by_key_hash(broker, consume_range):
    bs = broker.bootstrap
    src = create_topic(bs, 3, prefix="orders")
    dlq = create_topic(bs, 8, prefix="dlq.orders")
    keys = [b"21", b"alpha", b"order-17", b"x"]
    write_dlq(bs, dlq, 8, [{"topic": src, "partition": 7, "offset": i, "key": k, "value": b"v"}
                           for i, k in enumerate(keys)])
    redrive_json(bs, dlq, "--execute")

    # librdkafka's murmur2 partitioner (Kafka's default for keyed records) is the oracle
    hashed = {}
    p = Producer({"bootstrap.servers": bs, "partitioner": "murmur2_random"})
    probe = create_topic(bs, 3, prefix="probe")
    for k in keys:
        p.produce(probe, key=k, value=b"", on_delivery=lambda err, msg: hashed.__setitem__(msg.key(), msg.partition()))
    assert p.flush(30) == 0
    got = read_all(bs, src, 3, consume_range)
    assert {k: part for part, recs in got.items() for k, _, _ in recs} == hashed


def test_a_topic_id_in_the_topic_header_is_resolved(broker, consume_range):
    bs = broker.bootstrap
    src = create_topic(bs, 2, prefix="orders")
    dlq = create_topic(bs, 1, prefix="dlq.orders")
    rec = {"topic": uuid_str(topic_id(bs, src)), "partition": 1, "offset": 3, "key": b"k", "value": b"v"}
    write_dlq(bs, dlq, 1, [rec])
    assert redrive_json(bs, dlq, "--execute")["destinations"] == [{"topic": src, "partition": 1, "records": 1}]
    assert read_all(bs, src, 2, consume_range) == {0: [], 1: [(b"k", b"v", [])]}


def test_usage_errors_and_unknown_topic(broker):
    bs = broker.bootstrap
    r = redrive(bs, unique("dlq"))
    assert r.returncode == 2 and "exactly one of --dry-run or --execute" in r.stderr
    r = redrive(bs, unique("dlq"), "--dry-run", "--from-offset", "5", "--to-offset", "4")
    assert r.returncode == 2 and "--from-offset must not be greater than --to-offset" in r.stderr
    r = redrive(bs, unique("dlq"), "--dry-run", "--source-partition", "a")
    assert r.returncode == 2 and "Invalid partition 'a'" in r.stderr
    missing = unique("dlq")
    r = redrive(bs, missing, "--execute")
    assert r.returncode == 1 and r.stderr.strip() == f"Error: DLQ topic '{missing}' does not exist"
    r = subprocess.run([sys.executable, "-m", "admin.redrive", "--bootstrap-server", "127.0.0.1:1",
                        "--dlq-topic", "d", "--dry-run", "--timeout", "2000"], capture_output=True, text=True,
                       cwd=ROOT, timeout=60)
    assert r.returncode == 3 and r.stderr.startswith("Error: broker unreachable")


def test_a_group_with_active_members_is_refused(broker):
    bs = broker.bootstrap
    dlq = create_topic(bs, 1, prefix="dlq.orders")
    group = unique("busy")
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "session.timeout.ms": 6000})
    c.subscribe([dlq])
    try:
        deadline = time.monotonic() + 20
        while not c.assignment():
            assert time.monotonic() < deadline, "consumer got no assignment"
            c.poll(0.2)
        r = redrive(bs, dlq, "--execute", "--group", group)
        assert r.returncode == 1 and f"Consumer group '{group}' is in state Stable" in r.stderr
    finally:
        c.close()
