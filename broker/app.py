"""The broker's life: start-up, periodic maintenance, shutdown.

Start-up order: lock and load the data directory (partition logs recover their
tails, producer state comes from snapshots), build the components
(``broker.components.build``: internal topics, the coordinators, which start
replaying them in the background, the share-partition manager), open the listener
and log ``accepting connections on HOST:PORT`` at once: Produce, Fetch, Metadata and
admin requests are served while the coordinators load, and their APIs answer
COORDINATOR_LOAD_IN_PROGRESS until ``coordinators loaded`` is logged, as Kafka.
Shutdown reverses it and marks the data directory cleanly closed.
"""
from __future__ import annotations

import asyncio
import logging
import os

from broker import config_keys, loop_watch, security, transactions, version
from broker.security import tokens as tokens_mod
from broker.components import Components, Node, build
from broker.config import BrokerConfig
from broker.configs import BrokerSettings
from broker.dispatch import load_handlers, load_request_path
from broker.group_configs import validate_broker_share_configs
from broker.log.config import ConfigError
from broker.log.errors import DataDirFormatError, DataDirLockedError
from broker.log.faults import FD_RESERVE, OPEN_FILES, SYNC_FDS
from broker.log.manager import LogManager
from broker.metrics import MetricsServer
from broker.server import Server
from broker.topics import open_file_limit

log = logging.getLogger("sharebroker")


class StartupError(Exception):
    """The broker cannot start (data directory locked, bad configuration, port in use)."""


def parse_listener(value: str) -> tuple[str, int]:
    addr = value.split(",")[0].split("://")[-1]
    host, _, port = addr.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


