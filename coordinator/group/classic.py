"""Classic consumer groups: JoinGroup / SyncGroup / Heartbeat / LeaveGroup (Kafka's classic protocol).

Implemented as Kafka 4.4's group coordinator does it (``ClassicGroup`` and the
classic half of ``GroupMetadataManager``):

* states Empty, PreparingRebalance, CompletingRebalance, Stable, Dead and the
  generation id that fences stale members;
* member ids ``<client.id or group.instance.id>-<uuid>``; from JoinGroup v4 a new
  dynamic member first gets MEMBER_ID_REQUIRED and is kept "pending" for one
  session timeout;
* ``group.initial.rebalance.delay.ms`` delays only the first rebalance of an Empty
  group, extended by each new member up to the group's rebalance timeout;
  later rebalances wait for every member to rejoin or the rebalance timeout;
* static membership (``group.instance.id``): a rejoining static member replaces
  the old member id without a rebalance when the group is Stable and the
  selected protocol does not change, and fences the old id (FENCED_INSTANCE_ID);
* session timeouts, new-member join timeout (5 min) and the pending-sync timeout
  (members that do not SyncGroup within the rebalance timeout are removed) are
  scheduler timers, one per key, replaced on reschedule;
* the leader's assignment is persisted in a GroupMetadata record before any
  member gets it; so is every Empty generation (with ``currentStateTimestamp``,
  the KIP-211 retention clock) and a newly created group.

Like Kafka (``replayRecords=false`` for classic operations), the in-memory
classic group is the live state and GroupMetadata records are for durability:
they are only replayed at load time, where a group with members comes back
Stable and its members get fresh session timers.

Not implemented: classic members joining a non-empty KIP-848 group (online
migration) - such a JoinGroup gets INCONSISTENT_GROUP_PROTOCOL; an empty
consumer group is converted to a classic group, as Kafka does.
"""
from __future__ import annotations

import asyncio
import base64
import logging
import uuid
from collections import Counter

from protocol.errors import Errors, KafkaError
from protocol.lazy_messages import (ConsumerProtocolSubscription, DescribeGroupsResponse, HeartbeatResponse,
                                    JoinGroupResponse, LeaveGroupResponse, SyncGroupResponse)

from . import records as R
from .base import Group, OffsetAndMetadata, Write

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"

CONSUMER_PROTOCOL_TYPE = "consumer"

log = logging.getLogger(__name__)


