"""Fakes and request builders shared by the test_group_*.py files (no tests here).

FakeScheduler is a deterministic clock: ``advance(ms)`` fires due timers in
time order; ``now_ms`` is the wall clock the coordinator stamps records with.
"""
from __future__ import annotations

import asyncio
import dataclasses
import heapq
import itertools
import struct

from coordinator.group import GroupConfig, GroupCoordinator
from coordinator.runtime import MemoryRecordLog
from coordinator.share_state import ShareCoordinator
from protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest
from protocol.messages.consumer_protocol_subscription import ConsumerProtocolSubscription
from protocol.messages.heartbeat import HeartbeatRequest
from protocol.messages.join_group import JoinGroupRequest
from protocol.messages.leave_group import LeaveGroupRequest
from protocol.messages.offset_commit import OffsetCommitRequest
from protocol.messages.offset_fetch import OffsetFetchRequest
from protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest
from protocol.messages.sync_group import SyncGroupRequest

T0 = 1_700_000_000_000


class FakeHandle:
    def __init__(self):
        self.cancelled = False

    def cancel(self):
        self.cancelled = True


class FakeScheduler:
    def __init__(self, start_ms: int = T0):
        self.now = start_ms
        self._heap: list = []
        self._seq = itertools.count()

    def now_ms(self) -> int:
        return self.now

    def time(self) -> float:
        return self.now / 1000.0

    def call_later(self, delay: float, callback, *args):
        handle = FakeHandle()
        heapq.heappush(self._heap, (self.now + round(delay * 1000), next(self._seq), handle, callback, args))
        return handle

    def due(self) -> bool:
        return any(e[0] <= self.now and not e[2].cancelled for e in self._heap)

    def pending(self) -> int:
        return sum(1 for e in self._heap if not e[2].cancelled)

    def advance(self, ms: int) -> None:
        target = self.now + ms
        while self._heap and self._heap[0][0] <= target:
            due, _, handle, callback, args = heapq.heappop(self._heap)
            if handle.cancelled:
                continue
            self.now = max(self.now, due)
            callback(*args)
        self.now = target


class FakeCluster:
    def __init__(self, topics: dict[str, int] | None = None):
        self.topics: dict[str, tuple[bytes, int]] = {}
        self.leo: dict[tuple[str, int], int] = {}
        self.lso: dict[tuple[str, int], int] = {}
        for name, n in (topics or {}).items():
            self.add_topic(name, n)

    def add_topic(self, name: str, partitions: int) -> bytes:
        tid = self.topics[name][0] if name in self.topics else bytes([len(self.topics) + 1] * 16)
        self.topics[name] = (tid, partitions)
        return tid

    def topic_id(self, name):
        t = self.topics.get(name)
        return t[0] if t else None

    def topic_name(self, topic_id):
        for name, (tid, _) in self.topics.items():
            if tid == topic_id:
                return name
        return None

    def partition_count(self, name):
        t = self.topics.get(name)
        return t[1] if t else None

    def topic_names(self):
        return list(self.topics)

    def log_end_offset(self, name, partition):
        return self.leo.get((name, partition), 0)

    def log_start_offset(self, name, partition):
        return self.lso.get((name, partition), 0)


class Env:
    """A coordinator over a memory log, fake cluster and fake clock."""

    def __init__(self, topics=None, config=None, log=None, cluster=None, sched=None, share_state=None,
                 batching: bool = False, share_initial_delay_ms: int = 0):
        """``batching``: keep KIP-1263's assignment intervals; without it they are 0 (every heartbeat
        that needs one computes a new target assignment), as Kafka runs its request tests.
        ``share_initial_delay_ms``: group.share.initial.assignment.delay.ms (0: a new share group's
        first heartbeat is answered without waiting for the fake clock)."""
        config = dataclasses.replace(config or GroupConfig(), share_initial_assignment_delay_ms=share_initial_delay_ms)
        if not batching:
            config = dataclasses.replace(config, consumer_assignment_interval_ms=0, share_assignment_interval_ms=0)
        self.sched = sched or FakeScheduler()
        self.cluster = cluster or FakeCluster(topics if topics is not None else {"foo": 3, "bar": 2})
        self.log = log or MemoryRecordLog()
        self.config = config
        # The share-state persister share groups initialize partitions through (loaded on first use).
        self.share_state = share_state or ShareCoordinator(MemoryRecordLog(), None, self.sched.now_ms)
        self.coord = GroupCoordinator(self.log, self.cluster, config, self.sched, share_state=self.share_state)

    async def restart(self) -> "Env":
        """A fresh coordinator replaying the same log (same clock, cluster and share state)."""
        await self.coord.close()
        env = Env(config=self.config, log=self.log, cluster=self.cluster, sched=self.sched,
                  share_state=self.share_state, batching=True)
        await env.coord.load()
        return env

    async def share_hb(self, group="sg", member="s1", epoch=0, topics=("foo",), rack=None):
        """One ShareGroupHeartbeat (``topics`` None: unchanged subscription)."""
        if not getattr(self.share_state, "_loaded", True):
            await self.share_state.load()
        req = ShareGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=epoch, rack_id=rack,
                                         subscribed_topic_names=list(topics) if topics is not None else None)
        return await self.coord.share_group_heartbeat(req, "client", "/127.0.0.1")

    async def advance(self, ms: int) -> None:
        """Move the clock, fire due timers and let the work they start finish."""
        self.sched.advance(ms)
        await settle(self.coord)
        for _ in range(20):  # timers that the settled work scheduled for "now"
            if not self.sched.due():
                break
            self.sched.advance(0)
            await settle(self.coord)


