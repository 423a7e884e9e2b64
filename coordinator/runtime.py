"""What the coordinators share: record framing, the record log, and one commit discipline.

A coordinator record is a Kafka record whose key is ``int16 record type`` followed
by the key struct, and whose value is ``int16 value version`` followed by the value
struct, or ``None`` (a tombstone).  Coordinators never change their state directly:
an operation returns ``(response, records)``; the records are appended to the
coordinator's internal topic (``__consumer_offsets`` or ``__share_group_state``)
and then applied through the same ``replay`` used at start-up
(:class:`CoordinatorRuntime`, used by the group coordinator and the share-state
coordinator alike).

Loading (Kafka's ``CoordinatorRuntime`` / ``CoordinatorLoaderImpl``): the broker
accepts connections at once and :meth:`CoordinatorRuntime.start_loading` replays the
log in the background, yielding to the event loop every few milliseconds; until it
is done the coordinator's entry points answer COORDINATOR_LOAD_IN_PROGRESS
(:meth:`CoordinatorRuntime.unavailable_code`). A coordinator whose log is compacted
(``__consumer_offsets``, ``__transaction_state``) loads with ``latest_only``: the log
is read once for keys only and just the latest value of each key is decoded and
replayed, in log order, so the cost follows live keys rather than history (the
result is what replaying the fully compacted log gives).

:class:`RecordLog` is the durable append interface; :class:`MemoryRecordLog` is an
in-memory implementation for unit tests, and the broker provides one backed by a
partition log (``broker.internal_topics``).

Record versions (Kafka's ``CoordinatorRecordSerde`` and loader): a record type this release does
not know is skipped (a left-over of an aborted upgrade); a value version above the highest this
release knows fails the load (:class:`UnknownRecordVersion`, one error line), so a newer release's
record is never read with an older schema: the coordinator answers COORDINATOR_NOT_AVAILABLE.
"""
from __future__ import annotations

import asyncio
import logging
import struct
import time
from typing import Awaitable, Callable, Iterable, Iterator, Protocol, TypeVar

from protocol.errors import Errors

_I16 = struct.Struct(">h")
_log = logging.getLogger(__name__)


# Kafka's exception messages for the errors a coordinator answers while it cannot serve
_UNAVAILABLE_MESSAGES = {
    Errors.COORDINATOR_LOAD_IN_PROGRESS: "The coordinator is loading and hence can't process requests.",
    Errors.COORDINATOR_NOT_AVAILABLE: "The coordinator is not available.",
}


def unavailable_message(code: int) -> str | None:
    """Kafka's message for COORDINATOR_LOAD_IN_PROGRESS / COORDINATOR_NOT_AVAILABLE (None for others)."""
    return _UNAVAILABLE_MESSAGES.get(code)


class Record:
    """A decoded coordinator record: ``value`` is None for a tombstone."""

    __slots__ = ("record_type", "key", "value_version", "value")

    def __init__(self, record_type: int, key, value_version: int, value):
        self.record_type = record_type
        self.key = key
        self.value_version = value_version
        self.value = value

    def __repr__(self) -> str:
        return f"Record({self.record_type}, {self.key!r}, v{self.value_version}, {self.value!r})"


def is_storage_error(exc: BaseException) -> bool:
    """A failed append that the log layer has already reported (``broker/log/faults.STORAGE``: logged
    once with its path, counted, floods summarised): an OSError or an error carrying KAFKA_STORAGE_ERROR.
    A coordinator logs these at debug level only, so a full disk costs a line every few seconds, not one
    per request."""
    return isinstance(exc, OSError) or getattr(exc, "code", None) == Errors.KAFKA_STORAGE_ERROR


def log_append_failure(logger: logging.Logger, msg: str, *args, exc: BaseException) -> None:
    """Log a failed coordinator write: at debug for a storage error (reported where it happened), else
    as a warning."""
    logger.log(logging.DEBUG if is_storage_error(exc) else logging.WARNING, msg, *args)


def encode_record(key, value, value_version: int | None = None) -> tuple[bytes, bytes | None]:
    """Frame a key struct and value struct (or None) as coordinator record bytes."""
    record_type = type(key).API_KEY
    kbytes = _I16.pack(record_type) + key.encode(0)
    if value is None:
        return kbytes, None
    v = type(value).MAX_VERSION if value_version is None else value_version
    return kbytes, _I16.pack(v) + value.encode(v)


