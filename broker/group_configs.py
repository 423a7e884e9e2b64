"""Per-group dynamic configs (resource type GROUP = 32), as Kafka 4.4's GroupConfig.

Keys, their broker-level defaults and the broker-level bounds an override must
respect (all bounds are themselves broker settings):

| group key                        | default from                               | bounds                                            |
|----------------------------------|--------------------------------------------|---------------------------------------------------|
| share.session.timeout.ms         | group.share.session.timeout.ms (45000)     | group.share.min/max.session.timeout.ms 45000/60000 |
| share.heartbeat.interval.ms      | group.share.heartbeat.interval.ms (5000)   | group.share.min/max.heartbeat.interval.ms 5000/15000 |
| share.record.lock.duration.ms    | group.share.record.lock.duration.ms (30000)| group.share.min/max.record.lock.duration.ms 15000/60000 |
| share.delivery.count.limit       | group.share.delivery.count.limit (5)       | group.share.min/max.delivery.count.limit 2/10      |
| share.partition.max.record.locks | group.share.partition.max.record.locks (2000) | group.share.min/max.partition.max.record.locks 100/4000 |
| share.auto.offset.reset          | latest                                     | latest, earliest, by_duration:<ISO-8601>          |
| share.isolation.level            | read_uncommitted                           | read_uncommitted, read_committed                  |
| share.renew.acknowledge.enable   | group.share.renew.acknowledge.enable (true)| boolean                                           |
| consumer.session.timeout.ms      | group.consumer.session.timeout.ms (45000)  | group.consumer.min/max.session.timeout.ms 45000/60000 |
| consumer.heartbeat.interval.ms   | group.consumer.heartbeat.interval.ms (5000)| group.consumer.min/max.heartbeat.interval.ms 5000/15000 |
| consumer.assignment.interval.ms  | group.consumer.assignment.interval.ms (1000)| group.consumer.min/max.assignment.interval.ms 0/15000 |
| share.assignment.interval.ms     | group.share.assignment.interval.ms (1000)  | group.share.min/max.assignment.interval.ms 0/15000 |
| streams.session.timeout.ms       | group.streams.session.timeout.ms (45000)   | group.streams.min/max.session.timeout.ms 45000/60000 |
| streams.heartbeat.interval.ms    | group.streams.heartbeat.interval.ms (5000) | group.streams.min/max.heartbeat.interval.ms 5000/15000 |
| streams.num.standby.replicas     | group.streams.num.standby.replicas (0)     | 0..group.streams.max.standby.replicas (2)         |
| streams.assignment.interval.ms   | group.streams.assignment.interval.ms (1000)| group.streams.min/max.assignment.interval.ms 0/15000 |
| streams.initial.rebalance.delay.ms | group.streams.initial.rebalance.delay.ms (3000) | at least 0                               |
| consumer.auto.offset.reset (ours) | group.consumer.lag.offset.reset (earliest) | latest, earliest, none, by_duration:<ISO-8601>     |
| errors.deadletterqueue.topic.name | "" (no DLQ)                               | not starting with `__`                            |
| errors.deadletterqueue.copy.record.enable | false                             | boolean                                           |
| share.assignor.name (ours)       | first of group.share.assignors (simple)    | one of group.share.assignors (simple, lag)        |
| share.redelivery.backoff.ms (ours) | 0 (redeliver at once)                    | 0..3600000                                        |
| share.redelivery.backoff.max.ms (ours) | 60000                                | 1..3600000                                        |
| share.fair.acquisition.enable (ours) | group.share.fair.acquisition.enable (true) | boolean (false: Kafka's whole-batch acquisition) |

The broker's lock-duration settings may go down to 1000 ms (``group.share.min.record.lock.duration.ms``
and ``group.share.record.lock.duration.ms`` from the config file), so test suites can use short
locks.  Overrides are validated, persisted atomically in ``meta/group-configs.json`` and pushed
to listeners (share partitions, share-group coordinator) at once.  Configs may be set for a
group that does not exist yet, as in Kafka.
"""
from __future__ import annotations

