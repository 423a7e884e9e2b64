"""CreateTopics' partitions made on the worker (LogManager.create_topic_staged): all or nothing, the
name reserved while the files are made, nothing left behind."""
from __future__ import annotations

import asyncio
import errno
import os

import pytest

from broker.log import LogError, LogManager
from broker.log.errors import KAFKA_STORAGE_ERROR
from broker.log.fileio import FaultInjector
from broker.log.manager import STAGING_SUFFIX, TOPIC_ALREADY_EXISTS


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
