"""The broker: owns the components and wires them together on one event loop.

Start-up order: lock and load the data directory (partition logs recover their
tails), create the internal topics, replay the coordinators from them, then open
the listener and log ``accepting connections on HOST:PORT``.  Shutdown reverses
it and marks the data directory cleanly closed.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import time

from broker.config import BrokerConfig
from broker.delayed import Watchers
from broker.dispatch import load_handlers
from broker.fetch_sessions import FetchSessionCache
from broker.log.config import TOPIC_CONFIGS
from broker.log.errors import DataDirLockedError
from broker.log.manager import LogManager
from broker.producer_ids import ProducerIdManager
from broker.server import Server

log = logging.getLogger("sharebroker")

CONSUMER_OFFSETS = "__consumer_offsets"
SHARE_GROUP_STATE = "__share_group_state"
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS, SHARE_GROUP_STATE})
_RETENTION_UNITS = (("log.retention.ms", 1), ("log.retention.minutes", 60_000), ("log.retention.hours", 3_600_000))
_ROLL_UNITS = (("log.roll.ms", 1), ("log.roll.hours", 3_600_000))


class StartupError(Exception):
    """The broker cannot start (data directory locked, bad configuration, port in use)."""


def topic_defaults(config: BrokerConfig) -> dict[str, str]:
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


def parse_listener(value: str) -> tuple[str, int]:
    addr = value.split(",")[0].split("://")[-1]
    host, _, port = addr.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


class Broker:
    def __init__(self, config: BrokerConfig | None = None):
        self.config = config or BrokerConfig()
        self.node_id = self.config.get_int("node.id", 1)
        self.host, self.port = parse_listener(self.config.get("listeners"))
        self.advertised_host = self.host if self.host not in ("0.0.0.0", "") else "127.0.0.1"
        self.advertised_port = self.port
        self._fixed_advertised = self.config.has("advertised.listeners")
        if self._fixed_advertised:
            self.advertised_host, self.advertised_port = parse_listener(self.config.get("advertised.listeners"))
        self.watchers = Watchers()
        self.fetch_sessions = FetchSessionCache(self.config.get_int("max.incremental.fetch.session.cache.slots", 1000))
        self.logs: LogManager | None = None
        self.server: Server | None = None
        self.cluster_id = ""
        self.loop: asyncio.AbstractEventLoop | None = None
        self._maintenance: asyncio.TimerHandle | None = None
        self._append_listeners: list = []
        self._topic_delete_listeners: list = []
        self.components: list = []  # objects with async close(), closed in reverse order
        self.dynamic_broker_configs: dict[str, str] = {}

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def now_ms() -> int:
        return int(time.time() * 1000)

    @staticmethod
    def is_internal(name: str) -> bool:
        return name in INTERNAL_TOPICS

    def topic_default_configs(self) -> dict[str, str]:
        """Topic-config defaults from broker settings: dynamic ones over static ones."""
        out = topic_defaults(self.config)
        by_syn = {c.synonym: k for k, c in TOPIC_CONFIGS.items() if c.synonym}
        for key, value in self.dynamic_broker_configs.items():
            if key in by_syn:
                out[by_syn[key]] = value
        return out

    def broker_config_source(self, key: str) -> int:
        from broker.configs import DYNAMIC_DEFAULT_BROKER, STATIC_BROKER

        return DYNAMIC_DEFAULT_BROKER if key in self.dynamic_broker_configs else STATIC_BROKER

    def set_dynamic_broker_configs(self, values: dict[str, str]) -> None:
        from broker.log.manager import atomic_write

        atomic_write(os.path.join(self.logs.data_dir, "meta", "broker-configs.json"),
                     json.dumps(values, sort_keys=True).encode())
        self.dynamic_broker_configs = dict(values)
        self.logs.set_default_configs(self.topic_default_configs())

    def topic_collision(self, name: str) -> str | None:
        """An existing topic that differs from ``name`` only by '.' versus '_' (Kafka refuses those)."""
        norm = name.replace(".", "_")
        for other in self.logs.topics:
            if other != name and other.replace(".", "_") == norm:
                return other
        return None

    def create_topic(self, name: str, partitions: int, configs: dict):
        other = self.topic_collision(name)
        if other is not None:
            from broker.log.errors import LogError

            raise LogError(17, f"Topic '{name}' collides with existing topic: {other}")
        return self.logs.create_topic(name, partitions, configs)

    def delete_topic(self, name: str) -> None:
        info = self.logs.topic(name)
        self.logs.delete_topic(name)
        for fn in self._topic_delete_listeners:
            fn(name, info.topic_id.bytes)
        for p in range(info.partitions):
            self.watchers.notify(("log", name, p))

    def add_topic_delete_listener(self, fn) -> None:
        """``fn(name, topic_id)`` runs after a topic is deleted."""
        self._topic_delete_listeners.append(fn)

    def add_append_listener(self, fn) -> None:
        """``fn(topic, partition)`` runs after every append (share partitions use it)."""
        self._append_listeners.append(fn)

    def on_append(self, topic: str, partition: int) -> None:
        self.watchers.notify(("log", topic, partition))
        for fn in self._append_listeners:
            fn(topic, partition)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        _raise_open_file_limit()
        load_handlers()
        data_dir = self.config.get("log.dirs", "./data").split(",")[0]
        from broker.configs import load_dynamic_broker_configs

        try:
            self.dynamic_broker_configs = load_dynamic_broker_configs(data_dir)
            self.logs = LogManager(data_dir, default_configs=self.topic_default_configs())
        except DataDirLockedError as e:
            raise StartupError(str(e)) from None
        except ValueError as e:
            raise StartupError(f"bad configuration: {e}") from None
        self.cluster_id = self.logs.cluster_id
        self.producer_ids = ProducerIdManager(os.path.join(self.logs.data_dir, "meta"))
        for name in sorted(INTERNAL_TOPICS):
            if self.logs.topic(name) is None:
                self.logs.create_topic(name, 1, {"cleanup.policy": "delete", "retention.ms": "-1"})
        try:
            await self._start_components()
        except ValueError as e:  # ConfigError: a setting outside its bounds
            self.logs.close()
            raise StartupError(f"bad configuration: {e}") from None
        self.server = Server(self, self.host, self.port)
        try:
            await self.server.start()
        except OSError as e:
            self.logs.close()
            raise StartupError(f"cannot listen on {self.host}:{self.port}: {e}") from None
        self.port = self.server.port
        if not self._fixed_advertised:
            self.advertised_port = self.port
        self._schedule_maintenance()
        log.info("sharebroker %s (node %d, cluster %s) accepting connections on %s:%d",
                 _version(), self.node_id, self.cluster_id, self.host, self.port)

    async def _start_components(self) -> None:
        """Coordinators and the share-partition manager, when present."""
        from broker import wiring

        await wiring.start(self)

    def _schedule_maintenance(self) -> None:
        interval = self.config.get_int("log.retention.check.interval.ms", 300000) / 1000.0
        self._maintenance = self.loop.call_later(interval, self._run_maintenance)

    def _run_maintenance(self) -> None:
        try:
            moved = self.logs.maintenance()
            for topic, partition, _start in moved or ():
                self.on_append(topic, partition)  # share partitions follow the log start offset
        except Exception:
            log.exception("log maintenance failed")
        self._schedule_maintenance()

    async def stop(self) -> None:
        if self._maintenance is not None:
            self._maintenance.cancel()
        if self.server is not None:
            await self.server.close()
        for comp in reversed(self.components):
            try:
                await comp.close()
            except Exception:
                log.exception("closing %r failed", comp)
        if self.logs is not None:
            self.logs.close()


def _raise_open_file_limit() -> None:
    """Each partition keeps a few files open: use the hard limit, as Kafka's docs advise."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("sharebroker")
    except Exception:
        return "dev"
