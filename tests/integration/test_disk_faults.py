"""Real disk faults under a running broker (issue 25, item 7): a full disk during log cleaning, a file
system that turns read-only before SIGTERM. The test mounts the file systems itself (root: a small tmpfs,
an ext4 image on a loop device with ``errors=remount-ro``) and skips with the reason when it may not."""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import struct
import subprocess
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from broker.log.segment import CLEANED_SUFFIX
from broker.testing import BrokerProcess
from protocol.errors import Errors
from tests.support import until


def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True)


@contextlib.contextmanager
def tmpfs(path, size: str):
    os.makedirs(path, exist_ok=True)
    r = _run("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path))
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {r.stderr.strip()}")
    try:
        yield path
    finally:
        _run("umount", "-l", str(path))


class Ext4Disk:
    """An ext4 image on a loop device, mounted with errors=remount-ro."""

    def __init__(self, path, dev: str):
        self.path, self.dev = path, dev
        self.trigger = f"/sys/fs/ext4/{os.path.basename(dev)}/trigger_fs_error"

    def fail(self) -> None:
        """A file-system error: the kernel turns it read-only, as after an I/O error."""
        with open(self.trigger, "w") as f:
            f.write("test\n")

    def repair(self) -> None:
        """Unmount, fsck, mount again (what an operator does)."""
        assert _run("umount", str(self.path)).returncode == 0
        assert _run("e2fsck", "-fy", self.dev).returncode in (0, 1)
        assert _run("mount", "-o", "errors=remount-ro", self.dev, str(self.path)).returncode == 0


@contextlib.contextmanager
def ext4_on_loop(path, size_mb: int = 64):
    image = f"{path}.img"
    os.makedirs(path, exist_ok=True)
    with open(image, "wb") as f:
        f.truncate(size_mb << 20)
    r = _run("mkfs.ext4", "-q", "-F", image)
    if r.returncode != 0:
        pytest.skip(f"cannot make an ext4 file system: {r.stderr.strip()}")
    r = _run("losetup", "-f", "--show", image)
    if r.returncode != 0:
        pytest.skip(f"no loop device here: {r.stderr.strip()}")
    dev = r.stdout.strip()
    try:
        r = _run("mount", "-o", "errors=remount-ro", dev, str(path))
        if r.returncode != 0:
            pytest.skip(f"cannot mount {dev}: {r.stderr.strip()}")
        try:
            disk = Ext4Disk(path, dev)
            if not os.path.exists(disk.trigger):
                pytest.skip("this kernel has no /sys/fs/ext4/*/trigger_fs_error")
            yield disk
        finally:
            _run("umount", "-l", str(path))
    finally:
        _run("losetup", "-d", dev)
        os.unlink(image)


def _fill(path) -> str:
    """Fill the file system of ``path`` with one file, to the last byte; returns the file."""
    filler = os.path.join(path, "filler")
    with open(filler, "wb", buffering=0) as f:
        chunk = b"\0" * (64 << 10)
        try:
            while True:
                f.write(chunk)
        except OSError as e:
            assert e.errno == errno.ENOSPC
    return filler


def test_cleaning_that_meets_a_full_disk_is_tried_again_later(tmp_path):
    """A cleaning pass that runs out of space removes its partial files and leaves the partition
    cleanable: once space is back a later pass cleans it, without a restart. It was marked uncleanable
    until the restart (and the worker's traceback went into the broker's log)."""
    with tmpfs(tmp_path / "disk", "12m") as disk:
        broker = BrokerProcess(disk / "data", config={"log.cleaner.backoff.ms": "200",
                                                      "log.retention.check.interval.ms": "500"})
        broker.start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            # not compacted yet: the dirty section is written first
            cfg = {"cleanup.policy": "delete", "retention.ms": "-1", "internal.segment.bytes": "32768",
                   "min.cleanable.dirty.ratio": "0.01", "segment.ms": "600000"}
            admin.create_topics([NewTopic("kv", 1, 1, config=cfg)])["kv"].result(30)
            p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.size": 8192})
            # every key once, then the first 300 again: the first segments are kept almost whole, so the
            # first cleaned segment needs more than the free space
            for round_, keys in enumerate((1500, 300)):
                for k in range(keys):
                    p.produce("kv", key=f"k{k}".encode(), value=f"v{round_}-{k}".encode() * 8, partition=0)
                    p.poll(0)
            assert p.flush(60) == 0
            part = disk / "data" / "kv-0"
            assert len([n for n in os.listdir(part) if n.endswith(".log")]) > 3
            filler = _fill(disk)  # the cleaned output cannot be written now
            alter = ConfigResource("topic", "kv", incremental_configs=[
                ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
            os.truncate(filler, os.path.getsize(filler) - (16 << 10))  # room for the config, not the output
            admin.incremental_alter_configs([alter])[alter].result(30)
            until(lambda: any("No space left on device" in line for line in broker.log_lines), 30,
                  "the cleaner to meet the full disk")
            until(lambda: not [n for n in os.listdir(part) if n.endswith(CLEANED_SUFFIX)], 10,
                  "the failed pass's .cleaned files to go")
            assert not any("uncleanable" in line for line in broker.log_lines)
            assert any("storage error: log cleaning" in line for line in broker.log_lines)
            os.unlink(filler)
            until(lambda: any("cleaned kv-0" in line for line in broker.log_lines), 30,
                  "a later pass to clean the partition")
            # the latest value of every key is there
            c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": uuid.uuid4().hex,
                          "enable.auto.commit": False})
            latest: dict[bytes, bytes] = {}
            try:
                c.assign([TopicPartition("kv", 0, 0)])

                def read():
                    for m in c.consume(1000, 0.5):
                        assert m.error() is None, m.error()
                        latest[m.key()] = m.value()
                    return len(latest) == 1500 and all(latest[f"k{k}".encode()].startswith(b"v1-" if k < 300 else b"v0-")
                                                       for k in range(1500))
                until(read, 30, "the latest value of every key")
            finally:
                c.close()
        finally:
            broker.stop()


def test_sigterm_on_a_read_only_disk_closes_what_it_can_and_says_why(tmp_path):
    """The data directory's file system turns read-only (an ext4 error with errors=remount-ro), then
    SIGTERM: the broker closes every partition it can, logs the failure without a traceback, says in
    one line why the shutdown was not clean and exits 1. After fsck, a restart has every acknowledged
    record. It exited 1 with a traceback from the first partition that failed, the others left open."""
    with ext4_on_loop(tmp_path / "disk") as disk:
        broker = BrokerProcess(disk.path / "data")
        broker.start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            for f in admin.create_topics([NewTopic(f"t{i}", 3, 1) for i in range(4)]).values():
                f.result(30)
            p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
            acked: dict[tuple[str, int, int], bytes] = {}

            def delivered(err, msg):
                assert err is None, err
                acked[(msg.topic(), msg.partition(), msg.offset())] = msg.value()
            for i in range(1200):
                p.produce(f"t{i % 4}", value=f"value-{i}".encode(), partition=i % 3, on_delivery=delivered)
                p.poll(0)
            assert p.flush(60) == 0 and len(acked) == 1200
            # acknowledged means in the page cache (as Kafka): sync it, so that what a restart finds is
            # what the failed shutdown left, not what the file-system error lost
            os.sync()
            disk.fail()
            assert broker.stop(timeout=30) == 1
            lines = list(broker.log_lines)
            summary = [line for line in lines if "shutdown not clean" in line]
            assert len(summary) == 1 and "Read-only file system" in summary[0], lines[-20:]
            assert any("storage error: closing a partition" in line for line in lines)
            # after fsck, a restart recovers what the shutdown could not close: every acknowledged record
            disk.repair()
            broker.start()
            c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": uuid.uuid4().hex,
                          "enable.auto.commit": False})
            seen: dict[tuple[str, int, int], bytes] = {}
            try:
                c.assign([TopicPartition(f"t{i}", part, 0) for i in range(4) for part in range(3)])

                def read():
                    for m in c.consume(1000, 0.5):
                        assert m.error() is None, m.error()
                        seen[(m.topic(), m.partition(), m.offset())] = m.value()
                    return len(seen) >= len(acked)
                until(read, 30, "every acknowledged record after the restart")
            finally:
                c.close()
            assert seen == acked
        finally:
            broker.stop()


