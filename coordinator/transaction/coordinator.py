"""The transaction coordinator: transactional ids, their producer ids / epochs and two-phase commit.

Follows Kafka 4.4's ``TransactionCoordinator`` / ``TransactionStateManager`` /
``TransactionMetadata`` on one ``__transaction_state`` partition:

* State per transactional id (:class:`TxnMetadata`) changes only by replaying
  ``TransactionLog`` records, through the shared :class:`CoordinatorRuntime`
  (compute, append, replay, answer); :meth:`load` replays the log at start-up.
* InitProducerId: a new id gets a producer id with epoch 0; an existing one has its
  epoch bumped (a new producer id once the epoch is exhausted), which fences the
  previous instance; an ongoing transaction is aborted first (the epoch is bumped,
  PrepareAbort, markers, CompleteAbort) and the caller gets CONCURRENT_TRANSACTIONS
  to retry, as Kafka.  KIP-360: a given (producer id, epoch) must be the current or
  the previous one, else PRODUCER_FENCED.  ``transaction.timeout.ms`` above
  ``transaction.max.timeout.ms`` (or <= 0) is INVALID_TRANSACTION_TIMEOUT.
* AddPartitionsToTxn / AddOffsetsToTxn (and the KIP-890 implicit add of a v12+
  Produce or v5+ TxnOffsetCommit): Ongoing with the partitions added.
* EndTxn: Prepare{Commit,Abort} is logged, then the markers are written through
  ``write_markers`` (the broker appends control batches to the partitions), then
  Complete{Commit,Abort} is logged, then the client is answered.  EndTxn v5+
  (transaction.version 2) bumps the epoch with the Prepare record and returns it;
  a retry with the previous epoch gets the same answer.  At start-up, transactions
  found in Prepare* have their markers written and are completed
  (:meth:`complete_pending`).
* Timeouts: :meth:`abort_timed_out` aborts Ongoing transactions older than their
  timeout with an epoch bump (the producer is fenced), as Kafka's
  ``abortTimedOutTransactions``.
* DescribeTransactions, ListTransactions from the same state.

Error codes follow Kafka's coordinator: unknown transactional id or another
producer id -> INVALID_PRODUCER_ID_MAPPING; another epoch -> PRODUCER_FENCED;
Prepare* -> CONCURRENT_TRANSACTIONS (for the same outcome) or INVALID_TXN_STATE;
EndTxn on an Empty transaction (v0-4) -> INVALID_TXN_STATE.

Not implemented: ``transactional.id.expiration.ms`` (ids are never removed), several
``__transaction_state`` partitions, coordinator epochs (one node: always 0).
"""
from __future__ import annotations

import asyncio
import logging
import re
from typing import Awaitable, Callable, Iterable

from coordinator.runtime import CoordinatorRuntime, Record, RecordLog, record
from protocol.coordinator_records.registry import TRANSACTION_COORDINATOR_RECORDS
from protocol.coordinator_records.transaction_log import TransactionLogKey, TransactionLogValue
from protocol.errors import Errors

logger = logging.getLogger(__name__)

EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT, DEAD, PREPARE_EPOCH_FENCE = range(8)
STATE_NAMES = ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
               "PrepareEpochFence"]
MAX_EPOCH = 32767
NO_PRODUCER_ID = -1
NO_EPOCH = -1

TopicPartition = tuple[str, int]
MarkerWriter = Callable[[int, int, bool, list[TopicPartition]], Awaitable[None]]


