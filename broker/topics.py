"""Topics as the rest of the broker sees them: create, delete, append events.

:class:`Topics` sits on the :class:`~broker.log.manager.LogManager` (which owns the
files) and owns what happens around a topic's life: the name-collision rule, the
internal topics, and the listeners told about appends and deletions (long polls
waiting for data, share partitions following the log, the share coordinator
dropping a deleted topic's state).
"""
from __future__ import annotations

import logging
from typing import Callable

from broker.delayed import Watchers
from broker.log.errors import KAFKA_STORAGE_ERROR, LogError
from protocol.errors import Errors

log = logging.getLogger("sharebroker")

CONSUMER_OFFSETS = "__consumer_offsets"
SHARE_GROUP_STATE = "__share_group_state"
TRANSACTION_STATE = "__transaction_state"
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS, SHARE_GROUP_STATE, TRANSACTION_STATE})
# segment.bytes of each internal topic: Kafka's broker key and default (100 MiB)
INTERNAL_SEGMENT_BYTES = {CONSUMER_OFFSETS: "offsets.topic.segment.bytes",
                          TRANSACTION_STATE: "transaction.state.log.segment.bytes",
                          SHARE_GROUP_STATE: "share.coordinator.state.topic.segment.bytes"}
DEFAULT_INTERNAL_SEGMENT_BYTES = 104857600


def log_key(topic: str, partition: int) -> tuple:
    """The watcher key a long poll waits on for new data in a partition."""
    return ("log", topic, partition)


class Topics:
    def __init__(self, logs, watchers: Watchers):
        self.logs = logs
        self.watchers = watchers
        self._append_listeners: list[Callable[[str, int], None]] = []
        self._delete_listeners: list[Callable[[str, bytes], None]] = []

    @staticmethod
    def is_internal(name: str) -> bool:
        return name in INTERNAL_TOPICS

    def ensure_internal(self, config=None) -> None:
        """Create the internal topics (one partition each, never deleted by retention) with Kafka's segment
        sizes (``config``: the broker config, for INTERNAL_SEGMENT_BYTES); one created before those were
        set gets them now, an explicit override is kept."""
        for name in sorted(INTERNAL_TOPICS):
            segment = str(config.get_int(INTERNAL_SEGMENT_BYTES[name], DEFAULT_INTERNAL_SEGMENT_BYTES)
                          if config is not None else DEFAULT_INTERNAL_SEGMENT_BYTES)
            info = self.logs.topic(name)
            if info is None:
                self.logs.create_topic(name, 1, {"cleanup.policy": "delete", "retention.ms": "-1",
                                                 "segment.bytes": segment})
            elif "segment.bytes" not in info.configs:
                self.logs.set_topic_configs(name, {**info.configs, "segment.bytes": segment})

    def collision(self, name: str) -> str | None:
        """An existing topic that differs from ``name`` only by '.' versus '_' (Kafka refuses those)."""
        norm = name.replace(".", "_")
        for other in self.logs.topics:
            if other != name and other.replace(".", "_") == norm:
                return other
        return None

    def create(self, name: str, partitions: int, configs: dict):
        other = self.collision(name)
        if other is not None:
            raise LogError(Errors.INVALID_TOPIC_EXCEPTION, f"Topic '{name}' collides with existing topic: {other}")
        try:
            return self.logs.create_topic(name, partitions, configs)
        except LogError as e:
            _warn_storage(e)
            raise

    def add_partitions(self, name: str, count: int) -> None:
        try:
            self.logs.add_partitions(name, count)
        except LogError as e:
            _warn_storage(e)
            raise

    def delete(self, name: str) -> None:
        info = self.logs.topic(name)
        self.logs.delete_topic(name)
        for fn in self._delete_listeners:
            fn(name, info.topic_id.bytes)
        for p in range(info.partitions):
            self.watchers.notify(log_key(name, p))

    def on_delete(self, fn: Callable[[str, bytes], None]) -> None:
        """``fn(name, topic_id)`` runs after a topic is deleted."""
        self._delete_listeners.append(fn)

    def on_append(self, fn: Callable[[str, int], None]) -> None:
        """``fn(topic, partition)`` runs after every append (share partitions use it)."""
        self._append_listeners.append(fn)

    def appended(self, topic: str, partition: int) -> None:
        """Records were appended, or the log start moved: wake long polls and tell listeners."""
        self.watchers.notify(log_key(topic, partition))
        for fn in self._append_listeners:
            fn(topic, partition)


def _warn_storage(e: LogError) -> None:
    """A partition could not be opened: say so in the broker log, naming the open-file limit when it is that."""
    if e.code != KAFKA_STORAGE_ERROR:
        return
    hint = ""
    if "Too many open files" in str(e):
        hint = (f" (the open-file limit, {open_file_limit()}, is reached: each partition keeps about "
                f"{FILES_PER_PARTITION} files open; raise it with `ulimit -n`)")
    log.warning("%s%s", e, hint)


FILES_PER_PARTITION = 3


def open_file_limit() -> int | None:
    try:
        import resource
    except ImportError:  # not on this platform
        return None
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
