"""The group coordinator: one namespace of groups, the offsets, and the ``__consumer_offsets`` log.

:class:`GroupCoordinator` owns ``groups`` (group id -> classic, consumer or, later,
share group), the committed offsets and every group timer.  Handlers call its
async methods with decoded requests and get responses back; nothing else changes
group state.

Durability and replay.  Offsets and consumer (KIP-848) groups change only by
records: an operation produces ``(response, records)``, the records are applied
through the same :meth:`replay` that :meth:`load` runs at start-up, appended to
the record log, and only once the append is durable is the response returned.
Records are applied as soon as they are produced (like Kafka's uncommitted
coordinator state), so a request that interleaves with another one's append
sees its effects instead of racing it; if an append fails, the record-derived
state is rebuilt from the log and the request answers an error.  Classic groups
keep their live state in memory and write GroupMetadata records for durability
only (Kafka: ``replayRecords=false``); those are replayed at load time.

Timers (sessions, rebalances, offset expiration) run on the ``scheduler``
(``call_later``); wall-clock milliseconds for record timestamps and KIP-211 come
from ``now_ms`` (default: the scheduler's ``now_ms`` if it has one, else
``time.time``).  Timer work that writes records runs as tasks; :meth:`drain`
awaits them (tests, shutdown).

Share groups plug in by putting their Group objects in ``groups`` and calling
:meth:`register_record_type` for their record types (10-15).
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

from coordinator.runtime import RecordLog, decode_record, encode_record
from protocol.coordinator_records.registry import GROUP_COORDINATOR_RECORDS
from protocol.errors import Errors, KafkaError
from protocol.messages.describe_groups import DescribeGroupsResponse
from protocol.messages.delete_groups import DeleteGroupsResponse
from protocol.messages.join_group import JoinGroupResponse
from protocol.messages.list_groups import ListGroupsResponse
from protocol.messages.sync_group import SyncGroupResponse

from .base import Group, Write
from .classic import DEAD, ClassicGroup, ClassicGroupManager, append_error_code
from .cluster import Cluster, Scheduler, Timers
from .config import GroupConfig
from .consumer import GROUP_AUTHORIZED_OPERATIONS, INT_MIN, ConsumerGroup, ConsumerGroupManager
from .offsets import OffsetManager, OffsetStore

log = logging.getLogger(__name__)

EXPIRATION_TIMER = ("offsets-expiration",)


class GroupCoordinator:
    def __init__(self, log: RecordLog, cluster: Cluster, config=None, scheduler: Scheduler | None = None,
                 now_ms: Callable[[], int] | None = None, group_configs=None):
        self.log = log
        self.cluster = cluster
        self.cfg = GroupConfig.from_broker_config(config)
        if scheduler is None:
            scheduler = asyncio.get_event_loop()
        self.scheduler = scheduler
        self.now_ms: Callable[[], int] = now_ms or getattr(scheduler, "now_ms", None) or \
            (lambda: int(time.time() * 1000))
        self.timers = Timers(scheduler)
        self.groups: dict[str, Group] = {}
        self.offsets = OffsetStore()
        self.classic = ClassicGroupManager(self)
        self.consumer = ConsumerGroupManager(self)
        self.offset_manager = OffsetManager(self)
        self._group_configs: dict[str, dict[str, str]] = {}
        self._external_configs = group_configs  # anything with overrides(group_id) -> dict
        self._foreign_groups: Callable[[], dict] = dict
        self._foreign_delete: Callable | None = None
        self._tasks: set[asyncio.Task] = set()
        self._loading = False
        self._handlers: dict[int, Callable] = {
            0: self._replay_offset, 1: self._replay_offset, 2: self._replay_group_metadata,
            3: self._replay_consumer_epoch, 4: _ignore, 5: self._replay_consumer_member,
            6: self._replay_consumer_target_epoch, 7: self._replay_consumer_target_member,
            8: self._replay_consumer_current, 16: _ignore,
        }

    # ------------------------------------------------------------ extension points
    def register_record_type(self, record_type: int, handler: Callable[[object, object], None]) -> None:
        """Route replay of ``record_type`` (key, value-or-None) to ``handler`` (share groups)."""
        self._handlers[record_type] = handler

    def attach_foreign_groups(self, groups: Callable[[], dict], delete: Callable | None = None) -> None:
        """Share the group id namespace with groups owned elsewhere (the share group coordinator).

        ``groups()`` returns their ``{group_id: group}`` (objects with the :class:`Group`
        interface: ``GROUP_TYPE``, ``state_name()``, ``protocol_type_name()``, ``is_empty()``);
        ``delete(group_id)`` (async) deletes one for DeleteGroups.  They are listed by
        ListGroups, and using their ids with another group type fails as in Kafka.
        """
        self._foreign_groups = groups
        self._foreign_delete = delete

    def lookup(self, group_id: str) -> Group | None:
        """The group with this id, whatever its type (ours or attached)."""
        g = self.groups.get(group_id)
        return g if g is not None else self._foreign_groups().get(group_id)

    def group_type(self, group_id: str) -> str | None:
        """``"classic"`` / ``"consumer"`` for our groups, None otherwise (for the share coordinator)."""
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

    # ------------------------------------------------------------ load / replay / persist
    async def load(self) -> None:
        """Rebuild every group and offset from the record log, then start timers."""
        self._loading = True
        try:
            for _offset, key, value in self.log.replay():
                rec = decode_record(GROUP_COORDINATOR_RECORDS, key, value)
                if rec is not None:
                    self.replay(rec.key, rec.value)
        finally:
            self._loading = False
        for group in self.groups.values():
            if isinstance(group, ClassicGroup):
                self.classic.on_loaded(group)
            elif isinstance(group, ConsumerGroup):
                self.consumer.on_loaded(group)
        self.schedule_expiration()

    def replay(self, key, value) -> None:
        handler = self._handlers.get(type(key).API_KEY)
        if handler is not None:
            handler(key, value)

    def apply(self, records: list) -> None:
        for key, value, _version in records:
            self.replay(key, value)

    async def _persist(self, records: list) -> None:
        if records:
            await self.log.append([encode_record(k, v, ver) for k, v, ver in records])

    async def _commit(self, records: list) -> None:
        """Persist records that were already applied; on failure rebuild the record-derived state."""
        try:
            await self._persist(records)
        except Exception:
            log.exception("appending %d group coordinator records failed; rebuilding from the log", len(records))
            self._rebuild()
            raise

    def _rebuild(self) -> None:
        for gid, group in list(self.groups.items()):
            if isinstance(group, ConsumerGroup):
                self.consumer.on_removed(group)
                del self.groups[gid]
        self.offsets.clear()
        for _offset, key, value in self.log.replay():
            rec = decode_record(GROUP_COORDINATOR_RECORDS, key, value)
            if rec is not None and rec.record_type != 2:
                self.replay(rec.key, rec.value)
        for group in self.groups.values():
            if isinstance(group, ConsumerGroup):
                self.consumer.on_loaded(group)

    async def _run_writes(self, writes: list[Write]) -> None:
        queue = list(writes)
        while queue:
            w = queue.pop(0)
            exc = None
            try:
                await self._persist(w.records)
            except Exception as e:  # noqa: BLE001 - any append failure is reported to the operation
                log.warning("appending group metadata failed: %r", e)
                exc = e
            if w.done is not None:
                more = w.done(exc)
                if more:
                    queue.extend(more)

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def spawn_writes(self, writes: list[Write]) -> None:
        if writes:
            self._spawn(self._run_writes(writes))

    def spawn_records(self, records: list) -> None:
        if records:
            self._spawn(self._commit_quietly(records))

    async def _commit_quietly(self, records: list) -> None:
        try:
            await self._commit(records)
        except Exception:  # noqa: BLE001 - already logged and rolled back
            pass

    async def drain(self) -> None:
        """Wait until background timer work (and what it triggered) has been persisted."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        self.timers.cancel_all()
        for group in self.groups.values():
            if isinstance(group, ClassicGroup):
                for m in group.members.values():
                    group.complete_join_future(m, JoinGroupResponse(error_code=Errors.NOT_COORDINATOR,
                                                                    member_id=m.member_id))
                    group.complete_sync_future(m, SyncGroupResponse(error_code=Errors.NOT_COORDINATOR))
        await self.drain()

    # ------------------------------------------------------------ replay handlers
    def _remove_group(self, group_id: str) -> None:
        group = self.groups.pop(group_id, None)
        if isinstance(group, ClassicGroup):
            group.state = DEAD
            self.classic.on_removed(group)
        elif isinstance(group, ConsumerGroup):
            self.consumer.on_removed(group)

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

    def _consumer_group(self, group_id: str, create: bool) -> ConsumerGroup | None:
        group = self.groups.get(group_id)
        if isinstance(group, ConsumerGroup):
            return group
        if not create:
            return None
        if group is not None:
            self._remove_group(group_id)
        group = self.groups[group_id] = self.consumer.new_group(group_id)
        return group

    def _replay_consumer_epoch(self, key, value) -> None:
        if value is None:
            if isinstance(self.groups.get(key.group_id), ConsumerGroup):
                self._remove_group(key.group_id)
            return
        group = self._consumer_group(key.group_id, True)
        group.group_epoch = value.epoch
        group.metadata_hash = value.metadata_hash

    def _replay_consumer_member(self, key, value) -> None:
        group = self._consumer_group(key.group_id, value is not None)
        if group is not None:
            group.replay_member_metadata(key.member_id, value)

    def _replay_consumer_target_epoch(self, key, value) -> None:
        group = self._consumer_group(key.group_id, value is not None)
        if group is not None:
            group.assignment_epoch = -1 if value is None else value.assignment_epoch

    def _replay_consumer_target_member(self, key, value) -> None:
        group = self._consumer_group(key.group_id, value is not None)
        if group is not None:
            group.replay_target_member(key.member_id, value)

    def _replay_consumer_current(self, key, value) -> None:
        group = self._consumer_group(key.group_id, value is not None)
        if group is not None:
            group.replay_current_assignment(key.member_id, value)

    # ------------------------------------------------------------ classic protocol
    async def join_group(self, req, version: int, client_id: str = "", client_host: str = "") -> JoinGroupResponse:
        if not req.group_id:
            return JoinGroupResponse(error_code=Errors.INVALID_GROUP_ID, member_id=req.member_id)
        if not self.cfg.min_session_timeout_ms <= req.session_timeout_ms <= self.cfg.max_session_timeout_ms:
            return JoinGroupResponse(error_code=Errors.INVALID_SESSION_TIMEOUT, member_id=req.member_id)
        if version == 0:
            req.rebalance_timeout_ms = req.session_timeout_ms
        fut, writes = self.classic.join(req, version, client_id or "", client_host or "")
        await self._run_writes(writes)
        return await fut

    async def sync_group(self, req, version: int) -> SyncGroupResponse:
        if not req.group_id:
            return SyncGroupResponse(error_code=Errors.INVALID_GROUP_ID)
        fut, writes = self.classic.sync(req, version)
        await self._run_writes(writes)
        return await fut

    async def heartbeat(self, req, version: int):
        from protocol.messages.heartbeat import HeartbeatResponse
        if not req.group_id:
            return HeartbeatResponse(error_code=Errors.INVALID_GROUP_ID)
        return self.classic.heartbeat(req)

    async def leave_group(self, req, version: int):
        from protocol.messages.leave_group import LeaveGroupResponse
        if not req.group_id:
            return LeaveGroupResponse(error_code=Errors.INVALID_GROUP_ID)
        resp, writes = self.classic.leave(req, version)
        await self._run_writes(writes)
        return resp

    # ------------------------------------------------------------ KIP-848
    async def consumer_group_heartbeat(self, req, version: int, client_id: str = "", client_host: str = ""):
        resp, records = self.consumer.heartbeat(req, version, client_id or "", client_host or "")
        try:
            await self._commit(records)
        except Exception as e:  # noqa: BLE001
            return type(resp)(error_code=append_error_code(e))
        return resp

    def consumer_group_describe(self, req, version: int):
        return self.consumer.describe(list(req.group_ids), req.include_authorized_operations)

    # ------------------------------------------------------------ offsets
    async def offset_commit(self, req, version: int):
        resp, records = self.offset_manager.commit(req, version)
        self.apply(records)
        try:
            await self._commit(records)
        except Exception as e:  # noqa: BLE001
            code = append_error_code(e)
            for t in resp.topics:
                for p in t.partitions:
                    if not p.error_code:
                        p.error_code = code
        return resp

    async def offset_fetch(self, req, version: int):
        return self.offset_manager.fetch(req, version)

    async def offset_delete(self, req, version: int):
        resp, records = self.offset_manager.delete(req)
        self.apply(records)
        try:
            await self._commit(records)
        except Exception as e:  # noqa: BLE001
            resp.error_code = append_error_code(e)
            resp.topics = []
        return resp

    # ------------------------------------------------------------ admin
    def list_groups(self, req, version: int) -> ListGroupsResponse:
        states = {s.lower() for s in req.states_filter} if version >= 4 else set()
        types = {t.lower() for t in req.types_filter} if version >= 5 else set()
        out = []
        everything = dict(self._foreign_groups())
        everything.update(self.groups)
        for gid, g in everything.items():
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
        for gid in req.groups:
            g = self.lookup(gid)
            if not gid:
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
        R_ = DeleteGroupsResponse.DeletableGroupResult
        results, records = [], []
        foreign = []
        for gid in req.groups_names:
            g = self.lookup(gid)
            if not gid:
                results.append(R_(group_id=gid, error_code=Errors.INVALID_GROUP_ID))
                continue
            if g is None:
                results.append(R_(group_id=gid, error_code=Errors.GROUP_ID_NOT_FOUND))
                continue
            try:
                if hasattr(g, "validate_delete"):
                    g.validate_delete()
                elif not g.is_empty():
                    raise KafkaError(Errors.NON_EMPTY_GROUP)
            except KafkaError as e:
                results.append(R_(group_id=gid, error_code=e.code))
                continue
            if gid not in self.groups:
                if self._foreign_delete is None:
                    results.append(R_(group_id=gid, error_code=Errors.GROUP_ID_NOT_FOUND))
                else:
                    foreign.append(gid)
                    results.append(R_(group_id=gid, error_code=Errors.NONE))
                continue
            recs = (self.offsets.tombstones(gid) if g.has_offsets() else []) + g.tombstones()
            self.apply(recs)
            records.extend(recs)
            results.append(R_(group_id=gid, error_code=Errors.NONE))
        try:
            await self._commit(records)
        except Exception as e:  # noqa: BLE001
            code = append_error_code(e)
            for r in results:
                if not r.error_code and r.group_id not in foreign:
                    r.error_code = code
        for gid in foreign:
            try:
                await self._foreign_delete(gid)
            except KafkaError as e:
                next(r for r in results if r.group_id == gid).error_code = e.code
            except Exception as e:  # noqa: BLE001
                next(r for r in results if r.group_id == gid).error_code = append_error_code(e)
        return DeleteGroupsResponse(results=results)

    # ------------------------------------------------------------ KIP-211 expiration
    async def expire_offsets(self) -> int:
        """One cleanup pass (Kafka's cleanupGroupMetadata); returns the number of offsets removed."""
        now = self.now_ms()
        retention = self.cfg.offsets_retention_ms
        records: list = []
        expired = 0
        for gid, group in list(self.groups.items()):
            if group.GROUP_TYPE not in ("classic", "consumer"):
                continue
            recs, all_expired = self.offset_manager.expire_group(gid, group, now, retention)
            self.apply(recs)
            records.extend(recs)
            expired += len(recs)
            if all_expired and group.is_empty():
                tomb = group.tombstones()
                self.apply(tomb)
                records.extend(tomb)
        await self._commit(records)
        return expired

    def schedule_expiration(self) -> None:
        interval = self.cfg.offsets_retention_check_interval_ms
        if interval > 0:
            self.timers.schedule(EXPIRATION_TIMER, interval, lambda: self._spawn(self._expiration_tick()))

    async def _expiration_tick(self) -> None:
        try:
            await self.expire_offsets()
        except Exception:  # noqa: BLE001
            log.exception("offset expiration failed")
        finally:
            self.schedule_expiration()


def _ignore(key, value) -> None:
    return None
