"""Metadata (3) v0-13: this broker leads every partition (leader epoch 0, ISR = [this node]).

Topics by name, or by id from v10 (librdkafka resolves share-group assignments by
id); an unknown id gets UNKNOWN_TOPIC_ID.  A null topic list means all topics.
Unknown names are created when ``auto.create.topics.enable`` is true and the
request allows it (always before v4), with ``num.partitions`` partitions.
Authorized operations: with no authorizer every operation is allowed, and the
bit sets say so when asked.
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.log.errors import LogError
from protocol.errors import Errors
from protocol.messages.metadata import MetadataResponse
from protocol.messages.registry import ApiKey
from protocol.primitives import ZERO_UUID

_T = MetadataResponse.MetadataResponseTopic
_P = MetadataResponse.MetadataResponsePartition
# READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS
TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
# CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER, DESCRIBE
CLUSTER_OPERATIONS = sum(1 << op for op in (5, 9, 10, 11, 12, 7, 8))
UNSET = -2147483648


def topic_entry(c, info, version: int, with_ops: bool) -> _T:
    node = c.node.node_id
    parts = [_P(partition_index=i, leader_id=node, leader_epoch=0, replica_nodes=[node], isr_nodes=[node])
             for i in range(info.partitions)]
    return _T(name=info.name, topic_id=info.topic_id.bytes, is_internal=c.topics.is_internal(info.name),
              partitions=parts, topic_authorized_operations=TOPIC_OPERATIONS if with_ops else UNSET)


@handler(ApiKey.METADATA, versions=(0, 13))
async def metadata(ctx, req):
    c = ctx.components
    v = ctx.api_version
    logs = c.logs
    with_ops = v >= 8 and req.include_topic_authorized_operations
    topics = []
    if req.topics is None or (v == 0 and not req.topics):
        topics = [topic_entry(c, info, v, with_ops) for info in list(logs.topics.values())]
    else:
        allow_create = (req.allow_auto_topic_creation if v >= 4 else True) and \
            c.config.get_bool("auto.create.topics.enable", True)
        for t in req.topics:
            if t.name is None:
                info = logs.topic_by_id(t.topic_id) if t.topic_id != ZERO_UUID else None
                if info is None:
                    topics.append(_T(error_code=Errors.UNKNOWN_TOPIC_ID, name=None, topic_id=t.topic_id))
                    continue
            else:
                info = logs.topic(t.name)
                if info is None:
                    code = Errors.UNKNOWN_TOPIC_OR_PARTITION
                    if allow_create:
                        try:
                            info = c.topics.create(t.name, c.config.get_int("num.partitions", 1), {})
                        except LogError as e:
                            code = e.code
                    if info is None:
                        topics.append(_T(error_code=code, name=t.name))
                        continue
            topics.append(topic_entry(c, info, v, with_ops))
    return MetadataResponse(
        brokers=[MetadataResponse.MetadataResponseBroker(node_id=c.node.node_id, host=c.node.host,
                                                         port=c.node.port)],
        cluster_id=c.node.cluster_id, controller_id=c.node.node_id, topics=topics,
        cluster_authorized_operations=CLUSTER_OPERATIONS if 8 <= v <= 10 and req.include_cluster_authorized_operations
        else UNSET)
