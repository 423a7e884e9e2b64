"""KIP-714 client telemetry: subscriptions, client instances and the metrics they push.

As Kafka 4.4's ``ClientMetricsManager`` / ``ClientMetricsInstance`` / ``ClientMetricsConfigs``:

- **Subscriptions** are config resources of type CLIENT_METRICS (16), set with IncrementalAlterConfigs
  (``kafka-configs.sh --entity-type client-metrics``) and kept in ``meta/client-metrics.json``.  Keys:
  ``metrics`` (list of metric-name prefixes, ``*`` = all, default empty = none), ``interval.ms``
  (100..3600000, default 300000) and ``match`` (``client_id=regex``, ... over client_instance_id,
  client_id, client_software_name, client_software_version, client_source_address,
  client_source_port; default empty = every client).  Unknown keys, an empty name and an interval out
  of range are INVALID_REQUEST, a bad match pattern or a non-number interval INVALID_CONFIG, as Kafka
  (tests/differential: ``client_metrics_configs``).
  Deleting every key removes the subscription.
- **Client instances**: GetTelemetrySubscriptions with the zero uuid gets a new id.  An instance's
  subscription is every matching subscription's metrics together (``*`` when one asks for all) at the
  smallest matching interval (300000 ms when none matches, with no metrics); its subscription id is
  CRC32C of the metric set and the interval, XOR the instance id's Java hash code.  A subscription change
  re-evaluates each instance at its next request (with fresh request timestamps, as Kafka builds a new
  ``ClientMetricsInstance``).  Gets and pushes sooner than the push interval are THROTTLING_QUOTA_EXCEEDED
  (the first push after a get, and a terminating push, are let through), a push after a terminating one
  INVALID_REQUEST, then UNKNOWN_SUBSCRIPTION_ID, UNSUPPORTED_COMPRESSION_TYPE, TELEMETRY_TOO_LARGE
  (``telemetry.max.bytes``, default 1 MiB), in Kafka's order.  An instance is forgotten after
  max(60 s, 3 x its push interval) without a request (Kafka's expiration timer); unlike Kafka it is not
  dropped when its connection closes (librdkafka pushes over whichever connection it has).
- **Pushed metrics** (Kafka hands them to a ``ClientTelemetryExporterPlugin``; here the broker is its own
  exporter): the payload is decompressed with the client's codec and decoded by ``broker.otlp``
  (INVALID_RECORD if that fails); the gauge and sum data points are kept per instance and shown on
  ``/metrics`` (``broker/metrics.py``): gauges and non-monotonic sums as
  ``sharebroker_client_metric{client_instance_id, client_id, name, attributes}``, monotonic sums as
  ``sharebroker_client_counter_total{...}`` (deltas added up: the broker asks for delta temporality).
  ``attributes`` is the data point's attributes as ``k=v`` pairs sorted and joined with ``,``.  Bounded:
  at most ``MAX_SERIES_PER_CLIENT`` series per instance and ``MAX_SERIES_TOTAL`` in all (more are
  dropped and counted), names and attributes cut at ``MAX_LABEL`` characters, and an instance's series
  are no longer shown 3 x its push interval after its last push (and freed with the instance).
"""
from __future__ import annotations

import base64
import json
import logging
import os
import re
import uuid
from typing import Callable

from broker.configs import DEFAULT, ConfigEntry, apply_ops
from broker.log.config import INT, LIST, ConfigError
from broker.log.files import atomic_write
from broker.otlp import TEMPORALITY_CUMULATIVE, decode_metrics_data
from protocol import compression
from protocol.errors import Errors, KafkaError
from protocol.primitives import ZERO_UUID
from protocol.records import crc32c

log = logging.getLogger("sharebroker.telemetry")

CLIENT_METRICS = 16
SOURCE_CLIENT_METRICS = 7  # ConfigSource.CLIENT_METRICS_CONFIG
METRICS, INTERVAL_MS, MATCH = "metrics", "interval.ms", "match"
INTERVAL_MS_DEFAULT = 300_000
MIN_INTERVAL_MS, MAX_INTERVAL_MS = 100, 3_600_000
ALL_METRICS = "*"
MATCH_PARAMS = ("client_instance_id", "client_id", "client_software_name", "client_software_version",
                "client_source_address", "client_source_port")