import json
import os
from typing import Callable

from broker.configs import ConfigEntry, apply_ops
from broker.log.config import ConfigError
from broker.log.files import atomic_write
from broker.share.config import parse_auto_offset_reset
from coordinator.group.config import assignor_names
from protocol.errors import Errors, KafkaError

GROUP = 32
SOURCE_GROUP, SOURCE_STATIC_BROKER, SOURCE_DEFAULT = 8, 4, 5
BOOLEAN, STRING, INT = 1, 2, 3

# group key -> (broker default key, hard default, broker min key, min, broker max key, max)
_INT_KEYS: dict[str, tuple] = {
    "share.session.timeout.ms": ("group.share.session.timeout.ms", 45000,
                                 "group.share.min.session.timeout.ms", 45000,
                                 "group.share.max.session.timeout.ms", 60000),
    "share.heartbeat.interval.ms": ("group.share.heartbeat.interval.ms", 5000,
                                    "group.share.min.heartbeat.interval.ms", 5000,
                                    "group.share.max.heartbeat.interval.ms", 15000),
    "share.record.lock.duration.ms": ("group.share.record.lock.duration.ms", 30000,
                                      "group.share.min.record.lock.duration.ms", 15000,
                                      "group.share.max.record.lock.duration.ms", 60000),
    "share.delivery.count.limit": ("group.share.delivery.count.limit", 5,
                                   "group.share.min.delivery.count.limit", 2,
                                   "group.share.max.delivery.count.limit", 10),
    "share.partition.max.record.locks": ("group.share.partition.max.record.locks", 2000,
                                         "group.share.min.partition.max.record.locks", 100,
                                         "group.share.max.partition.max.record.locks", 4000),
    "consumer.session.timeout.ms": ("group.consumer.session.timeout.ms", 45000,
                                    "group.consumer.min.session.timeout.ms", 45000,
                                    "group.consumer.max.session.timeout.ms", 60000),
    "consumer.heartbeat.interval.ms": ("group.consumer.heartbeat.interval.ms", 5000,
                                       "group.consumer.min.heartbeat.interval.ms", 5000,
                                       "group.consumer.max.heartbeat.interval.ms", 15000),
    # KIP-1263 (Kafka 4.3): least time between two target assignments of a group.
    "consumer.assignment.interval.ms": ("group.consumer.assignment.interval.ms", 1000,
                                        "group.consumer.min.assignment.interval.ms", 0,
                                        "group.consumer.max.assignment.interval.ms", 15000),
    "share.assignment.interval.ms": ("group.share.assignment.interval.ms", 1000,
                                     "group.share.min.assignment.interval.ms", 0,
                                     "group.share.max.assignment.interval.ms", 15000),
    "streams.session.timeout.ms": ("group.streams.session.timeout.ms", 45000,
                                   "group.streams.min.session.timeout.ms", 45000,
                                   "group.streams.max.session.timeout.ms", 60000),
    "streams.heartbeat.interval.ms": ("group.streams.heartbeat.interval.ms", 5000,
                                      "group.streams.min.heartbeat.interval.ms", 5000,
                                      "group.streams.max.heartbeat.interval.ms", 15000),
    "streams.num.standby.replicas": ("group.streams.num.standby.replicas", 0,
                                     None, 0, "group.streams.max.standby.replicas", 2),
    # KIP-1263 for streams groups, and the delay of a new streams group's first assignment (no broker bounds)
    "streams.assignment.interval.ms": ("group.streams.assignment.interval.ms", 1000,
                                       "group.streams.min.assignment.interval.ms", 0,
                                       "group.streams.max.assignment.interval.ms", 15000),
    "streams.initial.rebalance.delay.ms": ("group.streams.initial.rebalance.delay.ms", 3000,
                                           None, 0, None, 2**31 - 1),
}
_OTHER_KEYS: dict[str, tuple[str | None, str, int]] = {  # key -> (broker default key, default, type)
    "share.auto.offset.reset": (None, "latest", STRING),
    # Ours (seed 001): the reset policy the `lag` consumer assignor assumes for partitions the group
    # never committed (latest -> lag 0; anything else -> log end - log start).
    "consumer.auto.offset.reset": ("group.consumer.lag.offset.reset", "earliest", STRING),
    "share.isolation.level": (None, "read_uncommitted", STRING),
    "share.renew.acknowledge.enable": ("group.share.renew.acknowledge.enable", "true", BOOLEAN),
    "errors.deadletterqueue.topic.name": (None, "", STRING),
    "errors.deadletterqueue.copy.record.enable": (None, "false", BOOLEAN),
    # Ours (issue 10): delayed redelivery of released / lock-expired records, backoff x 2^(deliveries-1)
    # capped at the max (broker/share/README.md).
    "share.redelivery.backoff.ms": (None, "0", INT),
    "share.redelivery.backoff.max.ms": (None, "60000", INT),
    # Ours (issue 19): a big log batch is acquired MaxRecords at a time (broker/share/fair.py).
    "share.fair.acquisition.enable": ("group.share.fair.acquisition.enable", "true", BOOLEAN),
    # KIP-1263: whether the assignor runs off the coordinator thread (always inline here: one loop).
    "consumer.assignor.offload.enable": ("group.consumer.assignor.offload.enable", "true", BOOLEAN),
    "share.assignor.offload.enable": ("group.share.assignor.offload.enable", "true", BOOLEAN),
    # Ours: the group's share assignor, one of group.share.assignors (default: its first entry).
    "share.assignor.name": ("group.share.assignors", "simple", STRING),
}
KEYS = sorted(list(_INT_KEYS) + list(_OTHER_KEYS))
# Settable but internal in Kafka 4.4 (GroupConfig.defineInternal, KAFKA-20930): DescribeConfigs leaves them out.
INTERNAL_KEYS = frozenset({"consumer.assignor.offload.enable", "share.assignor.offload.enable"})
_REDELIVERY_BOUNDS = {"share.redelivery.backoff.ms": (0, 3_600_000), "share.redelivery.backoff.max.ms": (1, 3_600_000)}
CONSUMER_RESETS = ("latest", "earliest", "none")
# Broker settings whose floor we lower to 1000 ms (Kafka's own floors are higher).
LOCK_FLOOR_MS = 1000


