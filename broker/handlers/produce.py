"""Produce (0) v3-13 (advertised from v0 as Kafka 4.x does; v0-2 are refused).

Per partition: validate the one record batch (header, CRC32C, magic 2), run the
idempotent-producer sequence check, assign offsets, append the bytes as they came
(compressed batches are stored compressed), then wake fetches waiting on the
partition.  The response goes out only after the bytes are in the segment file
(acks=1/-1; a single node makes them the same), and, when the append reached
``flush.messages``, only after that fsync (done off the loop); acks=0 gets no response.  v13
addresses topics by id.  Record bodies are never decoded.
Authorization (KafkaApis): WRITE on each TOPIC, else TOPIC_AUTHORIZATION_FAILED for its
partitions (checked before existence; v13 ids are resolved first, unknown ones are
UNKNOWN_TOPIC_ID).  One cached lookup per topic when an authorizer is configured.
Not implemented: transactional produce (transactional ids are refused with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED until transactions arrive).
"""
from __future__ import annotations

import logging

from broker.dispatch import handler
from broker.log.errors import LogError
from protocol.errors import Errors
from protocol.messages.produce import ProduceResponse
from protocol.messages.registry import ApiKey
from protocol.records import RecordsError, validate_records

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
            elif req.transactional_id is not None:
                parts.append(_error(pd.index, Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                    "transactions are not supported yet"))
            else:
                parts.append(_append(c, topic, pd, fsyncs))
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