# ClientMetricsManager.SUPPORTED_COMPRESSION_TYPES: ZSTD, LZ4, GZIP, SNAPPY (those we can decompress)
COMPRESSION_PREFERENCE = (compression.ZSTD, compression.LZ4, compression.GZIP, compression.SNAPPY)
TELEMETRY_MAX_BYTES_DEFAULT = 1024 * 1024
CACHE_EXPIRY_MS = 60_000  # ClientMetricsManager.DEFAULT_CACHE_EXPIRY_MS
MAX_INSTANCES = 16384  # ClientMetricsManager.CACHE_MAX_SIZE
MAX_SERIES_PER_CLIENT = 2000
MAX_SERIES_TOTAL = 100_000
MAX_LABEL = 255  # characters kept of a metric name or an attributes label
MAX_RESOURCE_ATTRS = 32
_RESERVED = (ZERO_UUID, bytes(15) + b"\x01")  # Uuid.RESERVED: ZERO_UUID, METADATA_TOPIC_ID


def uuid_str(raw: bytes) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _java_uuid_hash(raw: bytes) -> int:
    h = int.from_bytes(raw[:8], "big") ^ int.from_bytes(raw[8:], "big")
    v = ((h >> 32) ^ h) & 0xFFFFFFFF
    return v


def subscription_id(metrics: list[str], interval_ms: int, instance_id: bytes) -> int:
    """CRC32C of the metric set and interval, XOR the instance id's hash (computeSubscriptionId)."""
    text = "[" + ", ".join(sorted(metrics)) + "]" + str(interval_ms)
    v = (crc32c(text.encode()) ^ _java_uuid_hash(instance_id)) & 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def _parse_list(value: str) -> list[str]:
    """A LIST config value (ConfigDef.parseType). A value listed twice is accepted, as Kafka 4.4's
    IncrementalAlterConfigs does (tests/differential: client_metrics_configs)."""
    return [x.strip() for x in value.split(",")] if value.strip() else []


def parse_match(patterns: list[str]) -> dict[str, re.Pattern]:
    """``param=regex`` pairs (ClientMetricsConfigs.parseMatchingPatterns); ConfigError if one is bad."""
    out = {}
    for p in patterns:
        parts = p.split("=")
        if len(parts) != 2 or parts[0].strip() not in MATCH_PARAMS:
            raise ConfigError(f"Illegal client matching pattern: {p}")
        try:
            out[parts[0].strip()] = re.compile(parts[1].strip())
        except re.error:
            raise ConfigError(f"Illegal client matching pattern: {p}") from None
    return out


class Subscription:
    __slots__ = ("name", "metrics", "interval_ms", "match")

    def __init__(self, name: str, props: dict[str, str]):
        self.name = name
        self.metrics = _parse_list(props.get(METRICS, ""))
        self.interval_ms = int(props.get(INTERVAL_MS, INTERVAL_MS_DEFAULT))
        self.match = parse_match(_parse_list(props.get(MATCH, "")))


def validate(name: str, props: dict[str, str]) -> None:
    """ClientMetricsConfigs.validate: KafkaError(INVALID_REQUEST) or ConfigError (INVALID_CONFIG)."""
    if not name:
        raise KafkaError(Errors.INVALID_REQUEST, "Subscription name can't be empty")
    for key in props:
        if key not in (METRICS, INTERVAL_MS, MATCH):
            raise KafkaError(Errors.INVALID_REQUEST, f"Unknown client metrics configuration: {key}")
    if INTERVAL_MS in props:
        try:
            v = int(props[INTERVAL_MS].strip())
        except ValueError:
            raise ConfigError(f"Invalid value {props[INTERVAL_MS]} for configuration {INTERVAL_MS}: "
                              f"Not a number of type INT") from None
        if not MIN_INTERVAL_MS <= v <= MAX_INTERVAL_MS:
            raise KafkaError(Errors.INVALID_REQUEST, f"Invalid value {v} for {INTERVAL_MS}, interval must be "
                                                     f"between 100 and 3600000 (1 hour)")
    Subscription(name, props)  # the lists and match patterns


