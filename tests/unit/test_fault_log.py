"""Storage faults said once and summarised (``broker/log/faults.py``), and the errors a failed share-state
write answers with (issue 25, item 7)."""
from __future__ import annotations

import errno
import logging
import re

from broker.log.errors import KAFKA_STORAGE_ERROR, LogError
from broker.log.faults import FaultLog, FdReserve
from broker.share.persister import PersisterAdapter
from coordinator.runtime import MemoryRecordLog
from protocol.errors import Errors
from tests.unit.test_share_coordinator import T1, coordinator, init, ok, one, write


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_a_flood_of_one_failure_is_logged_once_then_summarised(caplog):
    clock = Clock()
    faults = FaultLog(logging.getLogger("t.storage"), summary_s=5.0, clock=clock)
    enospc = OSError(errno.ENOSPC, "No space left on device")
    with caplog.at_level(logging.WARNING, "t.storage"):
        for i in range(1000):
            clock.now += 0.01  # 1,000 failures in 10 s
            faults.report("append", f"/data/t-0/{i}.log", enospc)
        faults.report("fsync", "/data/t-0", OSError(errno.EIO, "Input/output error"))
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "storage error: append /data/t-0/0.log failed: No space left on device (ENOSPC)"
    assert len(lines) == 3, lines  # the first, one summary at 5 s, the other failure
    first_summary = re.fullmatch(r"storage error: (\d+) more append failures \(ENOSPC\) in the last 5 s, "
                                 r"latest on /data/t-0/\d+\.log", lines[1])
    assert first_summary, lines[1]
    assert "fsync /data/t-0 failed: Input/output error (EIO)" in lines[2]
    assert faults.counts == {("append", "ENOSPC"): 1000, ("fsync", "EIO"): 1}
    # what is owed is said by flush() once the period passed; a quiet key is then forgotten
    caplog.clear()
    clock.now += 6
    faults.flush()
    [owed] = [r.getMessage() for r in caplog.records]
    second = re.fullmatch(r"storage error: (\d+) more append failures \(ENOSPC\) in the last \d+ s, "
                          r"latest on /data/t-0/999\.log", owed)
    assert second and int(first_summary[1]) + int(second[1]) == 999, owed
    clock.now += 6
    faults.flush()
    faults.report("append", "/data/t-0/x.log", enospc)
    assert caplog.records[-1].getMessage() == "storage error: append /data/t-0/x.log failed: No space left on device (ENOSPC)"


def test_a_log_error_names_the_errno_of_its_cause():
    faults = FaultLog(logging.getLogger("t.storage"))
    try:
        try:
            raise OSError(errno.EMFILE, "Too many open files")
        except OSError as e:
            raise LogError(KAFKA_STORAGE_ERROR, "roll failed") from e
    except LogError as e:
        faults.report("segment roll", "/d", e)
    assert faults.counts == {("segment roll", "EMFILE"): 1}


def test_the_descriptor_reserve_makes_room_for_a_critical_open():
    reserve = FdReserve(4)
    reserve.enable()
    assert reserve.held == 4
    calls = []

    def open_at_the_limit():
        calls.append(reserve.held)
        if reserve.held:
            raise OSError(errno.EMFILE, "Too many open files")
        return "opened"

    assert reserve.run(open_at_the_limit) == "opened"
    assert calls == [4, 0] and reserve.used == 1 and reserve.held == 4  # taken back after
    reserve.release()


# ------------------------------------------------------------------- share state on a failing disk
async def test_a_share_state_write_on_a_failing_disk_answers_a_retriable_coordinator_error():
    """The log raises LogError(KAFKA_STORAGE_ERROR): WriteShareGroupState answers NOT_COORDINATOR (Kafka's
    CoordinatorOperationExceptionHelper), which a share partition reports as COORDINATOR_NOT_AVAILABLE
    (SharePartition.fetchPersisterError): ShareAcknowledge and ShareFetch's piggybacked acknowledgements
    both write through the adapter. It answered UNKNOWN_SERVER_ERROR, which is not retriable."""
    log = MemoryRecordLog()
    c = await coordinator(log)
    await ok(c.initialize_state(init(start=0)))
    failure = LogError(KAFKA_STORAGE_ERROR, "write to /data/__share_group_state-0/0.log failed: [Errno 28] "
                                            "No space left on device")
    log.fail_next = failure
    assert one(await c.write_state(write([(0, 4, 2, 1)]))).error_code == Errors.NOT_COORDINATOR
    adapter = PersisterAdapter(c, "g1", T1, 0)
    log.fail_next = failure
    req = adapter.write_request(state_epoch=0, start_offset=0, delivery_complete_count=-1, runs=[(0, 4, 2, 1)])
    assert await adapter.write(req) == Errors.COORDINATOR_NOT_AVAILABLE
    assert await adapter.write(req) == Errors.NONE  # the disk is back: the same write goes through


async def test_share_state_storage_failures_do_not_flood_the_log(caplog):
    """The log layer reports a storage failure once (with its path); the coordinator adds no warning per request."""
    log = MemoryRecordLog()
    c = await coordinator(log)
    await ok(c.initialize_state(init(start=0)))
    with caplog.at_level(logging.INFO):
        for _ in range(50):
            log.fail_next = LogError(KAFKA_STORAGE_ERROR, "write failed")
            await c.write_state(write([(0, 4, 2, 1)]))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_failed_appends_are_counted_by_operation(tmp_path, monkeypatch, caplog):
    """A failed append is logged once per run of failures by its partition ("Failed writes") and
    counted in ``STORAGE`` (``sharebroker_storage_errors_total{operation="append"}``)."""
    import pytest

    from broker.log import faults
    from broker.log.partition_log import PartitionLog
    from broker.log.segment import Segment
    from protocol.records import build_batch, validate_records

    monkeypatch.setattr(faults, "STORAGE", FaultLog(logging.getLogger("t.storage")))
    monkeypatch.setattr("broker.log.partition_log.STORAGE", faults.STORAGE)
    plog = PartitionLog(str(tmp_path / "orders-0"), "orders", 0)

    def full(self, data, batches):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Segment, "append", full)
    batch = build_batch([(b"k", b"v", [])])
    with caplog.at_level(logging.WARNING):
        for _ in range(20):
            with pytest.raises(LogError) as e:
                plog.append(batch, validate_records(batch))
            assert e.value.code == KAFKA_STORAGE_ERROR
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "orders-0/00000000000000000000.log failed" in lines[0], lines
    assert faults.STORAGE.counts == {("append", "ENOSPC"): 20}
    plog.close()
