"""Config resources for DescribeConfigs, IncrementalAlterConfigs, AlterConfigs (legacy) and ListConfigResources.

One class per resource type, registered in the broker's :class:`ConfigResources`
(one per broker, built with the other components):
- TOPIC (2): topic overrides on top of broker defaults (validated by broker.log.config);
- BROKER (4): every broker config Kafka 4.4 defines (``kafka_configs.json``, Kafka's own
  definitions: default, type, sensitivity) plus the keys set explicitly; the topic-default
  synonyms (``log.retention.ms``, ``log.segment.bytes``, ...) can be altered at run time,
  as Kafka's cluster-wide dynamic defaults, and are persisted in ``meta/broker-configs.json``;
  other configs are read-only here (Kafka changes some of them at run time: refused);
- GROUP (32): ``broker.group_configs.GroupConfigManager`` (share- and consumer-group configs);
- CLIENT_METRICS (16): ``broker.client_metrics.ClientMetricsManager`` (KIP-714 subscriptions).
Config sources follow Kafka's numbering.  :class:`BrokerSettings` owns the static
settings and the dynamic cluster-wide defaults together, and derives the topic-config
defaults from them (Kafka's synonyms).
"""
from __future__ import annotations

import functools
import json
import os
from typing import Callable, Mapping, NamedTuple

from broker.config import BrokerConfig
from broker.config_keys import BROKER_KEYS
from broker.log.config import LIST, PASSWORD, TOPIC_CONFIGS, ConfigError, validate_topic_configs
from broker.log.errors import LogError
from broker.log.files import atomic_write
from broker.topics import INTERNAL_SEGMENT_BYTES
from protocol.errors import Errors

# ConfigSource
UNKNOWN, DYNAMIC_TOPIC, DYNAMIC_BROKER, DYNAMIC_DEFAULT_BROKER, STATIC_BROKER, DEFAULT, GROUP = 0, 1, 2, 3, 4, 5, 8
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
TOPIC, BROKER, GROUP_RESOURCE = 2, 4, 32


class ConfigEntry:
    __slots__ = ("name", "value", "read_only", "source", "sensitive", "synonyms", "type")

    def __init__(self, name, value, source, read_only=False, sensitive=False, synonyms=(), type_=0):
        self.name = name
        self.value = value
        self.read_only = read_only
        self.source = source
        self.sensitive = sensitive
        self.synonyms = list(synonyms)  # (name, value, source), most specific first
        self.type = type_


# ConfigDef.Type names as broker/kafka_configs.json spells them -> DescribeConfigs ConfigType numbers
_KAFKA_TYPES = {t: i for i, t in enumerate(
    ("BOOLEAN", "STRING", "INT", "SHORT", "LONG", "DOUBLE", "LIST", "CLASS", "PASSWORD"), start=1)}
_KAFKA_TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kafka_configs.json")


@functools.cache
def kafka_configs() -> dict:
    """Kafka 4.4's own topic and broker config definitions (``broker/kafka_configs.json``, written by
    ``tools/kafka_configs.py`` from Kafka's jars): ``topic`` / ``broker`` map a name to
    ``[type, default, validator, importance]``; ``dynamic_broker`` names the broker configs Kafka can
    change at run time (per-broker or cluster-wide)."""
    with open(_KAFKA_TABLE, "rb") as f:
        return json.loads(f.read())


