"""Share-group dead-letter queue (KIP-1191): the second phase of ARCHIVING -> ARCHIVED.

A share partition whose group names a DLQ topic (`errors.deadletterqueue.topic.name`)
moves a REJECTed record, or one released / expired at `share.delivery.count.limit`, to
ARCHIVING (persisted, state 3) and then calls :meth:`DeadLetterQueue.write` for the
committed runs; the partition moves them to ARCHIVED (persisted) only after ``write``
returns. What ``write`` does, following Kafka 4.4's ShareGroupDLQStateManager,
ShareGroupDLQValidator and ShareGroupDLQRecordHelper:

- checks the DLQ topic as Kafka does, in Kafka's order and words: a name starting with
  ``__`` is refused, an existing topic without ``errors.deadletterqueue.group.enable=true``
  is refused, a name not starting with ``errors.deadletterqueue.topic.name.prefix``
  (default ``dlq.``) is refused, and a missing topic is created (``num.partitions``,
  group-enable on, CreateTime) only when ``errors.deadletterqueue.auto.create.topics.enable``;
- builds one record per source offset: CreateTime = the wall clock at write time, headers
  ``__dlq.errors.topic|partition|offset|group|delivery.count|message`` (after the original
  headers; names and texts in protocol/dlq_headers.py), and the original key, value and headers only with
  ``errors.deadletterqueue.copy.record.enable`` (read from the source log here, in the DLQ
  task, never on the fetch / acknowledge path; records are decoded off the event loop; batches
  of every codec are copied, snappy / lz4 / zstd ones only with the optional extra
  ``sharebroker[compression]``: without it they give headers-only records);
- appends them to partition ``source partition % DLQ partitions`` through the broker's own
  log (split under the topic's ``max.message.bytes``) and waits for the fsync when the
  topic's flush settings ask for one: what acks=all means on one node; a compacted DLQ topic
  refuses records without a key as a Produce would (INVALID_RECORD: the attempt fails; with
  copy-record the source records' keys are kept, so keyed records go through and are compacted);
- retries a failed attempt (configuration or append) with Kafka's exponential backoff,
  1 s doubling to 30 s with 20 % jitter, 5 attempts in all; then logs an error and returns,
  and the partition archives the records without a dead-letter record, as Kafka does.

Meanwhile the records stay ARCHIVING: the SPSO stops before them, other records'
acknowledgements go on. A broker stopped (or killed) before ARCHIVED was persisted finds
them ARCHIVING at the next initialization and writes them again (a duplicate DLQ record
is possible, never a lost one).
"""
from __future__ import annotations

import asyncio
import logging
import random
import struct
import time
from typing import Any

from broker.log.errors import LogError
from broker.share.config import DLQ_GROUP_ENABLE, DLQ_TOPIC_NAME
from broker.share.inflight import CAUSE_DELIVERY_COUNT, CAUSE_REJECT
from broker.topics import Topics
from protocol import dlq_headers as H
from protocol.records import HEADER_SIZE, RecordsError, build_batch, iter_records, validate_records

log = logging.getLogger("sharebroker.share.dlq")

CAUSE_TEXT = {CAUSE_REJECT: H.REJECTED, CAUSE_DELIVERY_COUNT: H.DELIVERY_COUNT_EXCEEDED}
TOPIC_NAME, GROUP_ENABLE = DLQ_TOPIC_NAME, DLQ_GROUP_ENABLE  # the config names, from broker/share/config.py
AUTO_CREATE = "errors.deadletterqueue.auto.create.topics.enable"
PREFIX = "errors.deadletterqueue.topic.name.prefix"
MAX_ATTEMPTS = 5          # Kafka's ShareGroupDLQStateManager.MAX_REQUEST_ATTEMPTS
JITTER = 0.2              # CommonClientConfigs.RETRY_BACKOFF_JITTER
READ_BYTES = 1 << 20      # Kafka's DLQ_MAX_FETCH_BYTES


class DlqError(Exception):
    """One attempt failed; ``final`` when retrying cannot help (no DLQ topic configured any more)."""

    def __init__(self, message: str, final: bool = False):
        super().__init__(message)
        self.final = final


