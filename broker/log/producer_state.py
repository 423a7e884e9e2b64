"""Idempotent / transactional producer state of one partition.

Follows Kafka's ProducerStateManager / ProducerAppendInfo rules for client
appends: duplicate detection over the last 5 batches of the current epoch,
epoch fencing (INVALID_PRODUCER_EPOCH), sequence continuity with int32
wrap-around (OUT_OF_ORDER_SEQUENCE_NUMBER), sequence 0 for a new epoch, and
INVALID_TXN_STATE for a non-transactional write inside an open transaction.
Tracks open transactions (first offset per producer) for the last stable
offset and the aborted-transaction list read_committed fetches need.

Transaction verification (KIP-890 part 1: is the partition in the producer's
ongoing transaction?) is asked of the transaction coordinator by the Produce
handler before the append; the aborted list ((first, marker offset, producer id)
per aborted transaction) also gives the share-partition leader the ranges it
archives under read_committed (``broker.share.isolation``).

Not implemented: Kafka's on-disk producer snapshots and per-segment transaction
index (state and aborted list are rebuilt from batch headers at start-up), the
TV2 marker epoch rule (markers use the TV0/1 rule: epoch >= current; the TV2
coordinator writes them with the bumped epoch, which satisfies it).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque

from protocol.records import INT32_MAX, BatchInfo

OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
TRANSACTION_COORDINATOR_FENCED = 52

BATCHES_TO_RETAIN = 5
NO_EPOCH = -1


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerEntry:
    __slots__ = ("producer_id", "epoch", "batches", "last_timestamp", "coordinator_epoch", "txn_first_offset")

    def __init__(self, producer_id: int):
        self.producer_id = producer_id
        self.epoch = NO_EPOCH
        # (first_seq, last_seq, first_offset, last_offset), oldest first
        self.batches: deque[tuple[int, int, int, int]] = deque(maxlen=BATCHES_TO_RETAIN)
        self.last_timestamp = -1
        self.coordinator_epoch = -1
        self.txn_first_offset: int | None = None

    @property
    def last_seq(self) -> int:
        return self.batches[-1][1] if self.batches else -1

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.batches.clear()
            self.epoch = epoch


_EMPTY = ProducerEntry(-1)


class ProducerStateManager:
    __slots__ = ("producers", "ongoing", "_aborted", "_aborted_last")

    def __init__(self):
        self.producers: dict[int, ProducerEntry] = {}
        self.ongoing: set[int] = set()  # producer ids with an open transaction
        self._aborted: list[tuple[int, int, int]] = []  # (first_offset, last_offset, producer_id), by last
        self._aborted_last: list[int] = []

    # ------------------------------------------------------------ client check
    def check(self, infos: list[BatchInfo]) -> tuple[int, int, int]:
        """Validate data batches about to be appended by a client.

        Returns ``(error_code, dup_first_offset, dup_last_offset)``: ``(0, -1, -1)``
        means append; ``(0, first, last)`` means the batch was already appended
        at those offsets (answer it, do not append); a non-zero code rejects.
        """
        pending: dict[int, list] = {}  # pid -> [epoch, last_seq | None, txn_open]
        for info in infos:
            pid = info.producer_id
            if pid < 0 or info.is_control:
                continue
            current = self.producers.get(pid, _EMPTY)
            if info.producer_epoch == current.epoch:
                for first_seq, last_seq, first_off, last_off in current.batches:
                    if first_seq == info.base_sequence and last_seq == info.last_sequence:
                        return 0, first_off, last_off
            upd = pending.get(pid)
            if upd is None:
                upd = pending[pid] = [current.epoch, None, current.txn_first_offset is not None]
            epoch, first_seq = info.producer_epoch, info.base_sequence
            if epoch < upd[0]:
                return INVALID_PRODUCER_EPOCH, -1, -1
            if epoch != upd[0]:
                if first_seq != 0 and upd[0] != NO_EPOCH:
                    return OUT_OF_ORDER_SEQUENCE_NUMBER, -1, -1
            else:
                if upd[1] is not None:
                    last = upd[1]
                elif epoch == current.epoch:
                    last = current.last_seq
                else:
                    last = -1
                if not (current.epoch == NO_EPOCH or in_sequence(last, first_seq)):
                    return OUT_OF_ORDER_SEQUENCE_NUMBER, -1, -1
            upd[0], upd[1] = epoch, info.last_sequence
            if upd[2] and not info.is_transactional:
                return INVALID_TXN_STATE, -1, -1
            if info.is_transactional:
                upd[2] = True
        return 0, -1, -1

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> int:
        entry = self.producers.get(producer_id, _EMPTY)
        if epoch < entry.epoch:
            return INVALID_PRODUCER_EPOCH
        if coordinator_epoch < entry.coordinator_epoch:
            return TRANSACTION_COORDINATOR_FENCED
        return 0

    # ------------------------------------------------------------------ apply
    def on_batch(self, info: BatchInfo, first_offset: int, timestamp: int | None = None) -> None:
        """Record an appended data batch (also used when replaying the log).

        ``timestamp`` is the batch's max timestamp as stored (the append time for
        LogAppendTime topics); it defaults to the one in ``info``.
        """
        pid = info.producer_id
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(pid)
        entry.set_epoch(info.producer_epoch)
        last_offset = first_offset + info.last_offset_delta
        entry.batches.append((info.base_sequence, info.last_sequence, first_offset, last_offset))
        entry.last_timestamp = info.max_timestamp if timestamp is None else timestamp
        if info.is_transactional and entry.txn_first_offset is None:
            entry.txn_first_offset = first_offset
            self.ongoing.add(pid)

    def on_marker(self, producer_id: int, epoch: int, commit: bool, coordinator_epoch: int,
                  offset: int, timestamp: int) -> None:
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerEntry(producer_id)
        first = entry.txn_first_offset if entry.txn_first_offset is not None else offset
        self.ongoing.discard(producer_id)
        if not commit:
            self._aborted.append((first, offset, producer_id))
            self._aborted_last.append(offset)
        entry.set_epoch(epoch)
        entry.coordinator_epoch = coordinator_epoch
        entry.txn_first_offset = None
        entry.last_timestamp = timestamp

    # ------------------------------------------------------------------ query
    def first_unstable_offset(self) -> int | None:
        if not self.ongoing:
            return None
        return min(self.producers[pid].txn_first_offset for pid in self.ongoing)

    def aborted_transactions(self, start_offset: int, upper_bound: int) -> list[tuple[int, int]]:
        """(producer_id, first_offset) of aborted transactions overlapping [start, upper_bound)."""
        i = bisect_left(self._aborted_last, start_offset)
        return [(pid, first) for first, _last, pid in self._aborted[i:] if first < upper_bound]

    def aborted_ranges(self, start_offset: int, upper_bound: int) -> list[tuple[int, int, int]]:
        """(first_offset, marker_offset, producer_id) of aborted transactions overlapping [start, upper_bound)."""
        i = bisect_left(self._aborted_last, start_offset)
        return [entry for entry in self._aborted[i:] if entry[0] < upper_bound]

    # ------------------------------------------------------------ maintenance
    def truncate_head(self, log_start_offset: int) -> None:
        i = bisect_left(self._aborted_last, log_start_offset)
        if i:
            del self._aborted[:i], self._aborted_last[:i]
        for pid in self.ongoing:
            entry = self.producers[pid]
            # the open transaction's first batch is gone; the LSO may not point below the log start
            if entry.txn_first_offset < log_start_offset:
                entry.txn_first_offset = log_start_offset

    def remove_aborted(self, marker_offsets) -> None:
        """Forget the aborted transactions whose ABORT markers (at ``marker_offsets``) the log cleaner
        removed: their data went first, and a fetch must not name them (Kafka rebuilds the cleaned
        segment's transaction index without them)."""
        gone = set(marker_offsets)
        if gone:
            keep = [i for i, last in enumerate(self._aborted_last) if last not in gone]
            self._aborted = [self._aborted[i] for i in keep]
            self._aborted_last = [self._aborted_last[i] for i in keep]

    def last_records(self) -> dict[int, tuple[int, int]]:
        """Producer id -> (offset of its last data batch's last record or -1, epoch): Kafka's
        ``lastRecordsOfActiveProducers``, the batches the log cleaner keeps."""
        return {pid: (e.batches[-1][3] if e.batches else -1, e.epoch) for pid, e in self.producers.items()}

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Kafka's removeExpiredProducers: drop producers with no open transaction whose last
        timestamp is ``expiration_ms`` or more before ``now_ms``; returns how many."""
        expired = [pid for pid, e in self.producers.items()
                   if e.txn_first_offset is None and now_ms - e.last_timestamp >= expiration_ms]
        for pid in expired:
            del self.producers[pid]
        return len(expired)
