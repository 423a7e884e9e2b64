"""Metadata (3) v0-13: this broker leads every partition (leader epoch 0, ISR = [this node]).

Topics by name, or by id from v10 (librdkafka resolves share-group assignments by
id); an unknown id gets UNKNOWN_TOPIC_ID.  A null topic list means all topics.
Unknown names are created when ``auto.create.topics.enable`` is true and the
request allows it (always before v4), with ``num.partitions`` partitions.  The
broker's address is that of the listener the request came on.

Authorization, as KafkaApis.handleTopicMetadataRequest: topics the principal may
not DESCRIBE are left out of an all-topics answer and answered
TOPIC_AUTHORIZATION_FAILED when named (by id: the id, no name); auto-creation needs
CREATE on the CLUSTER or on the topic (TOPIC_AUTHORIZATION_FAILED otherwise).
Authorized operations when asked: each topic's, and the cluster's (v8-10; 0 without
DESCRIBE on the CLUSTER); every operation without an authorizer.
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.log.errors import LogError
from broker.security.authorize import ALL_OPERATIONS, UNSET, allowed, allowed_cluster, operations
from protocol.errors import Errors
from protocol.lazy_messages import MetadataResponse  # the real class once Metadata is first served
from protocol.messages.registry import ApiKey
from protocol.primitives import ZERO_UUID

_T = MetadataResponse.MetadataResponseTopic
_P = MetadataResponse.MetadataResponsePartition
# READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS
TOPIC_OPERATIONS = ALL_OPERATIONS["TOPIC"]
# CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER, DESCRIBE
CLUSTER_OPERATIONS = ALL_OPERATIONS["CLUSTER"]


def cluster_operations(ctx) -> int:
    """The cluster's authorized operations: 0 without DESCRIBE on it (AuthHelper)."""
    return operations(ctx, "CLUSTER", "kafka-cluster") if allowed_cluster(ctx, "DESCRIBE") else 0


def topic_entry(ctx, info, with_ops: bool) -> _T:
    c = ctx.components
    node = c.node.node_id
    parts = [_P(partition_index=i, leader_id=node, leader_epoch=0, replica_nodes=[node], isr_nodes=[node])
             for i in range(info.partitions)]
    return _T(name=info.name, topic_id=info.topic_id.bytes, is_internal=c.topics.is_internal(info.name),
              partitions=parts, topic_authorized_operations=operations(ctx, "TOPIC", info.name) if with_ops else UNSET)


def _denied(name, topic_id=ZERO_UUID) -> _T:
    return _T(error_code=Errors.TOPIC_AUTHORIZATION_FAILED, name=name, topic_id=topic_id, partitions=[])


@handler(ApiKey.METADATA, versions=(0, 13))
async def metadata(ctx, req):
    c = ctx.components
    v = ctx.api_version
    logs = c.logs
    with_ops = v >= 8 and req.include_topic_authorized_operations
    topics = []
    if req.topics is None or (v == 0 and not req.topics):
        topics = [topic_entry(ctx, info, with_ops) for info in list(logs.topics.values())
                  if allowed(ctx, "DESCRIBE", "TOPIC", info.name)]
    else:
        allow_create = (req.allow_auto_topic_creation if v >= 4 else True) and \
            c.config.get_bool("auto.create.topics.enable", True)
        for t in req.topics:
            if t.name is None:
                info = logs.topic_by_id(t.topic_id) if t.topic_id != ZERO_UUID else None
                if info is None:
                    topics.append(_T(error_code=Errors.UNKNOWN_TOPIC_ID, name=None, topic_id=t.topic_id))
                    continue
                if not allowed(ctx, "DESCRIBE", "TOPIC", info.name):  # ids are not secret; names are
                    topics.append(_denied(None, t.topic_id))
                    continue
            else:
                if not allowed(ctx, "DESCRIBE", "TOPIC", t.name):  # do not disclose whether it exists
                    topics.append(_denied(t.name))
                    continue
                info = logs.topic(t.name)
                if info is None:
                    code = Errors.UNKNOWN_TOPIC_OR_PARTITION
                    if allow_create:
                        if not (allowed_cluster(ctx, "CREATE") or allowed(ctx, "CREATE", "TOPIC", t.name)):
                            topics.append(_denied(t.name))
                            continue
                        try:
                            info = c.topics.create(t.name, c.config.get_int("num.partitions", 1), {})
                        except LogError as e:
                            code = e.code
                    if info is None:
                        topics.append(_T(error_code=code, name=t.name))
                        continue
            topics.append(topic_entry(ctx, info, with_ops))
    host, port = ctx.endpoint()  # the listener this request came on
    return MetadataResponse(
        brokers=[MetadataResponse.MetadataResponseBroker(node_id=c.node.node_id, host=host, port=port)],
        cluster_id=c.node.cluster_id, controller_id=c.node.node_id, topics=topics,
        cluster_authorized_operations=cluster_operations(ctx) if 8 <= v <= 10 and req.include_cluster_authorized_operations
        else UNSET)