class DeadLetterQueue:
    """Writes dead-letter records for share partitions; one per broker (the share-partition manager's)."""

    def __init__(self, config, *, logs, watchers, topics: Topics | None = None):
        self.config = config
        self.logs = logs
        self.topics = topics if topics is not None else Topics(logs, watchers)
        self.backoff_ms = config.get_int("sharebroker.share.dlq.retry.backoff.ms", 1000)
        self.backoff_max_ms = config.get_int("sharebroker.share.dlq.retry.backoff.max.ms", 30_000)
        # Test-only (documented as such): hold every append this long, after ARCHIVING is persisted,
        # so that a test can kill the broker between the two phases.
        self.test_delay_ms = config.get_int("sharebroker.share.dlq.test.append.delay.ms", 0)

    # ------------------------------------------------------------------ the partition's entry point
    async def write(self, sp: Any, runs: list[tuple[int, int, int, int]]) -> bool:
        """Write the dead-letter records of `runs` ((first, last, delivery count, cause)) of share
        partition `sp`; True once durable, False after giving up (logged)."""
        backoff = self.backoff_ms
        where = f"{sp.source_log.topic}-{sp.partition} offsets {_ranges(runs)}"
        for attempt in range(1, MAX_ATTEMPTS + 1):
            if self.test_delay_ms:
                log.warning("share group %s: DLQ append of %s held for %d ms (test-only "
                            "sharebroker.share.dlq.test.append.delay.ms)", sp.group_id, where, self.test_delay_ms)
                await asyncio.sleep(self.test_delay_ms / 1000.0)
            try:
                count, target = await self._write_once(sp, runs)
            except DlqError as e:
                if e.final or attempt == MAX_ATTEMPTS:
                    log.error("share group %s: dead-letter records of %s not written (attempt %d of %d), "
                              "archived without them: %s", sp.group_id, where, attempt, MAX_ATTEMPTS, e)
                    return False
                delay = backoff * random.uniform(1 - JITTER, 1 + JITTER)
                log.warning("share group %s: dead-letter records of %s not written (attempt %d of %d, "
                            "retry in %d ms): %s", sp.group_id, where, attempt, MAX_ATTEMPTS, delay, e)
                await asyncio.sleep(delay / 1000.0)
                backoff = min(backoff * 2, self.backoff_max_ms)
                continue
            log.info("share group %s: %d dead-letter record(s) of %s written to %s", sp.group_id, count, where,
                     target)
            return True
        return False

    # ------------------------------------------------------------------ one attempt
    async def _write_once(self, sp: Any, runs: list) -> tuple[int, str]:
        cfg, group = sp.config, sp.group_id
        name = cfg.dlq_topic
        if not name:
            raise DlqError(f"Configured DLQ topic name in share group: {group} is empty.", final=True)
        info = await self._topic(group, name)
        source = sp.source_log
        copied = await self._read_source(source, runs) if cfg.dlq_copy_record else {}
        dest_partition = sp.partition % info.partitions
        plog = info.logs[dest_partition]
        now = int(time.time() * 1000)
        base = [(H.TOPIC, source.topic.encode()), (H.PARTITION, str(sp.partition).encode())]
        records = []
        for first, last, dc, cause in runs:
            tail = [(H.GROUP, group.encode()), (H.DELIVERY_COUNT, str(dc).encode()),
                    (H.MESSAGE, CAUSE_TEXT.get(cause, CAUSE_TEXT[CAUSE_REJECT]).encode())]
            for off in range(first, last + 1):
                rec = copied.get(off)
                headers = (list(rec.headers) if rec else []) + base + [(H.OFFSET, str(off).encode())] + tail
                records.append((rec.key if rec else None, rec.value if rec else None, headers, now))
        data = b"".join(build_batch(chunk, timestamp=now)
                        for chunk in _chunks(records, plog.config.max_message_bytes))
        try:
            infos = validate_records(data, single_batch=False, client=False)
            keyless = plog.key_errors(data, infos)
            if keyless:
                raise DlqError(f"append to {name}-{dest_partition} refused (INVALID_RECORD): {len(keyless)} "
                               f"record(s) without a key for a compacted topic: {keyless[0][1]}")
            res = plog.append(data, infos, check_producer=False)
        except (LogError, RecordsError) as e:
            raise DlqError(f"append to {name}-{dest_partition} failed: {e}") from None
        self.topics.appended(name, dest_partition)
        if res.durable is not None:
            try:
                await res.durable
            except LogError as e:
                raise DlqError(f"fsync of {name}-{dest_partition} failed: {e}") from None
        return len(records), f"{name}-{dest_partition}"

    async def _topic(self, group: str, name: str):
        """Kafka's validateDlqTopic + auto-creation: the DLQ topic's TopicInfo, or DlqError."""
        if name.startswith("__"):
            raise DlqError(f"Configured DLQ topic name in share group: {group} cannot start with __, topic: {name}.")
        info = self.logs.topic(name)
        if info is not None and str(info.configs.get(GROUP_ENABLE, "false")).strip().lower() != "true":
            raise DlqError(f"DLQ is not enabled on configured DLQ topic for share group: {group}, topic: {name}")
        prefix = self.config.get(PREFIX, "dlq.") or ""
        if prefix and not name.startswith(prefix):
            raise DlqError(f"Configured DLQ topic name does not comply with the DLQ topic prefix in share group: "
                           f"{group}, topic: {name}, prefix: {prefix}")
        if info is None:
            if not self.config.get_bool(AUTO_CREATE):
                raise DlqError(f"DLQ topic does not exist and auto create is disabled on cluster for share group: "
                               f"{group}, topic: {name}.")
            try:
                info = await self.topics.create_staged(name, self.config.get_int("num.partitions", 1),
                                                       {GROUP_ENABLE: "true", "message.timestamp.type": "CreateTime"})
            except LogError as e:
                raise DlqError(f"creating DLQ topic {name} failed: {e}") from None
            log.info("share group %s: created DLQ topic %s (%d partition(s))", group, name, info.partitions)
        return info

    async def _read_source(self, plog, runs: list) -> dict:
        """Original records of `runs` by offset (copy-record); missing offsets give headers-only records."""
        datas = []
        for first, last, _, _ in runs:
            off = max(first, plog.log_start_offset)
            while off <= last:
                try:
                    refs = plog.read(off, READ_BYTES, max_offset=None)
                except LogError:
                    break
                refs = [r for r in refs if r.base_offset <= last]
                if not refs:
                    break
                datas.extend(bytes(r.data) for r in refs)
                off = refs[-1].last_offset + 1
        if not datas:
            return {}
        wanted = [(f, l) for f, l, _, _ in runs]
        return await asyncio.get_running_loop().run_in_executor(None, _decode, datas, wanted)


