"""StreamsGroupHeartbeat / StreamsGroupDescribe (KIP-1071), as Kafka 4.4's ``streamsGroupHeartbeat``.

One heartbeat is one runtime write computed on a draft of the group (as consumer groups,
:mod:`coordinator.group.consumer`):

1. the member (joining with epoch 0 and the application's topology; otherwise it must be
   known and its epoch valid: FENCED_MEMBER_EPOCH as for consumer groups) and its metadata
   (process id, endpoint, client tags, topology epoch); changed metadata bumps the group epoch;
2. the topology: the first one is stored (StreamsGroupTopology); a member with an older topology
   epoch gets status STALE_TOPOLOGY; a different topology at the same or a newer epoch is
   INVALID_REQUEST ("Topology updates are not supported yet.", as Kafka 4.4);
3. the topology against the cluster (:mod:`coordinator.group.streams_topology`): the metadata
   hash of every topic it names, the number of tasks per subtopology, the internal topics to
   create and the status (MISSING_SOURCE_TOPICS, INCORRECTLY_PARTITIONED_TOPICS,
   MISSING_INTERNAL_TOPICS); a new hash, a newly (in)valid topology or changed assignment
   configs (``num.standby.replicas``) bump the group epoch;
4. a new target assignment when the group epoch is ahead of the assignment epoch: the sticky
   task assignor (:mod:`coordinator.assignors.sticky_task`) over the configured subtopologies,
   or nothing for anybody while the topology is not ready;
5. the member's reconciliation (:func:`coordinator.group.streams.reconcile`); a member stuck
   revoking past its rebalance timeout, or silent past ``streams.session.timeout.ms``, is fenced.

The answer carries the member's tasks when it joins or they changed, the statuses, and the
partitions each member with a user endpoint hosts (for interactive queries) whenever the
caller's ``EndpointInformationEpoch`` is not the group's.  The internal topics to create are
returned beside the response: the broker creates them (Kafka's ``KafkaApis`` does, through its
auto-topic-creation manager) and the coordinator answers from a second write computed once
they exist, so the joining member does not wait a heartbeat interval for its tasks.
"""
from __future__ import annotations

import copy

from coordinator.assignors.sticky_task import StreamsMemberSpec, assign
from protocol.errors import Errors, KafkaError
from protocol.lazy_messages import StreamsGroupDescribeResponse, StreamsGroupHeartbeatResponse

from . import streams_records as SR
from .base import describe_refusal
from .classic import new_uuid_string
from .members import MemberTimers
from .modern import metadata_hash
from .streams import (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH, FencedMember,
                      StreamsGroup, StreamsMember, TasksTuple, is_subset, reconcile)
from .streams_topology import INVALID_TOPOLOGY, Configured, configure, required_topics

STALE_TOPOLOGY = 0
SHUTDOWN_APPLICATION = 4
ASSIGNMENT_DELAYED = 5
GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11)
INT_MIN = -(2**31)


def _error(code: int, message: str | None = None) -> StreamsGroupHeartbeatResponse:
    return StreamsGroupHeartbeatResponse(error_code=code, error_message=message, member_id="", member_epoch=0,
                                         heartbeat_interval_ms=0, status=None)


def _task_ids(tasks):
    return SR.task_ids(StreamsGroupHeartbeatResponse.TaskIds, tasks)


def _owned(req) -> TasksTuple | None:
    if req.active_tasks is None:
        return None
    return TasksTuple.from_task_ids(req.active_tasks, req.standby_tasks, req.warmup_tasks)