def validate_broker_share_configs(config) -> None:
    """Check the broker-level share settings at start-up; raise ConfigError."""
    for key in ("group.share.record.lock.duration.ms", "group.share.min.record.lock.duration.ms",
                "group.share.max.record.lock.duration.ms"):
        if config.has(key) and config.get_int(key) < LOCK_FLOOR_MS:
            raise ConfigError(f"Invalid value {config.get(key)} for configuration {key}: "
                              f"Value must be at least {LOCK_FLOOR_MS}")
    for key, (dkey, default, mnkey, mn, mxkey, mx) in _INT_KEYS.items():
        lo, hi, d = _bound(config, mnkey, mn), _bound(config, mxkey, mx), config.get_int(dkey, default)
        if lo > hi:
            raise ConfigError(f"{mnkey} ({lo}) must be less than or equal to {mxkey} ({hi})")
        if not lo <= d <= hi:
            raise ConfigError(f"{dkey} ({d}) must be between {mnkey} ({lo}) and {mxkey} ({hi})")


def _bound(config, key: str | None, default: int) -> int:
    """A bound of a group setting: the broker setting ``key``, or the fixed ``default`` where Kafka has none."""
    return default if key is None else config.get_int(key, default)


def _parse_bool(key: str, value: str) -> str:
    v = value.strip().lower()
    if v not in ("true", "false"):
        raise ConfigError(f"Invalid value {value} for configuration {key}: Expected value to be either true or false")
    return v


