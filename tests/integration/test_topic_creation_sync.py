"""Topic admin in durable mode (broker/log/manager.py, ``create_topic_staged``, ``add_partitions_staged``,
``delete_topic_durably``): a new topic's files are made, moved into place and synced on a worker of their
own, so a produce's acknowledgement never waits behind them and the event loop makes no file system call
per partition; CreateTopics, CreatePartitions, DeleteTopics and auto-creation answer once their change is
synced, and a failed sync answers KAFKA_STORAGE_ERROR (none for auto-creation) and leaves the previous
state, across a restart too.

The faults are the kernel's, on the real broker: ``strace`` attached to its process holds a system call
of a CreateTopics for a while (``inject=mkdir:delay_enter``), or makes the fsync of the data directory
and of the topic metadata directory fail with EIO (``-P DIR -e inject=fsync:error=EIO``)."""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, NewTopic,
                                  ResourceType)

from broker.testing import BrokerProcess
from tests.missing_inputs import missing_input
from tests.support import until

MKDIR = 83  # x86_64 syscall number of mkdir, as /proc/PID/task/TID/syscall shows it
STATS = (4, 6, 262, 332)  # stat, lstat, newfstatat, statx


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
    return _held_in(pid, MKDIR)


def _held_in(pid: int, *numbers: int) -> bool:
    """A thread of ``pid`` is stopped by the tracer in one of the system calls ``numbers``."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/syscall") as f:
                call = f.read().split()
        except OSError:
            continue
        if call and call[0] in {str(n) for n in numbers} and _status(pid, tid).get("State", "").startswith("t"):
            return True
    return False


def _failing_syncs(pid: int, data_dir) -> subprocess.Popen:
    """Every fsync of the data directory and of the topic metadata directory fails with EIO."""
    return _strace(pid, "-P", str(data_dir), "-P", str(data_dir / "meta" / "topics"),
                   "-e", "trace=fsync,fdatasync", "-e", "inject=fsync,fdatasync:error=EIO")


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


@pytest.mark.skipif(platform.machine() != "x86_64", reason="reads x86_64 system call numbers")
def test_a_produce_is_acknowledged_while_moving_a_created_partition_into_place_is_held(tmp_path):
    """Moving the made partitions into place and opening them happen off the event loop: a produce is
    acknowledged while the look-up of the new topic's first partition directory is held (strace's ``-P``
    matches that path in a stat call, not as the target of a rename)."""
    data_dir = tmp_path / "data"
    calls = "stat,lstat,newfstatat,statx"
    with BrokerProcess(data_dir) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert admin.create_topics([NewTopic("steady", 1, 1)])["steady"].exception(60) is None
        _deliver(broker.bootstrap, "steady", b"before", 30)
        tracer = _strace(broker.proc.pid, "-P", str(data_dir / "big-0"), "-e", f"trace={calls}",
                         "-e", f"inject={calls}:delay_enter=25000000:when=1")
        try:
            created = admin.create_topics([NewTopic("big", 20, 1)], request_timeout=120)["big"]
            until(lambda: _held_in(broker.proc.pid, *STATS), 30, "the look-up of big-0 held")
            _deliver(broker.bootstrap, "steady", b"meanwhile", 15)
            assert not created.done() and _held_in(broker.proc.pid, *STATS), "the look-up was not held throughout"
        finally:
            _detach(tracer)
        assert created.exception(120) is None
        _deliver(broker.bootstrap, "big", b"new", 30)
        assert _read(broker.bootstrap, "steady", 0, 2) == [b"before", b"meanwhile"]


def _loop_file_calls(broker: BrokerProcess, out, act) -> list[str]:
    """The file system calls the broker's event-loop thread (its main thread) makes while ``act()`` runs."""
    if shutil.which("strace") is None:
        missing_input("strace (tools/test.sh installs it)")
    pid = broker.proc.pid
    tracer = subprocess.Popen(["strace", "-qq", "-o", str(out), "-p", str(pid),
                               "-e", "trace=%file,getdents64,fsync,fdatasync,ftruncate"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        def attached() -> bool:
            if tracer.poll() is not None:
                pytest.skip(f"strace cannot attach here: {tracer.stderr.read().strip()}")
            return _status(pid, str(pid)).get("TracerPid", "0") != "0"
        until(attached, 30, "strace attached to the event-loop thread")
        act()
    finally:
        _detach(tracer)
    return [line for line in out.read_text().splitlines() if line.strip()]


def test_the_event_loop_makes_no_file_system_call_per_created_or_deleted_partition(tmp_path):
    with BrokerProcess(tmp_path / "data") as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert admin.create_topics([NewTopic("warm", 1, 1)])["warm"].exception(60) is None

        def create(name: str, partitions: int):
            return lambda: admin.create_topics([NewTopic(name, partitions, 1)])[name].exception(120)
        small = _loop_file_calls(broker, tmp_path / "small.strace", create("small", 10))
        big = _loop_file_calls(broker, tmp_path / "big.strace", create("big", 400))
        assert len(big) <= len(small) + 5, big[:40]
        assert len(big) <= 10, big[:40]
        assert len(admin.list_topics(timeout=10).topics["big"].partitions) == 400

        deleted = _loop_file_calls(broker, tmp_path / "delete.strace",
                                   lambda: admin.delete_topics(["big"])["big"].exception(120))
        assert len(deleted) <= 10, deleted[:40]
        until(lambda: not [d for d in os.listdir(tmp_path / "data") if d.startswith("big-") or d.endswith("-delete")],
              60, "the deleted topic's directories removed")


def test_delete_topics_whose_sync_fails_answers_kafka_storage_error_and_keeps_the_topic(tmp_path):
    data_dir = tmp_path / "data"
    with BrokerProcess(data_dir) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert admin.create_topics([NewTopic("t", 3, 1)])["t"].exception(60) is None
        _deliver(broker.bootstrap, "t", b"kept", 30)
        tracer = _failing_syncs(broker.proc.pid, data_dir)
        try:
            err = admin.delete_topics(["t"], request_timeout=60)["t"].exception(60)
        finally:
            _detach(tracer)
        assert err is not None and err.args[0].code() == KafkaError.KAFKA_STORAGE_ERROR, err
        assert len(admin.list_topics(timeout=10).topics["t"].partitions) == 3
        admin = None
        broker.restart()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert len(admin.list_topics(timeout=10).topics["t"].partitions) == 3
        assert _read(broker.bootstrap, "t", 0, 1) == [b"kept"]

        assert admin.delete_topics(["t"])["t"].exception(60) is None  # the disk works again
        admin = None
        broker.restart()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert "t" not in admin.list_topics(timeout=10).topics


def test_create_partitions_whose_sync_fails_answers_kafka_storage_error_and_keeps_the_count(tmp_path):
    data_dir = tmp_path / "data"
    with BrokerProcess(data_dir) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert admin.create_topics([NewTopic("t", 2, 1)])["t"].exception(60) is None
        tracer = _failing_syncs(broker.proc.pid, data_dir)
        try:
            err = admin.create_partitions([NewPartitions("t", 40)], request_timeout=60)["t"].exception(60)
        finally:
            _detach(tracer)
        assert err is not None and err.args[0].code() == KafkaError.KAFKA_STORAGE_ERROR, err
        assert len(admin.list_topics(timeout=10).topics["t"].partitions) == 2
        assert sorted(d for d in os.listdir(data_dir) if d.startswith("t-")) == ["t-0", "t-1"]
        admin = None
        broker.restart()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert len(admin.list_topics(timeout=10).topics["t"].partitions) == 2

        assert admin.create_partitions([NewPartitions("t", 40)])["t"].exception(60) is None
        _deliver(broker.bootstrap, "t", b"kept", 30)
        admin = None
        broker.restart()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert len(admin.list_topics(timeout=10).topics["t"].partitions) == 40


def test_a_topic_is_auto_created_only_once_durable(tmp_path):
    data_dir = tmp_path / "data"
    with BrokerProcess(data_dir) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        tracer = _failing_syncs(broker.proc.pid, data_dir)
        try:
            producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 4000})
            errors: list = []
            producer.produce("auto", b"lost", on_delivery=lambda err, _m: errors.append(err))
            producer.flush(30)
            assert len(errors) == 1 and errors[0] is not None, errors
            assert "auto" not in admin.list_topics(timeout=10).topics
            metas = [json.loads(p.read_text()) for p in (data_dir / "meta" / "topics").glob("*.json")]
            assert [m for m in metas if m["name"] == "auto"] == []
        finally:
            producer = None  # its metadata requests (each an auto-creation) stop
            _detach(tracer)
        _deliver(broker.bootstrap, "auto", b"kept", 30)  # the disk works again
        admin = None
        broker.restart()
        assert _read(broker.bootstrap, "auto", 0, 1) == [b"kept"]


