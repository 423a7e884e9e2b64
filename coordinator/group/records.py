"""Builders for the ``__consumer_offsets`` records the group coordinator writes.

A record here is a :class:`coordinator.runtime.Record` built by
:func:`coordinator.runtime.record` from generated key/value structs
(``protocol.coordinator_records``, each imported on first use through its registry); ``None``
value is a tombstone; ``None`` version means the value schema's highest version.  The
coordinator's runtime frames them with :func:`coordinator.runtime.encode_record`.

Value versions follow Kafka: OffsetCommitValue v1 only when the commit carried an
explicit retention time (it is the version with ``expireTimestamp``), v3 otherwise
(v4 when the topic id is known); GroupMetadataValue v3 (v4 is only its flexible
twin); the consumer-group and share-group records have a single version 0.
"""
from __future__ import annotations

from typing import Iterable, Mapping

from coordinator.runtime import Record, record
from protocol.coordinator_records.registry import (  # classes that import their module on first use
    ConsumerGroupCurrentMemberAssignmentKey, ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey, ConsumerGroupMemberMetadataValue, ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue, ConsumerGroupPartitionMetadataKey, ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue, ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue, GroupMetadataKey, GroupMetadataValue, OffsetCommitKey,
    OffsetCommitValue, ShareGroupCurrentMemberAssignmentKey, ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataKey, ShareGroupMemberMetadataValue, ShareGroupMetadataKey,
    ShareGroupMetadataValue, ShareGroupStatePartitionMetadataKey, ShareGroupStatePartitionMetadataValue,
    ShareGroupTargetAssignmentMemberKey, ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey, ShareGroupTargetAssignmentMetadataValue)
from protocol.primitives import ZERO_UUID

Rec = Record
TopicPartitions = Mapping[bytes, Iterable[int]]

GROUP_METADATA_VERSION = 3


# ------------------------------------------------------------------ offsets
def offset_commit(group: str, topic: str, partition: int, offset: int, leader_epoch: int,
                  metadata: str, commit_ts: int, expire_ts: int | None, topic_id: bytes | None) -> Rec:
    value = OffsetCommitValue(offset=offset, leader_epoch=leader_epoch, metadata=metadata,
                              commit_timestamp=commit_ts,
                              expire_timestamp=-1 if expire_ts is None else expire_ts,
                              topic_id=topic_id or ZERO_UUID)
    if expire_ts is not None:
        version = 1
    elif topic_id and topic_id != ZERO_UUID:
        version = 4
    else:
        version = 3
    return record(OffsetCommitKey(group=group, topic=topic, partition=partition), value, version)


def offset_tombstone(group: str, topic: str, partition: int) -> Rec:
    return record(OffsetCommitKey(group=group, topic=topic, partition=partition), None, None)


# ------------------------------------------------------------------ classic groups
def group_metadata(group) -> Rec:
    """The GroupMetadata record of a classic group, members with their current assignment."""
    members = []
    for m in group.members.values():
        members.append(GroupMetadataValue.MemberMetadata(
            member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id,
            client_host=m.client_host, rebalance_timeout=m.rebalance_timeout_ms,
            session_timeout=m.session_timeout_ms,
            subscription=m.metadata(group.protocol_name) if group.protocol_name else b"",
            assignment=m.assignment or b""))
    value = GroupMetadataValue(
        protocol_type=group.protocol_type or "", generation=group.generation_id,
        protocol=group.protocol_name, leader=group.leader_id,
        current_state_timestamp=-1 if group.current_state_timestamp is None else group.current_state_timestamp,
        members=members)
    return record(GroupMetadataKey(group=group.group_id), value, GROUP_METADATA_VERSION)


def group_metadata_tombstone(group_id: str) -> Rec:
    return record(GroupMetadataKey(group=group_id), None, None)


# ------------------------------------------------------------------ consumer groups (KIP-848)
def _tps(cls, assignment: TopicPartitions) -> list:
    return [cls(topic_id=tid, partitions=sorted(parts)) for tid, parts in sorted(assignment.items()) if parts]


def consumer_group_epoch(group_id: str, epoch: int, metadata_hash: int) -> Rec:
    return record(ConsumerGroupMetadataKey(group_id=group_id),
            ConsumerGroupMetadataValue(epoch=epoch, metadata_hash=metadata_hash), 0)


def consumer_group_epoch_tombstone(group_id: str) -> Rec:
    return record(ConsumerGroupMetadataKey(group_id=group_id), None, None)


def consumer_group_partition_metadata_tombstone(group_id: str) -> Rec:
    return record(ConsumerGroupPartitionMetadataKey(group_id=group_id), None, None)


def consumer_member_metadata(group_id: str, m) -> Rec:
    return record(ConsumerGroupMemberMetadataKey(group_id=group_id, member_id=m.member_id),
            ConsumerGroupMemberMetadataValue(
                instance_id=m.instance_id, rack_id=m.rack_id, client_id=m.client_id,
                client_host=m.client_host, subscribed_topic_names=list(m.subscribed_topic_names),
                subscribed_topic_regex=m.subscribed_topic_regex,
                rebalance_timeout_ms=m.rebalance_timeout_ms, server_assignor=m.server_assignor), 0)


