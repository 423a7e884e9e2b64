"""Storage faults in the log's write steps (issue 25): every file call of a step is made to fail in turn.

``broker.log.fileio.FaultInjector`` counts the file calls of a scenario (an append with index
entries, a roll with and without prepared files, a checkpoint, a producer snapshot) and then,
for each N, fails the Nth call with ENOSPC, EIO or EMFILE (a failing write first writes half of
its bytes, as a disk filling up mid-write). After each fault: the step raised a storage error;
the log's in-memory state (offsets, producer state, what a read returns) is unchanged; every
file is exactly as long as the log thinks (no half-written batch or index entry); once the
fault is lifted the same step succeeds, an idempotent producer's retry of the same sequence
included; and a reopen after a crash (descriptors dropped, nothing flushed) and after a clean
close yields exactly the acknowledged batches, offsets strictly increasing.
The SQLite I/O-error tests and RocksDB's FaultInjectionTestFS are the model (STYLE.md).
"""
from __future__ import annotations

import asyncio
import errno
import logging
import os

import pytest

from broker.log import LogError, PartitionLog, fileio
from broker.log import segment as segment_mod
from broker.log.background import Background
from broker.log.errors import KAFKA_STORAGE_ERROR
from broker.log.fileio import FaultInjector
from broker.log.segment import OFFSET_ENTRY, TIME_ENTRY, SpareFiles
from protocol.records import build_batch, record_key_values, validate_records

T0 = 1_700_000_000_000
PID = 7
ERRORS = (errno.ENOSPC, errno.EIO, errno.EMFILE)


class Producer:
    """An idempotent producer: batches of two records with unique values and its own sequence."""

    def __init__(self):
        self.seq = 0
        self.acked: list[tuple[int, bytes]] = []  # (offset, value) of every acknowledged record

    def batch(self) -> bytes:
        values = [b"v%06d" % (self.seq + i) + b"x" * 90 for i in range(2)]
        return build_batch([(b"k", v, []) for v in values], timestamp=T0 + self.seq, producer_id=PID,
                           producer_epoch=0, base_sequence=self.seq)

    def send(self, plog: PartitionLog) -> None:
        """Append the next batch; on success it is acknowledged and the sequence moves on."""
        data = self.batch()
        res = plog.append(data, validate_records(data))
        assert not res.duplicate
        self.acked += [(res.base_offset + i, v) for i, (_o, _k, v) in enumerate(record_key_values(data))]
        self.seq += 2

    def expected(self, plog: PartitionLog) -> list[tuple[int, bytes]]:
        """What the log must return: every acknowledged record from its log start on."""
        return [(o, v) for o, v in self.acked if o >= plog.log_start_offset]


def stored(plog: PartitionLog) -> list[tuple[int, bytes]]:
    """(offset, value) of every record the log returns, offsets checked strictly increasing."""
    out = [(o, v) for ref in plog.read(plog.log_start_offset, 1 << 30) for o, _k, v in record_key_values(ref.data)]
    offsets = [o for o, _ in out]
    assert offsets == sorted(set(offsets)), "offsets repeated or out of order"
    return out


def state(plog: PartitionLog) -> dict:
    return {"leo": plog.log_end_offset, "hw": plog.high_watermark, "log_start": plog.log_start_offset,
            "producers": plog.producer_state.snapshot(), "records": stored(plog)}


def assert_files_match(plog: PartitionLog) -> None:
    """No half-applied write on disk: every file as long as the log's objects say, no tmp file left."""
    for seg in plog.segments:
        assert os.path.getsize(seg.log_path) == seg.size, seg.log_path
    active = plog.segments[-1]
    if active._writes_indexes:
        assert os.path.getsize(active.path(".index")) == active._idx_written * OFFSET_ENTRY.size
        assert os.path.getsize(active.path(".timeindex")) == active._time_written * TIME_ENTRY.size
    assert not [n for n in os.listdir(plog.dir) if n.endswith(".tmp")]


def crash(plog: PartitionLog) -> None:
    """kill -9: the descriptors go, nothing pending is written or flushed."""
    for seg in plog.segments:
        seg.drop_descriptors()
    plog._closed = True


