"""Blocking file work (fsync, unlink, rmtree) off the event loop, in submission order.

``Background`` owns one worker thread. Jobs run strictly one after another in the
order they were submitted (FIFO), so a job submitted after another sees its
effects: e.g. the fsync of a checkpoint file submitted after the fsync of the
segment it points into runs after it. Completion callbacks run on the event loop
thread (``loop.call_soon_threadsafe``), so they may touch log state.

``Inline`` is the synchronous stand-in used when no loop is attached (unit
tests, start-up, tools): every job runs at once in the caller's thread and its
callback is called before ``submit`` returns.

Jobs receive nothing and return a value; they must only use what they were given
at submission (paths, with the identity of the file they must find there), never live log objects,
which belong to the loop thread.

Merged syncs: a job wrapped in :class:`Sync` only fsyncs files (a partition's group commit). When the
worker finds ``MERGE_AT`` or more of them queued one after another, it runs one ``syncfs(2)`` of the
file system instead, which covers them all (every dirty file and directory of it, and one journal
commit, where each fsync forces a commit of its own: 1,000 partitions took 1.4 s of fsyncs and 13 ms of
``syncfs`` on the development machine). The order of jobs is kept: the run ends at the first job that is
not a ``Sync``. ``syncfs`` goes through a descriptor opened when the worker started, so it reports every
writeback error on that file system since then (Linux 5.8 and later; earlier kernels and a libc without
``syncfs`` keep one fsync per job; the test-only sync journal notes a ``syncfs`` as an fsync of every
file). When it fails, each job of the run runs its own fsyncs, so only the partition whose file failed
sees the error (a file's own writeback error is still unseen by a per-file fsync after ``syncfs``
reported the file system's): a failed ``syncfs`` is never taken as a success. Merging then stops until
the broker restarts: the error may belong to a file of a partition outside the run, and only that
file's own fsync reports it, so from then on every job fsyncs its files (and ``LogManager.close`` does
too, instead of its ``syncfs``).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import platform
import queue
import threading
from typing import Any, Callable

from . import fileio
from .faults import STORAGE

log = logging.getLogger(__name__)

Job = Callable[[], Any]
Callback = Callable[[Any, BaseException | None], None]
MERGE_AT = 4  # queued Sync jobs covered by one syncfs (measured: 2 took 1.0 ms of fsyncs and 0.6 of syncfs)
_STOP = object()


class Sync:
    """A job that only fsyncs files (``run``); queued with others it may be covered by one ``syncfs``."""

    __slots__ = ("run",)

    def __init__(self, run: Job):
        self.run = run

    def __call__(self):
        return self.run()


def syncfs_reports_errors() -> bool:
    """``syncfs(2)`` returns writeback errors since Linux 5.8 (before, only its own failures)."""
    try:
        major, minor = (int(x) for x in platform.release().split(".")[:2])
    except ValueError:
        return False
    return platform.system() == "Linux" and (major, minor) >= (5, 8)


class Inline:
    """Runs every job at once in the calling thread."""

    threaded = False

    def submit(self, job: Job, callback: Callback | None = None) -> None:
        try:
            result = job()
        except Exception as e:  # noqa: BLE001 -- handed to the callback, like the threaded version
            if callback is None:
                raise
            callback(None, e)
            return
        if callback is not None:
            callback(result, None)

    def barrier(self):
        """An awaitable done when every job submitted so far has finished (always already)."""
        return _done()

    def close(self) -> None:
        pass


async def _done() -> None:
    return None


class Background:
    """One worker thread running jobs in FIFO order; callbacks on the loop."""

    threaded = True

    def __init__(self, loop: asyncio.AbstractEventLoop, name: str = "log-sync", merge_in: str | None = None):
        """``merge_in``: a directory on the file system whose ``Sync`` jobs may be merged (module docstring)."""
        self._loop = loop
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._closed = False
        self.pending = 0  # jobs submitted and not yet finished (loop-thread view)
        self.merged = 0  # Sync jobs covered by a syncfs (a metric)
        self.syncfs_calls = 0
        self.syncfs_failed: OSError | None = None  # set by the worker when a syncfs failed: merging stopped
        self._merge_in = merge_in
        self._syncfs_fd: int | None = None
        if merge_in is not None and fileio.syncfs is not None and syncfs_reports_errors():
            self._syncfs_fd = os.open(merge_in, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: Job, callback: Callback | None = None) -> None:
        if self._closed:  # after close: run inline (shutdown path)
            Inline().submit(job, callback)
            return
        self.pending += 1
        self._q.put((job, callback))

    def barrier(self) -> asyncio.Future:
        """A future done (on the loop) when every job submitted before this call has finished."""
        fut = self._loop.create_future()

        def done(_result, _exc):
            if not fut.done():
                fut.set_result(None)
        self.submit(_noop, done)
        return fut

    def _run(self) -> None:
        held = None
        while True:
            item, held = (held or self._q.get()), None
            if item is _STOP:
                return
            if self._syncfs_fd is None or not isinstance(item[0], Sync):
                self._run_one(*item)
                continue
            run = [item]  # the Sync jobs queued right behind this one
            while True:
                try:
                    nxt = self._q.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP or not isinstance(nxt[0], Sync):
                    held = nxt
                    break
                run.append(nxt)
            if len(run) < MERGE_AT or not self._syncfs():
                for job, callback in run:
                    self._run_one(job, callback)
                continue
            self.merged += len(run)
            for _job, callback in run:
                self._post(callback, None, None)

    def _syncfs(self) -> bool:
        """One ``syncfs`` for a run of Sync jobs: True when it succeeded. Otherwise merging stops (module
        docstring), a failure is reported, and the jobs run their own fsyncs."""
        try:
            self.syncfs_calls += 1
            fileio.syncfs(self._syncfs_fd)
            # Linux's syncfs returns 0 on a read-only file system without writing anything (an ext4 remounted
            # read-only after an error may still hold dirty pages): the jobs' own fsyncs say what happened
            if not os.fstatvfs(self._syncfs_fd).f_flag & os.ST_RDONLY:
                return True
            failure = OSError(errno.EROFS, "the file system is read-only")
        except OSError as e:
            failure = e
        os.close(self._syncfs_fd)
        self._syncfs_fd = None  # one fsync per job from now on
        if failure.errno != errno.ENOSYS:  # ENOSYS: no syncfs here after all, not a fault
            self.syncfs_failed = failure
            try:
                self._loop.call_soon_threadsafe(STORAGE.report, "syncing the file system (merged fsyncs: off "
                                                "until a restart)", self._merge_in, failure)
            except RuntimeError:  # loop closed
                pass
        return False

    def _run_one(self, job: Job, callback: Callback | None) -> None:
        try:
            result, exc = job(), None
        except BaseException as e:  # noqa: BLE001 -- reported on the loop
            result, exc = None, e
        self._post(callback, result, exc)

    def _post(self, callback: Callback | None, result, exc) -> None:
        try:
            self._loop.call_soon_threadsafe(self._finish, callback, result, exc)
        except RuntimeError:  # loop closed: nobody is waiting any more
            if exc is not None:
                log.error("background file job failed after the loop closed: %r", exc)

    def _finish(self, callback: Callback | None, result, exc) -> None:
        self.pending -= 1
        if callback is not None:
            try:
                callback(result, exc)
            except Exception:
                log.exception("background job callback failed")
        elif exc is not None:
            log.error("background file job failed: %r", exc)

    def close(self) -> None:
        """Finish every queued job, then stop the thread (blocking; call at shutdown)."""
        if self._closed:
            return
        self._closed = True
        self._q.put(_STOP)
        self._thread.join()
        if self._syncfs_fd is not None:
            os.close(self._syncfs_fd)
            self._syncfs_fd = None


def _noop() -> None:
    return None