class Broker:
    def __init__(self, config: BrokerConfig | None = None):
        self.config = config or BrokerConfig()
        self.host, self.port = "", 0  # from ``listeners``, once the configuration is checked
        self.listeners: list = []  # broker.security.listeners.Listener, in ``listeners`` order
        self.components: Components | None = None
        self.server: Server | None = None
        self.metrics: MetricsServer | None = None
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._loaded_task: asyncio.Task | None = None  # logs "coordinators loaded"; cancelled by stop()
        self._loop_watch: loop_watch.LoopWatch | None = None  # sharebroker.loop.stall.log.ms; stopped by stop()

    async def start(self) -> None:
        config = self.config
        check_config(config)  # before the data directory is touched
        try:  # Kafka's listener keys and the TLS key stores, before the data directory is touched
            self.listeners = listeners = security.configure_listeners(config)
        except ConfigError as e:
            raise StartupError(f"invalid configuration: {e}") from None
        primary = listeners[0]
        self.host, self.port = primary.host, primary.port
        _raise_open_file_limit(config)
        load_handlers()
        self._loop_watch = loop_watch.start(config)
        node_id = config.get_int("node.id", 1)
        data_dir = config.get("log.dirs", "./data").split(",")[0]
        try:
            settings = BrokerSettings(config, node_id, os.path.join(data_dir, "meta"))
            logs = LogManager(data_dir, default_configs=settings.topic_defaults(),
                              producer_id_expiration_ms=config.get_int("producer.id.expiration.ms", 86400000),
                              producer_id_expiration_check_interval_ms=config.get_int(
                                  "producer.id.expiration.check.interval.ms", 600000), node_id=node_id,
                              durable=config.get("sharebroker.durability", "fsync") == "fsync",
                              syncfs=config.get_bool("sharebroker.log.syncfs.enable", True))
        except (DataDirLockedError, DataDirFormatError) as e:
            raise StartupError(str(e)) from None
        except ValueError as e:
            raise StartupError(f"bad configuration: {e}") from None
        except OSError as e:
            raise StartupError(f"cannot use the data directory {data_dir} (log.dirs): {e}") from None
        settings.background = logs.start_background()  # fsyncs and file removal off the loop from here on
        settings.on_topic_defaults = logs.set_default_configs
        node = Node(node_id, logs.cluster_id, primary.advertised_host, primary.advertised_port)
        try:
            self.components = c = await build(config, node, logs.data_dir, logs, settings)
            security.attach_authenticators(config, listeners, c.security.scram, c.security.tokens)
            await security.load_oauth_keys(listeners)
        except ValueError as e:  # ConfigError: a setting outside its bounds
            if self.components is not None:
                await self.components.close()
            else:
                logs.close()
            raise StartupError(f"bad configuration: {e}") from None
        load_request_path()  # nothing imported on first use: at the open-file limit an import fails
        self.server = Server(c, listeners)
        try:
            await self.server.start()
        except OSError as e:
            await c.close()
            raise StartupError(f"cannot listen on {e.strerror or e}") from None
        c.listening.set()  # the coordinators start loading now
        self.port = self.server.port
        node.port = primary.advertised_port
        for lst in listeners:
            log.info("listener %s (%s) on %s:%d, advertised as %s:%d", lst.name, lst.protocol, lst.host, lst.port,
                     lst.advertised_host, lst.advertised_port)
        if config.get("sharebroker.metrics.listener"):
            mhost, mport = parse_listener(config.get("sharebroker.metrics.listener"))
            self.metrics = MetricsServer(c, self.server, mhost, mport)
            try:
                await self.metrics.start()
            except OSError as e:
                await self.server.close()
                await c.close()
                raise StartupError(f"cannot listen for metrics on {mhost}:{mport}: {e}") from None
        self._every("log.retention.check.interval.ms", 300000, self._run_maintenance)
        self._every("producer.id.expiration.check.interval.ms", 600000, c.logs.remove_expired_producers)
        self._every("transaction.abort.timed.out.transaction.cleanup.interval.ms", 10000,
                    transactions.abort_timed_out_job(c.transactions))
        self._every("transaction.remove.expired.transaction.cleanup.interval.ms",
                    transactions.DEFAULT_REMOVE_EXPIRED_INTERVAL_MS, transactions.remove_expired_job(c.transactions))
        if c.security.tokens.enabled:  # DelegationTokenControlManager.sweepExpiredDelegationTokens
            self._every("delegation.token.expiry.check.interval.ms", tokens_mod.CHECK_INTERVAL_DEFAULT_MS,
                        c.security.tokens.sweep)
        log.info("sharebroker %s (node %d, cluster %s) accepting connections on %s:%d",
                 version(), node_id, node.cluster_id, self.host, self.port)
        self._loaded_task = asyncio.get_running_loop().create_task(self._log_loaded(c))

    @staticmethod
    async def _log_loaded(c: Components) -> None:
        t0 = asyncio.get_running_loop().time()
        await c.wait_loaded()
        log.info("coordinators loaded (%.0f ms after accepting connections)",
                 (asyncio.get_running_loop().time() - t0) * 1000)

    def _every(self, interval_key: str, default_ms: int, job) -> None:
        """Run ``job`` every ``interval_key`` milliseconds on the loop; a failure is logged, never raised."""
        interval = self.config.get_int(interval_key, default_ms) / 1000.0

        def run() -> None:
            try:
                job()
            except Exception:
                log.exception("periodic %s job failed", interval_key)
            self._timers[interval_key] = loop.call_later(interval, run)

        loop = asyncio.get_running_loop()
        self._timers[interval_key] = loop.call_later(interval, run)

    def _run_maintenance(self) -> None:
        """Retention, timed flushes, rolled-segment fsyncs; share partitions follow a moved log start."""
        c = self.components
        for topic, partition, _start in c.logs.maintenance() or ():
            c.topics.appended(topic, partition)

    async def stop(self) -> None:
        for handle in self._timers.values():
            handle.cancel()
        if self._loaded_task is not None:
            self._loaded_task.cancel()
        if self.metrics is not None:
            await self.metrics.close()
        if self.server is not None:
            await self.server.close()
        if self.components is not None:
            await self.components.close()
        if self._loop_watch is not None:
            self._loop_watch.stop()


def check_config(config: BrokerConfig) -> None:
    """Refuse invalid settings (the key named, Kafka's words); warn about unknown ones."""
    try:
        unknown = config_keys.validate(config)
        validate_broker_share_configs(config)
        security.check_authorizer(config)
        security.scram.parse_bootstrap(config.get("sharebroker.scram.users"))
    except ConfigError as e:
        raise StartupError(f"invalid configuration: {e}") from None
    for key in unknown:
        log.warning("The configuration '%s' was supplied but isn't a known config.", key)


def _raise_open_file_limit(config: BrokerConfig) -> None:
    """Use the hard open-file limit, as Kafka's docs advise; bound the segment files open at once
    (``sharebroker.log.max.open.files``, default half the limit: the rest is for connections and
    the other files) and say both."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass
    limit = open_file_limit()
    bound = config.get_int("sharebroker.log.max.open.files", max(16, (limit or 2048) // 2))
    OPEN_FILES.enable(bound)
    if limit is not None:
        log.info("open-file limit %d: at most %d segment files open at once (sharebroker.log.max.open.files); "
                 "a partition keeps its files closed while unused", limit, bound)
    FD_RESERVE.enable()  # held for segment rolls and undos at the limit (broker/log/faults.py)
    SYNC_FDS.enable()  # lent to fsyncs at the limit
