"""The transaction coordinator alone: a memory record log, a fake clock and a recording marker writer."""
from __future__ import annotations

import asyncio

from coordinator.runtime import MemoryRecordLog, decode_record
from coordinator.transaction import TransactionCoordinator
from coordinator.transaction.coordinator import (COMPLETE_ABORT, COMPLETE_COMMIT, EMPTY, ONGOING, PREPARE_ABORT,
                                                 PREPARE_COMMIT, MarkersNotWritten)
from protocol.coordinator_records.registry import TRANSACTION_COORDINATOR_RECORDS
from protocol.errors import Errors


class World:
    def __init__(self, log: MemoryRecordLog | None = None, next_pid: int = 100):
        self.log = log or MemoryRecordLog()
        self.now = 1_000
        self.markers: list[tuple[int, int, bool, list]] = []
        self.pids = iter(range(next_pid, next_pid + 1000))
        self.fail_markers = False
        self.marker_calls = 0

        async def write_markers(pid, epoch, commit, partitions):
            self.marker_calls += 1
            if self.fail_markers:
                raise OSError("disk gone")
            self.markers.append((pid, epoch, commit, list(partitions)))

        self.txns = TransactionCoordinator(self.log, new_producer_id=lambda: next(self.pids),
                                           write_markers=write_markers, now_ms=lambda: self.now,
                                           max_timeout_ms=60_000)

    def states(self) -> list[int]:
        """The TransactionStatus of every record written, in order."""
        return [decode_record(TRANSACTION_COORDINATOR_RECORDS, k, v).value.transaction_status
                for _o, k, v in self.log.records]


def run(coro):
    return asyncio.run(coro)


def test_commit_is_two_phase_and_replays():
    async def go():
        w = World()
        err, pid, epoch = await w.txns.init_producer_id("app", 30_000)
        assert (err, pid, epoch) == (0, 100, 0)
        assert await w.txns.add_partitions("app", pid, 0, [("t", 0), ("t", 1)]) == 0
        assert w.txns.verify("app", pid, 0, ("t", 1)) == 0
        assert w.txns.verify("app", pid, 0, ("t", 2)) == Errors.TRANSACTION_ABORTABLE  # mapped by version
        assert await w.txns.end_txn("app", pid, 0, True) == (0, pid, 0)
        assert w.markers == [(pid, 0, True, [("t", 0), ("t", 1)])]
        assert w.states()[-2:] == [PREPARE_COMMIT, COMPLETE_COMMIT]
        again = World(w.log)
        await again.txns.load()
        m = again.txns.describe("app")
        assert (m.producer_id, m.epoch, m.state, m.partitions) == (pid, 0, COMPLETE_COMMIT, set())
        assert await again.txns.complete_pending() == 0
    run(go())


def test_prepare_without_complete_is_finished_at_load():
    async def go():
        w = World()
        _, pid, _ = await w.txns.init_producer_id("app", 30_000)
        await w.txns.add_partitions("app", pid, 0, [("t", 0)])
        w.fail_markers = True  # the markers cannot be written; then the process "dies"
        assert (await w.txns.end_txn("app", pid, 0, True))[0] == Errors.NONE  # decided once Prepare is logged
        assert w.states()[-1] == PREPARE_COMMIT
        assert (await w.txns.add_partitions("app", pid, 0, [("t", 1)])) == Errors.CONCURRENT_TRANSACTIONS
        await w.txns.close()  # the retry stops with the coordinator
        assert w.states()[-1] == PREPARE_COMMIT
        again = World(w.log)
        await again.txns.load()
        assert await again.txns.complete_pending() == 1
        assert again.markers == [(pid, 0, True, [("t", 0)])]
        assert again.txns.describe("app").state == COMPLETE_COMMIT
    run(go())