class TxnMetadata:
    """One transactional id, as its last replayed record left it (plus ``last_epoch``, in memory)."""

    __slots__ = ("transactional_id", "producer_id", "prev_producer_id", "next_producer_id", "epoch", "last_epoch",
                 "timeout_ms", "state", "partitions", "start_ms", "update_ms", "client_version")

    def __init__(self, transactional_id: str, producer_id: int, epoch: int, timeout_ms: int):
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.prev_producer_id = NO_PRODUCER_ID
        self.next_producer_id = NO_PRODUCER_ID
        self.epoch = epoch
        self.last_epoch = NO_EPOCH
        self.timeout_ms = timeout_ms
        self.state = EMPTY
        self.partitions: set[TopicPartition] = set()
        self.start_ms = -1
        self.update_ms = -1
        self.client_version = 0

    def copy(self) -> "TxnMetadata":
        m = TxnMetadata(self.transactional_id, self.producer_id, self.epoch, self.timeout_ms)
        for s in self.__slots__:
            setattr(m, s, getattr(self, s))
        m.partitions = set(self.partitions)
        return m

    @property
    def state_name(self) -> str:
        return STATE_NAMES[self.state]

    def bump_epoch(self, new_producer_id: Callable[[], int]) -> None:
        """Next epoch, or a fresh producer id at epoch 0 once the epoch is exhausted (Kafka's rule)."""
        if self.epoch >= MAX_EPOCH - 1:
            self.prev_producer_id = self.producer_id
            self.producer_id = new_producer_id()
            self.last_epoch, self.epoch = NO_EPOCH, 0
        else:
            self.last_epoch, self.epoch = self.epoch, self.epoch + 1

    def to_value(self) -> TransactionLogValue:
        by_topic: dict[str, list[int]] = {}
        for t, p in sorted(self.partitions):
            by_topic.setdefault(t, []).append(p)
        return TransactionLogValue(
            producer_id=self.producer_id, previous_producer_id=self.prev_producer_id,
            next_producer_id=self.next_producer_id, producer_epoch=self.epoch,
            next_producer_epoch=self.last_epoch,  # ours: the previous epoch, for KIP-360 / TV2 retries
            transaction_timeout_ms=self.timeout_ms, transaction_status=self.state,
            transaction_partitions=[TransactionLogValue.PartitionsSchema(topic=t, partition_ids=ps)
                                    for t, ps in by_topic.items()],
            transaction_last_update_timestamp_ms=self.update_ms, transaction_start_timestamp_ms=self.start_ms,
            client_transaction_version=self.client_version)


class TxnError(Exception):
    def __init__(self, code: int):
        super().__init__(Errors(code).name)
        self.code = code


def _not_available(_response, _exc):
    raise TxnError(Errors.COORDINATOR_NOT_AVAILABLE)


