"""DeleteRecords (21) v0-2: move the log start offset up (offset -1 means the high watermark).

OFFSET_OUT_OF_RANGE above the high watermark, UNKNOWN_TOPIC_OR_PARTITION for unknown
partitions, TOPIC_AUTHORIZATION_FAILED without DELETE on the topic (checked first, as
KafkaApis).  Share partitions whose start offset falls below follow it.
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import allowed
from broker.log.errors import LogError
from protocol.errors import Errors
from protocol.lazy_messages import DeleteRecordsResponse
from protocol.messages.registry import ApiKey

_T = DeleteRecordsResponse.DeleteRecordsTopicResult
_P = DeleteRecordsResponse.DeleteRecordsPartitionResult


@handler(ApiKey.DELETE_RECORDS, versions=(0, 2))
async def delete_records(ctx, req):
    c = ctx.components
    out = []
    for t in req.topics:
        parts = []
        if not allowed(ctx, "DELETE", "TOPIC", t.name):
            out.append(_T(name=t.name, partitions=[_P(partition_index=p.partition_index, low_watermark=-1,
                                                      error_code=Errors.TOPIC_AUTHORIZATION_FAILED)
                                                   for p in t.partitions]))
            continue
        for p in t.partitions:
            log = c.logs.get_log(t.name, p.partition_index)
            if log is None:
                parts.append(_P(partition_index=p.partition_index, low_watermark=-1,
                                error_code=Errors.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            offset = log.high_watermark if p.offset == -1 else p.offset
            if offset < 0 or offset > log.high_watermark:
                parts.append(_P(partition_index=p.partition_index, low_watermark=-1,
                                error_code=Errors.OFFSET_OUT_OF_RANGE))
                continue
            try:
                low = log.delete_records(offset)
            except LogError as e:
                parts.append(_P(partition_index=p.partition_index, low_watermark=-1, error_code=e.code))
                continue
            c.topics.appended(t.name, p.partition_index)
            parts.append(_P(partition_index=p.partition_index, low_watermark=low))
        out.append(_T(name=t.name, partitions=parts))
    return DeleteRecordsResponse(topics=out)