def open_log(path, config) -> PartitionLog:
    return PartitionLog(str(path), "t", 0, config, clock=lambda: T0)


def check_reopen(path, config, producer: Producer, clean: bool) -> None:
    plog = open_log(path, config) if not clean else PartitionLog(str(path), "t", 0, config, clock=lambda: T0,
                                                                    clean_shutdown=True)
    try:
        assert stored(plog) == producer.expected(plog)
        # the producer state came back too: the last batch again is a duplicate, the next one fits
        last = producer.acked[-1][0]
        retry = Producer()
        retry.seq = producer.seq - 2
        data = retry.batch()
        dup = plog.append(data, validate_records(data))
        assert dup.duplicate and dup.last_offset == last
        producer.send(plog)
    finally:
        plog.close()


def walk(tmp_path, config, prepare, step, *, expect=LogError, counted_min=3):
    """Fail each file call of ``step`` in turn (after ``prepare`` set up a log) and check the invariants."""
    probe_dir = tmp_path / "probe"
    plog, producer = prepare(probe_dir)
    with FaultInjector() as probe:
        step(plog, producer)
    calls = list(probe.calls)
    assert len(calls) >= counted_min, calls
    plog.close()
    faults = 0
    for n in range(1, len(calls) + 1):
        error = ERRORS[n % len(ERRORS)]
        for clean in (False, True):
            d = tmp_path / f"n{n}-{clean}"
            plog, producer = prepare(d)
            before = state(plog)
            with FaultInjector(fail_at=n, error=error) as fi:
                try:
                    step(plog, producer)
                    failed = False
                except expect as e:
                    failed = True
                    if isinstance(e, LogError):
                        assert e.code == KAFKA_STORAGE_ERROR
                assert fi.failed, f"call {n} ({calls[n - 1]}) was not reached"
                fi.lift()
                if failed:
                    faults += 1
                    assert state(plog) == before, f"state moved after a fault at call {n}: {calls[n - 1]}"
                    assert_files_match(plog)
                    step(plog, producer)  # the fault is lifted: the same step succeeds now
                else:  # an optional part failed (e.g. a producer snapshot): logged, the step went through
                    assert_files_match(plog)
            assert stored(plog) == producer.expected(plog)
            if clean:
                plog.close()
            else:
                crash(plog)
            check_reopen(d, config, producer, clean)
    assert faults, "no injected fault made the step fail"
    return calls


# ----------------------------------------------------------------- scenarios
APPEND = {"segment.bytes": 1 << 20, "index.interval.bytes": 1}
ROLL = {"segment.bytes": 700, "index.interval.bytes": 1}


def prefill(config, n=3):
    def prepare(path):
        plog = open_log(path, config)
        producer = Producer()
        for _ in range(n):
            producer.send(plog)
        return plog, producer
    return prepare


def append_step(plog, producer):
    producer.send(plog)


def test_append_with_index_entries_is_all_or_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(segment_mod, "INDEX_WRITE_BATCH", 1)  # every append writes its index entries
    calls = walk(tmp_path, APPEND, prefill(APPEND), append_step)
    # the batch; the index files opened for this group of entries; the offset and the time entry
    assert [op for op, _ in calls] == ["write", "open", "open", "write", "write"]


def test_append_whose_index_write_fails_is_not_written_twice(tmp_path, monkeypatch):
    """The issue's loss: the index write failed after the batch was written, the next offset did not
    move, and every retry wrote another batch at the same base offset; recovery then cut the log there."""
    monkeypatch.setattr(segment_mod, "INDEX_WRITE_BATCH", 1)
    plog, producer = prefill(APPEND)(tmp_path / "t-0")
    for _ in range(5):
        with FaultInjector(fail_at=4, error=errno.ENOSPC):  # the offset-index entry (after the batch, two opens)
            with pytest.raises(LogError):
                producer.send(plog)
    producer.send(plog)
    for _ in range(3):
        producer.send(plog)
    crash(plog)
    check_reopen(tmp_path / "t-0", APPEND, producer, clean=False)


