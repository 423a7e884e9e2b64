"""Builders for a streams group's ``__consumer_offsets`` records (KIP-1071), and its task sets.

Record types 17 (StreamsGroupMetadata: group epoch, metadata hash, validated topology epoch,
the assignment configs of the last target), 19 (StreamsGroupMemberMetadata), 20/21 (target
assignment epoch / per member), 22 (a member's current assignment and what it still has to
revoke) and 23 (StreamsGroupTopology), as Kafka 4.4's ``StreamsCoordinatorRecordHelpers``.
Every value has the single version 0.
"""
from __future__ import annotations

from coordinator.runtime import Record, record
from protocol.coordinator_records.registry import (
    StreamsGroupCurrentMemberAssignmentKey, StreamsGroupCurrentMemberAssignmentValue,
    StreamsGroupMemberMetadataKey, StreamsGroupMemberMetadataValue, StreamsGroupMetadataKey,
    StreamsGroupMetadataValue, StreamsGroupTargetAssignmentMemberKey, StreamsGroupTargetAssignmentMemberValue,
    StreamsGroupTargetAssignmentMetadataKey, StreamsGroupTargetAssignmentMetadataValue, StreamsGroupTopologyKey,
    StreamsGroupTopologyValue)

Tasks = dict[str, set[int]]


class TasksTuple:
    """Active, standby and warm-up tasks, each ``{subtopology_id: {partition, ...}}`` (Kafka's TasksTuple)."""

    __slots__ = ("active", "standby", "warmup")

    def __init__(self, active: Tasks | None = None, standby: Tasks | None = None, warmup: Tasks | None = None):
        self.active = _clean(active)
        self.standby = _clean(standby)
        self.warmup = _clean(warmup)

    def copy(self) -> "TasksTuple":
        return TasksTuple(self.active, self.standby, self.warmup)

    def kinds(self) -> tuple[Tasks, Tasks, Tasks]:
        return self.active, self.standby, self.warmup

    def is_empty(self) -> bool:
        return not (self.active or self.standby or self.warmup)

    def __eq__(self, other) -> bool:
        return isinstance(other, TasksTuple) and self.kinds() == other.kinds()

    __hash__ = None

    def __repr__(self) -> str:
        return f"TasksTuple(active={self.active}, standby={self.standby}, warmup={self.warmup})"

    @classmethod
    def from_task_ids(cls, active, standby, warmup) -> "TasksTuple":
        def conv(ids):
            return {t.subtopology_id: set(t.partitions) for t in ids or ()}
        return cls(conv(active), conv(standby), conv(warmup))


def _clean(tasks: Tasks | None) -> Tasks:
    return {sid: set(ps) for sid, ps in (tasks or {}).items() if ps}


def task_ids(cls, tasks: Tasks) -> list:
    return [cls(subtopology_id=sid, partitions=sorted(ps)) for sid, ps in sorted(tasks.items()) if ps]


# ------------------------------------------------------------------ records
def group_epoch(group_id: str, epoch: int, metadata_hash: int, validated_topology_epoch: int,
                assignment_configs: dict[str, str]) -> Record:
    cfg = StreamsGroupMetadataValue.LastAssignmentConfig
    return record(StreamsGroupMetadataKey(group_id=group_id), StreamsGroupMetadataValue(
        epoch=epoch, metadata_hash=metadata_hash, validated_topology_epoch=validated_topology_epoch,
        last_assignment_configs=[cfg(key=k, value=v) for k, v in sorted(assignment_configs.items())]), 0)


def group_epoch_tombstone(group_id: str) -> Record:
    return record(StreamsGroupMetadataKey(group_id=group_id), None, None)


def topology(group_id: str, value) -> Record:
    return record(StreamsGroupTopologyKey(group_id=group_id), value, 0)


def topology_tombstone(group_id: str) -> Record:
    return record(StreamsGroupTopologyKey(group_id=group_id), None, None)


