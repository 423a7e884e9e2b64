"""Transaction markers that meet a full disk are retried until written (issue 32).

The output topic's partition directory is a small tmpfs (mounted by the test: root only, skipped
with the reason otherwise); the other partitions, ``__transaction_state`` and
``__consumer_offsets`` among them, stay on the ordinary data directory, so the COMMIT's Prepare
record is written and only the marker on the output partition meets ENOSPC (``segment.ms=1``
makes the marker roll a new segment, whose first write needs a page the full tmpfs does not
have). A confluent-kafka transactional producer commits 25 records and the offsets of its input
(``send_offsets_to_transaction``); then space comes back: in one variant the same producer has
begun its next transaction meanwhile, in the other the broker is restarted while the disk is still
full. Expected, as Kafka's marker channel (``TransactionMarkerChannelManager``) retries: the
transaction stays PrepareCommit until its marker is written (the next transaction's
AddPartitionsToTxn is answered CONCURRENT_TRANSACTIONS), the last stable offset then passes it,
the 25 records are read whole with read_committed, the offsets are committed, and the next
transaction commits too. Before the fix the marker's failure was logged and the
transaction completed without it: the partition kept the transaction open (the LSO stuck for good),
and the next transaction's ABORT marker would have closed it, aborting what was committed.
"""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from confluent_kafka import Consumer, IsolationLevel, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from tests.support import create_topic, unique, until

RECORDS = 25


@pytest.fixture
def mounts():
    """Mount points to unmount at teardown (request it before ``broker_factory``, so the broker stops first)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    points: list = []
    yield points
    for mnt in reversed(points):
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def move_onto_tmpfs(directory, mounts: list, size: str = "1m") -> None:
    """Mount a tmpfs of ``size`` at ``directory`` (the broker stopped), keeping the files in it."""
    keep = directory.with_name(directory.name + ".keep")
    shutil.move(str(directory), str(keep))
    directory.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
                       capture_output=True, text=True)
    if r.returncode:
        shutil.rmtree(directory)
        shutil.move(str(keep), str(directory))
        pytest.skip(f"mount -t tmpfs is not permitted here: {r.stderr.strip()}")
    mounts.append(directory)
    for name in os.listdir(keep):
        shutil.copy2(keep / name, directory / name)
    shutil.rmtree(keep)


def fill(directory) -> None:
    """A filler file taking every free page of the file system (the broker ignores unknown names)."""
    chunk = b"\0" * 65536
    with open(directory / "filler", "ab", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError:
            pass
    with open(directory / "filler", "ab", buffering=0) as f:  # the last partial chunk's pages
        try:
            while True:
                f.write(b"\0" * 512)
        except OSError:
            pass


def offsets(admin: AdminClient, tp: TopicPartition, committed: bool) -> int:
    level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    return admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=level)[tp].result(10).offset


def read_committed(bootstrap: str, topic: str, end: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"), "isolation.level": "read_committed",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []

        def more() -> bool:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
            return len(got) >= end

        until(more, 30, f"{end} records read with read_committed")
        return got
    finally:
        c.close()


def committed_offset(bootstrap: str, group: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
    finally:
        c.close()


def begin(p: Producer, topic: str, values: list[bytes]) -> None:
    p.begin_transaction()
    for v in values:
        p.produce(topic, v, partition=0)


def commit(p: Producer, src: str, group_md, position: int, before_commit=lambda: None) -> None:
    p.flush(30)
    p.send_offsets_to_transaction([TopicPartition(src, 0, position)], group_md, 30)
    before_commit()
    p.commit_transaction(60)


def refused(b, partition_dir, since: int) -> bool:
    """The broker said a write to ``partition_dir`` (after the data: the marker) failed for want of space."""
    return any(str(partition_dir) in line and "No space left" in line for line in b.log_lines[since:])


@pytest.mark.parametrize("restart", [False, True], ids=["running", "restart-while-full"])
def test_commit_whose_marker_meets_a_full_disk_completes_once_space_returns(mounts, broker_factory, tmp_path,
                                                                            restart):
    data = tmp_path / "data"
    b = broker_factory(data_dir=data)
    src = create_topic(b.bootstrap, 1, prefix="in")
    out = create_topic(b.bootstrap, 1, prefix="out", segment_ms=1)
    b.stop()
    part_dir = data / f"{out}-0"
    move_onto_tmpfs(part_dir, mounts)
    b.start()

    group = unique("eos")
    gc = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group})
    settings = {"bootstrap.servers": b.bootstrap, "transactional.id": unique("tid"), "linger.ms": 0,
                "transaction.timeout.ms": 120000}
    p = Producer(settings)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    tp = TopicPartition(out, 0)
    first = [b"first-%02d" % i for i in range(RECORDS)]
    second = [b"second-%02d" % i for i in range(5)]
    try:
        group_md = gc.consumer_group_metadata()
        p.init_transactions(30)
        logged = len(b.log_lines)
        begin(p, out, first)
        # the commit answers once its Prepare record is written: the commit is decided
        commit(p, src, group_md, RECORDS, before_commit=lambda: fill(part_dir))
        until(lambda: refused(b, part_dir, logged), 15, "the COMMIT marker refused for want of space")
        assert offsets(admin, tp, committed=True) == 0, "the open transaction holds the last stable offset"

        if restart:
            logged = len(b.log_lines)
            # it exits by itself while the marker is retried (1: the full disk leaves the partition not
            # closed cleanly); a shutdown held by the retry would be killed after stop()'s timeout
            assert b.stop() in (0, 1), "\n".join(b.log_lines[-15:])
            b.start()
            until(lambda: refused(b, part_dir, logged), 15, "a write refused at start-up for want of space")
        else:
            # the next transaction starts at once: its AddPartitionsToTxn is answered CONCURRENT_TRANSACTIONS
            # (retried by the client) until the first one is complete; it must not abort the first
            begin(p, out, second)
        os.unlink(part_dir / "filler")

        def settled() -> bool:
            try:
                return offsets(admin, tp, committed=True) == RECORDS + 1
            except KafkaException:  # the admin client not yet reconnected after a restart
                return False

        until(settled, 30, "the last stable offset past the COMMIT marker")
        assert read_committed(b.bootstrap, out, RECORDS) == first
        assert committed_offset(b.bootstrap, group, src) == RECORDS

        if restart:
            # the application's next instance (librdkafka 2.16's producer, re-bootstrapping after the
            # restart, never sends its TxnOffsetCommit); its InitProducerId must not abort the commit
            p = Producer(settings)
            p.init_transactions(30)
            begin(p, out, second)
        commit(p, src, group_md, RECORDS + 5)
        assert read_committed(b.bootstrap, out, RECORDS + 5) == first + second
        assert committed_offset(b.bootstrap, group, src) == RECORDS + 5
        assert offsets(admin, tp, committed=True) == offsets(admin, tp, committed=False) == RECORDS + 7
        assert not [line for line in b.log_lines if "aborting transaction" in line]
    finally:
        p.flush(5)
        gc.close()
