"""Share-partition leader: every state transition of one (group, topic-partition), as Kafka 4.4's SharePartition.

Pure logic on one event loop; no sockets. The share-partition manager (manager.py) drives it:

    sp = SharePartition(group, topic_id, partition, log=..., persister=..., config=...,
                        scheduler=loop, now_ms=...)
    await sp.initialize()                      # ReadShareGroupState, SPSO reset
    sp.update_log_start_offset(log.log_start_offset)   # the log-start move (Kafka's updateCacheAndOffsets)
    offset = sp.next_fetch_offset()            # a query: where the manager reads the log
    res = sp.acquire(member, log.read(offset, ...), max_records=..., batch_size=...,
                     acquire_mode=..., fetch_offset=offset)
    code = await sp.acknowledge(member, ack_batches)
    code = await sp.release_member(member)     # share session closed

The in-flight cache is cache.py, record states and locks inflight.py, the persister requests
persister.py. Persist, then commit: a transition marks its records in transition and a task writes
WriteShareGroupState; on the answer `_settle` commits or rolls back and returns what it decided
(dead-letter runs, locks that ran out meanwhile, the earliest delayed redelivery), and
`_follow_up` schedules those. What is implemented, and every deliberate difference from Kafka,
is in broker/share/README.md.
"""
from __future__ import annotations

import asyncio
import logging
import time
from functools import partial
from typing import Any, Callable, Iterable, NamedTuple, Sequence

from protocol.errors import Errors
from protocol.lazy_messages import WriteShareGroupStateRequest

from broker.share.acks import ACK_MAX_VERSION, ACK_REJECT, ACK_RENEW, validate_ack_batches
from broker.share.cache import InFlightCache
from broker.share.config import ShareGroupConfig
from broker.share.errors import ShareError
from broker.share.fair import Demand, fair_piece, last_new_to_acquire
from broker.share.fetched import overlapping, without_ranges
from broker.share.inflight import (  # noqa: F401  (the states are part of this module's API)
    ACKNOWLEDGED, ACQUIRED, ARCHIVED, ARCHIVING, AVAILABLE, AcquisitionLock,
    InFlightBatch, InFlightState, coalesce, merge_runs, terminal, unsettled,
)
from broker.share.persister import FENCING_ERRORS, PersisterAdapter

log = logging.getLogger(__name__)

_ACK_TARGET = (ARCHIVED, ACKNOWLEDGED, AVAILABLE, ARCHIVED)  # state an ack type leads to, by type
# ShareFetchRequest.ShareAcquireMode.
BATCH_OPTIMIZED, RECORD_LIMIT = 0, 1
# Partition lifecycle.
EMPTY, INITIALIZING, ACTIVE, FAILED, FENCED = "EMPTY", "INITIALIZING", "ACTIVE", "FAILED", "FENCED"

# What a persister write is for: `_settle` delays redeliveries after _ACK / _EXPIRY only, and
# `_follow_up` retries an _EXPIRY whose write failed instead of expiring its lock again.
_ACK, _RELEASE, _EXPIRY, _LOG_START, _DLQ = "ack", "release", "expiry", "log start", "dead letter"


class AcquireResult(NamedTuple):
    acquired: list[tuple[int, int, int]]   # (first_offset, last_offset, delivery_count), ascending
    batches: list[Any]                     # the fetched batch refs overlapping `acquired`
    count: int                             # number of offsets acquired


_EMPTY = AcquireResult([], [], 0)


class Settled(NamedTuple):
    """What committing or rolling back one persister write decided (`SharePartition._settle`)."""
    dead: list[tuple[int, int, int, int]]  # (first, last, delivery count, cause) now ARCHIVING: for the DLQ
    expired: list[AcquisitionLock]         # locks that ran out while their records were being written
    archived: int                          # records committed ARCHIVED by REJECT or the delivery limit
    due_ms: int | None                     # earliest delayed redelivery the commit set (event-loop ms)
    wake: bool                             # records became AVAILABLE or the SPSO moved: fetches may acquire


