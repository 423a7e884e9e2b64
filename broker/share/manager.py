"""Share-partition manager: the work of ShareFetch / ShareAcknowledge, as Kafka's SharePartitionManager.

Owns the ``SharePartition`` of every (group, topic id, partition) that has been
fetched, the share-session cache, and one live ``ShareGroupConfig`` per group kept
in step with the group's dynamic configs.  The share coordinator is the persister
(called in process with the same request objects the wire uses).

:meth:`SharePartitionManager.fetch` (Kafka's fetchMessages) applies the session
epoch, the piggy-backed acknowledgements, then acquires records from the session's
partitions and long-polls when there are none; :meth:`acknowledge` is ShareAcknowledge;
both release the member's records on the final epoch (Kafka's releaseSession).  The
handlers only check what is request-shaped (GroupId/MemberId, acknowledgement
batches) and turn the per-partition results into the response.

Wake-ups for waiting ShareFetches go through the broker's watchers: a share
partition's state change (release, lock expiry, acknowledgement freeing lock
capacity, SPSO move) notifies ``("share", group, topic_id, partition)``; new data
notifies ``("log", topic, partition)`` as for Fetch.

While the share coordinator loads ``__share_group_state`` (start-up), a share partition
cannot initialize: Kafka's persister retries COORDINATOR_LOAD_IN_PROGRESS while the
ShareFetch waits in purgatory, so a ShareFetch here skips such partitions (no error,
no records) and waits, woken when the load is done (``PERSISTER_LOADED``).

Records go back to AVAILABLE when a member's share session closes (final epoch,
connection closed, idle eviction), keeping their delivery count (KAFKA-19972). As in
Kafka 4.4, a member leaving the group or timing out in the group coordinator does not
touch its share session: only Kafka's ShareSessionCache ends one (final epoch,
disconnect, eviction), so a closing consumer's final ShareAcknowledge, sent after its
leave heartbeat, is still applied; records of a member that is gone but still
connected come back when their acquisition locks run out.
"""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from broker.log.errors import LogError
from broker.share.config import DLQ_TOPIC_NAME, ShareGroupConfig
from broker.share.fair import OpenBatches, RecordIndexCache, ResponseRecords
from broker.share.isolation import unreadable_ranges
from broker.share.errors import ShareError
from broker.share.session import FINAL_EPOCH, ShareSession, ShareSessionCache
from protocol.errors import Errors

if TYPE_CHECKING:  # both load with the first share partition (partition()), not at start-up
    from broker.share.dlq import DeadLetterQueue
    from broker.share.partition import SharePartition

log = logging.getLogger("sharebroker.share")

PartitionKey = tuple[bytes, int]  # (topic id, partition)
# Log reads in bounded steps: unlike Kafka's file slices, a read here copies bytes and makes an
# object per batch, and MaxBytes (50 MB from librdkafka) would read far more than MaxRecords can
# acquire. The first read of a partition covers MaxRecords at READ_PER_RECORD bytes a record (at
# least MIN_READ); each further read of the same request doubles, up to READ_STEP.
READ_STEP = 1 << 20
MIN_READ, READ_PER_RECORD = 16 << 10, 256
DEFAULT_MAX_RECORDS = 500  # MaxRecords <= 0 in a ShareFetch
PERSISTER_LOADED = ("share-state-loaded",)  # watcher key notified once the share coordinator has loaded


def extend_ranges(ranges: list[tuple[int, int, int]], more) -> None:
    """Append AcquiredRecords ``more`` to ``ranges``, merging a range that continues the last one with
    the same delivery count (two reads of one fetch, e.g. the rest of a batch being cut and the next)."""
    for first, last, dc in more:
        if ranges and ranges[-1][1] + 1 == first and ranges[-1][2] == dc:
            ranges[-1] = (ranges[-1][0], last, dc)
        else:
            ranges.append((first, last, dc))


class PartitionResult:
    """One partition of a ShareFetch answer: error, acknowledgement result, records and acquired ranges."""

    __slots__ = ("topic_id", "partition", "acks", "error", "ack_error", "records", "acquired", "touched")

    def __init__(self, topic_id: bytes, partition: int):
        self.topic_id, self.partition = topic_id, partition
        self.acks: list | None = None
        self.error = Errors.NONE
        self.ack_error: int | None = None
        self.records: list = []                          # record batch bytes
        self.acquired: list[tuple[int, int, int]] = []   # (first offset, last offset, delivery count)
        self.touched = False                             # answered even in an incremental fetch


class FetchResult(NamedTuple):
    acquisition_lock_timeout_ms: int
    partitions: list[PartitionResult]


