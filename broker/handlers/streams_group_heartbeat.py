"""StreamsGroupHeartbeat (88) v0-1: KIP-1071 streams groups (coordinator/group/streams_manager.py).

As KafkaApis.handleStreamsGroupHeartbeat: a joining member's topology may name no internal
Kafka topic (``__consumer_offsets``, ``__transaction_state``, ``__share_group_state``) and only
valid topic names (else STREAMS_INVALID_TOPOLOGY, the coordinator is not asked); with an
authorizer READ on the group (GROUP_AUTHORIZATION_FAILED) and DESCRIBE on every topic the topology
names (TOPIC_AUTHORIZATION_FAILED).  The internal topics (repartition and changelog) the coordinator
finds missing are created here with the partition counts it decided and the topology's configs,
when the caller may CREATE them (else the MISSING_INTERNAL_TOPICS status says so).  v1 adds
AcceptableRecoveryLag (int64) and TopologyDescriptionRequired (never set: no topology description
plugin here).
"""
from __future__ import annotations

from types import SimpleNamespace

from broker.dispatch import handler
from broker.handlers.create_topics import _create
from broker.log.errors import LogError
from broker.log.manager import validate_topic_name
from broker.security.authorize import allowed, allowed_cluster, enabled, filter_allowed
from coordinator.group.streams_topology import required_topics
from protocol.errors import Errors
from protocol.lazy_messages import StreamsGroupHeartbeatResponse
from protocol.messages.registry import ApiKey

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


def _topology_error(topology) -> StreamsGroupHeartbeatResponse | None:
    names = sorted(required_topics(topology))
    prohibited = [n for n in names if n in INTERNAL_TOPICS]
    if prohibited:
        return StreamsGroupHeartbeatResponse(
            error_code=Errors.STREAMS_INVALID_TOPOLOGY,
            error_message=f"Use of Kafka internal topics {','.join(prohibited)} in a Kafka Streams topology is "
                          "prohibited.")
    invalid = []
    for n in names:
        try:
            validate_topic_name(n)
        except (LogError, ValueError):
            invalid.append(n)
    if invalid:
        return StreamsGroupHeartbeatResponse(error_code=Errors.STREAMS_INVALID_TOPOLOGY,
                                             error_message=f"Topic names {','.join(invalid)} are not valid topic "
                                                           "names.")
    return None


@handler(ApiKey.STREAMS_GROUP_HEARTBEAT, versions=(0, 1))
async def streams_group_heartbeat(ctx, req):
    if enabled(ctx) and not allowed(ctx, "READ", "GROUP", req.group_id):
        return StreamsGroupHeartbeatResponse(error_code=Errors.GROUP_AUTHORIZATION_FAILED)
    if req.topology is not None:
        if (err := _topology_error(req.topology)) is not None:
            return err
        names = required_topics(req.topology)
        if enabled(ctx) and names and len(filter_allowed(ctx, "DESCRIBE", "TOPIC", names)) < len(names):
            return StreamsGroupHeartbeatResponse(error_code=Errors.TOPIC_AUTHORIZATION_FAILED)
    c = ctx.components

    async def create_topics(topics: dict) -> tuple[list[str], dict[str, str]]:
        """(topics the caller may not create, {topic: why its creation failed})"""
        cluster_create = allowed_cluster(ctx, "CREATE")
        unauthorized, errors = [], {}
        for name, t in sorted(topics.items()):
            if not cluster_create and not allowed(ctx, "CREATE", "TOPIC", name):
                unauthorized.append(name)
                continue
            if c.logs.topic(name) is not None:
                continue  # created meanwhile (another member's heartbeat)
            r = await _create(c, SimpleNamespace(
                name=name, num_partitions=t.partitions, replication_factor=t.replication_factor, assignments=[],
                configs=[SimpleNamespace(name=k, value=v) for k, v in sorted(t.configs.items())]), False, None)
            if r.error_code and r.error_code != Errors.TOPIC_ALREADY_EXISTS:
                errors[name] = f"{Errors(r.error_code).name}: {r.error_message}"
        return unauthorized, errors

    return await c.groups.streams_group_heartbeat(req, ctx.client_id or "", ctx.client_host, create_topics)
