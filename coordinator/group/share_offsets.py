"""Share-group offset admin: DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets.

As Kafka 4.4's ``GroupCoordinatorService`` / ``GroupCoordinatorShard`` /
``GroupMetadataManager`` do them, over the share coordinator (the persister):

* **Describe** (v0-1): per share partition the start offset (SPSO) and leader epoch from
  ReadShareGroupStateSummary; on v1 the KIP-1226 lag ``LEO - SPSO - DeliveryCompleteCount``
  (the partition end offset is the next offset to be written, so no ``+ 1``), -1 when it
  cannot be known (state not initialized: SPSO -1; DeliveryCompleteCount -1; the summary
  failed).  ``Topics`` null means every initialized partition of the group
  (``describeShareGroupAllOffsets``; an unknown group, or one of another type, answers
  GROUP_ID_NOT_FOUND); a named topic that does not exist answers start offset -1 and the zero
  topic id, a partition whose summary fails start offset -1 and leader epoch 0, without error
  (Kafka treats both as absence of data).
* **Alter** (v0): the group must be a share group (GROUP_ID_NOT_FOUND otherwise; an unknown
  group is created, as Kafka's ``getOrMaybeCreateShareGroup(groupId, true)``) and empty
  (NON_EMPTY_GROUP).  Unknown topics and partitions answer UNKNOWN_TOPIC_OR_PARTITION per
  partition.  The group epoch is bumped (a ShareGroupMetadata record, KAFKA-20910) and the
  partitions are initialized at the new epoch with the requested start offsets
  (InitializeShareGroupState: a new state epoch, so a share-partition leader holding the old
  state is fenced); partitions the persister initialized are recorded in
  ShareGroupStatePartitionMetadata, the others answer the persister's error.
* **Delete** (v0): the group must exist as a share group (GROUP_ID_NOT_FOUND) and be empty
  (NON_EMPTY_GROUP, both top level); a topic that does not exist, or whose share partitions
  are not initialized for the group, answers UNKNOWN_TOPIC_OR_PARTITION ("There is no offset
  information to delete." for the latter).  The others' share state is deleted
  (DeleteShareGroupState) and then removed from ShareGroupStatePartitionMetadata; the next
  member to subscribe initializes them again, from ``share.auto.offset.reset``.

Alter and Delete are two named writes around the persister call, as Kafka's
``GroupCoordinatorShard``: the first (``_initiate_alter`` / ``_initiate_delete``) checks the
group on committed state, in the coordinator's write order, and returns a :class:`WriteResult`
(the response so far and the persister request); the second records what the persister did.
After Alter or Delete changed durable state, the ``on_share_offsets_changed`` listeners run
(the broker drops the group's live share partitions, which reload from the new state).

Deviation: Kafka's first write also records the partitions as "initializing" / "deleting" so
a crash between the two steps is retried; here the metadata record is written once the
persister answered (a crash in between leaves state the next heartbeat or request repairs:
initialized state that is not recorded is initialized again, deleted state that is still
recorded reads as uninitialized).
"""
from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable, NamedTuple

from protocol.errors import Errors, KafkaError
from protocol.lazy_messages import (AlterShareGroupOffsetsResponse as AlterResp,
                                    DeleteShareGroupOffsetsResponse as DeleteResp,
                                    DescribeShareGroupOffsetsResponse as DescResp)

from . import records as R
from .classic import append_error_code
from .modern import metadata_hash
from .persister import (  # noqa: F401  (share_partition_lag: the broker's metrics import it from here)
    UNINITIALIZED, delete_request, initialize_request, share_partition_lag, summary_request,
)
from .share import ShareGroup, group_not_found

log = logging.getLogger(__name__)

ZERO_UUID = bytes(16)
NO_OFFSET_INFO = "There is no offset information to delete."
UNKNOWN_TOPIC_MESSAGE = "This server does not host this topic-partition."