class UnknownRecordVersion(Exception):
    """A record's value version is above the highest this release reads."""


def decode_record(registry: dict, key: bytes, value: bytes | None) -> Record | None:
    """Decode record bytes with a registry {record type: (KeyClass, ValueClass)}; None if the type is
    unknown; raises :class:`UnknownRecordVersion` for a value version above the highest known."""
    mv = memoryview(key)
    record_type = _I16.unpack_from(mv, 0)[0]
    pair = registry.get(record_type)
    if pair is None:
        return None
    key_cls, value_cls = pair
    k = key_cls.decode_from(mv, 2, 0)[0]
    if value is None:
        return Record(record_type, k, -1, None)
    vm = memoryview(value)
    version = _I16.unpack_from(vm, 0)[0]
    if version > value_cls.MAX_VERSION:
        raise UnknownRecordVersion(f"record type {record_type} ({value_cls.__name__}) has value version "
                                   f"{version}; this release reads up to version {value_cls.MAX_VERSION}")
    version = max(version, value_cls.MIN_VERSION)
    return Record(record_type, k, version, value_cls.decode_from(vm, 2, version)[0])


class RecordLog(Protocol):
    """A coordinator's durable record log (one internal-topic partition)."""

    async def append(self, records: list[tuple[bytes, bytes | None]],
                     producer: tuple[int, int] | None = None) -> int:
        """Append records atomically (one batch); return the last offset once durable.
        ``producer`` (id, epoch): the batch is transactional, part of that producer's transaction
        (TxnOffsetCommit); the runtime passes it only when it is set."""

    def replay(self) -> Iterator[tuple[int, bytes, bytes | None] | None]:
        """Yield (offset, key, value) for every record, oldest first (None: a pause, nothing to apply)."""

    def replay_latest(self) -> Iterator[tuple[int, bytes, bytes | None] | None]:
        """Like :meth:`replay`, but only the latest record of each key (optional; a compacted log)."""

    def truncate_before(self, offset: int) -> None:
        """Allow records below ``offset`` to be deleted (pruning after snapshots)."""


class MemoryRecordLog:
    """In-memory :class:`RecordLog` for unit tests; ``fail_next`` simulates a write failure."""

    def __init__(self) -> None:
        self.records: list[tuple[int, bytes, bytes | None]] = []
        self.start_offset = 0
        self.fail_next: Exception | None = None

    async def append(self, records: Iterable[tuple[bytes, bytes | None]]) -> int:
        if self.fail_next is not None:
            err, self.fail_next = self.fail_next, None
            raise err
        offset = self.records[-1][0] + 1 if self.records else self.start_offset
        for k, v in records:
            self.records.append((offset, k, v))
            offset += 1
        return offset - 1

    def replay(self) -> Iterator[tuple[int, bytes, bytes | None]]:
        return iter(list(self.records))

    def replay_latest(self) -> Iterator[tuple[int, bytes, bytes | None]]:
        latest = {k: (o, k, v) for o, k, v in self.records}
        return iter(sorted(latest.values(), key=lambda r: r[0]))

    def truncate_before(self, offset: int) -> None:
        self.start_offset = max(self.start_offset, offset)
        self.records = [r for r in self.records if r[0] >= offset]


def record(key, value, value_version: int | None = None) -> Record:
    """A record to write: ``value`` None is a tombstone; version None means the value's highest."""
    return Record(type(key).API_KEY, key, value_version, value)


R = TypeVar("R")
Operation = Callable[[], "tuple[R, list[Record]]"]


