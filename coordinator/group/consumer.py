"""KIP-848 consumer groups: ConsumerGroupHeartbeat and ConsumerGroupDescribe.

As Kafka 4.4 (``ConsumerGroup`` and the consumer half of ``GroupMetadataManager``):

* group epoch, target assignment epoch and member epochs; the group epoch is
  bumped when a member joins or changes its subscription, when the metadata of
  the subscribed topics changes (topic created, partitions added: a hash of
  name/id/partition count, stored as ``MetadataHash``) and when a member leaves
  or is fenced;
* when the group epoch is ahead of the assignment epoch the server-side
  assignor computes a new target assignment: the member's ``ServerAssignor``
  (the most used one in the group) or the first of ``group.consumer.assignors``
  (``uniform``; also ``range`` and ``lag``);
* members reconcile towards their target one heartbeat at a time
  (:mod:`coordinator.group.reconcile`): revoke first, then assign, partitions
  still owned elsewhere wait; a member stuck revoking past its rebalance
  timeout is fenced, as is one that misses its session timeout;
* member epoch fencing (FENCED_MEMBER_EPOCH, with Kafka's allowance for the
  previous epoch when the owned partitions are a subset of the assignment),
  static membership (``InstanceId``: epoch -2 leaves temporarily and keeps the
  assignment, a new member id with the same instance id takes it over, an
  unreleased instance id gets UNRELEASED_INSTANCE_ID), v1 client-generated
  member ids (v0: the coordinator generates one);
* every change is a ConsumerGroup* record: an operation computes its records on
  a draft of the group (:meth:`ConsumerGroup.copy`) and the coordinator's runtime
  replays them on the committed group, through the same replay used at load time,
  once they are durable.  The group epoch, target assignment and metadata hash
  machinery is shared with share groups (:mod:`coordinator.group.modern`).

Lag-aware assignor: lag = log end offset - committed offset; a partition the
group never committed counts 0 under reset policy "latest" and log end - log
start otherwise.  KIP-848 heartbeats do not carry the client's
``auto.offset.reset``, so the policy is the group config
``consumer.auto.offset.reset`` if set (an IncrementalAlterConfigs GROUP config, or
``GroupCoordinator.set_group_config``), else the broker config
``group.consumer.lag.offset.reset`` (default earliest: seed 001 counts a backlog for every
value but latest, and the broker cannot see the client's setting).

Not implemented: classic-protocol members inside a consumer group (online
upgrade/downgrade; an Empty classic group is converted, a non-empty one gets
GROUP_ID_NOT_FOUND); regexes are resolved synchronously with Python ``re``
full-match semantics against the non-internal topics (Kafka uses RE2/J
asynchronously) and not stored as ConsumerGroupRegularExpression records;
racks are passed to assignors but never matter on one broker.
"""
from __future__ import annotations

import re

from coordinator.assignors import get_assignor
from coordinator.assignors.base import PartitionAssignorError, TopicSpec
from protocol.errors import Errors, KafkaError
from protocol.lazy_messages import (ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatResponse)

from . import records as R
from .base import MemberEpochOffsets, describe_refusal
from .members import MemberTimers
from .classic import new_uuid_string
from .modern import ModernGroup, metadata_hash, new_target_assignment
from .reconcile import STABLE as M_STABLE, FencedMember, reconcile

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11)
INT_MIN = -(2**31)


