"""Produce (0) v3-13 (advertised from v0 as Kafka 4.x does; v0-2 are refused).

Per partition: validate the one record batch (header, CRC32C, magic 2), run the
idempotent-producer sequence check, assign offsets, append the bytes as they came
(compressed batches are stored compressed), then wake fetches waiting on the
partition.  The response goes out only after the bytes are in the segment file
(acks=1/-1; a single node makes them the same), and, when the append reached
``flush.messages``, only after that fsync (done off the loop); acks=0 gets no response.  v13
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
"""
from __future__ import annotations

import logging

from broker.dispatch import handler
from broker.log.errors import LogError
from broker.transactions import ADD_PARTITION, produce_operation, verify_partition
from protocol.errors import Errors
from protocol.messages.produce import ProduceResponse
from protocol.messages.registry import ApiKey
from protocol.records import HEADER_SIZE, RecordsError, TRANSACTIONAL_MASK, read_header, validate_records

logger = logging.getLogger("sharebroker.produce")
_TopicResp = ProduceResponse.TopicProduceResponse
_PartResp = ProduceResponse.PartitionProduceResponse


def _error(index: int, code: int, message: str | None = None) -> _PartResp:
    return _PartResp(index=index, error_code=code, base_offset=-1, log_append_time_ms=-1,
                     log_start_offset=-1, error_message=message)


@handler(ApiKey.PRODUCE, versions=(3, 13), advertise_from=0)
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
    if acks == 0:
        return None
    for topic_name, resp, durable in fsyncs:
        try:
            await durable
        except OSError as e:  # the data is written but its fsync failed: as Kafka, a storage error
            logger.error("fsync of %s-%d failed: %s", topic_name, resp.index, e)
            resp.error_code, resp.error_message = Errors.KAFKA_STORAGE_ERROR, f"fsync failed: {e}"
    return ProduceResponse(responses=out)


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
    log = c.logs.get_log(topic.name, pd.index)
    records = pd.records
    if records is None:
        return _error(pd.index, Errors.INVALID_RECORD, "null records")
    cfg = log.config
    try:
        infos = validate_records(records, max_message_bytes=cfg.max_message_bytes,
                                 timestamp_type=1 if cfg.log_append_time else 0, now_ms=c.now_ms(),
                                 timestamp_before_max_ms=cfg.message_timestamp_before_max_ms,
                                 timestamp_after_max_ms=cfg.message_timestamp_after_max_ms)
        if cfg.compact:
            refused = _check_keys(log, records, infos, pd.index)
            if refused is not None:
                return refused
        res = log.append(records, infos)
    except RecordsError as e:
        return _error(pd.index, e.code, str(e))
    except LogError as e:
        return _error(pd.index, e.code, str(e))
    if not res.duplicate:
        c.topics.appended(topic.name, pd.index)
    resp = _PartResp(index=pd.index, base_offset=res.base_offset, log_append_time_ms=res.log_append_time,
                     log_start_offset=res.log_start_offset)
    if res.durable is not None:
        fsyncs.append((topic.name, resp, res.durable))
    return resp


def _check_keys(log, records, infos, partition: int) -> _PartResp | None:
    """The INVALID_RECORD answer (with Kafka's record errors and summary) if a record has no key."""
    errors = log.key_errors(records, infos)
    if not errors:
        return None
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    resp = _error(partition, Errors.INVALID_RECORD,
                  f"One or more records have been rejected due to {len(errors)} record errors in total, and only "
                  f"showing the first three errors at most: [{shown}]")
    resp.record_errors = [ProduceResponse.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m)
                          for i, m in errors]
    return resp
