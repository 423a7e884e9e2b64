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
"""
from __future__ import annotations

import time
from typing import Iterator

from broker.log.partition_log import PartitionLog
from protocol.records import CONTROL_COMMIT, build_batch, control_record_type, iter_records, validate_records

READ_CHUNK = 4 * 1024 * 1024


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

    def replay(self) -> Iterator[tuple[int, bytes, bytes | None]]:
        offset = self.log.log_start_offset
        end = self.log.log_end_offset
        pending = self.open_transactions = {}
        while offset < end:
            refs = self.log.read(offset, READ_CHUNK)
            if not refs:
                break
            for ref in refs:
                if ref.is_control:
                    held = pending.pop(ref.producer_id, ())
                    if control_record_type(ref.data) == CONTROL_COMMIT:
                        yield from held
                else:
                    records = [(rec.offset, rec.key, rec.value) for rec in iter_records(ref.data)
                               if rec.offset >= offset and rec.key is not None]
                    if ref.is_transactional:
                        pending.setdefault(ref.producer_id, []).extend(records)
                    else:
                        yield from records
                offset = ref.last_offset + 1

    def truncate_before(self, offset: int) -> None:
        if offset > self.log.log_start_offset:
            self.log.delete_records(min(offset, self.log.high_watermark))