class StreamsGroupManager(MemberTimers):
    TIMER, PROTOCOL, GROUP_CLASS = "sg", "streams", StreamsGroup

    def __init__(self, coordinator):
        self.c = coordinator
        self.cfg = coordinator.cfg
        self.timers = coordinator.timers
        # In-memory caches beside the replayed groups, written by heartbeat writes (a failed append leaves at
        # worst a recomputable entry), not replayed, dropped in on_removed:
        # group -> ((topology epoch, metadata hash), the topology configured against the topics)
        self._configured: dict[str, tuple[tuple, Configured]] = {}
        # group -> (endpoint-information epoch, the PartitionsByUserEndpoint it stands for)
        self._endpoints: dict[str, tuple[int, object]] = {}
        # group -> the member that asked the whole application to shut down (until the group is empty)
        self._shutdown: dict[str, str] = {}
        # group -> member -> (changelog offsets, end offsets) by task, as the member last reported them (Kafka's
        # MemberTaskOffsets: transient telemetry for the assignor and describe); dropped with the member
        self._task_offsets: dict[str, dict[str, tuple[dict, dict]]] = {}

    # ------------------------------------------------------------ configs
    def _int_config(self, group_id: str, key: str, default: int) -> int:
        return int(self.c.group_config(group_id).get(key, default))

    def session_timeout_ms(self, group_id: str) -> int:
        return self._int_config(group_id, "streams.session.timeout.ms", self.cfg.streams_session_timeout_ms)

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return self._int_config(group_id, "streams.heartbeat.interval.ms", self.cfg.streams_heartbeat_interval_ms)

    def assignment_interval_ms(self, group_id: str) -> int:
        return self._int_config(group_id, "streams.assignment.interval.ms", self.cfg.streams_assignment_interval_ms)

    def initial_delay_ms(self, group_id: str) -> int:
        return self._int_config(group_id, "streams.initial.rebalance.delay.ms",
                                self.cfg.streams_initial_rebalance_delay_ms)

    def assignment_configs(self, group_id: str) -> dict[str, str]:
        n = self._int_config(group_id, "streams.num.standby.replicas", self.cfg.streams_num_standby_replicas)
        return {"num.standby.replicas": str(n)}

    def on_removed(self, group: StreamsGroup) -> None:
        super().on_removed(group)
        self.timers.cancel(("sg-initial", group.group_id))
        for d in (self._configured, self._endpoints, self._shutdown, self._task_offsets):
            d.pop(group.group_id, None)

    # ------------------------------------------------------------ validation (GroupCoordinatorService)
    @staticmethod
    def validate(req) -> None:
        def invalid(msg):
            raise KafkaError(Errors.INVALID_REQUEST, msg)

        for value, name in ((req.member_id, "MemberId"), (req.group_id, "GroupId"), (req.instance_id, "InstanceId"),
                            (req.rack_id, "RackId")):
            if value == "":
                invalid(f"{name} can't be empty.")
        epoch = req.member_epoch
        if epoch == 0:
            if req.rebalance_timeout_ms == -1:
                invalid("RebalanceTimeoutMs must be provided in first request.")
            for tasks, name in ((req.active_tasks, "ActiveTasks"), (req.standby_tasks, "StandbyTasks"),
                                (req.warmup_tasks, "WarmupTasks")):
                if tasks:
                    invalid(f"{name} must be empty when (re-)joining.")
            if req.topology is None:
                invalid("Topology must be non-null when (re-)joining.")
            _check_topology(req.topology)
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if req.instance_id is None:
                invalid("InstanceId can't be null.")
        elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            invalid(f"MemberEpoch is {epoch}, but must be greater than or equal to -2.")
        kinds = (req.active_tasks, req.standby_tasks, req.warmup_tasks)
        if any(k is not None for k in kinds) and any(k is None for k in kinds):
            invalid("If one task-type is non-null, all must be non-null.")
        if epoch != 0 and req.topology is not None:
            invalid("Topology can only be provided when (re-)joining.")

    @staticmethod
    def _check_epoch(member: StreamsMember, received: int, owned: TasksTuple | None) -> None:
        if received > member.member_epoch:
            raise KafkaError(Errors.FENCED_MEMBER_EPOCH,
                             f"The streams group member has a greater member epoch ({received}) than the one known "
                             f"by the group coordinator ({member.member_epoch}). The member must abandon all its "
                             "partitions and rejoin.")
        if received < member.member_epoch:
            if received != member.previous_member_epoch or not is_subset(owned, member.assigned):
                raise KafkaError(Errors.FENCED_MEMBER_EPOCH,
                                 f"The streams group member has a smaller member epoch ({received}) than the one "
                                 f"known by the group coordinator ({member.member_epoch}). The member must abandon "
                                 "all its partitions and rejoin.")

    # ------------------------------------------------------------ heartbeat
    def heartbeat(self, req, client_id: str, client_host: str, follow_up: bool = False):
        """The write: ``((response, {internal topic to create: InternalTopic}), records)``."""
        records: list = []
        try:
            self.validate(req)
            if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return (self._leave(req, records), {}), records
            return self._heartbeat(req, client_id, client_host, records, follow_up), records
        except KafkaError as e:
            return (_error(e.code, e.message), {}), []

    def _member(self, group: StreamsGroup, req, member_id: str, owned, records: list) -> StreamsMember:
        gid, epoch, joining = group.group_id, req.member_epoch, req.member_epoch == 0
        if req.instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if not joining:
                    raise KafkaError(Errors.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {gid}.")
                return StreamsMember(member_id)
            if not joining:
                self._check_epoch(member, epoch, owned)
            return member
        old_id = group.static_members.get(req.instance_id)
        old = group.members.get(old_id) if old_id is not None else None
        if joining:
            if old is None or old_id == member_id:
                return group.members.get(member_id) or StreamsMember(member_id)
            if old.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise KafkaError(Errors.UNRELEASED_INSTANCE_ID,
                                 f"Static member {member_id} with instance id {req.instance_id} cannot join the group "
                                 f"because the instance id is owned by {old_id} member.")
            new = old.copy(member_id)
            new.member_epoch = new.previous_member_epoch = 0
            target = group.target.get(old_id, TasksTuple())
            for rec in (SR.current_assignment_tombstone(gid, old_id), SR.target_member_tombstone(gid, old_id),
                        SR.member_metadata_tombstone(gid, old_id), SR.member_metadata(gid, new),
                        SR.target_member(gid, member_id, target), SR.current_assignment(gid, new)):
                self._emit(group, records, rec)
            self.cancel_member_timers(gid, old_id)
            return group.members[member_id]
        if old is None:
            raise KafkaError(Errors.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
        if old_id != member_id:
            raise KafkaError(Errors.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id "
                                                        f"{req.instance_id} was fenced by member {old_id}.")
        self._check_epoch(old, epoch, owned)
        return old

    def _heartbeat(self, req, client_id: str, client_host: str, records: list, follow_up: bool):
        gid, epoch = req.group_id, req.member_epoch
        joining = epoch == 0
        existing = self.c.lookup(gid)
        if existing is not None and not isinstance(existing, StreamsGroup):
            if joining and existing.GROUP_TYPE == "classic" and existing.is_empty():
                records.extend(existing.tombstones())  # an empty classic group is replaced (offsets kept)
                existing = None
            else:
                raise KafkaError(Errors.GROUP_ID_NOT_FOUND, f"Group {gid} is not a streams group.")
        if existing is None and not joining:
            raise KafkaError(Errors.GROUP_ID_NOT_FOUND, f"Streams group {gid} not found.")
        group = existing.copy() if existing is not None else StreamsGroup(gid)
        was_empty = group.is_empty()
        member_id = req.member_id or new_uuid_string()
        owned = _owned(req)
        if member_id not in group.members and len(group.members) >= self.cfg.streams_max_size:
            raise KafkaError(Errors.GROUP_MAX_SIZE_REACHED,
                             f"The streams group has reached its maximum capacity of {self.cfg.streams_max_size} "
                             "members.")
        member = self._member(group, req, member_id, owned, records)
        is_new = member_id not in group.members
        updated = member.copy()
        for attr in ("instance_id", "rack_id", "process_id"):
            if getattr(req, attr) is not None:
                setattr(updated, attr, getattr(req, attr))
        if req.rebalance_timeout_ms != -1:
            updated.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.topology is not None:
            updated.topology_epoch = req.topology.epoch
        if req.client_tags is not None:
            updated.client_tags = {kv.key: kv.value for kv in req.client_tags}
        if joining or req.user_endpoint is not None:
            ep = req.user_endpoint
            updated.user_endpoint = None if ep is None else (ep.host, ep.port)
        updated.client_id, updated.client_host = client_id, client_host
        status: list = []
        bump = False
        if is_new or updated.metadata_tuple() != member.metadata_tuple():
            self._emit(group, records, SR.member_metadata(gid, updated))
            bump = True

        topology = self._topology(group, req.topology, records)
        if updated.topology_epoch != topology.epoch:
            status.append(StreamsGroupHeartbeatResponse.Status(
                status_code=STALE_TOPOLOGY,
                status_detail=f"The member's topology epoch {updated.topology_epoch} is behind the group's topology "
                              f"epoch {topology.epoch}."))
        configured, new_hash = self._configure(group, topology)
        if configured.status == INVALID_TOPOLOGY:
            raise KafkaError(Errors.STREAMS_INVALID_TOPOLOGY, configured.detail)
        validated = topology.epoch if configured.ready else -1
        if configured.ready:
            self._check_tasks(configured, owned)
        if req.task_offsets is not None or req.task_end_offsets is not None:  # after the checks, as Kafka
            self._report_offsets(gid, member_id, req.task_offsets, req.task_end_offsets)
        configs = self.assignment_configs(gid)
        if (bump or new_hash != group.metadata_hash or validated != group.validated_topology_epoch
                or configs != group.assignment_configs):
            self._emit(group, records, SR.group_epoch(gid, group.group_epoch + 1, new_hash, validated, configs))
        if was_empty and (delay := self.initial_delay_ms(gid)) > 0:
            # Kafka's streamsInitialRebalanceKey: members joining an empty group share its first target assignment
            self.timers.schedule_if_absent(("sg-initial", gid), delay, lambda: self.c.schedule_records(
                lambda: self._delayed_target(gid), "streams initial rebalance delay"))
        if group.group_epoch > group.assignment_epoch:
            if self.timers.has(("sg-initial", gid)):
                status.append(StreamsGroupHeartbeatResponse.Status(
                    status_code=ASSIGNMENT_DELAYED,
                    status_detail="Assignment delayed due to the configured initial rebalance delay."))
            elif self.c.now_ms() - group.assignment_timestamp < self.assignment_interval_ms(gid):
                status.append(StreamsGroupHeartbeatResponse.Status(
                    status_code=ASSIGNMENT_DELAYED,
                    status_detail="Assignment delayed due to the configured assignment interval."))
            else:
                self._update_target(group, configured, configs, records)

        current = group.members[member_id]
        before = current.assigned
        self._maybe_reconcile(group, current, owned, records)
        self._schedule_session_timeout(gid, member_id)
        if req.shutdown_application:
            self._shutdown[gid] = member_id

        resp = StreamsGroupHeartbeatResponse(
            error_code=Errors.NONE, member_id=member_id, member_epoch=current.member_epoch,
            heartbeat_interval_ms=self.heartbeat_interval_ms(gid),
            task_offset_interval_ms=self.cfg.streams_task_offset_interval_ms,
            acceptable_recovery_lag_legacy=self.cfg.streams_acceptable_recovery_lag,
            acceptable_recovery_lag=self.cfg.streams_acceptable_recovery_lag, status=status)
        if joining or follow_up or before != current.assigned:
            resp.active_tasks = _task_ids(current.assigned.active)
            resp.standby_tasks = _task_ids(current.assigned.standby)
            resp.warmup_tasks = _task_ids(current.assigned.warmup)
        endpoint_epoch, by_endpoint = self._endpoint_information(group, configured)
        resp.endpoint_information_epoch = endpoint_epoch
        if req.endpoint_information_epoch != endpoint_epoch:
            resp.partitions_by_user_endpoint = by_endpoint
        if configured.status is not None:
            status.append(StreamsGroupHeartbeatResponse.Status(status_code=configured.status,
                                                               status_detail=configured.detail))
        if gid in self._shutdown:
            status.append(StreamsGroupHeartbeatResponse.Status(
                status_code=SHUTDOWN_APPLICATION,
                status_detail=f"Streams group member {self._shutdown[gid]} encountered a fatal error and requested a "
                              "shutdown for the entire application."))
        return resp, dict(configured.to_create)

    def _topology(self, group: StreamsGroup, req_topology, records: list):
        if req_topology is not None:
            value = SR.topology_value(req_topology)
            if group.topology is None:
                self._emit(group, records, SR.topology(group.group_id, value))
            elif group.topology.epoch <= req_topology.epoch and value != group.topology:
                raise KafkaError(Errors.INVALID_REQUEST, "Topology updates are not supported yet.")
        if group.topology is None:
            raise KafkaError(Errors.GROUP_ID_NOT_FOUND, f"Streams group {group.group_id} has no topology.")
        return group.topology

    def _configure(self, group: StreamsGroup, topology, cache: bool = True) -> tuple[Configured, int]:
        """The topology against the topics now (cached per (topology epoch, metadata hash)), and that hash."""
        cluster = self.c.cluster
        new_hash = metadata_hash(cluster, required_topics(topology))
        key = (topology.epoch, new_hash)
        cached = self._configured.get(group.group_id)
        if cached is not None and cached[0] == key:
            return cached[1], new_hash

        def partitions(name: str) -> int | None:
            return cluster.partition_count(name) if cluster.topic_id(name) is not None else None

        configured = configure(topology, partitions)
        if cache:
            self._configured[group.group_id] = (key, configured)
        return configured, new_hash

    @staticmethod
    def _check_tasks(configured: Configured, owned: TasksTuple | None) -> None:
        if owned is None:
            return
        for kind in owned.kinds():
            for sid, ps in sorted(kind.items()):
                sub = configured.subtopologies.get(sid)
                if sub is None:
                    raise KafkaError(Errors.INVALID_REQUEST, f"Subtopology {sid} does not exist in the topology.")
                for p in sorted(ps):
                    if p < 0 or p >= sub[0]:
                        raise KafkaError(Errors.INVALID_REQUEST, f"Task {p} for subtopology {sid} is invalid. "
                                                                 f"Number of tasks for this subtopology: {sub[0]}")

    def _delayed_target(self, group_id: str) -> list:
        """The initial rebalance delay ended: the first target assignment, computed on the committed group
        (Kafka's computeDelayedTargetAssignment); its members get it at their next heartbeat."""
        group = self._group(group_id)
        if group is None or group.is_empty() or group.group_epoch <= group.assignment_epoch or group.topology is None:
            return []
        draft = group.copy()
        configured, _ = self._configure(draft, draft.topology)
        records: list = []
        self._update_target(draft, configured, draft.assignment_configs, records)
        return records

    def _report_offsets(self, group_id: str, member_id: str, offsets, end_offsets) -> None:
        """A heartbeat's TaskOffsets / TaskEndOffsets; a null list leaves that map as it was."""
        old = self._task_offsets.setdefault(group_id, {}).get(member_id, ({}, {}))

        def as_map(reported, previous):
            return previous if reported is None else {(t.subtopology_id, t.partition): t.offset for t in reported}
        self._task_offsets[group_id][member_id] = (as_map(offsets, old[0]), as_map(end_offsets, old[1]))

    def _offsets_of(self, group_id: str, member_id: str) -> tuple[dict, dict]:
        return self._task_offsets.get(group_id, {}).get(member_id, ({}, {}))

    def _update_target(self, group: StreamsGroup, configured: Configured, configs: dict, records: list) -> None:
        gid = group.group_id
        result: dict = {}
        if configured.ready and group.members:
            specs = {mid: StreamsMemberSpec(m.process_id, group.target.get(mid, TasksTuple()).active,
                                            group.target.get(mid, TasksTuple()).standby, self._offsets_of(gid, mid)[0])
                     for mid, m in group.members.items()}
            subs = {sid: (n, stateful) for sid, (n, stateful, _src) in configured.subtopologies.items()}
            result = assign(specs, subs, int(configs.get("num.standby.replicas", "0")))
        for mid in group.members:
            active, standby = result.get(mid, ({}, {}))
            new = TasksTuple(active, standby)
            if mid not in group.target or group.target[mid] != new:
                self._emit(group, records, SR.target_member(gid, mid, new))
        self._emit(group, records, SR.target_epoch(gid, group.group_epoch, self.c.now_ms()))

    def _maybe_reconcile(self, group: StreamsGroup, member: StreamsMember, owned, records: list) -> None:
        if member.is_reconciled_to(group.assignment_epoch):
            return
        try:
            nxt = reconcile(member, group, group.assignment_epoch, group.target.get(member.member_id, TasksTuple()),
                            owned)
        except FencedMember:
            raise KafkaError(Errors.FENCED_MEMBER_EPOCH, "The streams group member is in a unknown state. The member "
                                                         "must abandon all its tasks and rejoin.")
        if nxt is None:
            return
        epoch, previous, state, assigned, pending = nxt
        if (epoch, state, assigned, pending) == (member.member_epoch, member.state, member.assigned, member.pending):
            return
        updated = member.copy()
        updated.member_epoch, updated.previous_member_epoch, updated.state = epoch, previous, state
        updated.assigned, updated.pending = assigned, pending
        self._emit(group, records, SR.current_assignment(group.group_id, updated))
        self._rebalance_timer(group.group_id, member.member_id, epoch, state, updated.rebalance_timeout_ms)

    # ------------------------------------------------------------ interactive-query endpoints
    def _endpoint_information(self, group: StreamsGroup, configured: Configured):
        """(the group's endpoint-information epoch, PartitionsByUserEndpoint), the epoch bumped whenever
        the partitions by endpoint change."""
        E = StreamsGroupHeartbeatResponse
        cluster = self.c.cluster
        subs = configured.subtopologies
        out = []
        for mid in sorted(group.members):
            m = group.members[mid]
            if m.user_endpoint is None:
                continue

            def partitions(kinds):
                by_topic: dict[str, set[int]] = {}
                for tasks in kinds:
                    for sid, ps in tasks.items():
                        for topic in (subs.get(sid) or (0, False, []))[2]:
                            count = cluster.partition_count(topic) if cluster.topic_id(topic) is not None else 0
                            by_topic.setdefault(topic, set()).update(p for p in ps if p < (count or 0))
                return [E.TopicPartition(topic=t, partitions=sorted(ps)) for t, ps in sorted(by_topic.items()) if ps]

            out.append(E.EndpointToPartitions(
                user_endpoint=E.Endpoint(host=m.user_endpoint[0], port=m.user_endpoint[1]),
                active_partitions=partitions([m.assigned.active]),
                standby_partitions=partitions([m.assigned.standby, m.assigned.warmup])))
        epoch, last = self._endpoints.get(group.group_id, (0, None))
        if last != out:
            epoch += 1
            self._endpoints[group.group_id] = (epoch, out)
        return epoch, out

    # ------------------------------------------------------------ leaving and fencing
    def _leave(self, req, records: list) -> StreamsGroupHeartbeatResponse:
        gid, mid = req.group_id, req.member_id
        group = self.c.lookup(gid)
        if group is None:
            raise KafkaError(Errors.GROUP_ID_NOT_FOUND, f"Streams group {gid} not found.")
        if not isinstance(group, StreamsGroup):
            raise KafkaError(Errors.GROUP_ID_NOT_FOUND, f"Group {gid} is not a streams group.")
        group = group.copy()
        if req.shutdown_application:
            self._shutdown[gid] = mid
        resp = StreamsGroupHeartbeatResponse(member_id=mid, member_epoch=req.member_epoch, status=[])
        if req.instance_id is None:
            member = group.members.get(mid)
            if member is None:
                raise KafkaError(Errors.UNKNOWN_MEMBER_ID, f"Member {mid} is not a member of group {gid}.")
        else:
            static_id = group.static_members.get(req.instance_id)
            if static_id is None:
                raise KafkaError(Errors.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
            if static_id != mid:
                raise KafkaError(Errors.FENCED_INSTANCE_ID, f"Static member {mid} with instance id {req.instance_id} "
                                                            f"was fenced by member {static_id}.")
            member = group.members[static_id]
            if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                updated = member.copy()
                updated.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH
                self._emit(group, records, SR.current_assignment(gid, updated))
                return resp
        records.extend(self._fence(group, member))
        return resp

    def _fence(self, group: StreamsGroup, member: StreamsMember) -> list:
        gid, mid = group.group_id, member.member_id
        records: list = []
        for rec in (SR.current_assignment_tombstone(gid, mid), SR.target_member_tombstone(gid, mid),
                    SR.member_metadata_tombstone(gid, mid)):
            self._emit(group, records, rec)
        self._emit(group, records, SR.group_epoch(gid, group.group_epoch + 1, group.metadata_hash,
                                                  group.validated_topology_epoch, group.assignment_configs))
        if not group.members:
            # left empty: the target epoch follows at once, timestamp 0 so no assignment interval holds the next
            # member's assignment back (Kafka's streamsGroupFenceMember)
            self._emit(group, records, SR.target_epoch(gid, group.group_epoch, 0))
            self._shutdown.pop(gid, None)
        self._task_offsets.get(gid, {}).pop(mid, None)
        self.cancel_member_timers(gid, mid)
        return records

    # ------------------------------------------------------------ describe
    def describe(self, group_ids: list[str], include_ops: bool) -> StreamsGroupDescribeResponse:
        D = StreamsGroupDescribeResponse
        out = []
        for gid in group_ids:
            group = self.c.lookup(gid)
            refused = describe_refusal(gid, group, StreamsGroup, "streams")
            if refused is not None:
                out.append(D.DescribedGroup(group_id=gid, error_code=refused[0], error_message=refused[1]))
            else:
                out.append(self._describe(group, include_ops))
        return D(groups=out)

    def _describe(self, group: StreamsGroup, include_ops: bool):
        D = StreamsGroupDescribeResponse

        # as Kafka's StreamsGroup.asDescribedGroup: the configured topology (internal topics with the partition
        # counts decided for them, names sorted) once it is ready, else the topology as the member sent it
        configured = None
        if group.topology is not None:
            configured, _ = self._configure(group, group.topology, cache=False)  # a query: the cache stays as is
            if not configured.ready:
                configured = None

        def info(topics):
            if configured is not None:
                topics = sorted(topics, key=lambda t: t.name)
            return [D.TopicInfo(name=t.name, replication_factor=t.replication_factor,
                                partitions=configured.internal_partitions.get(t.name, t.partitions)
                                if configured is not None else t.partitions,
                                topic_configs=[D.KeyValue(key=c.key, value=c.value) for c in
                                               (sorted(t.topic_configs, key=lambda c: c.key) if configured is not None
                                                else t.topic_configs)])
                    for t in topics]

        def offsets(by_task: dict) -> list:
            return [D.TaskOffset(subtopology_id=sid, partition=p, offset=o) for (sid, p), o in sorted(by_task.items())]

        def names(topics):
            return sorted(topics) if configured is not None else list(topics)

        def assignment(tasks: TasksTuple):
            return D.Assignment(active_tasks=SR.task_ids(D.TaskIds, tasks.active),
                                standby_tasks=SR.task_ids(D.TaskIds, tasks.standby),
                                warmup_tasks=SR.task_ids(D.TaskIds, tasks.warmup))

        topology = None
        if group.topology is not None:
            topology = D.Topology(epoch=group.topology.epoch, subtopologies=[D.Subtopology(
                subtopology_id=s.subtopology_id, source_topics=names(s.source_topics),
                repartition_sink_topics=names(s.repartition_sink_topics),
                state_changelog_topics=info(s.state_changelog_topics),
                repartition_source_topics=info(s.repartition_source_topics))
                for s in group.topology.subtopologies])
        members = [D.Member(
            member_id=m.member_id, member_epoch=m.member_epoch, instance_id=m.instance_id, rack_id=m.rack_id,
            client_id=m.client_id, client_host=m.client_host, topology_epoch=m.topology_epoch,
            process_id=m.process_id,
            user_endpoint=None if m.user_endpoint is None else D.Endpoint(host=m.user_endpoint[0],
                                                                          port=m.user_endpoint[1]),
            client_tags=[D.KeyValue(key=k, value=v) for k, v in sorted(m.client_tags.items())],
            task_offsets=offsets(self._offsets_of(group.group_id, m.member_id)[0]),
            task_end_offsets=offsets(self._offsets_of(group.group_id, m.member_id)[1]),
            assignment=assignment(m.assigned),
            target_assignment=assignment(group.target.get(m.member_id, TasksTuple())), is_classic=False)
            for m in group.members.values()]
        return D.DescribedGroup(
            group_id=group.group_id, group_state=group.state_name(), group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch, topology=topology, members=members,
            authorized_operations=GROUP_AUTHORIZED_OPERATIONS if include_ops else INT_MIN, assignor_name="sticky")


def _check_topology(topology) -> None:
    """GroupCoordinatorService's checks of a joining member's topology (changelog partition counts; regexes not
    supported yet), and ours where Kafka would fail with an internal error: subtopology ids are unique, copartition
    groups index existing topics."""
    seen: set[str] = set()
    for s in topology.subtopologies:
        for t in s.state_changelog_topics:
            if t.partitions != 0:
                raise KafkaError(Errors.STREAMS_INVALID_TOPOLOGY, f"Changelog topic {t.name} must have an undefined "
                                                                  f"partition count, but it is set to {t.partitions}.")
        if s.source_topic_regex:
            raise KafkaError(Errors.INVALID_REQUEST, "Regular expressions for source topics are not supported yet.")
        if s.subtopology_id in seen:
            raise KafkaError(Errors.STREAMS_INVALID_TOPOLOGY, f"Subtopology {s.subtopology_id} is defined twice.")
        seen.add(s.subtopology_id)
        for t in s.repartition_source_topics:
            if t.partitions < 0:
                raise KafkaError(Errors.STREAMS_INVALID_TOPOLOGY, f"Repartition topic {t.name} has a negative "
                                                                  f"partition count {t.partitions}.")
        for g in s.copartition_groups:
            if any(not 0 <= i < len(s.source_topics) for i in g.source_topics) or any(
                    not 0 <= i < len(s.repartition_source_topics) for i in g.repartition_source_topics):
                raise KafkaError(Errors.STREAMS_INVALID_TOPOLOGY, f"A copartition group of subtopology "
                                                                  f"{s.subtopology_id} names a topic it does not have.")


def follow_up_request(req, resp):
    """The request a heartbeat's second write computes on, once its internal topics exist: the member as the
    first write left it (its epoch, nothing owned reported), no topology."""
    again = copy.copy(req)
    again.member_id, again.member_epoch, again.topology = resp.member_id, resp.member_epoch, None
    again.active_tasks = again.standby_tasks = again.warmup_tasks = None
    again.user_endpoint = again.client_tags = again.process_id = None
    return again