class Series:
    """One exposed time series of a client instance."""

    __slots__ = ("name", "attributes", "counter", "value")

    def __init__(self, name: str, attributes: str, counter: bool):
        self.name = name
        self.attributes = attributes
        self.counter = counter
        self.value = 0.0


class ClientInstance:
    """One client instance (ClientMetricsInstance): its subscription and request timestamps."""

    def __init__(self, instance_id: bytes, attrs: dict[str, str | None], sub_version: int,
                 metrics: list[str], interval_ms: int):
        self.instance_id = instance_id
        self.attrs = attrs  # ClientMetricsInstanceMetadata: what match patterns test
        self.subscription_version = sub_version
        self.metrics = metrics
        self.interval_ms = interval_ms
        self.subscription_id = subscription_id(metrics, interval_ms, instance_id)
        self.last_get_ms = 0
        self.last_push_ms = 0
        self.last_request_ms = 0
        self.last_metrics_ms = 0
        self.terminating = False
        self.last_error = Errors.NONE
        # written by push(); read by /metrics; dropped 3 x interval after the last push
        self.series: dict[tuple[str, str], Series] = {}
        self.dropped_series = 0
        self.resource: dict[str, str] = {}  # the OTLP resource attributes of the last push (bounded)

    def matches(self, patterns: dict[str, re.Pattern]) -> bool:
        return all(self.attrs.get(k) is not None and p.fullmatch(self.attrs[k]) for k, p in patterns.items())

    def may_get(self, now: int) -> bool:
        """maybeUpdateGetRequestTimestamp."""
        if now - max(self.last_get_ms, self.last_push_ms) >= self.interval_ms:
            self.last_get_ms = now
            return True
        return False

    def may_push(self, now: int) -> bool:
        """maybeUpdatePushRequestTimestamp: the first push after a get is let through (client jitter)."""
        if self.last_get_ms > self.last_push_ms or now - self.last_push_ms >= self.interval_ms:
            self.last_push_ms = now
            return True
        return False


