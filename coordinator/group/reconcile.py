"""Member reconciliation for KIP-848 consumer groups (Kafka's CurrentAssignmentBuilder).

A member moves towards the group's target assignment epoch by epoch, revoking
before assigning: partitions it must give up go to ``pending_revocation`` and the
member keeps its epoch (state UNREVOKED_PARTITIONS) until a heartbeat's owned
partitions no longer include them; only then does it take the target epoch and
the new partitions, except partitions another member still owns (their
partition epoch is set), which wait (state UNRELEASED_PARTITIONS).

Assignments are ``{topic_id: set(partitions)}``; Kafka 4.4's per-partition
assignment epochs are not tracked.
"""
from __future__ import annotations

from typing import Callable

STABLE = 0
UNREVOKED_PARTITIONS = 1
UNRELEASED_PARTITIONS = 2
UNKNOWN = 127

STATE_NAMES = {STABLE: "stable", UNREVOKED_PARTITIONS: "unrevoked_partitions",
               UNRELEASED_PARTITIONS: "unreleased_partitions", UNKNOWN: "unknown"}

Assignment = dict[bytes, set[int]]


class FencedMember(Exception):
    """The member is in a state it cannot reconcile from: it must rejoin (FENCED_MEMBER_EPOCH)."""


def owns_any(owned: list | None, assignment: Assignment) -> bool:
    """Whether the owned partitions reported in the heartbeat include any of ``assignment``.

    ``owned`` None (the heartbeat did not report them) counts as still owning.
    """
    if owned is None:
        return True
    for tp in owned:
        parts = assignment.get(tp.topic_id)
        if parts and any(p in parts for p in tp.partitions):
            return True
    return False


def reconcile(member, target_epoch: int, target: Assignment, subscribed_topic_ids: set[bytes],
              partition_epoch: Callable[[bytes, int], int], owned: list | None):
    """Return ``(epoch, previous_epoch, state, assigned, pending_revocation)`` for the member's next step.

    Returns None when the member stays as it is.
    """
    state = member.state
    if state == STABLE:
        if member.member_epoch == target_epoch:
            return None
        return _next(member, member.member_epoch, target_epoch, target, subscribed_topic_ids, partition_epoch, owned)
    if state == UNREVOKED_PARTITIONS:
        if owns_any(owned, member.pending_revocation):
            return None
        return _next(member, member.member_epoch, target_epoch, target, subscribed_topic_ids, partition_epoch, owned)
    if state == UNRELEASED_PARTITIONS:
        return _next(member, member.member_epoch, target_epoch, target, subscribed_topic_ids, partition_epoch, owned)
    if owned is None or owned:
        raise FencedMember()
    return _next(member, target_epoch, target_epoch, target, subscribed_topic_ids, partition_epoch, owned)


def _next(member, member_epoch: int, target_epoch: int, target: Assignment, subscribed: set[bytes],
          partition_epoch, owned):
    has_unreleased = False
    new_assigned: Assignment = {}
    new_revoking: Assignment = {}
    new_pending: Assignment = {}
    own_revoking = member.pending_revocation
    for topic_id in set(target) | set(member.assigned):
        wanted = target.get(topic_id, set()) if topic_id in subscribed else set()
        current = member.assigned.get(topic_id, set())
        assigned = current & wanted
        revoking = current - assigned
        pending = wanted - assigned
        blocked = {p for p in pending
                   if partition_epoch(topic_id, p) != -1 and p not in own_revoking.get(topic_id, ())}
        if blocked:
            has_unreleased = True
            pending -= blocked
        if assigned:
            new_assigned[topic_id] = assigned
        if revoking:
            new_revoking[topic_id] = revoking
        if pending:
            new_pending[topic_id] = pending
    if new_revoking and owns_any(owned, new_revoking):
        return (member_epoch, member.member_epoch, UNREVOKED_PARTITIONS, new_assigned, new_revoking)
    for topic_id, parts in new_pending.items():
        new_assigned.setdefault(topic_id, set()).update(parts)
    state = UNRELEASED_PARTITIONS if has_unreleased else STABLE
    return (target_epoch, member.member_epoch, state, new_assigned, {})
