"""Blocking file work (fsync, atomic rewrites of small metadata files) off the event loop.

One worker thread runs the jobs in submission order, so a later job never
overtakes an earlier one (a checkpoint written after the fsync it depends on, a
config file rewritten in the order the changes were made).  The thread starts on
first use, so an idle broker has none.
"""
from __future__ import annotations

import asyncio
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable


class FileWorker:
    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None

    def submit(self, fn: Callable, *args) -> Future:
        """Queue ``fn(*args)`` behind every job submitted before it."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="sharebroker-files")
        return self._pool.submit(fn, *args)

    async def run(self, fn: Callable, *args):
        """Run ``fn(*args)`` on the worker and wait for its result without blocking the loop."""
        return await asyncio.wrap_future(self.submit(fn, *args))

    def close(self) -> None:
        """Finish every queued job, then stop the thread."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
