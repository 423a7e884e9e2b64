"""Input model and shared helpers for the server-side partition assignors.

Every assignor is a stateless object with a ``name`` and one method::

    assign(members, topics, *, lag=None, assignable=None) -> Assignment

``members`` maps member id -> :class:`MemberSpec`, ``topics`` maps topic id
(16 raw bytes) -> :class:`TopicSpec`.  The result maps *every* member id to
``{topic_id: {partition, ...}}``; a member with nothing gets ``{}`` and empty
partition sets are never returned.  Inputs are never mutated.

The keyword hooks are optional and each assignor documents which it uses:
``lag(topic_id, partition) -> int`` (the "lag" assignor) and
``assignable(topic_id, partition) -> bool`` (the share-group "simple" assignor;
Kafka only assigns share partitions whose share state is initialized).

Results depend only on the content of the inputs: members are numbered in
member-id order and topics in Kafka's ``Uuid.compareTo`` order (see
:func:`topic_order_key`), so iteration order of the input dicts never matters.
Kafka iterates hash maps at those points; where a Kafka builder's result
depends on hash order, we use these orders instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Set
from dataclasses import dataclass, field
from typing import Protocol

TopicId = bytes
Assignment = dict[str, dict[TopicId, set[int]]]
LagLookup = Callable[[TopicId, int], int]
AssignablePredicate = Callable[[TopicId, int], bool]


class PartitionAssignorError(Exception):
    """The assignor cannot compute an assignment (Kafka's PartitionAssignorException)."""


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """What an assignor knows about one member."""

    subscribed_topic_ids: Set[TopicId]
    rack_id: str | None = None
    # The member's current (target) assignment, used for stickiness.
    assigned_partitions: Mapping[TopicId, Set[int]] = field(default_factory=dict)
    # Static membership (group.instance.id); only the range assignor uses it.
    instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class TopicSpec:
    name: str
    num_partitions: int


class Assignor(Protocol):
    name: str

    def assign(
        self,
        members: Mapping[str, MemberSpec],
        topics: Mapping[TopicId, TopicSpec],
        *,
        lag: LagLookup | None = None,
        assignable: AssignablePredicate | None = None,
    ) -> Assignment: ...


def topic_order_key(topic_id: TopicId) -> tuple[int, int]:
    """Sort key matching Kafka's ``Uuid.compareTo``: signed high 64 bits, then signed low 64 bits."""
    return (
        int.from_bytes(topic_id[:8], "big", signed=True),
        int.from_bytes(topic_id[8:], "big", signed=True),
    )


def sorted_topics(topic_ids: Iterable[TopicId]) -> list[TopicId]:
    return sorted(topic_ids, key=topic_order_key)


def check_subscriptions(members: Mapping[str, MemberSpec], topics: Mapping[TopicId, TopicSpec]) -> None:
    """Raise like Kafka when a member subscribes to a topic missing from the metadata."""
    for member_id, spec in members.items():
        for topic_id in spec.subscribed_topic_ids:
            if topic_id not in topics:
                raise PartitionAssignorError(
                    f"member {member_id} is subscribed to topic {topic_id.hex()} "
                    "which doesn't exist in the topic metadata"
                )


def is_homogeneous(members: Mapping[str, MemberSpec]) -> bool:
    """True when every member subscribes to the same topic set (Kafka's SubscriptionType.HOMOGENEOUS)."""
    subscriptions = {frozenset(spec.subscribed_topic_ids) for spec in members.values()}
    return len(subscriptions) <= 1


def owned_partitions(spec: MemberSpec, topic_id: TopicId, num_partitions: int) -> list[int]:
    """The member's current partitions of ``topic_id`` that still exist, ascending."""
    return sorted(p for p in spec.assigned_partitions.get(topic_id, ()) if 0 <= p < num_partitions)


def empty_assignment(member_ids: Iterable[str]) -> Assignment:
    return {member_id: {} for member_id in member_ids}


def add_partition(assignment: Assignment, member_id: str, topic_id: TopicId, partition: int) -> None:
    assignment[member_id].setdefault(topic_id, set()).add(partition)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


TopicPartition = tuple[TopicId, int]
Pool = tuple[list[TopicPartition], list[str], dict[str, list[TopicPartition]]]


def share_pools(
    members: Mapping[str, MemberSpec],
    topics: Mapping[TopicId, TopicSpec],
    assignable: AssignablePredicate | None,
) -> list[Pool]:
    """The pools a share assignor shares out: (partitions, subscribers, each subscriber's current ones).

    Homogeneous groups form one pool of every subscribed partition; otherwise each topic is a pool
    shared by its subscribers.  Partitions are in topic order then partition order, subscribers in
    member-id order; only assignable partitions that exist count, current ones in pool order.
    """
    member_ids = sorted(members)
    if not member_ids:
        return []
    if is_homogeneous(members):
        layout = [(sorted_topics(members[member_ids[0]].subscribed_topic_ids), member_ids)]
    else:
        all_topics = sorted_topics(set().union(*(m.subscribed_topic_ids for m in members.values())))
        layout = [([topic_id], [m for m in member_ids if topic_id in members[m].subscribed_topic_ids])
                  for topic_id in all_topics]
    pools: list[Pool] = []
    for pool_topics, subscribers in layout:
        targets = [(topic_id, partition) for topic_id in pool_topics
                   for partition in range(topics[topic_id].num_partitions)
                   if assignable is None or assignable(topic_id, partition)]
        target_set = set(targets)
        held = {member_id: [(topic_id, partition) for topic_id in pool_topics
                            for partition in owned_partitions(members[member_id], topic_id,
                                                              topics[topic_id].num_partitions)
                            if (topic_id, partition) in target_set]
                for member_id in subscribers}
        pools.append((targets, subscribers, held))
    return pools


def share_assignment(
    members: Mapping[str, MemberSpec],
    topics: Mapping[TopicId, TopicSpec],
    assignable: AssignablePredicate | None,
    place: Callable[[list[TopicPartition], list[str], dict[str, list[TopicPartition]]],
                    Mapping[str, Iterable[TopicPartition]]],
) -> Assignment:
    """A share assignor's result: ``place(partitions, subscribers, held)`` run on every pool."""
    check_subscriptions(members, topics)
    result = empty_assignment(sorted(members))
    for targets, subscribers, held in share_pools(members, topics, assignable):
        for member_id, partitions in place(targets, subscribers, held).items():
            for topic_id, partition in partitions:
                add_partition(result, member_id, topic_id, partition)
    return result