FSYNC = 74  # x86_64 syscall number of fsync


def _set_retention(admin: AdminClient, topic: str, value: str):
    """IncrementalAlterConfigs SET retention.ms on ``topic``: its future."""
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", value, incremental_operation=AlterConfigOpType.SET)])
    return admin.incremental_alter_configs([res], request_timeout=60)[res]


def _retention(admin: AdminClient, topic: str) -> str:
    res = ConfigResource(ResourceType.TOPIC, topic)
    return admin.describe_configs([res])[res].result(30)["retention.ms"].value


def test_alter_configs_whose_sync_fails_answers_kafka_storage_error_and_keeps_the_configs(tmp_path):
    data_dir = tmp_path / "data"
    with BrokerProcess(data_dir) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert admin.create_topics([NewTopic("t", 1, 1, config={"retention.ms": "111111"})])["t"].exception(60) is None
        tracer = _failing_syncs(broker.proc.pid, data_dir)
        try:
            err = _set_retention(admin, "t", "222222").exception(60)
        finally:
            _detach(tracer)
        assert err is not None and err.args[0].code() == KafkaError.KAFKA_STORAGE_ERROR, err
        assert _retention(admin, "t") == "111111"
        admin = None
        broker.restart()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert _retention(admin, "t") == "111111"

        assert _set_retention(admin, "t", "333333").exception(60) is None  # the disk works again
        admin = None
        broker.restart()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert _retention(admin, "t") == "333333"