class TransactionCoordinator:
    def __init__(self, log: RecordLog, *, new_producer_id: Callable[[], int], write_markers: MarkerWriter,
                 now_ms: Callable[[], int], max_timeout_ms: int = 900000,
                 partition_exists: Callable[[str, int], bool] = lambda t, p: True):
        self.txns: dict[str, TxnMetadata] = {}
        self.runtime = CoordinatorRuntime(log, TRANSACTION_COORDINATOR_RECORDS, self._replay,
                                          name="transaction coordinator")
        self._new_producer_id = new_producer_id
        self._write_markers = write_markers
        self.now_ms = now_ms
        self.max_timeout_ms = max_timeout_ms
        self.partition_exists = partition_exists
        self._busy: set[str] = set()  # ids in a multi-step transition (Kafka's pendingState)

    # ------------------------------------------------------------------ state
    def _replay(self, _offset: int, rec: Record) -> None:
        tid = rec.key.transactional_id
        v = rec.value
        if v is None:
            self.txns.pop(tid, None)
            return
        m = TxnMetadata(tid, v.producer_id, v.producer_epoch, v.transaction_timeout_ms)
        m.prev_producer_id = v.previous_producer_id
        m.next_producer_id = v.next_producer_id
        m.last_epoch = v.next_producer_epoch
        m.state = v.transaction_status
        m.partitions = {(t.topic, p) for t in v.transaction_partitions or () for p in t.partition_ids}
        m.start_ms = v.transaction_start_timestamp_ms
        m.update_ms = v.transaction_last_update_timestamp_ms
        m.client_version = v.client_transaction_version
        self.txns[tid] = m

    @staticmethod
    def _record(m: TxnMetadata) -> Record:
        return record(TransactionLogKey(transactional_id=m.transactional_id), m.to_value(), 1)

    async def load(self) -> None:
        await self.runtime.load()

    async def _commit(self, m: TxnMetadata) -> None:
        """Log ``m`` as the new state of its transactional id (durable, then replayed).

        A failed append raises TxnError(COORDINATOR_NOT_AVAILABLE), as Kafka maps log append errors."""
        await self.runtime.write(lambda: (None, [self._record(m)]), on_error=_not_available)

    # ------------------------------------------------------------ InitProducerId
    async def init_producer_id(self, tid: str, timeout_ms: int, expected_pid: int = NO_PRODUCER_ID,
                               expected_epoch: int = NO_EPOCH) -> tuple[int, int, int]:
        """(error, producer id, epoch) for a transactional producer's InitProducerId."""
        try:
            return await self._init_producer_id(tid, timeout_ms, expected_pid, expected_epoch)
        except TxnError as e:
            return e.code, NO_PRODUCER_ID, NO_EPOCH

    async def _init_producer_id(self, tid: str, timeout_ms: int, expected_pid: int,
                                expected_epoch: int) -> tuple[int, int, int]:
        if not tid:
            return Errors.INVALID_REQUEST, NO_PRODUCER_ID, NO_EPOCH
        if timeout_ms <= 0 or timeout_ms > self.max_timeout_ms:
            return Errors.INVALID_TRANSACTION_TIMEOUT, NO_PRODUCER_ID, NO_EPOCH
        now = self.now_ms()
        cur = self.txns.get(tid)
        if cur is None:
            m = TxnMetadata(tid, self._new_producer_id(), 0, timeout_ms)
            m.update_ms = now
            await self._commit(m)
            return Errors.NONE, m.producer_id, m.epoch
        if cur.state in (PREPARE_COMMIT, PREPARE_ABORT, PREPARE_EPOCH_FENCE) or tid in self._busy:
            return Errors.CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_EPOCH
        if expected_pid != NO_PRODUCER_ID and not (
                (expected_pid == cur.producer_id and expected_epoch in (cur.epoch, cur.last_epoch))
                or (expected_pid == cur.prev_producer_id and expected_epoch != NO_EPOCH)):
            return Errors.PRODUCER_FENCED, NO_PRODUCER_ID, NO_EPOCH
        if cur.state == ONGOING:
            # fence the current producer and abort its transaction; the client retries (Kafka's rule)
            await self._end(cur.copy(), commit=False, bump=True, now=now)
            return Errors.CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_EPOCH
        if expected_pid == cur.producer_id and expected_epoch == cur.last_epoch != NO_EPOCH and cur.state == EMPTY:
            return Errors.NONE, cur.producer_id, cur.epoch  # a retry of the bump that already happened
        m = cur.copy()
        m.bump_epoch(self._new_producer_id)
        m.state, m.partitions, m.start_ms, m.update_ms, m.timeout_ms = EMPTY, set(), -1, now, timeout_ms
        await self._commit(m)
        return Errors.NONE, m.producer_id, m.epoch

    # ------------------------------------------------------------ AddPartitions
    def _check_producer(self, tid: str, pid: int, epoch: int) -> TxnMetadata:
        m = self.txns.get(tid)
        if m is None or m.producer_id != pid:
            raise TxnError(Errors.INVALID_PRODUCER_ID_MAPPING)
        if m.epoch != epoch:
            raise TxnError(Errors.PRODUCER_FENCED)
        if m.state in (PREPARE_COMMIT, PREPARE_ABORT) or tid in self._busy:
            raise TxnError(Errors.CONCURRENT_TRANSACTIONS)
        if m.state in (DEAD, PREPARE_EPOCH_FENCE):
            raise TxnError(Errors.INVALID_PRODUCER_EPOCH)
        return m

    async def add_partitions(self, tid: str, pid: int, epoch: int, partitions: Iterable[TopicPartition],
                             client_version: int | None = None) -> int:
        """Add partitions to the (new or ongoing) transaction; an error code for all of them."""
        parts = set(partitions)

        def op():
            try:
                m = self._check_producer(tid, pid, epoch)
            except TxnError as e:
                return e.code, []
            if m.state == ONGOING and parts <= m.partitions:
                return Errors.NONE, []
            n = m.copy()
            now = self.now_ms()
            if n.state != ONGOING:
                n.state, n.partitions, n.start_ms = ONGOING, set(), now
                if client_version is not None:
                    n.client_version = client_version
            n.partitions |= parts
            n.update_ms = now
            return Errors.NONE, [self._record(n)]

        return await self.runtime.write(op, on_error=lambda _r, _e: Errors.COORDINATOR_NOT_AVAILABLE)

    def verify(self, tid: str, pid: int, epoch: int, tp: TopicPartition) -> int:
        """KIP-890 part 1: is ``tp`` in the ongoing transaction of (pid, epoch)? An error code."""
        m = self.txns.get(tid)
        if m is None or m.producer_id != pid:
            return Errors.INVALID_PRODUCER_ID_MAPPING
        if epoch < m.epoch:
            return Errors.INVALID_PRODUCER_EPOCH
        if m.state != ONGOING or tp not in m.partitions or epoch != m.epoch:
            return Errors.INVALID_TXN_STATE
        return Errors.NONE

    # ------------------------------------------------------------------ EndTxn
    async def end_txn(self, tid: str, pid: int, epoch: int, commit: bool, tv2: bool = False) -> tuple[int, int, int]:
        """(error, producer id, epoch) for EndTxn; v5+ (``tv2``) answers the bumped epoch."""
        try:
            return await self._end_txn(tid, pid, epoch, commit, tv2)
        except TxnError as e:
            return e.code, NO_PRODUCER_ID, NO_EPOCH

    async def _end_txn(self, tid: str, pid: int, epoch: int, commit: bool, tv2: bool) -> tuple[int, int, int]:
        m = self.txns.get(tid)
        if m is None or pid not in (m.producer_id, m.prev_producer_id) or (
                pid == m.prev_producer_id and pid != m.producer_id and not tv2):
            return Errors.INVALID_PRODUCER_ID_MAPPING, NO_PRODUCER_ID, NO_EPOCH
        if tid in self._busy:
            return Errors.CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_EPOCH
        done = COMPLETE_COMMIT if commit else COMPLETE_ABORT
        preparing = PREPARE_COMMIT if commit else PREPARE_ABORT
        retry = tv2 and ((pid == m.producer_id and epoch == m.last_epoch) or pid == m.prev_producer_id)
        if retry:  # TV2: the epoch was bumped by the EndTxn this one retries
            if m.state == done:
                return Errors.NONE, m.producer_id, m.epoch
            if m.state == preparing:
                return Errors.CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_EPOCH
            return Errors.PRODUCER_FENCED, NO_PRODUCER_ID, NO_EPOCH
        if pid != m.producer_id or epoch != m.epoch:
            return Errors.PRODUCER_FENCED, NO_PRODUCER_ID, NO_EPOCH
        if m.state == ONGOING:
            n = await self._end(m.copy(), commit, bump=tv2, now=self.now_ms())
            return Errors.NONE, n.producer_id, n.epoch
        if m.state == preparing:
            return Errors.CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_EPOCH
        if m.state == done and not tv2:
            return Errors.NONE, m.producer_id, m.epoch  # a retry (TV0/1 keeps the epoch)
        if tv2 and not commit and m.state in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT):
            n = await self._end(m.copy(), False, bump=True, now=self.now_ms())  # TV2: abort of an empty txn
            return Errors.NONE, n.producer_id, n.epoch
        return Errors.INVALID_TXN_STATE, NO_PRODUCER_ID, NO_EPOCH

    async def _end(self, n: TxnMetadata, commit: bool, bump: bool, now: int) -> TxnMetadata:
        """Two-phase end: log Prepare*, write the markers, log Complete*; returns the completed state."""
        tid = n.transactional_id
        self._busy.add(tid)
        retrying = False
        try:
            if bump:
                n.bump_epoch(self._new_producer_id)
            n.state = PREPARE_COMMIT if commit else PREPARE_ABORT
            n.update_ms = now
            await self._commit(n)
            try:
                return await self._complete(n)
            except Exception as exc:  # the markers or the Complete record failed: keep trying in the background
                logger.warning("completing %s of %r failed (%r); retrying", n.state_name, tid, exc)
                retrying = True  # the id stays busy until the retry is done
                self.runtime.spawn(self._retry_complete(n), f"completing the transaction of {tid!r}")
                raise TxnError(Errors.COORDINATOR_NOT_AVAILABLE) from None
        finally:
            if not retrying:
                self._busy.discard(tid)

    async def _complete(self, n: TxnMetadata) -> TxnMetadata:
        commit = n.state == PREPARE_COMMIT
        if n.partitions:
            await self._write_markers(n.producer_id, n.epoch, commit, sorted(n.partitions))
        done = n.copy()
        done.state = COMPLETE_COMMIT if commit else COMPLETE_ABORT
        done.partitions = set()
        done.update_ms = self.now_ms()
        await self._commit(done)
        return done

    async def _retry_complete(self, n: TxnMetadata, delay_s: float = 0.5) -> None:
        """Markers are retried until they are written, as Kafka's marker channel does (the id stays busy)."""
        tid = n.transactional_id
        try:
            while True:
                await asyncio.sleep(delay_s)
                try:
                    await self._complete(n)
                    return
                except Exception as exc:
                    logger.warning("completing %s of %r failed again: %r", n.state_name, tid, exc)
        finally:
            self._busy.discard(tid)

    async def complete_pending(self) -> int:
        """Start-up: finish transactions logged as Prepare* (their markers may be missing)."""
        pending = [m.copy() for m in self.txns.values() if m.state in (PREPARE_COMMIT, PREPARE_ABORT)]
        for m in pending:
            logger.info("completing %s of transactional id %r after restart", m.state_name, m.transactional_id)
            await self._complete(m)
        return len(pending)

    # ----------------------------------------------------------------- timeouts
    async def abort_timed_out(self, now: int | None = None) -> int:
        """Abort (with an epoch bump that fences the producer) Ongoing transactions past their timeout."""
        now = self.now_ms() if now is None else now
        expired = [m.copy() for m in self.txns.values()
                   if m.state == ONGOING and m.start_ms >= 0 and now - m.start_ms > m.timeout_ms]
        for m in expired:
            cur = self.txns.get(m.transactional_id)
            if cur is None or cur.state != ONGOING or cur.epoch != m.epoch or m.transactional_id in self._busy:
                continue
            logger.info("aborting transaction of %r (producer %d): timed out after %d ms", m.transactional_id,
                        m.producer_id, now - m.start_ms)
            await self._end(m, commit=False, bump=True, now=now)
        return len(expired)

    # ------------------------------------------------------------------ admin
    def describe(self, tid: str) -> TxnMetadata | None:
        return self.txns.get(tid)

    def list(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (), min_duration_ms: int = -1,
             pattern: str | None = None) -> list[TxnMetadata]:
        """ListTransactions' filters: state names, producer ids, running longer than, id regex (v2)."""
        states, pids = set(states), set(producer_ids)
        now = self.now_ms()
        rx = re.compile(pattern) if pattern else None
        out = []
        for m in self.txns.values():
            if states and m.state_name not in states:
                continue
            if pids and m.producer_id not in pids:
                continue
            if min_duration_ms >= 0 and (m.state != ONGOING or now - m.start_ms < min_duration_ms):
                continue
            if rx is not None and not rx.fullmatch(m.transactional_id):
                continue
            out.append(m)
        return out

    async def drain(self) -> None:
        await self.runtime.drain()


__all__ = ["TransactionCoordinator", "TxnMetadata", "STATE_NAMES"]
