"""Storage faults met for real (issue 25): the broker's data directory on a 3 MB tmpfs that fills up.

The test mounts the tmpfs itself (root only; skipped with the reason otherwise) and unmounts it at
teardown, after the broker has stopped. Real broker subprocess, real confluent-kafka clients.

- Disk full with an index entry per batch (``index.interval.bytes=1``): an idempotent producer
  sends small batches until the disk is full, several times over, space is freed, and the broker
  is restarted (kill -9, then a clean stop): every acknowledged record is readable with its value,
  offsets strictly increasing, no base offset stored twice. Before the fix an index write that
  failed after its batch was written left the batch in the file without moving the next offset;
  each retry wrote the batch again at the same base offset, and recovery cut the log there.
- ``flush.messages=1`` on a full disk: every Produce is answered (success, or
  KAFKA_STORAGE_ERROR) well before ``message.timeout.ms``. Before the fix the checkpoint write
  after the fsync raised before the produce's answer was released: the client timed out.
Kafka takes the log directory offline on the first IOException; we answer KAFKA_STORAGE_ERROR
for the partition and carry on when space comes back (broker/log/README.md, "Failed writes").
"""
from __future__ import annotations

import os
import struct
import subprocess
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

BATCH_HEAD = struct.Struct(">qi")
PARTS = 8


@pytest.fixture
def small_fs(tmp_path):
    """A 3 MB tmpfs mounted at a fresh directory (request it before ``broker_factory``, so the
    broker stops before the unmount)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "fs"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"mount -t tmpfs is not permitted here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def free_bytes(path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(path, leave: int) -> None:
    """A filler file taking all but ``leave`` bytes of the file system (it is the test's, on the tmpfs)."""
    with open(path / "filler", "ab") as f:
        want = max(free_bytes(path) - leave, 0)
        chunk = b"\0" * 65536
        try:
            while want > 0:
                f.write(chunk[:min(want, len(chunk))])
                f.flush()
                want -= min(want, len(chunk))
        except OSError:
            pass  # full already


def create_topic(bootstrap: str, name: str, partitions: int, configs: dict) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=configs)])[name].result(15)


def stored_base_offsets(partition_dir) -> list[int]:
    """Base offsets of the whole batches in a partition's segment files, in file order."""
    out = []
    for name in sorted(n for n in os.listdir(partition_dir) if n.endswith(".log")):
        data = open(os.path.join(partition_dir, name), "rb").read()
        pos = 0
        while pos + 12 <= len(data):
            base, length = BATCH_HEAD.unpack_from(data, pos)
            if pos + 12 + length > len(data):
                break
            out.append(base)
            pos += 12 + length
    return out


def check_every_acknowledged_record(bootstrap: str, topic: str, acked: dict, consume_range) -> None:
    by_part: dict[int, dict[int, bytes]] = {}
    for part, offset, value in acked.values():
        by_part.setdefault(part, {})[offset] = value
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        highs = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
                 for p in range(PARTS)}
    finally:
        c.close()
    for part, want in by_part.items():
        assert highs[part] > max(want), f"partition {part}: high watermark {highs[part]} below acknowledged records"
        msgs = consume_range(bootstrap, topic, part, 0, highs[part])
        offsets = [m.offset() for m in msgs]
        assert offsets == sorted(set(offsets)), f"partition {part}: offsets repeated or out of order"
        got = {m.offset(): m.value() for m in msgs}
        lost = [o for o in want if got.get(o) != want[o]]
        assert not lost, f"partition {part}: {len(lost)} acknowledged records lost or changed, e.g. offset {lost[0]}"


