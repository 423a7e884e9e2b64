"""What consumer (KIP-848) and share (KIP-932) groups have in common: epochs and the target assignment.

As Kafka's ``ModernGroup`` and ``TargetAssignmentBuilder``: a group has a group epoch
(bumped when membership, subscriptions or the subscribed topics' metadata change,
with a hash of that metadata stored beside it), a target assignment computed by a
server-side assignor when the group epoch is ahead of the assignment epoch, and
members that each carry an epoch and a current assignment.  How a member moves
from its current to its target assignment differs: consumer members revoke first
(:mod:`coordinator.group.reconcile`), share members take their target at once.

Operations never change a committed group: they compute on a :meth:`ModernGroup.copy`
(a draft, to which they apply their own records as they produce them, so later steps
see earlier ones), and the coordinator's runtime replays the same records on the
committed group once they are durable.
"""
from __future__ import annotations

from typing import Callable, Iterable

from coordinator.assignors.base import MemberSpec, TopicSpec

from .base import Group

Parts = dict[bytes, set[int]]


class ModernGroup(Group):
    """Group epoch, metadata hash, assignment epoch, members and target assignment."""

    def __init__(self, group_id: str):
        self.group_id = group_id
        # A new group starts at group epoch 1 with an empty target assignment at epoch 1, as Kafka 4.4
        # (KAFKA-20268): the first subscription bumps it to 2 and the first computed target is epoch 2.
        # A group loaded from __consumer_offsets gets the epochs of its records when they are replayed.
        self.group_epoch = 1
        self.metadata_hash = 0
        self.assignment_epoch = 1
        self.assignment_timestamp = 0  # when the target assignment was last computed (KIP-1263)
        self.members: dict = {}
        self.target: dict[str, Parts] = {}

    def copy(self) -> "ModernGroup":
        """A draft: same values, own containers (members copied), for computing an operation's records."""
        g = object.__new__(type(self))
        g.__dict__.update(self.__dict__)
        g.members = {mid: m.copy() for mid, m in self.members.items()}
        g.target = {mid: {t: set(ps) for t, ps in parts.items()} for mid, parts in self.target.items()}
        return g

    def is_empty(self) -> bool:
        return not self.members

    def member_topic_names(self, member) -> set[str]:
        return set(member.subscribed_topic_names)

    def subscribed_topic_names(self, members: Iterable | None = None) -> set[str]:
        names: set[str] = set()
        for m in (self.members.values() if members is None else members):
            names.update(self.member_topic_names(m))
        return names

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return topic in self.subscribed_topic_names()

    # ------------------------------------------------------------ replay (group-level records)
    def replay_group_epoch(self, value) -> None:
        self.group_epoch = value.epoch
        self.metadata_hash = value.metadata_hash

    def replay_target_epoch(self, value) -> None:
        self.assignment_epoch = -1 if value is None else value.assignment_epoch
        self.assignment_timestamp = 0 if value is None else value.assignment_timestamp

    def replay_target_member(self, member_id: str, value) -> None:
        if value is None:
            self.target.pop(member_id, None)
        else:
            self.target[member_id] = {tp.topic_id: set(tp.partitions) for tp in value.topic_partitions}


def metadata_hash(cluster, names: set[str]) -> int:
    """Hash of the subscribed topics' metadata (name, id, partition count); missing topics do not count."""
    import hashlib  # here: hashlib's set-up (OpenSSL digests) stays out of a broker without consumer groups

    h = hashlib.blake2b(digest_size=8)
    for name in sorted(names):
        tid = cluster.topic_id(name)
        if tid is None:
            continue
        h.update(f"{name}\0{tid.hex()}\0{cluster.partition_count(name)}\n".encode())
    return int.from_bytes(h.digest(), "big", signed=True)


def new_target_assignment(group: ModernGroup, cluster,
                          assign: Callable[[dict[str, MemberSpec], dict[bytes, TopicSpec]], dict]) -> dict[str, Parts]:
    """The members whose target assignment changes, with their new one (Kafka's TargetAssignmentBuilder).

    ``assign(members, topics)`` runs the group's assignor on the assignor input built
    here: every member's subscribed topics that exist, and its current target for
    stickiness.  A member without a target yet always gets one (possibly empty).
    """
    topics: dict[bytes, TopicSpec] = {}
    specs: dict[str, MemberSpec] = {}
    for mid, m in group.members.items():
        ids = set()
        for name in group.member_topic_names(m):
            tid = cluster.topic_id(name)
            count = cluster.partition_count(name) if tid is not None else None
            if tid is None or not count:
                continue
            ids.add(tid)
            topics[tid] = TopicSpec(name=name, num_partitions=count)
        specs[mid] = MemberSpec(subscribed_topic_ids=frozenset(ids), rack_id=m.rack_id,
                                assigned_partitions=group.target.get(mid, {}),
                                instance_id=getattr(m, "instance_id", None))
    result = assign(specs, topics) if specs else {}
    changed: dict[str, Parts] = {}
    for mid in group.members:
        new = {t: set(p) for t, p in result.get(mid, {}).items() if p}
        old = {t: set(p) for t, p in group.target.get(mid, {}).items() if p}
        if new != old or mid not in group.target:
            changed[mid] = new
    return changed