def test_timeout_aborts_with_an_epoch_bump():
    async def go():
        w = World()
        _, pid, _ = await w.txns.init_producer_id("app", 5_000)
        await w.txns.add_partitions("app", pid, 0, [("t", 0)])
        w.now += 5_000
        assert await w.txns.abort_timed_out() == 0  # not past the timeout yet
        w.now += 1
        assert await w.txns.abort_timed_out() == 1
        m = w.txns.describe("app")
        assert (m.state, m.epoch) == (COMPLETE_ABORT, 2)  # fence bump + TV2 abort bump, as Kafka
        assert w.markers == [(pid, 2, False, [("t", 0)])]
        # the old producer is fenced everywhere
        assert await w.txns.add_partitions("app", pid, 0, [("t", 0)]) == Errors.PRODUCER_FENCED
        assert (await w.txns.end_txn("app", pid, 0, True))[0] == Errors.PRODUCER_FENCED
        # a TV2 client cannot pass its fenced epoch off as a retry of an EndTxn and adopt the new one
        assert (await w.txns.end_txn("app", pid, 0, False, tv2=True))[0] == Errors.PRODUCER_FENCED
    run(go())


def test_init_on_ongoing_fences_and_aborts_then_bumps():
    async def go():
        w = World()
        _, pid, _ = await w.txns.init_producer_id("app", 30_000)
        await w.txns.add_partitions("app", pid, 0, [("t", 0)])
        assert w.txns.describe("app").state == ONGOING
        assert (await w.txns.init_producer_id("app", 30_000))[0] == Errors.CONCURRENT_TRANSACTIONS
        assert w.markers == [(pid, 2, False, [("t", 0)])]
        assert await w.txns.init_producer_id("app", 30_000) == (0, pid, 3)
    run(go())


def test_exhausted_epoch_gets_a_new_producer_id():
    async def go():
        w = World()
        _, pid, _ = await w.txns.init_producer_id("app", 30_000)
        w.txns.txns["app"].epoch = 32766  # as if bumped that often
        err, new_pid, epoch = await w.txns.init_producer_id("app", 30_000)
        assert (err, epoch) == (0, 0) and new_pid != pid
        assert w.txns.describe("app").prev_producer_id == pid
    run(go())


def test_list_filters():
    async def go():
        w = World()
        for tid in ("a", "b", "c"):
            await w.txns.init_producer_id(tid, 30_000)
        _, pid, _ = await w.txns.init_producer_id("d", 30_000)
        await w.txns.add_partitions("d", pid, 0, [("t", 0)])
        w.now += 100
        assert [m.transactional_id for m in w.txns.list(["Ongoing"])] == ["d"]
        assert sorted(m.transactional_id for m in w.txns.list(["Empty"])) == ["a", "b", "c"]
        assert [m.transactional_id for m in w.txns.list(pattern="[ab]")] == ["a", "b"]
        # Kafka's TransactionStateManager.listTransactionStates: left out when now - txnStartTimestamp <=
        # the filter, in any state (a, b, c never started one: their start is -1)
        assert sorted(m.transactional_id for m in w.txns.list(min_duration_ms=99)) == ["a", "b", "c", "d"]
        assert sorted(m.transactional_id for m in w.txns.list(min_duration_ms=100)) == ["a", "b", "c"]
        assert [m.transactional_id for m in w.txns.list(["Ongoing"], min_duration_ms=100)] == []
        assert w.txns.list(["Nope"]) == []
    run(go())


def test_failed_markers_are_retried_until_written():
    """TransactionMarkerChannelManager: markers that fail are retried until written; the transaction stays
    Prepare* meanwhile (the producer gets CONCURRENT_TRANSACTIONS) and completes only after them."""
    async def go():
        w = World()
        _, pid, _ = await w.txns.init_producer_id("app", 30_000)
        await w.txns.add_partitions("app", pid, 0, [("t", 0)])
        w.fail_markers = True
        assert await w.txns.end_txn("app", pid, 0, True) == (0, pid, 0)  # answered once Prepare is logged
        deadline = asyncio.get_running_loop().time() + 10
        while w.marker_calls < 3:  # a few retries fail
            assert asyncio.get_running_loop().time() < deadline, "the markers were not retried"
            await asyncio.sleep(0.01)
        assert w.states()[-1] == PREPARE_COMMIT and w.markers == []
        assert w.txns.describe("app").state == PREPARE_COMMIT
        assert (await w.txns.init_producer_id("app", 30_000))[0] == Errors.CONCURRENT_TRANSACTIONS
        assert await w.txns.add_partitions("app", pid, 0, [("t", 0)]) == Errors.CONCURRENT_TRANSACTIONS
        assert (await w.txns.end_txn("app", pid, 0, True))[0] == Errors.CONCURRENT_TRANSACTIONS
        assert (await w.txns.end_txn("app", pid, 0, False))[0] == Errors.CONCURRENT_TRANSACTIONS
        w.now += 60_000
        assert await w.txns.abort_timed_out() == 0  # a decided commit is never aborted
        w.fail_markers = False
        await w.txns.drain()  # the background retry
        assert w.markers == [(pid, 0, True, [("t", 0)])]
        assert w.states()[-2:] == [PREPARE_COMMIT, COMPLETE_COMMIT]
        assert await w.txns.end_txn("app", pid, 0, True) == (0, pid, 0)  # a client's retry
        assert await w.txns.add_partitions("app", pid, 0, [("t", 0)]) == 0  # the next transaction
    run(go())


