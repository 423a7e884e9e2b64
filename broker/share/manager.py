"""Share-partition manager: the broker side of ShareFetch / ShareAcknowledge.

Owns the ``SharePartition`` of every (group, topic id, partition) that has been
fetched, the share-session cache, and one live ``ShareGroupConfig`` per group kept
in step with the group's dynamic configs.  The share coordinator is the persister
(called in process with the same request objects the wire uses).

Wake-ups for waiting ShareFetches go through the broker's watchers: a share
partition's state change (release, lock expiry, acknowledgement freeing lock
capacity, SPSO move) notifies ``("share", group, topic_id, partition)``; new data
notifies ``("log", topic, partition)`` as for Fetch.

Records go back to AVAILABLE when a member's share session closes (final epoch,
connection closed) and when the member leaves the group or its session times
out, as Kafka 4.4 does.
"""
from __future__ import annotations

import logging
from typing import Callable

from broker.share.config import ShareGroupConfig
from broker.share.errors import ShareError
from broker.share.partition import SharePartition
from broker.share.session import ShareSessionCache
from protocol.errors import Errors

log = logging.getLogger("sharebroker.share")


class ShareManager:
    """Collaborators: the broker ``config``, the ``logs`` (partition logs by topic id), the
    ``watchers`` long polls wait on, the ``persister`` (share coordinator), the
    ``group_configs`` (per-group overrides), a ``scheduler`` (the event loop) and ``now_ms``.
    The builder connects its event methods (:meth:`group_config_changed`,
    :meth:`topic_deleted`, :meth:`member_removed`) to their sources."""

    def __init__(self, config, *, logs, watchers, persister, group_configs, scheduler,
                 now_ms: Callable[[], int]):
        self.logs = logs
        self.watchers = watchers
        self.persister = persister
        self.group_configs = group_configs
        self.scheduler = scheduler
        self.now_ms = now_ms
        self.partitions: dict[tuple[str, bytes, int], SharePartition] = {}
        self.configs: dict[str, ShareGroupConfig] = {}
        # KIP-932: sessions inactive for 120 s are evicted (Kafka has no setting for it; this name is ours).
        self.idle_ms = config.get_int("sharebroker.share.session.idle.timeout.ms", 120_000)
        self.sessions = ShareSessionCache(config.get_int("group.share.max.share.sessions", 2000),
                                          now_ms=now_ms, idle_timeout_ms=self.idle_ms,
                                          on_close=self._session_closed)
        self._sweep = scheduler.call_later(self.idle_ms / 2000.0, self._evict_idle)
        self._tracked_connections: set[int] = set()

    # ------------------------------------------------------------------ configs
    def group_config(self, group_id: str) -> ShareGroupConfig:
        c = self.configs.get(group_id)
        if c is None:
            c = self.configs[group_id] = ShareGroupConfig()
            self._apply(group_id, c)
        return c

    def _apply(self, group_id: str, c: ShareGroupConfig) -> None:
        gc = self.group_configs
        try:
            c.update(record_lock_duration_ms=gc.get_int(group_id, "share.record.lock.duration.ms"),
                     delivery_count_limit=gc.get_int(group_id, "share.delivery.count.limit"),
                     partition_max_record_locks=gc.get_int(group_id, "share.partition.max.record.locks"),
                     auto_offset_reset=gc.get(group_id, "share.auto.offset.reset"),
                     renew_acknowledge_enable=gc.get_bool(group_id, "share.renew.acknowledge.enable"),
                     isolation_level=gc.get(group_id, "share.isolation.level").lower())
        except ShareError as e:
            log.warning("group %s: share configs not applied: %s", group_id, e)

    def group_config_changed(self, group_id: str) -> None:
        c = self.configs.get(group_id)
        if c is not None:
            self._apply(group_id, c)
            for (g, tid, p), sp in self.partitions.items():
                if g == group_id:
                    self.watchers.notify(("share", g, tid, p))

    # ------------------------------------------------------------------ partitions
    def topic_log(self, topic_id: bytes, partition: int):
        info = self.logs.topic_by_id(topic_id)
        if info is None or not 0 <= partition < info.partitions:
            return None, None
        return info.name, info.logs[partition]

    async def partition(self, group_id: str, topic_id: bytes, partition: int) -> SharePartition:
        """The initialized share partition; raises ShareError (e.g. UNKNOWN_TOPIC_OR_PARTITION)."""
        key = (group_id, topic_id, partition)
        sp = self.partitions.get(key)
        if sp is None:
            name, plog = self.topic_log(topic_id, partition)
            if plog is None:
                raise ShareError(Errors.UNKNOWN_TOPIC_OR_PARTITION)
            watchers = self.watchers
            sp = SharePartition(group_id, topic_id, partition, log=plog, persister=self.persister,
                                config=self.group_config(group_id), scheduler=self.scheduler, now_ms=self.now_ms,
                                on_state_change=lambda: watchers.notify(("share",) + key))
            self.partitions[key] = sp
        if sp.status != "ACTIVE":
            try:
                await sp.initialize()
            except ShareError:
                if self.partitions.get(key) is sp:
                    del self.partitions[key]
                    sp.close()
                raise
        return sp

    async def release(self, group_id: str, member_id: str, keys) -> None:
        for tid, p in keys:
            sp = self.partitions.get((group_id, tid, p))
            if sp is not None:
                try:
                    await sp.release_member(member_id)
                except Exception:
                    log.exception("releasing records of %s in %s failed", member_id, sp)

    # ------------------------------------------------------------------ events
    def track_connection(self, connection) -> None:
        cid = id(connection)
        if cid not in self._tracked_connections:
            self._tracked_connections.add(cid)

            def closed(_conn, cid=cid):
                self._tracked_connections.discard(cid)
                self.sessions.connection_closed(cid)

            connection.on_close(closed)

    def _session_closed(self, session) -> None:
        if session is None:
            return
        self.scheduler.create_task(self.release(session.group_id, session.member_id, list(session.partitions)))

    def member_removed(self, group_id: str, member_id: str) -> None:
        """A member left the group or timed out: close its session, release what it holds."""
        self.sessions.close(group_id, member_id)
        keys = [(tid, p) for (g, tid, p) in self.partitions if g == group_id]
        self.scheduler.create_task(self.release(group_id, member_id, keys))

    def topic_deleted(self, name: str, topic_id: bytes) -> None:
        for key in [k for k in self.partitions if k[1] == topic_id]:
            self.partitions.pop(key).close()

    async def drop_group(self, group_id: str) -> None:
        """Forget a deleted group's share partitions and sessions."""
        for key in [k for k in self.partitions if k[0] == group_id]:
            self.partitions.pop(key).close()
        for s in [s for s in self.sessions.sessions() if s.group_id == group_id]:
            self.sessions.close(s.group_id, s.member_id)
        self.configs.pop(group_id, None)

    def _evict_idle(self) -> None:
        for session in self.sessions.evict_idle():
            log.info("share session %s/%s evicted after %d ms idle", session.group_id, session.member_id,
                     self.idle_ms)
        self._sweep = self.scheduler.call_later(self.idle_ms / 2000.0, self._evict_idle)

    async def close(self) -> None:
        self._sweep.cancel()
        for sp in self.partitions.values():
            sp.close()
        self.partitions.clear()
