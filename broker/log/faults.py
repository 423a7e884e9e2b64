"""Storage faults said once, counted, and summarised; the descriptor reserve that keeps a roll possible;
the bound on open segment files.

:class:`FaultLog` is where every failed file operation is reported (``report(operation, path,
exc)``): the first failure of an (operation, error) pair is logged as a warning naming the path,
the operation and the error; more of the same within ``summary_s`` seconds are only counted, and
the next one after that logs one line "N more ... in the last M s" (so a flood costs a line every
few seconds, not a line per request). ``counts`` holds the totals per (operation, error name) for
the metric ``sharebroker_storage_errors_total`` and the status page. One instance for the broker's
files, :data:`STORAGE`; the server keeps another for failed accepts.

:class:`FdReserve` holds a few descriptors opened on ``/dev/null``. When an open that must not fail
(a segment roll, the undo of a refused topic) meets the open-file limit (EMFILE / ENFILE), the
reserve is closed, the open is tried again in the room it made, and the reserve is taken back
afterwards as far as descriptors allow (``refill()``, also called by the log maintenance and the
server's accept retries, so it fills up again once descriptors come back). :data:`FD_RESERVE`, enabled
by the broker at start-up (it holds nothing in tests and tools that do not enable it).

:class:`OpenFiles` keeps the descriptors of segment log files under a bound, so descriptors follow
the partitions in use, not the data retained: a segment opens its log file when first used
(``Segment.fd``) and is listed here, least recently used first; past the bound, and when unused
for a whole maintenance interval (``sweep``), its descriptor is closed, and the next use opens the
file again by name. Index files hold no descriptor at all (read through mappings; the active
segment opens them only to write a group of entries). A descriptor is closed only where no
``BatchRef.fd`` can still be in use: reads hand their descriptors to the sender in the same loop
callback, so closing happens in a callback of its own (``_tick``, scheduled after a callback that
used a segment, and the maintenance pass), and ``make_room`` (an open that met the open-file
limit) closes only descriptors not used since the last ``_tick``, never one the running callback
may hold. A number closed here and reused by another open is therefore never read as the old
file. :data:`OPEN_FILES` is enabled by the broker at start-up with a bound from the open-file
limit; until then (tests, tools) nothing is tracked and descriptors stay open until ``close``.
"""
from __future__ import annotations

import asyncio
import collections
import errno
import logging
import os
import time
from typing import Callable, TypeVar

T = TypeVar("T")

OUT_OF_FDS = frozenset({errno.EMFILE, errno.ENFILE})
DEFAULT_SUMMARY_S = 10.0
DEFAULT_RESERVE = 8  # a roll needs 3 (log, index, time index), the undo of a refused topic 1-2


def error_name(exc: BaseException) -> str:
    """``EMFILE``, ``ENOSPC``, ... for an OSError; the exception's class name otherwise."""
    code = getattr(exc, "errno", None)
    if isinstance(code, int) and code in errno.errorcode:
        return errno.errorcode[code]
    cause = exc.__cause__ or exc.__context__
    if cause is not None and cause is not exc and isinstance(cause, OSError):
        return error_name(cause)
    return type(exc).__name__


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