def topology_value(req_topology):
    """The StreamsGroupTopology value of a heartbeat's topology (Kafka's convertToStreamsGroupTopologyRecord)."""
    V = StreamsGroupTopologyValue

    def info(t):
        return V.TopicInfo(name=t.name, partitions=t.partitions, replication_factor=t.replication_factor,
                           topic_configs=[V.TopicConfig(key=c.key, value=c.value) for c in t.topic_configs or ()])

    subs = []
    for s in req_topology.subtopologies:
        subs.append(V.Subtopology(
            subtopology_id=s.subtopology_id, source_topics=list(s.source_topics),
            source_topic_regex=list(s.source_topic_regex or ()),
            state_changelog_topics=[info(t) for t in s.state_changelog_topics],
            repartition_sink_topics=list(s.repartition_sink_topics),
            repartition_source_topics=[info(t) for t in s.repartition_source_topics],
            copartition_groups=[V.CopartitionGroup(source_topics=list(g.source_topics),
                                                   source_topic_regex=list(g.source_topic_regex or ()),
                                                   repartition_source_topics=list(g.repartition_source_topics))
                                for g in s.copartition_groups]))
    subs.sort(key=lambda s: s.subtopology_id)
    return V(epoch=req_topology.epoch, subtopologies=subs)


def member_metadata(group_id: str, m) -> Record:
    V = StreamsGroupMemberMetadataValue
    endpoint = None if m.user_endpoint is None else V.Endpoint(host=m.user_endpoint[0], port=m.user_endpoint[1])
    return record(StreamsGroupMemberMetadataKey(group_id=group_id, member_id=m.member_id), V(
        instance_id=m.instance_id, rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
        rebalance_timeout_ms=m.rebalance_timeout_ms, topology_epoch=m.topology_epoch, process_id=m.process_id,
        user_endpoint=endpoint, client_tags=[V.KeyValue(key=k, value=v) for k, v in sorted(m.client_tags.items())]),
        0)


def member_metadata_tombstone(group_id: str, member_id: str) -> Record:
    return record(StreamsGroupMemberMetadataKey(group_id=group_id, member_id=member_id), None, None)


def target_member(group_id: str, member_id: str, tasks: TasksTuple) -> Record:
    V = StreamsGroupTargetAssignmentMemberValue
    return record(StreamsGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id), V(
        active_tasks=task_ids(V.TaskIds, tasks.active), standby_tasks=task_ids(V.TaskIds, tasks.standby),
        warmup_tasks=task_ids(V.TaskIds, tasks.warmup)), 0)


def target_member_tombstone(group_id: str, member_id: str) -> Record:
    return record(StreamsGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id), None, None)


def target_epoch(group_id: str, epoch: int, timestamp_ms: int) -> Record:
    return record(StreamsGroupTargetAssignmentMetadataKey(group_id=group_id),
                  StreamsGroupTargetAssignmentMetadataValue(assignment_epoch=epoch,
                                                            assignment_timestamp=timestamp_ms), 0)


def target_epoch_tombstone(group_id: str) -> Record:
    return record(StreamsGroupTargetAssignmentMetadataKey(group_id=group_id), None, None)


def current_assignment(group_id: str, m) -> Record:
    V = StreamsGroupCurrentMemberAssignmentValue
    a, p = m.assigned, m.pending

    def ids(tasks):
        return task_ids(V.TaskIds, tasks)

    return record(StreamsGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=m.member_id), V(
        member_epoch=m.member_epoch, previous_member_epoch=m.previous_member_epoch, state=m.state,
        active_tasks=ids(a.active), standby_tasks=ids(a.standby), warmup_tasks=ids(a.warmup),
        active_tasks_pending_revocation=ids(p.active), standby_tasks_pending_revocation=ids(p.standby),
        warmup_tasks_pending_revocation=ids(p.warmup)), 0)


def current_assignment_tombstone(group_id: str, member_id: str) -> Record:
    return record(StreamsGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member_id), None, None)
