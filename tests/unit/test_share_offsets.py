"""Share-group offset admin (DescribeShareGroupOffsets / AlterShareGroupOffsets /
DeleteShareGroupOffsets) and KIP-1226 lag, on the group coordinator with a real share
coordinator over memory logs."""
from __future__ import annotations

import asyncio

from coordinator.group.share_offsets import share_partition_lag
from coordinator.runtime import MemoryRecordLog
from protocol.errors import Errors
from protocol.messages.alter_share_group_offsets import AlterShareGroupOffsetsRequest as AlterReq
from protocol.messages.delete_share_group_offsets import DeleteShareGroupOffsetsRequest as DeleteReq
from protocol.messages.describe_share_group_offsets import DescribeShareGroupOffsetsRequest as DescReq
from protocol.messages.write_share_group_state import WriteShareGroupStateRequest as WriteReq

from test_group_support import Env, cg_hb

ZERO = bytes(16)


def test_seed_worked_example():
    """KIP-1226: offsets 0-10, SPSO 2, offsets 5 (acknowledged) and 6 (archived) processed in flight:
    lag = 10 - 2 + 1 - 2 = 7.  The log end offset is 11 (the next offset to be written)."""
    assert share_partition_lag(11, 2, 2) == 7
    assert share_partition_lag(11, -1, 0) == -1  # not initialized
    assert share_partition_lag(11, 2, -1) == -1  # DeliveryCompleteCount unknown (a v0 write)


async def initialized_group(env, group="sg", topics=("foo",)):
    """A share group whose member initialized the topics' share state, then left (empty group)."""
    r = await env.share_hb(group, "s1", topics=list(topics))
    await env.advance(0)
    assert (await env.share_hb(group, "s1", epoch=-1, topics=None)).error_code == 0
    return r


async def write(env, group, topic, partition, start, dcc, batches=(), version_dcc=True):
    tid = env.cluster.topic_id(topic)
    req = WriteReq(group_id=group, topics=[WriteReq.WriteStateData(topic_id=tid, partitions=[WriteReq.PartitionData(
        partition=partition, state_epoch=-1, leader_epoch=3, start_offset=start,
        delivery_complete_count=dcc if version_dcc else -1,
        state_batches=[WriteReq.StateBatch(first_offset=f, last_offset=l, delivery_state=s, delivery_count=c)
                       for f, l, s, c in batches])])])
    resp = await env.share_state.write_state(req)
    assert resp.results[0].partitions[0].error_code == 0, resp


async def describe(env, group, topics=None, version=1):
    t = None if topics is None else [DescReq.DescribeShareGroupOffsetsRequestTopic(topic_name=n, partitions=list(ps))
                                     for n, ps in topics.items()]
    rg = DescReq.DescribeShareGroupOffsetsRequestGroup(group_id=group)
    rg.topics = t  # None: every topic (the constructor turns None into [])
    resp = await env.coord.describe_share_group_offsets(DescReq(groups=[rg]), version)
    return resp.groups[0]


def by_partition(g):
    return {(t.topic_name, p.partition_index): (p.start_offset, p.leader_epoch, p.lag) for t in g.topics
            for p in t.partitions}


async def test_describe_lag_follows_the_summary():
    env = Env(topics={"foo": 2})
    await initialized_group(env)
    # the seed's partition: offsets 0..10, SPSO 2, 5 acknowledged and 6 archived
    env.cluster.leo[("foo", 0)] = 11
    await write(env, "sg", "foo", 0, 2, 2, batches=[(2, 2, 1, 1), (3, 3, 0, 2), (4, 4, 1, 1), (5, 5, 2, 1),
                                                    (6, 6, 4, 1)])
    g = await describe(env, "sg")
    assert g.error_code == 0
    parts = by_partition(g)
    leader = env.share_state.state_of("sg", env.cluster.topic_id("foo"), 0).leader_epoch
    assert parts[("foo", 0)] == (2, leader, 7)
    assert parts[("foo", 1)] == (-1, 0, -1)  # initialized at -1: lag unknown until consumption starts
    # Topics named explicitly; an unknown topic answers start offset -1 and the zero topic id
    g = await describe(env, "sg", {"foo": [0], "nope": [0, 1]})
    assert by_partition(g) == {("foo", 0): (2, leader, 7), ("nope", 0): (-1, 0, -1), ("nope", 1): (-1, 0, -1)}
    assert [t.topic_id for t in g.topics] == [env.cluster.topic_id("foo"), ZERO]
    # v0 has no Lag on the wire; the rest is the same
    g0 = await describe(env, "sg", version=0)
    assert by_partition(g0)[("foo", 0)][:2] == (2, leader)


