"""Log compaction end to end: a real broker (its cleaner worker process included) and real clients.

The cleaner's progress is observed as Kafka tests observe it (``awaitCleaned``): through the
``cleaner-offset-checkpoint`` file of the data directory. Segments are small
(``internal.segment.bytes``, Kafka's test-only topic config) and a segment rolls when
``segment.ms`` has passed, so each test cleans in seconds.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.log.cleaner import CHECKPOINT_FILE, read_checkpoints
from protocol import compression
from tests.missing_inputs import missing_input
from tests.support import unique, until

BROKER = {"log.cleaner.backoff.ms": "100", "log.retention.check.interval.ms": "200"}
ROLL_MS = 400


def create(bootstrap: str, **configs) -> str:
    name = unique("c")
    cfg = {"cleanup.policy": "compact", "internal.segment.bytes": str(256 * 1024), "segment.ms": str(ROLL_MS),
           "min.cleanable.dirty.ratio": "0", **{k.replace("_", "."): str(v) for k, v in configs.items()}}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, config=cfg)])[name].result(15)
    return name


def cleaned_to(broker, topic: str) -> int:
    return read_checkpoints(os.path.join(str(broker.data_dir), CHECKPOINT_FILE)).get((topic, 0), -1)


class Writer:
    """A producer that remembers the offset of every acknowledged record."""

    def __init__(self, bootstrap: str, topic: str, **conf):
        self.topic = topic
        self.p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, **conf})
        self.acked: dict[int, tuple[bytes | None, bytes | None]] = {}
        self.errors: list = []
        self.sent_ms: list[float] = [0.0]  # wall clock of the last put

    def _report(self, err, msg):
        if err is not None:
            self.errors.append(err)
        else:
            self.acked[msg.offset()] = (msg.key(), msg.value())

    def put(self, key: bytes | None, value: bytes | None) -> None:
        self.sent_ms[0] = time.time() * 1000
        while True:
            try:
                self.p.produce(self.topic, key=key, value=value, partition=0, on_delivery=self._report)
                return
            except BufferError:
                self.p.poll(0.05)

    def flush(self) -> int:
        assert self.p.flush(60) == 0 and not self.errors, self.errors
        return max(self.acked) + 1

    def roll(self) -> int:
        """Make every record so far cleanable: after segment.ms the next record starts a new segment.
        Returns the offset of that record (everything before it is in closed segments)."""
        self.flush()
        since = time.monotonic()
        until(lambda: time.monotonic() - since > ROLL_MS / 1000, 10, "segment.ms passed")
        self.put(b"roll", b"%d" % time.time_ns())
        self.flush()
        return max(self.acked)

    def latest(self, below: int) -> dict[bytes, tuple[int, bytes | None]]:
        out = {}
        for off in sorted(self.acked):
            if off < below:
                k, v = self.acked[off]
                out[k] = (off, v)
        return out


def read_all(bootstrap: str, topic: str, end: int, isolation: str = "read_uncommitted") -> list:
    """(offset, key, value) of every record in [0, end) as confluent-kafka delivers them."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("r"), "enable.auto.commit": False,
                  "isolation.level": isolation, "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    if c.position([TopicPartition(topic, 0)])[0].offset >= end:
                        return [r for r in out if r[0] < end]
                    continue
                raise AssertionError(m.error())
            out.append((m.offset(), m.key(), m.value()))
    finally:
        c.close()
    raise AssertionError(f"did not reach offset {end}: {len(out)} records read")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from broker.testing import BrokerProcess

    with BrokerProcess(tmp_path_factory.mktemp("compaction"), config=BROKER) as b:
        yield b


def _wait_cleaned(broker, topic: str, offset: int) -> None:
    until(lambda: cleaned_to(broker, topic) >= offset, 60, f"{topic} cleaned up to {offset}")


# ------------------------------------------------------------------ the scenario
def delete_horizons(broker, topic: str) -> set[int]:
    """KIP-534 delete horizons written in the batch headers of the topic's segment files."""
    from protocol.records import DELETE_HORIZON_MASK, HEADER, HEADER_SIZE

    out = set()
    d = os.path.join(str(broker.data_dir), f"{topic}-0")
    for name in sorted(os.listdir(d)):
        if not name.endswith(".log"):
            continue
        with open(os.path.join(d, name), "rb") as f:
            data = f.read()
        pos = 0
        while pos + HEADER_SIZE <= len(data):
            h = HEADER.unpack_from(data, pos)
            if h[5] & DELETE_HORIZON_MASK:
                out.add(h[7])
            pos += h[1] + 12
    return out


