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
  to retry, as Kafka.  KIP-360 (``prepareIncrementProducerEpoch``): a given producer
  id must be the current one (or the previous one with an exhausted epoch, a retry of
  a rotation) and its epoch the current one (bumped) or the last one (a retry: the
  same answer), else PRODUCER_FENCED; a bump without a given epoch (a new instance)
  leaves no last epoch, so the old instance stays fenced.  ``transaction.timeout.ms`` above
  ``transaction.max.timeout.ms`` (or <= 0) is INVALID_TRANSACTION_TIMEOUT.
* AddPartitionsToTxn / AddOffsetsToTxn (and the KIP-890 implicit add of a v12+
  Produce or v5+ TxnOffsetCommit): Ongoing with the partitions added.
* EndTxn: Prepare{Commit,Abort} is logged, then the markers are written through
  ``write_markers`` (the broker appends control batches to the partitions), then
  Complete{Commit,Abort} is logged, then the client is answered.  EndTxn v5+
  (transaction.version 2) bumps the epoch with the Prepare record and returns it;
  a retry (epoch + 1 is the current one, or the rotation it caused) gets the same
  answer, as ``endTransaction``'s TV2 table.  Once the epoch is exhausted the markers
  are written at epoch 32767 of the producer id that wrote the transaction and the
  Complete record switches to the next producer id at epoch 0.  At start-up, transactions
  found in Prepare* have their markers written and are completed
  (:meth:`complete_pending`).
* Markers that cannot be written (a full disk): once Prepare* is logged the outcome is decided,
  so EndTxn answers NONE and :meth:`_finish` retries the markers not written (then the Complete
  record) in the background until they are, as Kafka's ``TransactionMarkerChannelManager``; the id
  stays busy meanwhile (CONCURRENT_TRANSACTIONS), so a committed transaction can never be aborted.
* Timeouts: :meth:`abort_timed_out` aborts Ongoing transactions older than their
  timeout with an epoch bump (the producer is fenced), as Kafka's
  ``abortTimedOutTransactions``: the fence bump and transaction.version 2's abort
  bump, so the fenced epoch + 1 is not the current one (no EndTxn "retry" matches).
* Expiration: :meth:`remove_expired` (every
  ``transaction.remove.expired.transaction.cleanup.interval.ms``) removes each transactional
  id in Empty / CompleteCommit / CompleteAbort whose last update is
  ``transactional.id.expiration.ms`` or more in the past (:func:`should_expire`), as Kafka's
  ``removeExpiredTransactionalIds``: a tombstone for its key is logged and replayed, which
  drops it (a restart agrees); an id in a transition is skipped, an id whose state changed
  before the tombstone's turn is kept, and a request for an id while its tombstone is
  appended answers CONCURRENT_TRANSACTIONS. Afterwards the id is unknown: InitProducerId
  starts it afresh (a new producer id, epoch 0).
* DescribeTransactions, ListTransactions from the same state (an id being expired is hidden,
  as Kafka hides Dead).
