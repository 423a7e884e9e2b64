"""The share-group "simple" assignor, as Apache Kafka 4.4 implements it.

KIP-932 describes a hash-based SimpleAssignor (hash member ids onto
partitions, round-robin the partitions nobody hashed to, drop round-robin
members where hashing now lands).  Kafka shipped that in 4.0 and replaced it in
4.1 (KAFKA-19362 / KAFKA-19363) with a balanced, sticky builder that does no
hashing at all; 4.4 runs the replacement, and so do we.  See README.md for why
the KIP's worked example cannot be reproduced by it.

Rules, for a pool of P partitions shared by M members:

* ``sharing = ceil(M / P)`` members per partition: every partition gets at
  least one member, and several when members outnumber partitions.
* Member number j (0-based, member-id order) wants
  ``ceil(S*P*(j+1)/M) - ceil(S*P*j/M)`` partitions, S being ``sharing``: sizes
  differ by at most one and earlier members take the larger share.
* Then, in this order: keep each member's current partitions, dropping the
  first ones beyond its wanted count; take members off partitions held by more
  than ``sharing`` members (lowest member first); finally walk the partitions
  once and give each one short of ``sharing`` members to the unfilled members
  in turn (a cursor that carries over from one partition to the next), never
  twice to the same member.

Homogeneous groups (every member subscribes to the same topics) form one pool
of all subscribed partitions.  Otherwise each topic is its own pool shared by
its subscribers, so balance holds per topic rather than overall.

Differences from Kafka, all deliberate:

* Kafka walks hash maps and hash sets at the "first ones" / "lowest member" /
  "walk the partitions" points; we use topic order then partition order and
  member-id order, so results are deterministic.
* Wanted counts use exact integer arithmetic; Kafka's doubles sometimes round
  the total one above S*P (e.g. M=7, P=29), making the last member want one
  partition it can never get.
* Current partitions that no longer exist, are not assignable, or belong to a
  topic the member no longer subscribes to are dropped.  (Kafka's
  heterogeneous builder keeps partitions of a topic nobody subscribes to.)

Hooks: ``assignable(topic_id, partition)`` limits the pool (Kafka assigns only
share partitions whose state is initialized); ``lag`` is ignored.  Racks are
not used, as in KIP-932.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .base import AssignablePredicate, Assignment, LagLookup, MemberSpec, TopicId, TopicPartition, TopicSpec, ceil_div
from .base import share_assignment


class SimpleAssignor:
    name = "simple"

    def assign(
        self,
        members: Mapping[str, MemberSpec],
        topics: Mapping[TopicId, TopicSpec],
        *,
        lag: LagLookup | None = None,
        assignable: AssignablePredicate | None = None,
    ) -> Assignment:
        return share_assignment(members, topics, assignable, share_out)


def share_out(
    targets: Sequence[TopicPartition],
    subscribers: Sequence[str],
    held: Mapping[str, Sequence[TopicPartition]],
) -> dict[str, list[TopicPartition]]:
    """Share one pool of partitions among its subscribers (Kafka's simple builder steps).

    ``targets`` is the pool in walking order, ``subscribers`` the members in
    numbering order, ``held`` each member's current partitions of the pool in
    ``targets`` order.  Returns each subscriber's partitions.
    """
    num_partitions, num_members = len(targets), len(subscribers)
    if not num_partitions or not num_members:
        return {member_id: [] for member_id in subscribers}

    sharing = ceil_div(num_members, num_partitions)
    total = sharing * num_partitions
    wanted = {
        member_id: ceil_div(total * (j + 1), num_members) - ceil_div(total * j, num_members)
        for j, member_id in enumerate(subscribers)
    }

    # Keep current partitions, dropping the first ones beyond the wanted count.
    owned: dict[str, list[TopicPartition]] = {}
    holders: dict[TopicPartition, list[str]] = {tp: [] for tp in targets}
    for member_id in subscribers:
        mine = list(held.get(member_id, ()))
        owned[member_id] = mine[max(0, len(mine) - wanted[member_id]):]
        for tp in owned[member_id]:
            holders[tp].append(member_id)

    # Take the lowest members off over-shared partitions.
    for tp in targets:
        members_of_tp = holders[tp]
        while len(members_of_tp) > sharing:
            owned[members_of_tp.pop(0)].remove(tp)

    # Fill under-shared partitions from the unfilled members, round robin.
    unfilled = [m for m in subscribers if len(owned[m]) < wanted[m]]
    cursor, progressed = 0, False
    for tp in targets:
        if not unfilled:
            break
        members_of_tp = holders[tp]
        need = sharing - len(members_of_tp)
        while need > 0:
            if cursor >= len(unfilled):
                if not progressed:
                    break  # nobody left who can take this partition
                cursor, progressed = 0, False
                continue
            member_id = unfilled[cursor]
            if member_id in members_of_tp:
                cursor += 1
                continue
            owned[member_id].append(tp)
            members_of_tp.append(member_id)
            need -= 1
            progressed = True
            if len(owned[member_id]) >= wanted[member_id]:
                unfilled.pop(cursor)
            else:
                cursor += 1
    return owned