def test_only_the_markers_not_written_are_retried():
    async def go():
        w = World()
        _, pid, _ = await w.txns.init_producer_id("app", 30_000)
        await w.txns.add_partitions("app", pid, 0, [("t", 0), ("t", 1), ("u", 0)])
        full = {("t", 1)}

        async def write_markers(p, epoch, commit, partitions):
            w.markers.append((p, epoch, commit, [tp for tp in partitions if tp not in full]))
            if full & set(partitions):
                raise MarkersNotWritten(full & set(partitions), "disk full")

        w.txns._write_markers = write_markers
        assert (await w.txns.end_txn("app", pid, 0, True))[0] == Errors.NONE
        full.clear()
        await w.txns.drain()
        assert w.markers == [(pid, 0, True, [("t", 0), ("u", 0)]), (pid, 0, True, [("t", 1)])]
        assert w.txns.describe("app").state == COMPLETE_COMMIT
    run(go())


def test_timed_out_abort_and_start_up_completion_retry_failed_markers():
    async def go():
        w = World()
        _, pid, _ = await w.txns.init_producer_id("app", 5_000)
        await w.txns.add_partitions("app", pid, 0, [("t", 0)])
        w.now += 5_001
        w.fail_markers = True
        assert await w.txns.abort_timed_out() == 1
        assert w.txns.describe("app").state == PREPARE_ABORT
        assert (await w.txns.init_producer_id("app", 30_000))[0] == Errors.CONCURRENT_TRANSACTIONS
        await w.txns.close()
        again = World(w.log)  # a restart while the markers still cannot be written
        again.fail_markers = True
        await again.txns.load()
        assert await again.txns.complete_pending() == 1
        assert again.txns.describe("app").state == PREPARE_ABORT
        assert (await again.txns.init_producer_id("app", 30_000))[0] == Errors.CONCURRENT_TRANSACTIONS
        again.fail_markers = False
        await again.txns.drain()
        assert again.markers == [(pid, 2, False, [("t", 0)])]
        assert again.txns.describe("app").state == COMPLETE_ABORT
        assert await again.txns.init_producer_id("app", 30_000) == (0, pid, 3)
    run(go())


def test_kip360_bump_does_not_unfence_a_zombie():
    """prepareIncrementProducerEpoch: a new instance (no expected epoch) leaves no "last epoch", so the
    previous instance's KIP-360 InitProducerId with its old epoch is fenced, whatever the state."""
    async def go():
        w = World()
        _, pid, _ = await w.txns.init_producer_id("app", 30_000)
        assert await w.txns.init_producer_id("app", 30_000) == (0, pid, 1)  # the new instance
        assert (await w.txns.init_producer_id("app", 30_000, pid, 0))[0] == Errors.PRODUCER_FENCED  # Empty
        await w.txns.add_partitions("app", pid, 1, [("t", 0)])
        await w.txns.end_txn("app", pid, 1, True)
        assert (await w.txns.init_producer_id("app", 30_000, pid, 0))[0] == Errors.PRODUCER_FENCED  # Complete
        assert w.txns.describe("app").epoch == 1  # the live producer was not fenced
        # the current producer bumps its own epoch (KIP-360); a retry of that bump gets the same answer
        assert await w.txns.init_producer_id("app", 30_000, pid, 1) == (0, pid, 2)
        assert await w.txns.init_producer_id("app", 30_000, pid, 1) == (0, pid, 2)
        assert (await w.txns.init_producer_id("app", 30_000, pid, -1))[0] == Errors.INVALID_REQUEST
    run(go())