* Loading: :meth:`start_loading` replays ``__transaction_state`` in the background (the
  latest value of each transactional id, see :mod:`coordinator.runtime`), then completes
  the Prepare* transactions it found; until then every API answers
  COORDINATOR_LOAD_IN_PROGRESS (:meth:`unavailable_code`; KIP-890 verification of a
  Produce turns it into NOT_ENOUGH_REPLICAS, as Kafka's ReplicaManager does) and the
  timed-out-transaction job does nothing (Kafka's TransactionStateManager).

Error codes follow Kafka's coordinator: unknown transactional id or another
producer id -> INVALID_PRODUCER_ID_MAPPING; another epoch -> PRODUCER_FENCED;
Prepare* -> CONCURRENT_TRANSACTIONS (for the same outcome) or INVALID_TXN_STATE;
EndTxn on an Empty transaction (v0-4) -> INVALID_TXN_STATE.

Not implemented: several ``__transaction_state`` partitions, coordinator epochs (one node: always 0).
"""
from __future__ import annotations

import asyncio
import logging
import re
from typing import Awaitable, Callable, Iterable

from coordinator.runtime import CoordinatorRuntime, Record, RecordLog, record
from protocol.coordinator_records.registry import (TRANSACTION_COORDINATOR_RECORDS, TransactionLogKey,
                                                   TransactionLogValue)
from protocol.errors import Errors

logger = logging.getLogger(__name__)

EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT, DEAD, PREPARE_EPOCH_FENCE = range(8)
STATE_NAMES = ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
               "PrepareEpochFence"]
# TransactionState.isExpirationAllowed: no transaction open or being completed (Dead and PrepareEpochFence
# are never logged here: an expiry is a tombstone, a fence goes straight to PrepareAbort)
EXPIRABLE_STATES = frozenset({EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT})
DEFAULT_EXPIRATION_MS = 604800000  # transactional.id.expiration.ms (7 days)
EXPIRE_CHUNK = 1000  # ids looked at, and tombstones written in one batch, per turn of the event loop
MAX_EPOCH = 32767
# the marker retry delays (Kafka's retry.backoff.ms and retry.backoff.max.ms defaults)
RETRY_BACKOFF_S = 0.1
RETRY_BACKOFF_MAX_S = 1.0
NO_PRODUCER_ID = -1
NO_EPOCH = -1

TopicPartition = tuple[str, int]
MarkerWriter = Callable[[int, int, bool, list[TopicPartition]], Awaitable[None]]


def should_expire(m: "TxnMetadata", now: int, expiration_ms: int) -> bool:
    """Kafka's ``shouldExpire``: an expirable state, last updated ``expiration_ms`` or more before ``now``."""
    return m.state in EXPIRABLE_STATES and m.update_ms <= now - expiration_ms


def epoch_exhausted(epoch: int) -> bool:
    """Kafka's ``TransactionMetadata.isEpochExhausted``: 32766 and 32767 are kept for fencing."""
    return epoch >= MAX_EPOCH - 1


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

    def transit(self) -> "TxnMetadata":
        """A copy to change into the next state: Kafka's ``prepareTransitionTo`` records the producer id
        the transition starts from as the previous producer id (set again by every transition)."""
        n = self.copy()
        n.prev_producer_id = self.producer_id
        return n

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


class MarkersNotWritten(Exception):
    """Raised by a marker writer: the markers of ``partitions`` could not be written yet (retriable)."""

    def __init__(self, partitions: Iterable[TopicPartition], reason: str):
        super().__init__(reason)
        self.partitions = list(partitions)


class TxnError(Exception):
    def __init__(self, code: int):
        super().__init__(Errors(code).name)
        self.code = code


_TV1, _TV2, _FENCE = range(3)  # how ``_end`` moves the epoch


def _not_available(_response, _exc):
    raise TxnError(Errors.COORDINATOR_NOT_AVAILABLE)


class TransactionCoordinator:
    def __init__(self, log: RecordLog, *, new_producer_id: Callable[[], int], write_markers: MarkerWriter,
                 now_ms: Callable[[], int], max_timeout_ms: int = 900000,
                 partition_exists: Callable[[str, int], bool] = lambda t, p: True,
                 expiration_ms: int = DEFAULT_EXPIRATION_MS):
        self.txns: dict[str, TxnMetadata] = {}
        self.runtime = CoordinatorRuntime(log, TRANSACTION_COORDINATOR_RECORDS, self._replay,
                                          name="transaction coordinator")
        self._new_producer_id = new_producer_id
        self._write_markers = write_markers
        self.now_ms = now_ms
        self.max_timeout_ms = max_timeout_ms
        self.partition_exists = partition_exists
        self.expiration_ms = expiration_ms
        self._busy: set[str] = set()  # ids in a multi-step transition (Kafka's pendingState)
        # written by _expire while the tombstones of these ids are appended (Kafka's pendingState Dead: described
        # and listed as gone); not replayed; emptied when the append ends
        self._dying: set[str] = set()
        self._expiring = False  # written by remove_expired while a run goes on (runs never overlap)
        # written by _finish: the background completion of each prepared transaction whose markers (or
        # Complete record) failed; cancelled by close (a restart completes them from the log)
        self._retries: dict[str, asyncio.Task] = {}

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
        await self.runtime.load(latest_only=True)

    def start_loading(self, hold: Callable[[], Awaitable[None]] | None = None) -> None:
        """:meth:`load` in the background, then :meth:`complete_pending` (Kafka sends the markers of the
        Prepare* transactions once the partition is no longer loading)."""
        self.runtime.start_loading(latest_only=True, before=hold, after=lambda: self.runtime.spawn(
            self.complete_pending(), "completing prepared transactions"))

    def unavailable_code(self) -> int:
        """0 when serving, else the error every transaction API answers (COORDINATOR_LOAD_IN_PROGRESS while loading)."""
        return self.runtime.unavailable_code()

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
        if (expected_pid == NO_PRODUCER_ID) != (expected_epoch == NO_EPOCH):
            return Errors.INVALID_REQUEST, NO_PRODUCER_ID, NO_EPOCH  # KafkaApis: both or neither
        if code := self.unavailable_code():
            return code, NO_PRODUCER_ID, NO_EPOCH
        expected = expected_pid != NO_PRODUCER_ID
        now = self.now_ms()
        cur = self.txns.get(tid)
        if cur is None:
            m = TxnMetadata(tid, self._new_producer_id(), 0, timeout_ms)
            m.update_ms = now
            await self._commit(m)
            return Errors.NONE, m.producer_id, m.epoch
        if tid in self._busy:
            return Errors.CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_EPOCH
        # prepareInitProducerIdTransit.isValidProducerId: the current producer id (its epoch is checked
        # below), or the previous one with an exhausted epoch (a retry of a producer id rotation)
        if expected and not (expected_pid == cur.producer_id
                             or (expected_pid == cur.prev_producer_id and epoch_exhausted(expected_epoch))):
            return Errors.PRODUCER_FENCED, NO_PRODUCER_ID, NO_EPOCH
        if cur.state in (PREPARE_COMMIT, PREPARE_ABORT, PREPARE_EPOCH_FENCE):
            return Errors.CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_EPOCH
        if cur.state == ONGOING:
            if expected and expected_epoch not in (cur.epoch, cur.last_epoch):
                # stricter than Kafka, which fences here on the producer id alone: a zombie's KIP-360
                # InitProducerId must not abort the live instance's transaction
                return Errors.PRODUCER_FENCED, NO_PRODUCER_ID, NO_EPOCH
            # fence the current producer and abort its transaction; the client retries (Kafka's rule)
            await self._end(cur.transit(), commit=False, mode=_FENCE, now=now)
            return Errors.CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_EPOCH
        m = cur.transit()
        if epoch_exhausted(cur.epoch) and (not expected or expected_epoch == cur.epoch):
            # prepareProducerIdRotation
            m.producer_id, m.epoch = self._new_producer_id(), 0
            m.last_epoch = cur.epoch if expected else NO_EPOCH
        elif not expected:  # prepareIncrementProducerEpoch without an expected epoch: a new instance
            m.epoch, m.last_epoch = cur.epoch + 1, NO_EPOCH
        elif expected_epoch == cur.epoch:  # KIP-360: the current producer bumps its own epoch
            m.epoch, m.last_epoch = cur.epoch + 1, cur.epoch
        elif expected_epoch == cur.last_epoch:  # a retry of a bump that already happened: no new bump
            pass
        else:
            return Errors.PRODUCER_FENCED, NO_PRODUCER_ID, NO_EPOCH
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
        if code := self.unavailable_code():
            return code
        parts = set(partitions)

        def op():
            try:
                m = self._check_producer(tid, pid, epoch)
            except TxnError as e:
                return e.code, []
            if m.state == ONGOING and parts <= m.partitions:
                return Errors.NONE, []
            n = m.transit()
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
        """KIP-890 part 1 (``handleVerifyPartitionsInTransaction``): is ``tp`` in the transaction of
        (pid, epoch)? An error code as the coordinator answers it (TRANSACTION_ABORTABLE: not in it);
        callers map it for their request version (``broker.transactions.verify_partition``)."""
        if code := self.unavailable_code():
            return code
        m = self.txns.get(tid)
        if m is None or m.producer_id != pid:
            return Errors.INVALID_PRODUCER_ID_MAPPING
        if m.epoch != epoch:
            return Errors.PRODUCER_FENCED
        if m.state in (PREPARE_COMMIT, PREPARE_ABORT):
            return Errors.CONCURRENT_TRANSACTIONS
        return Errors.NONE if tp in m.partitions else Errors.TRANSACTION_ABORTABLE

    # ------------------------------------------------------------------ EndTxn
    async def end_txn(self, tid: str, pid: int, epoch: int, commit: bool, tv2: bool = False) -> tuple[int, int, int]:
        """(error, producer id, epoch) for EndTxn; v5+ (``tv2``) answers the bumped epoch."""
        try:
            return await self._end_txn(tid, pid, epoch, commit, tv2)
        except TxnError as e:
            return e.code, NO_PRODUCER_ID, NO_EPOCH

    async def _end_txn(self, tid: str, pid: int, epoch: int, commit: bool, tv2: bool) -> tuple[int, int, int]:
        if not tid:
            return Errors.INVALID_REQUEST, NO_PRODUCER_ID, NO_EPOCH
        if code := self.unavailable_code():
            return code, NO_PRODUCER_ID, NO_EPOCH
        m = self.txns.get(tid)
        if m is None:
            return Errors.INVALID_PRODUCER_ID_MAPPING, NO_PRODUCER_ID, NO_EPOCH
        done = COMPLETE_COMMIT if commit else COMPLETE_ABORT
        preparing = PREPARE_COMMIT if commit else PREPARE_ABORT
        if not tv2:  # endTransactionWithTV1: strict producer id / epoch, no bump
            if pid != m.producer_id:
                return Errors.INVALID_PRODUCER_ID_MAPPING, NO_PRODUCER_ID, NO_EPOCH
            if epoch != m.epoch:
                return Errors.PRODUCER_FENCED, NO_PRODUCER_ID, NO_EPOCH
            if tid in self._busy:
                return Errors.CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_EPOCH
            if m.state == ONGOING:
                n = await self._end(m.transit(), commit, mode=_TV1, now=self.now_ms())
                return Errors.NONE, n.producer_id, n.epoch
            if m.state == done:
                return Errors.NONE, m.producer_id, m.epoch  # a retry
            if m.state == preparing:
                return Errors.CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_EPOCH
            return Errors.INVALID_TXN_STATE, NO_PRODUCER_ID, NO_EPOCH
        # endTransaction (TV2): a retry is recognised by the epoch the EndTxn it retries bumped, or by
        # the producer id rotation it caused (overflow), never by "same state, same epoch"
        retry_on_overflow = (pid == m.prev_producer_id and pid != m.producer_id and epoch == MAX_EPOCH - 1
                             and m.epoch == 0)
        retry_on_bump = m.epoch == epoch + 1
        if pid != m.producer_id and not retry_on_overflow:
            return Errors.INVALID_PRODUCER_ID_MAPPING, NO_PRODUCER_ID, NO_EPOCH
        if m.state in (PREPARE_COMMIT, PREPARE_ABORT):
            valid = retry_on_bump
        elif m.state in (COMPLETE_COMMIT, COMPLETE_ABORT):
            valid = retry_on_bump or retry_on_overflow or epoch == m.epoch
        else:
            valid = epoch == m.epoch
        if not valid:
            return Errors.PRODUCER_FENCED, NO_PRODUCER_ID, NO_EPOCH
        if tid in self._busy:
            return Errors.CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_EPOCH
        retry = retry_on_bump or retry_on_overflow
        if m.state == ONGOING or (not commit and m.state == EMPTY) or (
                not commit and not retry and m.state in (COMPLETE_COMMIT, COMPLETE_ABORT)):
            # TV2 allows the abort of a transaction with no partition (Empty / Complete*)
            n = await self._end(m.transit(), commit, mode=_TV2, now=self.now_ms())
            return Errors.NONE, n.producer_id, n.epoch
        if m.state == done and retry:
            return Errors.NONE, m.producer_id, m.epoch
        if m.state == preparing:
            return Errors.CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_EPOCH
        return Errors.INVALID_TXN_STATE, NO_PRODUCER_ID, NO_EPOCH

    async def _end(self, n: TxnMetadata, commit: bool, mode: int, now: int) -> TxnMetadata:
        """Two-phase end: log Prepare*, write the markers, log Complete*; returns the completed state
        (the one to answer with: once Prepare* is logged the outcome is decided, and markers that could
        not be written are retried in the background, :meth:`_finish`).

        ``mode`` is how the epoch moves with the Prepare record (``TransactionMetadata``):
        ``_TV1`` keeps it; ``_TV2`` (EndTxn v5+) bumps it, and once it is exhausted allocates the next
        producer id, which the Complete record switches to at epoch 0 (the markers still carry the old
        producer id, at epoch 32767); ``_FENCE`` (InitProducerId on an Ongoing transaction, timeout) is
        ``prepareFenceProducerEpoch`` then the transaction.version 2 abort: two bumps (capped at 32767),
        so that no EndTxn retry check matches the fenced producer's epoch."""
        tid = n.transactional_id
        self._busy.add(tid)
        try:
            if mode == _FENCE:
                fenced = min(n.epoch + 1, MAX_EPOCH)
                n.epoch, n.last_epoch = min(fenced + 1, MAX_EPOCH), fenced
                n.client_version = 2
            elif mode == _TV2:
                if epoch_exhausted(n.epoch):
                    n.next_producer_id = self._new_producer_id()
                n.last_epoch, n.epoch = n.epoch, min(n.epoch + 1, MAX_EPOCH)
                n.client_version = 2
            if n.state != ONGOING:  # TV2 abort without partitions: the start time is the update time
                n.start_ms = now
            n.state = PREPARE_COMMIT if commit else PREPARE_ABORT
            n.update_ms = now
            await self._commit(n)
        except BaseException:
            self._busy.discard(tid)
            raise
        await self._finish(n)
        return self._completed(n)

    async def _finish(self, n: TxnMetadata) -> None:
        """Complete the prepared ``n`` (its id is busy): one try now; if a marker or the Complete record
        could not be written, the id stays busy (CONCURRENT_TRANSACTIONS) and :meth:`_retry_complete`
        goes on in the background until they are, as Kafka's marker channel re-enqueues markers that
        failed with a retriable error (KAFKA_STORAGE_ERROR among them) and retries the Complete append."""
        tid = n.transactional_id
        pending = sorted(n.partitions)
        try:
            await self._complete(n, pending)
        except Exception as exc:
            pending = self._still_pending(exc, pending)
            logger.warning("completing %s of %r failed (%s); retrying until done", n.state_name, tid, exc)
            task = asyncio.get_running_loop().create_task(self._retry_complete(n, pending))
            self._retries[tid] = task  # one at a time per id: it stays busy until the task ends
            task.add_done_callback(lambda _t: self._retries.pop(tid, None))
            return
        self._busy.discard(tid)

    @staticmethod
    def _still_pending(exc: Exception, pending: list[TopicPartition]) -> list[TopicPartition]:
        """The partitions whose markers are still to be written after ``exc`` (all of them unless the
        writer said which)."""
        return sorted(exc.partitions) if isinstance(exc, MarkersNotWritten) else pending

    def _completed(self, n: TxnMetadata) -> TxnMetadata:
        """The Complete* state that follows the prepared ``n`` (``prepareComplete``)."""
        done = n.transit()
        if n.next_producer_id != NO_PRODUCER_ID:  # prepareComplete after an epoch overflow (TV2)
            done.producer_id, done.epoch, done.next_producer_id = n.next_producer_id, 0, NO_PRODUCER_ID
        done.state = COMPLETE_COMMIT if n.state == PREPARE_COMMIT else COMPLETE_ABORT
        done.partitions = set()
        done.update_ms = self.now_ms()
        return done

    async def _complete(self, n: TxnMetadata, pending: list[TopicPartition]) -> TxnMetadata:
        """Write the markers of ``pending`` (raises :class:`MarkersNotWritten` naming the ones that failed),
        then log the Complete* record."""
        if pending:
            await self._write_markers(n.producer_id, n.epoch, n.state == PREPARE_COMMIT, pending)
            pending.clear()
        done = self._completed(n)
        await self._commit(done)
        return done

    async def _retry_complete(self, n: TxnMetadata, pending: list[TopicPartition]) -> None:
        """Retry :meth:`_complete` with a growing delay (:data:`RETRY_BACKOFF_S` doubling up to
        :data:`RETRY_BACKOFF_MAX_S`) until it succeeds or the coordinator closes; the id is busy meanwhile."""
        tid = n.transactional_id
        delay, tries = RETRY_BACKOFF_S, 1
        try:
            while True:
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_BACKOFF_MAX_S)
                tries += 1
                try:
                    await self._complete(n, pending)
                except Exception as exc:
                    pending = self._still_pending(exc, pending)
                    logger.log(logging.WARNING if tries % 50 == 0 else logging.DEBUG,
                               "completing %s of %r failed again (try %d): %s", n.state_name, tid, tries, exc)
                    continue
                logger.info("completed %s of %r after %d tries", n.state_name, tid, tries)
                return
        finally:
            self._busy.discard(tid)

    async def complete_pending(self) -> int:
        """Start-up: finish transactions logged as Prepare* (their markers may be missing), as Kafka's
        loading hands them to the marker channel; those that cannot be finished yet are retried."""
        pending = [m.copy() for m in self.txns.values() if m.state in (PREPARE_COMMIT, PREPARE_ABORT)
                   and m.transactional_id not in self._busy]
        for m in pending:
            logger.info("completing %s of transactional id %r after restart", m.state_name, m.transactional_id)
            self._busy.add(m.transactional_id)
            await self._finish(m)
        return len(pending)

    # ----------------------------------------------------------------- timeouts
    async def abort_timed_out(self, now: int | None = None) -> int:
        """Abort (with an epoch bump that fences the producer) Ongoing transactions past their timeout."""
        if self.unavailable_code():
            return 0
        now = self.now_ms() if now is None else now
        expired = [m.copy() for m in self.txns.values()
                   if m.state == ONGOING and m.start_ms >= 0 and now - m.start_ms > m.timeout_ms]
        for m in expired:
            cur = self.txns.get(m.transactional_id)
            if cur is None or cur.state != ONGOING or cur.epoch != m.epoch or m.transactional_id in self._busy:
                continue
            logger.info("aborting transaction of %r (producer %d): timed out after %d ms", m.transactional_id,
                        m.producer_id, now - m.start_ms)
            await self._end(m.transit(), commit=False, mode=_FENCE, now=now)
        return len(expired)

    # --------------------------------------------------------------- expiration
    async def remove_expired(self, now: int | None = None) -> int:
        """Kafka's ``removeExpiredTransactionalIds``: write a tombstone for every transactional id that
        :func:`should_expire` and no transition holds; replaying it removes the id (at start-up too).
        Looks at :data:`EXPIRE_CHUNK` ids per turn of the event loop; returns how many ids were removed."""
        if self.unavailable_code() or self._expiring:
            return 0
        self._expiring = True
        try:
            now = self.now_ms() if now is None else now
            ids = list(self.txns)
            removed = 0
            for i in range(0, len(ids), EXPIRE_CHUNK):
                chunk = [m for tid in ids[i:i + EXPIRE_CHUNK] if (m := self.txns.get(tid)) is not None
                         and tid not in self._busy and should_expire(m, now, self.expiration_ms)]
                if chunk:
                    removed += await self._expire(chunk)
                await asyncio.sleep(0)  # the append need not yield: give the loop its turn
            if removed:
                logger.info("removed %d transactional ids not updated for %d ms", removed, self.expiration_ms)
            return removed
        finally:
            self._expiring = False

    async def _expire(self, chunk: list[TxnMetadata]) -> int:
        """Tombstones for ``chunk`` (one batch); how many were written. Meanwhile the ids are busy (a request
        for one answers CONCURRENT_TRANSACTIONS, as Kafka's pending Dead transition) and described as gone."""
        tids = [m.transactional_id for m in chunk]
        self._busy.update(tids)
        self._dying.update(tids)

        def op():
            # writeTombstonesForExpiredTransactionalIds removes an id only if its metadata did not change: a
            # write queued before this one (the lock is FIFO) replays a new object and keeps the id alive
            gone = [m.transactional_id for m in chunk if self.txns.get(m.transactional_id) is m]
            return len(gone), [record(TransactionLogKey(transactional_id=tid), None) for tid in gone]

        try:  # a failed append is logged by the runtime; the ids stay and the next run tries again
            return await self.runtime.write(op, on_error=lambda _r, _e: 0)
        finally:
            self._busy.difference_update(tids)
            self._dying.difference_update(tids)

    # ------------------------------------------------------------------ admin
    def describe(self, tid: str) -> TxnMetadata | None:
        """The id's state; None if unknown or being expired (Kafka hides the Dead state)."""
        return None if tid in self._dying else self.txns.get(tid)

    def list(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (), min_duration_ms: int = -1,
             pattern: str | None = None) -> list[TxnMetadata]:
        """ListTransactions' filters: state names, producer ids, running longer than, id regex (v2)."""
        states, pids = set(states), set(producer_ids)
        now = self.now_ms()
        rx = re.compile(pattern) if pattern else None
        out = []
        for m in self.txns.values():
            if m.transactional_id in self._dying:  # being expired: Kafka filters the Dead state
                continue
            if states and m.state_name not in states:
                continue
            if pids and m.producer_id not in pids:
                continue
            if min_duration_ms >= 0 and now - m.start_ms <= min_duration_ms:  # Kafka's test, whatever the
                continue  # state: an id with no transaction started (-1) passes
            if rx is not None and not rx.fullmatch(m.transactional_id):
                continue
            out.append(m)
        return out

    async def drain(self) -> None:
        """Wait for the background work, completions being retried included (tests)."""
        while True:
            await self.runtime.drain()
            if not self._retries:
                return
            await asyncio.gather(*list(self._retries.values()), return_exceptions=True)

    async def wait_loaded(self) -> None:
        await self.runtime.wait_loaded()

    async def close(self) -> None:
        """Shutdown: stop a running load, then wait for the background work."""
        self.runtime.cancel_load()
        for task in list(self._retries.values()):
            task.cancel()
        await asyncio.gather(*self._retries.values(), return_exceptions=True)
        await self.runtime.drain()


__all__ = ["MarkersNotWritten", "TransactionCoordinator", "TxnMetadata", "STATE_NAMES", "should_expire"]