class FaultLog:
    """Failures of one kind of resource, each logged once per ``summary_s`` with a count of repeats."""

    def __init__(self, logger: logging.Logger, what: str = "storage error", summary_s: float = DEFAULT_SUMMARY_S,
                 clock: Callable[[], float] = time.monotonic):
        self.logger = logger
        self.what = what
        self.summary_s = summary_s
        self.clock = clock
        self.counts: collections.Counter = collections.Counter()  # (operation, error name) -> failures
        # (operation, error name) -> [when last logged, repeats not logged since, latest path]
        self._pending: dict[tuple[str, str], list] = {}
        self.last: tuple[float, str, str, str] | None = None  # (wall time, operation, path, reason)

    def report(self, operation: str, path: str, exc: BaseException) -> None:
        """One failure of ``operation`` on ``path`` (never raises)."""
        key = (operation, error_name(exc))
        self.counts[key] += 1
        self.last = (time.time(), operation, path, _reason(exc))
        now = self.clock()
        state = self._pending.get(key)
        if state is None:
            self._pending[key] = [now, 0, path]
            self.logger.warning("%s: %s %s failed: %s (%s)", self.what, operation, path, _reason(exc), key[1])
            return
        state[1] += 1
        state[2] = path
        if now - state[0] >= self.summary_s:
            self._summarise(key, state, now)

    def count(self, operation: str, path: str, exc: BaseException) -> None:
        """Count a failure that the caller logs itself (e.g. once per partition and run of failures)."""
        self.counts[(operation, error_name(exc))] += 1
        self.last = (time.time(), operation, path, _reason(exc))

    def flush(self) -> None:
        """Log the summaries still owed (repeats since the last line), and forget quiet keys."""
        now = self.clock()
        for key, state in list(self._pending.items()):
            if now - state[0] < self.summary_s:
                continue
            if state[1]:
                self._summarise(key, state, now)
            else:
                del self._pending[key]  # quiet for a whole period: the next failure is logged in full

    def _summarise(self, key: tuple[str, str], state: list, now: float) -> None:
        self.logger.warning("%s: %d more %s failures (%s) in the last %.0f s, latest on %s", self.what, state[1],
                            key[0], key[1], now - state[0], state[2])
        state[0], state[1] = now, 0

    def total(self) -> int:
        return sum(self.counts.values())


class FdReserve:
    """Descriptors held back for the opens that must succeed at the open-file limit."""

    def __init__(self, size: int = DEFAULT_RESERVE):
        self.size = size
        self._fds: list[int] = []
        self.used = 0  # how many times the reserve made room
        self.enabled = False  # set by enable() (the broker at start-up); until then it holds nothing

    def enable(self) -> None:
        self.enabled = True
        self.refill()

    @property
    def held(self) -> int:
        return len(self._fds)

    def refill(self) -> bool:
        """Take descriptors back up to ``size`` (as many as the limit allows now). False when the
        open-file limit stopped it (a missing ``/dev/null`` is not a shortage: the reserve stays empty)."""
        while self.enabled and len(self._fds) < self.size:
            try:
                self._fds.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
            except OSError as e:
                return e.errno not in OUT_OF_FDS
        return True

    def disable(self) -> None:
        self.enabled = False
        self.release()

    def release(self) -> None:
        while self._fds:
            os.close(self._fds.pop())

    def run(self, fn: Callable[[], T]) -> T:
        """``fn()``; if it fails for want of descriptors, again after releasing the reserve."""
        try:
            return fn()
        except OSError as e:
            if e.errno not in OUT_OF_FDS or not self._fds:
                raise
        self.used += 1
        self.release()
        try:
            return fn()
        finally:
            self.refill()


class SyncFds:
    """Descriptor numbers held open on ``/dev/null`` and lent to an fsync that cannot get descriptors of
    its own (the open-file limit): ``os.dup2`` points a lent number at a segment's file without allocating
    one, and ``give_back`` points it at ``/dev/null`` again once the fsync is done. So a sync that the
    durable acknowledgements wait for always starts, at the latest when a lent number is back. Owned by
    the event loop; :data:`SYNC_FDS`, enabled by the broker at start-up."""

    def __init__(self, size: int = 6):
        self.size = size
        self._free: list[int] = []
        self._null: int | None = None

    def enable(self) -> None:
        try:
            self._null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            while len(self._free) < self.size:
                self._free.append(os.dup(self._null))
        except OSError:  # no /dev/null or no descriptors at start-up: nothing to lend
            pass

    def lend(self, fds: list[int]) -> list[int] | None:
        """Numbers now pointing at the files of ``fds`` (in order), or None when too few are free."""
        if self._null is None or len(self._free) < len(fds):
            return None
        out = []
        try:
            for fd in fds:
                out.append(self._free.pop())
                os.dup2(fd, out[-1], inheritable=False)
        except OSError:
            self.give_back(out)
            return None
        return out

    def give_back(self, lent: list[int]) -> None:
        for fd in lent:
            try:
                os.dup2(self._null, fd, inheritable=False)
                self._free.append(fd)
            except OSError:  # keeps what it pointed at: dropped from the pool
                pass


