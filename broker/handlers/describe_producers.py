"""DescribeProducers (61) v0: the active producers of partitions, from the partition logs' producer state.

Per producer: id, epoch, last sequence, last timestamp, coordinator epoch and the
first offset of its open transaction (-1 when none).  READ on the TOPIC, else
TOPIC_AUTHORIZATION_FAILED; an unknown partition UNKNOWN_TOPIC_OR_PARTITION (KafkaApis).
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import allowed
from protocol.errors import Errors
from protocol.lazy_messages import DescribeProducersResponse
from protocol.messages.registry import ApiKey

_R = DescribeProducersResponse


@handler(ApiKey.DESCRIBE_PRODUCERS, versions=(0, 0))
async def describe_producers(ctx, req):
    logs = ctx.components.logs
    out = []
    for t in req.topics:
        ok = allowed(ctx, "READ", "TOPIC", t.name)
        parts = []
        for p in t.partition_indexes:
            plog = logs.get_log(t.name, p) if ok else None
            if plog is None:
                code = Errors.UNKNOWN_TOPIC_OR_PARTITION if ok else Errors.TOPIC_AUTHORIZATION_FAILED
                parts.append(_R.PartitionResponse(partition_index=p, error_code=code, active_producers=[]))
                continue
            active = [_R.ProducerState(producer_id=e.producer_id, producer_epoch=e.epoch, last_sequence=e.last_seq,
                                       last_timestamp=e.last_timestamp, coordinator_epoch=e.coordinator_epoch,
                                       current_txn_start_offset=-1 if e.txn_first_offset is None
                                       else e.txn_first_offset)
                      for e in plog.producer_state.producers.values()]
            parts.append(_R.PartitionResponse(partition_index=p, active_producers=active))
        out.append(_R.TopicResponse(name=t.name, partitions=parts))
    return DescribeProducersResponse(topics=out)
