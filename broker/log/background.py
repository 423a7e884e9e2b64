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
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from typing import Any, Callable

log = logging.getLogger(__name__)

Job = Callable[[], Any]
Callback = Callable[[Any, BaseException | None], None]


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

    def __init__(self, loop: asyncio.AbstractEventLoop, name: str = "log-sync"):
        self._loop = loop
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._closed = False
        self.pending = 0  # jobs submitted and not yet finished (loop-thread view)
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
        while True:
            item = self._q.get()
            if item is None:
                return
            job, callback = item
            try:
                result, exc = job(), None
            except BaseException as e:  # noqa: BLE001 -- reported on the loop
                result, exc = None, e
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
        self._q.put(None)
        self._thread.join()


def _noop() -> None:
    return None