def test_reads_failing_with_eio_answer_kafka_storage_error(tmp_path):
    """The data directory's disk fails under a running broker (ext4 shut down: every read and write
    is EIO): a ShareFetch that acquires from the log and a Fetch are answered KAFKA_STORAGE_ERROR for
    the partition, on a connection that stays open, with no traceback. Before, the share fetch's log
    read raised the OSError out of the handler: the connection was closed after an internal error."""
    from protocol.messages.fetch import FetchRequest
    from tests.integration.torture_faults import EXT4_IOC_SHUTDOWN
    from tests.integration.test_share_protocol import Setup, part

    with ext4_on_loop(tmp_path / "disk") as disk:
        broker = BrokerProcess(disk.path / "data", config={"group.share.min.record.lock.duration.ms": "1000"})
        broker.start()
        try:
            s = Setup(broker.bootstrap, records=20)
            try:
                first = s.fetch("init", 0, max_records=5, batch_size=5, mode=1)  # record_limit: 5 of 20
                assert part(first).error_code == 0 and len(part(first).acquired_records) == 1
                fd = os.open(disk.path, os.O_RDONLY)
                try:
                    fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", 0))  # EIO from now on
                finally:
                    os.close(fd)
                r = s.fetch("init", 1, max_records=5, batch_size=5, mode=1)
                assert part(r).error_code == Errors.KAFKA_STORAGE_ERROR and not part(r).acquired_records, r
                f = s.conn("init").request(FetchRequest(
                    max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0, topics=[
                        FetchRequest.FetchTopic(topic_id=s.topic_id, partitions=[FetchRequest.FetchPartition(
                            partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])]), 17)
                assert f.responses[0].partitions[0].error_code == Errors.KAFKA_STORAGE_ERROR, f
                # the broker's stderr is read by another thread: the line may come after the answer
                until(lambda: any("reading the log failed" in line for line in broker.log_lines), 10,
                      "the broker logging the failed read")
            finally:
                s.close()
        finally:
            broker.stop()
