"""The group coordinator's side of the share-state persister (the share coordinator, KIP-932).

The requests the group coordinator sends it, each built in one place (Kafka's
``InitializeShareGroupStateParameters`` / ``DeleteShareGroupStateParameters`` /
``ReadShareGroupStateSummaryParameters``), and the KIP-1226 lag computed from a
partition's summary.  Share groups (:mod:`.share`) initialize partitions before they are
assigned; the share-group offset admin (:mod:`.share_offsets`) reads summaries, resets and
deletes state; deleting a share group (:mod:`.coordinator`) deletes its state.
"""
from __future__ import annotations

from typing import Iterable, Mapping

from protocol.lazy_messages import (DeleteShareGroupStateRequest as DeleteReq,
                                    InitializeShareGroupStateRequest as InitReq,
                                    ReadShareGroupStateSummaryRequest as SummaryReq)

UNINITIALIZED = -1  # start offset / DeliveryCompleteCount / lag of a share partition with no known state


def share_partition_lag(log_end_offset: int, start_offset: int, delivery_complete_count: int) -> int:
    """KIP-1226: records not yet in a terminal state.  ``log_end_offset`` is the next offset to be
    written (the KIP's "highest offset + 1"); -1 when the state is not initialized or the count
    of processed in-flight records is unknown."""
    if start_offset == UNINITIALIZED or delivery_complete_count == UNINITIALIZED:
        return UNINITIALIZED
    return log_end_offset - start_offset - delivery_complete_count


def initialize_request(group_id: str, start_offsets: Mapping[bytes, Mapping[int, int]], state_epoch: int) -> InitReq:
    """InitializeShareGroupState for {topic id: {partition: start offset}} at ``state_epoch``
    (start offset -1: ``share.auto.offset.reset`` chooses it when a leader first loads the partition)."""
    return InitReq(group_id=group_id, topics=[
        InitReq.InitializeStateData(topic_id=tid, partitions=[
            InitReq.PartitionData(partition=p, state_epoch=state_epoch, start_offset=off)
            for p, off in sorted(parts.items())])
        for tid, parts in start_offsets.items()])


def delete_request(group_id: str, partitions: Mapping[bytes, Iterable[int]]) -> DeleteReq:
    """DeleteShareGroupState for {topic id: partitions}."""
    return DeleteReq(group_id=group_id, topics=[
        DeleteReq.DeleteStateData(topic_id=tid, partitions=[DeleteReq.PartitionData(partition=p) for p in sorted(ps)])
        for tid, ps in partitions.items()])


def summary_request(group_id: str, partitions: Mapping[bytes, Iterable[int]]) -> SummaryReq:
    """ReadShareGroupStateSummary for {topic id: partitions}."""
    return SummaryReq(group_id=group_id, topics=[
        SummaryReq.ReadStateSummaryData(topic_id=tid, partitions=[
            SummaryReq.PartitionData(partition=p, leader_epoch=0) for p in ps])
        for tid, ps in partitions.items()])
