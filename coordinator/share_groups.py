"""Share groups in the group coordinator: ShareGroupHeartbeat v1, ShareGroupDescribe v1.

Membership follows KIP-932 / Kafka 4.4:
- member ids come from the client (at most 36 characters); epoch 0 joins (the first
  request must list SubscribedTopicNames), -1 leaves, anything else must be the
  member's current (or previous) epoch (FENCED_MEMBER_EPOCH otherwise, UNKNOWN_MEMBER_ID
  for an unknown member);
- a join, a leave, a subscription change, an expired member or a change in the
  subscribed topics' metadata bumps the group epoch; the target assignment is then
  recomputed with the ``simple`` assignor and the assignment epoch follows; share
  groups have no revocation phase, so a member takes its target assignment, and the
  assignment epoch, on its next heartbeat;
- before a partition is assigned for the first time its share state is initialized
  through the share coordinator (InitializeShareGroupState) and recorded in
  ShareGroupStatePartitionMetadata; only initialized partitions are assignable;
- members that stop heartbeating for ``share.session.timeout.ms`` are removed;
  ``group.share.max.size`` (200) bounds the group (GROUP_MAX_SIZE_REACHED);
- states: Empty (no members), Stable, Dead (deleted);
- a group id already used by a consumer or classic group is refused with
  GROUP_ID_NOT_FOUND ("not a share group"), as Kafka does.

State changes only by replaying records (ShareGroupMetadata, MemberMetadata,
TargetAssignmentMetadata/Member, CurrentMemberAssignment, StatePartitionMetadata)
appended to ``__consumer_offsets``; start-up replays the same records.
"""
from __future__ import annotations

import hashlib
import logging
from typing import Callable

from coordinator.assignors import get_assignor
from coordinator.assignors.base import MemberSpec, TopicSpec
from coordinator.runtime import Record, encode_record
from protocol.coordinator_records.share_group_current_member_assignment import (
    ShareGroupCurrentMemberAssignmentKey as CurKey, ShareGroupCurrentMemberAssignmentValue as CurVal)
from protocol.coordinator_records.share_group_member_metadata import (
    ShareGroupMemberMetadataKey as MemKey, ShareGroupMemberMetadataValue as MemVal)
from protocol.coordinator_records.share_group_metadata import (
    ShareGroupMetadataKey as MetaKey, ShareGroupMetadataValue as MetaVal)
from protocol.coordinator_records.share_group_state_partition_metadata import (
    ShareGroupStatePartitionMetadataKey as SpmKey, ShareGroupStatePartitionMetadataValue as SpmVal)
from protocol.coordinator_records.share_group_target_assignment_member import (
    ShareGroupTargetAssignmentMemberKey as TamKey, ShareGroupTargetAssignmentMemberValue as TamVal)
from protocol.coordinator_records.share_group_target_assignment_metadata import (
    ShareGroupTargetAssignmentMetadataKey as TaKey, ShareGroupTargetAssignmentMetadataValue as TaVal)
from protocol.errors import Errors, KafkaError
from protocol.messages.initialize_share_group_state import InitializeShareGroupStateRequest as InitReq
from protocol.messages.share_group_describe import ShareGroupDescribeResponse as DescResp
from protocol.messages.share_group_heartbeat import ShareGroupHeartbeatResponse as HbResp

log = logging.getLogger("sharebroker.sharegroups")

SHARE_RECORD_TYPES = {10, 11, 12, 13, 14, 15}
MAX_MEMBER_ID = 36
Parts = dict[bytes, set[int]]


class ShareMember:
    __slots__ = ("member_id", "rack_id", "client_id", "client_host", "subscribed", "member_epoch",
                 "previous_epoch", "assigned")

    def __init__(self, member_id: str):
        self.member_id = member_id
        self.rack_id: str | None = None
        self.client_id = ""
        self.client_host = ""
        self.subscribed: list[str] = []
        self.member_epoch = 0
        self.previous_epoch = 0
        self.assigned: Parts = {}


