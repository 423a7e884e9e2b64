"""AlterPartitionReassignments (45) v0-1: every partition has one replica, this node, and no
other broker exists, so a reassignment can only name this node: as Kafka's
ReplicationControlManager.alterPartitionReassignment answers, replicas ``[this node]`` is a
success that changes nothing, and a reassignment never stays in progress.

Per partition, in Kafka's order: an unknown topic or partition UNKNOWN_TOPIC_OR_PARTITION;
replicas null (cancel) NO_REASSIGNMENT_IN_PROGRESS; an empty list, a broker other than this node
("... includes broker 2, but no such broker is registered.") or this node twice
INVALID_REPLICA_ASSIGNMENT; then, unless ``allow_replication_factor_change`` (v1, default true),
a replica count other than 1 INVALID_REPLICATION_FACTOR.  v1 echoes
``allow_replication_factor_change``.  ALTER on the CLUSTER, else CLUSTER_AUTHORIZATION_FAILED at the
top level and on every partition (AlterPartitionReassignmentsRequest.getErrorResponse).  On Kafka a
broker forwards this to the controller.
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import allowed_cluster
from protocol.errors import Errors
from protocol.lazy_messages import AlterPartitionReassignmentsResponse
from protocol.messages.registry import ApiKey

_T = AlterPartitionReassignmentsResponse.ReassignableTopicResponse
_P = AlterPartitionReassignmentsResponse.ReassignablePartitionResponse


def _check(logs, node: int, topic: str, part, allow_rf_change: bool) -> tuple[int, str | None]:
    info = logs.topic(topic)
    if info is None:
        return Errors.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {topic}."
    if not 0 <= part.partition_index < info.partitions:
        return Errors.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {topic}:{part.partition_index}."
    replicas = part.replicas
    if replicas is None:  # the exception's message is the error's default: sent as null (ApiError.fromThrowable)
        return Errors.NO_REASSIGNMENT_IN_PROGRESS, None
    if not replicas:
        return Errors.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list."
    previous = None
    for broker in sorted(replicas):
        if broker != node:
            return Errors.INVALID_REPLICA_ASSIGNMENT, (f"The manual partition assignment includes broker {broker}, "
                                                       "but no such broker is registered.")
        if broker == previous:
            return Errors.INVALID_REPLICA_ASSIGNMENT, (f"The manual partition assignment includes the broker "
                                                       f"{broker} more than once.")
        previous = broker
    if not allow_rf_change and len(replicas) != 1:
        return Errors.INVALID_REPLICATION_FACTOR, f"The replication factor is changed from 1 to {len(replicas)}"
    return Errors.NONE, None


@handler(ApiKey.ALTER_PARTITION_REASSIGNMENTS, versions=(0, 1))
async def alter_partition_reassignments(ctx, req):
    allow = req.allow_replication_factor_change
    if not allowed_cluster(ctx, "ALTER"):
        code, message = Errors.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."
        return AlterPartitionReassignmentsResponse(
            allow_replication_factor_change=allow, error_code=code, error_message=message,
            responses=[_T(name=t.name, partitions=[_P(partition_index=p.partition_index, error_code=code,
                                                      error_message=message) for p in t.partitions])
                       for t in req.topics])
    c = ctx.components
    out = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            code, message = _check(c.logs, c.node.node_id, t.name, p, allow)
            parts.append(_P(partition_index=p.partition_index, error_code=code, error_message=message))
        out.append(_T(name=t.name, partitions=parts))
    return AlterPartitionReassignmentsResponse(allow_replication_factor_change=allow, error_message=None,
                                               responses=out)