@pytest.mark.skipif(platform.machine() != "x86_64", reason="reads x86_64 system call numbers")
def test_alter_configs_during_a_create_partitions_keeps_both_across_a_restart(tmp_path):
    data_dir = tmp_path / "data"
    with BrokerProcess(data_dir) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert admin.create_topics([NewTopic("t", 2, 1)])["t"].exception(60) is None
        meta, = [p for p in (data_dir / "meta" / "topics").glob("*.json") if json.loads(p.read_text())["name"] == "t"]
        # the CreatePartitions' metadata write is held in the fsync of its temporary file for 3 s
        tracer = _strace(broker.proc.pid, "-P", f"{meta}.tmp", "-e", "trace=fsync",
                         "-e", "inject=fsync:delay_enter=3000000:when=1")
        try:
            grown = admin.create_partitions([NewPartitions("t", 40)], request_timeout=60)["t"]
            until(lambda: _held_in(broker.proc.pid, FSYNC), 30, "the CreatePartitions' metadata fsync held")
            other = AdminClient({"bootstrap.servers": broker.bootstrap})  # a connection of its own
            altered = _set_retention(other, "t", "444444")
            assert grown.exception(60) is None
            assert altered.exception(60) is None
        finally:
            _detach(tracer)
            other = None
        assert len(admin.list_topics(timeout=10).topics["t"].partitions) == 40
        assert _retention(admin, "t") == "444444"
        admin = None
        broker.restart()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert len(admin.list_topics(timeout=10).topics["t"].partitions) == 40
        assert _retention(admin, "t") == "444444"
