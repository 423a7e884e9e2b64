"""KIP-1071 streams groups: the group, its members and their reconciliation (Kafka 4.4's ``streams`` package).

A streams group is a Kafka Streams application (``application.id``): each member is one
stream thread (``process_id`` names its instance), the group holds the application's
topology (StreamsGroupTopology record, set by the first member that joins), and the
coordinator assigns **tasks** (``subtopology id``, ``partition``) - active, standby and
warm-up - instead of partitions.  The manager (:mod:`coordinator.group.streams_manager`)
runs the heartbeat; this module holds the state and its replay:

* ``StreamsGroup``: group epoch, metadata hash (of every topic the topology names),
  validated topology epoch (the topology epoch whose topics were last found ready; the
  group is NotReady while it differs from the topology's), assignment epoch, the target
  assignment per member and the members; states Empty / NotReady / Assigning /
  Reconciling / Stable as Kafka's ``StreamsGroup.maybeUpdateGroupState``;
* ``reconcile``: Kafka's streams ``CurrentAssignmentBuilder`` - a member revokes tasks it
  must give up first (state UNREVOKED_TASKS, epoch unchanged) until its heartbeat no longer
  reports them, and only then takes the target epoch and the new tasks, except tasks still
  held elsewhere, which wait (UNRELEASED_TASKS): an active task while any member still owns it
  as active, a standby or warm-up task while another member of the same process holds it.  An
  active task that becomes a standby of the same member, and standby <-> warm-up role changes,
  are granted at once; a standby promoted to active stays a standby until the active is granted.

Per-task assignment epochs (Kafka 4.4's ``TasksTupleWithEpochs``) are not kept: an offset
commit with an older member epoch is accepted only for the member's previous epoch (the
epoch it had before its last reconciliation step), which is when Kafka's per-partition check
can pass for tasks the member still owns.
"""
from __future__ import annotations


from . import streams_records as SR
from .base import Group, MemberEpochOffsets
from .streams_records import TasksTuple

STABLE = 0
UNREVOKED_TASKS = 1
UNRELEASED_TASKS = 2
UNKNOWN = 127
STATE_NAMES = {STABLE: "stable", UNREVOKED_TASKS: "unrevoked_tasks", UNRELEASED_TASKS: "unreleased_tasks",
               UNKNOWN: "unknown"}
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

# record types (GROUP_COORDINATOR_RECORDS)
METADATA, MEMBER, TARGET_EPOCH, TARGET_MEMBER, CURRENT, TOPOLOGY = 17, 19, 20, 21, 22, 23
STREAMS_RECORD_TYPES = frozenset({METADATA, MEMBER, TARGET_EPOCH, TARGET_MEMBER, CURRENT, TOPOLOGY})


class StreamsMember:
    __slots__ = ("member_id", "instance_id", "rack_id", "client_id", "client_host", "rebalance_timeout_ms",
                 "topology_epoch", "process_id", "user_endpoint", "client_tags", "member_epoch",
                 "previous_member_epoch", "state", "assigned", "pending")

    def __init__(self, member_id: str):
        self.member_id = member_id
        self.instance_id: str | None = None
        self.rack_id: str | None = None
        self.client_id = ""
        self.client_host = ""
        self.rebalance_timeout_ms = -1
        self.topology_epoch = -1
        self.process_id = ""
        self.user_endpoint: tuple[str, int] | None = None
        self.client_tags: dict[str, str] = {}
        self.member_epoch = 0
        self.previous_member_epoch = 0
        self.state = STABLE
        self.assigned = TasksTuple()
        self.pending = TasksTuple()  # pending revocation

    def copy(self, member_id: str | None = None) -> "StreamsMember":
        m = StreamsMember(self.member_id if member_id is None else member_id)
        for s in self.__slots__[1:]:
            setattr(m, s, getattr(self, s))
        m.client_tags = dict(self.client_tags)
        m.assigned, m.pending = self.assigned.copy(), self.pending.copy()
        return m

    def metadata_tuple(self) -> tuple:
        return (self.instance_id, self.rack_id, self.client_id, self.client_host, self.rebalance_timeout_ms,
                self.topology_epoch, self.process_id, self.user_endpoint, tuple(sorted(self.client_tags.items())))

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state == STABLE and self.member_epoch == epoch