def new_uuid_string() -> str:
    """Kafka's ``Uuid.toString()``: URL-safe base64 of 16 random bytes, no padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def parse_subscription_topics(data: bytes) -> list[str]:
    """Topics of an embedded ConsumerProtocolSubscription (version prefix, then the struct)."""
    mv = memoryview(data)
    version = int.from_bytes(mv[:2], "big", signed=True)
    version = min(max(version, 0), ConsumerProtocolSubscription.MAX_VERSION)
    return list(ConsumerProtocolSubscription.decode(mv[2:], version).topics)


class ClassicMember:
    __slots__ = ("member_id", "instance_id", "client_id", "client_host", "rebalance_timeout_ms",
                 "session_timeout_ms", "protocol_type", "protocols", "assignment", "join_future",
                 "sync_future", "is_new")

    def __init__(self, member_id, instance_id, client_id, client_host, rebalance_timeout_ms,
                 session_timeout_ms, protocol_type, protocols, assignment=b""):
        self.member_id = member_id
        self.instance_id = instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.protocols: list[tuple[str, bytes]] = protocols
        self.assignment = assignment
        self.join_future: asyncio.Future | None = None
        self.sync_future: asyncio.Future | None = None
        self.is_new = False

    @property
    def is_awaiting_join(self) -> bool:
        return self.join_future is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.sync_future is not None

    def metadata(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        raise KeyError(protocol)

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError("member does not support any candidate protocol")

    def has_satisfied_heartbeat(self) -> bool:
        if self.is_new:
            return False
        return self.is_awaiting_join or self.is_awaiting_sync


class ClassicGroup(Group):
    GROUP_TYPE = "classic"

    def __init__(self, group_id: str, now_ms: int, state: str = EMPTY):
        self.group_id = group_id
        self.state = state
        self.previous_state: str | None = None
        self.current_state_timestamp: int | None = now_ms
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, ClassicMember] = {}
        self.static_members: dict[str, str] = {}
        self.pending_members: set[str] = set()
        self.pending_sync_members: set[str] = set()
        self.supported_protocols: Counter = Counter()
        self.num_awaiting_join = 0
        self.new_member_added = False
        self.subscribed_topics: set[str] | None = None

    # ------------------------------------------------------------ Group interface
    def state_name(self) -> str:
        return self.state

    def protocol_type_name(self) -> str:
        return self.protocol_type or ""

    def is_empty(self) -> bool:
        return self.state == EMPTY

    def validate_delete(self) -> None:
        if self.state == DEAD:
            raise KafkaError(Errors.GROUP_ID_NOT_FOUND)
        if self.state != EMPTY:
            raise KafkaError(Errors.NON_EMPTY_GROUP)

    def tombstones(self) -> list:
        return [R.group_metadata_tombstone(self.group_id)]

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return self.subscribed_topics is not None and topic in self.subscribed_topics

    def offset_expiration_base(self):
        # Kafka's ClassicGroup.offsetExpirationCondition (KIP-211 table).
        if self.protocol_type:
            if self.state == EMPTY:
                ts = self.current_state_timestamp
                return (lambda om: ts) if ts is not None else (lambda om: om.commit_ts)
            if (self.protocol_type == CONSUMER_PROTOCOL_TYPE and self.subscribed_topics is not None
                    and self.state == STABLE):
                return _commit_ts
            return None
        return _commit_ts  # standalone (simple) consumer: protocol type None

    def validate_offset_commit(self, member_id: str, instance_id: str | None, generation: int,
                               version: int) -> None:
        if self.state == DEAD:
            raise KafkaError(Errors.COORDINATOR_NOT_AVAILABLE)
        if generation < 0 and self.state == EMPTY:
            return  # admin client or a consumer without group management
        if generation >= 0 or member_id or instance_id is not None:
            err = self.validate_member(member_id, instance_id)
            if err:
                raise KafkaError(err)
            if generation != self.generation_id:
                raise KafkaError(Errors.ILLEGAL_GENERATION)
        elif self.state != EMPTY:
            raise KafkaError(Errors.UNKNOWN_MEMBER_ID)
        if self.state == COMPLETING_REBALANCE:
            raise KafkaError(Errors.REBALANCE_IN_PROGRESS)

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> None:
        if self.state == DEAD:
            raise KafkaError(Errors.GROUP_ID_NOT_FOUND)

    def validate_offset_delete(self) -> None:
        if self.state == DEAD:
            raise KafkaError(Errors.GROUP_ID_NOT_FOUND)
        if self.state != EMPTY and self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            raise KafkaError(Errors.NON_EMPTY_GROUP)

    # ------------------------------------------------------------ membership
    def transition_to(self, state: str, now_ms: int) -> None:
        self.previous_state = self.state
        self.state = state
        self.current_state_timestamp = now_ms

    def can_rebalance(self) -> bool:
        return self.state in (STABLE, COMPLETING_REBALANCE, EMPTY)

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def generate_member_id(self, client_id: str, instance_id: str | None) -> str:
        return f"{instance_id if instance_id is not None else client_id}-{new_uuid_string()}"

    def add(self, member: ClassicMember, future: asyncio.Future | None) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        self.members[member.member_id] = member
        for name, _ in member.protocols:
            self.supported_protocols[name] += 1
        member.join_future = future
        if future is not None:
            self.num_awaiting_join += 1
        self.pending_members.discard(member.member_id)
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is not None:
            for name, _ in member.protocols:
                self.supported_protocols[name] -= 1
                if self.supported_protocols[name] <= 0:
                    del self.supported_protocols[name]
            if member.is_awaiting_join:
                self.num_awaiting_join -= 1
            if member.instance_id is not None:
                self.static_members.pop(member.instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync_members.discard(member_id)

    def update_member(self, member: ClassicMember, protocols, rebalance_timeout_ms: int,
                      session_timeout_ms: int, future: asyncio.Future | None) -> None:
        for name, _ in member.protocols:
            self.supported_protocols[name] -= 1
            if self.supported_protocols[name] <= 0:
                del self.supported_protocols[name]
        for name, _ in protocols:
            self.supported_protocols[name] += 1
        member.protocols = protocols
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if future is not None and not member.is_awaiting_join:
            self.num_awaiting_join += 1
        elif future is None and member.is_awaiting_join:
            self.num_awaiting_join -= 1
        member.join_future = future

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> ClassicMember:
        old = self.members.pop(old_id)
        self.complete_join_future(old, JoinGroupResponse(
            members=[], member_id=old_id, protocol_name=None, error_code=Errors.FENCED_INSTANCE_ID))
        self.complete_sync_future(old, SyncGroupResponse(assignment=b"", error_code=Errors.FENCED_INSTANCE_ID))
        new = ClassicMember(new_id, old.instance_id, old.client_id, old.client_host, old.rebalance_timeout_ms,
                            old.session_timeout_ms, old.protocol_type, old.protocols, old.assignment)
        self.members[new_id] = new
        if self.leader_id == old_id:
            self.leader_id = new_id
        self.static_members[instance_id] = new_id
        return new

    def complete_join_future(self, member: ClassicMember, response: JoinGroupResponse) -> bool:
        fut = member.join_future
        if fut is None:
            return False
        member.join_future = None
        self.num_awaiting_join -= 1
        if not fut.done():
            fut.set_result(response)
        return True

    def complete_sync_future(self, member: ClassicMember, response: SyncGroupResponse) -> bool:
        fut = member.sync_future
        if fut is None:
            return False
        member.sync_future = None
        if not fut.done():
            fut.set_result(response)
        return True

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_members

    def not_yet_rejoined_members(self) -> list[ClassicMember]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def supports_protocols(self, protocol_type: str, protocols) -> bool:
        if self.state == EMPTY:
            return bool(protocol_type) and bool(protocols)
        return (self.protocol_type == protocol_type
                and any(self.supported_protocols.get(name, 0) == len(self.members) for name, _ in protocols))

    def select_protocol(self) -> str:
        n = len(self.members)
        candidates = {name for name, count in self.supported_protocols.items() if count == n}
        votes: Counter = Counter(m.vote(candidates) for m in self.members.values())
        best = max(votes.values())
        # Kafka picks the most voted protocol; ties broken by the leader's preference here.
        leader = self.members.get(self.leader_id) if self.leader_id else None
        order = [name for name, _ in (leader or next(iter(self.members.values()))).protocols]
        return next(name for name in order if votes.get(name) == best)

    def maybe_elect_new_joined_leader(self) -> bool:
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.is_awaiting_join:
            return True
        for m in self.members.values():
            if m.is_awaiting_join:
                self.leader_id = m.member_id
                return True
        return False

    def compute_subscribed_topics(self) -> set[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if self.protocol_name:
            try:
                topics: set[str] = set()
                for m in self.members.values():
                    topics.update(parse_subscription_topics(m.metadata(self.protocol_name)))
                return topics
            except Exception:
                return None
        return None

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(EMPTY, now_ms)
        self.pending_sync_members.clear()

    def validate_member(self, member_id: str, instance_id: str | None) -> int:
        if instance_id is not None:
            existing = self.static_members.get(instance_id)
            if existing is None:
                return Errors.UNKNOWN_MEMBER_ID
            if existing != member_id:
                return Errors.FENCED_INSTANCE_ID
        elif member_id not in self.members:
            return Errors.UNKNOWN_MEMBER_ID
        return Errors.NONE

    def current_members_for_leader(self) -> list:
        return [JoinGroupResponse.JoinGroupResponseMember(
            member_id=m.member_id, group_instance_id=m.instance_id, metadata=m.metadata(self.protocol_name))
            for m in self.members.values()]

    def describe(self) -> DescribeGroupsResponse.DescribedGroup:
        members = []
        for m in self.members.values():
            if self.state == STABLE:
                members.append(DescribeGroupsResponse.DescribedGroupMember(
                    member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id,
                    client_host=m.client_host, member_metadata=m.metadata(self.protocol_name),
                    member_assignment=m.assignment or b""))
            else:
                members.append(DescribeGroupsResponse.DescribedGroupMember(
                    member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id,
                    client_host=m.client_host, member_metadata=b"", member_assignment=b""))
        return DescribeGroupsResponse.DescribedGroup(
            group_id=self.group_id, group_state=self.state, protocol_type=self.protocol_type or "",
            protocol_data=(self.protocol_name or "") if self.state == STABLE else "", members=members)

    # ------------------------------------------------------------ records
    @classmethod
    def from_record(cls, group_id: str, value, now_ms: int) -> "ClassicGroup":
        group = cls(group_id, now_ms, EMPTY if not value.members else STABLE)
        group.protocol_type = value.protocol_type or None
        group.generation_id = value.generation
        group.protocol_name = value.protocol or None
        group.leader_id = value.leader or None
        ts = value.current_state_timestamp
        group.current_state_timestamp = None if ts is None or ts < 0 else ts
        for mm in value.members:
            protocols = [(group.protocol_name or "", bytes(mm.subscription))]
            member = ClassicMember(mm.member_id, mm.group_instance_id, mm.client_id, mm.client_host,
                                   mm.rebalance_timeout if mm.rebalance_timeout >= 0 else mm.session_timeout,
                                   mm.session_timeout, group.protocol_type, protocols, bytes(mm.assignment))
            group.add(member, None)
        group.leader_id = value.leader or None
        group.subscribed_topics = group.compute_subscribed_topics()
        return group


def unique_protocols(protocols) -> list[tuple[str, bytes]]:
    """A JoinGroup's protocols in preference order, a name listed again ignored (its first entry counts).

    Kafka keys the request's protocol collection by name; counting a repeated name twice would
    leave the group without a protocol every member supports."""
    seen: set[str] = set()
    out: list[tuple[str, bytes]] = []
    for p in protocols:
        if p.name not in seen:
            seen.add(p.name)
            out.append((p.name, bytes(p.metadata)))
    return out


def _commit_ts(om: OffsetAndMetadata) -> int:
    return om.commit_ts


def _join_error(member_id: str, error: int, **kw) -> JoinGroupResponse:
    return JoinGroupResponse(error_code=error, member_id=member_id, generation_id=-1,
                             protocol_name=kw.get("protocol_name"), protocol_type=kw.get("protocol_type"),
                             leader="", members=[])


def append_error_code(exc: BaseException) -> int:
    """Kafka's appendGroupMetadataErrorToResponseError, for our record log's failures (the log's
    ``LogError`` carries its Kafka code as ``code``, as a KafkaError does)."""
    if isinstance(exc, KafkaError) or isinstance(getattr(exc, "code", None), int):
        code = exc.code
        if code in (Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.NOT_ENOUGH_REPLICAS,
                    Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND, Errors.REQUEST_TIMED_OUT):
            return Errors.COORDINATOR_NOT_AVAILABLE
        if code in (Errors.NOT_LEADER_OR_FOLLOWER, Errors.KAFKA_STORAGE_ERROR):
            return Errors.NOT_COORDINATOR
        if code in (Errors.MESSAGE_TOO_LARGE, Errors.RECORD_LIST_TOO_LARGE, Errors.INVALID_FETCH_SIZE):
            return Errors.UNKNOWN_SERVER_ERROR
        return code
    return Errors.COORDINATOR_NOT_AVAILABLE


class ClassicGroupManager:
    """The classic protocol's operations over the coordinator's group namespace.

    Methods are synchronous: they change in-memory state, complete or park
    response futures, and return :class:`Write` lists for the coordinator to
    persist (timer callbacks hand theirs to ``coordinator.spawn_writes``).
    """

    def __init__(self, coordinator):
        self.c = coordinator
        self.cfg = coordinator.cfg
        self.timers = coordinator.timers

    # ------------------------------------------------------------ helpers
    def _now(self) -> int:
        return self.c.now_ms()

    def _future(self) -> asyncio.Future:
        return asyncio.get_running_loop().create_future()

    def _group(self, group_id: str) -> ClassicGroup | None:
        g = self.c.groups.get(group_id)
        return g if isinstance(g, ClassicGroup) else None

    @staticmethod
    def _hb_key(group_id: str, member_id: str):
        return ("classic-hb", group_id, member_id)

    def _reschedule_heartbeat(self, group: ClassicGroup, member: ClassicMember, timeout_ms: int | None = None):
        gid, mid = group.group_id, member.member_id
        self.timers.schedule(self._hb_key(gid, mid),
                             member.session_timeout_ms if timeout_ms is None else timeout_ms,
                             lambda: self.c.spawn_writes(self.expire_heartbeat(gid, mid)))

    def _cancel_heartbeat(self, group_id: str, member_id: str) -> None:
        self.timers.cancel(self._hb_key(group_id, member_id))

    def on_loaded(self, group: ClassicGroup) -> None:
        for m in group.members.values():
            self._reschedule_heartbeat(group, m)

    def on_removed(self, group: ClassicGroup) -> None:
        """The group left the namespace (deleted / expired / converted): stop its timers."""
        for mid in list(group.members) + list(group.pending_members):
            self._cancel_heartbeat(group.group_id, mid)
        self.timers.cancel(("classic-join", group.group_id))
        self.timers.cancel(("classic-sync", group.group_id))

    # ------------------------------------------------------------ JoinGroup
    def join(self, req, version: int, client_id: str, client_host: str) -> tuple[asyncio.Future, list[Write]]:
        fut = self._future()
        writes: list[Write] = []
        group_id, member_id = req.group_id, req.member_id
        protocols = unique_protocols(req.protocols)
        existing = self.c.lookup(group_id)
        if existing is not None and not isinstance(existing, ClassicGroup):
            if existing.GROUP_TYPE == "consumer" and existing.is_empty():
                # Kafka converts an empty consumer group into a classic one (offsets are kept).
                recs = existing.tombstones()
                self.c.apply(recs)
                writes.append(Write(recs))
            else:
                fut.set_result(_join_error("", Errors.INCONSISTENT_GROUP_PROTOCOL))
                return fut, writes
        is_unknown = member_id == ""
        group = self._group(group_id)
        is_new_group = group is None
        if group is None:
            if not is_unknown:
                fut.set_result(_join_error(member_id, Errors.UNKNOWN_MEMBER_ID))
                return fut, writes
            group = ClassicGroup(group_id, self._now())
            self.c.groups[group_id] = group
        result: list[Write] = []
        if not self._accept_joining_member(group, member_id):
            if group.has_member(member_id):
                self._cancel_heartbeat(group_id, member_id)
            group.remove(member_id)
            fut.set_result(_join_error("", Errors.GROUP_MAX_SIZE_REACHED))
        elif is_unknown:
            result = self._join_new_member(group, req, version, protocols, client_id, client_host, fut)
        else:
            result = self._join_existing_member(group, req, version, protocols, client_id, client_host, fut)
        if is_new_group and not result:
            result = [Write([R.group_metadata(group)])]
        return fut, writes + result

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        if group.state in (EMPTY, DEAD):
            return True
        if group.state == PREPARING_REBALANCE:
            m = group.members.get(member_id)
            return (m is not None and m.is_awaiting_join) or group.num_awaiting_join < self.cfg.classic_max_size
        return group.has_member(member_id) or len(group.members) < self.cfg.classic_max_size

    def _join_new_member(self, group, req, version, protocols, client_id, client_host, fut) -> list[Write]:
        if group.state == DEAD:
            fut.set_result(_join_error("", Errors.COORDINATOR_NOT_AVAILABLE))
        elif not group.supports_protocols(req.protocol_type, protocols):
            fut.set_result(_join_error("", Errors.INCONSISTENT_GROUP_PROTOCOL))
        else:
            instance_id = req.group_instance_id
            new_id = group.generate_member_id(client_id, instance_id)
            if instance_id is not None:
                old_id = group.static_members.get(instance_id)
                if old_id is not None:
                    return self._update_static_member(group, req, version, protocols, old_id, new_id, fut)
                return self._add_member(group, req, protocols, new_id, client_id, client_host, fut)
            if version >= 4:
                group.pending_members.add(new_id)
                gid = group.group_id
                self.timers.schedule(self._hb_key(gid, new_id), req.session_timeout_ms,
                                     lambda: self.c.spawn_writes(self.expire_heartbeat(gid, new_id)))
                fut.set_result(_join_error(new_id, Errors.MEMBER_ID_REQUIRED))
            else:
                return self._add_member(group, req, protocols, new_id, client_id, client_host, fut)
        return []

    def _join_existing_member(self, group, req, version, protocols, client_id, client_host, fut) -> list[Write]:
        member_id, instance_id = req.member_id, req.group_instance_id
        if group.state == DEAD:
            fut.set_result(_join_error(member_id, Errors.COORDINATOR_NOT_AVAILABLE))
        elif not group.supports_protocols(req.protocol_type, protocols):
            fut.set_result(_join_error(member_id, Errors.INCONSISTENT_GROUP_PROTOCOL))
        elif member_id in group.pending_members:
            return self._add_member(group, req, protocols, member_id, client_id, client_host, fut)
        else:
            err = group.validate_member(member_id, instance_id)
            if err:
                fut.set_result(_join_error(member_id, err))
                return []
            member = group.members[member_id]
            if group.state == PREPARING_REBALANCE:
                return self._update_member(group, req, protocols, member, fut)
            if group.state == COMPLETING_REBALANCE:
                if member.matches(protocols):
                    fut.set_result(self._join_response(
                        group, member_id, group.current_members_for_leader() if group.is_leader(member_id) else []))
                    return []
                return self._update_member(group, req, protocols, member, fut)
            if group.state == STABLE:
                if group.is_leader(member_id) or not member.matches(protocols):
                    return self._update_member(group, req, protocols, member, fut)
                fut.set_result(self._join_response(group, member_id, []))
                return []
            fut.set_result(_join_error(member_id, Errors.UNKNOWN_MEMBER_ID))
        return []

    def _join_response(self, group: ClassicGroup, member_id: str, members: list, leader: str | None = None,
                       skip: bool = False) -> JoinGroupResponse:
        return JoinGroupResponse(
            error_code=Errors.NONE, generation_id=group.generation_id, protocol_type=group.protocol_type,
            protocol_name=group.protocol_name, leader=group.leader_id if leader is None else leader,
            skip_assignment=skip, member_id=member_id, members=members)

    def _add_member(self, group, req, protocols, member_id, client_id, client_host, fut) -> list[Write]:
        member = ClassicMember(member_id, req.group_instance_id, client_id, client_host,
                               req.rebalance_timeout_ms, req.session_timeout_ms, req.protocol_type, protocols)
        member.is_new = True
        if group.state == PREPARING_REBALANCE and group.previous_state == EMPTY:
            group.new_member_added = True
        group.add(member, fut)
        self._reschedule_heartbeat(group, member, self.cfg.new_member_join_timeout_ms)
        return self.maybe_prepare_rebalance_or_complete_join(group)

    def _update_member(self, group, req, protocols, member, fut) -> list[Write]:
        group.update_member(member, protocols, req.rebalance_timeout_ms, req.session_timeout_ms, fut)
        return self.maybe_prepare_rebalance_or_complete_join(group)

    def _update_static_member(self, group, req, version, protocols, old_id, new_id, fut) -> list[Write]:
        instance_id = req.group_instance_id
        current_leader = group.leader_id
        member = group.replace_static_member(instance_id, old_id, new_id)
        self._cancel_heartbeat(group.group_id, old_id)
        self._reschedule_heartbeat(group, member)
        old_protocols, old_rebalance, old_session = member.protocols, member.rebalance_timeout_ms, \
            member.session_timeout_ms
        group.update_member(member, protocols, req.rebalance_timeout_ms, req.session_timeout_ms, fut)
        if group.state == STABLE:
            if group.protocol_name == group.select_protocol():
                def done(exc):
                    if exc is not None:
                        group.update_member(member, old_protocols, old_rebalance, old_session, None)
                        old = group.replace_static_member(instance_id, new_id, old_id)
                        self._cancel_heartbeat(group.group_id, new_id)
                        self._reschedule_heartbeat(group, old)
                        if not fut.done():
                            fut.set_result(JoinGroupResponse(
                                error_code=append_error_code(exc), member_id="", generation_id=group.generation_id,
                                protocol_name=group.protocol_name, protocol_type=group.protocol_type,
                                leader=current_leader or ""))
                    elif version >= 9:
                        is_leader = group.is_leader(new_id)
                        group.complete_join_future(member, self._join_response(
                            group, new_id, group.current_members_for_leader() if is_leader else [], skip=is_leader))
                    else:
                        group.complete_join_future(member, self._join_response(
                            group, new_id, [], leader=current_leader or ""))
                    return None
                return [Write([R.group_metadata(group)], done)]
            return self.maybe_prepare_rebalance_or_complete_join(group)
        if group.state == COMPLETING_REBALANCE:
            return self.prepare_rebalance(group)
        return self.maybe_complete_join_phase(group)

    # ------------------------------------------------------------ rebalance machinery
    def maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup) -> list[Write]:
        if group.can_rebalance():
            return self.prepare_rebalance(group)
        return self.maybe_complete_join_phase(group)

    def prepare_rebalance(self, group: ClassicGroup) -> list[Write]:
        if group.state == COMPLETING_REBALANCE:
            self._reset_and_propagate_assignment_with_error(group, Errors.REBALANCE_IN_PROGRESS)
        gid = group.group_id
        self.timers.cancel(("classic-sync", gid))
        is_initial = group.state == EMPTY
        if is_initial:
            delay = self.cfg.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            self.timers.schedule(("classic-join", gid), delay,
                                 lambda: self.c.spawn_writes(self._try_complete_initial(gid, delay, remaining)))
        group.transition_to(PREPARING_REBALANCE, self._now())
        if not is_initial:
            self.timers.schedule(("classic-join", gid), group.rebalance_timeout_ms(),
                                 lambda: self.c.spawn_writes(self._complete_join_by_id(gid)))
            return self.maybe_complete_join_phase(group)
        return []

    def _try_complete_initial(self, group_id: str, delay_ms: int, remaining_ms: int) -> list[Write]:
        group = self._group(group_id)
        if group is None:
            return []
        if group.new_member_added and remaining_ms != 0:
            group.new_member_added = False
            new_delay = min(self.cfg.initial_rebalance_delay_ms, remaining_ms)
            new_remaining = max(remaining_ms - delay_ms, 0)
            self.timers.schedule(
                ("classic-join", group_id), new_delay,
                lambda: self.c.spawn_writes(self._try_complete_initial(group_id, new_delay, new_remaining)))
            return []
        return self.complete_join(group)

    def _complete_join_by_id(self, group_id: str) -> list[Write]:
        group = self._group(group_id)
        return self.complete_join(group) if group is not None else []

    def maybe_complete_join_phase(self, group: ClassicGroup) -> list[Write]:
        if (group.state == PREPARING_REBALANCE and group.has_all_members_joined()
                and group.previous_state != EMPTY):
            return self.complete_join(group)
        return []

    def complete_join(self, group: ClassicGroup) -> list[Write]:
        gid = group.group_id
        self.timers.cancel(("classic-join", gid))
        if group.state != PREPARING_REBALANCE:
            return []
        for m in group.not_yet_rejoined_members():
            self._cancel_heartbeat(gid, m.member_id)
            group.remove(m.member_id)
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody rejoined: wait another rebalance timeout for the session timeouts to clean up.
            self.timers.schedule(("classic-join", gid), group.rebalance_timeout_ms(),
                                 lambda: self.c.spawn_writes(self._complete_join_by_id(gid)))
            return []
        try:
            group.init_next_generation(self._now())
        except Exception:  # noqa: BLE001 - the joiners must get an answer, never a timer traceback
            log.exception("classic group %s: completing the join phase failed", gid)
            return self._fail_join(group, Errors.UNKNOWN_SERVER_ERROR)
        if group.state == EMPTY:
            return [Write([R.group_metadata(group)])]
        for m in list(group.members.values()):
            members = group.current_members_for_leader() if group.is_leader(m.member_id) else []
            group.complete_join_future(m, self._join_response(group, m.member_id, members))
            self._reschedule_heartbeat(group, m)
            m.is_new = False
            group.pending_sync_members.add(m.member_id)
        generation = group.generation_id
        self.timers.schedule(("classic-sync", gid), group.rebalance_timeout_ms(),
                             lambda: self.c.spawn_writes(self._expire_pending_sync(gid, generation)))
        return []

    def _fail_join(self, group: ClassicGroup, error: int) -> list[Write]:
        """Answer every parked JoinGroup with ``error`` and empty the group (a new, Empty generation)."""
        for m in list(group.members.values()):
            group.complete_join_future(m, _join_error(m.member_id, error))
            self._cancel_heartbeat(group.group_id, m.member_id)
            group.remove(m.member_id)
        group.init_next_generation(self._now())
        return [Write([R.group_metadata(group)])]

    def _expire_pending_sync(self, group_id: str, generation: int) -> list[Write]:
        group = self._group(group_id)
        if group is None or generation != group.generation_id:
            return []
        if group.state in (COMPLETING_REBALANCE, STABLE) and group.pending_sync_members:
            for mid in list(group.pending_sync_members):
                self._cancel_heartbeat(group_id, mid)
                group.remove(mid)
            return self.prepare_rebalance(group)
        return []

    def _reset_and_propagate_assignment_with_error(self, group: ClassicGroup, error: int) -> None:
        for m in group.members.values():
            m.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: ClassicGroup, error: int) -> None:
        for m in group.members.values():
            resp = SyncGroupResponse(error_code=error, assignment=m.assignment if not error else b"",
                                     protocol_type=group.protocol_type if not error else None,
                                     protocol_name=group.protocol_name if not error else None)
            if group.complete_sync_future(m, resp):
                self._reschedule_heartbeat(group, m)

    def _remove_member_and_update(self, group: ClassicGroup, member: ClassicMember) -> list[Write]:
        group.complete_join_future(member, _join_error("", Errors.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        if group.state in (STABLE, COMPLETING_REBALANCE):
            return self.maybe_prepare_rebalance_or_complete_join(group)
        if group.state == PREPARING_REBALANCE and group.has_all_members_joined():
            return self.complete_join(group)
        return []

    def expire_heartbeat(self, group_id: str, member_id: str) -> list[Write]:
        group = self._group(group_id)
        if group is None or group.state == DEAD:
            return []
        if member_id in group.pending_members:
            group.remove(member_id)
            if group.state == PREPARING_REBALANCE and group.has_all_members_joined():
                return self.complete_join(group)
            return []
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return []
        return self._remove_member_and_update(group, member)

    # ------------------------------------------------------------ SyncGroup
    def sync(self, req, version: int) -> tuple[asyncio.Future, list[Write]]:
        fut = self._future()
        group = self.c.groups.get(req.group_id)
        if group is None or group.is_empty() or not isinstance(group, ClassicGroup):
            fut.set_result(SyncGroupResponse(error_code=Errors.UNKNOWN_MEMBER_ID))
            return fut, []
        member_id = req.member_id
        if group.state == DEAD:
            err = Errors.COORDINATOR_NOT_AVAILABLE
        else:
            err = group.validate_member(member_id, req.group_instance_id)
            if not err and req.generation_id != group.generation_id:
                err = Errors.ILLEGAL_GENERATION
            if not err and ((req.protocol_type is not None and req.protocol_type != group.protocol_type)
                            or (req.protocol_name is not None and req.protocol_name != group.protocol_name)):
                err = Errors.INCONSISTENT_GROUP_PROTOCOL
        if err:
            fut.set_result(SyncGroupResponse(error_code=err))
            return fut, []
        writes: list[Write] = []
        member = group.members[member_id]
        if group.state == PREPARING_REBALANCE:
            fut.set_result(SyncGroupResponse(error_code=Errors.REBALANCE_IN_PROGRESS))
        elif group.state == COMPLETING_REBALANCE:
            member.sync_future = fut
            self._remove_pending_sync_member(group, member_id)
            if group.is_leader(member_id):
                assignment = {a.member_id: bytes(a.assignment) for a in req.assignments}
                for mid in group.members:
                    assignment.setdefault(mid, b"")
                generation = req.generation_id
                saved = {mid: m.assignment for mid, m in group.members.items()}
                for mid, m in group.members.items():
                    m.assignment = assignment[mid]
                record = R.group_metadata(group)
                for mid, m in group.members.items():
                    m.assignment = saved[mid]

                def done(exc):
                    if group.state != COMPLETING_REBALANCE or generation != group.generation_id:
                        return None
                    if exc is not None:
                        self._reset_and_propagate_assignment_with_error(group, append_error_code(exc))
                        return self.maybe_prepare_rebalance_or_complete_join(group)
                    for mid, m in group.members.items():
                        m.assignment = assignment.get(mid, b"")
                    self._propagate_assignment(group, Errors.NONE)
                    group.transition_to(STABLE, self._now())
                    return None
                writes.append(Write([record], done))
        elif group.state == STABLE:
            self._remove_pending_sync_member(group, member_id)
            fut.set_result(SyncGroupResponse(error_code=Errors.NONE, assignment=member.assignment or b"",
                                             protocol_type=group.protocol_type, protocol_name=group.protocol_name))
        return fut, writes

    def _remove_pending_sync_member(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if group.state in (DEAD, EMPTY, PREPARING_REBALANCE) or not group.pending_sync_members:
            self.timers.cancel(("classic-sync", group.group_id))

    # ------------------------------------------------------------ Heartbeat
    def heartbeat(self, req) -> HeartbeatResponse:
        group = self.c.groups.get(req.group_id)
        if not isinstance(group, ClassicGroup):
            return HeartbeatResponse(error_code=Errors.UNKNOWN_MEMBER_ID)
        if group.state == DEAD:
            return HeartbeatResponse(error_code=Errors.COORDINATOR_NOT_AVAILABLE)
        err = group.validate_member(req.member_id, req.group_instance_id)
        if err:
            return HeartbeatResponse(error_code=err)
        if req.generation_id != group.generation_id:
            return HeartbeatResponse(error_code=Errors.ILLEGAL_GENERATION)
        if group.state == EMPTY:
            return HeartbeatResponse(error_code=Errors.UNKNOWN_MEMBER_ID)
        self._reschedule_heartbeat(group, group.members[req.member_id])
        if group.state == PREPARING_REBALANCE:
            return HeartbeatResponse(error_code=Errors.REBALANCE_IN_PROGRESS)
        return HeartbeatResponse(error_code=Errors.NONE)

    # ------------------------------------------------------------ LeaveGroup
    def leave(self, req, version: int) -> tuple[LeaveGroupResponse, list[Write]]:
        group = self.c.groups.get(req.group_id)
        if version < 3:
            identities = [(req.member_id, None)]
        else:
            identities = [(m.member_id, m.group_instance_id) for m in req.members]
        if not isinstance(group, ClassicGroup):
            return self._leave_response(version, Errors.UNKNOWN_MEMBER_ID, []), []
        if group.state == DEAD:
            return self._leave_response(version, Errors.COORDINATOR_NOT_AVAILABLE, []), []
        results = []
        removed = False
        for member_id, instance_id in identities:
            err = Errors.NONE
            if member_id == "":
                if instance_id is not None and instance_id in group.static_members:
                    self._remove_current_member(group, group.static_members[instance_id])
                else:
                    err = Errors.UNKNOWN_MEMBER_ID
            elif member_id in group.pending_members:
                group.remove(member_id)
                self._cancel_heartbeat(group.group_id, member_id)
            else:
                err = group.validate_member(member_id, instance_id)
                if not err:
                    self._remove_current_member(group, member_id)
            removed |= err == Errors.NONE
            results.append(LeaveGroupResponse.MemberResponse(member_id=member_id, group_instance_id=instance_id,
                                                             error_code=err))
        writes: list[Write] = []
        if removed:
            if group.state in (STABLE, COMPLETING_REBALANCE):
                writes = self.maybe_prepare_rebalance_or_complete_join(group)
            elif group.state == PREPARING_REBALANCE:
                writes = self.maybe_complete_join_phase(group)
        return self._leave_response(version, Errors.NONE, results), writes

    @staticmethod
    def _leave_response(version: int, error: int, results: list) -> LeaveGroupResponse:
        if version < 3:
            if not error:
                error = next((r.error_code for r in results if r.error_code), Errors.NONE)
            return LeaveGroupResponse(error_code=error)
        return LeaveGroupResponse(error_code=error, members=results)

    def _remove_current_member(self, group: ClassicGroup, member_id: str) -> None:
        member = group.members[member_id]
        self._cancel_heartbeat(group.group_id, member_id)
        group.complete_join_future(member, _join_error("", Errors.UNKNOWN_MEMBER_ID))
        group.remove(member_id)
