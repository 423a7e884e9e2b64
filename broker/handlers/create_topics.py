"""CreateTopics (19) v2-7: validated as Kafka validates, created with one replica on this node.

Errors: INVALID_TOPIC_EXCEPTION (bad name), TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS
(< 1), INVALID_REPLICATION_FACTOR (anything but -1/1: one broker), INVALID_REQUEST
(a name listed twice: one answer for it, ``__cluster_metadata``, or assignments together with a
partition count), INVALID_REPLICA_ASSIGNMENT
(assignments naming another broker or skipping partitions), INVALID_CONFIG, and
POLICY_VIOLATION for every topic when the request asks for more than 10,000
partitions in total (Kafka's limit per request).  -1
partitions / replication factor take the broker defaults.  v5+ return the
resulting configs; v7 the topic id.  ``validateOnly`` checks without creating, and answers
the configs and a topic id as Kafka's controller does.
Authorization (as Kafka): CREATE on the CLUSTER or on the topic, else
TOPIC_AUTHORIZATION_FAILED; without DESCRIBE_CONFIGS on the topic the created topic's
configs are withheld (TopicConfigErrorCode TOPIC_AUTHORIZATION_FAILED).
``controller_mutation_rate`` (``broker.quotas``): a valid topic's partitions are counted; from v6 a
topic is refused with THROTTLING_QUOTA_EXCEEDED while the quota is exhausted, before v6 it is created
and the answer throttled.
"""
from __future__ import annotations

import uuid
from collections import Counter

from broker.configs import TOPIC
from broker.dispatch import handler
from broker.log.config import ConfigError, validate_topic_configs
from broker.log.errors import LogError
from broker.log.manager import validate_topic_name
from broker.security.authorize import allowed, allowed_cluster
from protocol.errors import Errors
from protocol.lazy_messages import CreateTopicsResponse
from protocol.messages.registry import ApiKey

_R = CreateTopicsResponse.CreatableTopicResult
CLUSTER_METADATA = "__cluster_metadata"  # KRaft's metadata log: never a topic clients can create


def _fail(name: str, code: int, message: str | None) -> _R:
    return _R(name=name, error_code=code, error_message=message, configs=None)


# Kafka's controller refuses a request that would create more partitions than this in
# total (ReplicationControlManager.MAX_PARTITIONS_PER_BATCH), whatever the topics.
MAX_PARTITIONS_PER_REQUEST = 10_000


@handler(ApiKey.CREATE_TOPICS, versions=(2, 7))
async def create_topics(ctx, req):
    c = ctx.components
    counts = Counter(t.name for t in req.topics)
    default = c.config.get_int("num.partitions", 1)
    total = sum(len(t.assignments) if t.assignments else default if t.num_partitions == -1
                else max(t.num_partitions, 0) for t in req.topics)
    if total > MAX_PARTITIONS_PER_REQUEST:
        return CreateTopicsResponse(topics=[_fail(t.name, Errors.POLICY_VIOLATION,
                                                  "Excessively large number of partitions per request.")
                                            for t in req.topics])
    out = []
    cluster_create = allowed_cluster(ctx, "CREATE")
    mutations = ctx.quota.mutations(ctx.api_version, strict_since=6) if ctx.quota is not None else None
    for t in req.topics:
        if counts[t.name] > 1:  # one answer per name, as Kafka's ControllerApis.createTopics
            if counts[t.name] != -1:
                out.append(_fail(t.name, Errors.INVALID_REQUEST, "Duplicate topic name."))
                counts[t.name] = -1
            continue
        if counts[t.name] == -1:
            continue
        if t.name == CLUSTER_METADATA:
            out.append(_fail(t.name, Errors.INVALID_REQUEST, f"Creation of internal topic {CLUSTER_METADATA} is "
                                                             f"prohibited."))
            continue
        if not cluster_create and not allowed(ctx, "CREATE", "TOPIC", t.name):
            out.append(_fail(t.name, Errors.TOPIC_AUTHORIZATION_FAILED, "Authorization failed."))
            continue
        r = await _create(c, t, req.validate_only, mutations)
        if r.error_code == Errors.NONE and not allowed(ctx, "DESCRIBE_CONFIGS", "TOPIC", t.name):
            r.configs, r.topic_config_error_code = [], Errors.TOPIC_AUTHORIZATION_FAILED
            r.num_partitions = r.replication_factor = -1
        out.append(r)
    return CreateTopicsResponse(topics=out)