def _parse_int_in(key: str, value: str, lo: int, hi: int) -> int:
    try:
        v = int(value)
    except ValueError:
        raise ConfigError(f"Invalid value {value} for configuration {key}: Not a number of type INT") from None
    if not lo <= v <= hi:
        raise ConfigError(f"Invalid value {value} for configuration {key}: Value must be in [{lo}, {hi}]")
    return v


def _parse_auto_offset_reset(value: str) -> str:
    try:
        parse_auto_offset_reset(value)
    except ValueError as e:
        raise ConfigError(f"Invalid value {value} for configuration share.auto.offset.reset: {e}") from None
    return value.strip()


class GroupConfigManager:
    """Owns per-group overrides; answers effective values and pushes changes to listeners."""

    resource_type = GROUP

    def __init__(self, broker_config, meta_dir: str | None, background=None):
        self.broker_config = broker_config
        self.background = background  # the log manager's file worker: fsyncs off the event loop
        self._path = os.path.join(meta_dir, "group-configs.json") if meta_dir else None
        self._overrides: dict[str, dict[str, str]] = {}
        self._listeners: list[Callable[[str], None]] = []
        self._known_groups: Callable[[], list[str]] = lambda: []
        if self._path and os.path.exists(self._path):
            with open(self._path, "rb") as f:
                self._overrides = {g: dict(c) for g, c in json.loads(f.read()).items()}

    # --------------------------------------------------------------- reading
    def add_listener(self, fn: Callable[[str], None]) -> None:
        """``fn(group_id)`` runs after the group's configs changed."""
        self._listeners.append(fn)

    def set_group_lister(self, fn: Callable[[], list[str]]) -> None:
        self._known_groups = fn

    def overrides(self, group_id: str) -> dict[str, str]:
        return dict(self._overrides.get(group_id, {}))

    def broker_default(self, key: str) -> str:
        if key in _INT_KEYS:
            dkey, default = _INT_KEYS[key][:2]
            return str(self.broker_config.get_int(dkey, default))
        dkey, default, _ = _OTHER_KEYS[key]
        if key == "share.assignor.name":
            return self.share_assignors()[0]
        return self.broker_config.get(dkey, default) if dkey else default

    def share_assignors(self) -> tuple[str, ...]:
        return assignor_names(self.broker_config.get("group.share.assignors", None)) or ("simple",)

    def get(self, group_id: str, key: str) -> str:
        o = self._overrides.get(group_id)
        if o and key in o:
            return o[key]
        return self.broker_default(key)

    def get_int(self, group_id: str, key: str) -> int:
        return int(self.get(group_id, key))

    def get_bool(self, group_id: str, key: str) -> bool:
        return self.get(group_id, key).lower() == "true"

    # --------------------------------------------------------------- validation
    def validate(self, group_id: str, values: dict[str, str]) -> None:
        if not group_id:
            raise ConfigError("Group id must not be empty")
        for key, value in values.items():
            if key in _INT_KEYS:
                _, _, mnkey, mn, mxkey, mx = _INT_KEYS[key]
                try:
                    v = int(value)
                except ValueError:
                    raise ConfigError(f"Invalid value {value} for configuration {key}: Not a number of type INT") from None
                lo, hi = _bound(self.broker_config, mnkey, mn), _bound(self.broker_config, mxkey, mx)
                if v < lo:
                    raise ConfigError(f"{key} must be greater than or equal to {mnkey}" if mnkey else
                                      f"Invalid value {value} for configuration {key}: Value must be at least {lo}")
                if v > hi:
                    raise ConfigError(f"{key} must be less than or equal to {mxkey}" if mxkey else
                                      f"Invalid value {value} for configuration {key}: Value must be no more than "
                                      f"{hi}")
            elif key == "share.auto.offset.reset":
                _parse_auto_offset_reset(value)
            elif key == "consumer.auto.offset.reset":
                if value.strip().lower() not in CONSUMER_RESETS and not value.strip().startswith("by_duration:"):
                    raise ConfigError(f"Invalid value {value} for configuration {key}: "
                                      f"String must be one of: {', '.join(CONSUMER_RESETS)}, by_duration:<ISO-8601>")
            elif key == "share.isolation.level":
                if value.strip().lower() not in ("read_uncommitted", "read_committed"):
                    raise ConfigError(f"Invalid value {value} for configuration {key}: "
                                      f"String must be one of: read_committed, read_uncommitted")
            elif key in ("share.renew.acknowledge.enable", "errors.deadletterqueue.copy.record.enable",
                         "consumer.assignor.offload.enable", "share.assignor.offload.enable",
                         "share.fair.acquisition.enable"):
                _parse_bool(key, value)
            elif key == "share.assignor.name":
                if value not in self.share_assignors():
                    raise ConfigError(f"Invalid value {value} for configuration {key}: "
                                      f"String must be one of: {', '.join(self.share_assignors())}")
            elif key == "errors.deadletterqueue.topic.name":
                # Kafka 4.4's GroupConfig.validate (KIP-1191); the DLQ writer checks the name again (and the rest)
                # when a record is dead-lettered.
                if value.startswith("__"):
                    raise ConfigError(f"{key}: DLQ topic name must not start with '__'")
            elif key in _REDELIVERY_BOUNDS:
                _parse_int_in(key, value, *_REDELIVERY_BOUNDS[key])
            else:
                raise ConfigError(f"Unknown group config name: {key}")
        for prefix in ("share", "consumer"):
            s, h = f"{prefix}.session.timeout.ms", f"{prefix}.heartbeat.interval.ms"
            if s in values or h in values:
                sv = int(values.get(s, self.get(group_id, s)))
                hv = int(values.get(h, self.get(group_id, h)))
                if hv >= sv:
                    raise ConfigError(f"{h} must be less than {s}")

    # --------------------------------------------------------------- config resource
    def names(self) -> list[str]:
        return sorted(set(self._overrides) | set(self._known_groups()))

    def describe(self, group_id: str):
        if not group_id:
            raise KafkaError(Errors.INVALID_REQUEST, "Group id must not be empty")
        o = self._overrides.get(group_id, {})
        out = []
        for key in KEYS:
            if key in INTERNAL_KEYS:
                continue
            syn = []
            if key in o:
                syn.append((key, o[key], SOURCE_GROUP))
            if key in _INT_KEYS:
                dkey, default = _INT_KEYS[key][:2]
                if self.broker_config.has(dkey):
                    syn.append((dkey, self.broker_config.get(dkey), SOURCE_STATIC_BROKER))
                syn.append((dkey, str(default), SOURCE_DEFAULT))
                t = INT
            else:
                dkey, default, t = _OTHER_KEYS[key]
                if dkey and self.broker_config.has(dkey):
                    syn.append((dkey, self.broker_default(key), SOURCE_STATIC_BROKER))
                syn.append((dkey or key, default, SOURCE_DEFAULT))
            out.append(ConfigEntry(key, syn[0][1], syn[0][2], synonyms=syn, type_=t))
        return out

    def alter(self, group_id: str, ops, validate_only: bool) -> None:
        new = apply_ops(self._overrides.get(group_id, {}), ops, set())
        self.validate(group_id, new)
        if validate_only:
            return
        if new:
            self._overrides[group_id] = new
        else:
            self._overrides.pop(group_id, None)
        self._persist()
        for fn in self._listeners:
            fn(group_id)

    def delete_group(self, group_id: str) -> None:
        """Drop a deleted group's overrides (Kafka removes them with the group)."""
        if self._overrides.pop(group_id, None) is not None:
            self._persist()

    def _persist(self) -> None:
        """Rewritten atomically (temp file, rename) before the change is answered; fsynced off the loop."""
        if self._path is not None:
            atomic_write(self._path, json.dumps(self._overrides, sort_keys=True).encode(), self.background)