async def test_lag_counts_records_after_the_end_and_drops_processed_ones():
    """Control records and compaction gaps after the in-flight window count (the leader has not seen
    them); GAP-acknowledged offsets are archived, so DeliveryCompleteCount takes them out."""
    env = Env(topics={"foo": 1})
    await initialized_group(env)
    env.cluster.leo[("foo", 0)] = 20  # e.g. a commit marker at 19, never fetched yet
    await write(env, "sg", "foo", 0, 10, 0, batches=[(10, 14, 0, 1)])
    assert by_partition(await describe(env, "sg"))[("foo", 0)][2] == 10
    await write(env, "sg", "foo", 0, 10, 3, batches=[(11, 13, 4, 1)])  # GAP: archived, no longer lag
    assert by_partition(await describe(env, "sg"))[("foo", 0)][2] == 7
    # a write without DeliveryCompleteCount (v0): lag unknown
    await write(env, "sg", "foo", 0, 10, 0, version_dcc=False)
    assert by_partition(await describe(env, "sg"))[("foo", 0)][2] == -1


async def test_delivery_complete_count_survives_snapshots_and_restart():
    env = Env(topics={"foo": 1})
    env.share_state.updates_per_snapshot = 2  # updates, then a snapshot, then more updates
    await initialized_group(env)
    env.cluster.leo[("foo", 0)] = 50
    for dcc in (1, 2, 3, 4, 5):
        await write(env, "sg", "foo", 0, 30, dcc)
    assert by_partition(await describe(env, "sg"))[("foo", 0)][2] == 15
    await env.share_state.load()  # replay __share_group_state: snapshots and updates
    env = await env.restart()
    assert by_partition(await describe(env, "sg"))[("foo", 0)][2] == 15


async def test_describe_all_of_an_unknown_or_other_group():
    env = Env()
    g = await describe(env, "nobody")
    assert g.error_code == Errors.GROUP_ID_NOT_FOUND and g.topics == []
    await env.coord.consumer_group_heartbeat(cg_hb("cg"), 0)
    g = await describe(env, "cg")
    assert g.error_code == Errors.GROUP_ID_NOT_FOUND and "not a share group" in g.error_message


def alter_req(group, topic, offsets: dict[int, int]):
    return AlterReq(group_id=group, topics=[AlterReq.AlterShareGroupOffsetsRequestTopic(
        topic_name=topic, partitions=[AlterReq.AlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=o)
                                      for p, o in offsets.items()])])


async def test_alter_sets_start_offsets_at_a_new_state_epoch():
    env = Env(topics={"foo": 2})
    await initialized_group(env)
    g = env.coord.groups["sg"]
    epoch = g.group_epoch
    changed = []
    env.coord.on_share_offsets_changed(changed.append)
    resp = await env.coord.alter_share_group_offsets(alter_req("sg", "foo", {0: 7, 5: 1}))
    assert resp.error_code == 0
    [t] = resp.responses
    assert t.topic_id == env.cluster.topic_id("foo")
    assert [(p.partition_index, p.error_code) for p in t.partitions] == [(0, 0), (5, Errors.UNKNOWN_TOPIC_OR_PARTITION)]
    assert env.coord.groups["sg"].group_epoch == epoch + 1
    state = env.share_state.state_of("sg", env.cluster.topic_id("foo"), 0)
    assert (state.start_offset, state.state_epoch, state.delivery_complete_count) == (7, epoch + 1, 0)
    assert changed == ["sg"]
    env.cluster.leo[("foo", 0)] = 10
    assert by_partition(await describe(env, "sg"))[("foo", 0)] == (7, 0, 3)
    # unknown topic: per partition
    resp = await env.coord.alter_share_group_offsets(alter_req("sg", "nope", {0: 1}))
    assert resp.error_code == 0 and resp.responses[0].partitions[0].error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION


async def test_alter_refused_for_live_or_other_groups():
    env = Env(topics={"foo": 2})
    await env.share_hb("sg", "s1", topics=["foo"])
    resp = await env.coord.alter_share_group_offsets(alter_req("sg", "foo", {0: 1}))
    assert resp.error_code == Errors.NON_EMPTY_GROUP
    await env.coord.consumer_group_heartbeat(cg_hb("cg"), 0)
    resp = await env.coord.alter_share_group_offsets(alter_req("cg", "foo", {0: 1}))
    assert resp.error_code == Errors.GROUP_ID_NOT_FOUND
    resp = await env.coord.alter_share_group_offsets(alter_req("", "foo", {0: 1}))
    assert resp.error_code == Errors.INVALID_GROUP_ID
    # an unknown group is created (Kafka's getOrMaybeCreateShareGroup), empty, with the offsets set
    resp = await env.coord.alter_share_group_offsets(alter_req("fresh", "foo", {1: 4}))
    assert resp.error_code == 0 and env.coord.group_type("fresh") == "share"
    assert env.share_state.state_of("fresh", env.cluster.topic_id("foo"), 1).start_offset == 4