# ------------------------------------------------------------------ the scenario
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_latest_value_per_key_tombstones_until_delete_retention(broker, codec):
    if codec not in ("none", "gzip") and not compression.available(
            {"snappy": compression.SNAPPY, "lz4": compression.LZ4, "zstd": compression.ZSTD}[codec]):
        missing_input("the optional extra sharebroker[compression] (in the test extra)")
    bs = broker.bootstrap
    retention_ms = 2000
    topic = create(bs, delete_retention_ms=retention_ms)
    w = Writer(bs, topic, **{"compression.type": codec, "batch.num.messages": 500})
    n_keys = 1000
    for i in range(100_000):
        w.put(b"key-%04d" % (i % n_keys), b"value-%d-%s" % (i, b"x" * (i % 17)))
    tombstones_at = time.time() * 1000
    for k in range(100):  # 100 tombstones
        w.put(b"key-%04d" % k, None)
    roll = w.roll()
    _wait_cleaned(broker, topic, roll)
    want = w.latest(roll)
    got = read_all(bs, topic, roll)
    assert {k: (off, v) for off, k, v in got} == want  # the latest value of each key at its offset
    assert len(got) == n_keys  # exactly one record per key, tombstones included
    assert sum(1 for _, _, v in got if v is None) == 100
    assert all(w.acked[off] == (k, v) for off, k, v in got)  # offsets unchanged
    # the cleaning that first kept them gave their batches a delete horizon (KIP-534) of
    # delete.retention.ms later; passes after it remove them
    horizons = delete_horizons(broker, topic)
    assert horizons and min(horizons) >= tombstones_at + retention_ms
    roll2 = w.roll()  # a pass before the horizon keeps them
    _wait_cleaned(broker, topic, roll2)
    if time.time() * 1000 < min(horizons):
        assert sum(1 for r in read_all(bs, topic, roll) if r[2] is None) == 100

    def tombstones_gone():
        roll_n = w.roll()
        _wait_cleaned(broker, topic, roll_n)
        return not [r for r in read_all(bs, topic, roll) if r[2] is None]
    until(tombstones_gone, 60, "the tombstones to be removed after their delete horizon")
    assert time.time() * 1000 >= min(horizons)
    got = read_all(bs, topic, roll)
    assert {k: (off, v) for off, k, v in got} == {k: ov for k, ov in want.items() if ov[1] is not None}
    assert len(got) == n_keys - 100


def test_keyless_record_refused_on_a_compacted_topic(broker):
    bs = broker.bootstrap
    topic = create(bs)
    w = Writer(bs, topic)
    w.put(None, b"no key")
    w.p.flush(10)
    assert [e.code() for e in w.errors] == [KafkaError.INVALID_RECORD]
    w.errors.clear()
    w.put(b"k", b"v")
    assert w.flush() == 1
    # on the wire: Kafka's record errors (one per keyless record, by index) and summary message
    from protocol.messages import produce as P
    from protocol.records import build_batch
    from tests.wire import WireClient

    batch = build_batch([(b"a", b"1", []), (None, b"2", []), (None, b"3", [])])
    with WireClient(bs) as wire:
        resp = wire.request(P.ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[P.ProduceRequest.TopicProduceData(
            name=topic, partition_data=[P.ProduceRequest.PartitionProduceData(index=0, records=batch)])]), 9)
    part = resp.responses[0].partition_responses[0]
    message = f"Compacted topic cannot accept message without key in topic partition {topic}-0"
    assert part.error_code == KafkaError.INVALID_RECORD
    assert [(e.batch_index, e.batch_index_error_message) for e in part.record_errors] == [(1, message), (2, message)]
    assert part.error_message.startswith("One or more records have been rejected due to 2 record errors")