class WriteResult(NamedTuple):
    """What the write before a persister call decided (Kafka's GroupCoordinatorShard result holders):
    the response so far, the persister request to send next (None: answer ``response`` as it is)
    and the names of the request's topic ids (the answer names them even if a topic goes meanwhile)."""
    response: Any
    request: Any = None
    names: dict[bytes, str] = {}


def not_empty(group_id: str) -> KafkaError:
    return KafkaError(Errors.NON_EMPTY_GROUP, f"Share group {group_id} is not empty.")


class ShareOffsetsManager:
    """The three share-group offset admin APIs over the coordinator's groups and its persister."""

    def __init__(self, coordinator, share_state):
        """``coordinator``: the GroupCoordinator (its groups, cluster, runtime and share manager)."""
        self.c = coordinator
        self.share_state = share_state
        self._changed: list[Callable[[str], object]] = []

    def on_changed(self, fn: Callable[[str], object]) -> None:
        """``fn(group_id)`` (may be async) runs after Alter/Delete changed the group's share state."""
        self._changed.append(fn)

    async def _notify(self, group_id: str) -> None:
        for fn in self._changed:
            try:
                r = fn(group_id)
                if isinstance(r, Awaitable):
                    await r
            except Exception:  # noqa: BLE001 - a listener must not fail the request
                log.exception("share offsets listener failed for group %s", group_id)

    # ------------------------------------------------------------ DescribeShareGroupOffsets
    async def describe(self, req, version: int) -> DescResp:
        return DescResp(groups=[await self._describe_group(g) for g in req.groups])

    async def _describe_group(self, rg) -> DescResp.DescribeShareGroupOffsetsResponseGroup:
        gid = rg.group_id
        G = DescResp.DescribeShareGroupOffsetsResponseGroup
        if not gid:
            return G(group_id=gid, error_code=Errors.INVALID_GROUP_ID, topics=[])
        cluster = self.c.cluster
        missing: list = []
        wanted: dict[bytes, tuple[str, list[int]]] = {}
        if rg.topics is None:
            group = self.c.groups.get(gid)
            if not isinstance(group, ShareGroup):
                e = group_not_found(gid, group)
                return G(group_id=gid, error_code=e.code, error_message=e.message, topics=[])
            for tid, (name, parts) in sorted(group.initialized.items(), key=lambda kv: kv[1][0]):
                current = cluster.topic_name(tid)
                if current is not None and parts:
                    wanted[tid] = (current, sorted(parts))
        else:
            for t in rg.topics:
                tid = cluster.topic_id(t.topic_name)
                if tid is None:
                    missing.append(DescResp.DescribeShareGroupOffsetsResponseTopic(
                        topic_name=t.topic_name, topic_id=ZERO_UUID, partitions=[
                            DescResp.DescribeShareGroupOffsetsResponsePartition(
                                partition_index=p, start_offset=UNINITIALIZED, leader_epoch=0, lag=UNINITIALIZED)
                            for p in t.partitions]))
                else:
                    name, parts = wanted.setdefault(tid, (t.topic_name, []))
                    parts.extend(p for p in t.partitions if p not in parts)
        topics = []
        if wanted and self.share_state is not None:
            summary = await self.share_state.read_state_summary(
                summary_request(gid, {tid: parts for tid, (_, parts) in wanted.items()}))
            for t in summary.results:
                name = wanted[t.topic_id][0]
                out = []
                for p in t.partitions:
                    ok = p.error_code == Errors.NONE
                    start = p.start_offset if ok else UNINITIALIZED
                    dcc = p.delivery_complete_count if ok else UNINITIALIZED
                    lag = UNINITIALIZED
                    if start != UNINITIALIZED and dcc != UNINITIALIZED:
                        lag = share_partition_lag(cluster.log_end_offset(name, p.partition), start, dcc)
                    out.append(DescResp.DescribeShareGroupOffsetsResponsePartition(
                        partition_index=p.partition, start_offset=start, leader_epoch=p.leader_epoch if ok else 0,
                        lag=lag))
                topics.append(DescResp.DescribeShareGroupOffsetsResponseTopic(
                    topic_name=name, topic_id=t.topic_id, partitions=out))
        return G(group_id=gid, topics=topics + missing)

    # ------------------------------------------------------------ AlterShareGroupOffsets
    async def alter(self, req) -> AlterResp:
        """Two writes around the persister, as Kafka's alterShareGroupOffsets: ``_initiate_alter`` checks
        the group and bumps its epoch, InitializeShareGroupState, then the partitions initialized are
        recorded."""
        gid = req.group_id
        if not gid:
            return AlterResp(error_code=Errors.INVALID_GROUP_ID, error_message="The configured groupId is invalid.")
        if self.share_state is None:
            return AlterResp(error_code=Errors.COORDINATOR_NOT_AVAILABLE)

        def failed(_result, exc):
            return WriteResult(AlterResp(error_code=append_error_code(exc), error_message=str(exc) or None))

        try:
            result = await self.c.runtime.write(lambda: self._initiate_alter(req), on_error=failed)
        except KafkaError as e:
            return AlterResp(error_code=e.code, error_message=e.message)
        resp = result.response
        if result.request is None:
            return resp
        init = await self.share_state.initialize_state(result.request)
        names = result.names
        done: dict[bytes, tuple[str, set[int]]] = {}
        errors: dict[tuple[bytes, int], tuple[int, str | None]] = {}
        for t in init.results:
            for p in t.partitions:
                if p.error_code == Errors.NONE:
                    done.setdefault(t.topic_id, (names[t.topic_id], set()))[1].add(p.partition)
                else:
                    errors[(t.topic_id, p.partition)] = (p.error_code, p.error_message)
        for t in resp.responses:
            for p in t.partitions:
                if (t.topic_id, p.partition_index) in errors:
                    p.error_code, p.error_message = errors[(t.topic_id, p.partition_index)]
        if done:
            try:
                await self.c.runtime.write(lambda: (None, self.c.share.initialized_records(gid, done)))
            except Exception as e:  # noqa: BLE001 - the state is initialized; the next heartbeat records it
                log.warning("recording the share partitions of %s after AlterShareGroupOffsets failed: %r", gid, e)
        await self._notify(gid)
        return resp

    def _initiate_alter(self, req) -> tuple[WriteResult, list]:
        """The write before the persister: the group must be an empty share group (or unknown: it is
        created); the response per partition; a new group epoch (KIP-932 "Administration": the new
        state epoch); the InitializeShareGroupState request at that epoch for the known partitions."""
        gid = req.group_id
        group = self.c.groups.get(gid)
        if group is not None and not isinstance(group, ShareGroup):
            raise group_not_found(gid, group)
        if group is not None and group.members:
            raise not_empty(gid)
        cluster = self.c.cluster
        responses, offsets, names = [], {}, {}
        for t in req.topics:
            tid = cluster.topic_id(t.topic_name)
            count = cluster.partition_count(t.topic_name) if tid is not None else None
            if tid is not None:
                names[tid] = t.topic_name
            parts = []
            for p in t.partitions:
                if count is not None and 0 <= p.partition_index < count:
                    parts.append(AlterResp.AlterShareGroupOffsetsResponsePartition(partition_index=p.partition_index))
                    offsets.setdefault(tid, {})[p.partition_index] = p.start_offset
                else:
                    parts.append(AlterResp.AlterShareGroupOffsetsResponsePartition(
                        partition_index=p.partition_index, error_code=Errors.UNKNOWN_TOPIC_OR_PARTITION,
                        error_message=UNKNOWN_TOPIC_MESSAGE))
            responses.append(AlterResp.AlterShareGroupOffsetsResponseTopic(
                topic_name=t.topic_name, topic_id=tid or ZERO_UUID, partitions=parts))
        if not offsets:
            return WriteResult(AlterResp(responses=responses)), []
        epoch = (group.group_epoch if group is not None else 0) + 1
        subscribed = group.subscribed_topic_names() if group is not None else set()
        return (WriteResult(AlterResp(responses=responses), initialize_request(gid, offsets, epoch), names),
                [R.share_group_epoch(gid, epoch, metadata_hash(cluster, subscribed))])

    # ------------------------------------------------------------ DeleteShareGroupOffsets
    async def delete(self, req) -> DeleteResp:
        """Two writes around the persister, as Kafka's deleteShareGroupOffsets: ``_initiate_delete``
        checks the group (in a write, so no member can join between the check and the persister
        call), DeleteShareGroupState, then ``_complete_delete`` drops what the persister deleted."""
        gid = req.group_id
        if not gid:
            return DeleteResp(error_code=Errors.INVALID_GROUP_ID, error_message="The configured groupId is invalid.")
        result = await self.c.runtime.write(lambda: self._initiate_delete(req))
        if result.request is None:
            return result.response
        if self.share_state is None:
            return DeleteResp(error_code=Errors.COORDINATOR_NOT_AVAILABLE)
        state = await self.share_state.delete_state(result.request)
        names = result.names
        responses = result.response.responses
        deleted: set[bytes] = set()
        ok: list = []
        for t in state.results:
            err = next((p for p in t.partitions if p.error_code != Errors.NONE), None)
            name = names[t.topic_id]
            if err is not None:
                responses.append(DeleteResp.DeleteShareGroupOffsetsResponseTopic(
                    topic_name=name, topic_id=t.topic_id, error_code=err.error_code, error_message=err.error_message))
            else:
                deleted.add(t.topic_id)
                ok.append(DeleteResp.DeleteShareGroupOffsetsResponseTopic(topic_name=name, topic_id=t.topic_id))
        if deleted:
            try:
                await self.c.runtime.write(lambda: self._complete_delete(gid, deleted))
            except Exception as e:  # noqa: BLE001
                code = append_error_code(e)
                return DeleteResp(error_code=code, error_message=f"Unable to delete share group offsets: {e}")
            await self._notify(gid)
        return DeleteResp(responses=ok + responses)

    def _initiate_delete(self, req) -> tuple[WriteResult, list]:
        """The write before the persister (no records): the group must be an empty share group
        (GROUP_ID_NOT_FOUND / NON_EMPTY_GROUP at the top level); a topic that does not exist, or has
        no initialized share partition in the group, answers UNKNOWN_TOPIC_OR_PARTITION; the others
        go in the DeleteShareGroupState request."""
        gid = req.group_id
        group = self.c.groups.get(gid)
        if not isinstance(group, ShareGroup):
            e = group_not_found(gid, group)
            return WriteResult(DeleteResp(error_code=e.code, error_message=e.message)), []
        if group.members:
            e = not_empty(gid)
            return WriteResult(DeleteResp(error_code=e.code, error_message=e.message)), []
        cluster = self.c.cluster
        responses: list = []
        todo: dict[bytes, set[int]] = {}
        names: dict[bytes, str] = {}
        for t in req.topics:
            tid = cluster.topic_id(t.topic_name)
            if tid is None:
                responses.append(DeleteResp.DeleteShareGroupOffsetsResponseTopic(
                    topic_name=t.topic_name, topic_id=ZERO_UUID, error_code=Errors.UNKNOWN_TOPIC_OR_PARTITION,
                    error_message=UNKNOWN_TOPIC_MESSAGE))
            elif tid not in group.initialized or not group.initialized[tid][1]:
                responses.append(DeleteResp.DeleteShareGroupOffsetsResponseTopic(
                    topic_name=t.topic_name, topic_id=tid, error_code=Errors.UNKNOWN_TOPIC_OR_PARTITION,
                    error_message=NO_OFFSET_INFO))
            else:
                todo[tid], names[tid] = group.initialized[tid][1], t.topic_name
        return WriteResult(DeleteResp(responses=responses), delete_request(gid, todo) if todo else None, names), []

    def _complete_delete(self, gid: str, deleted: set[bytes]) -> tuple[None, list]:
        """The write after the persister: the deleted topics leave the group's initialized partitions."""
        g = self.c.groups.get(gid)
        if not isinstance(g, ShareGroup):
            return None, []
        kept = {tid: v for tid, v in g.initialized.items() if tid not in deleted}
        return None, [R.share_state_partitions(gid, kept)]