class CoordinatorRuntime:
    """One coordinator's commit discipline (Kafka's ``CoordinatorRuntime``, one shard, one thread).

    A write operation is a synchronous function that reads the committed state and
    returns ``(response, records)`` without changing replayed state: whatever it decided
    travels in its result (the response, or a small holder with the response and a
    follow-up such as a persister request), never through a closure.  It may touch only
    in-memory state that is *not* replayed and that a failed append leaves harmless
    (timers it schedules or cancels, which re-check the committed state when they fire;
    memos such as when a group was last looked at); every such field says so where it is
    declared (e.g. ``ShareGroupManager``).  :meth:`write` runs it,
    appends its records to the coordinator's :class:`RecordLog` as one batch, replays
    them, in order and with their offsets, through the same ``replay(offset, record)``
    that :meth:`load` runs at start-up, and only then returns the response.

    Writers are serialised per coordinator in FIFO order (an ``asyncio.Lock`` hands
    itself over in arrival order): each operation computes on the state its
    predecessor committed, and nothing is answered before it is durable.  The lock is
    held for the computation, the append and the replay only: when the log syncs in the
    background (``append_unsynced``, durable mode), the write waits for its fsync outside
    the lock, so the writes that arrive meanwhile share the next fsync (group commit);
    a failed fsync leaves the replayed state ahead of the (offline) log, so the
    coordinator stops serving (COORDINATOR_NOT_AVAILABLE) until a restart; an operation never waits inside it
    for anything else (a classic JoinGroup parks its response future outside).  A check
    that gates a follow-up (e.g. "the group is empty" before a persister call) belongs in
    a write too, even one with no records: outside, it cannot see a write being appended.

    If the append raises, nothing was replayed and the exception reaches the caller,
    which answers with the error code its API uses (COORDINATOR_NOT_AVAILABLE,
    NOT_COORDINATOR, ...).  An operation that raises (e.g. a ``KafkaError`` from
    validation) writes nothing.

    ``replay=False`` writes records for durability only: the caller already changed
    its live in-memory state (classic groups, Kafka's ``replayRecords=false``), and the
    records are replayed at the next start-up only.

    Timer-triggered writes go through :meth:`schedule`, which runs the write as a
    task, logs any exception (none escapes a timer) and is awaited by :meth:`drain`.

    State (Kafka's CoordinatorState): active from construction (a coordinator over an
    empty log in a unit test) unless ``loading`` is given, loading from :meth:`start_loading`
    / :meth:`load` until the replay is done, failed if the replay raised or was cancelled. The owner checks
    :meth:`unavailable_code` at its entry points; a write issued while loading waits
    for the load (it holds the write lock).
    """

    LOAD_YIELD_S = 0.005  # give the event loop a turn at least this often while replaying

    def __init__(self, log: RecordLog, registry: dict, replay: Callable[[int, Record], None], *,
                 name: str = "coordinator", on_committed: Callable[[list[Record]], None] | None = None,
                 loading: bool = False):
        self.log = log
        self.name = name
        self._registry = registry
        self._replay = replay
        self._on_committed = on_committed
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task] = set()
        # written by load / start_loading (and the constructor); read by the owner's entry points
        self.loading = loading
        self.failed = False
        self._loaded: asyncio.Event | None = None  # set when a load ends (made by the first waiter)
        self._load_task: asyncio.Task | None = None

    def unavailable_code(self) -> int:
        """0 when the coordinator serves; COORDINATOR_LOAD_IN_PROGRESS while it loads, COORDINATOR_NOT_AVAILABLE
        after a failed load (Kafka's ``withActiveContextOrThrow``)."""
        if self.loading:
            return Errors.COORDINATOR_LOAD_IN_PROGRESS
        return Errors.COORDINATOR_NOT_AVAILABLE if self.failed else Errors.NONE

    def start_loading(self, *, latest_only: bool = False, before: Callable[[], Awaitable[None]] | None = None,
                      after: Callable[[], None] | None = None) -> None:
        """Load in the background (the caller goes on at once); loading from now until the replay ends.

        ``before()`` is awaited first (a test hold), ``after()`` runs once everything is replayed,
        before the first request is served. A failed load is logged and leaves the coordinator
        failed (COORDINATOR_NOT_AVAILABLE)."""
        self.loading = True

        async def run() -> None:
            try:
                if before is not None:
                    await before()
                await self.load(latest_only=latest_only, after=after)
            except asyncio.CancelledError:
                raise
            except UnknownRecordVersion as e:  # a newer release's record: said in one line, not a bug here
                _log.error("%s: loading failed: %s", self.name, e)
            except Exception:
                _log.exception("%s: loading failed", self.name)
            finally:
                if self.loading:  # cancelled before the replay began
                    self._end_load(ok=False)

        self._load_task = asyncio.get_running_loop().create_task(run())

    async def load(self, *, latest_only: bool = False, after: Callable[[], None] | None = None) -> None:
        """Replay the log through ``replay`` (start-up); with ``latest_only`` just the latest record
        of each key, when the log offers it. Yields to the loop every few milliseconds."""
        self.loading, self.failed = True, False
        ok = False
        try:
            async with self._lock:
                t0 = last = time.perf_counter()
                replay = getattr(self.log, "replay_latest", None) if latest_only else None
                replayed = 0
                for n, item in enumerate((replay or self.log.replay)(), 1):
                    if item is not None and item[1] is not None:  # a record without a key means nothing here
                        offset, key, value = item
                        rec = decode_record(self._registry, key, value)
                        if rec is not None:
                            self._replay(offset, rec)
                            replayed += 1
                    if n & 255 == 0 or item is None:
                        now = time.perf_counter()
                        if now - last >= self.LOAD_YIELD_S:
                            await asyncio.sleep(0)  # let the loop serve other requests during a long replay
                            last = time.perf_counter()
                if after is not None:
                    after()
                ok = True
        finally:
            self._end_load(ok)
        _log.info("%s loaded in %.0f ms (%d records replayed)", self.name, (time.perf_counter() - t0) * 1000,
                  replayed)

    def _end_load(self, ok: bool) -> None:
        self.loading, self.failed = False, not ok
        if self._loaded is not None:
            self._loaded.set()

    async def wait_loaded(self) -> None:
        """Return once no load is running (at once if none is)."""
        if not self.loading:
            return
        if self._loaded is None or self._loaded.is_set():
            self._loaded = asyncio.Event()
        await self._loaded.wait()

    def cancel_load(self) -> None:
        """Stop a background load (shutdown)."""
        if self._load_task is not None and not self._load_task.done():
            self._load_task.cancel()

    async def write(self, op: Callable[[], tuple[R, list[Record]]], *, replay: bool = True,
                    on_error: Callable[[R, Exception], R] | None = None,
                    producer: tuple[int, int] | None = None) -> R:
        """Compute ``(response, records)`` on committed state, append, replay, return the response.

        When the append fails: ``on_error(response, exc)`` answers instead, if given;
        otherwise the exception propagates.  Either way nothing was replayed.
        ``producer`` (id, epoch) appends the records as part of that producer's
        transaction (TxnOffsetCommit; use with ``replay=False``).
        """
        synced = None
        async with self._lock:
            response, records = op()
            if not records:
                return response
            encoded = [encode_record(r.key, r.value, r.value_version) for r in records]
            unsynced = getattr(self.log, "append_unsynced", None)
            try:
                if unsynced is not None:
                    last, synced = unsynced(encoded, producer)
                elif producer is None:
                    last = await self.log.append(encoded)
                else:
                    last = await self.log.append(encoded, producer=producer)
            except Exception as exc:
                if on_error is None:
                    raise
                log_append_failure(_log, "%s: appending %d records failed: %r", self.name, len(records), exc,
                                   exc=exc)
                return on_error(response, exc)
            if replay:
                for offset, r in enumerate(records, last - len(records) + 1):
                    self._replay(offset, r)
        if synced is not None:
            # Group commit: the next write computes and appends while this one's fsync runs (Kafka's runtime
            # likewise answers a write once the high watermark passes it). A failed fsync took the partition
            # offline; what was replayed is then ahead of the log, so the coordinator stops serving.
            try:
                await synced
            except Exception as exc:
                self.failed = True
                if on_error is None:
                    raise
                log_append_failure(_log, "%s: syncing %d records failed: %r", self.name, len(records), exc,
                                   exc=exc)
                return on_error(response, exc)
        if self._on_committed is not None:
            self._on_committed(records)
        return response

    def schedule(self, op: Callable[[], tuple[object, list[Record]]], what: str = "timer write") -> None:
        """Run a write in the background (timers); failures are logged, never raised."""
        self.spawn(self.write(op), what)

    def spawn(self, coro, what: str = "background work") -> None:
        """Run coordinator work as a task that :meth:`drain` awaits; exceptions are logged."""
        async def run() -> None:
            try:
                await coro
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if isinstance(getattr(exc, "code", None), int):  # an answer-shaped failure, e.g. a full disk
                    _log.warning("%s: %s failed: %s", self.name, what, exc)
                else:
                    _log.exception("%s: %s failed", self.name, what)

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Wait until background writes (and what they started) are done."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