def delete_req(group, *topics):
    return DeleteReq(group_id=group, topics=[DeleteReq.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics])


async def test_delete_offsets_then_the_group_initializes_again():
    env = Env(topics={"foo": 2, "bar": 1})
    await initialized_group(env, topics=("foo", "bar"))
    foo = env.cluster.topic_id("foo")
    await write(env, "sg", "foo", 0, 5, 0)
    env.cluster.add_topic("baz", 1)
    changed = []
    env.coord.on_share_offsets_changed(changed.append)
    resp = await env.coord.delete_share_group_offsets(delete_req("sg", "foo", "nope", "baz"))
    assert resp.error_code == 0
    res = {t.topic_name: (t.error_code, t.error_message) for t in resp.responses}
    assert res == {"foo": (0, None), "nope": (Errors.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this "
                                                                                   "topic-partition."),
                   "baz": (Errors.UNKNOWN_TOPIC_OR_PARTITION, "There is no offset information to delete.")}
    assert env.share_state.state_of("sg", foo, 0) is None
    assert foo not in env.coord.groups["sg"].initialized and changed == ["sg"]
    assert set(by_partition(await describe(env, "sg"))) == {("bar", 0)}
    # a member subscribing again initializes foo afresh (SPSO -1: share.auto.offset.reset applies)
    await env.share_hb("sg", "s2", topics=["foo"])
    await env.advance(0)
    assert env.share_state.state_of("sg", foo, 0).start_offset == -1


async def test_delete_offsets_errors():
    env = Env(topics={"foo": 2})
    resp = await env.coord.delete_share_group_offsets(delete_req("nobody", "foo"))
    assert resp.error_code == Errors.GROUP_ID_NOT_FOUND
    await env.coord.consumer_group_heartbeat(cg_hb("cg"), 0)
    assert (await env.coord.delete_share_group_offsets(delete_req("cg", "foo"))).error_code == Errors.GROUP_ID_NOT_FOUND
    await env.share_hb("sg", "s1", topics=["foo"])
    assert (await env.coord.delete_share_group_offsets(delete_req("sg", "foo"))).error_code == Errors.NON_EMPTY_GROUP
    assert (await env.coord.delete_share_group_offsets(delete_req("", "foo"))).error_code == Errors.INVALID_GROUP_ID


class GatedLog(MemoryRecordLog):
    """A group-coordinator log whose appends wait while ``gate`` is closed (a write held mid-append)."""

    def __init__(self):
        super().__init__()
        self.gate: asyncio.Event | None = None
        self.waiting = asyncio.Event()

    async def append(self, records):
        if self.gate is not None:
            self.waiting.set()
            await self.gate.wait()
        return await super().append(records)


async def test_delete_offsets_checks_the_group_in_write_order():
    """Regression (issue 18): DeleteShareGroupOffsets checked "share group, empty" outside the
    coordinator runtime, so a member whose join was being appended passed the check unseen and
    the persister then deleted the share state that member was being assigned. The check now
    runs in a write, after the join: NON_EMPTY_GROUP, and the state stays."""
    env = Env(topics={"foo": 2}, log=GatedLog())
    await initialized_group(env)
    foo = env.cluster.topic_id("foo")
    deletes = []
    persister_delete = env.share_state.delete_state

    async def delete_state(req):
        deletes.append(req)
        return await persister_delete(req)

    env.share_state.delete_state = delete_state
    entered = asyncio.Event()
    runtime_write = env.coord.runtime.write

    def write(op, **kw):
        entered.set()
        return runtime_write(op, **kw)

    env.log.gate = asyncio.Event()
    join = asyncio.ensure_future(env.share_hb("sg", "s2", topics=["foo"]))
    await asyncio.wait_for(env.log.waiting.wait(), 5)      # the join's records are being appended
    env.coord.runtime.write = write
    delete = asyncio.ensure_future(env.coord.delete_share_group_offsets(delete_req("sg", "foo")))
    await asyncio.wait_for(entered.wait(), 5)             # the delete reached the coordinator runtime
    env.coord.runtime.write = runtime_write
    env.log.gate.set()
    assert (await asyncio.wait_for(join, 5)).error_code == 0
    resp = await asyncio.wait_for(delete, 5)
    assert resp.error_code == Errors.NON_EMPTY_GROUP
    assert deletes == [] and env.share_state.state_of("sg", foo, 0) is not None
    assert foo in env.coord.groups["sg"].initialized
