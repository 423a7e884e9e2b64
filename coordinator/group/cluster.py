"""What the group coordinator needs to know about topics and logs, and about time.

The coordinator never imports the broker: it is handed a :class:`Cluster` (the
broker adapts its LogManager to it) and a :class:`Scheduler` (the event loop in
the broker, a fake clock in tests).
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, Protocol

_log = logging.getLogger(__name__)


class Cluster(Protocol):
    def topic_id(self, name: str) -> bytes | None:
        """The topic's 16-byte id, or None when the topic does not exist."""

    def topic_name(self, topic_id: bytes) -> str | None:
        """The topic's name, or None when no topic has this id."""

    def partition_count(self, name: str) -> int | None:
        """Number of partitions, or None when the topic does not exist."""

    def topic_names(self) -> Iterable[str]:
        """Every topic name (used to resolve subscription regexes)."""

    def log_end_offset(self, name: str, partition: int) -> int:
        """Next offset to be written (the lag assignor's "latest")."""

    def log_start_offset(self, name: str, partition: int) -> int:
        """First offset still in the log (the lag assignor's "earliest")."""


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Scheduler(Protocol):
    """``asyncio`` loops satisfy this: ``call_later`` and a monotonic ``time()``."""

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> TimerHandle: ...


class Timers:
    """Named one-shot timers: scheduling a key again replaces its previous timer.

    A callback's exception is logged, never raised into the event loop."""

    def __init__(self, scheduler: Scheduler):
        self._scheduler = scheduler
        self._handles: dict[Any, TimerHandle] = {}

    def schedule(self, key: Any, delay_ms: int, callback: Callable[[], None]) -> None:
        self.cancel(key)

        def fire() -> None:
            self._handles.pop(key, None)
            try:
                callback()
            except Exception:  # noqa: BLE001 - nothing escapes a timer callback
                _log.exception("group coordinator timer %r failed", key)

        self._handles[key] = self._scheduler.call_later(max(0, delay_ms) / 1000.0, fire)

    def schedule_if_absent(self, key: Any, delay_ms: int, callback: Callable[[], None]) -> None:
        if key not in self._handles:
            self.schedule(key, delay_ms, callback)

    def cancel(self, key: Any) -> None:
        h = self._handles.pop(key, None)
        if h is not None:
            h.cancel()

    def has(self, key: Any) -> bool:
        return key in self._handles

    def cancel_all(self) -> None:
        for h in self._handles.values():
            h.cancel()
        self._handles.clear()