class ConsumerMember:
    __slots__ = ("member_id", "instance_id", "rack_id", "client_id", "client_host", "subscribed_topic_names",
                 "subscribed_topic_regex", "rebalance_timeout_ms", "server_assignor", "member_epoch",
                 "previous_member_epoch", "state", "assigned", "pending_revocation")

    def __init__(self, member_id: str):
        self.member_id = member_id
        self.instance_id: str | None = None
        self.rack_id: str | None = None
        self.client_id = ""
        self.client_host = ""
        self.subscribed_topic_names: list[str] = []
        self.subscribed_topic_regex: str | None = None
        self.rebalance_timeout_ms = -1
        self.server_assignor: str | None = None
        self.member_epoch = 0
        self.previous_member_epoch = 0
        self.state = M_STABLE
        self.assigned: dict[bytes, set[int]] = {}
        self.pending_revocation: dict[bytes, set[int]] = {}

    def copy(self, member_id: str | None = None) -> "ConsumerMember":
        m = ConsumerMember(self.member_id if member_id is None else member_id)
        for s in self.__slots__[1:]:
            setattr(m, s, getattr(self, s))
        m.subscribed_topic_names = list(self.subscribed_topic_names)
        m.assigned = {t: set(p) for t, p in self.assigned.items()}
        m.pending_revocation = {t: set(p) for t, p in self.pending_revocation.items()}
        return m

    def metadata_tuple(self) -> tuple:
        return (self.instance_id, self.rack_id, self.client_id, self.client_host,
                tuple(self.subscribed_topic_names), self.subscribed_topic_regex, self.rebalance_timeout_ms,
                self.server_assignor)

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state == M_STABLE and self.member_epoch == epoch


class ConsumerGroup(MemberEpochOffsets, ModernGroup):
    GROUP_TYPE = "consumer"

    def __init__(self, group_id: str, regex_resolver):
        super().__init__(group_id)
        self.members: dict[str, ConsumerMember] = {}
        self.static_members: dict[str, str] = {}
        self.partition_epochs: dict[tuple[bytes, int], int] = {}
        self._resolve = regex_resolver

    def copy(self) -> "ConsumerGroup":
        g = super().copy()
        g.static_members = dict(self.static_members)
        g.partition_epochs = dict(self.partition_epochs)
        return g

    # ------------------------------------------------------------ Group interface
    def state_name(self) -> str:
        if not self.members:
            return "Empty"
        if self.group_epoch > self.assignment_epoch:
            return "Assigning"
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def protocol_type_name(self) -> str:
        return "consumer"

    def tombstones(self) -> list:
        gid = self.group_id
        recs = [R.consumer_current_assignment_tombstone(gid, m) for m in self.members]
        recs += [R.consumer_target_member_tombstone(gid, m) for m in self.target]
        recs.append(R.consumer_target_epoch_tombstone(gid))
        recs += [R.consumer_member_metadata_tombstone(gid, m) for m in self.members]
        recs.append(R.consumer_group_partition_metadata_tombstone(gid))
        recs.append(R.consumer_group_epoch_tombstone(gid))
        return recs

    def member_topic_names(self, m: ConsumerMember) -> set[str]:
        names = set(m.subscribed_topic_names)
        if m.subscribed_topic_regex:
            names.update(self._resolve(m.subscribed_topic_regex))
        return names

    # ------------------------------------------------------------ partition epochs
    def current_partition_epoch(self, topic_id: bytes, partition: int) -> int:
        return self.partition_epochs.get((topic_id, partition), -1)

    def _drop_epochs(self, m: ConsumerMember) -> None:
        for assignment in (m.assigned, m.pending_revocation):
            for tid, parts in assignment.items():
                for p in parts:
                    if self.partition_epochs.get((tid, p)) == m.member_epoch:
                        del self.partition_epochs[(tid, p)]

    def _add_epochs(self, m: ConsumerMember) -> None:
        for assignment in (m.assigned, m.pending_revocation):
            for tid, parts in assignment.items():
                for p in parts:
                    self.partition_epochs[(tid, p)] = m.member_epoch

    # ------------------------------------------------------------ replay
    def replay(self, rec) -> None:
        """Apply one ConsumerGroup* record to this group (creation and deletion are the coordinator's)."""
        t, value = rec.record_type, rec.value
        if t == 3:
            if value is not None:
                self.replay_group_epoch(value)
        elif t == 5:
            self.replay_member_metadata(rec.key.member_id, value)
        elif t == 6:
            self.replay_target_epoch(value)
        elif t == 7:
            self.replay_target_member(rec.key.member_id, value)
        elif t == 8:
            self.replay_current_assignment(rec.key.member_id, value)

    def replay_member_metadata(self, member_id: str, value) -> None:
        if value is None:
            m = self.members.pop(member_id, None)
            if m is not None:
                self._drop_epochs(m)
                if m.instance_id is not None and self.static_members.get(m.instance_id) == member_id:
                    del self.static_members[m.instance_id]
            return
        m = self.members.get(member_id)
        if m is None:
            m = self.members[member_id] = ConsumerMember(member_id)
        if m.instance_id is not None and self.static_members.get(m.instance_id) == member_id:
            del self.static_members[m.instance_id]
        m.instance_id = value.instance_id
        m.rack_id = value.rack_id
        m.client_id = value.client_id
        m.client_host = value.client_host
        m.subscribed_topic_names = list(value.subscribed_topic_names)
        m.subscribed_topic_regex = value.subscribed_topic_regex or None
        m.rebalance_timeout_ms = value.rebalance_timeout_ms
        m.server_assignor = value.server_assignor or None
        if m.instance_id is not None:
            self.static_members[m.instance_id] = member_id

    def replay_current_assignment(self, member_id: str, value) -> None:
        m = self.members.get(member_id)
        if m is None:
            m = self.members[member_id] = ConsumerMember(member_id)
        self._drop_epochs(m)
        if value is None:
            m.member_epoch = m.previous_member_epoch = LEAVE_GROUP_MEMBER_EPOCH
            m.assigned, m.pending_revocation = {}, {}
            return
        m.member_epoch = value.member_epoch
        m.previous_member_epoch = value.previous_member_epoch
        m.state = value.state
        m.assigned = {tp.topic_id: set(tp.partitions) for tp in value.assigned_partitions}
        m.pending_revocation = {tp.topic_id: set(tp.partitions) for tp in value.partitions_pending_revocation}
        self._add_epochs(m)