async def settle(coord) -> None:
    for _ in range(5):
        await asyncio.sleep(0)
        await coord.drain()


def subscription(*topics: str, version: int = 1) -> bytes:
    return struct.pack(">h", version) + ConsumerProtocolSubscription(topics=list(topics)).encode(version)


def join_req(group="g", member="", instance=None, topics=("foo",), session=10000, rebalance=30000,
             protocols=None):
    protos = protocols or [("range", subscription(*topics))]
    return JoinGroupRequest(group_id=group, session_timeout_ms=session, rebalance_timeout_ms=rebalance,
                            member_id=member, group_instance_id=instance, protocol_type="consumer",
                            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=m)
                                       for n, m in protos])


def sync_req(group, member, generation, assignments=None, instance=None):
    return SyncGroupRequest(group_id=group, generation_id=generation, member_id=member, group_instance_id=instance,
                            assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                                         for m, a in (assignments or {}).items()])


def hb_req(group, member, generation, instance=None):
    return HeartbeatRequest(group_id=group, generation_id=generation, member_id=member, group_instance_id=instance)


def leave_req(group, *members):
    return LeaveGroupRequest(group_id=group, members=[
        LeaveGroupRequest.MemberIdentity(member_id=m, group_instance_id=i) for m, i in members])


def commit_req(group, offsets: dict, generation=-1, member="", retention=-1, instance=None):
    """offsets: {(topic, partition): offset}"""
    by_topic: dict = {}
    for (t, p), o in offsets.items():
        by_topic.setdefault(t, []).append(OffsetCommitRequest.OffsetCommitRequestPartition(
            partition_index=p, committed_offset=o, committed_metadata="m"))
    return OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=generation, member_id=member,
                               group_instance_id=instance, retention_time_ms=retention,
                               topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps)
                                       for t, ps in by_topic.items()])


async def fetch_offsets(coord, group, topics=None, version=8) -> dict:
    """{(topic, partition): offset} for the group (all offsets when topics is None)."""
    req_topics = None
    if topics is not None:
        req_topics = [OffsetFetchRequest.OffsetFetchRequestTopics(name=t, partition_indexes=list(ps))
                      for t, ps in topics.items()]
    g = OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group)
    g.topics = req_topics  # the constructor turns None into []; None (null) asks for all offsets
    req = OffsetFetchRequest(groups=[g])
    resp = await coord.offset_fetch(req, version)
    g = resp.groups[0]
    assert g.error_code == 0, g
    return {(t.name, p.partition_index): p.committed_offset for t in g.topics for p in t.partitions}


def cg_hb(group="cg", member="m1", epoch=0, topics=("foo",), owned=None, assignor=None, instance=None,
          rebalance=60000, regex=None):
    owned_tps = None
    if owned is not None:
        owned_tps = [ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=t, partitions=sorted(ps))
                     for t, ps in owned.items()]
    return ConsumerGroupHeartbeatRequest(
        group_id=group, member_id=member, member_epoch=epoch, instance_id=instance,
        rebalance_timeout_ms=rebalance if epoch == 0 else -1,
        subscribed_topic_names=list(topics) if topics is not None else None, subscribed_topic_regex=regex,
        server_assignor=assignor, topic_partitions=owned_tps if epoch != 0 else [])


def assignment_of(resp) -> dict:
    if resp.assignment is None:
        return None
    return {tp.topic_id: set(tp.partitions) for tp in resp.assignment.topic_partitions}