def test_roll_is_all_or_nothing(tmp_path):
    def step(plog, producer):
        producer.send(plog)
        assert plog.segment_count == 2  # it rolled (in this call or in the one that failed after the roll)

    calls = walk(tmp_path, ROLL, prefill(ROLL, 2), step)
    assert {"open", "write", "fsync", "rename"} <= {op for op, _ in calls}


def test_roll_into_prepared_files_is_all_or_nothing(tmp_path):
    def prepare(path):
        plog, producer = prefill(ROLL, 2)(path)
        plog._spare = SpareFiles(plog.dir)  # what the worker prepares when the segment is half full
        return plog, producer

    def step(plog, producer):
        producer.send(plog)
        assert plog.segment_count == 2  # it rolled (in this call or in the one that failed after the roll)

    calls = walk(tmp_path, ROLL, prepare, step)
    assert [op for op, _ in calls].count("rename") >= 3


def test_roll_that_cannot_create_the_next_segment_leaves_the_old_one_active(tmp_path):
    """The issue's EMFILE roll: the old segment was sealed before the new one failed to open, and later
    appends went to the sealed segment (AttributeError after the bytes were written)."""
    plog, producer = prefill(ROLL, 2)(tmp_path / "t-0")
    active = plog.segments[-1]
    for _ in range(3):
        with FaultInjector(fail_at=1, error=errno.EMFILE, operations=("open",)):
            with pytest.raises(LogError):
                producer.send(plog)
        assert plog.segments[-1] is active and active.loaded and plog.segment_count == 1
    producer.send(plog)
    assert plog.segment_count == 2
    crash(plog)
    check_reopen(tmp_path / "t-0", ROLL, producer, clean=False)


def test_delete_records_checkpoint_is_all_or_nothing(tmp_path):
    def step(plog, producer):
        assert plog.delete_records(2) == 2

    def reopened_start(path):
        plog = open_log(path, APPEND)
        try:
            return plog.log_start_offset
        finally:
            plog.close()

    calls = walk(tmp_path, APPEND, prefill(APPEND), step)
    assert {"open", "write", "fsync", "replace"} <= {op for op, _ in calls}
    assert reopened_start(tmp_path / f"n1-True") == 2


def test_producer_snapshot_is_all_or_nothing(tmp_path):
    def step(plog, producer):
        before = list(plog._snapshots.offsets)
        try:
            plog._snapshots.write(plog.log_end_offset, plog.producer_state.snapshot())
        except OSError:
            assert plog._snapshots.offsets == before
            raise

    calls = walk(tmp_path, APPEND, prefill(APPEND), step, expect=OSError)
    assert [op for op, _ in calls] == ["open", "open", "write", "fsync", "rename"]


def test_a_write_that_cannot_be_cut_back_is_cut_before_the_next_append(tmp_path, monkeypatch):
    """Double fault: the append fails and so does the truncation undoing it. The next append must not
    write after the leftover bytes (the file is O_APPEND); it cuts them first, or fails."""
    plog, producer = prefill(APPEND)(tmp_path / "t-0")
    with FaultInjector(fail_at=1, error=errno.EIO, sticky=True, operations=("write", "ftruncate")) as fi:
        with pytest.raises(LogError):
            producer.send(plog)
        assert os.path.getsize(plog.segments[-1].log_path) > plog.segments[-1].size  # half a batch left
        with pytest.raises(LogError):
            producer.send(plog)
        fi.lift()
        producer.send(plog)
    assert_files_match(plog)
    crash(plog)
    check_reopen(tmp_path / "t-0", APPEND, producer, clean=False)


# --------------------------------------------------- background flushes (items 2 and 4)
def test_flush_future_completes_when_the_checkpoint_cannot_be_written(tmp_path, caplog):
    """flush.messages=1 on a full disk: the checkpoint write after the fsync raised inside the fsync's
    completion callback, before the produce's future was completed: the client never got an answer."""
    async def main():
        plog = open_log(tmp_path / "t-0", {"flush.messages": 1})
        plog.set_background(Background(asyncio.get_running_loop()))
        producer = Producer()
        with FaultInjector(fail_at=1, error=errno.ENOSPC, sticky=True, operations=("replace",)):
            data = producer.batch()
            res = plog.append(data, validate_records(data))
            await asyncio.wait_for(res.durable, 5)  # the data is on disk; the checkpoint is only stale
            assert plog._ckpt_written != (0, 1)
        plog.maintenance()  # retries the checkpoint
        assert plog._ckpt_written == (0, 2)
        await plog._bg.barrier()
        plog._bg.close()
        plog.close()

    with caplog.at_level(logging.ERROR):
        asyncio.run(main())
    assert "cannot write the checkpoint file" in caplog.text
    assert "background job callback failed" not in caplog.text


