"""The group coordinator: one namespace of groups, the offsets, and the ``__consumer_offsets`` log.

:class:`GroupCoordinator` owns ``groups`` (group id -> classic, consumer or share
group, one dict), the committed offsets and every group timer; each kind of group
has its manager (:class:`ClassicGroupManager`, :class:`ConsumerGroupManager`,
:class:`ShareGroupManager`).  Handlers call its async methods with decoded requests
and get responses back; nothing else changes group state.

Durability and replay.  Offsets, consumer groups and share groups change only by
records, through the coordinator's :class:`~coordinator.runtime.CoordinatorRuntime`:
an operation computes ``(response, records)`` from the committed state, the runtime
appends the records to the log and replays them through the same :meth:`replay`
that :meth:`load` runs once at start-up, then the response is returned.  Writers
are serialised in arrival order, so each computes on what its predecessor
committed; if an append fails nothing was applied and the request answers an
error (COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR, Kafka's mapping).  Classic
groups keep their live state in memory and write GroupMetadata records for
durability only (Kafka: ``replayRecords=false``), through the same runtime entry
point; those are replayed at load time.

Loading: :meth:`start_loading` replays ``__consumer_offsets`` in the background
(latest value per key, see :mod:`coordinator.runtime`); until it is done every entry
point answers COORDINATOR_LOAD_IN_PROGRESS in its API's shape, as Kafka's
GroupCoordinatorService does (a classic Heartbeat is answered NONE, "blindly", as
Kafka answers it), and timers start only once it is loaded.

Timers (sessions, rebalances, offset expiration) run on the ``scheduler``
(``call_later``); wall-clock milliseconds for record timestamps and KIP-211 come
from ``now_ms`` (default: the scheduler's ``now_ms`` if it has one, else
``time.time``).  Timer work that writes records runs as runtime tasks; :meth:`drain`
awaits them (tests, shutdown).

Share groups need the share-state persister (``share_state``: ``initialize_state``,
``delete_state`` and ``read_state_summary`` taking and returning the generated share-state
messages): a partition's state is initialized before it is first assigned, deleting a share
group deletes its durable state before telling the :meth:`on_group_deleted` listeners, and
the share-group offset admin APIs (:mod:`coordinator.group.share_offsets`) read and reset it.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable

from coordinator.runtime import CoordinatorRuntime, Record, RecordLog, decode_record, unavailable_message
from protocol.coordinator_records.registry import GROUP_COORDINATOR_RECORDS
from protocol.errors import Errors, KafkaError
from protocol.lazy_messages import (AlterShareGroupOffsetsResponse, ConsumerGroupDescribeResponse,
                                    ConsumerGroupHeartbeatResponse, DeleteGroupsResponse,
                                    DeleteShareGroupOffsetsResponse, DescribeGroupsResponse,
                                    DescribeShareGroupOffsetsResponse, HeartbeatResponse, JoinGroupResponse,
                                    LeaveGroupResponse, ListGroupsResponse, OffsetDeleteResponse,
                                    ShareGroupDescribeResponse, ShareGroupHeartbeatResponse,
                                    StreamsGroupDescribeResponse, StreamsGroupHeartbeatResponse, SyncGroupResponse)

from .base import Group, Write
from .classic import DEAD, ClassicGroup, ClassicGroupManager, append_error_code
from .cluster import Cluster, Scheduler, Timers
from .config import GroupConfig
from .consumer import GROUP_AUTHORIZED_OPERATIONS, INT_MIN, ConsumerGroup, ConsumerGroupManager
from .offsets import OffsetManager, OffsetStore
from .persister import delete_request
from .share import SHARE_RECORD_TYPES, ShareGroup, ShareGroupManager
from .share_offsets import ShareOffsetsManager
from .streams import STREAMS_RECORD_TYPES, StreamsGroup
from .streams_manager import StreamsGroupManager, follow_up_request

log = logging.getLogger(__name__)

EXPIRATION_TIMER = ("offsets-expiration",)
CONSUMER_RECORD_TYPES = frozenset({3, 5, 6, 7, 8})


class GroupCoordinator:
    def __init__(self, log: RecordLog, cluster: Cluster, config=None, scheduler: Scheduler | None = None,
                 now_ms: Callable[[], int] | None = None, group_configs=None, share_state=None):
        self.log = log
        self.cluster = cluster
        self.cfg = GroupConfig.from_broker_config(config)
        if scheduler is None:
            scheduler = asyncio.get_event_loop()
        self.scheduler = scheduler
        self.now_ms: Callable[[], int] = now_ms or getattr(scheduler, "now_ms", None) or \
            (lambda: int(time.time() * 1000))
        self.runtime = CoordinatorRuntime(log, GROUP_COORDINATOR_RECORDS, self._replay_record,
                                          name="group coordinator")
        self.timers = Timers(scheduler)
        self.groups: dict[str, Group] = {}
        self.offsets = OffsetStore()
        self.share_state = share_state
        self.classic = ClassicGroupManager(self)
        self.consumer = ConsumerGroupManager(self)
        self.share = ShareGroupManager(self, share_state)
        self.share_offsets = ShareOffsetsManager(self, share_state)
        self.streams = StreamsGroupManager(self)
        self.offset_manager = OffsetManager(self)
        self._group_configs: dict[str, dict[str, str]] = {}
        self._external_configs = group_configs  # anything with overrides(group_id) -> dict
        self._group_deleted: list[Callable[[str], object]] = []
        self.rebalances: dict[str, int] = {}  # protocol -> new target assignments since start-up

    # ------------------------------------------------------------ listeners and lookups
    def on_share_offsets_changed(self, fn: Callable[[str], object]) -> None:
        """``fn(group_id)`` (may be async) runs after AlterShareGroupOffsets / DeleteShareGroupOffsets
        changed an (empty) share group's durable share state: live share partitions must reload it."""
        self.share_offsets.on_changed(fn)

    def on_group_deleted(self, fn: Callable[[str], object]) -> None:
        """``fn(group_id)`` (may be async) runs after DeleteGroups deleted a share group and its share state."""
        self._group_deleted.append(fn)

    def lookup(self, group_id: str) -> Group | None:
        """The group with this id, whatever its type."""
        return self.groups.get(group_id)

    def share_members_assigned(self, group_id: str, topic_id: bytes, partition: int) -> list[str]:
        """The members of share group ``group_id`` whose current assignment holds the partition (the
        share-partition manager's fair acquisition asks whether another member would sit idle)."""
        g = self.groups.get(group_id)
        if not isinstance(g, ShareGroup):
            return []
        return [mid for mid, m in g.members.items() if partition in m.assigned.get(topic_id, ())]

    def group_type(self, group_id: str) -> str | None:
        """``"classic"`` / ``"consumer"`` / ``"share"`` / ``"streams"``, or None for an unknown group."""
        g = self.groups.get(group_id)
        return g.GROUP_TYPE if g is not None else None

    def group_config(self, group_id: str) -> dict[str, str]:
        """Per-group overrides: the broker's group config manager (if given), then set_group_config."""
        local = self._group_configs.get(group_id, {})
        if self._external_configs is None:
            return local
        external = self._external_configs.overrides(group_id)
        return {**external, **local} if local else external

    def set_group_config(self, group_id: str, key: str, value: str | None) -> None:
        """Dynamic per-group settings (``consumer.session.timeout.ms``, ``consumer.heartbeat.interval.ms``,
        ``consumer.auto.offset.reset`` for the lag assignor); None removes."""
        cfg = self._group_configs.setdefault(group_id, {})
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value

    # ------------------------------------------------------------ load / replay / write
    async def load(self) -> None:
        """Rebuild every group and offset from the record log (one replay), then start timers."""
        await self.runtime.load(latest_only=True, after=self._loaded)

    def start_loading(self, hold: Callable[[], Awaitable[None]] | None = None) -> None:
        """:meth:`load` in the background; COORDINATOR_LOAD_IN_PROGRESS until it is done."""
        self.runtime.start_loading(latest_only=True, before=hold, after=self._loaded)

    @property
    def _loading(self) -> bool:
        return self.runtime.loading

    def unavailable_code(self) -> int:
        """0 when serving, else the error every group API answers (COORDINATOR_LOAD_IN_PROGRESS while loading)."""
        return self.runtime.unavailable_code()

    async def wait_loaded(self) -> None:
        await self.runtime.wait_loaded()

    def _loaded(self) -> None:
        """After the replay: transactional offsets still pending, group timers, offset expiration."""
        for pid, held in (getattr(self.runtime.log, "open_transactions", None) or {}).items():
            for _offset, key, value in held:  # TxnOffsetCommits of transactions still open
                rec = decode_record(GROUP_COORDINATOR_RECORDS, key, value)
                if rec is not None and rec.record_type in (0, 1):
                    self.offsets.add_pending(pid, rec.key.group, rec.key.topic, rec.key.partition, rec.value)
        for group in self.groups.values():
            if isinstance(group, ClassicGroup):
                self.classic.on_loaded(group)
            elif isinstance(group, ConsumerGroup):
                self.consumer.on_loaded(group)
            elif isinstance(group, ShareGroup):
                self.share.on_loaded(group)
            elif isinstance(group, StreamsGroup):
                self.streams.on_loaded(group)
        self.schedule_expiration()

    def _replay_record(self, _offset: int, rec: Record) -> None:
        self.replay(rec)

    def replay(self, rec: Record) -> None:
        """Apply one ``__consumer_offsets`` record: the code start-up and every committed write run."""
        t = rec.record_type
        if t in (0, 1):
            self._replay_offset(rec.key, rec.value)
        elif t == 2:
            self._replay_group_metadata(rec.key, rec.value)
        elif t in CONSUMER_RECORD_TYPES:
            self._replay_modern(rec, ConsumerGroup, 3, self.consumer.new_group)
        elif t in SHARE_RECORD_TYPES:
            self._replay_modern(rec, ShareGroup, 11, ShareGroup)
        elif t in STREAMS_RECORD_TYPES:
            self._replay_modern(rec, StreamsGroup, 17, StreamsGroup)
        if t in (6, 12, 20) and rec.value is not None and not self._loading:
            # a new target assignment: Kafka's rebalance-count (group-coordinator-metrics) since start-up
            protocol = {6: "consumer", 12: "share", 20: "streams"}[t]
            self.rebalances[protocol] = self.rebalances.get(protocol, 0) + 1
        # 4 (ConsumerGroupPartitionMetadata, deprecated) and 16 (regular expressions) are not used.

    def apply(self, records: list[Record]) -> None:
        """Apply records at once, before they are written: classic groups' live state only."""
        for rec in records:
            self.replay(rec)

    def schedule_records(self, compute: Callable[[], list[Record]], what: str) -> None:
        """A timer's write: ``compute()`` runs on committed state when the runtime gets to it."""
        self.runtime.schedule(lambda: (None, compute()), what)

    async def _run_writes(self, writes: list[Write]) -> None:
        """Classic groups: write GroupMetadata for durability only, then run each write's ``done``."""
        queue = list(writes)
        while queue:
            w = queue.pop(0)
            exc = None
            try:
                await self.runtime.write(lambda recs=w.records: (None, recs), replay=False)
            except Exception as e:  # noqa: BLE001 - any append failure is reported to the operation
                log.warning("appending group metadata failed: %r", e)
                exc = e
            if w.done is not None:
                more = w.done(exc)
                if more:
                    queue.extend(more)

    def spawn_writes(self, writes: list[Write]) -> None:
        """Classic writes started by a timer."""
        if writes:
            self.runtime.spawn(self._run_writes(writes), "classic group write")

    async def drain(self) -> None:
        """Wait until background timer work (and what it triggered) has been persisted."""
        await self.runtime.drain()

    async def close(self) -> None:
        self.runtime.cancel_load()
        self.timers.cancel_all()
        for group in self.groups.values():
            if isinstance(group, ClassicGroup):
                for m in group.members.values():
                    group.complete_join_future(m, JoinGroupResponse(error_code=Errors.NOT_COORDINATOR,
                                                                    member_id=m.member_id))
                    group.complete_sync_future(m, SyncGroupResponse(error_code=Errors.NOT_COORDINATOR))
        self.share.close()
        await self.drain()

    # ------------------------------------------------------------ replay handlers
    def _remove_group(self, group_id: str) -> None:
        group = self.groups.pop(group_id, None)
        if isinstance(group, ClassicGroup):
            group.state = DEAD
            self.classic.on_removed(group)
        elif isinstance(group, ConsumerGroup):
            self.consumer.on_removed(group)
        elif isinstance(group, ShareGroup):
            self.share.on_removed(group)
        elif isinstance(group, StreamsGroup):
            self.streams.on_removed(group)

    def _replay_offset(self, key, value) -> None:
        if value is not None and key.group not in self.groups:
            # A commit from a consumer without group management: a "simple" classic group.
            self.groups[key.group] = ClassicGroup(key.group, self.now_ms())
        self.offsets.replay(key.group, key.topic, key.partition, value)

    def _replay_group_metadata(self, key, value) -> None:
        existing = self.groups.get(key.group)
        if value is None:
            if isinstance(existing, ClassicGroup):
                self._remove_group(key.group)
            return
        if existing is not None and not self._loading and isinstance(existing, ClassicGroup):
            return  # the in-memory classic group is the live state
        if existing is not None:
            self._remove_group(key.group)
        self.groups[key.group] = ClassicGroup.from_record(key.group, value, self.now_ms())

    def _replay_modern(self, rec: Record, cls, metadata_type: int, new: Callable[[str], Group]) -> None:
        """A consumer or share group record: the group-metadata tombstone deletes the group, any other
        record with a value creates it (replacing a group of another type); the group applies the rest."""
        gid = rec.key.group_id
        group = self.groups.get(gid)
        if rec.record_type == metadata_type and rec.value is None:
            if isinstance(group, cls):
                self._remove_group(gid)
            return
        if not isinstance(group, cls):
            if rec.value is None:
                return
            if group is not None:
                self._remove_group(gid)
            group = self.groups[gid] = new(gid)
        group.replay(rec)

    # ------------------------------------------------------------ classic protocol
    async def join_group(self, req, version: int, client_id: str = "", client_host: str = "") -> JoinGroupResponse:
        if not req.group_id:
            return JoinGroupResponse(error_code=Errors.INVALID_GROUP_ID, member_id=req.member_id)
        if not self.cfg.min_session_timeout_ms <= req.session_timeout_ms <= self.cfg.max_session_timeout_ms:
            return JoinGroupResponse(error_code=Errors.INVALID_SESSION_TIMEOUT, member_id=req.member_id)
        if code := self.unavailable_code():
            return JoinGroupResponse(error_code=code, member_id="")
        if version == 0:
            req.rebalance_timeout_ms = req.session_timeout_ms
        try:
            fut, writes = self.classic.join(req, version, client_id or "", client_host or "")
        except Exception:  # noqa: BLE001 - a coordinator error is an error code, not a closed connection
            log.exception("JoinGroup of group %s failed", req.group_id)
            return JoinGroupResponse(error_code=Errors.UNKNOWN_SERVER_ERROR, member_id=req.member_id)
        await self._run_writes(writes)
        return await fut

    async def sync_group(self, req, version: int) -> SyncGroupResponse:
        if not req.group_id:
            return SyncGroupResponse(error_code=Errors.INVALID_GROUP_ID)
        if code := self.unavailable_code():
            return SyncGroupResponse(error_code=code)
        try:
            fut, writes = self.classic.sync(req, version)
        except Exception:  # noqa: BLE001
            log.exception("SyncGroup of group %s failed", req.group_id)
            return SyncGroupResponse(error_code=Errors.UNKNOWN_SERVER_ERROR)
        await self._run_writes(writes)
        return await fut

    async def heartbeat(self, req, version: int):
        if not req.group_id:
            return HeartbeatResponse(error_code=Errors.INVALID_GROUP_ID)
        if code := self.unavailable_code():  # Kafka: "the group is still loading, so blindly respond"
            return HeartbeatResponse(error_code=Errors.NONE if code == Errors.COORDINATOR_LOAD_IN_PROGRESS else code)
        return self.classic.heartbeat(req)

    async def leave_group(self, req, version: int):
        if not req.group_id:
            return LeaveGroupResponse(error_code=Errors.INVALID_GROUP_ID)
        if code := self.unavailable_code():
            return LeaveGroupResponse(error_code=code)
        resp, writes = self.classic.leave(req, version)
        await self._run_writes(writes)
        return resp

    # ------------------------------------------------------------ KIP-848
    async def consumer_group_heartbeat(self, req, version: int, client_id: str = "", client_host: str = ""):
        if code := self.unavailable_code():
            try:
                self.consumer._validate(req, version)  # Kafka validates the request first
            except KafkaError as e:
                return ConsumerGroupHeartbeatResponse(error_code=e.code, error_message=e.message)
            return ConsumerGroupHeartbeatResponse(error_code=code, error_message=unavailable_message(code))

        def failed(_resp, exc):
            return ConsumerGroupHeartbeatResponse(error_code=append_error_code(exc))

        return await self.runtime.write(
            lambda: self.consumer.heartbeat(req, version, client_id or "", client_host or ""), on_error=failed)

    def consumer_group_describe(self, req, version: int):
        if code := self.unavailable_code():
            G = ConsumerGroupDescribeResponse.DescribedGroup
            return ConsumerGroupDescribeResponse(groups=[
                G(group_id=g, error_code=code if g else Errors.INVALID_GROUP_ID,
                  error_message=unavailable_message(code) if g else "GroupId can't be empty.") for g in req.group_ids])
        return self.consumer.describe(list(req.group_ids), req.include_authorized_operations)

    # ------------------------------------------------------------ KIP-1071
    async def streams_group_heartbeat(self, req, client_id: str = "", client_host: str = "",
                                      create_topics: Callable[[dict], Awaitable[tuple[list, dict]]] | None = None):
        """StreamsGroupHeartbeat.  ``create_topics({name: InternalTopic})`` (the broker's) creates the internal
        topics the topology misses and returns ``(names the caller may not create, {name: error})``; once they
        exist the answer comes from a second write computed on them (:mod:`coordinator.group.streams_manager`),
        else the MISSING_INTERNAL_TOPICS status says why, as KafkaApis.handleStreamsGroupHeartbeat."""
        if code := self.unavailable_code():
            try:
                self.streams.validate(req)  # Kafka validates the request first
            except KafkaError as e:
                return StreamsGroupHeartbeatResponse(error_code=e.code, error_message=e.message)
            return StreamsGroupHeartbeatResponse(error_code=code, error_message=unavailable_message(code))

        def failed(_resp, exc):
            return StreamsGroupHeartbeatResponse(error_code=append_error_code(exc)), {}

        resp, to_create = await self.runtime.write(
            lambda: self.streams.heartbeat(req, client_id or "", client_host or ""), on_error=failed)
        if not to_create or create_topics is None or resp.error_code:
            return resp
        unauthorized, errors = await create_topics(to_create)
        if unauthorized or errors:
            shown = ", ".join(f"{t} ({e})" for t, e in sorted(errors.items())[:3])
            more = f" and {len(errors) - 3} more" if len(errors) > 3 else ""
            for st in resp.status or ():
                if st.status_code == 3:  # MISSING_INTERNAL_TOPICS
                    if unauthorized:
                        st.status_detail += f"; Unauthorized to CREATE on topics {', '.join(unauthorized)}."
                    if errors:
                        st.status_detail += f"; Creation failed: {shown}{more}."
            return resp
        again = follow_up_request(req, resp)
        resp2, _ = await self.runtime.write(
            lambda: self.streams.heartbeat(again, client_id or "", client_host or "", follow_up=True),
            on_error=failed)
        return resp2 if not resp2.error_code else resp

    def streams_group_describe(self, req, version: int):
        if code := self.unavailable_code():
            G = StreamsGroupDescribeResponse.DescribedGroup
            return StreamsGroupDescribeResponse(groups=[
                G(group_id=g, error_code=code if g else Errors.INVALID_GROUP_ID,
                  error_message=unavailable_message(code) if g else "GroupId can't be empty.") for g in req.group_ids])
        return self.streams.describe(list(req.group_ids), req.include_authorized_operations)

    # ------------------------------------------------------------ KIP-932
    async def share_group_heartbeat(self, req, client_id: str = "", client_host: str = "") \
            -> ShareGroupHeartbeatResponse:
        if code := self.unavailable_code():
            try:
                self.share._validate(req)  # Kafka validates the request first
            except KafkaError as e:
                return ShareGroupHeartbeatResponse(error_code=e.code, error_message=e.message)
            return ShareGroupHeartbeatResponse(error_code=code, error_message=unavailable_message(code))
        return await self.share.heartbeat(req, client_id, client_host)

    def share_group_describe(self, req, version: int = 1) -> ShareGroupDescribeResponse:
        if code := self.unavailable_code():
            G = ShareGroupDescribeResponse.DescribedGroup
            return ShareGroupDescribeResponse(groups=[
                G(group_id=g, error_code=code, error_message=unavailable_message(code)) for g in req.group_ids])
        return self.share.describe(list(req.group_ids))

    async def describe_share_group_offsets(self, req, version: int):
        """DescribeShareGroupOffsets v0-1 (v1: KIP-1226 lag)."""
        if code := self.unavailable_code():
            R_ = DescribeShareGroupOffsetsResponse
            return R_(groups=[R_.DescribeShareGroupOffsetsResponseGroup(
                group_id=g.group_id, error_code=code, error_message=unavailable_message(code), topics=[])
                for g in req.groups])
        return await self.share_offsets.describe(req, version)

    async def alter_share_group_offsets(self, req, version: int = 0):
        """AlterShareGroupOffsets v0: new start offsets for an empty share group."""
        if code := self.unavailable_code():
            return AlterShareGroupOffsetsResponse(error_code=code, error_message=unavailable_message(code))
        return await self.share_offsets.alter(req)

    async def delete_share_group_offsets(self, req, version: int = 0):
        """DeleteShareGroupOffsets v0: forget an empty share group's state for some topics."""
        if code := self.unavailable_code():
            return DeleteShareGroupOffsetsResponse(error_code=code, error_message=unavailable_message(code))
        return await self.share_offsets.delete(req)

    # ------------------------------------------------------------ offsets
    async def offset_commit(self, req, version: int):
        if code := self.unavailable_code():
            return self.offset_manager.commit(req, version, error=code)[0]
        return await self.runtime.write(lambda: self.offset_manager.commit(req, version), on_error=_failed_commit)

    async def txn_offset_commit(self, req, producer_id: int, producer_epoch: int, by_id: bool = False):
        """TxnOffsetCommit: the offsets are appended in the producer's transaction and held pending."""
        if code := self.unavailable_code():
            return self.offset_manager.txn_commit(req, by_id, error=code)[0]

        def failed(result, exc):
            return _failed_commit(result[0], exc), []

        resp, held = await self.runtime.write(lambda: _with_records(self.offset_manager.txn_commit(req, by_id)),
                                              replay=False, on_error=failed, producer=(producer_id, producer_epoch))
        for rec in held:
            self.offsets.add_pending(producer_id, rec.key.group, rec.key.topic, rec.key.partition, rec.value)
        return resp

    def complete_transaction(self, producer_id: int, commit: bool) -> int:
        """The producer's transaction marker was written to ``__consumer_offsets``."""
        if commit:
            for group_id, _topic, _partition in self.offsets.pending.get(producer_id, {}):
                if group_id not in self.groups:  # as a replayed commit: a "simple" classic group
                    self.groups[group_id] = ClassicGroup(group_id, self.now_ms())
        return self.offsets.complete_transaction(producer_id, commit)

    async def offset_fetch(self, req, version: int):
        return self.offset_manager.fetch(req, version, error=self.unavailable_code())

    async def offset_delete(self, req, version: int):
        if code := self.unavailable_code():
            return OffsetDeleteResponse(error_code=code, topics=[])

        def failed(resp, exc):
            resp.error_code = append_error_code(exc)
            resp.topics = []
            return resp

        return await self.runtime.write(lambda: self.offset_manager.delete(req), on_error=failed)

    # ------------------------------------------------------------ admin
    def list_groups(self, req, version: int) -> ListGroupsResponse:
        if code := self.unavailable_code():
            return ListGroupsResponse(error_code=code, groups=[])
        states = {s.lower() for s in req.states_filter} if version >= 4 else set()
        types = {t.lower() for t in req.types_filter} if version >= 5 else set()
        out = []
        for gid, g in self.groups.items():
            state = g.state_name()
            if states and state.lower() not in states:
                continue
            if types and g.GROUP_TYPE not in types:
                continue
            out.append(ListGroupsResponse.ListedGroup(group_id=gid, protocol_type=g.protocol_type_name(),
                                                      group_state=state, group_type=g.GROUP_TYPE))
        return ListGroupsResponse(error_code=Errors.NONE, groups=out)

    def describe_groups(self, req, version: int) -> DescribeGroupsResponse:
        D = DescribeGroupsResponse
        include_ops = version >= 3 and req.include_authorized_operations
        out = []
        code = self.unavailable_code()
        for gid in req.groups:
            g = self.groups.get(gid)
            if code and gid:  # Kafka's DescribeGroupsResponse.groupError
                d = D.DescribedGroup(group_id=gid, error_code=code, group_state="", protocol_type="",
                                     protocol_data="", members=[])
            elif not gid:
                d = D.DescribedGroup(group_id=gid, error_code=Errors.INVALID_GROUP_ID, group_state="",
                                     protocol_type="", protocol_data="", members=[])
            elif isinstance(g, ClassicGroup):
                d = g.describe()
            else:
                msg = f"Group {gid} not found." if g is None else f"Group {gid} is not a classic group."
                d = D.DescribedGroup(group_id=gid, group_state=DEAD, protocol_type="", protocol_data="", members=[])
                if version >= 6:
                    d.error_code = Errors.GROUP_ID_NOT_FOUND
                    d.error_message = msg
            d.authorized_operations = GROUP_AUTHORIZED_OPERATIONS if include_ops else INT_MIN
            out.append(d)
        return D(groups=out)

    async def delete_groups(self, req, version: int) -> DeleteGroupsResponse:
        """Tombstone empty groups (and their offsets) in one write; share groups also lose their share state."""
        if code := self.unavailable_code():
            R_ = DeleteGroupsResponse.DeletableGroupResult
            return DeleteGroupsResponse(results=[R_(group_id=g, error_code=code if g else Errors.INVALID_GROUP_ID)
                                                 for g in req.groups_names])

        def failed(result, exc):
            resp = result[0]
            code = append_error_code(exc)
            for r in resp.results:
                if not r.error_code:
                    r.error_code = code
            return resp, {}

        resp, share_groups = await self.runtime.write(lambda: self._delete_groups(req), on_error=failed)
        for gid, initialized in share_groups.items():
            try:
                await self._share_group_deleted(gid, initialized)
            except KafkaError as e:
                _result(resp, gid).error_code = e.code
            except Exception as e:  # noqa: BLE001
                log.exception("deleting the share state of group %s failed", gid)
                _result(resp, gid).error_code = append_error_code(e)
        return resp

    def _delete_groups(self, req) -> tuple[tuple[DeleteGroupsResponse, dict], list[Record]]:
        """The write: ((response, {deleted share group: its initialized partitions}), tombstones)."""
        R_ = DeleteGroupsResponse.DeletableGroupResult
        results, records = [], []
        share_groups: dict[str, dict[bytes, set[int]]] = {}
        for gid in req.groups_names:
            g = self.groups.get(gid)
            if not gid:
                results.append(R_(group_id=gid, error_code=Errors.INVALID_GROUP_ID))
                continue
            if g is None:
                results.append(R_(group_id=gid, error_code=Errors.GROUP_ID_NOT_FOUND))
                continue
            try:
                g.validate_delete()
            except KafkaError as e:
                results.append(R_(group_id=gid, error_code=e.code))
                continue
            records.extend((self.offsets.tombstones(gid) if g.has_offsets() else []) + g.tombstones())
            if isinstance(g, ShareGroup):
                share_groups[gid] = {t: set(ps) for t, (_name, ps) in g.initialized.items()}
            results.append(R_(group_id=gid, error_code=Errors.NONE))
        return (DeleteGroupsResponse(results=results), share_groups), records

    async def _share_group_deleted(self, group_id: str, initialized: dict[bytes, set[int]]) -> None:
        """After a share group's records are gone: delete its durable share state, then tell the listeners."""
        if initialized and self.share_state is not None:
            await self.share_state.delete_state(delete_request(group_id, initialized))
        for fn in self._group_deleted:
            r = fn(group_id)
            if isinstance(r, Awaitable):
                await r

    # ------------------------------------------------------------ KIP-211 expiration
    async def expire_offsets(self) -> int:
        """One cleanup pass (Kafka's cleanupGroupMetadata); returns the number of offsets removed."""
        def op():
            now = self.now_ms()
            retention = self.cfg.offsets_retention_ms
            records: list = []
            expired = 0
            for gid, group in self.groups.items():
                if not group.has_offsets():
                    continue
                recs, all_expired = self.offset_manager.expire_group(gid, group, now, retention)
                records.extend(recs)
                expired += len(recs)
                if all_expired and group.is_empty():
                    records.extend(group.tombstones())
            return expired, records

        return await self.runtime.write(op)

    def schedule_expiration(self) -> None:
        interval = self.cfg.offsets_retention_check_interval_ms
        if interval > 0:
            self.timers.schedule(EXPIRATION_TIMER, interval,
                                 lambda: self.runtime.spawn(self._expiration_tick(), "offset expiration"))

    async def _expiration_tick(self) -> None:
        try:
            await self.expire_offsets()
        except Exception:  # noqa: BLE001
            log.exception("offset expiration failed")
        finally:
            self.schedule_expiration()


def _with_records(op_result: tuple) -> tuple:
    """``(response, records)`` -> ``((response, records), records)``: a write whose caller needs its records."""
    return op_result, op_result[1]


def _result(resp: DeleteGroupsResponse, group_id: str):
    return next(r for r in resp.results if r.group_id == group_id)


def _failed_commit(resp, exc):
    """An (Txn)OffsetCommit whose append failed: the append's error code on every partition not failed yet."""
    code = append_error_code(exc)
    for t in resp.topics:
        for p in t.partitions:
            if not p.error_code:
                p.error_code = code
    return resp
