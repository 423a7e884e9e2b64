"""What every group in the coordinator's single namespace offers, whatever its type.

Classic groups, consumer (KIP-848) groups and share (KIP-932) groups live in one
``dict[group_id, Group]`` owned by :class:`~coordinator.group.coordinator.GroupCoordinator`.
Cross-type operations (ListGroups, DescribeGroups, DeleteGroups, OffsetCommit/Fetch,
offset expiration) only use this interface; consumer and share groups share more
(:class:`~coordinator.group.modern.ModernGroup`).
"""
from __future__ import annotations

from typing import Callable

from protocol.errors import Errors, KafkaError


class OffsetAndMetadata:
    """One committed offset as the coordinator keeps it (``expire_ts`` only for explicit retention)."""

    __slots__ = ("offset", "leader_epoch", "metadata", "commit_ts", "expire_ts", "topic_id")

    def __init__(self, offset: int, leader_epoch: int, metadata: str, commit_ts: int,
                 expire_ts: int | None, topic_id: bytes | None = None):
        self.offset = offset
        self.leader_epoch = leader_epoch
        self.metadata = metadata
        self.commit_ts = commit_ts
        self.expire_ts = expire_ts
        self.topic_id = topic_id

    def __repr__(self) -> str:
        return (f"OffsetAndMetadata({self.offset}, epoch={self.leader_epoch}, commit={self.commit_ts}, "
                f"expire={self.expire_ts})")


ExpirationBase = Callable[[OffsetAndMetadata], int]


class Group:
    GROUP_TYPE = "?"

    group_id: str

    def state_name(self) -> str:
        raise NotImplementedError

    def protocol_type_name(self) -> str:
        """The ListGroups ProtocolType ("" for a standalone offsets-only group)."""
        raise NotImplementedError

    def is_empty(self) -> bool:
        raise NotImplementedError

    def validate_delete(self) -> None:
        """Raise KafkaError when DeleteGroups must refuse the group."""
        if not self.is_empty():
            raise KafkaError(Errors.NON_EMPTY_GROUP)

    def tombstones(self) -> list:
        """Records deleting the group's own metadata (offsets are tombstoned separately)."""
        raise NotImplementedError

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return False

    def offset_expiration_base(self) -> ExpirationBase | None:
        """Kafka's OffsetExpirationCondition: the retention start of an offset, or None: never expire."""
        return None

    def has_offsets(self) -> bool:
        """Whether offsets of this group live in ``__consumer_offsets`` (False for share groups)."""
        return True


def describe_refusal(group_id: str, group: Group | None, kind: type, kind_name: str) -> tuple[int, str] | None:
    """Why ConsumerGroupDescribe / StreamsGroupDescribe cannot describe ``group_id`` (``group`` is what
    the coordinator holds under it, ``kind`` the group class the API describes), as Kafka's
    GroupMetadataManager answers: (error code, message), or None when it can."""
    if not group_id:
        return Errors.INVALID_GROUP_ID, "GroupId can't be empty."
    if group is None:
        return Errors.GROUP_ID_NOT_FOUND, f"Group {group_id} not found."
    if not isinstance(group, kind):
        return Errors.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a {kind_name} group."
    return None


class MemberEpochOffsets:
    """Offset commits and fetches of a group whose members carry epochs (consumer and streams groups), as
    Kafka's ``ConsumerGroup`` / ``StreamsGroup.validateOffsetCommit/Fetch``: without members anyone may commit
    with a negative epoch; otherwise the member must exist, commit with OffsetCommit v9+ and send its epoch
    (``older_epoch_allowed`` may accept an older one)."""

    members: dict

    def older_epoch_allowed(self, member, epoch: int) -> bool:
        return False

    def offset_expiration_base(self) -> ExpirationBase | None:
        return lambda om: om.commit_ts

    def validate_offset_commit(self, member_id: str, instance_id, epoch: int, version: int) -> None:
        if epoch < 0 and not self.members:
            return
        member = self.members.get(member_id)
        if member is None:
            raise KafkaError(Errors.UNKNOWN_MEMBER_ID)
        if version < 9:
            raise KafkaError(Errors.UNSUPPORTED_VERSION)
        if epoch != member.member_epoch and not (epoch < member.member_epoch
                                                 and self.older_epoch_allowed(member, epoch)):
            raise KafkaError(Errors.STALE_MEMBER_EPOCH)

    def validate_offset_fetch(self, member_id, member_epoch: int) -> None:
        if member_id is None and member_epoch < 0:
            return
        member = self.members.get(member_id)
        if member is None:
            raise KafkaError(Errors.UNKNOWN_MEMBER_ID)
        if member_epoch != member.member_epoch:
            raise KafkaError(Errors.STALE_MEMBER_EPOCH)

    def validate_offset_delete(self) -> None:
        return None


class Write:
    """Records to persist (already applied in memory, or classic-only state), then ``done(exc)``.

    ``done`` runs after the append succeeded (``exc`` None) or failed, and may
    return further writes (e.g. a failed SyncGroup store starts a rebalance).
    """

    __slots__ = ("records", "done")

    def __init__(self, records: list, done: Callable[[BaseException | None], list | None] | None = None):
        self.records = records
        self.done = done