class StreamsGroup(MemberEpochOffsets, Group):
    GROUP_TYPE = "streams"

    def __init__(self, group_id: str):
        self.group_id = group_id
        # a new group: epoch 1 with an (empty) target at epoch 1, as Kafka 4.4's StreamsGroup and
        # TargetAssignmentMetadata.INITIAL; a replayed group takes the epochs of its records
        self.group_epoch = 1
        self.metadata_hash = 0
        self.validated_topology_epoch = -1
        self.assignment_configs: dict[str, str] = {}
        self.assignment_epoch = 1
        self.assignment_timestamp = 0
        self.topology = None  # the StreamsGroupTopology value
        self.members: dict[str, StreamsMember] = {}
        self.static_members: dict[str, str] = {}
        self.target: dict[str, TasksTuple] = {}

    def copy(self) -> "StreamsGroup":
        g = object.__new__(StreamsGroup)
        g.__dict__.update(self.__dict__)
        g.members = {mid: m.copy() for mid, m in self.members.items()}
        g.static_members = dict(self.static_members)
        g.target = {mid: t.copy() for mid, t in self.target.items()}
        g.assignment_configs = dict(self.assignment_configs)
        return g

    # ------------------------------------------------------------ Group interface
    def state_name(self) -> str:
        if not self.members:
            return "Empty"
        if self.topology is None or self.topology.epoch != self.validated_topology_epoch:
            return "NotReady"
        if self.group_epoch > self.assignment_epoch:
            return "Assigning"
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def protocol_type_name(self) -> str:
        return "streams"

    def is_empty(self) -> bool:
        return not self.members

    def tombstones(self) -> list:
        gid = self.group_id
        recs = [SR.current_assignment_tombstone(gid, m) for m in self.members]
        recs += [SR.target_member_tombstone(gid, m) for m in self.target]
        recs.append(SR.target_epoch_tombstone(gid))
        recs += [SR.member_metadata_tombstone(gid, m) for m in self.members]
        recs.append(SR.topology_tombstone(gid))
        recs.append(SR.group_epoch_tombstone(gid))
        return recs

    def is_subscribed_to_topic(self, topic: str) -> bool:
        if self.topology is None or not self.members:
            return False
        return any(topic in s.source_topics or any(t.name == topic for t in s.repartition_source_topics)
                   for s in self.topology.subtopologies)

    def older_epoch_allowed(self, member, epoch: int) -> bool:
        return epoch == member.previous_member_epoch  # see the module docstring: no per-task epochs

    # ------------------------------------------------------------ current owners (for reconciliation)
    def owners(self) -> tuple[dict, dict, dict]:
        """(task -> process of its active owner, task -> processes holding it as standby, ... as warm-up),
        counting tasks pending revocation as still held."""
        active: dict[tuple[str, int], str] = {}
        standby: dict[tuple[str, int], set[str]] = {}
        warmup: dict[tuple[str, int], set[str]] = {}
        for m in self.members.values():
            for tasks in (m.assigned, m.pending):
                for sid, ps in tasks.active.items():
                    for p in ps:
                        active[(sid, p)] = m.process_id
                for target, kind in ((standby, tasks.standby), (warmup, tasks.warmup)):
                    for sid, ps in kind.items():
                        for p in ps:
                            target.setdefault((sid, p), set()).add(m.process_id)
        return active, standby, warmup

    # ------------------------------------------------------------ replay
    def replay(self, rec) -> None:
        t, value = rec.record_type, rec.value
        if t == METADATA:
            if value is not None:
                self.group_epoch = value.epoch
                self.metadata_hash = value.metadata_hash
                self.validated_topology_epoch = value.validated_topology_epoch
                self.assignment_configs = {c.key: c.value for c in value.last_assignment_configs or ()}
        elif t == TOPOLOGY:
            self.topology = value
        elif t == MEMBER:
            self._replay_member(rec.key.member_id, value)
        elif t == TARGET_EPOCH:
            self.assignment_epoch = -1 if value is None else value.assignment_epoch
            self.assignment_timestamp = 0 if value is None else value.assignment_timestamp
        elif t == TARGET_MEMBER:
            if value is None:
                self.target.pop(rec.key.member_id, None)
            else:
                self.target[rec.key.member_id] = TasksTuple.from_task_ids(value.active_tasks, value.standby_tasks,
                                                                          value.warmup_tasks)
        elif t == CURRENT:
            self._replay_current(rec.key.member_id, value)

    def _replay_member(self, member_id: str, value) -> None:
        m = self.members.get(member_id)
        if m is not None and m.instance_id is not None and self.static_members.get(m.instance_id) == member_id:
            del self.static_members[m.instance_id]
        if value is None:
            self.members.pop(member_id, None)
            return
        if m is None:
            m = self.members[member_id] = StreamsMember(member_id)
        m.instance_id = value.instance_id
        m.rack_id = value.rack_id
        m.client_id = value.client_id
        m.client_host = value.client_host
        m.rebalance_timeout_ms = value.rebalance_timeout_ms
        m.topology_epoch = value.topology_epoch
        m.process_id = value.process_id
        ep = value.user_endpoint
        m.user_endpoint = None if ep is None else (ep.host, ep.port)
        m.client_tags = {kv.key: kv.value for kv in value.client_tags or ()}
        if m.instance_id is not None:
            self.static_members[m.instance_id] = member_id

    def _replay_current(self, member_id: str, value) -> None:
        m = self.members.get(member_id)
        if m is None:
            m = self.members[member_id] = StreamsMember(member_id)
        if value is None:
            m.member_epoch = m.previous_member_epoch = LEAVE_GROUP_MEMBER_EPOCH
            m.assigned, m.pending = TasksTuple(), TasksTuple()
            return
        m.member_epoch = value.member_epoch
        m.previous_member_epoch = value.previous_member_epoch
        m.state = value.state
        m.assigned = TasksTuple.from_task_ids(value.active_tasks, value.standby_tasks, value.warmup_tasks)
        m.pending = TasksTuple.from_task_ids(value.active_tasks_pending_revocation,
                                             value.standby_tasks_pending_revocation,
                                             value.warmup_tasks_pending_revocation)


