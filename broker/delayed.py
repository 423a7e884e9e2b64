"""Delayed operations (long polls) as watchers: no polling loops, no sleeps.

A waiting Fetch or ShareFetch registers one waiter on the keys that could let it
complete (``("log", topic, partition)`` for new data, ``("share", group, topic_id,
partition)`` for released records, lock expiry or freed lock capacity) with one
``loop.call_at`` deadline.  ``notify(key)`` wakes every waiter on that key; the
woken request re-runs the same "try to complete" step it ran first.
"""
from __future__ import annotations

import asyncio
from typing import Hashable, Iterable


class Watchers:
    __slots__ = ("_waiters",)

    def __init__(self) -> None:
        self._waiters: dict[Hashable, set[asyncio.Future]] = {}

    def notify(self, key: Hashable) -> None:
        waiters = self._waiters.pop(key, None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(key)

    def has_waiters(self, key: Hashable) -> bool:
        return key in self._waiters

    async def wait(self, keys: Iterable[Hashable], deadline: float) -> bool:
        """Wait until one of ``keys`` is notified (True) or the loop time reaches ``deadline`` (False)."""
        loop = asyncio.get_running_loop()
        if deadline <= loop.time():
            return False
        fut = loop.create_future()
        keys = list(keys)
        for k in keys:
            self._waiters.setdefault(k, set()).add(fut)
        timer = loop.call_at(deadline, _expire, fut)
        try:
            await fut
            return fut.result() is not None
        finally:
            timer.cancel()
            for k in keys:
                s = self._waiters.get(k)
                if s is not None:
                    s.discard(fut)
                    if not s:
                        del self._waiters[k]


def _expire(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)
