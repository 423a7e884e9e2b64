"""The consumer-group "range" assignor, as Kafka 4.4 builds it server-side.

Per topic, the subscribers are put in order (static members first, by
``group.instance.id``; then dynamic members, by member id) and take contiguous
ranges: with P partitions and N subscribers, the first ``P % N`` take
``P // N + 1`` partitions and the rest ``P // N``.  When every member
subscribes to the same topics and the topics have equal partition counts, each
member gets the same partition numbers from every topic (co-partitioning,
what joins need).

Like Kafka's server-side RangeAssignor, this ignores the current assignment:
it is sticky only through static membership, since a restarted static member
keeps its instance id and so its place in the order.  Members joining or
leaving shift the ranges of everyone after them.  Racks are not used (Kafka
goes rack-aware only when partitions have replicas on different rack sets,
which a single broker never has).  ``lag`` and ``assignable`` are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping

from .base import (
    AssignablePredicate,
    Assignment,
    LagLookup,
    MemberSpec,
    TopicId,
    TopicSpec,
    check_subscriptions,
    empty_assignment,
    sorted_topics,
)


class RangeAssignor:
    name = "range"

    def assign(
        self,
        members: Mapping[str, MemberSpec],
        topics: Mapping[TopicId, TopicSpec],
        *,
        lag: LagLookup | None = None,
        assignable: AssignablePredicate | None = None,
    ) -> Assignment:
        check_subscriptions(members, topics)
        order = sorted(
            members,
            key=lambda m: (0, members[m].instance_id, m) if members[m].instance_id is not None else (1, "", m),
        )
        result = empty_assignment(order)
        all_topics = set().union(*(spec.subscribed_topic_ids for spec in members.values()))
        for topic_id in sorted_topics(all_topics):
            subscribers = [m for m in order if topic_id in members[m].subscribed_topic_ids]
            quota, extra = divmod(topics[topic_id].num_partitions, len(subscribers))
            start = 0
            for i, member_id in enumerate(subscribers):
                size = quota + (i < extra)
                if size:
                    result[member_id][topic_id] = set(range(start, start + size))
                start += size
        return result
