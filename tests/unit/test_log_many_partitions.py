"""Many partitions in one data directory (issue 33): a clean shutdown and a topic deletion cost a
number of fsyncs that does not grow with the partitions, and what they leave is what a clean start
trusts. The file calls are counted with ``broker.log.fileio.FaultInjector``."""
from __future__ import annotations

import asyncio
import errno
import os

from broker.log import LogManager, fileio
from broker.log.fileio import FaultInjector
from broker.log.manager import STAGING_SUFFIX
from protocol.records import build_batch, record_key_values, validate_records

PARTITIONS = 300
T0 = 1_700_000_000_000


def _fill(logs: LogManager, topic: str) -> None:
    """One idempotent batch of two records in each partition (producer state to snapshot)."""
    for plog in logs.topic(topic).logs:
        data = build_batch([(b"k", b"v%d" % plog.partition, []), (b"k", b"w", [])], timestamp=T0,
                           producer_id=100 + plog.partition, producer_epoch=0, base_sequence=0)
        plog.append(data, validate_records(data))


def _on_worker(logs: LogManager, job) -> asyncio.Future:
    """``job`` submitted to the log worker now (where an fsync would go); a future of its result."""
    done = asyncio.get_running_loop().create_future()
    logs.background.submit(job, lambda result, _exc: done.set_result(result))
    return done


def _fsyncs(probe: FaultInjector) -> int:
    return sum(1 for op, _ in probe.calls if op in ("fsync", "syncfs"))


def test_a_clean_shutdown_of_many_partitions_syncs_the_file_system_not_each_file(tmp_path):
    data = str(tmp_path / "data")
    logs = LogManager(data)
    logs.create_topic("many", PARTITIONS)
    _fill(logs, "many")
    with FaultInjector() as probe:
        assert logs.close() is None
    assert os.path.exists(os.path.join(data, ".clean_shutdown"))
    assert _fsyncs(probe) <= 4, f"{_fsyncs(probe)} fsyncs for {PARTITIONS} partitions"

    logs = LogManager(data)
    try:
        for plog in logs.topic("many").logs:
            assert plog.log_end_offset == 2
            assert plog.producer_state_load.batches_scanned == 0  # the snapshot at close covered everything
            # the recovery point is the log end: nothing re-scanned, the next flush has nothing to do
            assert plog._recovery_point == 2 and not plog._pending_flush
            refs = plog.read(0, 1 << 20)
            values = [v for ref in refs for _o, _k, v in record_key_values(bytes(ref.data))]
            assert values == [b"v%d" % plog.partition, b"w"]
    finally:
        logs.close()


def test_a_failed_file_system_sync_at_shutdown_leaves_the_shutdown_unclean(tmp_path):
    data = str(tmp_path / "data")
    logs = LogManager(data)
    logs.create_topic("many", 20)
    _fill(logs, "many")
    with FaultInjector(fail_at=1, error=errno.EIO, sticky=True, operations=("fsync", "syncfs")):
        why = logs.close()
    assert why is not None
    assert not os.path.exists(os.path.join(data, ".clean_shutdown"))
    logs = LogManager(data)  # recovers from the files: every record is there
    try:
        assert [plog.log_end_offset for plog in logs.topic("many").logs] == [2] * 20
    finally:
        logs.close()


def test_deleting_a_topic_of_many_partitions_syncs_nothing_of_its_partitions(tmp_path):
    data = str(tmp_path / "data")
    logs = LogManager(data)
    try:
        logs.create_topic("many", PARTITIONS)
        logs.create_topic("kept", 2)
        _fill(logs, "many")
        _fill(logs, "kept")
        with FaultInjector() as probe:
            logs.delete_topic("many")
        assert _fsyncs(probe) <= 1, f"{_fsyncs(probe)} fsyncs to delete {PARTITIONS} partitions"
        assert sorted(os.listdir(data)) == [".lock", "kept-0", "kept-1", "meta", "meta.properties"]
        logs.create_topic("many", 3)  # the name is free at once
        assert logs.get_log("many", 0).log_end_offset == 0
    finally:
        logs.close()
    assert fileio.fsync is os.fsync  # the injector put the real calls back


def test_creating_and_deleting_many_partitions_lets_other_file_jobs_run_meanwhile(tmp_path):
    """A job submitted to the worker while a topic of many partitions is made (CreateTopics) or its
    directories removed (DeleteTopics) runs before that work is finished: the fsyncs that produce
    acknowledgements wait for are not queued behind all of it."""
    async def scenario():
        logs = LogManager(str(tmp_path / "data"))
        logs.start_background()
        data = logs.data_dir

        def count(suffix: str) -> int:
            """Directories ending in ``suffix``; for the staging one, the partitions made so far (those
            in it and those already moved into place)."""
            if suffix != STAGING_SUFFIX:
                return sum(1 for d in os.listdir(data) if d.endswith(suffix))
            return sum(len(os.listdir(os.path.join(data, d))) if d.endswith(suffix) else d.startswith("many-")
                       for d in os.listdir(data))
        def count_named(prefix: str) -> int:
            return sum(1 for d in os.listdir(data) if d.startswith(prefix))
        try:
            creating = asyncio.ensure_future(logs.create_topic_staged("many", PARTITIONS))
            while not any(d.endswith(STAGING_SUFFIX) for d in os.listdir(data)):
                await asyncio.sleep(0.001)
            made = await _on_worker(logs, lambda: count(STAGING_SUFFIX))  # an fsync would be submitted so
            await creating
            assert made < PARTITIONS, f"the job ran after all {made} partitions were made"

            logs.delete_topic("many")
            left = await _on_worker(logs, lambda: count("-delete") + count_named("many-"))
            assert left > 0, "the job ran after every directory was removed"
            await logs.barrier()
            while count("-delete") + count_named("many-"):  # the rest goes on in pieces
                await asyncio.sleep(0.01)
        finally:
            logs.close()

    asyncio.run(scenario())