# ------------------------------------------------------------------ reconciliation
class FencedMember(Exception):
    """The member is in a state it cannot reconcile from: it must rejoin (FENCED_MEMBER_EPOCH)."""


def _holds_any(owned: TasksTuple | None, tasks: TasksTuple) -> bool:
    if owned is None:
        return True
    for mine, theirs in zip(owned.kinds(), tasks.kinds()):
        for sid, ps in theirs.items():
            if mine.get(sid, set()) & ps:
                return True
    return False


def is_subset(owned: TasksTuple | None, assigned: TasksTuple) -> bool:
    if owned is None:
        return False
    for mine, theirs in zip(owned.kinds(), assigned.kinds()):
        for sid, ps in mine.items():
            if not ps <= theirs.get(sid, set()):
                return False
    return True


def reconcile(member: StreamsMember, group: StreamsGroup, target_epoch: int, target: TasksTuple,
              owned: TasksTuple | None):
    """``(epoch, previous_epoch, state, assigned, pending_revocation)`` for the member's next step, or None."""
    if member.state == STABLE:
        if member.member_epoch == target_epoch:
            return None
    elif member.state == UNREVOKED_TASKS:
        if _holds_any(owned, member.pending):
            return None
    elif member.state != UNRELEASED_TASKS:
        if owned is None or not owned.is_empty():
            raise FencedMember()
    return _next(member, group, target_epoch, target, owned)


