"""Topic-level log configuration: Kafka names, types, defaults, validation.

``TOPIC_CONFIGS`` lists every topic config Kafka 4.4 accepts (so DescribeConfigs
and CreateTopics/IncrementalAlterConfigs validation can use one table); a unit test
checks it against Kafka's own definitions (``broker/kafka_configs.json``, dumped from
Kafka's ``LogConfig``). ``LogConfig`` holds the subset the log and its cleaner act on.
Accepted, stored and described but without effect here: compression.type and its
levels (the broker never recompresses), max.decompressed.message.bytes (no
recompression, so nothing is decompressed), min.insync.replicas, replication
throttles, preallocate, file.delete.delay.ms (files are deleted at once), and the
tiered-storage settings (local.retention.*, remote.copy.lag.*, remote.log.*): as on
a Kafka broker without ``remote.log.storage.system.enable``, ``remote.storage.enable=true``
is refused and the others are only stored.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1

# DescribeConfigs ConfigType codes
BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD = range(1, 10)


class ConfigError(ValueError):
    """Invalid topic config (Kafka INVALID_CONFIG, error code 40)."""

    code = 40


class ConfigDef:
    __slots__ = ("name", "type", "default", "minimum", "maximum", "choices", "synonym", "also")

    def __init__(self, name, type_, default, minimum=None, maximum=None, choices=None, synonym=None, also=None):
        self.name, self.type, self.default = name, type_, default
        self.minimum, self.maximum, self.choices, self.synonym = minimum, maximum, choices, synonym
        self.also = also  # one value allowed outside [minimum, maximum] (Kafka's "[1,...,9] or -1")

    def parse(self, value: Any, check_range: bool = True) -> Any:
        """Parse a wire/string value to its Python type, raising ConfigError when invalid."""
        name = self.name
        try:
            if self.type in (INT, LONG, SHORT):
                v = int(str(value).strip())
                limit = INT_MAX if self.type == INT else LONG_MAX
                if not -limit - 1 <= v <= limit:
                    raise ValueError
            elif self.type == DOUBLE:
                v = float(value)
            elif self.type == BOOLEAN:
                s = str(value).strip().lower()
                if s not in ("true", "false"):
                    raise ValueError
                v = s == "true"
            elif self.type == LIST:
                v = [p.strip() for p in str(value).split(",") if p.strip()] if not isinstance(value, list) else value
            else:
                v = "" if value is None else str(value).strip()
        except ValueError:
            raise ConfigError(f"Invalid value {value} for configuration {name}") from None
        if not check_range or (self.also is not None and v == self.also):
            return v
        if self.minimum is not None and v < self.minimum:
            raise ConfigError(f"Invalid value {value} for configuration {name}: Value must be at least {self.minimum}")
        if self.maximum is not None and v > self.maximum:
            raise ConfigError(f"Invalid value {value} for configuration {name}: Value must be no more than {self.maximum}")
        if self.name.endswith(".replication.throttled.replicas") and not _throttled_replicas(v):
            raise ConfigError(f"Invalid value {value} for configuration {name}: {name} must be the literal '*' "
                              "or a list of replicas in the following format: [partitionId]:[brokerId],"
                              "[partitionId]:[brokerId],...")
        if self.choices is not None:
            items = v if isinstance(v, list) else [v]
            for item in items:
                if item.lower() not in self.choices:
                    raise ConfigError(f"Invalid value {value} for configuration {name}: "
                                      f"String must be one of: {', '.join(self.choices)}")
        return v


def _throttled_replicas(items: list[str]) -> bool:
    """Kafka's ThrottledReplicaListValidator: ``*`` or ``partition:broker`` pairs."""
    return "".join(items) == "*" or all(re.fullmatch(r"([0-9]+:[0-9]+)?", i) for i in items)


def _d(*args, **kw):
    c = ConfigDef(*args, **kw)
    return c.name, c


