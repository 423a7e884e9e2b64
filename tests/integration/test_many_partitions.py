"""A broker holding several times more partitions than its open-file limit (issue 33, at a test's
scale: 600 partitions under 128 descriptors): created, produced to, stopped cleanly (one file-system
sync, not six fsyncs per partition), restarted on the same data directory with every record
readable by one consumer of every partition (a Fetch of more partitions than descriptors: no storage
error), then the topic deleted (no partition fsynced, every directory gone)."""
from __future__ import annotations

import os

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.testing import BrokerProcess
from tests.support import until

PARTITIONS = 600
OPEN_FILES = 128


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _partition_dirs(data_dir, topic: str) -> int:
    return sum(1 for d in os.listdir(data_dir) if d.rsplit("-", 1)[0] == topic)


def _values(bootstrap: str, topic: str) -> dict[int, bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "enable.auto.commit": False})
    got: dict[int, bytes] = {}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])

        def done() -> bool:
            for m in consumer.consume(1000, 0.5):
                assert m.error() is None, m.error()
                got[m.partition()] = m.value()
            return len(got) == PARTITIONS
        until(done, 90, f"a record from each of {PARTITIONS} partitions")
    finally:
        consumer.close()
    return got


def test_many_more_partitions_than_descriptors_survive_a_clean_restart_and_a_deletion(tmp_path):
    broker = BrokerProcess(tmp_path / "data", open_files=OPEN_FILES, start_timeout=60)
    with broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert admin.create_topics([NewTopic("wide", PARTITIONS, 1)])["wide"].exception(60) is None
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        failed: list = []
        for p in range(PARTITIONS):
            producer.produce("wide", b"v%d" % p, partition=p,
                             on_delivery=lambda err, _m: failed.append(err) if err else None)
            producer.poll(0)
        assert producer.flush(90) == 0 and not failed, failed[:5]
        assert _fds(broker.proc.pid) < OPEN_FILES
        producer = admin = None

        assert broker.stop(timeout=60) == 0
        assert (broker.data_dir / ".clean_shutdown").exists(), "\n".join(broker.log_lines[-20:])
        broker.start()
        # one Fetch of every partition: more than the limit of descriptors, never a storage error
        assert _values(broker.bootstrap, "wide") == {p: b"v%d" % p for p in range(PARTITIONS)}
        assert _fds(broker.proc.pid) < OPEN_FILES
        failed_reads = [line for line in broker.log_lines if "reading the log failed" in line]
        assert not failed_reads, failed_reads[:3]

        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert admin.delete_topics(["wide"])["wide"].exception(60) is None
        until(lambda: _partition_dirs(broker.data_dir, "wide") == 0 and not any(
            d.endswith("-delete") for d in os.listdir(broker.data_dir)), 60, "the partition directories removed")
        assert "wide" not in admin.list_topics(timeout=10).topics
