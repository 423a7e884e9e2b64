"""Produce (0) v3-13 (advertised from v0 as Kafka 4.x does; v0-2 are refused).

Per partition: validate the one record batch (header, CRC32C, magic 2), run the
idempotent-producer sequence check, assign offsets, append the bytes as they came
(compressed batches are stored compressed), then wake fetches waiting on the
partition.  The response goes out only after the bytes are in the segment file, and in
durable mode (``sharebroker.durability=fsync``, the default) only once an fsync covering
them finished (group commit, off the loop; broker/log/syncing.py), for acks=1 as for
acks=all: a single node has no other replica, so both mean "on disk"; in page-cache mode
the answer waits for the fsync only when the append reached ``flush.messages``; acks=0
gets no response.  Durable mode wakes waiting
fetches when the sync moves the high watermark, not at the append.  v13
addresses topics by id.  Record bodies are never decoded, except on a compacted topic
(``cleanup.policy`` with ``compact``), where every record's framing is read to refuse records
without a key as Kafka's LogValidator does: INVALID_RECORD with one RecordError per keyless
record ("Compacted topic cannot accept message without key in topic partition t-p") and
Kafka's summary message; a batch whose codec needs the optional extra is accepted unread.
Authorization (KafkaApis): WRITE on each TOPIC, else TOPIC_AUTHORIZATION_FAILED for its
partitions (checked before existence; v13 ids are resolved first, unknown ones are
UNKNOWN_TOPIC_ID).  One cached lookup per topic when an authorizer is configured.
Transactional produce (a TransactionalId): WRITE on the TRANSACTIONAL_ID, else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition.  A transactional batch's
partition must be in the producer's ongoing transaction (KIP-890 part 1,
``transaction.partition.verification.enable``): v12+ (transaction.version 2) adds it
implicitly, v11 gets TRANSACTION_ABORTABLE, v3-10 INVALID_TXN_STATE; a stale epoch
INVALID_PRODUCER_EPOCH, and CONCURRENT_TRANSACTIONS is answered as NOT_ENOUGH_REPLICAS
before v12 (retriable for every client), as Kafka's AddPartitionsToTxnManager and
ReplicaManager do.  Only the batch header is read.
Quotas (``broker.quotas``): the request's size counts against ``producer_byte_rate`` once it is
handled; the answer carries the throttle time and the connection is muted for it.

Fast path (:func:`fast_produce`, run by the server before the request is decoded): the
common request -- no transactional id, acks 1 or -1, one topic with one partition, no
tagged fields, no authorizer, no ``flush.messages``, not compacted -- is parsed in place
(header, topic, partition, record-set bounds) and answered with bytes encoded here, without
building the request and response objects; it appends through the same
:func:`_append_records` as the general path; in durable mode its answer is a
``dispatch.Deferred`` sent once the fsync is done.  Anything else goes the general way
(which also answers malformed input), and with client quotas the request's size is counted as on the general path.
"""
from __future__ import annotations

import logging
import struct

from broker.dispatch import Deferred, handler
from broker.log.errors import LogError
from broker.log.syncing import NO_FLUSH
from broker.transactions import ADD_PARTITION, produce_operation, verify_partition
from protocol.errors import Errors
from protocol.lazy_messages import ProduceResponse  # the real class once Produce is first served
from protocol.messages.registry import ApiKey
from protocol.primitives import read_uvarint, write_uvarint
from protocol.records import HEADER_SIZE, RecordsError, TRANSACTIONAL_MASK, read_header, validate_records

logger = logging.getLogger("sharebroker.produce")
_TopicResp = ProduceResponse.TopicProduceResponse
_PartResp = ProduceResponse.PartitionProduceResponse


def _error(index: int, code: int, message: str | None = None) -> _PartResp:
    return _PartResp(index=index, error_code=code, base_offset=-1, log_append_time_ms=-1,
                     log_start_offset=-1, error_message=message)


_ACKS_TIMEOUT = struct.Struct(">hi")
_I32 = struct.Struct(">i")
_ONE = _I32.pack(1)
_PART_V3 = struct.Struct(">ihqq")  # index, error code, base offset, log append time
_PART_V5 = struct.Struct(">ihqqq")  # ... log start offset (v5+)