class AcknowledgeResult(NamedTuple):
    acquisition_lock_timeout_ms: int
    partitions: list[tuple[bytes, int, int]]  # (topic id, partition, error code)


class SharePartitionManager:
    """Collaborators: the broker ``config``, the ``logs`` (partition logs by topic id), the
    ``watchers`` long polls wait on, the ``persister`` (share coordinator), the
    ``group_configs`` (per-group overrides), a ``scheduler`` (the event loop) and ``now_ms``.
    The builder connects its event methods (:meth:`group_config_changed`,
    :meth:`topic_deleted`) to their sources. A member leaving the group is not one of
    them: as in Kafka 4.4, its share session ends only on its final epoch, on disconnect or on
    eviction."""

    def __init__(self, config, *, logs, watchers, persister, group_configs, scheduler, metrics=None,
                 now_ms: Callable[[], int], topics=None):
        self.logs = logs
        # KIP-1191 dead-letter writer: appends through the broker's own logs (``topics`` for creation
        # rules and wake-ups; a private Topics view on the same logs and watchers when not given).
        # Made with the first share partition (``dead_letters``); its settings were checked at start-up.
        self._dlq: DeadLetterQueue | None = None
        self._config, self._topics = config, topics
        self.metrics = metrics  # broker.metrics.ShareMetrics: acknowledgement counters (optional)
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
        self.record_indexes = RecordIndexCache()  # big batches handed out in pieces (fair acquisition)
        self.open_batches = OpenBatches()  # the batch each partition is being cut from, not read again per piece
        self._load_waiter: asyncio.Task | None = None  # notifies PERSISTER_LOADED; made by the first waiting fetch
        # (group, topic id, partition) -> the members assigned it (the group coordinator's, set by
        # broker.components; fair acquisition shares a big batch when one of them has not fetched yet)
        self.assigned_members: Callable[[str, bytes, int], list[str]] = lambda _g, _t, _p: []

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
                     isolation_level=gc.get(group_id, "share.isolation.level").lower(),
                     dlq_topic=gc.get(group_id, DLQ_TOPIC_NAME).strip(),
                     dlq_copy_record=gc.get_bool(group_id, "errors.deadletterqueue.copy.record.enable"),
                     redelivery_backoff_ms=gc.get_int(group_id, "share.redelivery.backoff.ms"),
                     redelivery_backoff_max_ms=gc.get_int(group_id, "share.redelivery.backoff.max.ms"),
                     fair_acquisition=gc.get_bool(group_id, "share.fair.acquisition.enable"))
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
            from broker.share.partition import SharePartition

            watchers = self.watchers
            sp = SharePartition(group_id, topic_id, partition, log=plog, persister=self.persister,
                                config=self.group_config(group_id), scheduler=self.scheduler, now_ms=self.now_ms,
                                on_state_change=lambda: watchers.notify(("share",) + key),
                                dlq=self.dead_letters().write)
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

    def dead_letters(self) -> DeadLetterQueue:
        """The broker's dead-letter writer, made on first use."""
        if self._dlq is None:
            from broker.share.dlq import DeadLetterQueue

            self._dlq = DeadLetterQueue(self._config, logs=self.logs, watchers=self.watchers, topics=self._topics)
        return self._dlq

    async def release(self, group_id: str, member_id: str, keys) -> None:
        for tid, p in keys:
            sp = self.partitions.get((group_id, tid, p))
            if sp is not None:
                try:
                    await sp.release_member(member_id)
                except Exception:
                    log.exception("releasing records of %s in %s failed", member_id, sp)

    # ------------------------------------------------------------------ ShareFetch / ShareAcknowledge
    async def fetch(self, req: Any, acks: dict[PartitionKey, list], invalid: set[PartitionKey],
                    connection: Any) -> FetchResult:
        """ShareFetch for ``req`` (GroupId/MemberId set): ``acks`` maps every requested partition to its
        acknowledgement batches (repeated topics merged), ``invalid`` holds the partitions whose batches
        failed validation. Raises ShareError for a request-level error (the session epoch rules)."""
        group, member, epoch = req.group_id, req.member_id, req.share_session_epoch
        parts: dict[PartitionKey, PartitionResult] = {}
        has_acks = False
        for key, batches in acks.items():
            part = parts[key] = PartitionResult(*key)
            if batches:
                has_acks = True
                if key in invalid:
                    part.error = Errors.INVALID_REQUEST
                    part.touched = True
                else:
                    part.acks = batches
        forgotten = [(f.topic_id, p) for f in req.forgotten_topics_data for p in f.partitions]
        session = self.sessions.fetch_context(group, member, epoch, partitions=list(acks), forgotten=forgotten,
                                              has_acks=has_acks, connection_id=id(connection))
        self.track_connection(connection)
        config = self.group_config(group)
        if has_acks and self.metrics is not None:
            self.metrics.acknowledgements += 1

        # The acknowledgements and the fetch run together, as Kafka's handleShareFetchRequest combines
        # their futures: the acknowledged records change state at once (in transition) and the fetch
        # acquires while their share-state write is persisted; the answer waits for both.
        acking = []
        for part in parts.values():
            if part.acks is not None:
                part.touched = True
                acking.append((part, asyncio.ensure_future(
                    self._acknowledge(group, member, part.topic_id, part.partition, part.acks))))
        if acking:
            await asyncio.sleep(0)  # each acknowledgement runs up to its write before the fetch acquires
            if any(self._window_full(group, part) for part, _ in acking):
                await self._settle_acks(acking)  # nothing to take there before they land: no pass in vain
        try:
            if epoch == FINAL_EPOCH:
                await self._settle_acks(acking)
                await self.release_session(group, member, session)
                return FetchResult(config.record_lock_duration_ms, list(parts.values()))
            await self._fetch_more(group, member, session, parts, req)
        finally:
            await self._settle_acks(acking)
        full = epoch == 0
        shown = [p for p in parts.values() if full or p.touched or p.acquired or p.error]
        if log.isEnabledFor(logging.DEBUG):
            log.debug("ShareFetch %s/%s epoch %d acquired %s", group, member, epoch,
                      [(p.partition, p.acquired) for p in shown if p.acquired])
        return FetchResult(config.record_lock_duration_ms, shown)

    def _window_full(self, group: str, part: PartitionResult) -> bool:
        """Whether the share partition's record-lock window is full with nothing to redeliver (Kafka's
        canAcquireRecords is false): a fetch takes nothing there until records are acknowledged."""
        sp = self.partitions.get((group, part.topic_id, part.partition))
        return (sp is not None and sp.status == "ACTIVE" and sp.next_fetch_offset() >= sp.end_offset
                and sp.in_flight_count >= sp.config.partition_max_record_locks)

    @staticmethod
    async def _settle_acks(acking: list) -> None:
        """Wait for the acknowledgements started by a ShareFetch and put their codes in its answer."""
        for part, task in acking:
            part.ack_error = await task
        acking.clear()

    async def _fetch_more(self, group: str, member: str, session: ShareSession, parts: dict, req: Any) -> None:
        """The session's partitions, in an order rotated by the session epoch so that none starves, added to
        ``parts`` and fetched."""

        order = list(session.partitions)
        if order:
            shift = session.epoch % len(order)
            order = order[shift:] + order[:shift]
        for key in order:
            if key not in parts:
                parts[key] = PartitionResult(*key)
        await self._fetch_records(group, member, [parts[k] for k in order if parts[k].error == Errors.NONE], req)

    async def acknowledge(self, req: Any, acks: dict[PartitionKey, list],
                          invalid: dict[PartitionKey, int]) -> AcknowledgeResult:
        """ShareAcknowledge for ``req``: ``acks`` maps each partition to its batches, ``invalid`` gives the
        validation error of the partitions whose batches are malformed. Raises ShareError for a
        request-level error (session epoch)."""
        group, member, epoch = req.group_id, req.member_id, req.share_session_epoch
        session = self.sessions.acknowledge_context(group, member, epoch)
        config = self.group_config(group)
        if self.metrics is not None:
            self.metrics.acknowledgements += 1
        out = []
        for (tid, p), batches in acks.items():
            code = invalid.get((tid, p)) or await self._acknowledge(group, member, tid, p, batches)
            out.append((tid, p, code))
        if epoch == FINAL_EPOCH:
            await self.release_session(group, member, session)
        return AcknowledgeResult(config.record_lock_duration_ms, out)

    async def release_session(self, group_id: str, member_id: str, session: ShareSession) -> None:
        """The final epoch: close the member's share session and release the records it holds."""
        self.sessions.close(group_id, member_id)
        await self.release(group_id, member_id, list(session.partitions))

    async def _acknowledge(self, group: str, member: str, topic_id: bytes, partition: int, batches: list) -> int:
        try:
            sp = await self.partition(group, topic_id, partition)
            code = await sp.acknowledge(member, batches)
        except ShareError as e:
            return e.code
        if code == Errors.NONE and self.metrics is not None:
            for b in batches:  # records acknowledged, by type (one type for the batch, or one per offset)
                types = b.acknowledge_types
                if len(types) == 1:
                    self.metrics.acknowledged(types[0], b.last_offset - b.first_offset + 1)
                else:
                    for t in types:
                        self.metrics.acknowledged(t, 1)
        return code

    async def _fetch_records(self, group: str, member: str, parts: list[PartitionResult], req: Any) -> None:
        """Acquire into ``parts``; with nothing acquired wait up to MaxWaitMs for a wake-up, then try again."""
        deadline = asyncio.get_running_loop().time() + max(req.max_wait_ms, 0) / 1000.0
        failed = -1
        while True:
            count = await self._acquire(group, member, parts, req)
            if count or req.max_wait_ms <= 0:
                return
            # Answer at once when every partition failed (Kafka: errorInAllPartitions) or one failed
            # while waiting, e.g. its topic was deleted (Kafka completes the delayed share fetches of
            # a share partition it removes).
            now_failed = sum(1 for p in parts if p.error)
            if now_failed == len(parts) or 0 <= failed < now_failed:
                return
            failed = now_failed
            keys: list = [("share", group, p.topic_id, p.partition) for p in parts]
            if self._persister_loading():
                keys.append(PERSISTER_LOADED)
            for p in parts:
                info = self.logs.topic_by_id(p.topic_id)
                if info is not None:
                    keys.append(("log", info.name, p.partition))
            # A wake-up wakes every fetch waiting on the partition (an acknowledgement that frees room in
            # a full record-lock window wakes all the members waiting for it; one of them takes the room):
            # the others see that nothing changed for them and wait on, without a pass (Kafka's
            # DelayedShareFetch.tryComplete asks canAcquireRecords first).
            while True:
                if not await self.watchers.wait(keys, deadline):
                    await self._acquire(group, member, parts, req)
                    return
                if self._may_acquire(group, parts):
                    break

    def _may_acquire(self, group: str, parts: list[PartitionResult]) -> bool:
        """Whether a pass of ``_acquire`` over ``parts`` could acquire or fail anything: False only when
        every partition is loaded and has nothing new to acquire, or no room for it and nothing to
        redeliver (the first check of ``_acquire``'s read loop), with its log start where the SPSO
        already follows it."""
        for part in parts:
            sp = self.partitions.get((group, part.topic_id, part.partition))
            if sp is None or sp.status != "ACTIVE":
                return True
            _name, plog = self.topic_log(part.topic_id, part.partition)
            if plog is None or plog.log_start_offset > sp.start_offset:
                return True
            offset = sp.next_fetch_offset()
            if offset < sp.end_offset:
                return True
            upper = plog.last_stable_offset if sp.config.read_committed else plog.high_watermark
            if offset < upper and sp.in_flight_count < sp.config.partition_max_record_locks:
                return True
        return False

    async def _acquire(self, group: str, member: str, parts: list[PartitionResult], req: Any) -> int:
        """One pass over ``parts`` within MaxRecords (the whole request), BatchSize, ShareAcquireMode
        and MaxBytes; returns the number of records acquired."""
        records_left = max_records = req.max_records if req.max_records > 0 else DEFAULT_MAX_RECORDS
        bytes_left = req.max_bytes
        total = 0
        for part in parts:
            if records_left <= 0 or (bytes_left <= 0 and total):  # the first batch whatever MaxBytes (KIP-74)
                break
            sp = self.partitions.get((group, part.topic_id, part.partition))
            if sp is None or sp.status != "ACTIVE":
                if self._persister_loading():
                    continue  # it initializes once the share coordinator has loaded; the fetch waits meanwhile
                if total:  # Kafka answers with the partitions whose state is loaded (maybeAcquireFetchLock):
                    self._preload(group, part.topic_id, part.partition)  # this one serves a later fetch
                    continue
            try:
                sp = await self.partition(group, part.topic_id, part.partition)
            except ShareError as e:
                part.error = e.code
                continue
            _name, plog = self.topic_log(part.topic_id, part.partition)
            if plog is None:
                part.error = Errors.UNKNOWN_TOPIC_OR_PARTITION
                continue
            upper = plog.last_stable_offset if sp.config.read_committed else plog.high_watermark
            # Retention or DeleteRecords may have moved the log start: the one place the share
            # partition follows it (Kafka calls updateCacheAndOffsets from ShareFetchUtils only).
            sp.update_log_start_offset(plog.log_start_offset)
            key = (part.topic_id, part.partition)
            out = ResponseRecords(key, self.record_indexes, sp.config.fair_acquisition)
            part.records = out.records
            now = self.now_ms()
            shared = sp.config.fair_acquisition and sp.demand.wanted_by_others(
                member, now, sp.config.record_lock_duration_ms,
                lambda: self.assigned_members(group, part.topic_id, part.partition))
            got = 0
            step = min(READ_STEP, max(MIN_READ, records_left * READ_PER_RECORD))
            while records_left > 0 and (bytes_left > 0 or not total):
                offset = sp.next_fetch_offset()
                if offset >= sp.end_offset and (offset >= upper or sp.in_flight_count
                                                >= sp.config.partition_max_record_locks):
                    break  # nothing new, or no room for it and nothing to redeliver (Kafka's canAcquireRecords)
                if req.max_bytes <= 0:  # Kafka's PartitionMaxBytesStrategy refuses to share out no bytes: the
                    part.error = Errors.UNKNOWN_SERVER_ERROR  # partition fails, nothing is acquired (a client's
                    break  # fetch.max.bytes=0, or a NaN consumer_byte_rate capping it at (int) NaN = 0)
                try:  # MaxBytes is soft for the first batch of the response only (Kafka)
                    batches = self.open_batches.get(key, plog, offset, upper) or plog.read(
                        max(offset, plog.log_start_offset), min(bytes_left, step),
                        max_offset=upper, min_one=total == 0 or step < bytes_left)
                except LogError as e:  # a read that failed (KAFKA_STORAGE_ERROR) fails the partition's fetch
                    if e.code == Errors.KAFKA_STORAGE_ERROR and not part.acquired:  # unless it already acquired
                        part.error = e.code  # some records (as Kafka's handleFetchException, without a halt)
                    break
                if not batches or (total and len(batches[0].data) > bytes_left):
                    break
                step = min(READ_STEP, 2 * step)
                skip = unreadable_ranges(plog, batches, sp.config.read_committed)  # markers, aborted data
                res = sp.acquire(member, batches, max_records=records_left, batch_size=max(req.batch_size, 1),
                                 acquire_mode=req.share_acquire_mode, fetch_offset=offset, aborted=skip,
                                 request_max_records=max_records, shared=shared)
                if not res.count:
                    if skip and sp.next_fetch_offset() > offset:
                        continue  # only archived offsets here: read on
                    break
                if log.isEnabledFor(logging.DEBUG):
                    log.debug("acquire %s off=%d spso=%d end=%d batches=%s got=%s", member, offset,
                              sp.start_offset, sp.end_offset, [(x.base_offset, x.last_offset) for x in batches],
                              res.acquired)
                extend_ranges(part.acquired, res.acquired)
                records_left -= res.count
                bytes_left -= out.add(res.batches, res.acquired)
                if shared:
                    self.open_batches.put(key, res.batches, res.acquired)
                total += res.count
                got += res.count
                if sp.isolated:  # Kafka 4.2+: what the poison throttle isolated is this partition's whole fetch
                    break
            sp.demand.fetched(member, now, got, max_records)
        return total

    def _preload(self, group: str, topic_id: bytes, partition: int) -> None:
        """Start loading a share partition's state without waiting for it; its load wakes the fetches
        waiting on it, and an error meets the next fetch of it."""
        async def load() -> None:
            try:
                await self.partition(group, topic_id, partition)
            except ShareError:
                pass

        self.scheduler.create_task(load())

    def _persister_loading(self) -> bool:
        """True while the share coordinator loads; the first caller arranges the PERSISTER_LOADED wake-up."""
        if not getattr(self.persister, "loading", False):
            return False
        if self._load_waiter is None:
            async def wake() -> None:
                await self.persister.wait_loaded()
                self.watchers.notify(PERSISTER_LOADED)

            self._load_waiter = self.scheduler.create_task(wake())
        return True

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

    def topic_deleted(self, name: str, topic_id: bytes) -> None:
        """Forget the topic's share partitions; closing one wakes the ShareFetches waiting on it,
        which then answer UNKNOWN_TOPIC_OR_PARTITION for it (Kafka removes the share partition,
        fences it and completes its delayed share fetches)."""
        for key in [k for k in self.partitions if k[1] == topic_id]:
            self.partitions.pop(key).close()

    async def drop_group(self, group_id: str) -> None:
        """Forget a group's share partitions, sessions and live config. Called when DeleteGroups
        deleted the group, and when Alter/DeleteShareGroupOffsets changed its durable share state
        (the group is empty then): the next ShareFetch loads each partition from the new state."""
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
        if self._load_waiter is not None:
            self._load_waiter.cancel()
        for sp in self.partitions.values():
            sp.close()
        self.partitions.clear()