def test_kcat_and_kafka_python_read_the_cleaned_log(broker):
    bs = broker.bootstrap
    topic = create(bs)
    w = Writer(bs, topic)
    for i in range(5000):
        w.put(b"k%d" % (i % 50), b"v%d" % i)
    roll = w.roll()
    _wait_cleaned(broker, topic, roll)
    want = {k: (off, v) for k, (off, v) in w.latest(roll).items()}
    assert len(want) == 50
    from kafka import KafkaConsumer, TopicPartition as KTP

    kc = KafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, consumer_timeout_ms=3000)
    kc.assign([KTP(topic, 0)])
    kc.seek_to_beginning()
    seen = []
    for m in kc:
        seen.append((m.offset, m.key, m.value))
        if m.offset >= roll:
            break
    kc.close()
    assert {k: (off, v) for off, k, v in seen if off < roll} == want and len([s for s in seen if s[0] < roll]) == 50
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        missing_input("kcat (Debian package kcat; tools/test.sh installs it)")
    out = subprocess.run([kcat, "-C", "-b", bs, "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q",
                          "-f", "%o %k %s\n"], capture_output=True, timeout=60, check=True).stdout.decode()
    rows = [line.split(" ", 2) for line in out.splitlines()]
    assert {r[1].encode(): (int(r[0]), r[2].encode()) for r in rows if int(r[0]) < roll} == want
    assert len([r for r in rows if int(r[0]) < roll]) == 50


