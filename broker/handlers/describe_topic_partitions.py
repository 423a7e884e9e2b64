"""DescribeTopicPartitions (75) v0: topics and their partitions a page at a time (KIP-966; Java's
Admin ``describeTopics`` prefers it to Metadata), as Kafka's DescribeTopicPartitionsRequestHandler
and KRaftMetadataCache.describeTopicResponse.

The topics named (all topics when the list is empty) from the cursor's topic on, by name, each
once; a page holds at most ``min(response_partition_limit, max.request.partition.size.limit
(2000))`` partitions (at least 1).  A topic whose partitions do not all fit ends the page with
``next_cursor`` at its first partition left out; a page that filled up exactly at a topic's end
points the cursor at the next topic's partition 0.  The cursor's topic starts at the cursor's
partition.  A cursor whose topic is not among the named ones, or whose partition is negative,
makes the whole request INVALID_REQUEST (each named topic answered with it).  Each partition: led
by this node at epoch 0, replicas and ISR this node, no ELR, nothing offline.  Named topics that do
not exist: UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an illegal name); on an
all-topics request they are not listed.  DESCRIBE on each TOPIC: a named topic without it gets
TOPIC_AUTHORIZATION_FAILED with no id after the others; left out of an all-topics answer.
Each answered topic carries its authorized operations.
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.log.errors import LogError
from broker.log.manager import validate_topic_name
from broker.security.authorize import allowed, operations
from protocol.errors import Errors
from protocol.lazy_messages import DescribeTopicPartitionsResponse
from protocol.messages.registry import ApiKey

_T = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponseTopic
_P = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponsePartition
_C = DescribeTopicPartitionsResponse.Cursor
PARTITION_SIZE_LIMIT_DEFAULT = 2000  # Kafka's max.request.partition.size.limit


def _invalid(req, message: str):
    return DescribeTopicPartitionsResponse(topics=[
        _T(error_code=Errors.INVALID_REQUEST, name=t.name, is_internal=False, partitions=[]) for t in req.topics])


def _unknown_code(name: str) -> int:
    try:
        validate_topic_name(name)
    except LogError:
        return Errors.INVALID_TOPIC_EXCEPTION
    return Errors.UNKNOWN_TOPIC_OR_PARTITION


@handler(ApiKey.DESCRIBE_TOPIC_PARTITIONS, versions=(0, 0))
async def describe_topic_partitions(ctx, req):
    c = ctx.components
    logs = c.logs
    fetch_all = not req.topics
    cursor = req.cursor
    cursor_topic = cursor.topic_name if cursor is not None else ""
    source = list(logs.topics) if fetch_all else [t.name for t in req.topics]
    names = {n for n in source if n >= cursor_topic}
    if not fetch_all and cursor is not None and cursor.topic_name not in names:
        return _invalid(req, "DescribeTopicPartitionsRequest topic list should contain the cursor topic")
    if cursor is not None and cursor.partition_index < 0:
        return _invalid(req, "DescribeTopicPartitionsRequest cursor partition must be valid")
    denied = []
    authorized = []
    for n in sorted(names):
        if allowed(ctx, "DESCRIBE", "TOPIC", n):
            authorized.append(n)
        elif not fetch_all:
            denied.append(_T(error_code=Errors.TOPIC_AUTHORIZATION_FAILED, name=n, is_internal=False, partitions=[]))
    limit = c.config.get_int("max.request.partition.size.limit", PARTITION_SIZE_LIMIT_DEFAULT)
    remaining = max(min(limit, req.response_partition_limit), 1)
    node = c.node.node_id
    topics, next_cursor = [], None
    for n in authorized:
        if remaining == 0:
            next_cursor = _C(topic_name=n, partition_index=0)
            break
        info = logs.topic(n)
        if info is None:
            if not fetch_all:
                topics.append(_T(error_code=_unknown_code(n), name=n, is_internal=c.topics.is_internal(n)))
            continue
        start = cursor.partition_index if n == cursor_topic and cursor is not None else 0
        upper = min(info.partitions, start + remaining)
        parts = [_P(partition_index=i, leader_id=node, leader_epoch=0, replica_nodes=[node], isr_nodes=[node],
                    eligible_leader_replicas=[], last_known_elr=[], offline_replicas=[])
                 for i in range(start, upper)]
        topics.append(_T(name=n, topic_id=info.topic_id.bytes, is_internal=c.topics.is_internal(n), partitions=parts))
        if upper < info.partitions:
            next_cursor = _C(topic_name=n, partition_index=upper)
            break
        remaining -= len(parts)
    for t in topics:
        t.topic_authorized_operations = operations(ctx, "TOPIC", t.name)
    return DescribeTopicPartitionsResponse(topics=topics + denied, next_cursor=next_cursor)
