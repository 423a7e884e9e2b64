"""Topics as the rest of the broker sees them: create, delete, append events.

:class:`Topics` sits on the :class:`~broker.log.manager.LogManager` (which owns the
files) and owns what happens around a topic's life: the name-collision rule, the
internal topics, and the listeners told about appends and deletions (long polls
waiting for data, share partitions following the log, the share coordinator
dropping a deleted topic's state).
"""
from __future__ import annotations

import logging
import time
from typing import Callable

from broker.delayed import Watchers
from broker.log.errors import KAFKA_STORAGE_ERROR, LogError
from protocol.errors import Errors

log = logging.getLogger("sharebroker")

CONSUMER_OFFSETS = "__consumer_offsets"
SHARE_GROUP_STATE = "__share_group_state"
TRANSACTION_STATE = "__transaction_state"
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS, SHARE_GROUP_STATE, TRANSACTION_STATE})

# The internal topics' configs, as Kafka creates them: __consumer_offsets and __transaction_state
# compacted (the log cleaner keeps each key's latest record; a deleted group, an expired offset write
# tombstones), __share_group_state never deleted by retention (its coordinator prunes it with
# DeleteRecords behind its snapshots). Segment sizes from Kafka's keys; ours are smaller than
# Kafka's 100 MiB (README, "Deviations"): the cleaner never cleans the active segment and pruning
# deletes only whole segments, so a segment's size bounds the dead data each topic keeps.
INTERNAL_SEGMENT_BYTES = {CONSUMER_OFFSETS: ("offsets.topic.segment.bytes", 4 << 20),
                          TRANSACTION_STATE: ("transaction.state.log.segment.bytes", 4 << 20),
                          SHARE_GROUP_STATE: ("share.coordinator.state.topic.segment.bytes", 4 << 20)}
# What older brokers wrote by default (converted at start-up): before compaction, every internal topic;
# before 4 MiB share-state segments, __share_group_state with Kafka's 100 MiB.
_LEGACY_INTERNAL_CONFIGS = ({"cleanup.policy": "delete", "retention.ms": "-1"},
                            {"segment.bytes": str(100 << 20), "cleanup.policy": "delete", "retention.ms": "-1"})


def internal_topic_configs(name: str, config=None) -> dict[str, str]:
    """The configs an internal topic is created with (``config``: the broker settings)."""
    key, default = INTERNAL_SEGMENT_BYTES[name]
    segment = config.get_int(key, default) if config is not None else default
    out = {"segment.bytes": str(max(segment, 1 << 20))}  # the topic config's minimum (1 MiB)
    if name == SHARE_GROUP_STATE:
        out.update({"cleanup.policy": "delete", "retention.ms": "-1"})
    else:
        out["cleanup.policy"] = "compact"
    return out


def log_key(topic: str, partition: int) -> tuple:
    """The watcher key a long poll waits on for new data in a partition."""
    return ("log", topic, partition)


class Topics:
    def __init__(self, logs, watchers: Watchers):
        self.logs = logs
        self.watchers = watchers
        if getattr(logs, "durable", False):  # durable mode: records are seen once synced, not once appended
            logs.on_durable = self.appended
        self._append_listeners: list[Callable[[str, int], None]] = []
        self._delete_listeners: list[Callable[[str, bytes], None]] = []

    @staticmethod
    def is_internal(name: str) -> bool:
        return name in INTERNAL_TOPICS

    def ensure_internal(self, config=None) -> None:
        """Create the internal topics (one partition each) with :func:`internal_topic_configs`; convert
        those an older broker created with its defaults (not compacted, 1 GiB segments; 100 MiB
        share-state segments) to them."""
        for name in sorted(INTERNAL_TOPICS):
            info = self.logs.topic(name)
            if info is None:
                self.logs.create_topic(name, 1, internal_topic_configs(name, config))
            elif info.configs in _LEGACY_INTERNAL_CONFIGS and info.configs != internal_topic_configs(name, config):
                log.info("converting the internal topic %s to %s", name, internal_topic_configs(name, config))
                self.logs.set_topic_configs(name, internal_topic_configs(name, config))

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

    async def create_staged(self, name: str, partitions: int, configs: dict):
        """``create`` for CreateTopics: the files are made off the event loop (``LogManager.create_topic_staged``)."""
        other = self.collision(name)
        if other is not None:
            raise LogError(Errors.INVALID_TOPIC_EXCEPTION, f"Topic '{name}' collides with existing topic: {other}")
        try:
            return await self.logs.create_topic_staged(name, partitions, configs)
        except LogError as e:
            _warn_storage(e)
            raise

    async def add_partitions(self, name: str, count: int) -> None:
        """CreatePartitions: answered once the new partition count is durable (``LogManager.add_partitions_staged``)."""
        try:
            await self.logs.add_partitions_staged(name, count)
        except LogError as e:
            _warn_storage(e)
            raise

    async def delete(self, name: str) -> None:
        """DeleteTopics: the topic goes once its deletion is durable (``LogManager.delete_topic_durably``)."""
        info = self.logs.topic(name)
        await self.logs.delete_topic_durably(name)
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
    """A partition could not be opened: say so in the broker log, naming the open-file limit when it is
    that; at most one line every ``WARN_EVERY_S`` seconds, saying how many refusals it stands for."""
    if e.code != KAFKA_STORAGE_ERROR:
        return
    now = time.monotonic()
    if now - _refusals[0] < WARN_EVERY_S:
        _refusals[1] += 1
        return
    more = f" ({_refusals[1]} more refused since the last warning)" if _refusals[1] else ""
    _refusals[0], _refusals[1] = now, 0
    hint = ""
    if "Too many open files" in str(e):
        hint = (f" (the open-file limit, {open_file_limit()}, is reached: raise it with `ulimit -n`, or lower "
                f"sharebroker.log.max.open.files)")
    log.warning("%s%s%s", e, hint, more)


WARN_EVERY_S = 10.0
_refusals = [-WARN_EVERY_S, 0]  # [time.monotonic() of the last warning, refusals not logged since]


def open_file_limit() -> int | None:
    try:
        import resource
    except ImportError:  # not on this platform
        return None
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
