"""The broker's side of transactions: the coordinator's collaborators and the marker writer.

The transaction coordinator (``coordinator.transaction``) knows nothing of partition
logs; this module gives it a producer-id source, the ``__transaction_state`` record
log, and :func:`marker_writer`, which plays the part of Kafka's
TransactionMarkerChannelManager + WriteTxnMarkers on a single node: for each
partition of the transaction, a COMMIT/ABORT control batch is appended directly to
the partition log (the broker is the leader of every partition), long polls are
woken, and a marker on ``__consumer_offsets`` completes the producer's pending
TxnOffsetCommits in the group coordinator. Markers whose append fails for a reason that may pass
(a full disk) are reported to the coordinator, which retries them until written and completes
the transaction only then (``coordinator/transaction/README.md``).

Settings (Kafka's names and defaults): ``transaction.max.timeout.ms`` (900000),
``transaction.abort.timed.out.transaction.cleanup.interval.ms`` (10000),
``transactional.id.expiration.ms`` (604800000: ids idle that long are removed, checked every
``transaction.remove.expired.transaction.cleanup.interval.ms``, 3600000),
``transaction.partition.verification.enable`` (true: a transactional Produce v3-11
must target a partition added to the transaction, else INVALID_TXN_STATE).
"""
from __future__ import annotations

import logging

from broker.internal_topics import PartitionRecordLog
from broker.log.errors import LogError
from broker.topics import CONSUMER_OFFSETS, TRANSACTION_STATE
from coordinator.transaction import TransactionCoordinator
from coordinator.transaction.coordinator import DEFAULT_EXPIRATION_MS, MarkersNotWritten
from protocol.errors import Errors

log = logging.getLogger("sharebroker.transactions")

DEFAULT_MAX_TIMEOUT_MS = 900000
DEFAULT_ABORT_INTERVAL_MS = 10000
DEFAULT_REMOVE_EXPIRED_INTERVAL_MS = 3600000

# AddPartitionsToTxnManager.TransactionSupportedOperation: what a request version can be answered
DEFAULT_ERROR, GENERIC_ERROR_SUPPORTED, ADD_PARTITION = range(3)


def fenced_code(code: int, version: int, first_version: int) -> int:
    """PRODUCER_FENCED as a request ``version`` older than ``first_version`` (the one that introduced it)
    understands: INVALID_PRODUCER_EPOCH, as KafkaApis answers InitProducerId below v4 and EndTxn,
    AddPartitionsToTxn and AddOffsetsToTxn below v2 (aiokafka sends v0 and knows no code 90)."""
    return Errors.INVALID_PRODUCER_EPOCH if code == Errors.PRODUCER_FENCED and version < first_version else code


def produce_operation(version: int) -> int:
    """``produceRequestVersionToTransactionSupportedOperation``: v12+ adds, v11 knows TRANSACTION_ABORTABLE."""
    return ADD_PARTITION if version > 11 else GENERIC_ERROR_SUPPORTED if version > 10 else DEFAULT_ERROR


def txn_offset_commit_operation(version: int) -> int:
    """``txnOffsetCommitRequestVersionToTransactionSupportedOperation``: v5+ adds, v4 knows TRANSACTION_ABORTABLE."""
    return ADD_PARTITION if version > 4 else GENERIC_ERROR_SUPPORTED if version > 3 else DEFAULT_ERROR


async def verify_partition(txns: TransactionCoordinator, tid: str, pid: int, epoch: int, tp, operation: int) -> int:
    """KIP-890 verification of one partition, answered as AddPartitionsToTxnManager answers the broker:
    ADD_PARTITION adds the partition (AddPartitionsToTxn with VerifyOnly false), the others only verify;
    PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH, and TRANSACTION_ABORTABLE (not in the transaction)
    becomes INVALID_TXN_STATE for versions that predate it."""
    code = txns.verify(tid, pid, epoch, tp)
    if code == Errors.TRANSACTION_ABORTABLE and operation == ADD_PARTITION:
        code = await txns.add_partitions(tid, pid, epoch, [tp], client_version=2)
    if code == Errors.PRODUCER_FENCED:
        return Errors.INVALID_PRODUCER_EPOCH
    if code == Errors.TRANSACTION_ABORTABLE and operation == DEFAULT_ERROR:
        return Errors.INVALID_TXN_STATE
    return code