def _decode(datas: list[bytes], wanted: list[tuple[int, int]]) -> dict:
    """Decode the records in `wanted` offset ranges (runs off the event loop). Every codec Kafka
    has is read (protocol.records.iter_records); snappy, lz4 and zstd need the optional extra
    sharebroker[compression], without which such a batch gives headers-only records."""
    out = {}
    for data in datas:
        try:
            for rec in iter_records(data):
                if any(f <= rec.offset <= l for f, l in wanted):
                    out[rec.offset] = rec
        except (RecordsError, struct.error, ValueError) as e:
            log.info("DLQ copy-record: a source batch is not copied (%s); headers-only records", e)
    return out


def _chunks(records: list, max_bytes: int):
    """Split records into batches under the topic's max.message.bytes (a record too large alone goes alone)."""
    chunk, size = [], HEADER_SIZE
    for r in records:
        n = 24 + len(r[0] or b"") + len(r[1] or b"") + sum(len(k) + len(v or b"") + 4 for k, v in r[2])
        if chunk and size + n > max_bytes:
            yield chunk
            chunk, size = [], HEADER_SIZE
        chunk.append(r)
        size += n
    if chunk:
        yield chunk


def _ranges(runs: list) -> str:
    return ",".join(f"{lo}" if lo == hi else f"{lo}-{hi}" for lo, hi, _, _ in runs)