TOPIC_CONFIGS: dict[str, ConfigDef] = dict([
    _d("cleanup.policy", LIST, "delete", choices=("compact", "delete"), synonym="log.cleanup.policy"),
    _d("compression.type", STRING, "producer",
       choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"), synonym="compression.type"),
    _d("compression.gzip.level", INT, -1, minimum=1, maximum=9, also=-1, synonym="compression.gzip.level"),
    _d("compression.lz4.level", INT, 9, minimum=1, maximum=17, synonym="compression.lz4.level"),
    _d("compression.zstd.level", INT, 3, minimum=-131072, maximum=22, synonym="compression.zstd.level"),
    _d("delete.retention.ms", LONG, 86400000, minimum=0, synonym="log.cleaner.delete.retention.ms"),
    # KIP-1191: a topic share groups may use as their dead-letter queue (broker/share/dlq.py).
    _d("errors.deadletterqueue.group.enable", BOOLEAN, False),
    _d("file.delete.delay.ms", LONG, 60000, minimum=0, synonym="log.segment.delete.delay.ms"),
    _d("flush.messages", LONG, LONG_MAX, minimum=1, synonym="log.flush.interval.messages"),
    _d("flush.ms", LONG, LONG_MAX, minimum=0, synonym="log.flush.interval.ms"),
    _d("follower.replication.throttled.replicas", LIST, ""),
    _d("index.interval.bytes", INT, 4096, minimum=0, synonym="log.index.interval.bytes"),
    _d("leader.replication.throttled.replicas", LIST, ""),
    _d("local.retention.bytes", LONG, -2, minimum=-2, synonym="log.local.retention.bytes"),
    _d("local.retention.ms", LONG, -2, minimum=-2, synonym="log.local.retention.ms"),
    _d("max.compaction.lag.ms", LONG, LONG_MAX, minimum=1, synonym="log.cleaner.max.compaction.lag.ms"),
    _d("max.decompressed.message.bytes", INT, 2147483639, minimum=1, maximum=2147483639,
       synonym="max.decompressed.message.bytes"),
    _d("max.message.bytes", INT, 1048588, minimum=0, synonym="message.max.bytes"),
    _d("message.timestamp.after.max.ms", LONG, 3600000, minimum=0, synonym="log.message.timestamp.after.max.ms"),
    _d("message.timestamp.before.max.ms", LONG, LONG_MAX, minimum=0, synonym="log.message.timestamp.before.max.ms"),
    _d("message.timestamp.type", STRING, "CreateTime", choices=("createtime", "logappendtime"),
       synonym="log.message.timestamp.type"),
    _d("min.cleanable.dirty.ratio", DOUBLE, 0.5, minimum=0.0, maximum=1.0, synonym="log.cleaner.min.cleanable.ratio"),
    _d("min.compaction.lag.ms", LONG, 0, minimum=0, synonym="log.cleaner.min.compaction.lag.ms"),
    _d("min.insync.replicas", INT, 1, minimum=1, synonym="min.insync.replicas"),
    _d("preallocate", BOOLEAN, False, synonym="log.preallocate"),
    _d("remote.copy.lag.bytes", LONG, -1, minimum=-1, synonym="log.remote.copy.lag.bytes"),
    _d("remote.copy.lag.ms", LONG, 0, minimum=-1, synonym="log.remote.copy.lag.ms"),
    _d("remote.log.copy.disable", BOOLEAN, False),
    _d("remote.log.delete.on.disable", BOOLEAN, False),
    _d("remote.storage.enable", BOOLEAN, False),
    _d("retention.bytes", LONG, -1, synonym="log.retention.bytes"),
    _d("retention.ms", LONG, 604800000, minimum=-1, synonym="log.retention.ms"),
    _d("segment.bytes", INT, 1073741824, minimum=1048576, synonym="log.segment.bytes"),
    _d("segment.index.bytes", INT, 10485760, minimum=4, synonym="log.index.size.max.bytes"),
    _d("segment.jitter.ms", LONG, 0, minimum=0, synonym="log.roll.jitter.ms"),
    _d("segment.ms", LONG, 604800000, minimum=1, synonym="log.roll.ms"),
    _d("unclean.leader.election.enable", BOOLEAN, False, synonym="unclean.leader.election.enable"),
])


# Kafka's internal (test-only) topic configs: accepted where a topic is created, never described.
# ``internal.segment.bytes`` replaces ``segment.bytes`` without its 1 MiB minimum (LogConfig.segmentSize).
INTERNAL_TOPIC_CONFIGS: dict[str, ConfigDef] = dict([_d("internal.segment.bytes", INT, None, minimum=14)])


def validate_topic_configs(configs: Mapping[str, Any]) -> dict[str, Any]:
    """Check names and values of client-supplied topic configs; return them parsed.

    Raises ConfigError ("Unknown topic config name: x" / "Invalid value ...").
    """
    parsed = {}
    for name, value in configs.items():
        cdef = TOPIC_CONFIGS.get(name) or INTERNAL_TOPIC_CONFIGS.get(name)
        if cdef is None:
            raise ConfigError(f"Unknown topic config name: {name}")
        parsed[name] = cdef.parse(value)
    min_lag, max_lag = parsed.get("min.compaction.lag.ms", 0), parsed.get("max.compaction.lag.ms", LONG_MAX)
    if min_lag > max_lag:
        raise ConfigError(f"conflict topic config setting min.compaction.lag.ms ({min_lag}) > "
                          f"max.compaction.lag.ms ({max_lag})")
    if parsed.get("remote.storage.enable"):  # LogConfig.validateRemoteStorageOnlyIfSystemEnabled
        raise ConfigError("Tiered Storage functionality is disabled in the broker. "
                          "Topic cannot be configured with remote log storage.")
    return parsed


class LogConfig:
    """Effective settings of one partition log (plain attributes, Kafka defaults).

    Build from a mapping of Kafka topic-config names with ``LogConfig.from_mapping``;
    values are not range-checked here (tests use tiny segments), use
    ``validate_topic_configs`` for client input.
    """

    __slots__ = ("segment_bytes", "segment_ms", "segment_jitter_ms", "segment_index_bytes", "retention_ms",
                 "retention_bytes", "index_interval_bytes", "message_timestamp_type", "flush_messages", "flush_ms",
                 "cleanup_policy", "max_message_bytes", "message_timestamp_before_max_ms",
                 "message_timestamp_after_max_ms", "delete_retention_ms", "min_cleanable_ratio",
                 "min_compaction_lag_ms", "max_compaction_lag_ms")

    _defaults = None  # attr -> parsed Kafka default, filled on first use

    _NAMES = {
        "segment.bytes": "segment_bytes", "segment.ms": "segment_ms", "segment.jitter.ms": "segment_jitter_ms",
        "segment.index.bytes": "segment_index_bytes", "retention.ms": "retention_ms",
        "retention.bytes": "retention_bytes", "index.interval.bytes": "index_interval_bytes",
        "message.timestamp.type": "message_timestamp_type", "flush.messages": "flush_messages",
        "flush.ms": "flush_ms", "cleanup.policy": "cleanup_policy", "max.message.bytes": "max_message_bytes",
        "message.timestamp.before.max.ms": "message_timestamp_before_max_ms",
        "message.timestamp.after.max.ms": "message_timestamp_after_max_ms",
        "delete.retention.ms": "delete_retention_ms", "min.cleanable.dirty.ratio": "min_cleanable_ratio",
        "min.compaction.lag.ms": "min_compaction_lag_ms", "max.compaction.lag.ms": "max_compaction_lag_ms",
    }

    def __init__(self, **kw):
        defaults = LogConfig._defaults
        if defaults is None:  # parsed once per process (start-up builds one config per topic)
            defaults = LogConfig._defaults = {attr: TOPIC_CONFIGS[name].parse(TOPIC_CONFIGS[name].default,
                                                                              check_range=False)
                                              for name, attr in self._NAMES.items()}
        for attr, v in defaults.items():
            setattr(self, attr, list(v) if isinstance(v, list) else v)
        for k, v in kw.items():
            setattr(self, k, v)

    @classmethod
    def from_mapping(cls, *layers: Mapping[str, Any] | None) -> "LogConfig":
        """Later layers override earlier ones (e.g. broker defaults, then topic overrides)."""
        cfg = cls()
        internal = None
        for layer in layers:
            for name, value in (layer or {}).items():
                attr = cls._NAMES.get(name)
                if attr is not None:
                    setattr(cfg, attr, TOPIC_CONFIGS[name].parse(value, check_range=False))
                elif name == "internal.segment.bytes":
                    internal = INTERNAL_TOPIC_CONFIGS[name].parse(value, check_range=False)
        if internal is not None:
            cfg.segment_bytes = internal
        return cfg

    def _policy(self, name: str) -> bool:
        policy = self.cleanup_policy
        items = policy if isinstance(policy, list) else str(policy).split(",")
        return any(p.strip().lower() == name for p in items)

    @property
    def delete_enabled(self) -> bool:
        return self._policy("delete")

    @property
    def compact(self) -> bool:
        """``cleanup.policy`` contains ``compact``: the log cleaner keeps the latest record per key."""
        return self._policy("compact")

    @property
    def log_append_time(self) -> bool:
        return str(self.message_timestamp_type).lower() == "logappendtime"

    def copy(self) -> "LogConfig":
        return LogConfig(**{a: getattr(self, a) for a in self.__slots__})


def as_log_config(config: "LogConfig | Mapping[str, Any] | None") -> LogConfig:
    if isinstance(config, LogConfig):
        return config
    return LogConfig.from_mapping(config)
