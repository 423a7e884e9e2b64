"""Transaction markers that meet a storage fault (issue 32): the broker's marker writer on real partition
logs (a data partition and ``__consumer_offsets`` with the group coordinator's pending TxnOffsetCommit),
with every file call failing (``fileio.FaultInjector``, ENOSPC) while the COMMIT is written.

Expected, as Kafka's TransactionMarkerChannelManager: EndTxn is answered (the Prepare record is
written), the transaction stays PrepareCommit (CONCURRENT_TRANSACTIONS) while the markers are retried,
the offsets stay pending and the data partition keeps the transaction open; once the fault is lifted
both markers are written, the offsets are committed and only then is CompleteCommit logged. Before
the fix the writer logged the failures and CompleteCommit was logged without the markers.
"""
from __future__ import annotations

import asyncio
import errno

from broker.internal_topics import PartitionRecordLog
from broker.log import PartitionLog
from broker.log.fileio import FaultInjector
from broker.topics import CONSUMER_OFFSETS
from broker.transactions import marker_writer
from coordinator.group import GroupConfig
from coordinator.runtime import MemoryRecordLog
from coordinator.transaction import TransactionCoordinator
from coordinator.transaction.coordinator import COMPLETE_COMMIT, PREPARE_COMMIT
from protocol.errors import Errors
from protocol.records import build_batch, validate_records
from test_group_support import Env
from test_runtime_loading import txn_commit_req

T0 = 1_700_000_000_000


class Logs:
    def __init__(self, logs: dict):
        self.logs = logs

    def get_log(self, topic: str, partition: int):
        return self.logs.get((topic, partition))


class Topics:
    def __init__(self):
        self.woken: list[tuple[str, int]] = []

    def appended(self, topic: str, partition: int) -> None:
        self.woken.append((topic, partition))


def test_commit_markers_failing_on_a_full_disk_are_retried_and_complete_the_transaction(tmp_path):
    async def go():
        data = PartitionLog(str(tmp_path / "t-0"), "t", 0, {}, clock=lambda: T0)
        offsets_log = PartitionLog(str(tmp_path / f"{CONSUMER_OFFSETS}-0"), CONSUMER_OFFSETS, 0, {},
                                   clock=lambda: T0)
        env = Env(config=GroupConfig(initial_rebalance_delay_ms=0), log=PartitionRecordLog(offsets_log))
        groups = env.coord
        topics = Topics()
        txns = TransactionCoordinator(MemoryRecordLog(), new_producer_id=lambda: 100, now_ms=lambda: T0,
                                      write_markers=marker_writer(
                                          Logs({("t", 0): data, (CONSUMER_OFFSETS, 0): offsets_log}), topics, groups))
        err, pid, epoch = await txns.init_producer_id("app", 30_000)
        assert err == 0
        assert await txns.add_partitions("app", pid, epoch, [("t", 0), (CONSUMER_OFFSETS, 0)]) == 0
        batch = build_batch([(b"k", b"v", [])], timestamp=T0, producer_id=pid, producer_epoch=epoch,
                            base_sequence=0, transactional=True)
        data.append(batch, validate_records(batch))
        resp = await groups.txn_offset_commit(txn_commit_req("g", {("foo", 0): 25}), pid, epoch)
        assert resp.topics[0].partitions[0].error_code == 0
        assert groups.offsets.is_pending("g", "foo", 0)

        ends = (data.log_end_offset, offsets_log.log_end_offset)
        with FaultInjector(fail_at=1, error=errno.ENOSPC, sticky=True) as fi:
            assert await txns.end_txn("app", pid, epoch, True) == (0, pid, epoch)
            deadline = asyncio.get_running_loop().time() + 10
            while len(fi.failed) < 6:  # the first try and a few retries fail
                assert asyncio.get_running_loop().time() < deadline, "the markers were not retried"
                await asyncio.sleep(0.01)
            assert txns.describe("app").state == PREPARE_COMMIT
            assert await txns.add_partitions("app", pid, epoch, [("t", 0)]) == Errors.CONCURRENT_TRANSACTIONS
            assert (await txns.init_producer_id("app", 30_000))[0] == Errors.CONCURRENT_TRANSACTIONS
            assert pid in data.producer_state.ongoing
            assert groups.offsets.is_pending("g", "foo", 0)
            assert (data.log_end_offset, offsets_log.log_end_offset) == ends
        await txns.drain()
        assert txns.describe("app").state == COMPLETE_COMMIT
        assert pid not in data.producer_state.ongoing
        assert (data.log_end_offset, offsets_log.log_end_offset) == (ends[0] + 1, ends[1] + 1)  # once each
        assert not groups.offsets.is_pending("g", "foo", 0)
        assert groups.offsets.by_group["g"]["foo"][0].offset == 25
        assert sorted(set(topics.woken)) == [(CONSUMER_OFFSETS, 0), ("t", 0)]
        assert await txns.add_partitions("app", pid, epoch, [("t", 0)]) == 0  # the next transaction
        await txns.close()
        data.close()
        offsets_log.close()

    asyncio.run(go())
