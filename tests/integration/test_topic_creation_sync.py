"""CreateTopics in durable mode (broker/log/manager.py, ``create_topic_staged``): a new topic's files are made
and synced on a worker of their own, so a produce's acknowledgement never waits behind them; the topic is
synced before the answer, and a failed sync answers KAFKA_STORAGE_ERROR and leaves nothing.

The faults are the kernel's, on the real broker: ``strace`` attached to its process holds the first
directory creation of a CreateTopics for a while (``inject=mkdir:delay_enter``), or makes the fsync of
the data directory fail with EIO (``-P DIR -e inject=fsync:error=EIO``)."""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.testing import BrokerProcess
from tests.missing_inputs import missing_input
from tests.support import until

MKDIR = 83  # x86_64 syscall number of mkdir, as /proc/PID/task/TID/syscall shows it


def _strace(pid: int, *args: str) -> subprocess.Popen:
    """strace attached to every thread of ``pid`` with ``args``; returns once every thread is traced."""
    if shutil.which("strace") is None:
        missing_input("strace (tools/test.sh installs it)")
    proc = subprocess.Popen(["strace", "-f", "-qq", "-o", "/dev/null", "-p", str(pid), *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def attached() -> bool:
        if proc.poll() is not None:
            pytest.skip(f"strace cannot attach here: {proc.stderr.read().strip()}")
        return all(_status(pid, tid).get("TracerPid", "0") != "0" for tid in os.listdir(f"/proc/{pid}/task"))
    until(attached, 30, "strace attached to every thread of the broker")
    return proc


def _detach(proc: subprocess.Popen) -> None:
    proc.terminate()  # strace detaches; a held system call goes on
    proc.wait(30)


def _status(pid: int, tid: str) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    except FileNotFoundError:  # the thread ended
        return {}


def _held_in_mkdir(pid: int) -> bool:
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/syscall") as f:
                call = f.read().split()
        except OSError:
            continue
        if call and call[0] == str(MKDIR) and _status(pid, tid).get("State", "").startswith("t"):
            return True
    return False


def _deliver(bootstrap: str, topic: str, value: bytes, timeout: float) -> None:
    """One record to partition 0 of ``topic``, acknowledged (acks=all) within ``timeout`` seconds."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                         "message.timeout.ms": int(timeout * 1000)})
    errors: list = []
    producer.produce(topic, value, partition=0, on_delivery=lambda err, _m: errors.append(err))
    assert producer.flush(timeout) == 0 and errors == [None], f"not acknowledged within {timeout} s: {errors}"


def _read(bootstrap: str, topic: str, partition: int, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "enable.auto.commit": False})
    got: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])

        def done() -> bool:
            for m in consumer.consume(10, 0.5):
                assert m.error() is None, m.error()
                got.append(m.value())
            return len(got) >= count
        until(done, 60, f"{count} records of {topic}-{partition}")
    finally:
        consumer.close()
    return got


@pytest.mark.skipif(platform.machine() != "x86_64", reason="reads x86_64 system call numbers")
def test_a_produce_is_acknowledged_while_a_create_topics_file_work_is_held(tmp_path):
    with BrokerProcess(tmp_path / "data") as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert admin.create_topics([NewTopic("steady", 1, 1)])["steady"].exception(60) is None
        _deliver(broker.bootstrap, "steady", b"before", 30)
        tracer = _strace(broker.proc.pid, "-e", "trace=mkdir", "-e", "inject=mkdir:delay_enter=25000000:when=1")
        try:
            created = admin.create_topics([NewTopic("big", 20, 1)], request_timeout=120)["big"]
            until(lambda: _held_in_mkdir(broker.proc.pid), 30, "the CreateTopics' first directory creation held")
            _deliver(broker.bootstrap, "steady", b"meanwhile", 15)  # acks=all: fsynced
            assert not created.done() and _held_in_mkdir(broker.proc.pid), "the creation was not held throughout"
        finally:
            _detach(tracer)
        assert created.exception(120) is None
        _deliver(broker.bootstrap, "big", b"new", 30)
        assert _read(broker.bootstrap, "steady", 0, 2) == [b"before", b"meanwhile"]


def test_create_topics_whose_sync_fails_answers_kafka_storage_error_and_leaves_nothing(tmp_path):
    data_dir = tmp_path / "data"
    with BrokerProcess(data_dir) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        tracer = _strace(broker.proc.pid, "-P", str(data_dir), "-e", "trace=fsync,fdatasync",
                         "-e", "inject=fsync,fdatasync:error=EIO")
        try:
            err = admin.create_topics([NewTopic("t", 30, 1)], request_timeout=60)["t"].exception(60)
        finally:
            _detach(tracer)
        assert err is not None and err.args[0].code() == KafkaError.KAFKA_STORAGE_ERROR, err
        assert "t" not in admin.list_topics(timeout=10).topics
        assert not [d for d in os.listdir(data_dir) if d.startswith("t-")]
        metas = [json.loads(p.read_text()) for p in (data_dir / "meta" / "topics").glob("*.json")]
        assert [m for m in metas if m["name"] == "t"] == []
        assert any("syncing a new topic" in line for line in broker.log_lines), broker.log_lines[-10:]

        assert admin.create_topics([NewTopic("t", 30, 1)])["t"].exception(60) is None  # the disk works again
        _deliver(broker.bootstrap, "t", b"kept", 30)
        admin = None
        broker.restart()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert len(admin.list_topics(timeout=10).topics["t"].partitions) == 30
        assert _read(broker.bootstrap, "t", 0, 1) == [b"kept"]