def test_failed_fsync_takes_the_partition_offline(tmp_path):
    """flush.messages=1 in page-cache mode, one fsync of the .log fails with EIO. Before, the error was only
    reported: the next successful fsync moved the recovery point past the bytes whose fsync had failed, and
    the idempotent retry of that batch was acknowledged as a duplicate without any fsync ("fsyncgate": after a
    failed fsync the kernel may have dropped the pages, so no later fsync proves them written). Now the
    partition refuses every append, the retry included, until a restart recovers it from its files."""
    async def main():
        plog = open_log(tmp_path / "t-0", {"flush.messages": 1})
        plog.set_background(Background(asyncio.get_running_loop()))
        producer = Producer()
        producer.send(plog)
        await plog._bg.barrier()
        await plog._bg.barrier()  # and the checkpoint's sync, submitted when the first one completed
        point = plog._recovery_point
        with FaultInjector(fail_at=1, error=errno.EIO, operations=("fsync",)):
            data = producer.batch()
            res = plog.append(data, validate_records(data))
            with pytest.raises(LogError) as e:
                await asyncio.wait_for(res.durable, 5)
            assert e.value.code == KAFKA_STORAGE_ERROR
        assert plog.offline is not None
        for batch in (data, producer.batch()):  # the retry of the failed batch, then a new one
            with pytest.raises(LogError) as e:
                plog.append(batch, validate_records(batch))
            assert e.value.code == KAFKA_STORAGE_ERROR
        plog.maintenance()
        await plog._bg.barrier()
        assert plog._recovery_point == point  # never moved past the failed fsync
        plog._bg.close()
        with pytest.raises(OSError):
            plog.close()  # writes nothing: the next start recovers
        assert plog.closed
        reopened = open_log(tmp_path / "t-0", {"flush.messages": 1})
        assert reopened.offline is None and reopened._recovery_point == point
        reopened.close()

    asyncio.run(main())


def open_durable(path) -> PartitionLog:
    return PartitionLog(str(path), "t", 0, {}, clock=lambda: T0, durable=True)


def test_durable_mode_answers_and_shows_records_once_synced(tmp_path):
    """Durable mode: every append asks for an fsync (requests made while one runs share the next one), and
    the high watermark, what consumers may read, moves only when an fsync covering the records finished."""
    async def main():
        moved = []
        plog = PartitionLog(str(tmp_path / "t-0"), "t", 0, {}, clock=lambda: T0, durable=True,
                            on_durable=lambda: moved.append(plog.high_watermark))
        plog.set_background(Background(asyncio.get_running_loop()))
        producer = Producer()
        results = []
        for _ in range(5):
            data = producer.batch()
            results.append(plog.append(data, validate_records(data)))
            producer.seq += 2
        assert plog.log_end_offset == 10 and plog.high_watermark == 0 and plog.last_stable_offset == 0
        assert all(r.durable is not None for r in results)
        await asyncio.wait_for(asyncio.gather(*(r.durable for r in results)), 5)
        assert plog.high_watermark == 10 and moved[-1] == 10 and len(moved) <= 2  # group commit
        assert plog._recovery_point == 10
        plog.maintenance()  # the checkpoint follows at most every second in durable mode, and at maintenance
        assert plog._ckpt_written == (0, 10)
        plog._bg.close()
        plog.close()

    asyncio.run(main())