async def _create(c, t, validate_only: bool, mutations) -> _R:
    try:
        validate_topic_name(t.name)
    except (LogError, ValueError) as e:
        return _fail(t.name, Errors.INVALID_TOPIC_EXCEPTION, str(e))
    if c.logs.topic(t.name) is not None:
        return _fail(t.name, Errors.TOPIC_ALREADY_EXISTS, f"Topic '{t.name}' already exists.")
    other = c.topics.collision(t.name)
    if other is not None:
        return _fail(t.name, Errors.INVALID_TOPIC_EXCEPTION, f"Topic '{t.name}' collides with existing topic: {other}")
    partitions = t.num_partitions
    if t.assignments:
        if t.num_partitions != -1 or t.replication_factor != -1:
            return _fail(t.name, Errors.INVALID_REQUEST, "Both numPartitions or replicationFactor and "
                                                         "replicasAssignments were set. Both cannot be used at the same time.")
        indexes = sorted(a.partition_index for a in t.assignments)
        if indexes != list(range(len(indexes))):
            return _fail(t.name, Errors.INVALID_REPLICA_ASSIGNMENT, "Partitions should be a consecutive "
                                                                    "0-based integer sequence")
        for a in t.assignments:
            if a.broker_ids != [c.node.node_id]:
                return _fail(t.name, Errors.INVALID_REPLICA_ASSIGNMENT,
                             f"Replica assignment {a.broker_ids} names brokers other than {c.node.node_id}")
        partitions = len(indexes)
    else:
        if partitions == -1:
            partitions = c.config.get_int("num.partitions", 1)
        if partitions < 1:
            return _fail(t.name, Errors.INVALID_PARTITIONS, "Number of partitions was set to an invalid "
                                                            "non-positive value.")
        rf = t.replication_factor
        if rf == -1:
            rf = c.config.get_int("default.replication.factor", 1)
        if rf < 1:
            return _fail(t.name, Errors.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0, "
                                                                    "or -1 to use the default value.")
        if rf > 1:
            return _fail(t.name, Errors.INVALID_REPLICATION_FACTOR, f"Unable to replicate the partition {rf} "
                                                                    f"time(s): The target replication factor of {rf} cannot be reached because only 1 "
                                                                    f"broker(s) are registered.")
    configs = {}
    for entry in t.configs:
        if entry.value is None:
            return _fail(t.name, Errors.INVALID_CONFIG, f"Null value not supported for topic configs: {entry.name}")
        configs[entry.name] = entry.value
    try:
        validate_topic_configs(configs)
    except ConfigError as e:
        return _fail(t.name, Errors.INVALID_CONFIG, str(e))
    if mutations is not None and not mutations.record(partitions):  # controller_mutation_rate, validate-only too
        return _fail(t.name, Errors.THROTTLING_QUOTA_EXCEEDED, "The throttling quota has been exceeded.")
    if not validate_only:
        try:
            info = await c.topics.create_staged(t.name, partitions, configs)
        except LogError as e:
            return _fail(t.name, e.code, str(e))
        except ConfigError as e:
            return _fail(t.name, Errors.INVALID_CONFIG, str(e))
        topic_id = info.topic_id.bytes
        entries = c.configs.get(TOPIC).describe(t.name)
    else:  # as Kafka's controller: the configs it would have, and an id it would have given
        topic_id = uuid.uuid4().bytes
        entries = c.configs.get(TOPIC).entries(configs)
    return _R(name=t.name, topic_id=topic_id, error_message=None, num_partitions=partitions, replication_factor=1,
              configs=[CreateTopicsResponse.CreatableTopicConfigs(
                  name=e.name, value=e.value, read_only=e.read_only, config_source=e.source,
                  is_sensitive=e.sensitive) for e in entries])