def consumer_member_metadata_tombstone(group_id: str, member_id: str) -> Rec:
    return record(ConsumerGroupMemberMetadataKey(group_id=group_id, member_id=member_id), None, None)


def consumer_target_member(group_id: str, member_id: str, assignment: TopicPartitions) -> Rec:
    return record(ConsumerGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id),
            ConsumerGroupTargetAssignmentMemberValue(
                topic_partitions=_tps(ConsumerGroupTargetAssignmentMemberValue.TopicPartition, assignment)), 0)


def consumer_target_member_tombstone(group_id: str, member_id: str) -> Rec:
    return record(ConsumerGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id), None, None)


def consumer_target_epoch(group_id: str, epoch: int, timestamp_ms: int) -> Rec:
    return record(ConsumerGroupTargetAssignmentMetadataKey(group_id=group_id),
            ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=epoch, assignment_timestamp=timestamp_ms), 0)


def consumer_target_epoch_tombstone(group_id: str) -> Rec:
    return record(ConsumerGroupTargetAssignmentMetadataKey(group_id=group_id), None, None)


def consumer_current_assignment(group_id: str, m) -> Rec:
    cls = ConsumerGroupCurrentMemberAssignmentValue.TopicPartitions
    return record(ConsumerGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=m.member_id),
            ConsumerGroupCurrentMemberAssignmentValue(
                member_epoch=m.member_epoch, previous_member_epoch=m.previous_member_epoch,
                state=m.state, assigned_partitions=_tps(cls, m.assigned),
                partitions_pending_revocation=_tps(cls, m.pending_revocation)), 0)


def consumer_current_assignment_tombstone(group_id: str, member_id: str) -> Rec:
    return record(ConsumerGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member_id), None, None)


# ------------------------------------------------------------------ share groups (KIP-932)
def share_member_metadata(group_id: str, m) -> Rec:
    return record(ShareGroupMemberMetadataKey(group_id=group_id, member_id=m.member_id),
                  ShareGroupMemberMetadataValue(rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
                                                subscribed_topic_names=list(m.subscribed_topic_names)))


def share_member_metadata_tombstone(group_id: str, member_id: str) -> Rec:
    return record(ShareGroupMemberMetadataKey(group_id=group_id, member_id=member_id), None)


def share_group_epoch(group_id: str, epoch: int, metadata_hash: int) -> Rec:
    return record(ShareGroupMetadataKey(group_id=group_id),
                  ShareGroupMetadataValue(epoch=epoch, metadata_hash=metadata_hash))


def share_group_epoch_tombstone(group_id: str) -> Rec:
    return record(ShareGroupMetadataKey(group_id=group_id), None)


def share_target_member(group_id: str, member_id: str, assignment: TopicPartitions) -> Rec:
    return record(ShareGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id),
                  ShareGroupTargetAssignmentMemberValue(
                      topic_partitions=_tps(ShareGroupTargetAssignmentMemberValue.TopicPartition, assignment)))


def share_target_member_tombstone(group_id: str, member_id: str) -> Rec:
    return record(ShareGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id), None)


def share_target_epoch(group_id: str, epoch: int, timestamp_ms: int = 0) -> Rec:
    """ShareGroupTargetAssignmentMetadata; ``timestamp_ms``: when the assignment was computed (KIP-1263)."""
    return record(ShareGroupTargetAssignmentMetadataKey(group_id=group_id),
                  ShareGroupTargetAssignmentMetadataValue(assignment_epoch=epoch, assignment_timestamp=timestamp_ms))


def share_target_epoch_tombstone(group_id: str) -> Rec:
    return record(ShareGroupTargetAssignmentMetadataKey(group_id=group_id), None)


def share_current_assignment(group_id: str, m) -> Rec:
    return record(ShareGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=m.member_id),
                  ShareGroupCurrentMemberAssignmentValue(
                      member_epoch=m.member_epoch, previous_member_epoch=m.previous_member_epoch, state=0,
                      assigned_partitions=_tps(ShareGroupCurrentMemberAssignmentValue.TopicPartitions, m.assigned)))


def share_current_assignment_tombstone(group_id: str, member_id: str) -> Rec:
    return record(ShareGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member_id), None)


def share_state_partitions(group_id: str, initialized: Mapping[bytes, tuple[str, Iterable[int]]]) -> Rec:
    """ShareGroupStatePartitionMetadata: the share partitions whose state is initialized."""
    info = ShareGroupStatePartitionMetadataValue.TopicPartitionsInfo
    return record(ShareGroupStatePartitionMetadataKey(group_id=group_id), ShareGroupStatePartitionMetadataValue(
        initializing_topics=[], deleting_topics=[],
        initialized_topics=[info(topic_id=tid, topic_name=name, partitions=sorted(ps))
                            for tid, (name, ps) in sorted(initialized.items())]))


def share_state_partitions_tombstone(group_id: str) -> Rec:
    return record(ShareGroupStatePartitionMetadataKey(group_id=group_id), None)