def test_durable_mode_error_answer_means_not_written(tmp_path):
    """Durable mode, an fsync fails with EIO: its appends (and those waiting for the next fsync) fail with
    KAFKA_STORAGE_ERROR and are cut off the files at once, so a resend after the producer bumped its epoch
    (sequence 0 again) cannot write the records a second time. Before, the batch stayed in the log while its
    answer said KAFKA_STORAGE_ERROR, and the epoch-bumped resend was accepted as new: written twice."""
    async def main():
        path = tmp_path / "t-0"
        plog = open_durable(path)
        plog.set_background(Background(asyncio.get_running_loop()))
        producer = Producer()
        producer.send(plog)
        await plog._bg.barrier()
        await plog._bg.barrier()
        assert plog.high_watermark == 2
        size = plog.segments[-1].size
        with FaultInjector(fail_at=1, error=errno.EIO, operations=("fsync",)):
            failed = []
            for _ in range(3):  # the first fsync's batch, then two waiting for the follow-up
                data = producer.batch()
                failed.append(plog.append(data, validate_records(data)).durable)
                producer.seq += 2
            outcomes = await asyncio.wait_for(asyncio.gather(*failed, return_exceptions=True), 5)
        assert all(isinstance(o, LogError) and o.code == KAFKA_STORAGE_ERROR for o in outcomes), outcomes
        assert plog.high_watermark == 2 and plog.log_end_offset == 2
        assert os.path.getsize(plog.segments[-1].log_path) == size  # cut back: not in the log
        assert [o for o, _ in stored(plog)] == [0, 1]
        plog._bg.close()
        with pytest.raises(OSError):
            plog.close()
        # restart: the producer resends its failed batches with a bumped epoch, sequence 0
        plog = open_durable(path)
        assert plog.log_end_offset == 2
        values = [v for _o, _k, v in record_key_values(producer_batch(2, epoch=1, seq=0))]
        data = producer_batch(2, epoch=1, seq=0)
        plog.append(data, validate_records(data))
        assert [v for _o, v in stored(plog)].count(values[0]) == 1
        plog.close()

    asyncio.run(main())


def producer_batch(first: int, epoch: int, seq: int) -> bytes:
    values = [b"v%06d" % (first + i) + b"x" * 90 for i in range(2)]
    return build_batch([(b"k", v, []) for v in values], timestamp=T0 + first, producer_id=PID,
                       producer_epoch=epoch, base_sequence=seq)


def test_durable_mode_syncs_what_recovery_found_before_showing_it(tmp_path):
    """Records written but never synced (kill -9 before the fsync) were never answered success: at the next
    start they are synced before the high watermark covers them."""
    path = tmp_path / "t-0"
    plog = open_log(path, {})  # page-cache mode: nothing synced
    producer = Producer()
    for _ in range(3):
        producer.send(plog)
    crash(plog)
    synced = []
    with FaultInjector() as fi:
        plog = open_durable(path)
        synced = [op for op, _ in fi.calls if op == "fsync"]
    assert synced and plog.high_watermark == plog.log_end_offset == 6
    plog.close()


def test_fsync_leaves_out_index_files_nothing_changed(tmp_path, monkeypatch):
    """An fsync is a device cache flush even for a file with nothing dirty: a small append that adds no
    index entry syncs the log file only; one whose index entries changed syncs the index files too."""
    synced: list[str] = []
    real = fileio.fsync

    def fsync(fd):
        synced.append(os.path.basename(os.path.realpath(f"/proc/self/fd/{fd}")))
        real(fd)

    monkeypatch.setattr(fileio, "fsync", fsync)
    plog = open_durable(tmp_path / "t-0")
    producer = Producer()
    producer.send(plog)  # the segment's first sync covers its new files
    steps = []
    for _ in range(80):
        seg = plog.segments[-1]
        before = (seg._idx_written, seg._time_written)
        synced.clear()
        producer.send(plog)  # a durable log without a background worker syncs in the append
        plog.flush()
        indexed = (seg._idx_written, seg._time_written) != before
        steps.append(indexed)
        names = {n.rsplit(".", 1)[1] for n in synced if n.startswith("0")}  # (not the checkpoint, the directory)
        assert names == ({"index", "log", "timeindex"} if indexed else {"log"}), (len(steps), synced)
    assert True in steps and False in steps  # both kinds of step were met
    plog.close()
    reopened = open_durable(tmp_path / "t-0")
    assert stored(reopened) == producer.expected(reopened)
    reopened.close()