def fast_produce(c, m: memoryview, p: int, version: int, b: bytearray) -> int:
    """Answer the common Produce (see the module docstring) into ``b`` and return where its
    throttle_time_ms is; False (nothing done) otherwise.

    ``p`` is where the body starts in the frame ``m``; ``b`` holds the response header.  Client
    quotas count the request afterwards, as on the general path (``broker.quotas.Quotas.finish_fast``).
    """
    if c.authorizer.enabled:
        return False
    n = len(m)
    try:
        if version >= 9:
            if m[p] != 0:  # a transactional id (compact string; 0 is null)
                return False
            acks = _ACKS_TIMEOUT.unpack_from(m, p + 1)[0]
            p += 7
            if m[p] != 2:  # one topic
                return False
            if version >= 13:
                key = bytes(m[p + 1:p + 17])
                topic = c.logs.topic_by_id(key)
                p += 17
            else:
                ln = m[p + 1]
                if not 0 < ln < 0x80:
                    return False
                key = str(m[p + 2:p + 1 + ln], "utf-8")
                topic = c.logs.topic(key)
                p += 1 + ln
            if m[p] != 2:  # one partition
                return False
            index = _I32.unpack_from(m, p + 1)[0]
            ln, p = read_uvarint(m, p + 5)
            end = p + ln - 1
            if ln == 0 or end + 3 != n or m[end] or m[end + 1] or m[end + 2]:  # null records, tags, trailing bytes
                return False
        else:
            if m[p] != 0xFF or m[p + 1] != 0xFF:  # a transactional id
                return False
            acks = _ACKS_TIMEOUT.unpack_from(m, p + 2)[0]
            p += 8
            if m[p:p + 4] != _ONE:
                return False
            ln = (m[p + 4] << 8) | m[p + 5]
            if ln & 0x8000:
                return False
            key = str(m[p + 6:p + 6 + ln], "utf-8")
            topic = c.logs.topic(key)
            p += 6 + ln
            if m[p:p + 4] != _ONE:
                return False
            index, ln = struct.unpack_from(">ii", m, p + 4)
            p += 12
            end = p + ln
            if ln < 0 or end != n:
                return False
    except (IndexError, ValueError, struct.error):  # malformed: the general path says how
        return False
    if acks not in (1, -1) or topic is None or not 0 <= index < topic.partitions or c.topics.is_internal(topic.name):
        return False
    log = c.logs.get_log(topic.name, index)
    if log.config.flush_messages < NO_FLUSH or log.config.compact:  # compacted: record errors, general path
        return False
    head = len(b)
    code, message, res, _ = _append_records(c, topic, index, log, m[p:end])
    _encode_one(b, version, key, index, code, message, res)
    at = len(b) - 5 if version >= 9 else len(b) - 4  # the throttle time (then v9+'s tagged fields)
    if code or res.durable is None:
        return at

    def finish(exc) -> int:  # once synced; a failed fsync answers KAFKA_STORAGE_ERROR (not in the log)
        if exc is None:
            return at
        del b[head:]
        _encode_one(b, version, key, index, Errors.KAFKA_STORAGE_ERROR, f"fsync failed: {exc}", None)
        return len(b) - 5 if version >= 9 else len(b) - 4
    return Deferred(res.durable, finish)


def _encode_one(b: bytearray, version: int, key, index: int, code: int, message, res) -> None:
    """A ProduceResponse body for one partition of one topic (``key``: name, or id from v13)."""
    if code:
        base, append_time, start = -1, -1, -1
    else:
        base, append_time, start = res.base_offset, res.log_append_time, res.log_start_offset
    if version >= 9:
        b.append(2)
        if version >= 13:
            b += key
        else:
            name = key.encode()
            write_uvarint(b, len(name) + 1)
            b += name
        b.append(2)
        b += _PART_V5.pack(index, code, base, append_time, start)
        b.append(1)  # no record errors
        if message is None:
            b.append(0)
        else:
            text = message.encode()
            write_uvarint(b, len(text) + 1)
            b += text
        b += b"\0\0"  # partition and topic tagged fields
        b += _I32.pack(0)  # throttle time
        b.append(0)
        return
    name = key.encode()
    b += _ONE
    b += struct.pack(">h", len(name))
    b += name
    b += _ONE
    b += (_PART_V5.pack(index, code, base, append_time, start) if version >= 5
          else _PART_V3.pack(index, code, base, append_time))
    if version >= 8:
        b += _I32.pack(0)  # no record errors
        if message is None:
            b += b"\xff\xff"
        else:
            text = message.encode()
            b += struct.pack(">h", len(text))
            b += text
    b += _I32.pack(0)  # throttle time