class SharePartition:
    """Leader state of one share partition. All methods run on the owning event loop."""

    __slots__ = ("group_id", "topic_id", "partition", "config", "state_epoch",
                 "start_offset", "_end", "_cache", "_find_next", "_dcc",
                 "_pending_terminal", "_status", "_error", "_init_task", "_tasks", "_log",
                 "_store", "_scheduler", "_now_ms", "_wall_ms", "_on_state_change",
                 "_retry_backoff_ms", "archived_count", "isolated", "demand", "_dlq", "_dlq_tasks", "_due_handle", "_due_at")

    def __init__(self, group_id: str, topic_id: bytes, partition: int, *, log: Any, persister: Any,
                 config: ShareGroupConfig, scheduler: Any, now_ms: Callable[[], int],
                 leader_epoch: int = 0, on_state_change: Callable[[], None] | None = None,
                 retry_backoff_ms: int = 1000, wall_ms: Callable[[], int] | None = None,
                 dlq: Callable[["SharePartition", list], Any] | None = None):
        """`scheduler.call_later(delay_s, callback) -> handle` runs the lock timers and `now_ms()`
        is the same clock in ms (the event loop's); `wall_ms()` is epoch ms for by_duration.
        `await dlq(sp, runs)` writes the dead-letter records of ARCHIVING `runs` ((first, last,
        delivery count, cause) tuples) durably, retrying as it sees fit (broker/share/dlq.py);
        without it a group's dead-letter queue is off and such records are archived at once."""
        self.group_id, self.topic_id, self.partition = group_id, topic_id, partition
        self.config = config
        self.state_epoch = 0
        self.start_offset = 0          # SPSO
        self._end = 0                  # one past the last offset ever cached (SPEO + 1)
        self._cache = InFlightCache()  # the in-flight batches
        self._find_next = False        # some cached record may be AVAILABLE (next_fetch_offset clears it)
        self._dcc = 0                  # committed terminal records at/after the SPSO
        # (first, last) runs going terminal in each write not yet answered: they count in the
        # DeliveryCompleteCount a write sends, clipped at the SPSO of that moment.
        self._pending_terminal: list[list[tuple[int, int]]] = []
        self._status = EMPTY
        self._error = Errors.NONE
        self._init_task: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()
        self._log = log
        self._store = PersisterAdapter(persister, group_id, topic_id, partition, leader_epoch)
        self._scheduler, self._now_ms = scheduler, now_ms
        self._wall_ms = wall_ms or (lambda: int(time.time() * 1000))
        self._on_state_change = on_state_change
        self._retry_backoff_ms = retry_backoff_ms
        self.archived_count = 0        # records committed ARCHIVED by REJECT, delivery limit or the DLQ
        self.isolated = False          # the last acquire isolated poison records: the partition's whole fetch
        self.demand = Demand()         # each member's last fetch of the partition (fair acquisition)
        self._dlq = dlq
        self._dlq_tasks: set[asyncio.Task] = set()
        self._due_handle: Any = None   # timer of the earliest delayed redelivery
        self._due_at: int | None = None

    # ------------------------------------------------------------------ introspection

    @property
    def leader_epoch(self) -> int:
        return self._store.leader_epoch

    @property
    def status(self) -> str:
        return self._status

    @property
    def error_code(self) -> int:
        return self._error

    @property
    def end_offset(self) -> int:
        """One past the last offset in flight (SPEO + 1); the next new offset to acquire."""
        return self._end

    @property
    def delivery_complete_count(self) -> int:
        """Committed ACKNOWLEDGED/ARCHIVED records at or after the SPSO (KIP-1226)."""
        return self._dcc

    @property
    def in_flight_count(self) -> int:
        """Size of the SPSO..SPEO window that partition.max.record.locks bounds."""
        return max(0, self._end - self.start_offset) if self._cache else 0

    @property
    def source_log(self) -> Any:
        """The partition log this share partition delivers from (the DLQ reads copied records here)."""
        return self._log

    @property
    def acquisition_lock_timeout_ms(self) -> int:
        return self.config.record_lock_duration_ms

    def record_state(self, offset: int) -> tuple[int, int, str, bool] | None:
        """(state, delivery_count, member_id, in_transition) of a cached offset, for tests and tools."""
        st = self._cache.state_at(offset)
        if st is None:
            return None
        return st.state, st.delivery_count, st.member_id, st.rollback is not None

    # ------------------------------------------------------------------ lifecycle

    async def initialize(self) -> None:
        """Load the state from the persister once; raises ShareError when that fails."""
        if self._status == ACTIVE:
            return
        if self._status in (FAILED, FENCED):
            raise ShareError(self._error)
        if self._init_task is None:
            self._status = INITIALIZING
            self._init_task = self._spawn(self._initialize())
        await asyncio.shield(self._init_task)

    async def _initialize(self) -> None:
        try:
            await self._load_state()
        except Exception as e:
            if not isinstance(e, ShareError):
                log.exception("initializing %s failed", self)
                e = ShareError(Errors.UNKNOWN_SERVER_ERROR, "share partition initialization failed")
            if self._status == INITIALIZING:
                self._status, self._error = FAILED, e.code
            raise e from None
        self._status = ACTIVE
        # KIP-1191: records persisted ARCHIVING (the broker stopped between the two phases) have
        # their dead-letter records written again (a duplicate in the DLQ topic is possible).
        runs = [(lo, hi, st.delivery_count, st.cause) for _, lo, hi, st in self._cache.runs()
                if st.state == ARCHIVING]
        if runs:
            log.info("%s: %d record(s) found ARCHIVING, writing their dead-letter records again", self,
                     sum(hi - lo + 1 for lo, hi, _, _ in runs))
            self._dead_letter(runs)
        self._notify()

    async def _load_state(self) -> None:
        part = await self._store.read()
        if self._status != INITIALIZING:
            raise ShareError(self._error or Errors.NOT_LEADER_OR_FOLLOWER)
        self.state_epoch = part.state_epoch
        start = part.start_offset
        self._load(self.config.reset_offset(self._log, self._wall_ms()) if start < 0 else start, part.state_batches)
        if start < 0:
            # Persist the SPSO chosen by share.auto.offset.reset (KIP-932 example, first row).
            code = await self._store.write(self._write_request([]))
            if code:
                raise ShareError(code, "writing the initial share-partition start offset failed")
        elif self._log is not None and self._log.log_start_offset > start:
            # The log start passed the persisted SPSO while this partition was not led (retention
            # during a restart): persist the moved SPSO and DeliveryCompleteCount so the share
            # coordinator's lag is exact again. A failure only leaves it to the next write.
            code = await self._store.write(self._write_request([]))
            if code:
                log.info("%s: persisting the SPSO moved by the log start failed (%d)", self, code)

    def _load(self, start: int, state_batches: Sequence[Any]) -> None:
        self.start_offset = start
        self._end, self._dcc = self._cache.load(start, state_batches, self.config.delivery_count_limit)
        self._find_next = bool(self._cache)
        lso = self._log.log_start_offset if self._log is not None else start
        if lso > self.start_offset:
            self._move_start_to_log_start(lso)
        self._advance_start()

    def close(self) -> None:
        """Stop: cancel every lock timer and dead-letter write (records stay ARCHIVING, persisted,
        and are written again by the next leader); later calls see NOT_LEADER_OR_FOLLOWER."""
        for task in list(self._dlq_tasks):
            task.cancel()
        if self._due_handle is not None:
            self._due_handle.cancel()
            self._due_handle = self._due_at = None
        for _, _, _, st in self._cache.runs():
            if st.lock is not None and st.lock.handle is not None:
                st.lock.handle.cancel()
                st.lock.handle = None
        if self._status not in (FAILED, FENCED):
            self._status, self._error = FENCED, Errors.NOT_LEADER_OR_FOLLOWER
        self._notify()

    async def drain(self) -> None:
        """Wait until no persister write, initialization or dead-letter write of this partition is running."""
        while self._tasks or self._dlq_tasks:
            await asyncio.gather(*list(self._tasks), *list(self._dlq_tasks), return_exceptions=True)

    # ------------------------------------------------------------------ fetch side

    def next_fetch_offset(self) -> int:
        """The offset the manager should read the log from (Kafka's nextFetchOffset). A query: it
        only forgets a stale find-next hint; the log-start move is update_log_start_offset()."""
        if self._find_next and self._cache:
            found = self._cache.first_acquirable(self.start_offset, self._now_ms())
            if found is not None:
                return found
            self._find_next = False
        return self._end

    def acquire(self, member_id: str, batches: Sequence[Any], *, max_records: int, batch_size: int,
                acquire_mode: int = BATCH_OPTIMIZED, fetch_offset: int | None = None,
                aborted: Iterable[tuple[int, int]] | None = None,
                request_max_records: int | None = None, shared: bool = True) -> AcquireResult:
        """Acquire records for `member_id` from `batches` (log batch refs, ascending, read at fetch_offset).

        `batches` items need `base_offset` and `last_offset`; the ones returned in the result
        are those overlapping the acquired ranges. `aborted` lists (first, last) offset ranges
        of aborted transactional batches (read_committed): acquired offsets in them are
        archived instead of delivered. With the group's fair acquisition (batch_optimized mode
        only) a batch of more than `request_max_records` (the request's MaxRecords; default
        `max_records`) records is acquired at most `max_records` at a time (fair.py) when `shared`
        (another member wants records of the partition: ``demand``, asked by the manager).
        """
        self.isolated = False
        if self._status != ACTIVE or max_records <= 0 or not batches:
            return _EMPTY
        first_base, last_fetched = batches[0].base_offset, batches[-1].last_offset
        if last_fetched < self.start_offset:
            return _EMPTY
        if fetch_offset is None:
            fetch_offset = first_base
        max_acquire = min(max_records, self.config.partition_max_record_locks - self.in_flight_count)
        last_acquire = last_fetched
        if max_acquire <= 0:
            # Window full: only records already in flight (redeliveries) may be taken.
            if fetch_offset >= self._end:
                return _EMPTY
            max_acquire = min(max_records, self._end - fetch_offset)
            last_acquire = min(last_fetched, self._end - 1)
        if fetch_offset < first_base:
            self._archive_stale(fetch_offset, first_base)

        record_limit = acquire_mode == RECORD_LIMIT
        piece = fair_piece(self.config, acquire_mode == BATCH_OPTIMIZED, request_max_records or max_records,
                           shared)
        limit = self.config.delivery_count_limit
        now = self._now_ms()
        throttle_at = max(2, -(-limit // 2))
        out: list[tuple[int, int, int]] = []
        count, stopped = 0, False
        lo = max(first_base, self.start_offset)
        cache = self._cache
        i = max(cache.floor(lo), 0)
        while i < len(cache) and count < max_acquire:
            b = cache.batches[i]
            i += 1
            if b.first > last_acquire:
                break
            if b.last < lo:
                continue
            remaining = max_acquire - count
            limited = record_limit or 0 < piece <= b.last - b.first  # acquired at most `remaining` at a time
            throttle = self._should_throttle(b, lo, last_acquire, throttle_at, now)
            if throttle and count:
                stopped = True  # isolate the suspicious records in a later fetch
                break
            if b.offsets is None:
                st = b.state
                if st.state != AVAILABLE or st.rollback is not None or st.due_ms > now:
                    continue  # not available, or waiting for its delayed redelivery
                whole = b.first >= first_base and b.last <= last_acquire
                if limited and not throttle and (not whole or b.last - b.first + 1 > remaining):
                    # Cut out the run to acquire (at most `remaining` records) instead of keeping a
                    # state per offset of the whole batch: the rest stays AVAILABLE as its own batch.
                    run_lo = max(b.first, lo)
                    run_hi = min(b.last, last_acquire, run_lo + remaining - 1)
                    if run_lo > run_hi:
                        continue
                    if run_lo > b.first:
                        b = cache.split(i - 1, run_lo)
                        i += 1
                    if run_hi < b.last:
                        cache.split(i - 1, run_hi + 1)
                        i += 1
                    whole = True
                if whole and not throttle:
                    st.take(member_id, self._new_lock(member_id, b.first, b.last))
                    out.append((b.first, b.last, st.delivery_count))
                    count += b.last - b.first + 1
                    continue
                b.explode()
            n = self._acquire_offsets(member_id, b, lo, last_acquire, limited, remaining,
                                      limit, throttle_at, out, now)
            count += n
            if throttle and n:
                stopped = True
                break
        if not stopped and count < max_acquire:
            new_first = max(lo, self._end)
            if new_first <= last_acquire:
                count += self._acquire_new(member_id, batches, new_first, last_acquire, batch_size,
                                           max_acquire - count, record_limit, piece, out)
        if aborted and out:
            out, count = self._drop_aborted(out, aborted)
        if not out:
            return _EMPTY
        self.isolated = stopped
        return AcquireResult(out, overlapping(batches, out), count)

    def _should_throttle(self, b: InFlightBatch, lo: int, hi: int, throttle_at: int, now: int) -> bool:
        for _, _, st in b.states(lo, hi):
            if st.state == AVAILABLE and st.rollback is None and st.due_ms <= now \
                    and st.delivery_count >= throttle_at:
                return True
        return False

    def _acquire_offsets(self, member: str, b: InFlightBatch, lo: int, hi: int, record_limit: bool,
                         remaining: int, limit: int, throttle_at: int,
                         out: list[tuple[int, int, int]], now: int) -> int:
        n, cap, prev, lock = 0, -1, -2, None
        offs = b.offsets
        for off in range(max(b.first, lo), min(b.last, hi) + 1):
            st = offs[off - b.first]
            if st.state != AVAILABLE or st.rollback is not None or st.due_ms > now:
                continue
            dc = st.delivery_count
            if limit > 2 and dc == limit - 1 and n:
                break  # the record's last attempt is delivered alone
            if cap < 0 and dc >= throttle_at:
                cap = max(1, len(offs) >> (dc - throttle_at + 1))
            if lock is None or prev != off - 1:
                lock = self._new_lock(member, off, off)
            else:
                lock.last = off
            st.take(member, lock)
            if prev == off - 1 and out[-1][2] == dc + 1:
                out[-1] = (out[-1][0], off, dc + 1)
            else:
                out.append((off, off, dc + 1))
            prev = off
            n += 1
            if (limit > 2 and dc + 1 == limit) or (record_limit and n == remaining) or n == cap:
                break
        return n

    def _acquire_new(self, member: str, batches: Sequence[Any], first: int, last: int,
                     batch_size: int, remaining: int, record_limit: bool, piece: int,
                     out: list[tuple[int, int, int]]) -> int:
        if self.start_offset >= self._end:
            self.start_offset = first  # nothing in flight: skip the hole before `first`
        if remaining < last - first + 1:
            # Whole log batches (Kafka), or with fair acquisition exactly `remaining` records of a
            # big one or of one that the max-record-locks window cuts; the rest stays in the log.
            last = last_new_to_acquire(batches, first, last, remaining, piece,
                                       self.start_offset + self.config.partition_max_record_locks - 1)
        self._end = max(self._end, last + 1)
        if record_limit and last - first + 1 > remaining:
            # Only MaxRecords offsets of the log batch are acquired; the cache keeps the rest of
            # it as an AVAILABLE batch of its own (Kafka keeps one batch with a state per offset).
            self._add_acquired(member, first, first + remaining - 1, out)
            self._cache.insert(InFlightBatch(first + remaining, last, InFlightState(AVAILABLE, 0)))
            self._find_next = True
            return remaining
        cur = first
        if not record_limit and 0 < batch_size < last - first + 1:
            for bt in batches:
                base = bt.base_offset
                if base > last:
                    break
                if base - cur >= batch_size:
                    self._add_acquired(member, cur, base - 1, out)
                    cur = base
        self._add_acquired(member, cur, last, out)
        return last - first + 1

    def _add_acquired(self, member: str, first: int, last: int, out: list) -> None:
        st = InFlightState(AVAILABLE, 0)
        st.take(member, self._new_lock(member, first, last))
        self._cache.insert(InFlightBatch(first, last, st))
        out.append((first, last, 1))

    def _archive_stale(self, fetch_offset: int, base: int) -> None:
        """Archive AVAILABLE records in fetch_offset..base-1: compaction removed them from the log."""
        if self._archive_range(fetch_offset, base - 1, AVAILABLE):
            self._find_next = True
            self._advance_start()

    def _drop_aborted(self, out: list[tuple[int, int, int]], aborted: Iterable[tuple[int, int]]):
        kept, dropped = without_ranges(out, aborted)
        for lo, hi in dropped:
            self._archive_range(lo, hi, ACQUIRED)
        self._advance_start()
        return kept, sum(l - f + 1 for f, l, _ in kept)

    def _archive_range(self, lo: int, hi: int, from_state: int) -> bool:
        """In-memory archive (not persisted, as Kafka) of settled `from_state` records in lo..hi."""
        changed = False
        for _b, s_lo, s_hi, st in self._cache.in_state(lo, hi, from_state):
            st.archive()
            if s_hi >= self.start_offset:
                self._dcc += s_hi - max(s_lo, self.start_offset) + 1
            changed = True
        return changed

    # ------------------------------------------------------------------ acknowledge side

    async def acknowledge(self, member_id: str, batches: Sequence[Any]) -> int:
        """Apply AcknowledgementBatches (objects with first_offset, last_offset, acknowledge_types).

        All batches apply or none: the records change only once the persister has
        written them. Returns 0 or the partition's error code.
        """
        code = self._inactive_code() or validate_ack_batches(batches, ACK_MAX_VERSION, is_renew_ack=True)
        if code:
            return code
        changes: list[tuple[InFlightBatch, int, int]] = []
        renew: list[tuple[InFlightBatch, int, int]] = []
        code = self._begin_acks(member_id, batches, changes, renew)
        if code:
            self._follow_up(self._settle(changes, False, _ACK), _ACK)
            return code
        if renew:
            self._renew(member_id, renew)
        if not changes:
            return Errors.NONE
        return await asyncio.shield(self._start_write(changes, _ACK))

    def _begin_acks(self, member: str, batches: Sequence[Any], changes: list, renew: list) -> int:
        renew_enabled = self.config.renew_acknowledge_enable
        for ab in batches:
            first, last, types = ab.first_offset, ab.last_offset, ab.acknowledge_types
            if last < self.start_offset:
                continue  # already archived: nothing to do (Kafka skips these)
            lo = max(first, self.start_offset)
            if self._cache.floor(lo) < 0:
                return Errors.INVALID_RECORD_STATE
            top = self._cache.batches[self._cache.floor(last)].last
            if top < lo or last > top:
                return Errors.INVALID_REQUEST  # offsets past the records handed out
            runs = self._cache.held_by(member, lo, last, per_offset=len(types) > 1)
            if runs is None:
                return Errors.INVALID_RECORD_STATE
            for b, s_lo, s_hi, st in runs:
                t = types[0] if len(types) == 1 else types[s_lo - first]
                code = self._ack_one(b, s_lo, s_hi, st, t, renew_enabled, changes, renew)
                if code:
                    return code
        return Errors.NONE

    def _ack_one(self, b: InFlightBatch, lo: int, hi: int, st: InFlightState, ack_type: int,
                 renew_enabled: bool, changes: list, renew: list) -> int:
        if ack_type == ACK_RENEW:
            if not renew_enabled:
                return Errors.INVALID_RECORD_STATE
            renew.append((b, lo, hi))
        elif self._begin(st, _ACK_TARGET[ack_type], reject=ack_type == ACK_REJECT):
            changes.append((b, lo, hi))
        else:
            return Errors.INVALID_RECORD_STATE
        return Errors.NONE

    def _renew(self, member: str, targets: list[tuple[InFlightBatch, int, int]]) -> None:
        runs: list[list] = []
        for b, lo, hi in targets:
            if runs and runs[-1][0] is b and runs[-1][2] == lo - 1:
                runs[-1][2] = hi
            else:
                runs.append([b, lo, hi])
        for b, lo, hi in runs:
            lock = self._new_lock(member, lo, hi)
            for _, _, st in b.states(lo, hi):
                st.relock(lock)

    async def release_member(self, member_id: str) -> int:
        """Return every record `member_id` holds here to AVAILABLE (share session closed).

        As Kafka 4.3+ (KAFKA-19972, `DeliveryCountOps.NO_OP` on session release), the
        delivery count the acquisition gave is kept, so a consumer that keeps crashing
        cannot loop a poison record forever: at the delivery count limit the record is
        archived instead.
        """
        self.demand.forget(member_id)
        if self._status != ACTIVE:
            return Errors.NONE
        changes = []
        for b, lo, hi, st in self._cache.runs():
            if st.state == ACQUIRED and st.member_id == member_id and st.rollback is None:
                self._begin(st, AVAILABLE)
                changes.append((b, lo, hi))
        if not changes:
            return Errors.NONE
        return await asyncio.shield(self._start_write(changes, _RELEASE))

    def _on_lock_expired(self, lock: AcquisitionLock) -> None:
        lock.handle = None
        if lock.refs <= 0 or self._status != ACTIVE:
            return
        lock.expired = True
        changes = []
        for b, lo, hi, st in list(self._cache.under_lock(lock)):
            if st.state == ACQUIRED and st.rollback is None:
                self._begin(st, AVAILABLE)
                changes.append((b, lo, hi))
        if changes:
            self._start_write(changes, _EXPIRY)

    # ------------------------------------------------------------------ persist, then commit

    def _start_write(self, changes: list[tuple[InFlightBatch, int, int]], kind: str) -> asyncio.Task:
        runs = coalesce(changes)
        going_terminal = [(lo, hi) for lo, hi, s, _ in runs if terminal(s)]
        self._pending_terminal.append(going_terminal)
        req = self._write_request(runs)
        return self._spawn(self._write_and_settle(req, changes, kind, going_terminal))

    async def _write_and_settle(self, req: Any, changes: list, kind: str, going_terminal: list) -> int:
        try:
            code = await self._store.write(req)
        finally:
            self._pending_terminal.remove(going_terminal)
        self._follow_up(self._settle(changes, code == Errors.NONE, kind), kind)
        if code in FENCING_ERRORS and self._status == ACTIVE:
            self._status, self._error = FENCED, code
        return code

    def _write_request(self, runs: list[tuple[int, int, int, int]]) -> WriteShareGroupStateRequest:
        """StartOffset = the SPSO now; DeliveryCompleteCount (KIP-1226: offsets at or after it whose
        delivery is complete) = the committed terminal records plus those going terminal in the
        writes not yet answered, this one included, so that LEO - StartOffset - DeliveryCompleteCount
        is the lag once the write is applied."""
        start = self.start_offset
        pending = sum(hi - max(lo, start) + 1 for runs_ in self._pending_terminal for lo, hi in runs_ if hi >= start)
        return self._store.write_request(state_epoch=self.state_epoch, start_offset=start,
                                         delivery_complete_count=self._dcc + pending, runs=runs)

    def _settle(self, changes: list[tuple[InFlightBatch, int, int]], ok: bool, kind: str) -> Settled:
        """Commit (`ok`) or roll back the transitions started for `changes`: record states, their
        locks, DeliveryCompleteCount, due times of delayed redeliveries, the SPSO. Starts nothing
        (no write, timer, task or wake-up): it returns what the follow-up has to do."""
        expired: dict[int, AcquisitionLock] = {}
        start, now = self.start_offset, self._now_ms()
        dead: list[tuple[int, int, int, int]] = []
        archived, due, wake = 0, None, False
        delay_runs = ok and kind in (_ACK, _EXPIRY) and self.config.redelivery_backoff_ms > 0
        for b, lo, hi in changes:
            for s_lo, s_hi, st in b.states(lo, hi):
                prev = st.complete_transition(ok)
                if prev is None:
                    continue
                if st.state == ACQUIRED:
                    if st.lock is not None and st.lock.expired:
                        expired[id(st.lock)] = st.lock
                    continue
                st.drop_lock()
                if st.state == AVAILABLE:
                    self._find_next = wake = True
                    if delay_runs and prev[0] == ACQUIRED:  # RELEASE or lock expiry: delayed redelivery
                        delay = self.config.redelivery_delay_ms(st.delivery_count)
                        if delay:
                            st.due_ms = now + delay
                            due = st.due_ms if due is None else min(due, st.due_ms)
                elif ok and st.state == ARCHIVING:
                    dead.append((s_lo, s_hi, st.delivery_count, st.cause))
                elif ok:
                    if s_hi >= start:
                        self._dcc += s_hi - max(s_lo, start) + 1
                    if st.state == ARCHIVED and prev[0] != ARCHIVED and st.cause:  # not a GAP
                        archived += s_hi - s_lo + 1
        if ok and self._advance_start():
            wake = True
        self._cache.trim(self.start_offset)
        return Settled(dead, list(expired.values()), archived, due, wake)

    def _follow_up(self, done: Settled, kind: str) -> None:
        """Act on a settled write: expire (or retry expiring) locks, arm the delayed-redelivery
        timer, start the dead-letter phase, count archived records, wake the long polls when a
        fetch may acquire more than before (not for acknowledgements behind the SPSO's head)."""
        for lock in done.expired:
            if kind == _EXPIRY:  # the expiry itself was not persisted: try again later
                if lock.handle is None:
                    lock.expired = False
                    lock.handle = self._scheduler.call_later(
                        self._retry_backoff_ms / 1000.0, partial(self._on_lock_expired, lock))
            else:  # the lock ran out while this transition was being written
                self._on_lock_expired(lock)
        if done.due_ms is not None:
            self._schedule_due(done.due_ms)
        if done.dead:
            self._dead_letter(done.dead)
        self.archived_count += done.archived
        if done.wake:
            self._notify()

    # ------------------------------------------------------------------ delayed redelivery

    def _schedule_due(self, due_ms: int) -> None:
        """Wake the long polls when the earliest delayed record becomes acquirable."""
        if self._due_at is not None and self._due_at <= due_ms:
            return
        if self._due_handle is not None:
            self._due_handle.cancel()
        self._due_at = due_ms
        self._due_handle = self._scheduler.call_later(max(0, due_ms - self._now_ms()) / 1000.0, self._on_due)

    def _on_due(self) -> None:
        self._due_handle = self._due_at = None
        if self._status != ACTIVE:
            return
        now = self._now_ms()
        later = [st.due_ms for _, _, _, st in self._cache.runs() if st.state == AVAILABLE and st.due_ms > now]
        if later:
            self._schedule_due(min(later))
        self._find_next = True
        self._notify()

    # ------------------------------------------------------------------ dead-letter queue (KIP-1191)

    @property
    def dlq_enabled(self) -> bool:
        """Kafka's isDLQEnabledForGroup: share.version 2 (finalized) and a DLQ topic named by the group."""
        return self._dlq is not None and bool(self.config.dlq_topic)

    def _dead_letter(self, runs: list[tuple[int, int, int, int]]) -> None:
        """Second phase for committed ARCHIVING `runs`: write their dead-letter records, then ARCHIVED.

        Runs in a task of its own: acknowledgements of other records go on meanwhile, and the
        SPSO stops at these records until they are ARCHIVED."""
        task = asyncio.get_running_loop().create_task(self._dead_letter_run(merge_runs(runs)))
        self._dlq_tasks.add(task)
        task.add_done_callback(self._dlq_tasks.discard)

    async def _dead_letter_run(self, runs: list) -> None:
        if self._dlq is not None:
            try:
                await self._dlq(self, runs)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s: writing dead-letter records failed", self)
        while self._status == ACTIVE:
            changes = self._begin_archived(runs)
            if not changes:
                return
            code = await asyncio.shield(self._start_write(changes, _DLQ))  # a close must not cancel the write
            if code == Errors.NONE or code in FENCING_ERRORS:
                return
            await asyncio.sleep(self._retry_backoff_ms / 1000.0)

    def _begin_archived(self, runs: list) -> list[tuple[InFlightBatch, int, int]]:
        """Start ARCHIVING -> ARCHIVED (persisted) for the records of `runs` still ARCHIVING."""
        changes = []
        for first, last, _dc, _cause in runs:
            for b, lo, hi, st in self._cache.in_state(first, last, ARCHIVING):
                st.rollback = (ARCHIVING, st.delivery_count, "")
                st.state = ARCHIVED
                changes.append((b, lo, hi))
        return changes

    # ------------------------------------------------------------------ SPSO and log start

    def update_log_start_offset(self, log_start_offset: int) -> None:
        """The log start offset moved (retention, DeleteRecords): the SPSO follows it up (Kafka's
        updateCacheAndOffsets). The manager calls it before each read of the log; nothing else does."""
        if self._status == ACTIVE and log_start_offset > self.start_offset:
            self._move_start_to_log_start(log_start_offset)
            # Persisted at once (Kafka writes it with the next acknowledgement): the share
            # coordinator's SPSO and DeliveryCompleteCount give the lag (KIP-1226), which must
            # not count records that retention or DeleteRecords removed.
            self._start_write([], _LOG_START)
            self._notify()

    def _move_start_to_log_start(self, lso: int) -> None:
        # Records below the new log start are gone: archive them, acquired ones included
        # (an acknowledgement for them is then skipped, as Kafka skips offsets below the SPSO).
        for b in self._cache:
            if b.first >= lso:
                break
            if b.offsets is None and b.last >= lso and unsettled(b.state):
                b.explode()
            for _, _, st in b.states(b.first, lso - 1):
                if unsettled(st):
                    st.archive()
        self.start_offset = lso
        self._end = max(self._end, lso)
        self._find_next = True
        self._dcc = self._cache.terminal_count(lso)
        self._advance_start()
        self._cache.trim(self.start_offset)

    def _advance_start(self) -> bool:
        """Move the SPSO over the contiguous prefix of settled terminal records."""
        pos, removed, blocked = self._cache.settled_prefix(self.start_offset)
        if not blocked:
            pos = max(pos, self._end)
        if pos == self.start_offset:
            return False
        self.start_offset = pos
        self._dcc -= removed
        self._cache.trim(pos)
        return True

    # ------------------------------------------------------------------ helpers

    def _begin(self, st: InFlightState, target: int, reject: bool = False) -> bool:
        return st.start_transition(target, delivery_count_limit=self.config.delivery_count_limit,
                                   dlq=self.dlq_enabled, reject=reject)

    def _new_lock(self, member: str, first: int, last: int) -> AcquisitionLock:
        duration = self.config.record_lock_duration_ms
        lock = AcquisitionLock(member, first, last, self._now_ms() + duration)
        lock.handle = self._scheduler.call_later(duration / 1000.0, partial(self._on_lock_expired, lock))
        return lock

    def _inactive_code(self) -> int:
        if self._status == ACTIVE:
            return Errors.NONE
        if self._status in (EMPTY, INITIALIZING):
            return Errors.LEADER_NOT_AVAILABLE
        return self._error

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a failed initialization is reported to its awaiters

    def _notify(self) -> None:
        if self._on_state_change is not None:
            try:
                self._on_state_change()
            except Exception:
                log.exception("share partition listener failed")

    def __repr__(self) -> str:
        return (f"SharePartition({self.group_id!r}, {self.topic_id.hex()}-{self.partition}, "
                f"{self._status}, spso={self.start_offset}, end={self._end})")
