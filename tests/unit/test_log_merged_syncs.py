"""Durable appends to many partitions: their fsyncs, queued together on the worker, share one ``syncfs``
(broker/log/background.py, "Merged syncs"); a failed ``syncfs`` is never taken as a success."""
from __future__ import annotations

import asyncio
import collections
import errno
import threading

import pytest

from broker.log import LogManager
from broker.log import background as background_mod
from broker.log.fileio import FaultInjector
from protocol.records import build_batch, validate_records

PARTITIONS = 12


def _append_to_each(logs, **fault):
    """An append to every partition while the worker is held, so that their fsyncs queue together; then
    the worker is let go. Returns the calls of the file layer and the partitions' high watermarks."""
    async def scenario():
        gate = threading.Event()
        logs.background.submit(lambda: gate.wait(30))
        with FaultInjector(**fault) as probe:
            try:
                results = []
                for i in range(PARTITIONS):
                    data = build_batch([(b"k", b"v%d" % i, [])])
                    results.append(logs.get_log(f"t{i}", 0).append(data, validate_records(data)))
            finally:
                gate.set()
            await asyncio.wait_for(asyncio.gather(*(r.durable for r in results)), 30)
        return collections.Counter(op for op, _target in probe.calls)
    return asyncio.get_event_loop_policy().get_event_loop().run_until_complete(scenario())


@pytest.fixture(params=[True], ids=["syncfs"])
def logs(tmp_path, request):
    async def start():
        m = LogManager(str(tmp_path / "data"), durable=True, syncfs=request.param)
        for i in range(PARTITIONS):
            m.create_topic(f"t{i}", 1)
        m.start_background()
        return m
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    m = loop.run_until_complete(start())
    if m.background._syncfs_fd is None and request.param:
        m.close()
        pytest.skip("syncfs does not report writeback errors here (Linux before 5.8, or no syncfs)")
    yield m
    m.close()
    loop.close()
    asyncio.set_event_loop(None)


def test_queued_fsyncs_of_many_partitions_share_one_syncfs(logs):
    calls = _append_to_each(logs)
    assert calls["syncfs"] == 1 and calls["fsync"] == 0, calls
    assert [logs.get_log(f"t{i}", 0).high_watermark for i in range(PARTITIONS)] == [1] * PARTITIONS
    assert logs.background.merged == PARTITIONS


def test_a_failed_syncfs_falls_back_to_each_partitions_fsyncs_and_stops_merging(logs):
    calls = _append_to_each(logs, fail_at=1, error=errno.EIO, sticky=True, operations=("syncfs",))
    assert calls["syncfs"] == 1, calls  # then each partition's own fsyncs: every append durable all the same
    assert [logs.get_log(f"t{i}", 0).high_watermark for i in range(PARTITIONS)] == [1] * PARTITIONS
    assert all(logs.get_log(f"t{i}", 0).offline is None for i in range(PARTITIONS))
    assert logs.background.merged == 0 and logs.background.syncfs_failed.errno == errno.EIO
    # the error may be another partition's: only its own fsync reports it, so every fsync is per file from now
    # on, the clean shutdown's included
    calls = _append_to_each(logs)  # each log file (the index files are as the fallback's fsyncs left them)
    assert calls["syncfs"] == 0 and calls["fsync"] >= PARTITIONS, calls
    with FaultInjector() as probe:
        assert logs.close() is None
    assert "syncfs" not in {op for op, _target in probe.calls}


def test_fewer_queued_fsyncs_than_merge_at_are_fsynced_each(logs, monkeypatch):
    monkeypatch.setattr(background_mod, "MERGE_AT", PARTITIONS + 1)
    calls = _append_to_each(logs)
    assert calls["syncfs"] == 0 and calls["fsync"] >= 3 * PARTITIONS, calls


@pytest.mark.parametrize("logs", [False], ids=["syncfs-off"], indirect=True)
def test_with_syncfs_off_each_partition_fsyncs_its_own_files_and_close_too(logs):
    """``sharebroker.log.syncfs.enable=false``: a data directory sharing its file system with other programs."""
    calls = _append_to_each(logs)
    assert calls["syncfs"] == 0 and calls["fsync"] >= PARTITIONS, calls
    assert [logs.get_log(f"t{i}", 0).high_watermark for i in range(PARTITIONS)] == [1] * PARTITIONS
    with FaultInjector() as probe:
        assert logs.close() is None
    assert "syncfs" not in {op for op, _target in probe.calls}
