"""Syncing a partition's log to disk (a part of ``PartitionLog``, kept apart for size): fsyncs, synchronous
or on the background worker with group commit (requests made while one runs share the next one), the
recovery point and, in durable mode, the high watermark they move, and what a failed fsync does.

Durable mode (``sharebroker.durability=fsync``, the broker's default): every append asks for an fsync and
gets a future done once one covering it finished; the high watermark, what consumers may read and what
acks=all answers wait for, is the end of what an fsync covered. A failed data fsync takes the partition
offline until a restart (``_go_offline``): appends are refused, and in durable mode the bytes no fsync
covered are cut off the files, so an error answer means "not in the log". Page-cache mode is Kafka's:
the high watermark is the log end, fsyncs follow ``flush.messages`` / ``flush.ms`` and rolls.
"""
from __future__ import annotations

import asyncio
import errno
import logging

from . import fileio
from .background import Sync
from .errors import KAFKA_STORAGE_ERROR, LogError
from .faults import OPEN_FILES, OUT_OF_FDS, STORAGE, SYNC_FDS
from .files import fsync_dir
from .segment import Segment, fsync_all

log = logging.getLogger("broker.log.partition_log")

NO_FLUSH = 1 << 62  # flush.messages at or above this never asks for an fsync on append
CHECKPOINT_EVERY_MS = 1000  # durable mode: the recovery point is written at most this often after fsyncs
FLUSH_RETRY_S = 0.1  # after an fsync that could not start (no descriptor to duplicate): its waiters wait on


def _new_future() -> asyncio.Future:
    return asyncio.get_running_loop().create_future()


