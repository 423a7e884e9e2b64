"""ListOffsets (2) v1-11: earliest (-2), latest (-1), max timestamp (-3), earliest local (-4),
and offset by timestamp (first batch whose max timestamp is >= the target).

Latest is the high watermark, or the last stable offset under READ_COMMITTED.
DESCRIBE on each TOPIC or TOPIC_AUTHORIZATION_FAILED (before existence), as KafkaApis.
Tiered-storage specs (-5 latest tiered, -6 earliest pending upload) find nothing
here: offset -1, as Kafka answers without remote storage.
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import allowed
from protocol.errors import Errors
from protocol.lazy_messages import ListOffsetsResponse
from protocol.messages.registry import ApiKey

_T = ListOffsetsResponse.ListOffsetsTopicResponse
_P = ListOffsetsResponse.ListOffsetsPartitionResponse
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL = -1, -2, -3, -4


@handler(ApiKey.LIST_OFFSETS, versions=(1, 11))
async def list_offsets(ctx, req):
    logs = ctx.components.logs
    out = []
    for t in req.topics:
        parts = []
        if not allowed(ctx, "DESCRIBE", "TOPIC", t.name):
            out.append(_T(name=t.name, partitions=[_P(partition_index=p.partition_index, timestamp=-1, offset=-1,
                                                      error_code=Errors.TOPIC_AUTHORIZATION_FAILED)
                                                   for p in t.partitions]))
            continue
        for p in t.partitions:
            log = logs.get_log(t.name, p.partition_index)
            if log is None:
                parts.append(_P(partition_index=p.partition_index, error_code=Errors.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            ts = p.timestamp
            if ts == LATEST:
                off = log.last_stable_offset if req.isolation_level == 1 else log.high_watermark
                parts.append(_P(partition_index=p.partition_index, timestamp=-1, offset=off, leader_epoch=0))
            elif ts in (EARLIEST, EARLIEST_LOCAL):
                parts.append(_P(partition_index=p.partition_index, timestamp=-1, offset=log.log_start_offset,
                                leader_epoch=0))
            elif ts == MAX_TIMESTAMP:
                off, found_ts = log.max_timestamp()
                parts.append(_P(partition_index=p.partition_index, timestamp=found_ts, offset=off,
                                leader_epoch=0 if off >= 0 else -1))
            elif ts < 0:
                parts.append(_P(partition_index=p.partition_index, timestamp=-1, offset=-1))
            else:
                off, found_ts = log.offset_for_timestamp(ts)
                if req.isolation_level == 1 and off >= log.last_stable_offset:
                    off, found_ts = -1, -1
                parts.append(_P(partition_index=p.partition_index, timestamp=found_ts, offset=off,
                                leader_epoch=0 if off >= 0 else -1))
        out.append(_T(name=t.name, partitions=parts))
    return ListOffsetsResponse(topics=out)
