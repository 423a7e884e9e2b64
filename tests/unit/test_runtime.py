"""The coordinators' commit discipline: compute -> append -> replay -> answer, one writer at a time."""
from __future__ import annotations

import asyncio
import logging

import pytest

from coordinator.group.cluster import Timers
from coordinator.runtime import CoordinatorRuntime, MemoryRecordLog, record
from protocol.coordinator_records.offset_commit import OffsetCommitKey, OffsetCommitValue
from protocol.coordinator_records.registry import GROUP_COORDINATOR_RECORDS


def commit(partition: int, offset: int):
    return record(OffsetCommitKey(group="g", topic="t", partition=partition),
                  OffsetCommitValue(offset=offset, metadata="", commit_timestamp=0), 3)


class SlowLog(MemoryRecordLog):
    """Appends wait for ``release`` (set it to let them through)."""

    def __init__(self):
        super().__init__()
        self.release = asyncio.Event()

    async def append(self, records):
        await self.release.wait()
        return await super().append(records)


class State:
    """A toy coordinator: partition -> offset, changed only by replay."""

    def __init__(self, log):
        self.offsets: dict[int, int] = {}
        self.replayed: list[tuple[int, int]] = []  # (log offset, partition)
        self.runtime = CoordinatorRuntime(log, GROUP_COORDINATOR_RECORDS, self.replay, name="test")

    def replay(self, offset, rec):
        self.replayed.append((offset, rec.key.partition))
        if rec.value is None:
            self.offsets.pop(rec.key.partition, None)
        else:
            self.offsets[rec.key.partition] = rec.value.offset


async def test_write_appends_then_replays_then_answers():
    log = MemoryRecordLog()
    s = State(log)
    resp = await s.runtime.write(lambda: ("ok", [commit(0, 5), commit(1, 7)]))
    assert resp == "ok" and s.offsets == {0: 5, 1: 7}
    assert [o for o, _k, _v in log.records] == [0, 1] and s.replayed == [(0, 0), (1, 1)]
    await s.runtime.write(lambda: ("again", [commit(0, 6)]))
    assert s.replayed[-1] == (2, 0) and s.offsets[0] == 6


async def test_nothing_is_visible_before_the_append_is_durable():
    log = SlowLog()
    s = State(log)
    task = asyncio.ensure_future(s.runtime.write(lambda: ("ok", [commit(0, 5)])))
    await asyncio.sleep(0)
    assert s.offsets == {} and not task.done()
    log.release.set()
    assert await task == "ok" and s.offsets == {0: 5}


async def test_failed_append_applies_nothing():
    log = MemoryRecordLog()
    s = State(log)
    log.fail_next = OSError("disk full")
    with pytest.raises(OSError):
        await s.runtime.write(lambda: ("ok", [commit(0, 5)]))
    assert s.offsets == {} and log.records == []
    log.fail_next = OSError("disk full")
    resp = await s.runtime.write(lambda: (["ok"], [commit(0, 5)]), on_error=lambda r, e: r + [type(e).__name__])
    assert resp == ["ok", "OSError"] and s.offsets == {}
    assert await s.runtime.write(lambda: ("ok", [commit(0, 5)])) == "ok" and s.offsets == {0: 5}


async def test_an_operation_that_raises_writes_nothing_and_releases_the_writer():
    log = MemoryRecordLog()
    s = State(log)

    def bad():
        raise ValueError("invalid")

    with pytest.raises(ValueError):
        await s.runtime.write(bad)
    assert log.records == []
    assert await s.runtime.write(lambda: ("ok", [commit(0, 1)])) == "ok"


async def test_writers_are_serialised_in_arrival_order_on_committed_state():
    log = SlowLog()
    s = State(log)
    seen = []

    def increment():
        current = s.offsets.get(0, 0)
        seen.append(current)
        return current + 1, [commit(0, current + 1)]

    tasks = [asyncio.ensure_future(s.runtime.write(increment)) for _ in range(5)]
    await asyncio.sleep(0)
    assert seen == [0]  # the others wait: they must compute on what the first commits
    log.release.set()
    assert await asyncio.gather(*tasks) == [1, 2, 3, 4, 5]
    assert seen == [0, 1, 2, 3, 4] and s.offsets == {0: 5}


async def test_durability_only_writes_are_not_replayed():
    log = MemoryRecordLog()
    s = State(log)
    await s.runtime.write(lambda: (None, [commit(0, 5)]), replay=False)
    assert s.offsets == {} and len(log.records) == 1
    restarted = State(log)
    await restarted.runtime.load()
    assert restarted.offsets == {0: 5}


async def test_load_replays_every_record_once_with_its_offset():
    log = MemoryRecordLog()
    s = State(log)
    for i in range(3):
        await s.runtime.write(lambda i=i: (None, [commit(i, i * 10)]))
    await s.runtime.write(lambda: (None, [record(OffsetCommitKey(group="g", topic="t", partition=1), None)]))
    restarted = State(log)
    await restarted.runtime.load()
    assert restarted.replayed == [(0, 0), (1, 1), (2, 2), (3, 1)] and restarted.offsets == {0: 0, 2: 20}


async def test_scheduled_writes_log_failures_and_drain_waits(caplog):
    log = MemoryRecordLog()
    s = State(log)

    def bad():
        raise RuntimeError("boom")

    s.runtime.schedule(bad, "bad timer")
    s.runtime.schedule(lambda: (None, [commit(0, 3)]), "good timer")
    with caplog.at_level(logging.ERROR):
        await s.runtime.drain()
    assert s.offsets == {0: 3}
    assert any("bad timer failed" in r.getMessage() for r in caplog.records)


def test_timer_callback_exceptions_are_logged_not_raised(caplog):
    fired = []

    class Sched:
        def call_later(self, delay, cb, *args):
            fired.append(cb)
            return type("H", (), {"cancel": lambda self: None})()

    timers = Timers(Sched())

    def boom():
        raise RuntimeError("boom")

    timers.schedule("k", 10, boom)
    with caplog.at_level(logging.ERROR):
        fired[0]()  # must not raise into the event loop
    assert any("timer" in r.getMessage() for r in caplog.records)


async def test_a_timer_write_the_disk_refuses_is_a_warning_not_a_traceback(caplog):
    """Issue 25: a full disk made every timer write of a coordinator log a traceback; a failure that
    carries an error code (the log's LogError(KAFKA_STORAGE_ERROR)) is an expected answer."""
    from broker.log import LogError

    log = MemoryRecordLog()
    s = State(log)
    log.fail_next = LogError(56, "append of __consumer_offsets-0/00000000000000000000.log failed: disk full")
    s.runtime.schedule(lambda: (None, [commit(0, 3)]), "expiry timer")
    with caplog.at_level(logging.WARNING):
        await s.runtime.drain()
    failed = [r for r in caplog.records if "expiry timer failed" in r.getMessage()]
    assert failed and failed[0].levelno == logging.WARNING and failed[0].exc_info is None
    assert s.offsets == {}