class LogSyncing:
    """The syncing half of ``PartitionLog``; its state is ``PartitionLog``'s (see ``__init__`` there)."""

    __slots__ = ()

    def flush(self) -> None:
        """fsync everything written so far and advance the recovery point (synchronously). A failed
        fsync takes the partition offline (``_go_offline``) and is raised."""
        active = self._segments[-1]
        target, size = self._leo, active.size
        try:
            while self._pending_flush:
                self._pending_flush[0].flush()
                del self._pending_flush[0]
            active.flush()
        except OSError as e:
            self._go_offline(e)
            raise
        self._unflushed = 0
        self._last_flush_ms = self.clock()
        if self.durable:
            self._synced(target, (active, size))
        if self._recovery_point != self._leo:
            self._recovery_point = self._leo
            self._write_checkpoint()

    def _set_durable_mark(self, target: int) -> None:
        active = self._segments[-1]
        self._hw, self._mark = target, (active, active.size)

    def _synced(self, target: int, mark: tuple) -> None:
        """Durable mode: an fsync covering every offset below ``target`` finished; move the high watermark."""
        if target > self._hw:
            self._hw, self._mark = target, mark
            if self._unsynced_markers:
                self._unsynced_markers = [m for m in self._unsynced_markers if m[0] >= target]
            if self.on_durable is not None:
                self.on_durable()

    def _go_offline(self, exc: OSError) -> None:
        """A data fsync failed. After a failed fsync the kernel may have dropped the dirty pages and marked
        them clean, so no later fsync can prove them written (PostgreSQL's 2018 "fsyncgate"). As Kafka (which
        takes the log directory offline on an IOException from a flush) and PostgreSQL (which stops and
        recovers from its log), the partition refuses every append from now on; in durable mode the bytes no
        fsync covered are cut off the files at once, so what was answered with an error is not in the log
        (nothing past the high watermark was ever answered success or shown to a consumer). A restart
        recovers the partition from its files (README "Durability")."""
        if self.offline is not None:
            return
        self.storage_errors += 1
        STORAGE.count("fsync", self.dir, exc)
        self.offline = LogError(KAFKA_STORAGE_ERROR, f"{self.topic}-{self.partition} is offline since an fsync "
                                                     f"failed ({exc}); restart the broker to recover it")
        cut = ""
        if self.durable and self._leo > self._hw:
            cut = self._cut_unsynced()
        log.error("%s-%d: fsync failed: %s; the partition is offline (appends answer KAFKA_STORAGE_ERROR) until "
                  "the broker restarts%s", self.topic, self.partition, exc, cut)
        fut, self._next_flush = self._next_flush, None
        self._finish_flush_future(fut, exc)

    def _cut_unsynced(self) -> str:
        """Durable mode, going offline: cut the files back to the high watermark (the last completed fsync)."""
        mark_seg, mark_size = self._mark
        hw, leo = self._hw, self._leo
        failed = None
        for seg in self._segments:
            if seg is mark_seg:
                keep = mark_size
            elif seg.base_offset >= hw:
                keep = 0
            else:
                continue
            if not seg.closed and seg.size > keep:
                try:
                    fileio.ftruncate(seg.fd, keep)
                except OSError as e:
                    failed = e
        self._leo = hw
        if failed is not None:
            return f"; cutting offsets {hw}-{leo - 1} (never answered success) off the files failed too: {failed}"
        return f"; offsets {hw}-{leo - 1} (never answered success) were cut off the files"

    def request_flush(self):
        """fsync everything appended so far; in the background when a worker is attached.

        Returns None when done synchronously, else a future done when an fsync
        covering every byte appended before this call has finished (then the
        recovery point has moved to at least the log end offset of this call).
        Requests made while an fsync runs share one follow-up fsync.
        """
        if self.offline is not None:
            raise OSError(errno.EIO, str(self.offline))
        if not self._bg.threaded:
            self.flush()
            return None
        fut = self._next_flush
        if fut is None:
            fut = self._next_flush = _new_future()
            if not self._flushing:
                self._start_flush(self._leo)
        return fut

    def _start_flush(self, target: int, segments: list[Segment] | None = None, lend: bool = False) -> None:
        """Submit one background fsync of ``segments`` (default: rolled + active) for offsets < ``target``."""
        fut = None  # a flush of rolled segments only answers nobody: appends wait for one covering the log end
        if segments is None:
            fut, self._next_flush = self._next_flush, None
            active = self._segments[-1]
            mark = (active, active.size)
            segments = self._pending_flush + [active]
            self._pending_flush = []
            self._unflushed = 0
            self._last_flush_ms = self.clock()
        else:
            mark = (next((s for s in self._segments if s.base_offset == target), None), 0)
            self._pending_flush = [s for s in self._pending_flush if s not in segments]
        lent = None
        if lend:  # the last try met the open-file limit: borrow numbers held for this (faults.SyncFds)
            try:
                lent = SYNC_FDS.lend([fd for seg in segments for fd in seg.open_fds()])
            except OSError:
                lent = None
        try:  # the jobs open the files by name when they run (Segment.sync_job): they hold no descriptor
            jobs = [] if lent else [seg.sync_job() for seg in segments]
        except OSError as e:  # writing the pending index entries failed: nothing is lost; try again shortly
            self.storage_errors += 1
            STORAGE.report("starting an fsync", self.dir, e)
            self._pending_flush = [s for s in segments if s is not self._segments[-1]] + self._pending_flush
            if fut is not None:
                self._next_flush = fut  # its waiters are answered when a later try completes
            asyncio.get_running_loop().call_later(FLUSH_RETRY_S, self._retry_flush)
            return
        # Kafka's LocalLog.flush: a segment new since the recovery point needs its directory entry synced
        directory = self.dir if any(seg.base_offset >= self._recovery_point for seg in segments) else None
        self._flushing = True

        def run():
            if lent:
                fsync_all(lent)
            for job in jobs:
                job()
            if directory is not None:
                try:
                    fsync_dir(directory)
                except FileNotFoundError:  # renamed away: the topic is being deleted
                    pass

        def done(_result, exc) -> None:
            if lent:
                SYNC_FDS.give_back(lent)
            self._flush_done(target, segments, fut, exc, mark)
        self._bg.submit(run if lent else Sync(run), done)  # by name: others' queued beside it may share a syncfs

    def _retry_flush(self, lend: bool = False) -> None:
        if not self._closed and self.offline is None and not self._flushing and (
                self._next_flush is not None or self._pending_flush):
            if self._next_flush is not None:
                self._start_flush(self._leo, lend=lend)
            else:
                self._start_flush(self._segments[-1].base_offset, list(self._pending_flush), lend=lend)

    def _flush_done(self, target: int, segments: list[Segment], fut, exc, mark=(None, 0)) -> None:
        """On the loop after a background fsync: move the recovery point (checkpoint failures are
        logged and retried later) and the high watermark (durable mode), and always complete ``fut``,
        whatever else fails. A failed fsync takes the partition offline (``_go_offline``)."""
        self._flushing = False
        if exc is not None and getattr(exc, "errno", None) in OUT_OF_FDS and not self._closed:
            # a file or the directory could not be opened for its fsync (the open-file limit): nothing failed to
            # reach the disk, but the sync is not complete; it runs again whole shortly, on borrowed descriptor
            # numbers (faults.SyncFds), and its waiters wait on
            STORAGE.report("opening files for an fsync", self.dir, exc)
            OPEN_FILES.make_room()  # idle segment files closed: room for the next try's opens
            self._pending_flush = [s for s in segments if s is not self._segments[-1]] + self._pending_flush
            if fut is not None and not fut.done():
                if self._next_flush is not None:  # one future for all waiters
                    self._next_flush.add_done_callback(lambda f, fut=fut: self._finish_flush_future(fut, f.exception()))
                else:
                    self._next_flush = fut
            asyncio.get_running_loop().call_later(FLUSH_RETRY_S, self._retry_flush, True)
            return
        try:
            if exc is not None:
                if not self._closed and not isinstance(exc, FileNotFoundError):
                    self._go_offline(exc)
            elif not self._closed:
                if self.durable:
                    self._synced(target, mark)
                if target > self._recovery_point:
                    self._recovery_point = target
                    # durable mode syncs all the time: the checkpoint (only a shorter recovery) follows at most
                    # every CHECKPOINT_EVERY_MS, and at every maintenance pass and close
                    if not self.durable or self.clock() - self._ckpt_ms >= CHECKPOINT_EVERY_MS:
                        self._try_checkpoint()
        finally:
            self._finish_flush_future(fut, exc)
        if self._closed or self.offline is not None:
            return
        if self._next_flush is not None:
            self._start_flush(self._leo)
        elif exc is None and self._pending_flush:  # rolled meanwhile (a failure waits for maintenance)
            self._start_flush(self._segments[-1].base_offset, list(self._pending_flush))

    def _finish_flush_future(self, fut, exc) -> None:
        if fut is None or fut.done():
            return
        if exc is None:
            fut.set_result(None)
        else:
            fut.set_exception(LogError(KAFKA_STORAGE_ERROR, f"fsync of {self.topic}-{self.partition} failed: {exc}"))
            fut.exception()  # retrieved: nobody may be awaiting it
