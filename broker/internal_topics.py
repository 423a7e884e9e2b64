"""Coordinator record logs backed by internal-topic partitions.

A coordinator appends its records as one uncompressed batch; ``append`` returns once
the batch is on disk in durable mode (the default) or in the page cache otherwise, like
an acknowledged produce; ``append_unsynced`` returns at once with the fsync's future
(the coordinator runtime awaits it outside its write lock: group commit).  ``replay``
reads the partition from its start offset and decodes records (internal topics are the
one place the broker reads records).

Transactional offset commits (TxnOffsetCommit) are appended as a transactional batch
of the producer; ``replay`` yields such records only once their COMMIT marker is
read (at the marker's position, as Kafka's coordinators replay them), drops them on
ABORT, and leaves those of transactions still open at the end of the log in
``open_transactions`` (producer id -> records) for the coordinator to hold as pending.

``replay_latest`` (compacted logs: ``__consumer_offsets``, ``__transaction_state``)
reads the log once, keeping only the latest record of each key (with the same
transaction rules: a committed record counts at its marker), and then yields those
records in that order: what replaying the fully compacted log would yield. Both
yield ``None`` between chunks of batches, a pause the loader uses to give the event
loop a turn.
"""
from __future__ import annotations

import time
from operator import itemgetter
from typing import Iterator

from broker.log.partition_log import PartitionLog
from protocol.records import CONTROL_COMMIT, build_batch, control_record_type, record_key_values, validate_records

READ_CHUNK = 256 * 1024
PAUSE_EVERY = 32  # batches between two pause points of a replay


_OFFSET, _KEY = itemgetter(0), itemgetter(1)


def _effect_order(rec: tuple) -> tuple[int, int]:
    """Where a record takes effect: at its offset, or (committed transactional) just before its marker."""
    return rec[3] if len(rec) > 3 else (rec[0], 0)


class PartitionRecordLog:
    def __init__(self, log: PartitionLog, on_append=None):
        self.log = log
        self._on_append = on_append
        self.open_transactions: dict[int, list[tuple[int, bytes, bytes | None]]] = {}

    async def append(self, records: list[tuple[bytes, bytes | None]],
                     producer: tuple[int, int] | None = None) -> int:
        """Append one batch and return its last offset once it is on disk (durable mode, flush.messages) or
        in the page cache; ``producer`` (id, epoch) makes it part of that producer's transaction."""
        last, synced = self.append_unsynced(records, producer)
        if synced is not None:
            await synced
        return last

    def append_unsynced(self, records: list[tuple[bytes, bytes | None]],
                        producer: tuple[int, int] | None = None):
        """Append one batch: (last offset, None or a future done once it is on disk)."""
        pid, epoch = producer if producer is not None else (-1, -1)
        batch = build_batch([(k, v, []) for k, v in records], timestamp=int(time.time() * 1000),
                            producer_id=pid, producer_epoch=epoch, transactional=producer is not None)
        infos = validate_records(batch, client=producer is None)  # a coordinator's batch has no sequence
        res = self.log.append(batch, infos, check_producer=False)
        if self._on_append is not None:
            self._on_append(self.log.topic, self.log.partition)
        return res.last_offset, res.durable

    def replay(self) -> Iterator[tuple[int, bytes, bytes | None] | None]:
        chunk: list[tuple[int, bytes, bytes | None]] = []
        for _ in self._scan(lambda records, _marker: chunk.extend(records)):
            yield from chunk
            chunk.clear()
            yield None

    def replay_latest(self) -> Iterator[tuple[int, bytes, bytes | None] | None]:
        latest: dict[bytes, tuple] = {}  # key -> its latest record (a committed one carries its marker order)

        def take(records, marker: int | None) -> None:
            if marker is not None:  # takes effect at the marker, after what precedes it
                records = [(o, k, v, (marker - 1, i)) for i, (o, k, v) in enumerate(records, 1)]
            latest.update(zip(map(_KEY, records), records))  # C loops: the key pass is the load's cost

        yield from self._scan(take)
        for n, rec in enumerate(sorted(latest.values(), key=_effect_order), 1):
            yield rec[:3]
            if n & 1023 == 0:
                yield None
        for pid, held in self.open_transactions.items():  # still open: the latest record of each key
            last = dict(zip(map(_KEY, held), held))
            self.open_transactions[pid] = sorted(last.values(), key=_OFFSET)

    def _scan(self, take) -> Iterator[None]:
        """Read the log once: ``take(records, marker)`` gets each batch's (offset, key, value) records as they
        take effect: a plain batch's with marker None, a transactional batch's at its COMMIT marker (with the
        marker's offset), never if aborted; those still open at the end are left in ``open_transactions``.
        Yields between chunks of batches."""
        offset = self.log.log_start_offset
        pending = self.open_transactions = {}
        while offset < self.log.log_end_offset:
            refs = self.log.read(offset, READ_CHUNK)
            if not refs:
                break
            for n, ref in enumerate(refs, 1):
                if n % PAUSE_EVERY == 0:
                    yield None
                if ref.is_control:
                    held = pending.pop(ref.producer_id, ())
                    if held and control_record_type(ref.data) == CONTROL_COMMIT:
                        take(held, ref.base_offset)
                else:
                    records = record_key_values(ref.data)
                    if records and records[0][0] < offset:  # the log starts inside this batch
                        records = [r for r in records if r[0] >= offset]
                    if ref.is_transactional:
                        pending.setdefault(ref.producer_id, []).extend(records)
                    else:
                        take(records, None)
                offset = ref.last_offset + 1
            yield None

    def truncate_before(self, offset: int) -> None:
        if offset > self.log.log_start_offset:
            self.log.delete_records(min(offset, self.log.high_watermark))