class ClientMetricsManager:
    """Owns the CLIENT_METRICS subscriptions (persisted) and the live client instances (memory only)."""

    resource_type = CLIENT_METRICS

    def __init__(self, config, meta_dir: str | None, now_ms: Callable[[], int], background=None):
        self.max_bytes = config.get_int("telemetry.max.bytes", TELEMETRY_MAX_BYTES_DEFAULT)
        self.now_ms = now_ms
        self.background = background
        self._path = os.path.join(meta_dir, "client-metrics.json") if meta_dir else None
        self._props: dict[str, dict[str, str]] = {}  # subscription name -> its configs, as set
        self._subs: dict[str, Subscription] = {}
        self.version = 0  # bumped on every subscription change: instances re-evaluate
        self.instances: dict[bytes, ClientInstance] = {}
        self._accepted: list[int] | None = None  # the codecs we can decompress, found on first use
        self._next_purge = 0
        self.series_total = 0  # the series of every instance together (at most MAX_SERIES_TOTAL)
        if self._path and os.path.exists(self._path):
            with open(self._path, "rb") as f:
                for name, props in json.loads(f.read()).items():
                    self._props[name] = dict(props)
                    self._subs[name] = Subscription(name, props)

    @property
    def accepted_compression(self) -> list[int]:
        """Kafka's preference order, without the codecs whose optional package is missing (looked up on
        first use: a broker that never sees a telemetry request never imports the codecs)."""
        if self._accepted is None:
            self._accepted = [c for c in COMPRESSION_PREFERENCE if compression.available(c)]
        return self._accepted

    # --------------------------------------------------------------- config resource
    def names(self) -> list[str]:
        return sorted(self._props)

    def describe(self, name: str) -> list[ConfigEntry]:
        if not name:
            raise KafkaError(Errors.INVALID_REQUEST, "Client metrics subscription name must not be empty")
        props = self._props.get(name, {})
        out = []
        for key, default, type_ in ((INTERVAL_MS, str(INTERVAL_MS_DEFAULT), INT), (MATCH, "", LIST),
                                    (METRICS, "", LIST)):
            if key in props:
                value = props[key].strip() if type_ == INT else ",".join(_parse_list(props[key]))
                out.append(ConfigEntry(key, value, SOURCE_CLIENT_METRICS,
                                       synonyms=[(key, value, SOURCE_CLIENT_METRICS)], type_=type_))
            else:
                out.append(ConfigEntry(key, default, DEFAULT, type_=type_))
        return out

    def alter(self, name: str, ops, validate_only: bool) -> None:
        if not name:
            raise KafkaError(Errors.INVALID_REQUEST, "Subscription name can't be empty")
        new = apply_ops(self._props.get(name, {}), ops, {METRICS, MATCH})
        validate(name, new)
        if validate_only:
            return
        props = dict(self._props)
        if new:
            props[name] = new
        else:
            props.pop(name, None)
        if self._path is not None:
            atomic_write(self._path, json.dumps(props, sort_keys=True).encode(), self.background)
        self._props = props
        if new:
            self._subs[name] = Subscription(name, new)
        else:
            self._subs.pop(name, None)
        self.version += 1

    # --------------------------------------------------------------- instances
    def _new_id(self) -> bytes:
        while True:
            raw = uuid.uuid4().bytes
            if raw not in _RESERVED and raw not in self.instances and not uuid_str(raw).startswith("-"):
                return raw

    def _build(self, instance_id: bytes, attrs: dict) -> ClientInstance:
        """createClientInstance: the matching subscriptions together."""
        probe = ClientInstance(instance_id, attrs, self.version, [], INTERVAL_MS_DEFAULT)
        metrics: set[str] = set()
        interval = INTERVAL_MS_DEFAULT
        for sub in self._subs.values():
            if probe.matches(sub.match):
                metrics.update(sub.metrics)
                interval = min(interval, sub.interval_ms)
        if ALL_METRICS in metrics:
            metrics = {ALL_METRICS}
        return ClientInstance(instance_id, attrs, self.version, sorted(metrics), interval)

    def _instance(self, instance_id: bytes, ctx_attrs: dict, now: int) -> ClientInstance:
        self._purge(now)
        inst = self.instances.get(instance_id)
        if inst is None:
            if len(self.instances) >= MAX_INSTANCES:  # LRU-like: the least recently used one goes
                oldest = min(self.instances.values(), key=lambda i: i.last_request_ms)
                self._forget(oldest.instance_id)
            attrs = dict(ctx_attrs, client_instance_id=uuid_str(instance_id))
            inst = self.instances[instance_id] = self._build(instance_id, attrs)
        elif inst.subscription_version < self.version:
            fresh = self._build(instance_id, inst.attrs)
            fresh.series, fresh.dropped_series, fresh.last_metrics_ms, fresh.resource = \
                inst.series, inst.dropped_series, inst.last_metrics_ms, inst.resource
            inst = self.instances[instance_id] = fresh
        inst.last_request_ms = now
        return inst

    def _purge(self, now: int) -> None:
        """Forget instances idle for max(60 s, 3 x interval) (Kafka's ExpirationTimerTask)."""
        if now < self._next_purge:
            return
        self._next_purge = now + 1000
        gone = [k for k, i in self.instances.items()
                if now - i.last_request_ms >= max(CACHE_EXPIRY_MS, 3 * i.interval_ms)]
        for k in gone:
            self._forget(k)

    def _forget(self, instance_id: bytes) -> None:
        inst = self.instances.pop(instance_id)
        self.series_total -= len(inst.series)

    def get_subscriptions(self, instance_id: bytes, ctx_attrs: dict):
        """GetTelemetrySubscriptions: ``(error, instance)``."""
        now = self.now_ms()
        if instance_id == ZERO_UUID:
            instance_id = self._new_id()
        inst = self._instance(instance_id, ctx_attrs, now)
        if not inst.may_get(now) and inst.last_error not in (Errors.UNKNOWN_SUBSCRIPTION_ID,
                                                             Errors.UNSUPPORTED_COMPRESSION_TYPE):
            return Errors.THROTTLING_QUOTA_EXCEEDED, inst
        inst.last_error = Errors.NONE
        return Errors.NONE, inst

    def push(self, instance_id: bytes, ctx_attrs: dict, subscription: int, terminating: bool,
             codec: int, data) -> int:
        """PushTelemetry: the error code (validatePushRequest's order), metrics stored when accepted."""
        if instance_id in _RESERVED:
            return Errors.INVALID_REQUEST
        now = self.now_ms()
        inst = self._instance(instance_id, ctx_attrs, now)
        try:
            error = self._check_push(inst, subscription, terminating, codec, data, now)
        finally:
            inst.terminating = terminating
        if error:
            inst.last_error = error
            return error
        if data is not None and len(data) > 0:
            try:
                raw = compression.decompress(codec, data) if codec else bytes(data)
                decoded = decode_metrics_data(raw)
            except Exception as e:  # OtlpError, or any codec's own error (Kafka catches Throwable here)
                log.debug("undecodable telemetry from %s: %s", uuid_str(instance_id), e)
                inst.last_error = Errors.INVALID_RECORD
                return Errors.INVALID_RECORD
            self._store(inst, decoded, now)
        inst.last_error = Errors.NONE
        return Errors.NONE

    def _check_push(self, inst: ClientInstance, subscription: int, terminating: bool, codec: int, data,
                    now: int) -> int:
        if inst.terminating:
            return Errors.INVALID_REQUEST
        if not inst.may_push(now) and not terminating:
            return Errors.THROTTLING_QUOTA_EXCEEDED
        if subscription != inst.subscription_id:
            return Errors.UNKNOWN_SUBSCRIPTION_ID
        if codec != 0 and codec not in self.accepted_compression:
            return Errors.UNSUPPORTED_COMPRESSION_TYPE
        if data is not None and len(data) > self.max_bytes:
            return Errors.TELEMETRY_TOO_LARGE
        return Errors.NONE

    def _store(self, inst: ClientInstance, decoded, now: int) -> None:
        inst.last_metrics_ms = now
        inst.resource = {str(k)[:100]: str(v)[:200] for k, v in list(decoded.resource.items())[:MAX_RESOURCE_ATTRS]}
        for m in decoded.metrics:
            counter = m.kind == "sum" and m.monotonic
            for p in m.points:
                attrs = ",".join(f"{k}={v}" for k, v in sorted(p.attributes.items()))[:MAX_LABEL]
                key = (m.name[:MAX_LABEL], attrs)
                s = inst.series.get(key)
                if s is None:
                    if len(inst.series) >= MAX_SERIES_PER_CLIENT or self.series_total >= MAX_SERIES_TOTAL:
                        inst.dropped_series += 1
                        continue
                    s = inst.series[key] = Series(key[0], attrs, counter)
                    self.series_total += 1
                if m.kind == "sum" and m.temporality != TEMPORALITY_CUMULATIVE:
                    s.value += p.value  # a delta
                else:
                    s.value = p.value

    def live(self, now: int) -> int:
        """How many instances have not expired (those past it go at the next telemetry request)."""
        return sum(1 for i in self.instances.values()
                   if now - i.last_request_ms < max(CACHE_EXPIRY_MS, 3 * i.interval_ms))

    def exposed(self, now: int) -> list[ClientInstance]:
        """The instances whose metrics /metrics shows: pushed within 3 x their push interval."""
        return [i for i in self.instances.values()
                if i.series and now - i.last_metrics_ms < 3 * i.interval_ms]


def request_attrs(ctx) -> dict[str, str | None]:
    """ClientMetricsInstanceMetadata from a request: what ``match`` patterns test."""
    conn = ctx.connection
    name, version = getattr(conn, "client_software", (None, None))
    peer = getattr(conn, "peer", "?")
    port = peer.rsplit(":", 1)[1] if ":" in peer else None
    host = ctx.host if ctx.host not in (None, "?") else None
    return {"client_id": ctx.client_id, "client_software_name": name, "client_software_version": version,
            "client_source_address": host, "client_source_port": port}
