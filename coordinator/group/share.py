"""Share groups (KIP-932) as a kind of group: ShareGroupHeartbeat v1 and ShareGroupDescribe v1.

Membership follows KIP-932 / Kafka 4.4:

- member ids come from the client (at most 36 characters); epoch 0 joins (the first
  request must list SubscribedTopicNames), -1 leaves, anything else must be the
  member's current (or previous) epoch (FENCED_MEMBER_EPOCH otherwise, UNKNOWN_MEMBER_ID
  for an unknown member, GROUP_ID_NOT_FOUND when the group does not exist, as Kafka's
  getOrMaybeCreateShareGroup / shareGroup);
- a join, a leave, a subscription change, an expired member or a change in the
  subscribed topics' metadata bumps the group epoch; the target assignment is then
  recomputed with the group's assignor (``share.assignor.name`` if it is one of
  ``group.share.assignors``, else the first of those: ``simple`` by default) and the
  assignment epoch follows (the
  epoch and target-assignment machinery is the consumer groups',
  :mod:`coordinator.group.modern`); share groups have no revocation phase, so a
  member takes its target assignment, and the assignment epoch, on its next heartbeat;
  a heartbeat that bumps the group epoch (a new subscription) also drops from the member's
  assignment the topics it no longer subscribes to, in that heartbeat's answer, even when
  the new target waits for the assignment interval (Kafka's ShareGroupAssignmentBuilder);
- while the group waits for partitions to assign (a target held back by the assignment
  interval, or subscribed partitions not initialized yet) the answer's HeartbeatIntervalMs is
  shorter than ``share.heartbeat.interval.ms`` (ours: ``_heartbeat_interval_ms``);
- before a partition is assigned for the first time its share state is initialized
  through the share-state persister (InitializeShareGroupState, at the group epoch) and
  recorded in ShareGroupStatePartitionMetadata; only initialized partitions are assignable;
- members that stop heartbeating for ``share.session.timeout.ms`` are removed;
  ``group.share.max.size`` (200) bounds the group (GROUP_MAX_SIZE_REACHED);
- states: Empty (no members), Stable, Dead (deleted);
- a group id already used by a consumer or classic group is refused with
  GROUP_ID_NOT_FOUND ("not a share group"), as Kafka does.

A heartbeat is one runtime write computed on the committed group, as Kafka 4.4's
``shareGroupHeartbeat``: member and group epoch; the target assignment when the group epoch
is ahead and ``share.assignment.interval.ms`` (KIP-1263; broker default
``group.share.assignment.interval.ms``, 1000) has passed since the last one; the member
takes its target.  With the ``lag`` assignor (KIP-1226 backlogs, ``coordinator.assignors.share_lag``) a
heartbeat with nothing pending also looks at the backlogs, at most once per
``group.share.lag.rebalance.interval.ms`` (10000) since the last assignment and the last look: when the
assignor (its hysteresis and churn bound included) would change a target, the group epoch is bumped and the
new target written in the same write.

A heartbeat whose member subscribes to partitions whose share state is not initialized yet
initializes them (InitializeShareGroupState at the group epoch, then the
ShareGroupStatePartitionMetadata record, ``maybe_initialize``) before it is answered, as Kafka's
GroupCoordinatorService answers a heartbeat only once its persister initialization ended; on
one node that is an append to the local ``__share_group_state``.  It is then answered by a
second write, the one its member's next heartbeat would have made (``_heartbeat_op`` with
``follow_up``), so its answer carries the partitions just initialized (Kafka assigns them at the
next heartbeat).  So that members joining a new group together still share its first
assignment (librdkafka test 0172), a group whose target assigns no partitions yet computes
none until ``group.share.initial.assignment.delay.ms`` (ours, 100) after the first of them
joined (``_forming``; Kafka's ``group.initial.rebalance.delay.ms`` for classic groups): their
heartbeats are answered at the end of that window, together.  A target that assigns no
partitions moved nothing, so KIP-1263's interval does not hold the next one back.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Iterable

from coordinator.assignors import get_share_assignor
from protocol.errors import Errors, KafkaError
from protocol.lazy_messages import (ShareGroupDescribeResponse as DescResp, ShareGroupHeartbeatResponse as HbResp)

from . import records as R
from .classic import append_error_code
from .modern import ModernGroup, Parts, metadata_hash, new_target_assignment
from .persister import initialize_request, share_partition_lag

log = logging.getLogger(__name__)

SHARE_RECORD_TYPES = frozenset({10, 11, 12, 13, 14, 15})
MAX_MEMBER_ID = 36
SESSION_TIMEOUT = "share.session.timeout.ms"
HEARTBEAT_INTERVAL = "share.heartbeat.interval.ms"
ASSIGNMENT_INTERVAL = "share.assignment.interval.ms"
ASSIGNOR_NAME = "share.assignor.name"  # ours: Kafka 4.4 has one share assignor for every group
AUTO_OFFSET_RESET = "share.auto.offset.reset"
INIT_RETRY_MS = 30000  # Kafka's group.share.initialize.retry.interval.ms default
# Ours: the least HeartbeatIntervalMs answered while the group waits for partitions to assign, and the margin
# added to the time until the next target assignment (a client times its next heartbeat from its last send).
PENDING_HEARTBEAT_MS = 500
PENDING_HEARTBEAT_MARGIN_MS = 100
# per-group settings (``share.*`` overrides) -> the GroupConfig field of their broker default (``group.share.*``)
_BROKER_DEFAULTS = {SESSION_TIMEOUT: "share_session_timeout_ms", HEARTBEAT_INTERVAL: "share_heartbeat_interval_ms",
                    ASSIGNMENT_INTERVAL: "share_assignment_interval_ms"}


class ShareMember:
    __slots__ = ("member_id", "rack_id", "client_id", "client_host", "subscribed_topic_names", "member_epoch",
                 "previous_member_epoch", "assigned")

    def __init__(self, member_id: str):
        self.member_id = member_id
        self.rack_id: str | None = None
        self.client_id = ""
        self.client_host = ""
        self.subscribed_topic_names: list[str] = []
        self.member_epoch = 0
        self.previous_member_epoch = 0
        self.assigned: Parts = {}

    def copy(self) -> "ShareMember":
        m = ShareMember(self.member_id)
        m.rack_id, m.client_id, m.client_host = self.rack_id, self.client_id, self.client_host
        m.subscribed_topic_names = list(self.subscribed_topic_names)
        m.member_epoch, m.previous_member_epoch = self.member_epoch, self.previous_member_epoch
        m.assigned = {t: set(ps) for t, ps in self.assigned.items()}
        return m


class ShareGroup(ModernGroup):
    GROUP_TYPE = "share"

    def __init__(self, group_id: str):
        super().__init__(group_id)
        self.members: dict[str, ShareMember] = {}
        self.initialized: dict[bytes, tuple[str, set[int]]] = {}  # topic id -> (name, partitions)
        # What every heartbeat asks of the whole group, kept so that a heartbeat of a 64-member group does
        # not walk the 64 members: how many members subscribe to each topic (moved by the replay of member
        # records), and the partitions the target assignment gives anyone, by topic id (computed on first
        # use, dropped by the replay of target records). Never changed in place: a draft shares them with
        # the committed group until its own replay replaces them.
        self._subscribers: dict[str, int] = {}
        self._targeted: dict[bytes, set[int]] | None = None

    def copy(self) -> "ShareGroup":
        """A draft whose member and target maps are its own but whose members, targets and initialized
        partitions are the committed group's until ``replay`` replaces them (it never changes one in
        place): a heartbeat of a 64-member group copies two maps, not 64 members."""
        self.targeted_partitions()  # computed on the committed group, for every draft until the target changes
        g = object.__new__(ShareGroup)
        g.__dict__.update(self.__dict__)
        g.members, g.target = dict(self.members), dict(self.target)
        return g

    def subscribed_topic_names(self, members: Iterable | None = None) -> set[str]:
        if members is not None:
            return super().subscribed_topic_names(members)
        return set(self._subscribers)

    def _subscribe(self, old: ShareMember | None, new: ShareMember | None) -> None:
        """Move the subscriber counts from member ``old``'s topics to ``new``'s (None: no member)."""
        counts = dict(self._subscribers)
        for name in set(old.subscribed_topic_names) if old is not None else ():
            if counts[name] == 1:
                del counts[name]
            else:
                counts[name] -= 1
        for name in set(new.subscribed_topic_names) if new is not None else ():
            counts[name] = counts.get(name, 0) + 1
        self._subscribers = counts

    def targeted_partitions(self) -> dict[bytes, set[int]]:
        """The partitions the target assignment gives some member, by topic id (do not change it)."""
        out = self._targeted
        if out is None:
            out = {}
            for parts in self.target.values():
                for t, ps in parts.items():
                    out.setdefault(t, set()).update(ps)
            self._targeted = out
        return out

    def state_name(self) -> str:
        return "Stable" if self.members else "Empty"

    def protocol_type_name(self) -> str:
        return "share"

    def has_offsets(self) -> bool:
        return False

    def tombstones(self) -> list:
        gid = self.group_id
        recs = [R.share_target_member_tombstone(gid, mid) for mid in self.target]
        recs += [R.share_target_epoch_tombstone(gid), R.share_state_partitions_tombstone(gid),
                 R.share_group_epoch_tombstone(gid)]
        return recs

    def replay(self, rec) -> None:
        """Apply one ShareGroup* record (creation and deletion are the coordinator's)."""
        t, v = rec.record_type, rec.value
        if t == 11:  # ShareGroupMetadata
            if v is not None:
                self.replay_group_epoch(v)
        elif t == 10:  # member metadata
            mid = rec.key.member_id
            old = self.members.get(mid)
            if v is None:
                if old is not None:
                    del self.members[mid]
                    self._subscribe(old, None)
                return
            m = old.copy() if old is not None else ShareMember(mid)
            m.rack_id, m.client_id, m.client_host = v.rack_id, v.client_id, v.client_host
            m.subscribed_topic_names = list(v.subscribed_topic_names)
            self.members[mid] = m
            self._subscribe(old, m)
        elif t == 12:  # target assignment metadata
            if v is not None:
                self.replay_target_epoch(v)
        elif t == 13:  # target assignment member
            self.replay_target_member(rec.key.member_id, v)
            self._targeted = None
        elif t == 14:  # current member assignment (Kafka's getOrMaybeCreateMember: any record order)
            m = self.members.get(rec.key.member_id)
            if v is not None:
                m = m.copy() if m is not None else ShareMember(rec.key.member_id)
                self.members[rec.key.member_id] = m
                m.member_epoch, m.previous_member_epoch = v.member_epoch, v.previous_member_epoch
                m.assigned = {tp.topic_id: set(tp.partitions) for tp in v.assigned_partitions}
        elif t == 15:  # state partition metadata
            if v is not None:
                self.initialized = {ti.topic_id: (ti.topic_name, set(ti.partitions)) for ti in v.initialized_topics}


class _FollowUp:
    """The request a heartbeat's second write answers (``ShareGroupManager._heartbeat``): the member at
    the epoch its first write gave it, its subscription unchanged."""
    __slots__ = ("group_id", "member_id", "member_epoch", "subscribed_topic_names", "rack_id")

    def __init__(self, group_id: str, member_id: str, member_epoch: int):
        self.group_id, self.member_id, self.member_epoch = group_id, member_id, member_epoch
        self.subscribed_topic_names = self.rack_id = None


class _Window:
    """A forming share group's window (``group.share.initial.assignment.delay.ms``): its deadline (ms) and,
    once a heartbeat waits for it, a future that its one timer completes at the deadline."""
    __slots__ = ("deadline", "_ended", "_key")

    def __init__(self, deadline: int):
        self.deadline = deadline
        self._ended: asyncio.Future | None = None
        self._key = None

    def ended(self, timers, gid: str, now: int) -> asyncio.Future:
        if self._ended is None:
            self._ended = fut = asyncio.get_running_loop().create_future()
            self._key = ("sg-forming", gid)
            timers.schedule(self._key, self.deadline - now, lambda: fut.done() or fut.set_result(None))
        return self._ended

    def close(self, timers) -> None:
        """The window is dropped: whoever waits for it goes on now."""
        if self._ended is not None:
            timers.cancel(self._key)
            if not self._ended.done():
                self._ended.set_result(None)


def group_not_found(group_id: str, group) -> KafkaError:
    """GROUP_ID_NOT_FOUND for a group that is not a share group: unknown (None) or of another type."""
    if group is None:
        return KafkaError(Errors.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
    return KafkaError(Errors.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")


def _unknown_member(member_id: str, group_id: str) -> KafkaError:
    return KafkaError(Errors.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")


class ShareGroupManager:
    """ShareGroupHeartbeat / ShareGroupDescribe over the coordinator's namespace.

    ``share_state`` is the share-state persister (``initialize_state(request)``,
    the share coordinator in the broker).

    Besides the replayed groups (the coordinator's ``groups``), the manager keeps per-group
    memory that is *not replayed*: it starts empty after a restart (or when another broker
    becomes coordinator), writes may change it while they compute (it is not durable state, and
    a failed append leaves it harmless: each field says why), and ``on_removed`` drops a removed
    group's entries from every one of these fields, in ``_forget``.
    """

    def __init__(self, coordinator, share_state=None):
        self.c = coordinator
        self.cfg = coordinator.cfg
        self.timers = coordinator.timers
        self.share_state = share_state
        # group -> when the lag assignor last looked at its backlogs. Written by heartbeat writes
        # (``_heartbeat_op``); a failed append only delays the next look. Not replayed; dies in _forget.
        self._lag_checked: dict[str, int] = {}
        # group -> assignor of its last target assignment on this broker. Written by heartbeat writes
        # (``_target_changes``); a failed append at worst re-assigns once more. Not replayed (after a
        # restart a changed ``share.assignor.name`` applies from the next assignment); dies in _forget.
        self._assigned_with: dict[str, str] = {}
        # group -> (topic id, partition) -> (when its InitializeShareGroupState was sent, a future done
        # when that request and its record ended: heartbeats wait for it). Written by ``maybe_initialize``
        # after a heartbeat's write (outside writes), entries dropped when that request ends
        # (``_initialize``). Not replayed; the group's dict dies in _forget.
        self._initializing: dict[str, dict[tuple[bytes, int], tuple[int, asyncio.Future]]] = {}
        # group -> the window its first assignment waits for (group.share.initial.assignment.delay.ms).
        # Opened by a heartbeat write that finds the group's target assigning no partitions, dropped by
        # the write that computes a target with partitions and when the group empties (a failed append
        # at worst leaves a window open that the next such write uses). Not replayed; dies in _forget.
        self._forming: dict[str, _Window] = {}
        # Session timers ("sg-session", group, member) live in ``self.timers``: scheduled by heartbeat
        # writes, cancelled when the member is removed or the group is (on_removed); an expiry
        # re-checks the committed group, so a timer a failed append left behind does nothing.

    # ------------------------------------------------------------ helpers
    def _group(self, group_id: str) -> ShareGroup | None:
        g = self.c.groups.get(group_id)
        return g if isinstance(g, ShareGroup) else None

    def _config(self, group_id: str, key: str) -> int:
        """A share group setting: the group's override, else the broker default."""
        return int(self.c.group_config(group_id).get(key, getattr(self.cfg, _BROKER_DEFAULTS[key])))

    def _schedule_session_timeout(self, group_id: str, member_id: str) -> None:
        self.timers.schedule(("sg-session", group_id, member_id), self._config(group_id, SESSION_TIMEOUT),
                             lambda: self.c.runtime.spawn(self._expire(group_id, member_id),
                                                          "share session timeout"))

    def on_loaded(self, group: ShareGroup) -> None:
        for mid in group.members:
            self._schedule_session_timeout(group.group_id, mid)

    def on_removed(self, group: ShareGroup) -> None:
        """The group left the namespace (deleted, or replaced by a group of another type)."""
        for mid in group.members:
            self.timers.cancel(("sg-session", group.group_id, mid))
        self._forget(group.group_id)

    def close(self) -> None:
        """The coordinator closes: heartbeats waiting for a forming window go on now (their second write
        answers them, with an error once the coordinator is gone)."""
        for window in self._forming.values():
            window.close(self.timers)
        self._forming.clear()

    def _forget(self, gid: str) -> None:
        """Drop the group's entries from every per-group field that is not replayed."""
        self._lag_checked.pop(gid, None)
        self._assigned_with.pop(gid, None)
        self._initializing.pop(gid, None)
        window = self._forming.pop(gid, None)
        if window is not None:
            window.close(self.timers)

    @staticmethod
    def _emit(group: ShareGroup, records: list, rec) -> None:
        records.append(rec)
        group.replay(rec)

    def _bump(self, group: ShareGroup, records: list) -> None:
        new_hash = metadata_hash(self.c.cluster, group.subscribed_topic_names())
        self._emit(group, records, R.share_group_epoch(group.group_id, group.group_epoch + 1, new_hash))

    # ------------------------------------------------------------ heartbeat
    async def heartbeat(self, req, client_id: str, client_host: str) -> HbResp:
        try:
            return await self._heartbeat(req, client_id or "", client_host or "")
        except KafkaError as e:
            return HbResp(error_code=e.code, error_message=e.message)
        except Exception as e:  # noqa: BLE001 - a failed append
            log.warning("share group heartbeat for %s failed: %r", req.group_id, e)
            return HbResp(error_code=append_error_code(e))

    @staticmethod
    def _validate(req) -> None:
        mid, epoch = req.member_id, req.member_epoch
        if not req.group_id:
            raise KafkaError(Errors.INVALID_REQUEST, "GroupId can't be empty.")
        if not mid:
            raise KafkaError(Errors.INVALID_REQUEST, "MemberId can't be empty.")
        if len(mid) > MAX_MEMBER_ID:
            raise KafkaError(Errors.INVALID_REQUEST, f"MemberId can't be longer than {MAX_MEMBER_ID} characters.")
        if epoch < -1:
            raise KafkaError(Errors.INVALID_REQUEST, f"MemberEpoch is invalid: {epoch}.")
        if epoch == 0 and not req.subscribed_topic_names:
            raise KafkaError(Errors.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
        if req.subscribed_topic_names is not None and any(
                not isinstance(n, str) for n in req.subscribed_topic_names):
            raise KafkaError(Errors.INVALID_REQUEST, "SubscribedTopicNames can't contain null.")

    async def _heartbeat(self, req, client_id: str, client_host: str) -> HbResp:
        self._validate(req)
        gid, mid = req.group_id, req.member_id
        runtime = self.c.runtime
        if req.member_epoch == -1:
            return await runtime.write(lambda: self._leave(gid, mid))
        resp = await runtime.write(lambda: self._heartbeat_op(req, client_id, client_host))
        self.maybe_initialize(gid)
        waits = self._waits(gid, mid)
        if not waits:
            return resp
        # The member's partitions are being initialized, or the group forms: answer once that is done,
        # with what the member's next heartbeat would get (the futures never fail).
        await asyncio.gather(*waits)
        again = _FollowUp(gid, mid, resp.member_epoch)
        return await runtime.write(lambda: self._heartbeat_op(again, client_id, client_host, follow_up=True,
                                                               full=resp.assignment is not None))

    def _waits(self, gid: str, mid: str) -> list:
        """What a heartbeat of ``mid`` waits for before its answer: the initializations in flight of the
        partitions its member subscribes to, and the end of the group's forming window."""
        g = self._group(gid)
        m = g.members.get(mid) if g is not None else None
        if m is None:
            return []
        waits = []
        busy = self._initializing.get(gid)
        if busy:
            ids = self._uninitialized_of(g, mid)
            waits = list({done for (tid, _), (_, done) in busy.items() if tid in ids and not done.done()})
        window = self._forming.get(gid)
        if window is not None and self.c.now_ms() < window.deadline:
            waits.append(window.ended(self.timers, gid, self.c.now_ms()))
        return waits

    def _committed_group(self, group_id: str) -> ShareGroup | None:
        g = self.c.groups.get(group_id)
        if g is not None and not isinstance(g, ShareGroup):
            raise group_not_found(group_id, g)
        return g

    def _leave(self, gid: str, mid: str) -> tuple[HbResp, list]:
        g = self._committed_group(gid)
        if g is None:  # Kafka's shareGroupLeave: shareGroup(groupId) throws for an unknown group
            raise group_not_found(gid, None)
        if mid not in g.members:
            raise _unknown_member(mid, gid)
        resp = HbResp(member_id=mid, member_epoch=-1, heartbeat_interval_ms=self._config(gid, HEARTBEAT_INTERVAL))
        return resp, self._remove_member(g.copy(), mid)

    def _remove_member(self, draft: ShareGroup, mid: str) -> list:
        """The member's records go, the group epoch is bumped; the remaining members get their new
        target at their next heartbeat (Kafka's shareGroupFenceMember).  A group left empty gets its
        assignment epoch at the group epoch at once (KAFKA-20442)."""
        gid = draft.group_id
        records: list = []
        for rec in (R.share_current_assignment_tombstone(gid, mid), R.share_target_member_tombstone(gid, mid),
                    R.share_member_metadata_tombstone(gid, mid)):
            self._emit(draft, records, rec)
        self._bump(draft, records)
        if not draft.members:
            self._emit(draft, records, R.share_target_epoch(gid, draft.group_epoch, self.c.now_ms()))
            window = self._forming.pop(gid, None)  # the next member to join opens a new one
            if window is not None:
                window.close(self.timers)
        self.timers.cancel(("sg-session", gid, mid))
        return records

    def _heartbeat_op(self, req, client_id: str, client_host: str, follow_up: bool = False,
                      full: bool = False) -> tuple[HbResp, list]:
        """One heartbeat as Kafka 4.4's shareGroupHeartbeat: (1) the member and the group epoch,
        (2) the target assignment when the group epoch is ahead of it and the assignment interval
        has passed since the last one (KIP-1263), over initialized share partitions only, (3) the
        member takes its target.  Initializing share state comes after, off this write.

        ``follow_up``: the second write of a heartbeat that waited (``_heartbeat``), for a member that
        must still be there; ``full``: its answer carries the assignment (the first write's would have)."""
        gid, mid, epoch = req.group_id, req.member_id, req.member_epoch
        committed = self._committed_group(gid)
        if committed is None and follow_up:  # the group went away while the heartbeat waited
            raise _unknown_member(mid, gid)
        if committed is None and epoch != 0:  # Kafka's getOrMaybeCreateShareGroup(groupId, false)
            raise KafkaError(Errors.GROUP_ID_NOT_FOUND, f"Share group {gid} not found.")
        g = committed.copy() if committed is not None else ShareGroup(gid)
        m = g.members.get(mid)
        max_size = self.cfg.share_max_size
        if follow_up and m is None:  # it left or expired while its heartbeat waited
            raise _unknown_member(mid, gid)
        if epoch == 0 and not follow_up:
            if m is None and len(g.members) >= max_size:
                raise KafkaError(Errors.GROUP_MAX_SIZE_REACHED, f"The share group has reached its maximum "
                                                                f"capacity of {max_size} members.")
        elif m is None:
            raise _unknown_member(mid, gid)
        elif epoch not in (m.member_epoch, m.previous_member_epoch):
            raise KafkaError(Errors.FENCED_MEMBER_EPOCH, f"The share group member has an invalid epoch "
                                                         f"{epoch}; the current epoch is {m.member_epoch}.")
        records: list = []
        # (1) member metadata and group epoch
        subs = list(req.subscribed_topic_names) if req.subscribed_topic_names is not None else None
        changed = m is None or (subs is not None and sorted(subs) != sorted(m.subscribed_topic_names)) \
            or (req.rack_id is not None and req.rack_id != m.rack_id)
        if changed or (epoch == 0 and not follow_up) or m.client_id != client_id or m.client_host != client_host:
            updated = m.copy() if m is not None else ShareMember(mid)
            if req.rack_id is not None:
                updated.rack_id = req.rack_id
            updated.client_id, updated.client_host = client_id, client_host
            if subs is not None:
                updated.subscribed_topic_names = subs
            self._emit(g, records, R.share_member_metadata(gid, updated))
        # Newly initialized partitions need an assignment: a new epoch, unless one is already pending.
        pending = g.group_epoch == g.assignment_epoch and self._initialized_assignment_pending(g)
        bumped = changed or pending or metadata_hash(self.c.cluster, g.subscribed_topic_names()) != g.metadata_hash
        if bumped:
            self._bump(g, records)
        self._schedule_session_timeout(gid, mid)
        # (2) target assignment; for the lag assignor also when backlogs moved (at most once per interval).
        # A heartbeat that will wait (its member's partitions are being initialized, or the group forms)
        # leaves it to its second write.  A target that assigns nothing moved nothing: the interval does
        # not hold the next one back.
        now = self.c.now_ms()
        empty = not any(g.targeted_partitions().values())
        if not follow_up and ((empty and self._forming_until(g, now) > now) or self._uninitialized_of(g, mid)):
            pass
        elif g.group_epoch > g.assignment_epoch and (
                empty or now - g.assignment_timestamp >= self.assignment_interval_ms(gid)):
            self._update_target_assignment(g, records, now)
        elif self._reassign_due(g, now):
            self._lag_checked[gid] = now
            changes = self._target_changes(g)
            if changes:
                self._bump(g, records)
                self._update_target_assignment(g, records, now, changes)
        # (3) the member takes its target (no revocation in share groups), as Kafka's ShareGroupAssignmentBuilder:
        # on a new target epoch, and on any heartbeat that bumped the group epoch (a new subscription), the
        # target restricted to the topics the member subscribes to now, so a dropped topic goes in this answer
        # even when KIP-1263's interval holds the new target back.
        m = g.members[mid]
        send = epoch == 0 or subs is not None or full
        if bumped or m.member_epoch != g.assignment_epoch:
            assigned = self._subscribed_part(g.target.get(mid, {}), m.subscribed_topic_names)
            if m.member_epoch != g.assignment_epoch or assigned != m.assigned:
                updated = m.copy()
                if m.member_epoch != g.assignment_epoch:
                    updated.member_epoch, updated.previous_member_epoch = g.assignment_epoch, m.member_epoch
                updated.assigned = assigned
                send |= updated.assigned != m.assigned
                self._emit(g, records, R.share_current_assignment(gid, updated))
                m = updated
        resp = HbResp(member_id=mid, member_epoch=m.member_epoch,
                      heartbeat_interval_ms=self._heartbeat_interval_ms(g, now))
        if send:
            resp.assignment = HbResp.Assignment(topic_partitions=[
                HbResp.TopicPartitions(topic_id=t, partitions=sorted(ps)) for t, ps in sorted(m.assigned.items())
                if ps])
        return resp, records

    def _subscribed_part(self, target: Parts, names: list[str]) -> Parts:
        """``target`` without the topics not in ``names`` (Kafka's filterAssignedPartitions)."""
        ids = {self.c.cluster.topic_id(n) for n in names}
        return {t: set(ps) for t, ps in target.items() if t in ids}

    def _heartbeat_interval_ms(self, g: ShareGroup, now: int) -> int:
        """The HeartbeatIntervalMs to answer: ``share.heartbeat.interval.ms``, except while the group waits
        for partitions to assign (ours, a deviation): a target assignment held back by KIP-1263's interval,
        or subscribed partitions whose share state could not be initialized yet (the next heartbeat
        retries).  Then the members are asked back when the next target can be computed, at least
        PENDING_HEARTBEAT_MS after this one, so a member that joined a formed group gets its partitions
        about one assignment interval after it joined instead of one heartbeat interval (5 s)."""
        gid = g.group_id
        configured = self._config(gid, HEARTBEAT_INTERVAL)
        if g.group_epoch == g.assignment_epoch and not self.uninitialized_partitions(g):
            return configured
        wait = g.assignment_timestamp + self.assignment_interval_ms(gid) - now + PENDING_HEARTBEAT_MARGIN_MS
        return min(configured, max(PENDING_HEARTBEAT_MS, wait))

    def uninitialized_partitions(self, g: ShareGroup) -> dict[bytes, tuple[str, list[int]]]:
        """Partitions of the group's subscribed topics whose share state is not initialized, by topic id
        (nothing without a persister or without members)."""
        if self.share_state is None or not g.members:
            return {}
        cluster = self.c.cluster
        out: dict[bytes, tuple[str, list[int]]] = {}
        for name in sorted(g.subscribed_topic_names()):
            tid = cluster.topic_id(name)
            if tid is None:
                continue
            have = g.initialized.get(tid, (name, set()))[1]
            missing = [p for p in range(cluster.partition_count(name) or 0) if p not in have]
            if missing:
                out[tid] = (name, missing)
        return out

    def assignment_interval_ms(self, gid: str) -> int:
        """``share.assignment.interval.ms`` of the group, else ``group.share.assignment.interval.ms``."""
        return self._config(gid, ASSIGNMENT_INTERVAL)

    def _initialized_assignment_pending(self, g: ShareGroup) -> bool:
        """Kafka's initializedAssignmentPending: a subscribed topic's initialized partitions differ
        from those in the target assignment."""
        if not g.members or not g.initialized:
            return False
        names = g.subscribed_topic_names()
        assigned = g.targeted_partitions()
        return any(name in names and assigned.get(tid) != ps for tid, (name, ps) in g.initialized.items())

    def assignor_name(self, gid: str) -> str:
        """The group's ``share.assignor.name`` when it is one of ``group.share.assignors``, else the first
        of those (the broker default)."""
        enabled = self.cfg.share_assignors
        name = self.c.group_config(gid).get(ASSIGNOR_NAME)
        return name if name in enabled else enabled[0]

    def _reassign_due(self, g: ShareGroup, now: int) -> bool:
        """Nothing pending and the KIP-1263 interval passed, and either ``share.assignor.name`` changed since
        this broker last assigned the group, or the assignor is ``lag`` and ``group.share.lag.rebalance.interval.ms``
        passed since the last assignment and since the last look at the backlogs."""
        gid = g.group_id
        since = now - g.assignment_timestamp
        if not g.members or g.group_epoch != g.assignment_epoch or since < self.assignment_interval_ms(gid):
            return False
        name = self.assignor_name(gid)
        if self._assigned_with.get(gid, name) != name:
            return True
        wait = self.cfg.share_lag_rebalance_interval_ms
        return name == "lag" and since >= wait and now - self._lag_checked.get(gid, now - wait) >= wait

    def _target_changes(self, draft: ShareGroup) -> dict:
        """Members whose target the group's assignor changes, over initialized partitions only."""
        init = draft.initialized
        gid = draft.group_id
        assignor = get_share_assignor(self.assignor_name(gid))
        self._assigned_with[gid] = assignor.name

        def assign(specs, topics):
            lag = self._lag_function(gid, topics) if assignor.name == "lag" else None
            return assignor.assign(specs, topics, lag=lag, assignable=lambda t, p: t in init and p in init[t][1])

        return new_target_assignment(draft, self.c.cluster, assign)

    def _lag_function(self, gid: str, topics: dict):
        """KIP-1226 share-partition lag from the share coordinator's state: log end - SPSO -
        DeliveryCompleteCount.  A partition whose state has no start offset yet counts, as
        ``share.auto.offset.reset`` will start it, 0 (``latest``) or log end - log start (``earliest``,
        and ``by_duration`` as an upper bound)."""
        cluster = self.c.cluster
        state_of = getattr(self.share_state, "state_of", None)
        latest = str(self.c.group_config(gid).get(AUTO_OFFSET_RESET, "latest")).strip().lower() == "latest"

        def lag(topic_id: bytes, partition: int) -> int:
            name = topics[topic_id].name
            end = cluster.log_end_offset(name, partition)
            state = state_of(gid, topic_id, partition) if state_of is not None else None
            if state is not None and state.start_offset >= 0 and state.delivery_complete_count >= 0:
                return max(0, share_partition_lag(end, state.start_offset, state.delivery_complete_count))
            return 0 if latest else max(0, end - cluster.log_start_offset(name, partition))

        return lag

    def _update_target_assignment(self, draft: ShareGroup, records: list, now: int,
                                  changes: dict | None = None) -> None:
        gid = draft.group_id
        for mid, new in (self._target_changes(draft) if changes is None else changes).items():
            self._emit(draft, records, R.share_target_member(gid, mid, new))
        self._emit(draft, records, R.share_target_epoch(gid, draft.group_epoch, now))
        if gid in self._forming and any(draft.targeted_partitions().values()):
            self._forming.pop(gid).close(self.timers)  # the group has formed

    def _uninitialized_of(self, g: ShareGroup, mid: str) -> set[bytes]:
        """Ids of the topics member ``mid`` subscribes to that have partitions not initialized yet."""
        missing = self.uninitialized_partitions(g)
        if not missing:
            return set()
        return {self.c.cluster.topic_id(n) for n in g.members[mid].subscribed_topic_names} & missing.keys()

    def _forming_until(self, g: ShareGroup, now: int) -> int:
        """The end of the forming window of a group whose target assigns no partitions (opened now by
        its first such heartbeat; 0: none)."""
        delay = self.cfg.share_initial_assignment_delay_ms
        if delay <= 0 or not g.members:
            return 0
        window = self._forming.get(g.group_id)
        if window is None:
            window = self._forming[g.group_id] = _Window(now + delay)
        return window.deadline

    # ------------------------------------------------------------ share state initialization
    def maybe_initialize(self, gid: str) -> None:
        """After a heartbeat: initialize, in the background, the share state of subscribed partitions
        not yet initialized (Kafka's maybeCreateInitializeShareGroupStateRequest, then
        persisterInitialize "async with respect to the heartbeat").  They are assigned by a later
        heartbeat.  A partition already being initialized is not asked for again until
        ``group.share.initialize.retry.interval.ms`` passed."""
        g = self._group(gid)
        missing_by_topic = self.uninitialized_partitions(g) if g is not None else {}
        if not missing_by_topic:
            return
        now = self.c.now_ms()
        busy = self._initializing.setdefault(gid, {})
        todo: dict[bytes, tuple[str, list[int]]] = {}
        ended = asyncio.get_running_loop().create_future()
        for tid, (name, parts) in missing_by_topic.items():
            missing = [p for p in parts if now - busy.get((tid, p), (-INIT_RETRY_MS,))[0] >= INIT_RETRY_MS]
            if missing:
                todo[tid] = (name, missing)
                for p in missing:
                    busy[(tid, p)] = (now, ended)
        if todo:
            self.c.runtime.spawn(self._initialize(gid, todo, g.group_epoch, ended), "share state initialization")

    async def _initialize(self, gid: str, todo: dict[bytes, tuple[str, list[int]]], state_epoch: int,
                          ended: asyncio.Future) -> None:
        busy = self._initializing.get(gid, {})
        done: dict[bytes, tuple[str, set[int]]] = {}
        try:
            req = initialize_request(gid, {tid: dict.fromkeys(parts, -1) for tid, (_, parts) in todo.items()},
                                     state_epoch)
            resp = await self.share_state.initialize_state(req)
            for t in resp.results:
                for p in t.partitions:
                    if p.error_code == Errors.NONE:
                        done.setdefault(t.topic_id, (todo[t.topic_id][0], set()))[1].add(p.partition)
                    else:
                        log.warning("share group %s: initializing %s-%d failed: %s", gid, t.topic_id.hex(),
                                    p.partition, p.error_message)
            await self.c.runtime.write(lambda: (None, self.initialized_records(gid, done)))
        except Exception as e:  # noqa: BLE001 - the next heartbeat retries what was not recorded
            log.warning("share group %s: initializing share state failed: %r", gid, e)
        finally:
            for tid, (_, parts) in todo.items():
                for p in parts:
                    if busy.get((tid, p), (0, None))[1] is ended:  # not re-sent meanwhile
                        del busy[(tid, p)]
            if not ended.done():
                ended.set_result(None)

    def initialized_records(self, gid: str, done: dict[bytes, tuple[str, set[int]]]) -> list:
        """The ShareGroupStatePartitionMetadata record adding ``done`` to the initialized partitions."""
        g = self._group(gid)
        if g is None or not done:
            return []
        merged = {tid: (name, set(ps)) for tid, (name, ps) in g.initialized.items()}
        for tid, (name, ps) in done.items():
            merged.setdefault(tid, (name, set()))[1].update(ps)
        return [R.share_state_partitions(gid, merged)]

    # ------------------------------------------------------------ session expiry
    async def _expire(self, gid: str, mid: str) -> None:
        def op():
            g = self._group(gid)
            if g is None or mid not in g.members:
                return None, []
            log.info("share group %s: member %s session expired", gid, mid)
            return None, self._remove_member(g.copy(), mid)

        await self.c.runtime.write(op)

    # ------------------------------------------------------------ describe
    def describe(self, group_ids: list[str]) -> DescResp:
        out = []
        cluster = self.c.cluster
        for gid in group_ids:
            g = self.c.groups.get(gid)
            if not isinstance(g, ShareGroup):
                e = group_not_found(gid, g)
                out.append(DescResp.DescribedGroup(error_code=e.code, error_message=e.message, group_id=gid,
                                                   group_state="Dead"))
                continue
            members = []
            for m in g.members.values():
                tps = [DescResp.TopicPartitions(topic_id=t, topic_name=cluster.topic_name(t) or "",
                                                partitions=sorted(ps)) for t, ps in sorted(m.assigned.items())]
                members.append(DescResp.Member(member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
                                               client_id=m.client_id, client_host=m.client_host,
                                               subscribed_topic_names=sorted(m.subscribed_topic_names),
                                               assignment=DescResp.Assignment(topic_partitions=tps)))
            out.append(DescResp.DescribedGroup(group_id=gid, group_state=g.state_name(), group_epoch=g.group_epoch,
                                               assignment_epoch=g.assignment_epoch,
                                               assignor_name=self.assignor_name(gid),
                                               members=members))
        return DescResp(groups=out)
