"""The consumer-group "uniform" assignor (KIP-848 default), as Kafka 4.4 builds it.

Balance first, stickiness second.  Two algorithms, chosen like Kafka's
UniformAssignor:

Homogeneous (every member subscribes to the same topics; Kafka's
UniformHomogeneousAssignmentBuilder).  All subscribed partitions form one
list; with T partitions and M members everyone gets ``T // M`` and ``T % M``
members get one more.  Walking members in order, each keeps its current
partitions up to ``quota + 1`` while extra slots remain (``quota`` otherwise);
a member that keeps exactly ``quota + 1`` claims an extra slot, so an already
balanced assignment never moves.  Revoked and never-owned partitions then go,
in order, to the members still short; unclaimed extra slots go to the *last*
such members.

Heterogeneous (Kafka's UniformHeterogeneousAssignmentBuilder).  Members keep
every current partition of a topic they still subscribe to.  Unowned
partitions go, topic by topic (most partitions per subscriber first, then
fewest subscribers, then topic id), to the least-loaded subscriber (fewest
partitions in total, then member order).  Finally, for up to 16 rounds over
the topics with two or more subscribers, partitions move from the most- to
the least-loaded subscribers of each topic until their totals differ by at
most one.  With overlapping subscriptions the result can be one partition
short of perfectly balanced, as in Kafka.

Members are numbered in member-id order and topics in Kafka Uuid order where
Kafka iterates hash maps.  Current partitions that no longer exist or whose
topic the member left are dropped; a partition currently owned by two members
stays with the first.  Racks are not used: Kafka only goes rack-aware when
partitions have replicas on different rack sets, which a single broker never
has.  ``lag`` and ``assignable`` are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

from .base import (
    AssignablePredicate,
    Assignment,
    LagLookup,
    MemberSpec,
    PartitionAssignorError,
    TopicId,
    TopicSpec,
    add_partition,
    check_subscriptions,
    empty_assignment,
    is_homogeneous,
    owned_partitions,
    sorted_topics,
    topic_order_key,
)

MAX_BALANCE_ROUNDS = 16


class UniformAssignor:
    name = "uniform"

    def assign(
        self,
        members: Mapping[str, MemberSpec],
        topics: Mapping[TopicId, TopicSpec],
        *,
        lag: LagLookup | None = None,
        assignable: AssignablePredicate | None = None,
    ) -> Assignment:
        check_subscriptions(members, topics)
        if not members:
            return {}
        if is_homogeneous(members):
            return _assign_homogeneous(members, topics)
        return _HeterogeneousBuilder(members, topics).build()


def _assign_homogeneous(members: Mapping[str, MemberSpec], topics: Mapping[TopicId, TopicSpec]) -> Assignment:
    member_ids = sorted(members)
    result = empty_assignment(member_ids)
    topic_ids = sorted_topics(members[member_ids[0]].subscribed_topic_ids)

    # Current owners; a partition claimed twice stays with the first member.
    owned: dict[str, dict[TopicId, list[int]]] = {}
    claimed: set[tuple[TopicId, int]] = set()
    for member_id in member_ids:
        owned[member_id] = {}
        for topic_id in topic_ids:
            mine = [
                p for p in owned_partitions(members[member_id], topic_id, topics[topic_id].num_partitions)
                if (topic_id, p) not in claimed
            ]
            claimed.update((topic_id, p) for p in mine)
            if mine:
                owned[member_id][topic_id] = mine

    unassigned = [
        (topic_id, p)
        for topic_id in topic_ids
        for p in range(topics[topic_id].num_partitions)
        if (topic_id, p) not in claimed
    ]
    total = sum(topics[topic_id].num_partitions for topic_id in topic_ids)
    min_quota, extra_slots = divmod(total, len(member_ids))

    unfilled: list[list] = []  # [member_id, remaining quota]
    for member_id in member_ids:
        quota, has_extra = min_quota, False
        if extra_slots > 0:
            quota, has_extra = quota + 1, True
        for topic_id, partitions in owned[member_id].items():
            keep = min(quota, len(partitions))
            for p in partitions[:keep]:
                add_partition(result, member_id, topic_id, p)
            unassigned.extend((topic_id, p) for p in partitions[keep:])
            quota -= keep
        if quota > 0 and has_extra:
            quota, has_extra = quota - 1, False  # could not fill an extra slot: leave it to others
        if quota == 0 and has_extra:
            extra_slots -= 1
        if quota > 0 or (extra_slots > 0 and not has_extra):
            unfilled.append([member_id, quota])

    for entry in reversed(unfilled):  # the last unfilled members take the unclaimed extra slots
        if extra_slots > 0:
            extra_slots -= 1
            entry[1] += 1

    position = 0
    for member_id, quota in unfilled:
        for topic_id, p in unassigned[position:position + quota]:
            add_partition(result, member_id, topic_id, p)
        position += min(quota, len(unassigned) - position)
    if position < len(unassigned):
        raise PartitionAssignorError("Partitions were left unassigned")
    return result


class _Balancer:
    """Kafka's MemberAssignmentBalancer: hands out least-loaded and most-loaded subscribers of one topic.

    Subscribers are sorted by (size, number).  A least-loaded range grows
    rightwards one level at a time and is served round robin; a most-loaded
    range grows leftwards and is drained round robin from its right end.
    """

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes
        self.order: list[int] = []

    def initialize(self, subscribers: list[int]) -> int:
        sizes = self.sizes
        self.order = sorted(subscribers, key=lambda m: (sizes[m], m))
        n = len(self.order)
        self.least_end, self.least_level, self.next_least = 0, sizes[self.order[0]] - 1, 0
        self.most_start, self.most_end = n, n
        self.most_level, self.next_most = sizes[self.order[-1]] + 1, n - 1
        return sizes[self.order[-1]] - sizes[self.order[0]]

    def next_least_loaded(self) -> int:
        order, sizes = self.order, self.sizes
        if self.next_least >= self.least_end:
            self.least_level += 1
            while self.least_end < len(order) and sizes[order[self.least_end]] == self.least_level:
                self.least_end += 1
            self.next_least = 0
        member = order[self.next_least]
        self.next_least += 1
        return member

    def next_most_loaded(self) -> int:
        order, sizes = self.order, self.sizes
        if self.next_most < self.most_start:
            if self.most_end <= self.most_start and self.most_start > 0:
                # The range was emptied by exclusions: restart from the next member down.
                self.most_level = sizes[order[self.most_start - 1]]
            else:
                self.most_level -= 1
            while self.most_start > 0 and sizes[order[self.most_start - 1]] == self.most_level:
                self.most_start -= 1
            self.next_most = self.most_end - 1
        if self.next_most < 0:
            return -1
        member = order[self.next_most]
        self.next_most -= 1
        return member

    def exclude_most_loaded(self) -> None:
        """Drop the member last returned by next_most_loaded (it has nothing of this topic to give)."""
        order, i = self.order, self.next_most + 1
        order[i], order[self.most_end - 1] = order[self.most_end - 1], order[i]
        self.most_end -= 1

    def is_balanced(self) -> bool:
        return self.most_level - self.least_level <= 1


class _HeterogeneousBuilder:
    def __init__(self, members: Mapping[str, MemberSpec], topics: Mapping[TopicId, TopicSpec]) -> None:
        self.member_ids = sorted(members)
        self.topics = topics
        self.subscribers: dict[TopicId, list[int]] = {}
        for index, member_id in enumerate(self.member_ids):
            for topic_id in members[member_id].subscribed_topic_ids:
                self.subscribers.setdefault(topic_id, []).append(index)
        self.sizes = [0] * len(self.member_ids)
        self.owners = {t: [-1] * topics[t].num_partitions for t in self.subscribers}
        self.result = empty_assignment(self.member_ids)
        for index, member_id in enumerate(self.member_ids):
            spec = members[member_id]
            for topic_id in sorted_topics(spec.assigned_partitions):
                if topic_id not in spec.subscribed_topic_ids:
                    continue  # revoked: the member left the topic
                for p in owned_partitions(spec, topic_id, topics[topic_id].num_partitions):
                    if self.owners[topic_id][p] == -1:
                        self._move(topic_id, p, index)

    def _topic_key(self, topic_id: TopicId) -> tuple:
        subscribers = len(self.subscribers[topic_id])
        per_subscriber = Fraction(self.topics[topic_id].num_partitions, subscribers)
        return (-per_subscriber, subscribers, topic_order_key(topic_id))

    def _move(self, topic_id: TopicId, partition: int, member: int) -> None:
        owners = self.owners[topic_id]
        old = owners[partition]
        if old != -1:
            old_partitions = self.result[self.member_ids[old]][topic_id]
            old_partitions.discard(partition)
            if not old_partitions:
                del self.result[self.member_ids[old]][topic_id]
            self.sizes[old] -= 1
        add_partition(self.result, self.member_ids[member], topic_id, partition)
        owners[partition] = member
        self.sizes[member] += 1

    def build(self) -> Assignment:
        unassigned = {
            topic_id: [p for p, owner in enumerate(owners) if owner == -1]
            for topic_id, owners in self.owners.items()
        }
        balancer = _Balancer(self.sizes)
        for topic_id in sorted((t for t, ps in unassigned.items() if ps), key=self._topic_key):
            balancer.initialize(self.subscribers[topic_id])
            for p in unassigned[topic_id]:
                self._move(topic_id, p, balancer.next_least_loaded())

        movable = sorted((t for t, subs in self.subscribers.items() if len(subs) >= 2), key=self._topic_key)
        last_changed = -1
        for _ in range(MAX_BALANCE_ROUNDS):
            for index, topic_id in enumerate(movable):
                if index == last_changed:
                    return self.result  # a full lap without moves
                if self._balance_topic(topic_id, balancer) > 0 or last_changed == -1:
                    last_changed = index
        return self.result

    def _balance_topic(self, topic_id: TopicId, balancer: _Balancer) -> int:
        if balancer.initialize(self.subscribers[topic_id]) <= 1:
            return 0
        owners = self.owners[topic_id]
        # Partitions grouped by owner; each owner gives away from the end of its run.
        partitions = sorted(range(len(owners)), key=lambda p: (owners[p], p))
        start: dict[int, int] = {}
        end: dict[int, int] = {}
        for i, p in enumerate(partitions):
            start.setdefault(owners[p], i)
            end[owners[p]] = i + 1

        moved = 0
        while not balancer.is_balanced():
            donor = balancer.next_most_loaded()
            while donor != -1 and end.get(donor, 0) - start.get(donor, 0) <= 0:
                balancer.exclude_most_loaded()
                donor = balancer.next_most_loaded()
            if donor == -1:
                break
            end[donor] -= 1
            partition = partitions[end[donor]]
            receiver = balancer.next_least_loaded()
            if balancer.is_balanced():
                break
            self._move(topic_id, partition, receiver)
            moved += 1
        return moved