def broker_end_offset(bootstrap: str, topic: str) -> int:
    """The partition's high watermark (ListOffsets, read_uncommitted)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("w"), "isolation.level": "read_uncommitted"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=15, cached=False)[1]
    finally:
        c.close()


def set_topic_config(bootstrap: str, topic: str, **configs) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(k.replace("_", "."), str(v), incremental_operation=AlterConfigOpType.SET)
        for k, v in configs.items()])
    admin = AdminClient({"bootstrap.servers": bootstrap})  # referenced until the result is in
    admin.incremental_alter_configs([res])[res].result(15)


def test_aborted_records_removed_committed_kept(broker):
    """The aborted records are read (read_uncommitted) before the cleaner may run, then cleaned away."""
    bs = broker.bootstrap
    # no cleaning until the first read: a dirty ratio is never above 1 (any segment roll, e.g. on a
    # slow machine between the two transactions, would let the cleaner run before that read)
    topic = create(bs, min_cleanable_dirty_ratio=1)
    p = Producer({"bootstrap.servers": bs, "transactional.id": unique("tx"), "linger.ms": 5})
    p.init_transactions(15)
    p.begin_transaction()
    for i in range(50):
        p.produce(topic, key=b"k%d" % i, value=b"aborted-%d" % i, partition=0)
    # librdkafka drops the records it has not sent yet at abort_transaction(): all 50 must be in the log first
    assert p.flush(60) == 0
    assert broker_end_offset(bs, topic) == 50
    p.abort_transaction(15)
    p.begin_transaction()
    for i in range(25, 75):
        p.produce(topic, key=b"k%d" % i, value=b"committed-%d" % i, partition=0)
    p.commit_transaction(15)
    w = Writer(bs, topic)
    w.put(b"other", b"plain")
    roll = w.roll()
    before = read_all(bs, topic, roll)  # read_uncommitted: the aborted records are still there
    assert sum(1 for _, _, v in before if v.startswith(b"aborted")) == 50
    assert cleaned_to(broker, topic) == -1
    set_topic_config(bs, topic, min_cleanable_dirty_ratio=0)
    _wait_cleaned(broker, topic, roll)
    after = read_all(bs, topic, roll)
    assert not [r for r in after if r[2].startswith(b"aborted")]
    assert sorted(v for _, _, v in after if v.startswith(b"committed")) == sorted(
        b"committed-%d" % i for i in range(25, 75))
    assert read_all(bs, topic, roll, "read_committed") == after


def test_a_deleted_key_stays_deleted_after_the_producer_once_aborted(broker):
    """A transactional producer (Kafka Streams' exactly-once changelogs) aborted once, then deletes a
    key in a later transaction: the tombstone supersedes the old value as for any producer (the
    cleaner once mapped that producer's later records as aborted, so the old value stayed and came
    back when the tombstone's delete horizon passed)."""
    bs = broker.bootstrap
    topic = create(bs, delete_retention_ms=0)
    p = Producer({"bootstrap.servers": bs, "transactional.id": unique("tx"), "linger.ms": 5})
    p.init_transactions(15)
    p.begin_transaction()
    p.produce(topic, key=b"a", value=b"aborted", partition=0)
    p.flush(15)
    p.abort_transaction(15)
    w = Writer(bs, topic)
    w.put(b"other", b"plain")
    roll = w.roll()
    _wait_cleaned(broker, topic, roll)  # the abort now lies below the cleaner's checkpoint
    for value in (b"old", None):  # then a value and its tombstone, each committed
        p.begin_transaction()
        p.produce(topic, key=b"k", value=value, partition=0)
        p.commit_transaction(15)
    roll = w.roll()
    _wait_cleaned(broker, topic, roll)
    assert [v for _, k, v in read_all(bs, topic, roll) if k == b"k"] in ([None], [])


# ------------------------------------------------------------------ share groups (issue 20, item 5)
def test_share_group_consumes_a_topic_while_it_is_cleaned(broker):
    """Offsets compaction removes inside or ahead of the in-flight window are gaps: every live record
    is delivered, none twice, and the KIP-1226 lag ends at 0."""
    import threading

    from tests.integration.test_share_consumers import consumer, new_group
    from tests.integration.test_share_offsets_admin import lags

    bs = broker.bootstrap
    topic = create(bs, internal_segment_bytes=32 * 1024)
    group = new_group(bs)
    w = Writer(bs, topic)
    done = threading.Event()
    rolled: list[int] = []

    def produce():
        try:
            for r in range(5):
                for i in range(2000):
                    w.put(b"k%d" % (i % 150), b"r%d-%d" % (r, i))
                w.flush()
                time.sleep(0.3)  # let the cleaner work between rounds (the consumer keeps polling)
            rolled.append(w.roll())
        finally:
            done.set()

    c = consumer(bs, group, topic)
    delivered: list[tuple] = []
    cleaned_while_consuming = False
    t = threading.Thread(target=produce, daemon=True)
    t.start()
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline:
            for m in c.poll(0.3) or []:
                assert m.error() is None, m.error()
                delivered.append((m.offset(), m.key(), m.value()))
            cleaned_while_consuming |= not done.is_set() and cleaned_to(broker, topic) > 0
            if done.is_set() and rolled and cleaned_to(broker, topic) >= rolled[0]:
                if lags(bs, group).get((topic, 0), (0, -1))[1] == 0:
                    break
        else:
            raise AssertionError(f"lag did not reach 0: {lags(bs, group)}")
    finally:
        c.close()
        t.join(30)
    assert rolled and cleaned_while_consuming
    offsets = [off for off, _, _ in delivered]
    assert len(offsets) == len(set(offsets)), "a record was delivered twice"
    assert all(w.acked[off] == (k, v) for off, k, v in delivered)
    live = {off for off, _v in w.latest(max(w.acked) + 1).values()}
    assert live <= set(offsets), f"live records never delivered: {sorted(live - set(offsets))[:10]}"


def _batch_counts(broker, topic: str) -> dict[int, int]:
    """base offset -> record count of every batch in the topic's segment files."""
    from protocol.records import HEADER, HEADER_SIZE
    out = {}
    d = os.path.join(str(broker.data_dir), f"{topic}-0")
    for name in sorted(os.listdir(d)):
        if name.endswith(".log"):
            with open(os.path.join(d, name), "rb") as f:
                data = f.read()
            pos = 0
            while pos + HEADER_SIZE <= len(data):
                h = HEADER.unpack_from(data, pos)
                out[h[0]] = h[-1]
                pos += h[1] + 12
    return out


def test_a_batch_the_cleaner_emptied_is_a_gap_for_a_share_group(broker):
    """The cleaner keeps the last batch of each producer id even when none of its records is left
    (its producer state), as Kafka does. Its offsets hold no record: a share group treats them as a
    gap (archived, never acquired). Acquired alone (MaxRecords 1) and sent, the range held no record,
    librdkafka never acknowledged it and the lag stayed at 1 until the acquisition lock expired
    (60 s here)."""
    from tests.integration.test_share_consumers import consumer, new_group
    from tests.integration.test_share_offsets_admin import lags

    bs = broker.bootstrap
    topic = create(bs)
    old = Writer(bs, topic, **{"enable.idempotence": True})
    old.put(b"k", b"old")
    old.flush()
    w = Writer(bs, topic)
    w.put(b"k", b"new")
    end = w.roll()
    _wait_cleaned(broker, topic, end)
    assert _batch_counts(broker, topic).get(0) == 0, "the idempotent producer's batch is kept, emptied"
    group = new_group(bs, share_record_lock_duration_ms="60000")
    c = consumer(bs, group, topic, max_poll_records=1)
    got: list[tuple] = []
    try:
        def settled():
            got.extend((m.offset(), m.value()) for m in c.poll(0.3) or [] if m.error() is None)
            return len(got) >= 2 and lags(bs, group).get((topic, 0), (0, -1))[1] == 0
        until(settled, 30, "every record delivered and acknowledged, lag 0")
    finally:
        c.close()
    assert sorted(got) == [(1, b"new"), (end, w.acked[end][1])]


# ------------------------------------------------------------------ internal topics (item 2)
def _commit(bs: str, group: str, topic: str, offset: int) -> None:
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        c.close()


def _committed(bs: str, group: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False})
    try:
        return c.committed([TopicPartition(topic, 0)], timeout=15)[0].offset
    finally:
        c.close()


def test_consumer_offsets_compacted_and_replayed_after_restart(tmp_path):
    """__consumer_offsets is compacted: a live group's offset survives cleaning and a restart, a deleted
    group's tombstones remove it, and the log keeps about one record per key."""
    from broker.testing import BrokerProcess

    b = BrokerProcess(tmp_path / "d", config={**BROKER, "log.roll.ms": str(ROLL_MS),
                                              "log.cleaner.min.cleanable.ratio": "0",
                                              "log.cleaner.delete.retention.ms": "0",
                                              "sharebroker.metrics.listener": "127.0.0.1:0"}).start()
    try:
        bs = b.bootstrap
        topic = create(bs)
        live, doomed = unique("live"), unique("doomed")
        c = Consumer({"bootstrap.servers": bs, "group.id": live, "enable.auto.commit": False})
        for i in range(400):
            c.commit(offsets=[TopicPartition(topic, 0, i + 1)], asynchronous=False)
        c.close()
        _commit(bs, doomed, topic, 7)
        admin = AdminClient({"bootstrap.servers": bs})
        admin.delete_consumer_groups([doomed])[doomed].result(15)
        offsets_dir = os.path.join(str(b.data_dir), "__consumer_offsets-0")
        roller = unique("roller")

        def offsets_topic() -> tuple[int, int]:
            """(records stored, offsets written: the offset after the last batch, which cleaning keeps)."""
            from protocol.records import HEADER

            n = end = 0
            for name in os.listdir(offsets_dir):
                if name.endswith(".log"):
                    with open(os.path.join(offsets_dir, name), "rb") as f:
                        data = f.read()
                    pos = 0
                    while pos + 61 <= len(data):
                        h = HEADER.unpack_from(data, pos)
                        n += h[12]
                        end = max(end, h[0] + h[6] + 1)
                        pos += h[1] + 12
            return n, end

        def records_in_offsets_topic() -> int:
            return offsets_topic()[0]
        # the 400 commits were written (the cleaner may have compacted some already: log.roll.ms is short)
        assert offsets_topic()[1] >= 400

        def cleaned() -> bool:
            # a commit after log.roll.ms rolls the offsets topic: everything before it is cleanable
            time.sleep(ROLL_MS / 1000)
            _commit(bs, roller, topic, 1)
            return records_in_offsets_topic() < 50
        until(cleaned, 60, "__consumer_offsets to be cleaned")
        import urllib.request

        text = urllib.request.urlopen(b.metrics_url, timeout=10).read().decode()
        gauges = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
                  if line.startswith("kafka_log_logcleaner")}
        assert gauges["kafka_log_logcleaner_cleaner_recopy_percent"] < 100
        assert gauges["kafka_log_logcleaner_deadthreadcount"] == 0
        assert 0 <= gauges["kafka_log_logcleanermanager_time_since_last_run_ms"] < 60_000
        assert 0 <= gauges["kafka_log_logcleanermanager_max_dirty_percent"] <= 100
        assert [v for k, v in gauges.items() if k.startswith("kafka_log_logcleanermanager_uncleanable_partitions_count")
                and "logDirectory=" in k] == [0]
        b.kill9()
        b.start()
        assert _committed(bs, live, topic) == 400
        listed = {g.group_id for g in admin.list_consumer_groups().result(15).valid}
        assert live in listed and doomed not in listed
    finally:
        b.stop()