def _diff(current: dict, wanted: dict, blocked) -> tuple[dict, dict, dict, bool]:
    assigned, revoking, pending = {}, {}, {}
    unreleased = False
    for sid in set(current) | set(wanted):
        cur, want = current.get(sid, set()), wanted.get(sid, set())
        keep = cur & want
        drop = cur - keep
        new = {p for p in want - keep if not blocked(sid, p)}
        unreleased |= len(new) < len(want - keep)
        for out, val in ((assigned, keep), (revoking, drop), (pending, new)):
            if val:
                out[sid] = set(val)
    return assigned, revoking, pending, unreleased


def _move(src: dict, dst: dict, sid: str, p: int) -> None:
    src[sid].discard(p)
    if not src[sid]:
        del src[sid]
    dst.setdefault(sid, set()).add(p)


def _next(member: StreamsMember, group: StreamsGroup, target_epoch: int, target: TasksTuple,
          owned: TasksTuple | None):
    active_owner, standby_owners, warmup_owners = group.owners()
    pid = member.process_id
    cur = member.assigned

    def other_here(owners: dict, mine: dict, sid: str, p: int) -> bool:
        return pid in owners.get((sid, p), ()) and p not in mine.get(sid, ())

    def active_blocked(sid, p):
        return ((sid, p) in active_owner or other_here(standby_owners, cur.standby, sid, p)
                or other_here(warmup_owners, cur.warmup, sid, p))

    def standby_blocked(sid, p):
        return ((active_owner.get((sid, p)) == pid and p not in cur.active.get(sid, ()))
                or pid in standby_owners.get((sid, p), ()) or other_here(warmup_owners, cur.warmup, sid, p))

    def warmup_blocked(sid, p):
        return (active_owner.get((sid, p)) == pid or other_here(standby_owners, cur.standby, sid, p)
                or pid in warmup_owners.get((sid, p), ()))

    a_keep, a_revoke, a_new, u1 = _diff(cur.active, target.active, active_blocked)
    s_keep, s_revoke, s_new, u2 = _diff(cur.standby, target.standby, standby_blocked)
    w_keep, w_revoke, w_new, u3 = _diff(cur.warmup, target.warmup, warmup_blocked)
    # an active task of this member that becomes its standby: granted at once
    for sid, ps in cur.active.items():
        for p in list(ps):
            if p in s_new.get(sid, ()):
                _move(s_new, s_keep, sid, p)
    # standby <-> warm-up role changes: granted at once, nothing to revoke
    for mine, revoke, new, keep in ((cur.standby, s_revoke, w_new, w_keep), (cur.warmup, w_revoke, s_new, s_keep)):
        for sid, ps in mine.items():
            for p in list(ps):
                if p in new.get(sid, ()):
                    _move(new, keep, sid, p)
                    if p in revoke.get(sid, ()):
                        revoke[sid].discard(p)
                        if not revoke[sid]:
                            del revoke[sid]
    # standby / warm-up promoted to active: not revoked; kept until the active task is granted
    for mine, revoke in ((cur.standby, s_revoke), (cur.warmup, w_revoke)):
        for sid, ps in mine.items():
            for p in ps & target.active.get(sid, set()):
                if p in revoke.get(sid, ()):
                    revoke[sid].discard(p)
                    if not revoke[sid]:
                        del revoke[sid]
    pending_revocation = TasksTuple(a_revoke, s_revoke, w_revoke)
    must_revoke = not pending_revocation.is_empty() and _holds_any(owned, pending_revocation)
    for mine, keep in ((cur.standby, s_keep), (cur.warmup, w_keep)):
        for sid, ps in mine.items():
            for p in ps & target.active.get(sid, set()):
                if must_revoke or p not in a_new.get(sid, ()):
                    keep.setdefault(sid, set()).add(p)
    if must_revoke:
        return (member.member_epoch, member.member_epoch, UNREVOKED_TASKS,
                TasksTuple(a_keep, s_keep, w_keep), pending_revocation)
    for new, keep in ((a_new, a_keep), (s_new, s_keep), (w_new, w_keep)):
        for sid, ps in new.items():
            keep.setdefault(sid, set()).update(ps)
    state = UNRELEASED_TASKS if (u1 or u2 or u3) else STABLE
    return target_epoch, member.member_epoch, state, TasksTuple(a_keep, s_keep, w_keep), TasksTuple()