def marker_writer(logs, topics, groups):
    """``write_markers(producer_id, epoch, commit, partitions)`` for the coordinator: every partition is
    tried; those whose append failed for a reason that may pass (a full or failing disk: Kafka's
    retriable marker errors) are named in the :class:`MarkersNotWritten` raised at the end, and the
    coordinator retries them. A marker refused because the partition saw a newer epoch of the producer
    (INVALID_PRODUCER_EPOCH) is dropped, as Kafka's TransactionMarkerRequestCompletionHandler stops
    sending a transaction's markers then."""

    async def write_markers(producer_id: int, epoch: int, commit: bool, partitions) -> None:
        failed: list[tuple[str, int]] = []
        synced: list = []  # (topic, partition, the fsync's future): every marker is appended, then all are awaited
        reason = ""
        kind = "COMMIT" if commit else "ABORT"
        for topic, partition in partitions:
            plog = logs.get_log(topic, partition)
            if plog is None:
                continue  # deleted since it was added: nothing to mark (Kafka drops such markers too)
            if producer_id not in plog.producer_state.ongoing and topic != CONSUMER_OFFSETS:
                # already marked (a Prepare* completed again after a restart) or nothing was written
                entry = plog.producer_state.producers.get(producer_id)
                if entry is not None and entry.epoch >= epoch:
                    continue
            if topic == CONSUMER_OFFSETS:
                # Kafka's group coordinator refuses the marker while loading (the marker channel retries):
                # its pending offsets are known only once __consumer_offsets is replayed
                await groups.wait_loaded()
            try:
                res = plog.append_control(producer_id, epoch, commit)
            except LogError as e:
                if e.code in (Errors.INVALID_PRODUCER_EPOCH, Errors.TRANSACTION_COORDINATOR_FENCED):
                    log.warning("%s marker for producer %d on %s-%d dropped: %s", kind, producer_id, topic,
                                partition, e)
                    continue
                failed.append((topic, partition))  # logged by the coordinator, which retries it
                reason = reason or f"{topic}-{partition}: {e}"
                continue
            synced.append((topic, partition, plog, res.durable))
        for topic, partition, plog, durable in synced:
            if durable is not None:  # durable mode: the transaction completes only once its markers are on disk
                try:
                    await durable
                except LogError as e:  # the partition went offline (its fsync failed): retried, done at restart
                    failed.append((topic, partition))
                    reason = reason or f"{topic}-{partition}: {e}"
                    continue
            if topic == CONSUMER_OFFSETS:
                groups.complete_transaction(producer_id, commit)
            if not plog.durable:  # durable mode wakes readers when the sync moves the high watermark
                topics.appended(topic, partition)
        if failed:
            raise MarkersNotWritten(failed, f"{len(failed)} {kind} marker(s) not written, e.g. {reason}")

    return write_markers


def build(config, logs, topics, groups, producer_ids, now_ms, hold=None) -> TransactionCoordinator:
    """The transaction coordinator, loading ``__transaction_state`` in the background (``hold``: a test
    hold awaited first); its Prepare* transactions are completed once loaded."""

    def partition_exists(topic: str, partition: int) -> bool:
        info = logs.topic(topic)
        return info is not None and 0 <= partition < info.partitions

    txns = TransactionCoordinator(
        PartitionRecordLog(logs.get_log(TRANSACTION_STATE, 0)), new_producer_id=producer_ids.next_id,
        write_markers=marker_writer(logs, topics, groups), now_ms=now_ms,
        max_timeout_ms=config.get_int("transaction.max.timeout.ms", DEFAULT_MAX_TIMEOUT_MS),
        partition_exists=partition_exists,
        expiration_ms=config.get_int("transactional.id.expiration.ms", DEFAULT_EXPIRATION_MS))
    txns.start_loading(hold)
    return txns


def abort_timed_out_job(txns: TransactionCoordinator):
    """A periodic job (``broker.app``): abort expired transactions in the coordinator's background."""
    return lambda: txns.runtime.spawn(txns.abort_timed_out(), "aborting timed-out transactions")


def remove_expired_job(txns: TransactionCoordinator):
    """A periodic job (``broker.app``): remove expired transactional ids in the coordinator's background."""
    return lambda: txns.runtime.spawn(txns.remove_expired(), "removing expired transactional ids")
