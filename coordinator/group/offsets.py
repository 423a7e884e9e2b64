"""Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete and KIP-211 expiration.

State: ``group -> topic -> partition -> OffsetAndMetadata``, changed only by
replaying OffsetCommit records (a tombstone deletes).  A commit for a group that
does not exist creates a "simple" classic group (Empty, no protocol type), as
Kafka does when it replays such a record.

Expiration (KIP-211, seed 002), run by :meth:`OffsetManager.expire`:

* the retention start of an offset comes from the group
  (``Group.offset_expiration_base``): an Empty classic group with a protocol type
  uses the time it became Empty (``currentStateTimestamp``, persisted in its
  GroupMetadata record), a Stable classic "consumer" group and every KIP-848
  group use the commit timestamp but only for topics no member subscribes to,
  a standalone (protocol-less) group uses the commit timestamp, and groups in
  any other state (rebalancing) keep everything;
* an offset committed with an explicit retention time (OffsetCommit v2-4
  ``RetentionTimeMs`` != -1, stored as OffsetCommitValue v1 with
  ``expireTimestamp``) keeps its own expiry: it goes once that time passes, in
  every group state, as the KIP's compatibility section specifies (Kafka's own
  implementation only applies it to partitions that are otherwise eligible);
* expired offsets get tombstones, and a group whose offsets are all gone and
  that is Empty is deleted (its tombstones too), i.e. becomes Dead, so a
  restart does not bring it back.

Transactional offset commits (TxnOffsetCommit, KIP-98 / KIP-447): the records are
appended as a transactional batch of the producer and held in
``OffsetStore.pending`` (producer id -> offsets) until the transaction's marker
reaches ``__consumer_offsets``: COMMIT replays them into the committed offsets,
ABORT drops them (:meth:`OffsetStore.complete_transaction`); what OffsetFetch answers
for them is in its handler's header (broker/handlers/offset_fetch.py).
"""
from __future__ import annotations

from protocol.errors import Errors, KafkaError
from protocol.lazy_messages import (OffsetCommitResponse, OffsetDeleteResponse, OffsetFetchResponse,
                                    TxnOffsetCommitResponse)
from protocol.primitives import ZERO_UUID

from . import records as R
from .base import Group, OffsetAndMetadata

DEFAULT_RETENTION_TIME = -1


class OffsetStore:
    def __init__(self) -> None:
        self.by_group: dict[str, dict[str, dict[int, OffsetAndMetadata]]] = {}
        # producer id -> (group, topic, partition) -> OffsetCommitValue of its open transaction
        self.pending: dict[int, dict[tuple[str, str, int], object]] = {}

    def add_pending(self, producer_id: int, group: str, topic: str, partition: int, value) -> None:
        self.pending.setdefault(producer_id, {})[(group, topic, partition)] = value

    def complete_transaction(self, producer_id: int, commit: bool) -> int:
        """The transaction's marker is in ``__consumer_offsets``: apply (commit) or drop its offsets."""
        held = self.pending.pop(producer_id, {})
        if commit:
            for (group, topic, partition), value in held.items():
                self.replay(group, topic, partition, value)
        return len(held)

    def is_pending(self, group: str, topic: str, partition: int) -> bool:
        return any((group, topic, partition) in held for held in self.pending.values())

    def replay(self, group: str, topic: str, partition: int, value) -> None:
        if value is None:
            topics = self.by_group.get(group)
            if topics is None:
                return
            parts = topics.get(topic)
            if parts is not None:
                parts.pop(partition, None)
                if not parts:
                    del topics[topic]
            if not topics:
                del self.by_group[group]
            return
        expire = getattr(value, "expire_timestamp", -1)
        topic_id = getattr(value, "topic_id", ZERO_UUID)
        om = OffsetAndMetadata(value.offset, getattr(value, "leader_epoch", -1), value.metadata,
                               value.commit_timestamp, expire if expire is not None and expire >= 0 else None,
                               topic_id if topic_id and topic_id != ZERO_UUID else None)
        self.by_group.setdefault(group, {}).setdefault(topic, {})[partition] = om

    def get(self, group: str, topic: str, partition: int) -> OffsetAndMetadata | None:
        return self.by_group.get(group, {}).get(topic, {}).get(partition)

    def group_offsets(self, group: str) -> dict[str, dict[int, OffsetAndMetadata]]:
        return self.by_group.get(group, {})

    def tombstones(self, group: str) -> list:
        return [R.offset_tombstone(group, t, p)
                for t, parts in self.by_group.get(group, {}).items() for p in parts]

    def clear(self) -> None:
        self.by_group.clear()


