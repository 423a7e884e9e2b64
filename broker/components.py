"""The broker's parts, declared in one typed place, and the start-up that builds them.

:class:`Components` is what handlers see as ``ctx.components``: one attribute per
part, each the single owner of its state.

| attribute        | type                                   | owns                                             |
|------------------|----------------------------------------|--------------------------------------------------|
| ``config``       | ``broker.config.BrokerConfig``         | static settings (Kafka names)                    |
| ``node``         | :class:`Node`                          | node id, cluster id, advertised address          |
| ``logs``         | ``broker.log.manager.LogManager``      | topics' partition logs on disk                   |
| ``topics``       | ``broker.topics.Topics``               | topic create/delete rules, append/delete events  |
| ``watchers``     | ``broker.delayed.Watchers``            | long polls waiting on keys                       |
| ``fetch_sessions`` | ``broker.fetch_sessions.FetchSessionCache`` | KIP-227 fetch sessions                    |
| ``producer_ids`` | ``broker.producer_ids.ProducerIdManager`` | producer id blocks                            |
| ``settings``     | ``broker.configs.BrokerSettings``      | dynamic broker defaults                          |
| ``configs``      | ``broker.configs.ConfigResources``     | TOPIC / BROKER / GROUP / CLIENT_METRICS config resources |
| ``group_configs``| ``broker.group_configs.GroupConfigManager`` | per-group overrides                         |
| ``share_state``  | ``coordinator.share_state.ShareCoordinator`` | durable share state (``__share_group_state``)    |
| ``groups``       | ``coordinator.group.GroupCoordinator`` | every group (classic, consumer, share), offsets  |
| ``shares``       | ``broker.share.manager.SharePartitionManager`` | share partitions (in-flight records), share sessions |
| ``authenticator``, ``authorizer``, ``request_metrics`` | ``broker.pipeline`` | the request pipeline's stages |
| ``security``     | ``broker.security.Security``           | SCRAM credentials, ACLs (the authorizer's store) |
| ``share_metrics`` | ``broker.metrics.ShareMetrics`` | share acknowledgement, load and state-write counters |
| ``transactions`` | ``coordinator.transaction.TransactionCoordinator`` | transactional ids (``__transaction_state``) |
| ``quotas``       | ``broker.quotas.Quotas``               | client quotas (``meta/client-quotas.json``) and their sensors |
| ``cleaner``      | ``broker.log.cleaner.LogCleaner``      | compaction: cleaner checkpoints, its worker processes |
| ``client_metrics`` | ``broker.client_metrics.ClientMetricsManager`` | KIP-714 subscriptions, client instances, pushed metrics |
| ``listening``    | ``asyncio.Event``                      | set once the listener is open: the coordinators' loads start |

Each part is constructed with the narrow collaborators it uses (never the broker
or this object), so it can be built alone in a unit test.  :func:`build` creates
them in dependency order and returns at once: once the app sets ``listening`` (the
listener is open) the coordinators replay their internal topics in the background
(COORDINATOR_LOAD_IN_PROGRESS until they are done, as Kafka; :meth:`Components.wait_loaded`
waits for them); ``close()`` shuts them down in reverse
order.  In process, share-partition leaders and the group coordinator reach the share
coordinator through its waiting persister (a call made while it loads waits for it).
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from broker.client_metrics import ClientMetricsManager
from broker.cluster_view import ClusterView
from broker.config import BrokerConfig
from broker.configs import BrokerConfigs, BrokerSettings, ConfigResources, TopicConfigs
from broker.delayed import Watchers
from broker.fetch_sessions import FetchSessionCache
from broker.group_configs import GroupConfigManager
from broker.internal_topics import PartitionRecordLog
from broker.log.cleaner import LogCleaner
from broker.log.manager import LogManager
from broker.metrics import MeteredPersister, ShareMetrics
from broker.pipeline import AllowAll, Authenticator, Authorizer, NoAuthentication, RequestMetrics
from broker.producer_ids import ProducerIdManager
from broker.quotas import Quotas
from broker.quotas import build as build_quotas
from broker.share.manager import SharePartitionManager
from broker.topics import CONSUMER_OFFSETS, SHARE_GROUP_STATE, Topics
from coordinator.group import GroupCoordinator
from coordinator.runtime import is_storage_error
from coordinator.share_state import ShareCoordinator

log = logging.getLogger("sharebroker")


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(eq=False)
class Node:
    """This broker as clients see it (Metadata, FindCoordinator, DescribeCluster)."""

    node_id: int
    cluster_id: str
    host: str  # advertised
    port: int  # advertised; a port-0 listener learns it when it binds


@dataclass(eq=False)
class Components:
    config: BrokerConfig
    node: Node
    logs: LogManager
    topics: Topics
    watchers: Watchers
    fetch_sessions: FetchSessionCache
    producer_ids: ProducerIdManager
    settings: BrokerSettings
    configs: ConfigResources
    group_configs: GroupConfigManager
    share_state: ShareCoordinator
    groups: GroupCoordinator
    shares: SharePartitionManager
    authenticator: Authenticator = field(default_factory=NoAuthentication)
    authorizer: Authorizer = field(default_factory=AllowAll)
    security: object = None  # broker.security.Security: SCRAM store, ACL store
    request_metrics: RequestMetrics = field(default_factory=RequestMetrics)
    share_metrics: ShareMetrics = field(default_factory=ShareMetrics)
    transactions: object = None  # coordinator.transaction.TransactionCoordinator (broker.transactions)
    quotas: Quotas = field(default_factory=lambda: build_quotas(BrokerConfig(), None))
    cleaner: object = None  # broker.log.cleaner.LogCleaner
    client_metrics: object = None  # broker.client_metrics.ClientMetricsManager (KIP-714)
    # set by the app once the listener is open: the coordinators' loads start then (accepting comes first)
    listening: asyncio.Event = field(default_factory=asyncio.Event)
    now_ms: Callable[[], int] = now_ms
    # written by close(): None, or one line saying why the shutdown was not clean (the exit code is 1 then);
    # a class attribute, not a dataclass field
    shutdown_problem = None

    async def wait_loaded(self) -> None:
        """Return once the coordinators have replayed their internal topics."""
        for part in (self.share_state, self.groups, self.transactions):
            if part is not None:
                await part.wait_loaded()

    async def close(self) -> None:
        """Shut the parts down in the reverse order of :func:`build`; the logs last."""
        steps: list[tuple[str, Callable[[], object]]] = [
            ("transactions", self.transactions.close if self.transactions is not None else lambda: None),
            ("shares", self.shares.close), ("groups", self.groups.close), ("share state", self.share_state.shutdown)]
        for name, fn in steps:
            try:
                r = fn()
                if isinstance(r, Awaitable):
                    await r
            except Exception as e:
                if is_storage_error(e):  # reported once where it happened (broker/log/faults.py)
                    log.warning("closing %s failed: %s", name, e)
                else:
                    log.exception("closing %s failed", name)
        if self.cleaner is not None:
            self.cleaner.close()  # stops its workers: a pass in the middle is redone after the restart
        self.shutdown_problem = self.logs.close()  # drains the file worker first


def load_hold(config: BrokerConfig, listening: asyncio.Event) -> Callable[[], Awaitable[None]]:
    """What a coordinator's load waits for: the listener open (accepting comes first), then the test-only
    ``sharebroker.coordinator.test.load.hold.file`` gone (a test sees COORDINATOR_LOAD_IN_PROGRESS for as
    long as it keeps that file)."""
    path = config.get("sharebroker.coordinator.test.load.hold.file")

    async def hold() -> None:
        await listening.wait()
        while path and os.path.exists(path):
            await asyncio.sleep(0.02)
    return hold


async def build(config: BrokerConfig, node: Node, data_dir: str, logs: LogManager,
                settings: BrokerSettings) -> Components:
    """Build every part on an opened data directory; the coordinators load in the background."""
    loop = asyncio.get_running_loop()
    listening = asyncio.Event()  # set by the app once the listener is open
    hold = load_hold(config, listening)
    meta = os.path.join(data_dir, "meta")
    watchers = Watchers()
    topics = Topics(logs, watchers)
    topics.ensure_internal(config)
    group_configs = GroupConfigManager(config, meta, background=logs.background)
    client_metrics = ClientMetricsManager(config, meta, now_ms, background=logs.background)
    configs = ConfigResources(TopicConfigs(logs, settings), BrokerConfigs(settings), group_configs, client_metrics)

    def partition_exists(topic_id: bytes, partition: int) -> bool:
        info = logs.topic_by_id(topic_id)
        return info is not None and 0 <= partition < info.partitions

    share_state = ShareCoordinator(PartitionRecordLog(logs.get_log(SHARE_GROUP_STATE, 0)), config, now_ms,
                                   partition_exists=partition_exists)
    share_state.start_loading(hold)
    share_state.start_periodic_jobs()
    persister = share_state.persister()  # in process: waits while the share coordinator loads
    topics.on_delete(lambda name, topic_id: loop.create_task(share_state.on_topics_deleted([topic_id])))

    offsets_log = PartitionRecordLog(logs.get_log(CONSUMER_OFFSETS, 0))
    groups = GroupCoordinator(offsets_log, ClusterView(logs), config, loop, now_ms=now_ms,
                              group_configs=group_configs, share_state=persister)
    groups.start_loading(hold)  # __consumer_offsets: classic, consumer and share groups, offsets
    from broker import security as security_

    security = security_.build(config, meta, logs.background)  # SCRAM store, authorizer and its ACLs

    share_metrics = ShareMetrics()
    shares = SharePartitionManager(config, logs=logs, watchers=watchers, topics=topics,
                                   persister=MeteredPersister(persister, share_metrics),
                                   group_configs=group_configs, scheduler=loop, now_ms=now_ms,
                                   metrics=share_metrics)
    shares.assigned_members = groups.share_members_assigned
    group_configs.add_listener(shares.group_config_changed)
    topics.on_delete(shares.topic_deleted)

    async def share_group_deleted(group_id: str) -> None:
        """After DeleteGroups removed a share group's records and durable state: its live partitions, configs."""
        await shares.drop_group(group_id)
        group_configs.delete_group(group_id)

    groups.on_group_deleted(share_group_deleted)
    # AlterShareGroupOffsets / DeleteShareGroupOffsets (empty groups only): live share partitions reload.
    groups.on_share_offsets_changed(shares.drop_group)
    group_configs.set_group_lister(lambda: sorted(groups.groups))
    from broker import transactions as transactions_

    producer_ids = ProducerIdManager(meta, background=logs.background)
    transactions = transactions_.build(config, logs, topics, groups, producer_ids, now_ms, hold)
    cleaner = LogCleaner(logs, config)
    topics.on_delete(lambda name, _topic_id: cleaner.topic_deleted(name))
    cleaner.start(loop)
    return Components(cleaner=cleaner, client_metrics=client_metrics, config=config, node=node, logs=logs, topics=topics, watchers=watchers,
                      fetch_sessions=FetchSessionCache(config.get_int("max.incremental.fetch.session.cache.slots",
                                                                      1000)),
                      producer_ids=producer_ids, settings=settings, configs=configs, transactions=transactions,
                      group_configs=group_configs, share_state=share_state, groups=groups, shares=shares,
                      share_metrics=share_metrics, security=security, authorizer=security.authorizer,
                      quotas=build_quotas(config, meta, logs.background), listening=listening)