def _fmt(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def _type_of(cdef) -> int:
    """ConfigType as DescribeConfigs v3+ numbers it (the log config types use the same numbers)."""
    return cdef.type


def apply_ops(current: dict[str, str], ops, list_keys: set[str],
              defaults: dict[str, str] | None = None) -> dict[str, str]:
    """Apply IncrementalAlterConfigs operations to a copy of ``current``; raise ConfigError.

    APPEND / SUBTRACT start from the key's value in ``current`` or, when it has none
    there, from ``defaults`` (as Kafka starts from the config's default value).
    """
    out = dict(current)
    defaults = defaults or {}
    for op in ops:
        name, kind, value = op.name, op.config_operation, op.value
        if kind == SET:
            if value is None:
                raise ConfigError(f"Null value not supported for : {name}")
            out[name] = value
        elif kind == DELETE:
            out.pop(name, None)
        elif kind in (APPEND, SUBTRACT):
            if name not in list_keys:
                raise ConfigError(f"Config value append is not allowed for config key: {name}")
            items = [x for x in out.get(name, defaults.get(name, "")).split(",") if x]
            new = [x for x in (value or "").split(",") if x]
            if kind == APPEND:
                items += [x for x in new if x not in items]
            else:
                items = [x for x in items if x not in new]
            out[name] = ",".join(items)
        else:
            raise ConfigError(f"Unknown config operation {kind}")
    return out


class ConfigOp(NamedTuple):
    """One IncrementalAlterConfigs-shaped operation built here (the message classes have the same fields)."""

    name: str
    config_operation: int
    value: str | None


def replace_ops(current: Mapping[str, str], configs: Mapping[str, str]) -> list[ConfigOp]:
    """The operations that make ``configs`` the whole set of a resource's overrides (the legacy
    AlterConfigs form, as Kafka's ConfigurationControlManager.legacyAlterConfigResource): every
    current key the new set leaves out is deleted, every key of the new set is set."""
    ops = [ConfigOp(k, DELETE, None) for k in current if k not in configs]
    ops += [ConfigOp(k, SET, v) for k, v in configs.items()]
    return ops


_RETENTION_UNITS = (("log.retention.ms", 1), ("log.retention.minutes", 60_000), ("log.retention.hours", 3_600_000))
_ROLL_UNITS = (("log.roll.ms", 1), ("log.roll.hours", 3_600_000))
_BROKER_CONFIGS_FILE = "broker-configs.json"
# Broker synonyms of topic configs whose Kafka default is null (KafkaConfig: the value comes from another
# unit, log.retention.hours / log.roll.hours, or is unset): DescribeConfigs lists no default synonym for them.
# (tests/unit/test_kafka_configs.py checks this against Kafka's table.)
_NO_BROKER_DEFAULT = frozenset({"log.retention.ms", "log.roll.ms", "log.roll.jitter.ms", "log.flush.interval.ms"})


def static_topic_defaults(config: BrokerConfig) -> dict[str, str]:
    """Broker-level settings that are defaults of topic configs (Kafka's synonyms)."""
    out: dict[str, str] = {}
    for name, cdef in TOPIC_CONFIGS.items():
        syn = getattr(cdef, "synonym", None)
        if syn and config.has(syn):
            out[name] = config.get(syn)
    for target, units in (("retention.ms", _RETENTION_UNITS), ("segment.ms", _ROLL_UNITS)):
        for key, factor in units:
            if config.has(key):
                out[target] = str(int(config.get(key)) * factor if int(config.get(key)) >= 0 else -1)
                break
    return out


class BrokerSettings:
    """The broker's static settings plus its dynamic cluster-wide defaults (``meta/broker-configs.json``).

    ``background`` (the log manager's file worker, once started) takes the fsyncs of
    the rewritten file off the event loop; ``on_topic_defaults`` is told the new
    topic-config defaults after a dynamic change (the log manager applies them to
    every log without an override).
    """

    def __init__(self, config: BrokerConfig, node_id: int, meta_dir: str,
                 on_topic_defaults: Callable[[dict[str, str]], None] | None = None):
        self.config = config
        self.node_id = node_id
        self._path = os.path.join(meta_dir, _BROKER_CONFIGS_FILE)
        self.background = None
        self.on_topic_defaults = on_topic_defaults
        try:
            with open(self._path, "rb") as f:
                self.dynamic: dict[str, str] = dict(json.loads(f.read()))
        except FileNotFoundError:
            self.dynamic = {}

    def topic_defaults(self) -> dict[str, str]:
        """Topic-config defaults from broker settings: dynamic ones over static ones."""
        out = static_topic_defaults(self.config)
        by_syn = {c.synonym: k for k, c in TOPIC_CONFIGS.items() if c.synonym}
        for key, value in self.dynamic.items():
            if key in by_syn:
                out[by_syn[key]] = value
        return out

    def source(self, key: str) -> int:
        return DYNAMIC_DEFAULT_BROKER if key in self.dynamic else STATIC_BROKER

    def set_dynamic(self, values: dict[str, str]) -> None:
        atomic_write(self._path, json.dumps(values, sort_keys=True).encode(), self.background)
        self.dynamic = dict(values)
        if self.on_topic_defaults is not None:
            self.on_topic_defaults(self.topic_defaults())


class ConfigResources:
    """The config resource types this broker serves, by resource type number."""

    def __init__(self, *resources) -> None:
        self._by_type: dict[int, object] = {}
        for r in resources:
            self.register(r)

    def register(self, resource) -> None:
        self._by_type[resource.resource_type] = resource

    def get(self, resource_type: int):
        return self._by_type.get(resource_type)

    def types(self) -> list[int]:
        return sorted(self._by_type)


class TopicConfigs:
    resource_type = TOPIC

    def __init__(self, logs, settings: BrokerSettings):
        self.logs = logs
        self.settings = settings

    def names(self) -> list[str]:
        return sorted(self.logs.topics)

    def describe(self, name: str) -> list[ConfigEntry]:
        info = self.logs.topic(name)
        if info is None:
            raise LogError(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist")
        return self.entries(info.configs)

    def entries(self, overrides: dict[str, str]) -> list[ConfigEntry]:
        """Every topic config of a topic with these overrides (also for one not created: CreateTopics'
        validateOnly). Synonyms as Kafka's ConfigHelper.createTopicConfigEntry lists them: the topic's
        override, then the broker synonym's dynamic / static value, then its default, which Kafka
        lists only when the broker synonym has a default of its own (not ``log.retention.ms`` and the
        others in ``_NO_BROKER_DEFAULT``) and a topic config without a broker synonym has none."""
        defaults = self.settings.topic_defaults()
        out = []
        for key, cdef in sorted(TOPIC_CONFIGS.items()):
            syn = []
            if key in overrides:
                syn.append((key, overrides[key], DYNAMIC_TOPIC))
            if cdef.synonym and key in defaults:
                syn.append((cdef.synonym, defaults[key], self.settings.source(cdef.synonym)))
            if cdef.synonym and cdef.synonym not in _NO_BROKER_DEFAULT:
                syn.append((cdef.synonym, _fmt(cdef.default), DEFAULT))
            value, source = (syn[0][1], syn[0][2]) if syn else (_fmt(cdef.default), DEFAULT)
            out.append(ConfigEntry(key, value, source, synonyms=syn, type_=_type_of(cdef)))
        return out

    def overrides(self, name: str) -> dict[str, str]:
        """The topic's own configs (none for an unknown topic: ``alter`` answers that)."""
        info = self.logs.topic(name)
        return dict(info.configs) if info is not None else {}

    async def alter(self, name: str, ops, validate_only: bool) -> None:
        """Apply ``ops`` to the topic's overrides; answered once the change is durable (the log manager's
        ``alter_topic_configs``), computed there on the overrides of that moment, in turn with the topic's
        other changes."""
        info = self.logs.topic(name)
        if info is None:
            raise LogError(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist")
        for op in ops:
            if op.name not in TOPIC_CONFIGS:
                raise ConfigError(f"Unknown topic config name: {op.name}")
        lists = {k for k, c in TOPIC_CONFIGS.items() if c.type == LIST}
        defaults = {k: _fmt(c.default) for k, c in TOPIC_CONFIGS.items()}

        def compute(current: dict[str, str]) -> dict[str, str]:
            new = apply_ops(current, ops, lists, defaults)
            validate_topic_configs(new)
            return new
        if validate_only:
            compute(dict(info.configs))
        else:
            await self.logs.alter_topic_configs(name, compute)


class BrokerConfigs:
    resource_type = BROKER

    def __init__(self, settings: BrokerSettings):
        self.settings = settings

    def names(self) -> list[str]:
        return [str(self.settings.node_id)]

    def _check_name(self, name: str) -> None:
        node_id = self.settings.node_id
        if name not in ("", str(node_id)):
            raise LogError(Errors.INVALID_REQUEST, f"Unexpected broker id, expected {node_id} or empty string, "
                                                   f"but received {name}")

    def describe(self, name: str) -> list[ConfigEntry]:
        """Kafka's ConfigHelper: the named broker lists every broker config Kafka defines (its
        non-internal values) and every key set explicitly; the empty name (the cluster default) lists
        only the dynamic cluster-wide defaults. A value comes from the dynamic set, then the static
        file, then this broker's built-in default, then Kafka's default. Sensitive, as Kafka's
        ``KafkaConfig.maybeSensitive``: a PASSWORD config, or a key of unknown type (its value is null)."""
        self._check_name(name)
        config = self.settings.config
        dynamic = self.settings.dynamic
        kafka = kafka_configs()["broker"]
        if name == "":
            keys = set(dynamic)
        else:
            keys = set(kafka) | {k for k, _ in config.explicit_items()} | set(dynamic)
        defaults = {k: row[1] for k, row in kafka.items() if row[1] != "<none>"}
        defaults.update(BROKER_DEFAULTS)
        defaults["broker.id"] = str(self.settings.node_id)  # Kafka's broker.id follows node.id
        topic_of = {c.synonym: c for c in TOPIC_CONFIGS.values() if c.synonym}  # log.* keys: their topic key's type
        out = []
        for key in sorted(keys):
            syn = []
            if key in dynamic:
                syn.append((key, dynamic[key], DYNAMIC_DEFAULT_BROKER))
            if name != "":
                if config.has(key):
                    syn.append((key, config.get(key), STATIC_BROKER))
                if config.is_builtin_default(key):
                    syn.append((key, config.get(key), DEFAULT))
                elif key in defaults and defaults[key] is not None:
                    syn.append((key, defaults[key], DEFAULT))
            value, source = (syn[0][1], syn[0][2]) if syn else (None, DEFAULT)
            row = kafka.get(key)
            type_ = _KAFKA_TYPES.get(row[0], 0) if row else 0
            if not type_:
                cdef = BROKER_KEYS.get(key) or topic_of.get(key)
                type_ = _type_of(cdef) if cdef else 0
            sensitive = type_ in (0, PASSWORD) or (row is None and ("password" in key or "secret" in key))
            if sensitive:
                value, syn = None, [(n, None, s) for n, _, s in syn]
            out.append(ConfigEntry(key, value, source, sensitive=sensitive, read_only=key not in _DYNAMIC_BROKER_KEYS,
                                   synonyms=syn, type_=type_))
        return out

    def overrides(self, name: str) -> dict[str, str]:
        """The dynamic broker configs (the one node's and the cluster default are one set here)."""
        return dict(self.settings.dynamic)

    def alter(self, name: str, ops, validate_only: bool) -> None:
        # Kafka answers INVALID_REQUEST, not INVALID_CONFIG, when a broker config change
        # fails validation (ConfigAdminManager.validateBrokerConfigChange, KAFKA-13609).
        # Refusals in the order of Kafka's DynamicBrokerConfig.validateConfigs: the configs Kafka never
        # changes at run time, then the SSL configs it changes only per listener; here also every other
        # config this broker does not change at run time (read-only in DescribeConfigs), with the first words.
        self._check_name(name)
        config = self.settings.config
        kafka = kafka_configs()
        refused = [op.name for op in ops if op.name not in _DYNAMIC_BROKER_KEYS]
        never = [k for k in refused if k in kafka["broker"] and k not in kafka["dynamic_broker"]]
        per_listener = [k for k in refused if k in kafka["dynamic_security"]]
        for keys, words in ((never, "Cannot update these configs dynamically"),
                            (per_listener, "These security configs can be dynamically updated only per-listener "
                                           "using the listener prefix"),
                            (refused, "Cannot update these configs dynamically")):
            if keys:
                raise LogError(Errors.INVALID_REQUEST, f"{words}: [{', '.join(keys)}]")
        by_topic_key = {c.synonym: k for k, c in TOPIC_CONFIGS.items() if c.synonym}
        lists = {syn for syn, k in by_topic_key.items() if TOPIC_CONFIGS[k].type == LIST}
        defaults = {syn: config.get(syn) if config.has(syn) else _fmt(TOPIC_CONFIGS[k].default)
                    for syn, k in by_topic_key.items()}
        new = apply_ops(self.settings.dynamic, ops, lists, defaults)
        try:
            validate_topic_configs({by_topic_key[k]: v for k, v in new.items()})
        except ConfigError as e:
            raise LogError(Errors.INVALID_REQUEST, str(e)) from None
        if not validate_only:
            self.settings.set_dynamic(new)


# The values this broker runs with where they are not Kafka's defaults, or are Kafka's defaults that
# components read (DescribeConfigs shows them as DEFAULT_CONFIG; every other key shows Kafka's default).
BROKER_DEFAULTS = {
    # one node: the internal topics have one partition and one replica (broker/topics.py)
    **dict.fromkeys(("offsets.topic.num.partitions", "offsets.topic.replication.factor",
                     "transaction.state.log.num.partitions", "transaction.state.log.replication.factor",
                     "transaction.state.log.min.isr", "share.coordinator.state.topic.num.partitions",
                     "share.coordinator.state.topic.replication.factor", "share.coordinator.state.topic.min.isr"),
                    "1"),
    **{key: str(size) for key, size in INTERNAL_SEGMENT_BYTES.values()},
    "process.roles": "broker,controller",  # a combined node
    # KIP-1191 share-group dead-letter queue (Kafka's GroupCoordinatorConfig; broker/share/dlq.py)
    "errors.deadletterqueue.auto.create.topics.enable": "false",
    "errors.deadletterqueue.topic.name.prefix": "dlq.",
    # KIP-211 offset expiration (Kafka's GroupCoordinatorConfig; coordinator/group/config.py)
    "offsets.retention.minutes": "10080",
    "offsets.retention.check.interval.ms": "600000",
}

_DYNAMIC_BROKER_KEYS = {c.synonym for c in TOPIC_CONFIGS.values()
                        if c.synonym and c.synonym.startswith(("log.", "message.max", "compression."))}