def test_disk_full_with_an_index_entry_per_batch_loses_no_acknowledged_record(small_fs, broker_factory,
                                                                               consume_range):
    data = small_fs / "data"
    b = broker_factory(data_dir=data)
    create_topic(b.bootstrap, "full", PARTS, {"index.interval.bytes": "1"})
    acked: dict[bytes, tuple[int, int, bytes]] = {}
    failed: list[str] = []
    last_ack = [time.monotonic()]

    def on_delivery(err, msg):
        if err is None:
            acked[msg.key()] = (msg.partition(), msg.offset(), msg.value())
            last_ack[0] = time.monotonic()
        else:
            failed.append(str(err))

    p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 0,
                  "batch.num.messages": 3, "message.timeout.ms": 120000, "retry.backoff.ms": 10,
                  "retry.backoff.max.ms": 100, "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 200})
    sent = 0
    episodes_full = 0
    for episode in range(4):
        fill(small_fs, leave=160 * 1024)
        deadline = time.monotonic() + 60
        # send until the disk is full: acknowledgements stop while the broker answers KAFKA_STORAGE_ERROR
        # and the client retries; hold it full a little while (many failed appends and retries)
        while not (free_bytes(small_fs) < 8192 and time.monotonic() - last_ack[0] > 1.5):
            assert time.monotonic() < deadline, f"the disk did not fill up (free {free_bytes(small_fs)})"
            if sent - len(acked) - len(failed) < 400:
                key = b"k%07d" % sent
                p.produce("full", key=key, value=b"value-%07d-" % sent + b"x" * 20, partition=sent % PARTS,
                          on_delivery=on_delivery)
                sent += 1
            p.poll(0 if sent % 20 else 0.001)
        episodes_full += 1
        os.unlink(small_fs / "filler")  # space comes back: the retries go through
        assert p.flush(60) == 0, "records still undelivered after space came back"
    assert not failed, f"{len(failed)} deliveries failed, e.g. {failed[:3]}"
    assert len(acked) == sent and episodes_full == 4
    for part in range(PARTS):
        bases = stored_base_offsets(data / f"full-{part}")
        assert bases == sorted(set(bases)), f"partition {part}: a batch is stored twice or out of order"
    check_every_acknowledged_record(b.bootstrap, "full", acked, consume_range)
    b.kill9()
    b.start()
    check_every_acknowledged_record(b.bootstrap, "full", acked, consume_range)
    b.stop()
    b.start()
    check_every_acknowledged_record(b.bootstrap, "full", acked, consume_range)


def test_flush_messages_on_a_full_disk_answers_every_produce(small_fs, broker_factory):
    b = broker_factory({"sharebroker.metrics.listener": "127.0.0.1:0"}, data_dir=small_fs / "data")
    create_topic(b.bootstrap, "synced", 1, {"flush.messages": "1"})
    answers: list[tuple[float, KafkaError | None]] = []
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 0, "retries": 0,
                  "enable.idempotence": False, "message.timeout.ms": 10000, "request.timeout.ms": 10000})

    def send(i: int) -> tuple[float, KafkaError | None]:
        t0 = time.monotonic()
        got: list = []
        p.produce("synced", value=b"v%05d" % i, on_delivery=lambda err, _msg: got.append(err))
        p.flush(15)
        assert got, f"message {i}: no delivery report at all"
        return time.monotonic() - t0, got[0]

    assert send(0)[1] is None  # the segment file has a page with room left
    fill(small_fs, leave=0)
    for i in range(1, 61):  # the page fills up meanwhile: appends start failing too
        answers.append(send(i))
    slow = [(i, t, str(e)) for i, (t, e) in enumerate(answers, 1) if t > 5]
    assert not slow, f"produce answered late or timed out: {slow[:3]}"
    errors = {e.code() for _t, e in answers if e is not None}
    assert errors <= {KafkaError.KAFKA_STORAGE_ERROR}, errors
    assert any(e is None for _t, e in answers), "no append went through while the segment page had room"
    with urllib.request.urlopen(b.metrics_url, timeout=10) as r:
        metrics = r.read().decode()
    counted = [line for line in metrics.splitlines()
               if line.startswith('sharebroker_log_storage_errors_total{topic="synced"')]
    assert counted and float(counted[0].split()[-1]) > 0, "storage errors were not counted"
    with urllib.request.urlopen(b.metrics_url.removesuffix("metrics"), timeout=10) as r:
        page = r.read().decode()  # the status page lists the partition under "Storage faults"
    assert 'class="storage-faults"' in page and "<td>synced</td>" in page
    os.unlink(small_fs / "filler")
    assert send(100)[1] is None
