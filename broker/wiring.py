"""Builds the coordinators and the share-partition manager for a starting broker.

Each component gets plain callables and small adapters instead of the broker
itself, so it can be unit-tested alone.  Order matters: state is replayed from
the internal topics before the listener opens.
"""
from __future__ import annotations

import os

from broker.internal_topics import PartitionRecordLog
from coordinator.group_configs import GroupConfigManager, validate_broker_share_configs


class _Closer:
    def __init__(self, fn):
        self._fn = fn

    async def close(self) -> None:
        r = self._fn()
        if hasattr(r, "__await__"):
            await r


async def start(b) -> None:
    from broker.app import SHARE_GROUP_STATE
    from broker.configs import register_resource
    from coordinator.share import ShareCoordinator

    validate_broker_share_configs(b.config)
    b.group_configs = GroupConfigManager(b.config, os.path.join(b.logs.data_dir, "meta"))
    register_resource(b.group_configs)

    def partition_exists(topic_id: bytes, partition: int) -> bool:
        info = b.logs.topic_by_id(topic_id)
        return info is not None and 0 <= partition < info.partitions

    state_log = PartitionRecordLog(b.logs.get_log(SHARE_GROUP_STATE, 0))
    b.share_coordinator = ShareCoordinator(state_log, b.config, b.now_ms, partition_exists=partition_exists)
    await b.share_coordinator.load()
    b.share_coordinator.start_periodic_jobs()
    b.components.append(_Closer(b.share_coordinator.shutdown))
    b.add_topic_delete_listener(
        lambda name, topic_id: b.loop.create_task(b.share_coordinator.on_topics_deleted([topic_id])))
    await start_groups(b)
    start_shares(b)


async def start_groups(b) -> None:
    """Group coordinators over __consumer_offsets: share groups (and consumer groups once wired)."""
    from broker.app import CONSUMER_OFFSETS
    from broker.cluster_view import ClusterView
    from coordinator.runtime import decode_record
    from coordinator.share_groups import ShareGroupCoordinator
    from protocol.coordinator_records.registry import GROUP_COORDINATOR_RECORDS

    b.offsets_log = PartitionRecordLog(b.logs.get_log(CONSUMER_OFFSETS, 0))
    b.cluster_view = ClusterView(b.logs)
    b.share_groups = ShareGroupCoordinator(b.offsets_log, b.cluster_view, b.group_configs, b.share_coordinator,
                                           b.loop, b.config, foreign_group_type=lambda gid: None)
    for _offset, key, value in b.offsets_log.replay():
        rec = decode_record(GROUP_COORDINATOR_RECORDS, key, value)
        if rec is not None:
            b.share_groups.replay(rec)
    b.share_groups.after_load()
    b.components.append(_Closer(b.share_groups.close))
    from coordinator.group import GroupCoordinator

    b.groups = GroupCoordinator(b.offsets_log, b.cluster_view, b.config, b.loop, now_ms=b.now_ms,
                                group_configs=b.group_configs)
    await b.groups.load()
    b.groups.attach_foreign_groups(lambda: b.share_groups.groups, lambda gid: delete_share_group(b, gid))
    b.share_groups.foreign_group_type = b.groups.group_type
    b.components.append(b.groups)
    b.group_configs.set_group_lister(lambda: sorted(set(b.share_groups.groups) | set(b.groups.groups)))


async def delete_share_group(b, group_id: str) -> None:
    """DeleteGroups on a share group: its records, its durable share state, its live partitions, its configs."""
    from protocol.messages.delete_share_group_state import DeleteShareGroupStateRequest as D

    initialized = await b.share_groups.delete_group(group_id)
    if initialized:
        await b.share_coordinator.delete_state(D(group_id=group_id, topics=[
            D.DeleteStateData(topic_id=tid, partitions=[D.PartitionData(partition=p) for p in sorted(ps)])
            for tid, (_name, ps) in initialized.items()]))
    await b.shares.drop_group(group_id)
    b.group_configs.delete_group(group_id)


def start_shares(b) -> None:
    from broker.share_manager import ShareManager

    b.shares = ShareManager(b)
    b.components.append(b.shares)
