"""CreateTopics' partitions made on the worker (LogManager.create_topic_staged): all or nothing, the
name reserved while the files are made, nothing left behind."""
from __future__ import annotations

import asyncio
import errno
import os
import threading

import pytest

from broker.log import LogError, LogManager
from broker.log.errors import KAFKA_STORAGE_ERROR
from broker.log.fileio import FaultInjector
from broker.log import manager as manager_mod
from broker.log.manager import STAGING_SUFFIX, TOPIC_ALREADY_EXISTS
from protocol.records import build_batch, validate_records
from tests.support import until_async as until


def _dirs(data_dir, name):
    return sorted(d for d in os.listdir(data_dir) if d.rsplit("-", 1)[0] == name or d.endswith(STAGING_SUFFIX))


def test_staged_creation_is_whole_reserves_the_name_and_undoes_a_failure(tmp_path):
    async def scenario():
        logs = LogManager(str(tmp_path / "data"))
        logs.start_background()
        try:
            first = asyncio.ensure_future(logs.create_topic_staged("t", 200))
            await asyncio.sleep(0)
            with pytest.raises(LogError) as again:  # the name is reserved while the files are made
                await logs.create_topic_staged("t", 3)
            assert again.value.code == TOPIC_ALREADY_EXISTS
            info = await first
            assert info.partitions == 200 and logs.topic("t") is info
            plog = logs.get_log("t", 199)
            assert plog.log_end_offset == 0 and plog.segment_count == 1
            await logs.barrier()
            assert len(_dirs(logs.data_dir, "t")) == 200  # the staging directory is gone

            with FaultInjector(fail_at=7, error=errno.ENOSPC) as fi:  # a file the worker makes
                with pytest.raises(LogError) as failed:
                    await logs.create_topic_staged("u", 50)
                assert fi.failed
            assert failed.value.code == KAFKA_STORAGE_ERROR and logs.topic("u") is None
            await logs.barrier()
            assert _dirs(logs.data_dir, "u") == []
            assert (await logs.create_topic_staged("u", 2)).partitions == 2  # the name is free again
        finally:
            logs.close()

    asyncio.run(scenario())


def test_a_durable_append_is_not_queued_behind_a_topic_creation(tmp_path, monkeypatch):
    """The fsync an acknowledgement waits for runs while CreateTopics' file work is stuck (here held by a
    gate in front of the files of its first partitions): the topic's work is on a worker of its own."""
    stuck, release = threading.Event(), threading.Event()
    real = manager_mod._stage_partitions

    def gated(staging, paths):
        stuck.set()
        assert release.wait(30)
        real(staging, paths)
    monkeypatch.setattr(manager_mod, "_stage_partitions", gated)

    async def scenario():
        logs = LogManager(str(tmp_path / "data"), durable=True)
        logs.create_topic("steady", 1)
        logs.start_background()
        try:
            creating = asyncio.ensure_future(logs.create_topic_staged("big", 40))
            await until(stuck.is_set, what="the creation's file work to start")
            data = build_batch([(b"k", b"v", [])])
            result = logs.get_log("steady", 0).append(data, validate_records(data))
            await asyncio.wait_for(asyncio.shield(result.durable), 10)  # while the creation is stuck
            assert not creating.done() and logs.get_log("steady", 0).high_watermark == 1
            release.set()
            assert (await creating).partitions == 40
        finally:
            release.set()
            logs.close()

    asyncio.run(scenario())


def _sync_targets(probe, data_dir):
    """(path, index of its fsync call) of every fsync in ``probe.calls`` (each follows the open of its file)."""
    opened, out = {}, []
    for i, (op, target) in enumerate(probe.calls, 1):
        if op == "open":
            opened["last"] = os.path.relpath(target, data_dir)
        elif op == "fsync":
            out.append((opened["last"], i))
    return out


def test_a_created_topic_is_synced_before_the_answer_in_three_fsyncs_and_a_failed_sync_leaves_nothing(tmp_path):
    data_dir = str(tmp_path / "data")

    async def create(name, partitions, **fault):
        logs = LogManager(data_dir, durable=True)
        logs.start_background()
        try:
            with FaultInjector(**fault) as probe:
                try:
                    info = await logs.create_topic_staged(name, partitions)
                except LogError as e:
                    return logs, probe, e
                return logs, probe, info
        finally:
            await logs.barrier()
            logs.close()

    logs, probe, info = asyncio.run(create("t", 300))
    assert info.partitions == 300
    meta = os.path.join("meta", "topics", f"{info.topic_id.hex}.json")
    # done before the answer: the data directory (every partition renamed into it), the metadata (before its
    # rename into place) and its directory
    assert [p for p, _i in _sync_targets(probe, data_dir)] == [".", meta + ".tmp", os.path.join("meta", "topics")]

    _logs, probe, _info = asyncio.run(create("u", 3))
    for n in range(1, len(probe.calls) + 1):  # every file call of a creation fails in turn, the syncs included
        logs, fi, failed = asyncio.run(create(f"v{n}", 3, fail_at=n, error=errno.EIO))
        assert fi.failed and isinstance(failed, LogError), (n, probe.calls[n - 1], failed)
        assert failed.code == KAFKA_STORAGE_ERROR
        assert _dirs(data_dir, f"v{n}") == [] and logs.topic(f"v{n}") is None
    again = LogManager(data_dir, durable=True)  # a restart finds none of them, and the name is free
    try:
        assert sorted(again.topics) == ["t", "u"] and again.get_log("t", 299).log_end_offset == 0
        assert again.create_topic("v1", 2).partitions == 2
        assert [d for d in os.listdir(data_dir) if d.startswith("v") and not d.startswith("v1-")] == []
    finally:
        again.close()


def test_a_deleted_topics_directories_go_a_few_per_loop_callback_and_its_name_is_free_at_once(tmp_path):
    data_dir = str(tmp_path / "data")

    def left(name):
        return [d for d in os.listdir(data_dir) if d.rsplit("-", 1)[0] == name]

    async def scenario():
        logs = LogManager(data_dir, durable=True)
        logs.start_background()
        try:
            await logs.create_topic_staged("t", 100)
            data = build_batch([(b"k", b"old", [])])
            await logs.get_log("t", 99).append(data, validate_records(data)).durable
            logs.delete_topic("t")
            await asyncio.sleep(0)
            assert 0 < len(left("t")) < 100  # renamed away a few per loop callback, not 100 in one
            info = await logs.create_topic_staged("t", 100)  # at once: what is left of the old one goes first
            assert info.partitions == 100 and logs.get_log("t", 99).log_end_offset == 0
            logs.delete_topic("t")
            assert logs.create_topic("t", 3).partitions == 3 and sorted(left("t")) == ["t-0", "t-1", "t-2"]
            logs.delete_topic("t")
        finally:
            logs.close()  # with the deletion under way: its directories are renamed away before the lock goes
        assert left("t") == []

    asyncio.run(scenario())
    again = LogManager(data_dir, durable=True)
    try:
        assert "t" not in again.topics and not [d for d in os.listdir(data_dir) if d.endswith("-delete")]
    finally:
        again.close()