@handler(ApiKey.PRODUCE, versions=(3, 13), advertise_from=0, fast=fast_produce)
async def produce(ctx, req):
    c = ctx.components
    by_id = ctx.api_version >= 13
    acks = req.acks
    auth = c.authorizer
    tid = req.transactional_id
    txn_denied = tid is not None and auth.enabled and not auth.allowed(ctx.principal, "WRITE", "TRANSACTIONAL_ID",
                                                                        tid, ctx.host)
    verify = tid is not None and c.config.get("transaction.partition.verification.enable", "true") != "false"
    out = []
    fsyncs: list = []  # appends that reached flush.messages: answered once their fsync is done
    for td in req.topic_data:
        topic = c.logs.topic_by_id(td.topic_id) if by_id else c.logs.topic(td.name)
        denied = auth.enabled and (topic is not None or not by_id) and not auth.allowed(
            ctx.principal, "WRITE", "TOPIC", topic.name if topic is not None else td.name, ctx.host)
        parts = []
        for pd in td.partition_data:
            if denied:
                parts.append(_error(pd.index, Errors.TOPIC_AUTHORIZATION_FAILED))
            elif acks not in (0, 1, -1):
                parts.append(_error(pd.index, Errors.INVALID_REQUIRED_ACKS))
            elif topic is None or not 0 <= pd.index < topic.partitions:
                parts.append(_error(pd.index, Errors.UNKNOWN_TOPIC_ID if by_id else Errors.UNKNOWN_TOPIC_OR_PARTITION))
            elif c.topics.is_internal(topic.name):
                parts.append(_error(pd.index, Errors.INVALID_TOPIC_EXCEPTION,
                                    f"cannot append to internal topic {topic.name}"))
            elif txn_denied:
                parts.append(_error(pd.index, Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
            else:
                code = await _verify(c, tid, topic.name, pd, ctx.api_version) if verify else 0
                parts.append(_error(pd.index, code) if code else _append(c, topic, pd, fsyncs))
        out.append(_TopicResp(name=td.name, topic_id=td.topic_id, partition_responses=parts))
    q = ctx.quota
    if q is not None:  # the request's size counts against producer_byte_rate when it finishes (RequestQuota)
        q.exempt = acks == 0  # no request quota for acks=0 (the connection may still be muted for bytes)
    if acks == 0:
        return None
    if not fsyncs:
        return ProduceResponse(responses=out)
    return Deferred(_synced(fsyncs), lambda _exc: ProduceResponse(responses=out))


async def _synced(fsyncs: list) -> None:
    """Wait for the fsyncs the answer depends on; a failed one answers its partition KAFKA_STORAGE_ERROR."""
    for resp, durable in fsyncs:
        try:
            await durable
        except (OSError, LogError) as e:  # the partition went offline (broker/log/syncing.py, _go_offline)
            resp.error_code, resp.error_message = Errors.KAFKA_STORAGE_ERROR, f"fsync failed: {e}"
            resp.base_offset = resp.log_append_time_ms = resp.log_start_offset = -1


async def _verify(c, tid: str, topic: str, pd, version: int) -> int:
    """KIP-890: is the partition of this transactional batch in the producer's transaction? 0 or a code."""
    records = pd.records
    if records is None or len(records) < HEADER_SIZE or not records[22] & TRANSACTIONAL_MASK:
        return 0  # not transactional (or malformed: validation answers)
    info = read_header(records, 0)
    operation = produce_operation(version)
    code = await verify_partition(c.transactions, tid, info.producer_id, info.producer_epoch, (topic, pd.index),
                                  operation)
    # ReplicaManager: retriable coordinator errors become NOT_ENOUGH_REPLICAS (which every client retries),
    # except CONCURRENT_TRANSACTIONS for transaction.version 2 (v12+), answered as it is
    if code == Errors.CONCURRENT_TRANSACTIONS and operation != ADD_PARTITION:
        return Errors.NOT_ENOUGH_REPLICAS
    if code in (Errors.COORDINATOR_NOT_AVAILABLE, Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.NOT_COORDINATOR):
        return Errors.NOT_ENOUGH_REPLICAS
    return code


def _append(c, topic, pd, fsyncs: list) -> _PartResp:
    if pd.records is None:
        return _error(pd.index, Errors.INVALID_RECORD, "null records")
    code, message, res, record_errors = _append_records(c, topic, pd.index, c.logs.get_log(topic.name, pd.index),
                                                        pd.records)
    if code:
        resp = _error(pd.index, code, message)
        resp.record_errors = [ProduceResponse.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m)
                              for i, m in record_errors or ()]
        return resp
    resp = _PartResp(index=pd.index, base_offset=res.base_offset, log_append_time_ms=res.log_append_time,
                     log_start_offset=res.log_start_offset)
    # answered once synced: every append in durable mode, those that reached flush.messages in page-cache mode
    if res.durable is not None:
        fsyncs.append((resp, res.durable))
    return resp


def _append_records(c, topic, index: int, log, records) -> tuple:
    """Validate and append one partition's records: (0, None, AppendResult, None) or (error code, message,
    None, record errors or None)."""
    cfg = log.config
    try:
        infos = validate_records(records, max_message_bytes=cfg.max_message_bytes,
                                 timestamp_type=1 if cfg.log_append_time else 0, now_ms=c.now_ms(),
                                 timestamp_before_max_ms=cfg.message_timestamp_before_max_ms,
                                 timestamp_after_max_ms=cfg.message_timestamp_after_max_ms)
        keyless = log.key_errors(records, infos) if cfg.compact else None
        if keyless:
            return Errors.INVALID_RECORD, _key_errors_message(keyless), None, keyless
        res = log.append(records, infos)
    except (RecordsError, LogError) as e:
        return e.code, str(e), None, None
    if not res.duplicate and not log.durable:  # durable mode: woken when the sync moves the high watermark
        c.topics.appended(topic.name, index)
    return 0, None, res, None


def _key_errors_message(errors: list[tuple[int, str]]) -> str:
    """Kafka's summary of a batch refused for its records (LogValidator.processRecordErrors)."""
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    return (f"One or more records have been rejected due to {len(errors)} record errors in total, and only "
            f"showing the first three errors at most: [{shown}]")
