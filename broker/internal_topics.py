"""Coordinator record logs backed by internal-topic partitions.

A coordinator appends its records as one uncompressed batch; the batch is in the
segment file (page cache) when ``append`` returns, so it survives kill -9 like any
acknowledged produce.  ``replay`` reads the partition from its start offset and
decodes records (internal topics are the one place the broker reads records).

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
from typing import Iterator

from broker.log.partition_log import PartitionLog
from protocol.records import CONTROL_COMMIT, build_batch, control_record_type, record_key_values, validate_records

READ_CHUNK = 256 * 1024
PAUSE_EVERY = 32  # batches between two pause points of a replay


class PartitionRecordLog:
    def __init__(self, log: PartitionLog, on_append=None):
        self.log = log
        self._on_append = on_append
        self.open_transactions: dict[int, list[tuple[int, bytes, bytes | None]]] = {}

    async def append(self, records: list[tuple[bytes, bytes | None]],
                     producer: tuple[int, int] | None = None) -> int:
        """Append one batch; ``producer`` (id, epoch) makes it part of that producer's transaction."""
        pid, epoch = producer if producer is not None else (-1, -1)
        batch = build_batch([(k, v, []) for k, v in records], timestamp=int(time.time() * 1000),
                            producer_id=pid, producer_epoch=epoch, transactional=producer is not None)
        infos = validate_records(batch, client=producer is None)  # a coordinator's batch has no sequence
        res = self.log.append(batch, infos, check_producer=False)
        if self._on_append is not None:
            self._on_append(self.log.topic, self.log.partition)
        return res.last_offset

    def replay(self) -> Iterator[tuple[int, bytes, bytes | None] | None]:
        chunk: list[tuple[int, bytes, bytes | None]] = []
        for _ in self._scan(chunk.extend):
            yield from chunk
            chunk.clear()
            yield None

    def replay_latest(self) -> Iterator[tuple[int, bytes, bytes | None] | None]:
        latest: dict[bytes, tuple[int, bytes, bytes | None]] = {}  # key -> record, in the order of last writes
        pop = latest.pop

        def take(records) -> None:
            for rec in records:
                pop(rec[1], None)
                latest[rec[1]] = rec

        yield from self._scan(take)
        for n, rec in enumerate(latest.values(), 1):
            yield rec
            if n & 1023 == 0:
                yield None
        for pid, held in self.open_transactions.items():  # still open: the latest record of each key
            last: dict[bytes, tuple[int, bytes, bytes | None]] = {}
            for rec in held:
                last.pop(rec[1], None)
                last[rec[1]] = rec
            self.open_transactions[pid] = list(last.values())

    def _scan(self, take) -> Iterator[None]:
        """Read the log once: ``take(records)`` gets each batch's (offset, key, value) records as they take
        effect (a transactional batch's at its COMMIT marker, never if aborted; those still open at the end
        are left in ``open_transactions``). Yields after each chunk of batches."""
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
                        take(held)
                else:
                    records = record_key_values(ref.data)
                    if records and records[0][0] < offset:  # the log starts inside this batch
                        records = [r for r in records if r[0] >= offset]
                    if ref.is_transactional:
                        pending.setdefault(ref.producer_id, []).extend(records)
                    else:
                        take(records)
                offset = ref.last_offset + 1
            yield None

    def truncate_before(self, offset: int) -> None:
        if offset > self.log.log_start_offset:
            self.log.delete_records(min(offset, self.log.high_watermark))