def _response_assignment(assignment: dict[bytes, set[int]]):
    cls = ConsumerGroupHeartbeatResponse
    return cls.Assignment(topic_partitions=[cls.TopicPartitions(topic_id=t, partitions=sorted(p))
                                            for t, p in sorted(assignment.items()) if p])


def _error(code: int, message: str | None = None) -> ConsumerGroupHeartbeatResponse:
    return ConsumerGroupHeartbeatResponse(error_code=code, error_message=message, member_id=None,
                                          member_epoch=0, heartbeat_interval_ms=0)


class ConsumerGroupManager(MemberTimers):
    """ConsumerGroupHeartbeat / ConsumerGroupDescribe over the coordinator's namespace.

    ``heartbeat`` runs as a runtime write operation: it works on a draft of the
    group, applies each record to the draft as it produces it, so later steps see
    the new state, and returns ``(response, records)``; the runtime appends the
    records and replays them on the committed group before answering.  Nothing
    is written when it fails.
    """

    TIMER, PROTOCOL, GROUP_CLASS = "cg", "consumer", ConsumerGroup

    def __init__(self, coordinator):
        self.c = coordinator
        self.cfg = coordinator.cfg
        self.timers = coordinator.timers
        self._regex_cache: dict[str, re.Pattern] = {}

    # ------------------------------------------------------------ helpers
    def new_group(self, group_id: str) -> ConsumerGroup:
        return ConsumerGroup(group_id, self.resolve_regex)

    def resolve_regex(self, regex: str) -> set[str]:
        pattern = self._regex_cache.get(regex)
        if pattern is None:
            try:
                pattern = self._regex_cache[regex] = re.compile(regex)
            except re.error:
                return set()
        return {t for t in self.c.cluster.topic_names() if not t.startswith("__") and pattern.fullmatch(t)}

    def session_timeout_ms(self, group_id: str) -> int:
        return int(self.c.group_config(group_id).get("consumer.session.timeout.ms",
                                                     self.cfg.consumer_session_timeout_ms))

    def assignment_interval_ms(self, group_id: str) -> int:
        """KIP-1263: ``consumer.assignment.interval.ms`` of the group, else the broker's
        ``group.consumer.assignment.interval.ms``: the least time between two target assignments."""
        return int(self.c.group_config(group_id).get("consumer.assignment.interval.ms",
                                                     self.cfg.consumer_assignment_interval_ms))

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return int(self.c.group_config(group_id).get("consumer.heartbeat.interval.ms",
                                                     self.cfg.consumer_heartbeat_interval_ms))

    # ------------------------------------------------------------ validation
    def _validate(self, req, version: int) -> None:
        def invalid(msg):
            raise KafkaError(Errors.INVALID_REQUEST, msg)

        if not req.group_id:
            invalid("GroupId can't be empty.")
        if version >= 1 and not req.member_id:
            invalid("MemberId can't be empty.")
        if req.instance_id == "":
            invalid("InstanceId can't be empty.")
        if req.rack_id == "":
            invalid("RackId can't be empty.")
        epoch = req.member_epoch
        if epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH:
            if not req.member_id:
                invalid("MemberId can't be empty.")
        elif epoch == 0:
            if req.rebalance_timeout_ms == -1:
                invalid("RebalanceTimeoutMs must be provided in first request.")
            if req.topic_partitions is None or req.topic_partitions:
                invalid("TopicPartitions must be empty when (re-)joining.")
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.")
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if not req.member_id:
                invalid("MemberId can't be empty.")
            if req.instance_id is None:
                invalid("InstanceId can't be null.")
        else:
            invalid("MemberEpoch is invalid.")
        if req.subscribed_topic_regex:
            try:
                re.compile(req.subscribed_topic_regex)
            except re.error as e:
                raise KafkaError(Errors.INVALID_REGULAR_EXPRESSION, f"SubscribedTopicRegex is invalid: {e}")
        if req.server_assignor is not None and req.server_assignor not in self.cfg.consumer_assignors:
            raise KafkaError(Errors.UNSUPPORTED_ASSIGNOR,
                             f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: "
                             f"{', '.join(self.cfg.consumer_assignors)}.")

    @staticmethod
    def _check_epoch(member: ConsumerMember, received: int, owned) -> None:
        if received > member.member_epoch:
            raise KafkaError(Errors.FENCED_MEMBER_EPOCH,
                             f"The consumer group member has a greater member epoch ({received}) than the one "
                             f"known by the group coordinator ({member.member_epoch}). The member must abandon "
                             "all its partitions and rejoin.")
        if received < member.member_epoch:
            if received != member.previous_member_epoch or not _is_subset(owned, member.assigned):
                raise KafkaError(Errors.FENCED_MEMBER_EPOCH,
                                 f"The consumer group member has a smaller member epoch ({received}) than the one "
                                 f"known by the group coordinator ({member.member_epoch}). The member must "
                                 "abandon all its partitions and rejoin.")

    # ------------------------------------------------------------ heartbeat
    def heartbeat(self, req, version: int, client_id: str,
                  client_host: str) -> tuple[ConsumerGroupHeartbeatResponse, list]:
        records: list = []
        try:
            self._validate(req, version)
            if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(req, records), records
            return self._heartbeat(req, client_id, client_host, records), records
        except KafkaError as e:
            return _error(e.code, e.message), []

    def _heartbeat(self, req, client_id: str, client_host: str, records: list) -> ConsumerGroupHeartbeatResponse:
        gid, epoch, owned = req.group_id, req.member_epoch, req.topic_partitions
        existing = self.c.lookup(gid)
        if existing is not None and not isinstance(existing, ConsumerGroup):
            if existing.GROUP_TYPE == "classic" and existing.is_empty() and epoch == 0:
                records.extend(existing.tombstones())  # replaced by a consumer group (offsets are kept)
                existing = None
            else:
                raise KafkaError(Errors.GROUP_ID_NOT_FOUND, f"Group {gid} is not a consumer group.")
        if existing is None and epoch != 0:
            raise KafkaError(Errors.UNKNOWN_MEMBER_ID, f"Consumer group {gid} not found.")
        group = existing.copy() if existing is not None else self.new_group(gid)
        member_id = req.member_id or new_uuid_string()
        if member_id not in group.members and len(group.members) >= self.cfg.consumer_max_size:
            raise KafkaError(Errors.GROUP_MAX_SIZE_REACHED,
                             f"The consumer group has reached its maximum capacity of {self.cfg.consumer_max_size}"
                             " members.")
        if req.instance_id is None:
            if epoch == 0:
                member = group.members.get(member_id) or ConsumerMember(member_id)
            else:
                member = group.members.get(member_id)
                if member is None:
                    raise KafkaError(Errors.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {gid}.")
                self._check_epoch(member, epoch, owned)
        else:
            old_id = group.static_members.get(req.instance_id)
            old = group.members.get(old_id) if old_id is not None else None
            if epoch == 0:
                if old is None or old_id == member_id:
                    member = group.members.get(member_id) or ConsumerMember(member_id)
                else:
                    if old.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                        raise KafkaError(Errors.UNRELEASED_INSTANCE_ID,
                                         f"Static member {member_id} with instance id {req.instance_id} cannot "
                                         f"join the group because the instance id is owned by {old_id} member.")
                    member = self._replace_static_member(group, old, member_id, records)
            else:
                if old is None:
                    raise KafkaError(Errors.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
                if old_id != member_id:
                    raise KafkaError(Errors.FENCED_INSTANCE_ID,
                                     f"Static member {member_id} with instance id {req.instance_id} was fenced by "
                                     f"member {old_id}.")
                self._check_epoch(old, epoch, owned)
                member = old
        is_new = member_id not in group.members

        updated = member.copy()
        if req.instance_id is not None:
            updated.instance_id = req.instance_id
        if req.rack_id is not None:
            updated.rack_id = req.rack_id
        if req.rebalance_timeout_ms != -1:
            updated.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.server_assignor is not None:
            updated.server_assignor = req.server_assignor
        if req.subscribed_topic_names is not None:
            updated.subscribed_topic_names = list(req.subscribed_topic_names)
        if req.subscribed_topic_regex is not None:
            updated.subscribed_topic_regex = req.subscribed_topic_regex or None
        updated.client_id = client_id
        updated.client_host = client_host

        bump = False
        if is_new or updated.metadata_tuple() != member.metadata_tuple():
            self._emit(group, records, R.consumer_member_metadata(gid, updated))
            if (sorted(updated.subscribed_topic_names) != sorted(member.subscribed_topic_names)
                    or updated.subscribed_topic_regex != member.subscribed_topic_regex):
                bump = True
        new_hash = metadata_hash(self.c.cluster, group.subscribed_topic_names())
        if bump or new_hash != group.metadata_hash:
            self._emit(group, records, R.consumer_group_epoch(gid, group.group_epoch + 1, new_hash))
        if group.group_epoch > group.assignment_epoch and \
                self.c.now_ms() - group.assignment_timestamp >= self.assignment_interval_ms(gid):
            self._update_target_assignment(group, records)

        current = group.members[member_id]
        before = {t: set(p) for t, p in current.assigned.items()}
        self._maybe_reconcile(group, current, owned, records)
        self._schedule_session_timeout(gid, member_id)

        resp = ConsumerGroupHeartbeatResponse(error_code=Errors.NONE, member_id=member_id,
                                              member_epoch=current.member_epoch,
                                              heartbeat_interval_ms=self.heartbeat_interval_ms(gid))
        full = epoch == 0 or (req.rebalance_timeout_ms != -1 and owned is not None and
                              (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None))
        if full or before != current.assigned:
            resp.assignment = _response_assignment(current.assigned)
        return resp

    def _replace_static_member(self, group: ConsumerGroup, old: ConsumerMember, new_id: str,
                               records: list) -> ConsumerMember:
        gid = group.group_id
        target = group.target.get(old.member_id, {})
        new = old.copy(new_id)
        new.member_epoch = new.previous_member_epoch = 0
        for rec in (R.consumer_current_assignment_tombstone(gid, old.member_id),
                    R.consumer_target_member_tombstone(gid, old.member_id),
                    R.consumer_member_metadata_tombstone(gid, old.member_id),
                    R.consumer_member_metadata(gid, new),
                    R.consumer_target_member(gid, new_id, target),
                    R.consumer_current_assignment(gid, new)):
            self._emit(group, records, rec)
        self.cancel_member_timers(gid, old.member_id)
        return group.members[new_id]

    def _maybe_reconcile(self, group: ConsumerGroup, member: ConsumerMember, owned, records: list) -> None:
        if member.is_reconciled_to(group.assignment_epoch):
            return
        subscribed_ids = {tid for tid in (self.c.cluster.topic_id(n) for n in group.member_topic_names(member))
                          if tid is not None}
        try:
            nxt = reconcile(member, group.assignment_epoch, group.target.get(member.member_id, {}),
                            subscribed_ids, group.current_partition_epoch, owned)
        except FencedMember:
            raise KafkaError(Errors.FENCED_MEMBER_EPOCH, "The consumer group member is in a unknown state. "
                             "The member must abandon all its partitions and rejoin.")
        if nxt is None:
            return
        epoch, previous, state, assigned, revoking = nxt
        if (epoch, state, assigned, revoking) == (member.member_epoch, member.state, member.assigned,
                                                  member.pending_revocation):
            return
        updated = member.copy()
        updated.member_epoch, updated.previous_member_epoch, updated.state = epoch, previous, state
        updated.assigned, updated.pending_revocation = assigned, revoking
        self._emit(group, records, R.consumer_current_assignment(group.group_id, updated))
        self._rebalance_timer(group.group_id, member.member_id, epoch, state, updated.rebalance_timeout_ms)

    def preferred_assignor(self, group: ConsumerGroup) -> str:
        counts: dict[str, int] = {}
        for m in group.members.values():
            if m.server_assignor:
                counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
        if not counts:
            return self.cfg.consumer_assignors[0]
        best = max(counts.values())
        order = list(self.cfg.consumer_assignors) + sorted(counts)
        return next(name for name in order if counts.get(name) == best)

    def _update_target_assignment(self, group: ConsumerGroup, records: list) -> None:
        gid = group.group_id
        name = self.preferred_assignor(group)

        def assign(specs, topics):
            lag = self._lag_function(gid, topics) if name == "lag" else None
            try:
                return get_assignor(name).assign(specs, topics, lag=lag)
            except PartitionAssignorError as e:
                raise KafkaError(Errors.UNKNOWN_SERVER_ERROR, f"Failed to compute a new target assignment: {e}")

        for mid, new in new_target_assignment(group, self.c.cluster, assign).items():
            self._emit(group, records, R.consumer_target_member(gid, mid, new))
        self._emit(group, records, R.consumer_target_epoch(gid, group.group_epoch, self.c.now_ms()))

    def _lag_function(self, group_id: str, topics: dict[bytes, TopicSpec]):
        cluster, offsets = self.c.cluster, self.c.offsets
        policy = str(self.c.group_config(group_id).get("consumer.auto.offset.reset",
                                                       self.cfg.lag_offset_reset)).lower()

        def lag(topic_id: bytes, partition: int) -> int:
            name = topics[topic_id].name
            end = cluster.log_end_offset(name, partition)
            om = offsets.get(group_id, name, partition)
            if om is not None:
                return max(0, end - om.offset)
            if policy == "latest":
                return 0
            return max(0, end - cluster.log_start_offset(name, partition))

        return lag

    # ------------------------------------------------------------ leaving and fencing
    def _leave(self, req, records: list) -> ConsumerGroupHeartbeatResponse:
        gid, mid = req.group_id, req.member_id
        group = self.c.lookup(gid)
        if group is None:
            raise KafkaError(Errors.UNKNOWN_MEMBER_ID, f"Consumer group {gid} not found.")
        if not isinstance(group, ConsumerGroup):
            raise KafkaError(Errors.GROUP_ID_NOT_FOUND, f"Group {gid} is not a consumer group.")
        group = group.copy()
        if req.instance_id is None:
            member = group.members.get(mid)
            if member is None:
                raise KafkaError(Errors.UNKNOWN_MEMBER_ID, f"Member {mid} is not a member of group {gid}.")
        else:
            static_id = group.static_members.get(req.instance_id)
            if static_id is None:
                raise KafkaError(Errors.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
            if static_id != mid:
                raise KafkaError(Errors.FENCED_INSTANCE_ID,
                                 f"Static member {mid} with instance id {req.instance_id} was fenced by member "
                                 f"{static_id}.")
            member = group.members[static_id]
            if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                updated = member.copy()
                updated.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH
                self._emit(group, records, R.consumer_current_assignment(gid, updated))
                return ConsumerGroupHeartbeatResponse(member_id=mid, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH)
        records.extend(self._fence(group, member))
        return ConsumerGroupHeartbeatResponse(member_id=mid, member_epoch=LEAVE_GROUP_MEMBER_EPOCH)

    def _fence(self, group: ConsumerGroup, member: ConsumerMember) -> list:
        gid, mid = group.group_id, member.member_id
        records: list = []
        for rec in (R.consumer_current_assignment_tombstone(gid, mid),
                    R.consumer_target_member_tombstone(gid, mid),
                    R.consumer_member_metadata_tombstone(gid, mid)):
            self._emit(group, records, rec)
        new_hash = metadata_hash(self.c.cluster, group.subscribed_topic_names())
        self._emit(group, records, R.consumer_group_epoch(gid, group.group_epoch + 1, new_hash))
        if not group.members:
            # Left empty: the assignment epoch follows the group epoch at once, timestamp 0 as a new
            # group's so the assignment interval holds no next assignment back (Kafka's
            # consumerGroupFenceMembers).
            self._emit(group, records, R.consumer_target_epoch(gid, group.group_epoch, 0))
        self.cancel_member_timers(gid, mid)
        return records

    # ------------------------------------------------------------ describe
    def describe(self, group_ids: list[str], include_ops: bool) -> ConsumerGroupDescribeResponse:
        D = ConsumerGroupDescribeResponse
        out = []
        for gid in group_ids:
            group = self.c.lookup(gid)
            refused = describe_refusal(gid, group, ConsumerGroup, "consumer")
            if refused is not None:
                out.append(D.DescribedGroup(group_id=gid, error_code=refused[0], error_message=refused[1]))
                continue
            members = [D.Member(
                member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
                client_id=m.client_id, client_host=m.client_host,
                subscribed_topic_names=sorted(m.subscribed_topic_names),
                subscribed_topic_regex=m.subscribed_topic_regex or "",  # "" without one, as Kafka's ConsumerGroupMember
                assignment=self._describe_assignment(m.assigned),
                target_assignment=self._describe_assignment(group.target.get(m.member_id, {})),
                member_type=1) for m in group.members.values()]
            out.append(D.DescribedGroup(
                group_id=gid, group_state=group.state_name(), group_epoch=group.group_epoch,
                assignment_epoch=group.assignment_epoch, assignor_name=self.preferred_assignor(group),
                members=members, authorized_operations=GROUP_AUTHORIZED_OPERATIONS if include_ops else INT_MIN))
        return D(groups=out)

    def _describe_assignment(self, assignment: dict[bytes, set[int]]):
        D = ConsumerGroupDescribeResponse
        return D.Assignment(topic_partitions=[
            D.TopicPartitions(topic_id=t, topic_name=self.c.cluster.topic_name(t) or "", partitions=sorted(p))
            for t, p in sorted(assignment.items()) if p])


def _is_subset(owned, assigned: dict[bytes, set[int]]) -> bool:
    if owned is None:
        return False
    for tp in owned:
        parts = assigned.get(tp.topic_id)
        if parts is None or any(p not in parts for p in tp.partitions):
            return False
    return True