def test_tv2_end_txn_retries_and_table():
    """TransactionCoordinator.endTransaction's TV2 table: a retry carries the epoch before the bump."""
    async def go():
        w = World()
        _, pid, _ = await w.txns.init_producer_id("app", 30_000)
        assert await w.txns.end_txn("app", pid, 0, True, tv2=True) == (Errors.INVALID_TXN_STATE, -1, -1)  # Empty
        await w.txns.add_partitions("app", pid, 0, [("t", 0)])
        assert await w.txns.end_txn("app", pid, 0, True, tv2=True) == (0, pid, 1)
        assert await w.txns.end_txn("app", pid, 0, True, tv2=True) == (0, pid, 1)  # retry
        assert (await w.txns.end_txn("app", pid, 0, False, tv2=True))[0] == Errors.INVALID_TXN_STATE  # retry, other
        assert (await w.txns.end_txn("app", pid, 1, True, tv2=True))[0] == Errors.INVALID_TXN_STATE  # current commit
        assert await w.txns.end_txn("app", pid, 1, False, tv2=True) == (0, pid, 2)  # current abort: bump
        assert await w.txns.end_txn("app", pid, 1, False, tv2=True) == (0, pid, 2)  # its retry
        assert await w.txns.init_producer_id("app", 30_000) == (0, pid, 3)
        assert (await w.txns.end_txn("app", pid, 2, False, tv2=True))[0] == Errors.PRODUCER_FENCED  # Empty: no retry
    run(go())


def test_tv2_epoch_overflow_rotates_after_the_markers():
    """prepareAbortOrCommit / prepareComplete: the markers close the transaction of the producer id that
    wrote it (at epoch 32767); the Complete record switches to the next producer id at epoch 0."""
    async def go():
        w = World()
        _, pid, _ = await w.txns.init_producer_id("app", 30_000)
        w.txns.txns["app"].epoch = 32766  # as if bumped that often
        await w.txns.add_partitions("app", pid, 32766, [("t", 0)])
        err, new_pid, epoch = await w.txns.end_txn("app", pid, 32766, True, tv2=True)
        assert (err, epoch) == (0, 0) and new_pid != pid
        assert w.markers == [(pid, 32767, True, [("t", 0)])]
        m = w.txns.describe("app")
        assert (m.producer_id, m.prev_producer_id, m.next_producer_id, m.state) == (new_pid, pid, -1, COMPLETE_COMMIT)
        assert await w.txns.end_txn("app", pid, 32766, True, tv2=True) == (0, new_pid, 0)  # retry on overflow
        assert (await w.txns.end_txn("app", pid, 5, True, tv2=True))[0] == Errors.INVALID_PRODUCER_ID_MAPPING
        again = World(w.log)  # the rotation survives a reload
        await again.txns.load()
        assert (again.txns.describe("app").producer_id, again.txns.describe("app").epoch) == (new_pid, 0)
    run(go())


def test_init_rotation_retry_and_old_producer_id():
    """prepareProducerIdRotation with an expected epoch records it, so the retry gets the same answer;
    the previous producer id is accepted only with an exhausted epoch (isValidProducerId)."""
    async def go():
        w = World()
        _, pid, _ = await w.txns.init_producer_id("app", 30_000)
        w.txns.txns["app"].epoch = 32766
        err, new_pid, epoch = await w.txns.init_producer_id("app", 30_000, pid, 32766)
        assert (err, epoch) == (0, 0) and new_pid != pid
        assert await w.txns.init_producer_id("app", 30_000, pid, 32766) == (0, new_pid, 0)  # the retry
        assert (await w.txns.init_producer_id("app", 30_000, pid, 7))[0] == Errors.PRODUCER_FENCED
        assert w.txns.describe("app").state == EMPTY
    run(go())