class OpenFiles:
    """The segments holding descriptors, least recently used first; what they hold is kept under ``limit``."""

    def __init__(self):
        self.limit: int | None = None  # None: nothing released (tests, tools); set by enable()
        self.held = 0  # descriptors the listed segments hold: log files and, before Python 3.13, index mappings
        # segment -> the epoch of its last use, least recently used first (so epochs never decrease
        # along it); written by used(), entries leave through the releases below or forget()
        self._lru: collections.OrderedDict = collections.OrderedDict()
        self.epoch = 0  # advanced by each _tick and sweep: uses in the running callback carry the latest
        self.busy = 0  # listed segments stamped with the current epoch (used by the running callback)
        self._swept = 0  # the epoch at the previous sweep: entries used before it are idle
        self._tick_pending = False
        self.reopened = 0  # log files opened again after their descriptor was released (a metric)
        self.released = 0  # descriptors released: past the bound, idle, or to make room (a metric)

    def enable(self, limit: int) -> None:
        self.limit = max(1, limit)

    def disable(self) -> None:
        """Stop releasing (the descriptors stay open with their segments)."""
        self.limit = None
        self._lru.clear()
        self.held = self.busy = 0

    def add(self, seg, n: int) -> None:
        """``seg`` opened (``n`` > 0) or closed (< 0) ``n`` descriptors."""
        if seg in self._lru:
            self.held += n

    def used(self, seg) -> None:
        """``seg``'s descriptor is used by the running loop callback (or was just opened)."""
        if self.limit is None:
            return
        lru = self._lru
        stamp = lru.get(seg)
        if stamp is not None:
            lru.move_to_end(seg)
        else:
            self.held += seg.descriptors
        if stamp != self.epoch:
            self.busy += 1
        lru[seg] = self.epoch
        if not self._tick_pending:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop (start-up, tools): only the explicit trim() and sweep() release
                return
            self._tick_pending = True
            loop.call_soon(self._tick)

    def crowded(self) -> bool:
        """The running callback uses half as many segments as the bound allows open: a request that reads
        many partitions (a Fetch of thousands) leaves the rest for its next one rather than meet the
        open-file limit (the files it read stay open until its answer is sent, so they cannot make room;
        with the others at the bound, the descriptors stay under 1.5 times it, room left for connections
        and the worker's opens)."""
        return self.limit is not None and self.busy >= self.limit // 2

    def forget(self, seg) -> None:
        """``seg`` is closed for good (close, delete): no longer listed."""
        stamp = self._lru.pop(seg, None)
        if stamp is not None:
            self.held -= seg.descriptors
            if stamp == self.epoch:
                self.busy -= 1

    def _tick(self) -> None:
        """After the callbacks that used segments: a new epoch, and the bound enforced."""
        self._tick_pending = False
        self.epoch += 1
        self.busy = 0
        self.trim()

    def _release_front(self, keep: Callable[[int, int], bool]) -> int:
        """Release the least recently used segments' descriptors until ``keep(held, epoch of the front)``;
        returns how many descriptors were released."""
        lru, before = self._lru, self.held
        while lru:
            seg, stamp = next(iter(lru.items()))
            if keep(self.held, stamp):
                break
            del lru[seg]
            self.held -= seg.descriptors
            if stamp == self.epoch:
                self.busy -= 1
            seg.release_fd()
        self.released += before - self.held
        return before - self.held

    def trim(self) -> int:
        """Release descriptors down to the bound; only where no read's descriptor is in use (a callback
        of its own, the loading of a partition). Returns how many were released."""
        if self.limit is None:
            return 0
        limit = self.limit
        return self._release_front(lambda n, _stamp: n <= limit)

    def sweep(self) -> int:
        """Release the descriptors unused since the previous sweep (the maintenance pass calls it)."""
        if self.limit is None:
            return 0
        idle_before, self._swept = self._swept, self.epoch + 1
        self.epoch += 1
        self.busy = 0
        return self._release_front(lambda _n, stamp: stamp >= idle_before)

    def make_room(self, want: int = DEFAULT_RESERVE) -> int:
        """An open met the open-file limit: release up to ``want`` descriptors that the running
        callback cannot hold (unused since the last tick). Returns how many."""
        epoch, stop = self.epoch, self.held - want
        return self._release_front(lambda n, stamp: stamp >= epoch or n <= stop)


STORAGE = FaultLog(logging.getLogger("sharebroker.storage"))
FD_RESERVE = FdReserve()
SYNC_FDS = SyncFds()
OPEN_FILES = OpenFiles()