class ShareGroup:
    GROUP_TYPE = "share"

    def __init__(self, group_id: str):
        self.group_id = group_id
        self.group_epoch = 0
        self.metadata_hash = 0
        self.assignment_epoch = 0
        self.members: dict[str, ShareMember] = {}
        self.target: dict[str, Parts] = {}
        self.initialized: dict[bytes, tuple[str, set[int]]] = {}  # topic id -> (name, partitions)
        self.exists = False

    def state_name(self) -> str:
        return "Stable" if self.members else "Empty"

    def protocol_type_name(self) -> str:
        return "share"

    def is_empty(self) -> bool:
        return not self.members

    def has_offsets(self) -> bool:
        return False


def _parts_list(cls, parts: Parts) -> list:
    return [cls(topic_id=t, partitions=sorted(ps)) for t, ps in sorted(parts.items()) if ps]


def _parts_from(items) -> Parts:
    return {tp.topic_id: set(tp.partitions) for tp in items or ()}


class ShareGroupCoordinator:
    def __init__(self, log_, cluster, group_configs, share_state, scheduler, config,
                 foreign_group_type: Callable[[str], str | None] = lambda g: None):
        self.log = log_
        self.cluster = cluster  # topic_id(name) / topic_name(id) / partition_count(name)
        self.group_configs = group_configs
        self.share_state = share_state  # ShareCoordinator (in-process persister)
        self.scheduler = scheduler
        self.max_size = config.get_int("group.share.max.size", 200)
        self.assignor = get_assignor("simple")
        self.groups: dict[str, ShareGroup] = {}
        self.foreign_group_type = foreign_group_type
        self._timers: dict[tuple[str, str], object] = {}
        self._listeners: list[Callable[[str, str], None]] = []  # (group, member) removed

    def add_member_removed_listener(self, fn: Callable[[str, str], None]) -> None:
        self._listeners.append(fn)

    # ------------------------------------------------------------------ replay
    def replay(self, rec: Record) -> None:
        t = rec.record_type
        if t not in SHARE_RECORD_TYPES:
            return
        gid = rec.key.group_id
        g = self.groups.get(gid)
        if g is None:
            if rec.value is None:
                return
            g = self.groups[gid] = ShareGroup(gid)
        v = rec.value
        if t == 11:  # ShareGroupMetadata
            if v is None:
                self.groups.pop(gid, None)
                return
            g.exists = True
            g.group_epoch, g.metadata_hash = v.epoch, v.metadata_hash
        elif t == 10:  # member metadata
            mid = rec.key.member_id
            if v is None:
                g.members.pop(mid, None)
                return
            m = g.members.get(mid) or ShareMember(mid)
            m.rack_id, m.client_id, m.client_host = v.rack_id, v.client_id, v.client_host
            m.subscribed = list(v.subscribed_topic_names)
            g.members[mid] = m
        elif t == 12:  # target assignment metadata
            if v is not None:
                g.assignment_epoch = v.assignment_epoch
        elif t == 13:  # target assignment member
            if v is None:
                g.target.pop(rec.key.member_id, None)
            else:
                g.target[rec.key.member_id] = _parts_from(v.topic_partitions)
        elif t == 14:  # current member assignment
            m = g.members.get(rec.key.member_id)
            if m is not None and v is not None:
                m.member_epoch, m.previous_epoch = v.member_epoch, v.previous_member_epoch
                m.assigned = _parts_from(v.assigned_partitions)
        elif t == 15:  # state partition metadata
            if v is not None:
                g.initialized = {ti.topic_id: (ti.topic_name, set(ti.partitions)) for ti in v.initialized_topics}

    def after_load(self) -> None:
        """Restart session timers for members restored from the log."""
        for g in self.groups.values():
            for mid in g.members:
                self._touch(g, mid)

    # ------------------------------------------------------------------ helpers
    async def _commit(self, records: list[tuple]) -> None:
        if not records:
            return
        encoded = [encode_record(k, v) for k, v in records]
        await self.log.append(encoded)
        from protocol.coordinator_records.registry import GROUP_COORDINATOR_RECORDS
        from coordinator.runtime import decode_record

        for kb, vb in encoded:
            self.replay(decode_record(GROUP_COORDINATOR_RECORDS, kb, vb))

    def _touch(self, g: ShareGroup, member_id: str) -> None:
        key = (g.group_id, member_id)
        h = self._timers.pop(key, None)
        if h is not None:
            h.cancel()
        timeout = self.group_configs.get_int(g.group_id, "share.session.timeout.ms") / 1000.0
        self._timers[key] = self.scheduler.call_later(timeout, self._expire, g.group_id, member_id)

    def _expire(self, group_id: str, member_id: str) -> None:
        self._timers.pop((group_id, member_id), None)
        g = self.groups.get(group_id)
        if g is None or member_id not in g.members:
            return
        log.info("share group %s: member %s session expired", group_id, member_id)
        self.scheduler.create_task(self._remove_member(g, member_id))

    def _metadata_hash(self, topics: set[str]) -> int:
        h = hashlib.blake2b(digest_size=8)
        for name in sorted(topics):
            tid = self.cluster.topic_id(name)
            n = self.cluster.partition_count(name) if tid is not None else -1
            h.update(f"{name}:{(tid or b'').hex()}:{n};".encode())
        return int.from_bytes(h.digest(), "big", signed=True)

    def _subscribed(self, g: ShareGroup) -> set[str]:
        out: set[str] = set()
        for m in g.members.values():
            out.update(m.subscribed)
        return out

    async def _remove_member(self, g: ShareGroup, member_id: str) -> None:
        if member_id not in g.members:
            return
        h = self._timers.pop((g.group_id, member_id), None)
        if h is not None:
            h.cancel()
        gid = g.group_id
        recs = [(CurKey(group_id=gid, member_id=member_id), None),
                (TamKey(group_id=gid, member_id=member_id), None),
                (MemKey(group_id=gid, member_id=member_id), None)]
        await self._commit(recs)
        await self._bump_and_assign(g)
        for fn in self._listeners:
            fn(gid, member_id)

    async def _bump_and_assign(self, g: ShareGroup) -> None:
        """New group epoch, share state initialized for what will be assigned, new target assignment."""
        gid = g.group_id
        subscribed = self._subscribed(g)
        epoch = g.group_epoch + 1
        await self._commit([(MetaKey(group_id=gid), MetaVal(epoch=epoch, metadata_hash=self._metadata_hash(subscribed)))])
        await self._initialize_partitions(g, subscribed)
        topics = {}
        for name in subscribed:
            tid = self.cluster.topic_id(name)
            if tid is not None:
                topics[tid] = TopicSpec(name, self.cluster.partition_count(name))
        members = {mid: MemberSpec(frozenset(t for t in (self.cluster.topic_id(n) for n in m.subscribed)
                                             if t is not None and t in topics),
                                   rack_id=m.rack_id, assigned_partitions=g.target.get(mid, {}))
                   for mid, m in g.members.items()}
        init = g.initialized
        target = self.assignor.assign(members, topics,
                                      assignable=lambda t, p: t in init and p in init[t][1]) if members else {}
        recs: list[tuple] = []
        for mid, parts in target.items():
            if parts != g.target.get(mid):
                recs.append((TamKey(group_id=gid, member_id=mid),
                             TamVal(topic_partitions=_parts_list(TamVal.TopicPartition, parts))))
        recs.append((TaKey(group_id=gid), TaVal(assignment_epoch=epoch)))
        await self._commit(recs)

    async def _initialize_partitions(self, g: ShareGroup, subscribed: set[str]) -> None:
        todo: dict[bytes, tuple[str, list[int]]] = {}
        for name in subscribed:
            tid = self.cluster.topic_id(name)
            if tid is None:
                continue
            have = g.initialized.get(tid, (name, set()))[1]
            missing = [p for p in range(self.cluster.partition_count(name)) if p not in have]
            if missing:
                todo[tid] = (name, missing)
        if not todo:
            return
        req = InitReq(group_id=g.group_id, topics=[
            InitReq.InitializeStateData(topic_id=tid, partitions=[
                InitReq.PartitionData(partition=p, state_epoch=0, start_offset=-1) for p in parts])
            for tid, (_, parts) in todo.items()])
        resp = await self.share_state.initialize_state(req)
        done: dict[bytes, set[int]] = {}
        for t in resp.results:
            for p in t.partitions:
                if p.error_code == Errors.NONE:
                    done.setdefault(t.topic_id, set()).add(p.partition)
                else:
                    log.warning("share group %s: initializing %s-%d failed: %s", g.group_id, t.topic_id.hex(),
                                p.partition, p.error_message)
        merged = {tid: (name, set(ps)) for tid, (name, ps) in g.initialized.items()}
        for tid, ps in done.items():
            name = todo[tid][0]
            merged.setdefault(tid, (name, set()))[1].update(ps)
        info = SpmVal.TopicPartitionsInfo
        await self._commit([(SpmKey(group_id=g.group_id), SpmVal(
            initializing_topics=[], deleting_topics=[],
            initialized_topics=[info(topic_id=tid, topic_name=name, partitions=sorted(ps))
                                for tid, (name, ps) in sorted(merged.items())]))])

    # ------------------------------------------------------------------ API
    async def heartbeat(self, req, client_id: str, client_host: str) -> HbResp:
        try:
            return await self._heartbeat(req, client_id or "", client_host)
        except KafkaError as e:
            return HbResp(error_code=e.code, error_message=e.message)

    async def _heartbeat(self, req, client_id: str, client_host: str) -> HbResp:
        gid, mid, epoch = req.group_id, req.member_id, req.member_epoch
        if not gid:
            raise KafkaError(Errors.INVALID_REQUEST, "GroupId can't be empty.")
        if not mid:
            raise KafkaError(Errors.INVALID_REQUEST, "MemberId can't be empty.")
        if len(mid) > MAX_MEMBER_ID:
            raise KafkaError(Errors.INVALID_REQUEST, f"MemberId can't be longer than {MAX_MEMBER_ID} characters.")
        if epoch < -1:
            raise KafkaError(Errors.INVALID_REQUEST, f"MemberEpoch is invalid: {epoch}.")
        if epoch == 0 and not req.subscribed_topic_names:
            raise KafkaError(Errors.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
        other = self.foreign_group_type(gid)
        if other is not None:
            raise KafkaError(Errors.GROUP_ID_NOT_FOUND, f"Group {gid} is not a share group.")
        g = self.groups.get(gid)
        if epoch == -1:
            if g is None or mid not in g.members:
                raise KafkaError(Errors.UNKNOWN_MEMBER_ID, f"Member {mid} is not a member of group {gid}.")
            await self._remove_member(g, mid)
            return HbResp(member_id=mid, member_epoch=-1,
                          heartbeat_interval_ms=self.group_configs.get_int(gid, "share.heartbeat.interval.ms"))
        if g is None:
            if epoch != 0:
                raise KafkaError(Errors.UNKNOWN_MEMBER_ID, f"Member {mid} is not a member of group {gid}.")
            g = self.groups[gid] = ShareGroup(gid)
        m = g.members.get(mid)
        if epoch == 0:
            if m is None and len(g.members) >= self.max_size:
                raise KafkaError(Errors.GROUP_MAX_SIZE_REACHED, f"The share group has reached its maximum "
                                                                f"capacity of {self.max_size} members.")
        elif m is None:
            raise KafkaError(Errors.UNKNOWN_MEMBER_ID, f"Member {mid} is not a member of group {gid}.")
        elif epoch not in (m.member_epoch, m.previous_epoch):
            raise KafkaError(Errors.FENCED_MEMBER_EPOCH, f"The share group member has an invalid epoch "
                                                         f"{epoch}; the current epoch is {m.member_epoch}.")
        subs = list(req.subscribed_topic_names) if req.subscribed_topic_names is not None else None
        new_member = m is None
        changed = new_member or (subs is not None and sorted(subs) != sorted(m.subscribed)) or \
            (req.rack_id is not None and req.rack_id != m.rack_id) or \
            (new_member is False and epoch == 0)
        if changed:
            await self._commit([(MemKey(group_id=gid, member_id=mid), MemVal(
                rack_id=req.rack_id if req.rack_id is not None else (m.rack_id if m else None),
                client_id=client_id, client_host=client_host,
                subscribed_topic_names=subs if subs is not None else m.subscribed))])
            m = g.members[mid]
        if changed or self._metadata_hash(self._subscribed(g)) != g.metadata_hash:
            await self._bump_and_assign(g)
        elif g.assignment_epoch < g.group_epoch:
            await self._bump_and_assign(g)
        self._touch(g, mid)
        # Share groups have no revocation: take the target assignment at once.
        send = epoch == 0
        target = g.target.get(mid, {})
        if m.member_epoch != g.assignment_epoch or target != m.assigned:
            await self._commit([(CurKey(group_id=gid, member_id=mid), CurVal(
                member_epoch=g.assignment_epoch, previous_member_epoch=m.member_epoch, state=0,
                assigned_partitions=_parts_list(CurVal.TopicPartitions, target)))])
            send = True
        resp = HbResp(member_id=mid, member_epoch=m.member_epoch,
                      heartbeat_interval_ms=self.group_configs.get_int(gid, "share.heartbeat.interval.ms"))
        if send or epoch != m.member_epoch:
            resp.assignment = HbResp.Assignment(topic_partitions=_parts_list(HbResp.TopicPartitions, m.assigned))
        return resp

    def describe(self, group_ids: list[str]) -> DescResp:
        out = []
        for gid in group_ids:
            g = self.groups.get(gid)
            if g is None:
                code = Errors.GROUP_ID_NOT_FOUND
                msg = f"Group {gid} is not a share group." if self.foreign_group_type(gid) else \
                    f"Group {gid} not found."
                out.append(DescResp.DescribedGroup(error_code=code, error_message=msg, group_id=gid,
                                                   group_state="Dead"))
                continue
            members = []
            for m in g.members.values():
                tps = [DescResp.TopicPartitions(topic_id=t, topic_name=self.cluster.topic_name(t) or "",
                                                partitions=sorted(ps)) for t, ps in sorted(m.assigned.items())]
                members.append(DescResp.Member(member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
                                               client_id=m.client_id, client_host=m.client_host,
                                               subscribed_topic_names=sorted(m.subscribed),
                                               assignment=DescResp.Assignment(topic_partitions=tps)))
            out.append(DescResp.DescribedGroup(group_id=gid, group_state=g.state_name(), group_epoch=g.group_epoch,
                                               assignment_epoch=g.assignment_epoch, assignor_name="simple",
                                               members=members))
        return DescResp(groups=out)

    async def delete_group(self, group_id: str) -> dict[bytes, tuple[str, set[int]]]:
        """Tombstone an empty share group's records (DeleteGroups).

        Returns the share partitions whose state was initialized; the caller deletes that state."""
        g = self.groups.get(group_id)
        if g is None:
            raise KafkaError(Errors.GROUP_ID_NOT_FOUND)
        if g.members:
            raise KafkaError(Errors.NON_EMPTY_GROUP)
        recs = [(TamKey(group_id=group_id, member_id=mid), None) for mid in list(g.target)]
        recs += [(TaKey(group_id=group_id), None), (SpmKey(group_id=group_id), None), (MetaKey(group_id=group_id), None)]
        await self._commit(recs)
        self.groups.pop(group_id, None)
        return g.initialized

    def close(self) -> None:
        for h in self._timers.values():
            h.cancel()
        self._timers.clear()
