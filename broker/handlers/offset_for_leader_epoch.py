"""OffsetForLeaderEpoch (23) v2-4: the end offset of a leader epoch (KIP-320; Java consumers
validate their positions with it after a metadata change).

This node has led every partition with leader epoch 0 since the partition was created: every
batch is written with partition leader epoch 0 (``PartitionLog.leader_epoch``), Metadata,
ListOffsets and Fetch advertise 0, and nothing ever bumps it (no leader changes on one node; a
recreated topic is a new topic id, again from epoch 0).  So the leader-epoch cache Kafka keeps
per partition (``leader-epoch-checkpoint``) is here the one entry (0, log start offset), the same
after every restart, and the answer is exactly what Kafka's LeaderEpochFileCache.endOffsetFor
gives for that cache:
- epoch 0 (the current one): (0, log end offset);
- an epoch above 0, or -1: no answer (leader epoch -1, end offset -1), error NONE;
- any other epoch below 0: (that epoch, log start offset).
``current_leader_epoch`` (not -1) is checked first, as Partition.checkCurrentLeaderEpoch: above 0
UNKNOWN_LEADER_EPOCH, below 0 FENCED_LEADER_EPOCH.  Unknown partitions:
UNKNOWN_TOPIC_OR_PARTITION.  CLUSTER_ACTION on the CLUSTER answers every topic; otherwise DESCRIBE
on each TOPIC, else TOPIC_AUTHORIZATION_FAILED on its partitions (KafkaApis).
``replica_id`` (a follower's id) changes nothing here: there are no followers.
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import allowed, allowed_cluster
from protocol.errors import Errors
from protocol.lazy_messages import OffsetForLeaderEpochResponse
from protocol.messages.registry import ApiKey

_T = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
_E = OffsetForLeaderEpochResponse.EpochEndOffset
UNDEFINED_EPOCH = -1


def end_offset_for(log, requested: int) -> tuple[int, int]:
    """(epoch, end offset) of ``requested`` in a log whose only leader epoch is its current one
    (LeaderEpochFileCache.endOffsetFor over the single entry (epoch, log start offset))."""
    epoch = log.leader_epoch
    if requested == UNDEFINED_EPOCH or requested > epoch:
        return UNDEFINED_EPOCH, -1
    if requested == epoch:
        return epoch, log.log_end_offset
    return requested, log.log_start_offset


@handler(ApiKey.OFFSET_FOR_LEADER_EPOCH, versions=(2, 4))
async def offset_for_leader_epoch(ctx, req):
    logs = ctx.components.logs
    cluster = allowed_cluster(ctx, "CLUSTER_ACTION")
    out = []
    for t in req.topics:
        if not cluster and not allowed(ctx, "DESCRIBE", "TOPIC", t.topic):
            out.append(_T(topic=t.topic, partitions=[_E(partition=p.partition,
                                                        error_code=Errors.TOPIC_AUTHORIZATION_FAILED)
                                                     for p in t.partitions]))
            continue
        parts = []
        for p in t.partitions:
            log = logs.get_log(t.topic, p.partition)
            if log is None:
                parts.append(_E(partition=p.partition, error_code=Errors.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            current = p.current_leader_epoch
            if current != UNDEFINED_EPOCH and current != log.leader_epoch:
                code = Errors.UNKNOWN_LEADER_EPOCH if current > log.leader_epoch else Errors.FENCED_LEADER_EPOCH
                parts.append(_E(partition=p.partition, error_code=code))
                continue
            epoch, end = end_offset_for(log, p.leader_epoch)
            parts.append(_E(partition=p.partition, leader_epoch=epoch, end_offset=end))
        out.append(_T(topic=t.topic, partitions=parts))
    return OffsetForLeaderEpochResponse(topics=out)
