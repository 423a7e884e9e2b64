"""transactional.id.expiration.ms in the transaction coordinator alone (a fake clock, a memory log):
which states expire and when (Kafka's ``shouldExpire``), the tombstone and its replay, and the ids a
concurrent request keeps (``removeExpiredTransactionalIds`` / ``writeTombstonesForExpiredTransactionalIds``)."""
from __future__ import annotations

import asyncio

from coordinator.runtime import MemoryRecordLog, decode_record
from coordinator.transaction import TransactionCoordinator
from coordinator.transaction.coordinator import (COMPLETE_ABORT, COMPLETE_COMMIT, DEAD, EMPTY, ONGOING,
                                                 PREPARE_ABORT, PREPARE_COMMIT, PREPARE_EPOCH_FENCE, TxnMetadata,
                                                 should_expire)
from protocol.coordinator_records.registry import TRANSACTION_COORDINATOR_RECORDS
from protocol.errors import Errors

EXPIRATION_MS = 10_000


class GatedLog(MemoryRecordLog):
    """A memory log whose appends wait while ``gate`` is clear (a slow disk)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.gate.set()

    async def append(self, records):
        await self.gate.wait()
        return await super().append(records)


class World:
    def __init__(self, log: MemoryRecordLog | None = None):
        self.log = log or GatedLog()
        self.now = 1_000_000
        self.pids = iter(range(100, 1100))

        async def write_markers(pid, epoch, commit, partitions):
            pass

        self.txns = TransactionCoordinator(self.log, new_producer_id=lambda: next(self.pids),
                                           write_markers=write_markers, now_ms=lambda: self.now,
                                           max_timeout_ms=60_000, expiration_ms=EXPIRATION_MS)

    def listed(self) -> set[str]:
        return {m.transactional_id for m in self.txns.list()}

    def records(self) -> list[tuple[str, object]]:
        """(transactional id, value or None) of every record written, in order."""
        out = []
        for _o, k, v in self.log.records:
            rec = decode_record(TRANSACTION_COORDINATOR_RECORDS, k, v)
            out.append((rec.key.transactional_id, rec.value))
        return out


def run(coro):
    return asyncio.run(coro)


def test_which_states_expire_and_the_exact_boundary():
    expirable = {EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}
    for state in (EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT, DEAD,
                  PREPARE_EPOCH_FENCE):
        m = TxnMetadata("app", 1, 0, 60_000)
        m.state, m.update_ms = state, 5_000
        # last update 5,000; expiration 1,000: expired from 6,000 on (txnLastUpdateTimestamp <= now - expiration)
        assert not should_expire(m, 5_999, 1_000), state
        assert should_expire(m, 6_000, 1_000) == (state in expirable), state
        assert should_expire(m, 10**15, 1_000) == (state in expirable), state


async def _setup(w: World) -> dict[str, int]:
    """committed, aborted, empty (no transaction yet), open (a transaction ongoing): their producer ids."""
    pids = {}
    for tid in ("committed", "aborted", "empty", "open"):
        err, pids[tid], _ = await w.txns.init_producer_id(tid, 30_000)
        assert err == Errors.NONE
    for tid in ("committed", "aborted", "open"):
        assert await w.txns.add_partitions(tid, pids[tid], 0, [("t", 0)]) == Errors.NONE
    assert (await w.txns.end_txn("committed", pids["committed"], 0, True))[0] == Errors.NONE
    assert (await w.txns.end_txn("aborted", pids["aborted"], 0, False))[0] == Errors.NONE
    return pids


def test_idle_ids_get_a_tombstone_and_stay_gone_after_a_reload():
    async def go():
        w = World()
        pids = await _setup(w)
        w.now += EXPIRATION_MS - 1
        assert await w.txns.remove_expired() == 0  # one millisecond too early
        w.now += 1
        written = len(w.log.records)
        assert await w.txns.remove_expired() == 3
        assert sorted(w.records()[written:]) == [("aborted", None), ("committed", None), ("empty", None)]
        assert w.listed() == {"open"}  # an ongoing transaction never expires
        w.now += 100 * EXPIRATION_MS
        assert await w.txns.remove_expired() == 0
        for tid in ("committed", "aborted", "empty"):
            assert w.txns.describe(tid) is None
        assert w.txns.describe("open").state == ONGOING

        again = World(w.log)  # a restart replays the tombstones
        again.pids = iter(range(500, 600))
        await again.txns.load()
        assert again.listed() == {"open"}
        # the id starts afresh: a new producer id at epoch 0, not the old one's epoch + 1
        err, pid, epoch = await again.txns.init_producer_id("committed", 30_000)
        assert (err, epoch) == (Errors.NONE, 0) and pid == 500 and pid != pids["committed"]
        assert await again.txns.add_partitions("committed", pid, 0, [("t", 0)]) == Errors.NONE
        assert await again.txns.end_txn("committed", pid, 0, True) == (Errors.NONE, pid, 0)
        # the old producer is unknown to the coordinator now
        assert await again.txns.add_partitions("aborted", pids["aborted"], 0, [("t", 0)]) == \
            Errors.INVALID_PRODUCER_ID_MAPPING
    run(go())


def test_a_write_queued_before_the_tombstone_keeps_its_id():
    async def go():
        w = World()
        for tid in ("a", "b"):
            await w.txns.init_producer_id(tid, 30_000)
        w.now += EXPIRATION_MS
        w.log.gate.clear()  # appends wait: writes queue behind each other
        first = asyncio.create_task(w.txns.init_producer_id("x", 30_000))  # holds the write lock
        await asyncio.sleep(0)
        bump_a = asyncio.create_task(w.txns.init_producer_id("a", 30_000))  # read "a", queued for the lock
        await asyncio.sleep(0)
        expiry = asyncio.create_task(w.txns.remove_expired())  # picks a and b, queued after
        for _ in range(5):
            await asyncio.sleep(0)
        # while b's tombstone waits: b is hidden (Kafka's Dead) and a request for it must retry
        assert w.txns.describe("b") is None and "b" not in w.listed()
        assert (await w.txns.init_producer_id("b", 30_000))[0] == Errors.CONCURRENT_TRANSACTIONS
        w.log.gate.set()
        assert (await first)[0] == Errors.NONE
        assert await bump_a == (Errors.NONE, 100, 1)
        assert await expiry == 1  # a changed before the tombstone's turn: only b goes
        assert w.txns.describe("a").epoch == 1 and w.txns.describe("b") is None
        assert ("a", None) not in w.records() and w.records()[-1] == ("b", None)
        err, pid, epoch = await w.txns.init_producer_id("b", 30_000)
        assert err == Errors.NONE and epoch == 0 and pid not in (100, 101)
    run(go())


async def one_idle_id() -> World:
    """A coordinator with one id, "a", idle for exactly the expiration time."""
    w = World()
    await w.txns.init_producer_id("a", 30_000)
    w.now += EXPIRATION_MS
    return w


def test_a_failed_append_keeps_the_ids_for_the_next_run():
    async def go():
        w = await one_idle_id()
        w.log.fail_next = OSError("disk gone")
        assert await w.txns.remove_expired() == 0
        assert w.txns.describe("a") is not None
        assert await w.txns.remove_expired() == 1
        assert w.txns.describe("a") is None
    run(go())


def test_nothing_expires_while_loading():
    async def go():
        w = await one_idle_id()
        again = World(w.log)
        again.now = w.now
        hold = asyncio.Event()
        again.txns.start_loading(hold.wait)
        assert await again.txns.remove_expired() == 0
        hold.set()
        await again.txns.wait_loaded()
        assert await again.txns.remove_expired() == 1
    run(go())
