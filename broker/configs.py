"""Config resources for DescribeConfigs / IncrementalAlterConfigs / ListConfigResources.

One class per resource type, registered in ``RESOURCES``:
- TOPIC (2): topic overrides on top of broker defaults (validated by broker.log.config);
- BROKER (4): the broker's settings; the topic-default synonyms (``log.retention.ms``,
  ``log.segment.bytes``, ...) can be altered at run time, as Kafka's cluster-wide
  dynamic defaults, and are persisted in ``meta/broker-configs.json``;
- GROUP (32): registered by the group coordinator (share-group configs).
Config sources follow Kafka's numbering.
"""
from __future__ import annotations

import json
import os

from broker.log.config import LIST, TOPIC_CONFIGS, ConfigError, validate_topic_configs
from broker.log.errors import LogError
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


class TopicConfigs:
    resource_type = TOPIC

    def names(self, b) -> list[str]:
        return sorted(b.logs.topics)

    def describe(self, b, name: str) -> list[ConfigEntry]:
        info = b.logs.topic(name)
        if info is None:
            raise LogError(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist")
        defaults = b.topic_default_configs()
        out = []
        for key, cdef in sorted(TOPIC_CONFIGS.items()):
            syn = []
            if key in info.configs:
                syn.append((key, info.configs[key], DYNAMIC_TOPIC))
            if cdef.synonym and key in defaults:
                syn.append((cdef.synonym, defaults[key], b.broker_config_source(cdef.synonym)))
            syn.append((cdef.synonym or key, _fmt(cdef.default), DEFAULT))
            value, source = (syn[0][1], syn[0][2])
            out.append(ConfigEntry(key, value, source, synonyms=syn, type_=_type_of(cdef)))
        return out

    def alter(self, b, name: str, ops, validate_only: bool) -> None:
        info = b.logs.topic(name)
        if info is None:
            raise LogError(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist")
        for op in ops:
            if op.name not in TOPIC_CONFIGS:
                raise ConfigError(f"Unknown topic config name: {op.name}")
        lists = {k for k, c in TOPIC_CONFIGS.items() if c.type == LIST}
        new = apply_ops(info.configs, ops, lists, {k: _fmt(c.default) for k, c in TOPIC_CONFIGS.items()})
        validate_topic_configs(new)
        if not validate_only:
            b.logs.set_topic_configs(name, new)


class BrokerConfigs:
    resource_type = BROKER

    def names(self, b) -> list[str]:
        return [str(b.node_id)]

    def _check_name(self, b, name: str) -> None:
        if name not in ("", str(b.node_id)):
            raise LogError(Errors.INVALID_REQUEST, f"Unexpected broker id, expected {b.node_id} or empty string, "
                                                   f"but received {name}")

    def describe(self, b, name: str) -> list[ConfigEntry]:
        self._check_name(b, name)
        dynamic = b.dynamic_broker_configs
        out = []
        keys = set(k for k, _ in b.config.items()) | set(dynamic)
        keys |= {c.synonym for c in TOPIC_CONFIGS.values() if c.synonym}
        defaults = {c.synonym: _fmt(c.default) for c in TOPIC_CONFIGS.values() if c.synonym}
        for key in sorted(keys):
            syn = []
            if key in dynamic:
                syn.append((key, dynamic[key], DYNAMIC_DEFAULT_BROKER))
            if b.config.has(key):
                syn.append((key, b.config.get(key), STATIC_BROKER))
            if key in defaults:
                syn.append((key, defaults[key], DEFAULT))
            if not syn:
                continue
            sensitive = "password" in key or "secret" in key
            out.append(ConfigEntry(key, None if sensitive else syn[0][1], syn[0][2], sensitive=sensitive,
                                   read_only=key not in _DYNAMIC_BROKER_KEYS, synonyms=syn))
        return out

    def alter(self, b, name: str, ops, validate_only: bool) -> None:
        # Kafka answers INVALID_REQUEST, not INVALID_CONFIG, when a broker config change
        # fails validation (ConfigAdminManager.validateBrokerConfigChange, KAFKA-13609).
        self._check_name(b, name)
        static = [op.name for op in ops if op.name not in _DYNAMIC_BROKER_KEYS]
        if static:
            raise LogError(Errors.INVALID_REQUEST, f"Cannot update these configs dynamically: [{', '.join(static)}]")
        by_topic_key = {c.synonym: k for k, c in TOPIC_CONFIGS.items() if c.synonym}
        lists = {syn for syn, k in by_topic_key.items() if TOPIC_CONFIGS[k].type == LIST}
        defaults = {syn: b.config.get(syn) if b.config.has(syn) else _fmt(TOPIC_CONFIGS[k].default)
                    for syn, k in by_topic_key.items()}
        new = apply_ops(b.dynamic_broker_configs, ops, lists, defaults)
        try:
            validate_topic_configs({by_topic_key[k]: v for k, v in new.items()})
        except ConfigError as e:
            raise LogError(Errors.INVALID_REQUEST, str(e)) from None
        if not validate_only:
            b.set_dynamic_broker_configs(new)


_DYNAMIC_BROKER_KEYS = {c.synonym for c in TOPIC_CONFIGS.values()
                        if c.synonym and c.synonym.startswith(("log.", "message.max", "compression."))}

RESOURCES: dict[int, object] = {TOPIC: TopicConfigs(), BROKER: BrokerConfigs()}


def register_resource(handler) -> None:
    RESOURCES[handler.resource_type] = handler


def load_dynamic_broker_configs(data_dir: str) -> dict[str, str]:
    path = os.path.join(data_dir, "meta", "broker-configs.json")
    try:
        with open(path, "rb") as f:
            return dict(json.loads(f.read()))
    except FileNotFoundError:
        return {}
