"""The share coordinator: durable share-partition state on ``__share_group_state`` (KIP-932).

Implemented, following Kafka 4.4's ShareCoordinatorService / ShareCoordinatorShard:

* InitializeShareGroupState, ReadShareGroupState, WriteShareGroupState (v0-1),
  DeleteShareGroupState and ReadShareGroupStateSummary (v0-1).  Each method takes
  and returns the generated request/response objects; the same objects serve the
  socket handlers and the in-process share-partition leader (``write_state`` /
  ``read_state`` are the Persister interface).  Versions do not matter here:
  the handler decodes and encodes with the request version; a v0 write decodes
  ``delivery_complete_count`` as -1, which is stored as Kafka stores it.
* Persist, then commit, then answer, on the shared
  :class:`~coordinator.runtime.CoordinatorRuntime`: each partition's operation
  computes ``(result, records)`` from the committed state, the runtime appends the
  records to the :class:`~coordinator.runtime.RecordLog` (durable on return) and
  only then applies them through :meth:`ShareCoordinator.replay`, the same code
  that :meth:`ShareCoordinator.load` runs at start-up.  A failed append leaves the
  state untouched and answers the error Kafka's runtime would
  (``handleOperationException`` mapping).  The runtime runs operations one at a
  time in arrival order, so each computes on the state its predecessor committed.
* Records: initialize writes a ShareSnapshot; a write or a leader-epoch bump on
  read writes a ShareUpdate delta, or a full ShareSnapshot once
  ``share.coordinator.snapshot.update.records.per.snapshot`` updates were replayed
  for that share-partition; delete writes a tombstone on the ShareSnapshot key.
  Idle share-partitions get a fresh snapshot from :meth:`snapshot_cold_partitions`
  (``share.coordinator.cold.partition.snapshot.interval.ms``).
* Pruning: after each snapshot the lowest offset still needed (the minimum over
  share-partitions of their latest snapshot's offset, Kafka's
  ShareCoordinatorOffsetsManager) is passed to ``RecordLog.truncate_before``.
  Kafka does this from a periodic job; doing it right away is equivalent.
* Fencing as Kafka 4.4: write -> FENCED_LEADER_EPOCH if the stored leader epoch
  is higher (request -1 skips the check), FENCED_STATE_EPOCH likewise for the
  state epoch; read -> FENCED_LEADER_EPOCH if the stored leader epoch is higher
  than the request's (no -1 exemption); initialize -> FENCED_STATE_EPOCH if the
  stored state epoch is higher (-1 skips).  Write/read of an uninitialized
  share-partition -> INVALID_REQUEST; the summary of one -> start offset -1.

Not implemented: ``share.coordinator.write.timeout.ms`` (a timed-out append
could still become durable and diverge from memory), the multi-partition
``__share_group_state`` topic (one log, one coordinator), share-version feature
gating of the periodic job, metrics.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass, replace
from typing import Awaitable, Callable, Iterable

from coordinator.runtime import (CoordinatorRuntime, Record, RecordLog, is_storage_error, log_append_failure,
                                 unavailable_message)
from coordinator.share_state.batches import StateBatch, combine_state_batches
from protocol.coordinator_records.registry import (RECORD_TYPES, SHARE_COORDINATOR_RECORDS, ShareSnapshotKey,
                                                   ShareSnapshotValue, ShareUpdateKey, ShareUpdateValue)
from protocol.errors import Errors, KafkaError
from protocol.lazy_messages import (DeleteShareGroupStateResponse, InitializeShareGroupStateResponse,
                                    ReadShareGroupStateResponse, ReadShareGroupStateSummaryResponse,
                                    WriteShareGroupStateResponse)

logger = logging.getLogger(__name__)

SNAPSHOT = RECORD_TYPES["ShareSnapshot"]
UPDATE = RECORD_TYPES["ShareUpdate"]

UPDATES_PER_SNAPSHOT = "share.coordinator.snapshot.update.records.per.snapshot"
COLD_SNAPSHOT_INTERVAL_MS = "share.coordinator.cold.partition.snapshot.interval.ms"
COLD_SNAPSHOT_CHUNK = 200  # share-partitions per cold-snapshot write (~3 ms of the loop each)
# Ours: a share-partition whose latest snapshot lies this many bytes behind the log end gets a fresh
# one at once (a quiet one waits for no update count and holds pruning back until its cold snapshot:
# up to two cold intervals of everything written). One default segment of the topic.
PRUNE_LAG_BYTES = 4 << 20
_BATCH_BYTES = 19  # a state batch in a record: first and last offset, state, delivery count
# A record's bytes besides its group id and state batches: its header, key and value fixed fields, and
# its share of a batch header (most writes are one record): ~170 B a record estimated and measured
# in bench/soak.py's share group.
_RECORD_BYTES = 110

# Kafka's error messages for the rows this module answers.
NEGATIVE_PARTITION_ID = "The partition id cannot be a negative number."
WRITE_UNINITIALIZED = "Write operation on uninitialized share partition not allowed."
READ_UNINITIALIZED = "Read operation on uninitialized share partition not allowed."
NOT_AVAILABLE = "Share coordinator is not available."
MESSAGES = {
    Errors.FENCED_LEADER_EPOCH: "The leader epoch in the request is older than the epoch on the broker.",
    Errors.FENCED_STATE_EPOCH:
        "The share coordinator rejected the request because the share-group state epoch did not match.",
    Errors.UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
}

# CoordinatorOperationExceptionHelper: errors from the append, as the client sees them.
_APPEND_ERRORS = {
    Errors.NETWORK_EXCEPTION: Errors.COORDINATOR_LOAD_IN_PROGRESS,
    Errors.UNKNOWN_TOPIC_OR_PARTITION: Errors.COORDINATOR_NOT_AVAILABLE,
    Errors.NOT_ENOUGH_REPLICAS: Errors.COORDINATOR_NOT_AVAILABLE,
    Errors.REQUEST_TIMED_OUT: Errors.COORDINATOR_NOT_AVAILABLE,
    Errors.NOT_LEADER_OR_FOLLOWER: Errors.NOT_COORDINATOR,
    Errors.KAFKA_STORAGE_ERROR: Errors.NOT_COORDINATOR,
    Errors.MESSAGE_TOO_LARGE: Errors.UNKNOWN_SERVER_ERROR,
    Errors.RECORD_LIST_TOO_LARGE: Errors.UNKNOWN_SERVER_ERROR,
    Errors.INVALID_FETCH_SIZE: Errors.UNKNOWN_SERVER_ERROR,
}

_NO_OFFSET = 1 << 63  # "no redundant offset yet", like Kafka's Long.MAX_VALUE

Key = tuple[str, bytes, int]  # (group id, topic id, partition)


def append_error_code(exc: BaseException) -> int:
    """The error code a failed append turns into (OSError counts as a storage error; so does the log's
    ``LogError(KAFKA_STORAGE_ERROR)``, which carries its Kafka code as ``code`` like a KafkaError)."""
    if isinstance(exc, KafkaError) or isinstance(getattr(exc, "code", None), int):
        code = exc.code
    elif isinstance(exc, OSError):
        code = Errors.KAFKA_STORAGE_ERROR
    elif isinstance(exc, TimeoutError):
        code = Errors.REQUEST_TIMED_OUT
    else:
        code = Errors.UNKNOWN_SERVER_ERROR
    return int(_APPEND_ERRORS.get(code, code))


@dataclass(frozen=True, slots=True)
class ShareState:
    """The durable state of one share-partition (Kafka's ShareGroupOffset)."""
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    state_batches: tuple[StateBatch, ...]
    create_timestamp: int = 0
    write_timestamp: int = 0


def _batches(items: Iterable) -> tuple[StateBatch, ...]:
    return tuple(StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in items)


def _snapshot_record(key: Key, s: ShareState) -> Record:
    value = ShareSnapshotValue(
        snapshot_epoch=s.snapshot_epoch, state_epoch=s.state_epoch, leader_epoch=s.leader_epoch,
        start_offset=s.start_offset, delivery_complete_count=s.delivery_complete_count,
        create_timestamp=s.create_timestamp, write_timestamp=s.write_timestamp,
        state_batches=[ShareSnapshotValue.StateBatch(*b) for b in s.state_batches])
    return Record(SNAPSHOT, ShareSnapshotKey(*key), 0, value)


def _resnapshot(key: Key, s: ShareState, now: int) -> Record:
    """A cold snapshot: the state as it is, snapshot epoch + 1, written now."""
    return _snapshot_record(key, replace(s, snapshot_epoch=s.snapshot_epoch + 1, write_timestamp=now))


def _update_record(key: Key, snapshot_epoch: int, leader_epoch: int, start_offset: int,
                   delivery_complete_count: int, batches: Iterable[StateBatch]) -> Record:
    value = ShareUpdateValue(
        snapshot_epoch=snapshot_epoch, leader_epoch=leader_epoch, start_offset=start_offset,
        delivery_complete_count=delivery_complete_count,
        state_batches=[ShareUpdateValue.StateBatch(*b) for b in batches])
    return Record(UPDATE, ShareUpdateKey(*key), 0, value)


def _tombstone(key: Key) -> Record:
    return Record(SNAPSHOT, ShareSnapshotKey(*key), -1, None)


class _Api:
    """Response shapes and Kafka's wording for one share-state RPC."""

    def __init__(self, response, result, what: str, active_first: bool, check_partitions: bool):
        self.response, self.result, self.partition = response, result, response.PartitionResult
        self.what = what  # "Unable to {what}: ..." on operation failures
        # Kafka checks request shape and coordinator liveness in a per-RPC order.
        self.active_first, self.check_partitions = active_first, check_partitions

    def error(self, partition: int, code: int, message: str | None):
        return self.partition(partition=partition, error_code=int(code), error_message=message)


_INIT = _Api(InitializeShareGroupStateResponse, InitializeShareGroupStateResponse.InitializeStateResult,
             "initialize share group state", True, False)
_READ = _Api(ReadShareGroupStateResponse, ReadShareGroupStateResponse.ReadStateResult,
             "read share group state", False, True)
_WRITE = _Api(WriteShareGroupStateResponse, WriteShareGroupStateResponse.WriteStateResult,
              "write share group state", False, True)
_DELETE = _Api(DeleteShareGroupStateResponse, DeleteShareGroupStateResponse.DeleteStateResult,
               "delete share group state", True, True)
_SUMMARY = _Api(ReadShareGroupStateSummaryResponse, ReadShareGroupStateSummaryResponse.ReadStateSummaryResult,
                "read share group state summary", True, True)


class ShareCoordinator:
    """Owner of all share-partition state kept in one ``__share_group_state`` log.

    ``config`` offers ``get_int(name, default)`` (None: all defaults); ``time_ms()``
    returns wall-clock milliseconds; ``partition_exists(topic_id, partition)``
    (optional) answers Kafka's metadata-image check, UNKNOWN_TOPIC_OR_PARTITION
    when False.  Call :meth:`load` (or :meth:`start_loading`, in the background) before
    serving: until it is done every share-state request answers COORDINATOR_LOAD_IN_PROGRESS.
    In process, share-partition leaders and the group coordinator use :meth:`persister`,
    which waits for the load instead (Kafka's persister retries that error).
    """

    def __init__(self, log: RecordLog, config=None, time_ms: Callable[[], int] | None = None,
                 partition_exists: Callable[[bytes, int], bool] | None = None):
        get_int = config.get_int if config is not None else (lambda _name, default: default)
        self._log = log
        self._time_ms = time_ms or (lambda: 0)
        self._partition_exists = partition_exists
        self.updates_per_snapshot = get_int(UPDATES_PER_SNAPSHOT, 500)
        self.cold_snapshot_interval_ms = get_int(COLD_SNAPSHOT_INTERVAL_MS, 300_000)
        self._runtime = CoordinatorRuntime(log, SHARE_COORDINATOR_RECORDS, self.replay, name="share coordinator",
                                           on_committed=self._committed, loading=True)  # served after load()
        self._active = True
        self._timer: asyncio.TimerHandle | None = None
        self._job: asyncio.Task | None = None
        self._refresh: asyncio.Task | None = None  # _refresh_lagging, started by _committed; cancelled by shutdown
        self._reset()

    def _reset(self) -> None:
        self._states: dict[Key, ShareState] = {}
        self._leader_epochs: dict[Key, int] = {}  # highest seen; fences writes and reads
        self._state_epochs: dict[Key, int] = {}  # highest seen; fences writes and initialize
        self._update_counts: dict[Key, int] = {}  # ShareUpdates replayed since the counter reset
        # each key's latest snapshot, oldest first: (its offset, bytes written before it, its size)
        self._snapshot_offsets: dict[Key, tuple[int, int, int]] = {}
        self._live_bytes = 0  # the latest snapshots' sizes, summed
        self._redundant_offset = _NO_OFFSET
        self._pruned_offset = -1
        self._written = 0  # bytes of the records replayed so far (estimated from their batch counts)

    # ------------------------------------------------------------------ replay

    async def load(self) -> None:
        """Rebuild the state by replaying the whole log, then start serving."""
        self._reset()
        await self._runtime.load(after=self._maybe_prune)

    def start_loading(self, hold: Callable[[], Awaitable[None]] | None = None) -> None:
        """:meth:`load` in the background (``__share_group_state`` is pruned, not compacted: every
        record is replayed); COORDINATOR_LOAD_IN_PROGRESS until it is done."""
        self._reset()
        self._runtime.start_loading(before=hold, after=self._maybe_prune)

    @property
    def _loaded(self) -> bool:
        return not self._runtime.unavailable_code()

    @property
    def loading(self) -> bool:
        return self._runtime.loading

    async def wait_loaded(self) -> None:
        await self._runtime.wait_loaded()

    def persister(self) -> "WaitingPersister":
        """This coordinator as an in-process persister: a call made while it loads waits for the load."""
        return WaitingPersister(self)

    def replay(self, offset: int, record: Record) -> None:
        """Apply one record at ``offset``: the only way the state ever changes."""
        k, v = record.key, record.value
        size = _RECORD_BYTES + len(k.group_id) + (_BATCH_BYTES * len(v.state_batches) if v is not None else 0)
        self._written += size
        key = (k.group_id, bytes(k.topic_id), k.partition)
        if record.record_type == SNAPSHOT:
            self._replay_snapshot(offset, key, v, size)
        elif record.record_type == UPDATE and record.value is not None:
            self._replay_update(key, record.value)

    def _replay_snapshot(self, offset: int, key: Key, v: ShareSnapshotValue | None, size: int) -> None:
        if v is None:  # deletion: the share-partition is gone
            for m in (self._states, self._leader_epochs, self._state_epochs, self._update_counts):
                m.pop(key, None)
        else:
            _raise_to(self._leader_epochs, key, v.leader_epoch)
            _raise_to(self._state_epochs, key, v.state_epoch)
            self._states[key] = ShareState(
                v.snapshot_epoch, v.state_epoch, v.leader_epoch, v.start_offset,
                v.delivery_complete_count, _batches(v.state_batches), v.create_timestamp, v.write_timestamp)
            # As in Kafka, only a snapshot taken because of the update count resets it.
            if self._update_counts.get(key, -1) >= self.updates_per_snapshot:
                self._update_counts[key] = 0
        self._track_snapshot_offset(key, offset, size, deleted=v is None)

    def _replay_update(self, key: Key, v: ShareUpdateValue) -> None:
        _raise_to(self._leader_epochs, key, v.leader_epoch)
        cur = self._states.get(key)
        batches = _batches(v.state_batches)
        if cur is None:
            self._states[key] = ShareState(v.snapshot_epoch, 0, v.leader_epoch, v.start_offset,
                                           v.delivery_complete_count, batches)
        else:
            start = cur.start_offset if v.start_offset == -1 else v.start_offset
            self._states[key] = replace(
                cur, start_offset=start,
                leader_epoch=cur.leader_epoch if v.leader_epoch == -1 else v.leader_epoch,
                delivery_complete_count=v.delivery_complete_count,
                state_batches=combine_state_batches(cur.state_batches, batches, start))
        self._update_counts[key] = self._update_counts.get(key, 0) + 1

    def _track_snapshot_offset(self, key: Key, offset: int, size: int, deleted: bool) -> None:
        # Everything below the oldest "latest snapshot" is redundant.  A deleted
        # key still counts for this computation, then stops holding the log back.
        # Records are replayed in log order, so re-inserting the key keeps the dict
        # ordered by offset and its first value is the minimum: O(1) per snapshot
        # however many share-partitions there are (min() over them was O(keys)).
        offsets = self._snapshot_offsets
        old = offsets.pop(key, None)
        if old is not None:
            self._live_bytes -= old[2]
        offsets[key] = (offset, self._written - size, size)
        self._redundant_offset = next(iter(offsets.values()))[0]
        if deleted:
            del offsets[key]
        else:
            self._live_bytes += size

    @property
    def last_redundant_offset(self) -> int | None:
        """Records below this offset are no longer needed (None: nothing to prune)."""
        off = self._redundant_offset
        return None if off <= 0 or off == _NO_OFFSET else off

    def _maybe_prune(self) -> None:
        off = self.last_redundant_offset
        if off is None or off == self._pruned_offset:
            return
        try:
            self._log.truncate_before(off)
            self._pruned_offset = off
        except Exception as exc:  # pruning is an optimisation; try again after the next snapshot
            if not is_storage_error(exc):
                logger.exception("pruning __share_group_state below %d failed", off)

    # ------------------------------------------------------------- inspection

    def state_of(self, group_id: str, topic_id: bytes, partition: int) -> ShareState | None:
        return self._states.get((group_id, bytes(topic_id), partition))

    def soft_state(self) -> dict:
        """Everything replay rebuilds, for comparisons: key -> (state, leader epoch, state epoch)."""
        return {k: (s, self._leader_epochs.get(k), self._state_epochs.get(k)) for k, s in self._states.items()}

    # ------------------------------------------------------------- operations

    async def initialize_state(self, request):
        """InitializeShareGroupState v0: write a fresh snapshot (state epoch, SPSO, no batches)."""
        return await self._serve(request, _INIT, self._initialize_one)

    async def read_state(self, request):
        """ReadShareGroupState v0; records a higher leader epoch before answering."""
        return await self._serve(request, _READ, self._read_one)

    async def write_state(self, request):
        """WriteShareGroupState v0-1: persist an update (or snapshot) of the state batches."""
        return await self._serve(request, _WRITE, self._write_one)

    async def delete_state(self, request):
        """DeleteShareGroupState v0: tombstone the share-partition (no-op if unknown)."""
        return await self._serve(request, _DELETE, self._delete_one)

    async def read_state_summary(self, request):
        """ReadShareGroupStateSummary v0-1 (v1 carries DeliveryCompleteCount)."""
        return await self._serve(request, _SUMMARY, self._summary_one)

    async def _serve(self, request, api: _Api, one):
        topics = request.topics
        # Kafka answers a malformed request with an empty response, and a stopped
        # coordinator with COORDINATOR_NOT_AVAILABLE; the order of the two checks is per RPC.
        shape_ok = bool(request.group_id) and bool(topics) and not (
            api.check_partitions and any(not t.partitions for t in topics))
        if not self._active and (api.active_first or shape_ok):
            return api.response(results=[
                api.result(topic_id=t.topic_id, partitions=[
                    api.error(p.partition, Errors.COORDINATOR_NOT_AVAILABLE, NOT_AVAILABLE) for p in t.partitions])
                for t in topics])
        if not shape_ok:
            return api.response()
        by_topic: dict[bytes, dict[int, object]] = {}
        for t in topics:
            for p in t.partitions:
                result = await self._run(api, request.group_id, t.topic_id, p, one)
                by_topic.setdefault(t.topic_id, {})[p.partition] = result
        return api.response(results=[api.result(topic_id=tid, partitions=list(parts.values()))
                                     for tid, parts in by_topic.items()])

    async def _run(self, api: _Api, group_id: str, topic_id: bytes, p, one):
        """One share-partition: validate and compute records, persist them, then apply them."""
        if code := self._runtime.unavailable_code():
            return api.error(p.partition, code, f"Unable to {api.what}: {unavailable_message(code)}")

        def op():
            return one(api, (group_id, bytes(topic_id), p.partition), p)

        try:
            return await self._runtime.write(op)
        except Exception as exc:
            log_append_failure(logger, "%s for %s-%d failed: %r", api.what, group_id, p.partition, exc, exc=exc)
            return api.error(p.partition, append_error_code(exc), f"Unable to {api.what}: {exc}")

    def _committed(self, records: list[Record]) -> None:
        """After a committed write: prune below the latest snapshots when one was written; start
        refreshing the snapshots that hold the log start more than the lag limit behind."""
        if any(r.record_type == SNAPSHOT for r in records):
            self._maybe_prune()
        if self._refresh is None and self._active and self._lag_bytes() > self._lag_limit():
            self._refresh = asyncio.get_running_loop().create_task(self._refresh_lagging())

    def _lag_bytes(self) -> int:
        """Bytes from the oldest latest snapshot to the log end: what pruning cannot free."""
        offsets = self._snapshot_offsets
        return self._written - next(iter(offsets.values()))[1] if offsets else 0

    def _lag_limit(self) -> int:
        # at least 4x the live snapshots: refreshing every one of them then moves the log end by less
        # than half the limit, so a refresh round never makes the next one necessary
        return max(PRUNE_LAG_BYTES, 4 * self._live_bytes)

    async def _refresh_lagging(self) -> None:
        """Fresh snapshots (as cold ones) of the share-partitions whose latest snapshot lies more than
        half of the lag limit behind the log end, oldest first, ``COLD_SNAPSHOT_CHUNK`` per write, so
        pruning passes them."""
        def op():
            if not self._loaded:
                return 0, []
            below = self._written - self._lag_limit() // 2
            lagging = itertools.takewhile(lambda kv: kv[1][1] < below, self._snapshot_offsets.items())
            now = self._time_ms()
            records = [_resnapshot(k, self._states[k], now) for k, _ in itertools.islice(lagging, COLD_SNAPSHOT_CHUNK)
                       if k in self._states]
            return len(records), records

        try:
            while self._active and await self._runtime.write(op):
                await asyncio.sleep(0)
        except Exception:  # an optimisation, like pruning: tried again after a later write
            logger.exception("refreshing lagging share-state snapshots failed")
        finally:
            self._refresh = None

    def _exists(self, key: Key) -> bool:
        return self._partition_exists is None or self._partition_exists(key[1], key[2])

    def _initialize_one(self, api: _Api, key: Key, p):
        if key[2] < 0:
            return api.error(key[2], Errors.INVALID_REQUEST, NEGATIVE_PARTITION_ID), []
        stored = self._state_epochs.get(key)
        if p.state_epoch != -1 and stored is not None and stored > p.state_epoch:
            return self._fail(api, key, Errors.FENCED_STATE_EPOCH)
        if not self._exists(key):
            return self._fail(api, key, Errors.UNKNOWN_TOPIC_OR_PARTITION)
        cur = self._states.get(key)
        now = self._time_ms()
        # Lag is unknown until consumption starts, so DeliveryCompleteCount is -1 for SPSO -1.
        state = ShareState(cur.snapshot_epoch + 1 if cur else 0, p.state_epoch, 0, p.start_offset,
                           -1 if p.start_offset == -1 else 0, (), now, now)
        return api.partition(partition=key[2]), [_snapshot_record(key, state)]

    def _read_one(self, api: _Api, key: Key, p):
        if key[2] < 0:
            return api.error(key[2], Errors.INVALID_REQUEST, NEGATIVE_PARTITION_ID), []
        state = self._states.get(key)
        if state is None:
            return api.error(key[2], Errors.INVALID_REQUEST, READ_UNINITIALIZED), []
        stored = self._leader_epochs.get(key)
        if stored is not None and stored > p.leader_epoch:
            return self._fail(api, key, Errors.FENCED_LEADER_EPOCH)
        if not self._exists(key):
            return self._fail(api, key, Errors.UNKNOWN_TOPIC_OR_PARTITION)
        result = api.partition(
            partition=key[2], state_epoch=state.state_epoch, start_offset=state.start_offset,
            state_batches=[ReadShareGroupStateResponse.StateBatch(*b) for b in state.state_batches])
        if p.leader_epoch == -1 or stored == p.leader_epoch:
            return result, []
        # A new share-partition leader: persist its epoch so older leaders are fenced.
        return result, [self._state_record(key, p.leader_epoch, state.start_offset,
                                           state.delivery_complete_count, (), update_leader=True)]

    def _write_one(self, api: _Api, key: Key, p):
        if key[2] < 0:
            return api.error(key[2], Errors.INVALID_REQUEST, NEGATIVE_PARTITION_ID), []
        if key not in self._states:
            return api.error(key[2], Errors.INVALID_REQUEST, WRITE_UNINITIALIZED), []
        stored = self._leader_epochs.get(key)
        if p.leader_epoch != -1 and stored is not None and stored > p.leader_epoch:
            return self._fail(api, key, Errors.FENCED_LEADER_EPOCH)
        stored = self._state_epochs.get(key)
        if p.state_epoch != -1 and stored is not None and stored > p.state_epoch:
            return self._fail(api, key, Errors.FENCED_STATE_EPOCH)
        if not self._exists(key):
            return self._fail(api, key, Errors.UNKNOWN_TOPIC_OR_PARTITION)
        record = self._state_record(key, p.leader_epoch, p.start_offset, p.delivery_complete_count,
                                    _batches(p.state_batches), update_leader=False)
        return api.partition(partition=key[2]), [record]

    def _delete_one(self, api: _Api, key: Key, p):
        if key[2] < 0:
            return api.error(key[2], Errors.INVALID_REQUEST, NEGATIVE_PARTITION_ID), []
        if not self._exists(key):
            return self._fail(api, key, Errors.UNKNOWN_TOPIC_OR_PARTITION)
        return api.partition(partition=key[2]), ([_tombstone(key)] if key in self._states else [])

    def _summary_one(self, api: _Api, key: Key, p):
        if key[2] < 0:
            return api.error(key[2], Errors.INVALID_REQUEST, NEGATIVE_PARTITION_ID), []
        if not self._exists(key):
            return self._fail(api, key, Errors.UNKNOWN_TOPIC_OR_PARTITION)
        s = self._states.get(key)
        if s is None:
            return api.partition(partition=key[2], state_epoch=0, leader_epoch=0, start_offset=-1,
                                 delivery_complete_count=-1), []
        return api.partition(partition=key[2], state_epoch=s.state_epoch, leader_epoch=s.leader_epoch,
                             start_offset=s.start_offset, delivery_complete_count=s.delivery_complete_count), []

    @staticmethod
    def _fail(api: _Api, key: Key, code: Errors):
        return api.error(key[2], code, MESSAGES[code]), []

    def _state_record(self, key: Key, leader_epoch: int, start_offset: int, delivery_complete_count: int,
                      batches: tuple[StateBatch, ...], update_leader: bool) -> Record:
        """A ShareUpdate delta, or a full ShareSnapshot once enough updates were replayed."""
        cur = self._states[key]
        leader = leader_epoch if update_leader and leader_epoch != -1 else cur.leader_epoch
        if self._update_counts.get(key, 0) >= self.updates_per_snapshot:
            start = cur.start_offset if start_offset == -1 else start_offset
            now = self._time_ms()
            return _snapshot_record(key, ShareState(
                cur.snapshot_epoch + 1, cur.state_epoch, leader, start, delivery_complete_count,
                combine_state_batches(cur.state_batches, batches, start), now, now))
        return _update_record(key, cur.snapshot_epoch, leader, start_offset, delivery_complete_count,
                              combine_state_batches((), batches, start_offset))

    # ------------------------------------------------------- background work

    async def snapshot_cold_partitions(self) -> int:
        """Re-snapshot share-partitions not snapshotted for the cold interval; return how many.

        Written ``COLD_SNAPSHOT_CHUNK`` share-partitions per batch, each its own write, so the loop
        gets a turn between them (10,000 share-partitions in one write held it for 180 ms)."""
        if not self._loaded:
            return 0
        states = self._states
        # Kafka's rule: when every partition's last snapshot is already a cold one, skip.
        if sum(s.create_timestamp != s.write_timestamp for s in states.values()) == len(states):
            return 0
        now = self._time_ms()
        cold = [k for k, s in states.items() if now - s.write_timestamp >= self.cold_snapshot_interval_ms]

        def op(keys: list[Key]):
            if not self._loaded:
                return 0, []
            records = [_resnapshot(k, s, now) for k in keys if (s := self._states.get(k)) is not None
                       and now - s.write_timestamp >= self.cold_snapshot_interval_ms]  # still there, still cold
            return len(records), records

        written = 0
        for i in range(0, len(cold), COLD_SNAPSHOT_CHUNK):
            if i:
                await asyncio.sleep(0)  # a write that needs no wait returns without giving the loop a turn
            written += await self._runtime.write(lambda keys=cold[i:i + COLD_SNAPSHOT_CHUNK]: op(keys))
        return written

    async def on_topics_deleted(self, topic_ids: Iterable[bytes]) -> int:
        """Tombstone every share-partition of deleted topics; return how many."""
        ids = {bytes(t) for t in topic_ids}
        def op():
            if not self._loaded:
                return 0, []
            records = [_tombstone(k) for k in self._states if k[1] in ids]
            return len(records), records

        return await self._runtime.write(op)

    def start_periodic_jobs(self) -> None:
        """Arm the cold-partition snapshot timer on the running loop (re-armed after each run)."""
        if self._active and self._timer is None and self.cold_snapshot_interval_ms > 0:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self.cold_snapshot_interval_ms / 1000, self._on_timer, loop)

    def _on_timer(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        self._job = loop.create_task(self._cold_job())

    async def _cold_job(self) -> None:
        try:
            await self.snapshot_cold_partitions()
        except Exception as exc:
            if not is_storage_error(exc):
                logger.exception("cold share-partition snapshot failed")
        finally:
            self._job = None
            self.start_periodic_jobs()

    def shutdown(self) -> None:
        """Stop serving (COORDINATOR_NOT_AVAILABLE from now on) and cancel the timer and a running load."""
        self._active = False
        self._runtime.cancel_load()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._job is not None:
            self._job.cancel()
            self._job = None
        if self._refresh is not None:
            self._refresh.cancel()
            self._refresh = None


class WaitingPersister:
    """The share coordinator as the in-process persister (share-partition leaders, the group coordinator).

    Kafka's PersisterStateManager retries COORDINATOR_LOAD_IN_PROGRESS with an exponential backoff
    (1 s, 2 s, 4 s, 8 s: five attempts) before the share partition fails with COORDINATOR_NOT_AVAILABLE;
    in process a call waits for the load instead, up to the same 15 s, then goes through."""

    WAIT_S = 15.0
    _RPCS = frozenset({"initialize_state", "read_state", "write_state", "delete_state", "read_state_summary"})

    def __init__(self, coordinator: ShareCoordinator):
        self._coordinator = coordinator

    @property
    def loading(self) -> bool:
        return self._coordinator.loading

    def __getattr__(self, name):
        fn = getattr(self._coordinator, name)
        if name not in self._RPCS:
            return fn

        async def call(request):
            if self._coordinator.loading:
                try:
                    await asyncio.wait_for(self._coordinator.wait_loaded(), self.WAIT_S)
                except TimeoutError:
                    pass
            return await fn(request)

        return call


def _raise_to(m: dict[Key, int], key: Key, value: int) -> None:
    if m.get(key, value) <= value:
        m[key] = value