class OffsetManager:
    """Request-level offset operations; uses the coordinator's groups, store, cluster and clock."""

    def __init__(self, coordinator):
        self.c = coordinator
        self.store: OffsetStore = coordinator.offsets

    # ------------------------------------------------------------ OffsetCommit
    def _validate_commit(self, req, version: int) -> None:
        group = self.c.lookup(req.group_id)
        generation = req.generation_id_or_member_epoch
        if group is None:
            if generation < 0:
                return  # standalone commit: the simple group appears when the records replay
            raise KafkaError(Errors.ILLEGAL_GENERATION)
        validate = getattr(group, "validate_offset_commit", None)
        if validate is None:
            raise KafkaError(Errors.GROUP_ID_NOT_FOUND)
        validate(req.member_id, req.group_instance_id, generation, version)

    def commit(self, req, version: int, error: int = Errors.NONE) -> tuple[OffsetCommitResponse, list]:
        """``error`` (e.g. COORDINATOR_LOAD_IN_PROGRESS) answers every partition with it, writing nothing."""
        by_id = version >= 10
        if not error and not req.group_id:
            error = Errors.INVALID_GROUP_ID
        elif not error:
            try:
                self._validate_commit(req, version)
            except KafkaError as e:
                error = e.code
        now = self.c.now_ms()
        retention = req.retention_time_ms if 2 <= version <= 4 else DEFAULT_RETENTION_TIME
        expire_ts = None if retention == DEFAULT_RETENTION_TIME else now + retention
        records: list = []
        topics_out = [OffsetCommitResponse.OffsetCommitResponseTopic(
            name=t.name if not by_id else "", topic_id=t.topic_id if by_id else ZERO_UUID, partitions=[
                OffsetCommitResponse.OffsetCommitResponsePartition(partition_index=p, error_code=err)
                for p, err in parts])
            for t, parts in self._commit_records(req, error, by_id, now, expire_ts, records)]
        return OffsetCommitResponse(topics=topics_out), records

    def _commit_records(self, req, error: int, by_id: bool, now: int, expire_ts, records: list):
        """Per request topic: (topic, [(partition, error code)]); the commit records go to ``records``."""
        cluster = self.c.cluster
        max_meta = self.c.cfg.offset_metadata_max_bytes
        out = []
        for t in req.topics:
            name, topic_id, topic_err = _commit_topic(cluster, t, by_id)
            parts = []
            for p in t.partitions:
                err = _commit_error(p, error or topic_err, max_meta)
                if not err:
                    records.append(R.offset_commit(req.group_id, name, p.partition_index, p.committed_offset,
                                                   p.committed_leader_epoch, p.committed_metadata or "",
                                                   now, expire_ts, topic_id))
                parts.append((p.partition_index, err))
            out.append((t, parts))
        return out

    # ------------------------------------------------------------ TxnOffsetCommit
    def txn_commit(self, req, by_id: bool = False, error: int = Errors.NONE) -> tuple[TxnOffsetCommitResponse, list]:
        """Validate a TxnOffsetCommit as Kafka's validateTransactionalOffsetCommit; records to hold pending.
        ``error`` answers every partition with it, writing nothing."""
        group = self.c.lookup(req.group_id)
        generation = req.generation_id_or_member_epoch
        if not error and not req.group_id:
            error = Errors.INVALID_GROUP_ID
        elif not error and generation >= 0:  # a producer without group metadata (-1) is not checked
            validate = getattr(group, "validate_offset_commit", None) if group is not None else None
            try:
                if group is None:
                    raise KafkaError(Errors.ILLEGAL_GENERATION)
                if validate is None:
                    raise KafkaError(Errors.GROUP_ID_NOT_FOUND)
                validate(req.member_id, req.group_instance_id, generation, 9)
            except KafkaError as e:
                error = Errors.ILLEGAL_GENERATION if e.code == Errors.STALE_MEMBER_EPOCH else e.code
        T = TxnOffsetCommitResponse
        records: list = []
        topics_out = [T.TxnOffsetCommitResponseTopic(
            name="" if by_id else t.name, topic_id=t.topic_id if by_id else ZERO_UUID, partitions=[
                T.TxnOffsetCommitResponsePartition(partition_index=p, error_code=err) for p, err in parts])
            for t, parts in self._commit_records(req, error, by_id, self.c.now_ms(), None, records)]  # by id: v6+
        return T(topics=topics_out), records

    # ------------------------------------------------------------ OffsetFetch
    def fetch_group(self, group_id: str, topics, member_id, member_epoch, by_id: bool,
                    version: int, require_stable: bool = False) -> OffsetFetchResponse.OffsetFetchResponseGroup:
        G = OffsetFetchResponse
        group = self.c.lookup(group_id)
        fail_all = group is None
        if group is not None:
            validate = getattr(group, "validate_offset_fetch", None)
            if validate is None:
                fail_all = True
            else:
                try:
                    validate(member_id, member_epoch)
                except KafkaError as e:
                    if e.code == Errors.GROUP_ID_NOT_FOUND:
                        fail_all = True
                    else:
                        return G.OffsetFetchResponseGroup(group_id=group_id, topics=[], error_code=e.code)
        offsets = {} if fail_all else self.store.group_offsets(group_id)
        cluster = self.c.cluster
        out = []
        if topics is None:  # all offsets of the group
            for name, parts in offsets.items():
                tid = cluster.topic_id(name) if by_id else None
                if by_id and tid is None:
                    continue
                out.append(G.OffsetFetchResponseTopics(
                    name="" if by_id else name, topic_id=tid or ZERO_UUID,
                    partitions=[self._partition(p, om) for p, om in sorted(parts.items())]))
            return G.OffsetFetchResponseGroup(group_id=group_id, topics=out, error_code=Errors.NONE)
        for t in topics:
            if by_id:
                name = cluster.topic_name(t.topic_id)
                if name is None:
                    out.append(G.OffsetFetchResponseTopics(topic_id=t.topic_id, partitions=[
                        G.OffsetFetchResponsePartitions(partition_index=p, committed_offset=-1, metadata="",
                                                        error_code=Errors.UNKNOWN_TOPIC_ID)
                        for p in t.partition_indexes]))
                    continue
            else:
                name = t.name
            parts = offsets.get(name, {})
            answers = [self._partition(p, parts.get(p)) for p in t.partition_indexes]
            if require_stable and self.store.pending:
                for a in answers:  # KIP-447: a transaction holds an offset for it
                    if self.store.is_pending(group_id, name, a.partition_index):
                        a.committed_offset, a.error_code = -1, Errors.UNSTABLE_OFFSET_COMMIT
            out.append(G.OffsetFetchResponseTopics(
                name="" if by_id else name, topic_id=t.topic_id if by_id else ZERO_UUID, partitions=answers))
        return G.OffsetFetchResponseGroup(group_id=group_id, topics=out, error_code=Errors.NONE)

    @staticmethod
    def _partition(partition: int, om: OffsetAndMetadata | None):
        if om is None:
            return OffsetFetchResponse.OffsetFetchResponsePartitions(
                partition_index=partition, committed_offset=-1, committed_leader_epoch=-1, metadata="",
                error_code=Errors.NONE)
        return OffsetFetchResponse.OffsetFetchResponsePartitions(
            partition_index=partition, committed_offset=om.offset, committed_leader_epoch=om.leader_epoch,
            metadata=om.metadata, error_code=Errors.NONE)

    def fetch(self, req, version: int, error: int = Errors.NONE) -> OffsetFetchResponse:
        """``error`` (e.g. COORDINATOR_LOAD_IN_PROGRESS) answers every group with it."""
        G = OffsetFetchResponse
        if version >= 8:
            groups = []
            for g in req.groups:
                if not g.group_id or error:
                    groups.append(G.OffsetFetchResponseGroup(group_id=g.group_id, topics=[],
                                                             error_code=error or Errors.INVALID_GROUP_ID))
                    continue
                groups.append(self.fetch_group(g.group_id, g.topics, g.member_id, g.member_epoch,
                                               version >= 10, version, bool(req.require_stable)))
            return G(groups=groups)
        if not req.group_id or error:
            return G(topics=[], error_code=error or Errors.INVALID_GROUP_ID)
        topics = req.topics
        if topics is not None:
            topics = [_TopicView(t.name, t.partition_indexes) for t in topics]
        res = self.fetch_group(req.group_id, topics, None, -1, False, version,
                               version >= 7 and bool(req.require_stable))
        if res.error_code:
            return G(topics=[], error_code=res.error_code)
        return G(error_code=Errors.NONE, topics=[
            G.OffsetFetchResponseTopic(name=t.name, partitions=[
                G.OffsetFetchResponsePartition(partition_index=p.partition_index, committed_offset=p.committed_offset,
                                               committed_leader_epoch=p.committed_leader_epoch, metadata=p.metadata,
                                               error_code=p.error_code) for p in t.partitions])
            for t in res.topics])

    # ------------------------------------------------------------ OffsetDelete
    def delete(self, req) -> tuple[OffsetDeleteResponse, list]:
        D = OffsetDeleteResponse
        group = self.c.lookup(req.group_id)
        if not req.group_id:
            return D(error_code=Errors.INVALID_GROUP_ID, topics=[]), []
        if group is None or not group.has_offsets():
            return D(error_code=Errors.GROUP_ID_NOT_FOUND, topics=[]), []
        validate = getattr(group, "validate_offset_delete", None)
        try:
            if validate is not None:
                validate()
        except KafkaError as e:
            return D(error_code=e.code, topics=[]), []
        offsets = self.store.group_offsets(req.group_id)
        cluster = self.c.cluster
        records, topics_out = [], []
        for t in req.topics:
            subscribed = group.is_subscribed_to_topic(t.name)
            count = cluster.partition_count(t.name)
            parts_out = []
            for p in t.partitions:
                if count is None or not 0 <= p.partition_index < count:
                    err = Errors.UNKNOWN_TOPIC_OR_PARTITION
                elif subscribed:
                    err = Errors.GROUP_SUBSCRIBED_TO_TOPIC
                else:
                    err = Errors.NONE
                    if p.partition_index in offsets.get(t.name, {}):
                        records.append(R.offset_tombstone(req.group_id, t.name, p.partition_index))
                parts_out.append(D.OffsetDeleteResponsePartition(partition_index=p.partition_index, error_code=err))
            topics_out.append(D.OffsetDeleteResponseTopic(name=t.name, partitions=parts_out))
        return D(error_code=Errors.NONE, topics=topics_out), records

    # ------------------------------------------------------------ KIP-211 expiration
    def expire_group(self, group_id: str, group: Group, now: int, retention_ms: int) -> tuple[list, bool]:
        """Tombstones for the group's expired offsets, and whether none are left."""
        base = group.offset_expiration_base()
        records = []
        all_expired = base is not None
        for topic, parts in self.store.group_offsets(group_id).items():
            subscribed = group.is_subscribed_to_topic(topic)
            for partition, om in parts.items():
                if om.expire_ts is not None:
                    expired = now >= om.expire_ts
                elif base is None or subscribed:
                    expired = False
                else:
                    expired = now - base(om) >= retention_ms
                if expired:
                    records.append(R.offset_tombstone(group_id, topic, partition))
                else:
                    all_expired = False
        return records, all_expired


def _commit_topic(cluster, t, by_id: bool) -> tuple[str | None, bytes | None, int]:
    """(name, topic id, error) of a committed topic addressed by name or (``by_id``) by id."""
    if by_id:
        name = cluster.topic_name(t.topic_id)
        return name, t.topic_id, Errors.UNKNOWN_TOPIC_ID if name is None else Errors.NONE
    topic_id = cluster.topic_id(t.name)
    return t.name, topic_id, Errors.UNKNOWN_TOPIC_OR_PARTITION if topic_id is None else Errors.NONE


def _commit_error(p, err: int, max_meta: int) -> int:
    """A committed partition's error: ``err``, else OFFSET_METADATA_TOO_LARGE for oversized metadata."""
    if not err and p.committed_metadata is not None and len(p.committed_metadata.encode()) > max_meta:
        return Errors.OFFSET_METADATA_TOO_LARGE
    return err


class _TopicView:
    """A v1-7 request topic seen as the v8+ shape (name, topic id, partition indexes)."""

    __slots__ = ("name", "topic_id", "partition_indexes")

    def __init__(self, name, partition_indexes, topic_id=ZERO_UUID):
        self.name = name
        self.partition_indexes = partition_indexes
        self.topic_id = topic_id