def test_rolled_segment_is_flushed_at_the_roll(tmp_path):
    """Kafka's UnifiedLog.roll schedules flushUptoOffsetExclusive(new base) at once; the rolled segment
    reached the disk only at the next maintenance pass (5 minutes by default)."""
    async def main():
        plog = open_log(tmp_path / "t-0", ROLL)
        plog.set_background(Background(asyncio.get_running_loop()))
        synced = []
        real = fileio.fsync

        def fsync(fd):
            synced.append(os.path.realpath(f"/proc/self/fd/{fd}"))
            real(fd)

        fileio.fsync = fsync
        try:
            producer = Producer()
            while plog.segment_count < 3:
                producer.send(plog)
            await plog._bg.barrier()
            await plog._bg.barrier()
        finally:
            fileio.fsync = real
        rolled = plog.segments[-2]
        assert rolled.log_path in synced and plog.segments[0].log_path in synced
        assert plog.dir in synced  # the new segments' directory entries
        assert plog._recovery_point == rolled.base_offset or plog._recovery_point == plog.segments[-1].base_offset
        assert plog._ckpt_written[1] == plog._recovery_point
        plog._bg.close()
        plog.close()

    asyncio.run(main())


def test_start_up_says_when_the_files_hold_less_than_the_checkpoint(tmp_path, caplog):
    path = tmp_path / "t-0"
    plog = open_log(path, APPEND)
    producer = Producer()
    for _ in range(3):
        producer.send(plog)
    plog.close()
    for name in os.listdir(path):
        if name.endswith((".log", ".index", ".timeindex", ".snapshot")):
            os.truncate(path / name, 0)  # what fsync after a file-system error left
    with caplog.at_level(logging.ERROR):
        plog = open_log(path, APPEND)
    assert plog.log_end_offset == 0 and plog.startup_shortfall == 6
    assert "t-0: the files hold less than the checkpoint promises" in caplog.text
    plog.close()


# ------------------------------------------------- coordinators over a failing log (item 3)
async def test_group_coordinator_answers_an_error_when_its_log_cannot_be_written(tmp_path):
    """OffsetCommit and ConsumerGroupHeartbeat over ``__consumer_offsets`` when a roll cannot open its new
    segment: error answers, nothing replayed, and all works again once the fault is lifted (before the
    fix the old segment was sealed first and later appends failed on it for good)."""
    from broker.internal_topics import PartitionRecordLog
    from coordinator.group import GroupConfig
    from test_group_support import Env, cg_hb, commit_req, fetch_offsets

    # an index entry per batch and room for 8 time-index entries: a roll every 8 commits (index full)
    plog = PartitionLog(str(tmp_path / "__consumer_offsets-0"), "__consumer_offsets", 0,
                        {"segment.index.bytes": 96, "index.interval.bytes": 1})
    env = Env(config=GroupConfig(initial_rebalance_delay_ms=0), log=PartitionRecordLog(plog))
    c = env.coord
    i = 0
    for error in ERRORS:
        while not plog.segments[-1].index_full():  # until the next commit needs a roll
            resp = await c.offset_commit(commit_req("g", {("foo", 0): i}), 8)
            assert resp.topics[0].partitions[0].error_code == 0
            i += 1
        # the EMFILE: the roll cannot open its new segment (and the coordinator cannot make one)
        with FaultInjector(fail_at=1, error=error, sticky=True, operations=("open",)) as fi:
            resp = await c.offset_commit(commit_req("g", {("foo", 0): i}), 8)
            assert resp.topics[0].partitions[0].error_code != 0 and fi.failed
            assert (await c.consumer_group_heartbeat(cg_hb("cg", "m1"), 1)).error_code != 0
        assert (await fetch_offsets(c, "g"))[("foo", 0)] == i - 1
        resp = await c.offset_commit(commit_req("g", {("foo", 0): i}), 8)  # the fault is lifted: the roll goes
        assert resp.topics[0].partitions[0].error_code == 0 and (await fetch_offsets(c, "g"))[("foo", 0)] == i
        i += 1
    assert (await c.consumer_group_heartbeat(cg_hb("cg", "m1"), 1)).error_code == 0
    bases = [ref.base_offset for ref in plog.read(plog.log_start_offset, 1 << 30)]
    assert bases == sorted(set(bases))
    plog.close()
