"""CreatePartitions (37) v0-3: grow a topic (never shrink).

INVALID_PARTITIONS when the count is not an increase, INVALID_REPLICA_ASSIGNMENT
when assignments do not match the new partitions or name another broker,
UNKNOWN_TOPIC_OR_PARTITION for unknown topics, INVALID_REQUEST for a topic listed
twice, POLICY_VIOLATION for every topic when the request would add more than 10,000
partitions (Kafka's limit per request).  ``validateOnly`` checks without creating.
ALTER on the CLUSTER or on the topic, else TOPIC_AUTHORIZATION_FAILED (before existence).
``controller_mutation_rate`` counts the added partitions: from v3 a topic is refused with
THROTTLING_QUOTA_EXCEEDED while the quota is exhausted (``broker.quotas``).
"""
from __future__ import annotations

from collections import Counter

from broker.dispatch import handler
from broker.log.errors import LogError
from broker.security.authorize import allowed, allowed_cluster
from protocol.errors import Errors
from protocol.lazy_messages import CreatePartitionsResponse
from protocol.messages.registry import ApiKey

_R = CreatePartitionsResponse.CreatePartitionsTopicResult


# Kafka's controller writes at most this many records for one request (QuorumController
# MAX_RECORDS_PER_USER_OP, one per new partition) and refuses the whole request beyond it.
MAX_NEW_PARTITIONS_PER_REQUEST = 10_000


@handler(ApiKey.CREATE_PARTITIONS, versions=(0, 3))
async def create_partitions(ctx, req):
    c = ctx.components
    counts = Counter(t.name for t in req.topics)
    new_total = 0
    for t in req.topics:
        info = c.logs.topic(t.name)
        if info is not None and counts[t.name] == 1:
            new_total += max(t.count - info.partitions, 0)
    if new_total > MAX_NEW_PARTITIONS_PER_REQUEST:
        return CreatePartitionsResponse(results=[
            _R(name=t.name, error_code=Errors.POLICY_VIOLATION,
               error_message="Unable to perform excessively large batch operation.") for t in req.topics])
    out = []
    cluster_alter = allowed_cluster(ctx, "ALTER")
    mutations = ctx.quota.mutations(ctx.api_version, strict_since=3) if ctx.quota is not None else None
    for t in req.topics:
        if counts[t.name] > 1:
            out.append(_R(name=t.name, error_code=Errors.INVALID_REQUEST, error_message="Duplicate topic in request."))
            continue
        if not cluster_alter and not allowed(ctx, "ALTER", "TOPIC", t.name):
            out.append(_R(name=t.name, error_code=Errors.TOPIC_AUTHORIZATION_FAILED,
                          error_message="The topic authorization is failed."))
            continue
        info = c.logs.topic(t.name)
        if info is None:
            out.append(_R(name=t.name, error_code=Errors.UNKNOWN_TOPIC_OR_PARTITION,
                          error_message=f"The topic '{t.name}' does not exist."))
            continue
        if c.topics.is_internal(t.name):
            out.append(_R(name=t.name, error_code=Errors.INVALID_REQUEST,
                          error_message=f"Cannot add partitions to internal topic {t.name}"))
            continue
        if t.count <= info.partitions:
            verb = "would not be an increase" if t.count == info.partitions else "cannot be decreased"
            out.append(_R(name=t.name, error_code=Errors.INVALID_PARTITIONS,
                          error_message=f"Topic currently has {info.partitions} partitions, {t.count} {verb}."))
            continue
        if t.assignments is not None:
            if len(t.assignments) != t.count - info.partitions:
                out.append(_R(name=t.name, error_code=Errors.INVALID_REPLICA_ASSIGNMENT,
                              error_message=f"Attempted to add {t.count - info.partitions} additional partitions "
                                            f"but only {len(t.assignments)} assignments were specified."))
                continue
            if any(a.broker_ids != [c.node.node_id] for a in t.assignments):
                out.append(_R(name=t.name, error_code=Errors.INVALID_REPLICA_ASSIGNMENT,
                              error_message=f"Assignments may only name broker {c.node.node_id}."))
                continue
        if mutations is not None and not mutations.record(t.count - info.partitions):
            out.append(_R(name=t.name, error_code=Errors.THROTTLING_QUOTA_EXCEEDED,
                          error_message="The throttling quota has been exceeded."))
            continue
        if req.validate_only:
            out.append(_R(name=t.name))
            continue
        try:
            await c.topics.add_partitions(t.name, t.count)
            out.append(_R(name=t.name))
        except LogError as e:
            out.append(_R(name=t.name, error_code=e.code, error_message=str(e)))
    return CreatePartitionsResponse(results=out)
