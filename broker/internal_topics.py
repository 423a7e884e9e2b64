"""Coordinator record logs backed by internal-topic partitions.

A coordinator appends its records as one uncompressed batch; the batch is in the
segment file (page cache) when ``append`` returns, so it survives kill -9 like any
acknowledged produce.  ``replay`` reads the partition from its start offset and
decodes records (internal topics are the one place the broker reads records).
"""
from __future__ import annotations

import time
from typing import Iterator

from broker.log.partition_log import PartitionLog
from protocol.records import build_batch, iter_records, validate_records

READ_CHUNK = 4 * 1024 * 1024


class PartitionRecordLog:
    def __init__(self, log: PartitionLog, on_append=None):
        self.log = log
        self._on_append = on_append

    async def append(self, records: list[tuple[bytes, bytes | None]]) -> int:
        batch = build_batch([(k, v, []) for k, v in records], timestamp=int(time.time() * 1000))
        infos = validate_records(batch)
        res = self.log.append(batch, infos, check_producer=False)
        if self._on_append is not None:
            self._on_append(self.log.topic, self.log.partition)
        return res.last_offset

    def replay(self) -> Iterator[tuple[int, bytes, bytes | None]]:
        offset = self.log.log_start_offset
        end = self.log.log_end_offset
        while offset < end:
            refs = self.log.read(offset, READ_CHUNK)
            if not refs:
                break
            for ref in refs:
                for rec in iter_records(ref.data):
                    if rec.offset >= offset and rec.key is not None:
                        yield rec.offset, rec.key, rec.value
                offset = ref.last_offset + 1

    def truncate_before(self, offset: int) -> None:
        if offset > self.log.log_start_offset:
            self.log.delete_records(min(offset, self.log.high_watermark))
