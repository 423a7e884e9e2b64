"""The consumer-group "lag" assignor: balance partition counts first, then lag.

After the lag-aware assignor proposal (seed 001).  Topic by topic (Kafka Uuid
order), the topic's partitions are taken in decreasing lag (then partition
number) and each goes to the subscriber with, in order of priority:

1. the fewest partitions of this topic (per-topic balance, as range gives),
2. the fewest partitions overall (total balance, as uniform gives),
3. the least total lag assigned so far, over all topics,
4. the smallest member id.

With identical subscriptions this keeps every topic's split and every
member's total within one partition.  With different subscriptions the
per-topic rule can leave totals uneven (a member alone on a big topic), so a
final pass moves partitions along chains of subscribers ("cost-reducing
paths": a member with L partitions hands one to a subscriber of the same
topic, which hands one on, ..., to a member with L - 2 or fewer) until no
chain is left.  Such an assignment has the most even totals possible, so
count balance is never worse than uniform's.  Each hop moves the giver's
least-lagging partition of that topic.

Seed example: one topic, lags 100,000 / 60,000 / 50,000, members C0 and C1.
p0 goes to C0; p1 to C1 (fewer partitions); p2 to C1 (tied counts,
60,000 < 100,000).  Totals: 100,000 and 110,000.

Not sticky: the assignment is recomputed from the lags at every rebalance, so
changing lags move partitions even when membership does not change.

Lag contract: ``lag(topic_id, partition) -> int`` is supplied by the caller
and called once per subscribed partition per assignment.  Computing it is the
caller's job: log end offset minus the group's committed offset; with no
committed offset, 0 under ``auto.offset.reset=latest`` and log end minus log
start otherwise.  Negative values count as 0.  Without ``lag`` every lag is 0
and only counts are balanced.  ``assignable`` and racks are ignored.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Mapping

from .base import (
    AssignablePredicate,
    Assignment,
    LagLookup,
    MemberSpec,
    TopicId,
    TopicSpec,
    add_partition,
    check_subscriptions,
    empty_assignment,
    sorted_topics,
)

Hop = tuple[str, TopicId, str]  # giver, topic, taker


class LagAssignor:
    name = "lag"

    def assign(
        self,
        members: Mapping[str, MemberSpec],
        topics: Mapping[TopicId, TopicSpec],
        *,
        lag: LagLookup | None = None,
        assignable: AssignablePredicate | None = None,
    ) -> Assignment:
        check_subscriptions(members, topics)
        member_ids = sorted(members)
        result = empty_assignment(member_ids)
        subscribers: dict[TopicId, list[str]] = {}
        for member_id in member_ids:
            for topic_id in members[member_id].subscribed_topic_ids:
                subscribers.setdefault(topic_id, []).append(member_id)
        topic_ids = sorted_topics(subscribers)
        lags = {
            (topic_id, p): max(0, int(lag(topic_id, p))) if lag is not None else 0
            for topic_id in topic_ids
            for p in range(topics[topic_id].num_partitions)
        }
        counts = dict.fromkeys(member_ids, 0)
        lag_totals = dict.fromkeys(member_ids, 0)

        for topic_id in topic_ids:
            # Within a topic only the chosen member's key changes, so a heap stays valid.
            heap = [(0, counts[m], lag_totals[m], m) for m in subscribers[topic_id]]
            heapq.heapify(heap)
            for p in sorted(range(topics[topic_id].num_partitions), key=lambda p: (-lags[topic_id, p], p)):
                topic_count, _, _, member_id = heapq.heappop(heap)
                add_partition(result, member_id, topic_id, p)
                counts[member_id] += 1
                lag_totals[member_id] += lags[topic_id, p]
                heapq.heappush(heap, (topic_count + 1, counts[member_id], lag_totals[member_id], member_id))

        topic_rank = {topic_id: i for i, topic_id in enumerate(topic_ids)}
        while (path := _cost_reducing_path(result, counts, subscribers, topic_rank)) is not None:
            for giver, topic_id, taker in path:
                held = result[giver][topic_id]
                p = min(held, key=lambda p: (lags[topic_id, p], -p))
                held.discard(p)
                if not held:
                    del result[giver][topic_id]
                add_partition(result, taker, topic_id, p)
            counts[path[0][0]] -= 1
            counts[path[-1][2]] += 1
        return result


def _cost_reducing_path(
    result: Assignment,
    counts: Mapping[str, int],
    subscribers: Mapping[TopicId, list[str]],
    topic_rank: Mapping[TopicId, int],
) -> list[Hop] | None:
    """Shortest chain from a member with L partitions to one with at most L - 2, or None.

    Breadth-first from the most loaded members: member u reaches member v when
    u holds a partition of a topic v subscribes to.
    """
    if not counts:
        return None
    lowest = min(counts.values())
    for source in sorted(counts, key=lambda m: (-counts[m], m)):
        if counts[source] - lowest < 2:
            return None
        came_from: dict[str, Hop | None] = {source: None}
        queue = deque([source])
        while queue:
            giver = queue.popleft()
            for topic_id in sorted(result[giver], key=topic_rank.__getitem__):
                for taker in subscribers[topic_id]:
                    if taker in came_from:
                        continue
                    came_from[taker] = (giver, topic_id, taker)
                    if counts[taker] <= counts[source] - 2:
                        path = []
                        hop = came_from[taker]
                        while hop is not None:
                            path.append(hop)
                            hop = came_from[hop[0]]
                        return path[::-1]
                    queue.append(taker)
    return None
