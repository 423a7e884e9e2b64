"""Coordinators load in the background (Kafka's CoordinatorRuntime / CoordinatorLoaderImpl).

- Until a load is done every entry point answers COORDINATOR_LOAD_IN_PROGRESS in its API's shape.
- ``latest_only`` loading (compacted logs) replays just the latest record of each key and gives the
  same coordinator as replaying every record, transactions included.
- A long load gives the event loop a turn every few milliseconds.
"""
from __future__ import annotations

import asyncio

from broker.internal_topics import PartitionRecordLog
from broker.log import PartitionLog
from coordinator.group import GroupConfig
from coordinator.runtime import MemoryRecordLog
from coordinator.share_state import ShareCoordinator
from coordinator.transaction import TransactionCoordinator
from protocol.errors import Errors
from protocol.messages.consumer_group_describe import ConsumerGroupDescribeRequest
from protocol.messages.delete_groups import DeleteGroupsRequest
from protocol.messages.describe_groups import DescribeGroupsRequest
from protocol.messages.list_groups import ListGroupsRequest
from protocol.messages.offset_fetch import OffsetFetchRequest
from protocol.messages.read_share_group_state import ReadShareGroupStateRequest as ReadReq
from protocol.messages.share_group_describe import ShareGroupDescribeRequest
from protocol.messages.txn_offset_commit import TxnOffsetCommitRequest
from test_group_support import Env, cg_hb, commit_req, hb_req, join_req

LOADING = Errors.COORDINATOR_LOAD_IN_PROGRESS
NO_DELAY = GroupConfig(initial_rebalance_delay_ms=0)


class Gate:
    """A test hold: loading waits until ``open()``."""

    def __init__(self):
        self.event = asyncio.Event()

    async def __call__(self):
        await self.event.wait()

    def open(self):
        self.event.set()


def partition_log(tmp_path, name="__consumer_offsets"):
    return PartitionLog(str(tmp_path / f"{name}-0"), name, 0, {"segment.bytes": 20_000}, clean_shutdown=True)


def txn_commit_req(group, offsets: dict, tid="tx"):
    by_topic: dict = {}
    for (t, p), o in offsets.items():
        by_topic.setdefault(t, []).append(TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
            partition_index=p, committed_offset=o, committed_leader_epoch=-1, committed_metadata=""))
    return TxnOffsetCommitRequest(transactional_id=tid, group_id=group, producer_id=0, producer_epoch=0,
                                  generation_id_or_member_epoch=-1, member_id="", topics=[
                                      TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=t, partitions=ps)
                                      for t, ps in by_topic.items()])


async def history(env, plog) -> None:
    """Offsets overwritten many times, a consumer group whose member left, a share group, a deleted group,
    and transactional commits: one committed, one aborted, one still open."""
    c = env.coord
    for i in range(60):
        await c.offset_commit(commit_req("simple", {("foo", p): 10 * i + p for p in range(3)}), 8)
    for m in ("m1", "m2"):
        assert (await c.consumer_group_heartbeat(cg_hb("cg", m, topics=("foo", "bar")), 1)).error_code == 0
    assert (await c.consumer_group_heartbeat(cg_hb("cg", "m2", epoch=-1), 1)).error_code == 0
    await c.offset_commit(commit_req("cg", {("foo", 0): 5}), 8)
    assert (await env.share_hb("sg", "s1", topics=("bar",))).error_code == 0
    await c.offset_commit(commit_req("doomed", {("bar", 1): 9}), 8)
    assert (await c.delete_groups(DeleteGroupsRequest(groups_names=["doomed"]), 2)).results[0].error_code == 0
    for pid, commit, offset in ((7, True, 70), (8, False, 80), (9, None, 90)):
        await c.txn_offset_commit(txn_commit_req("simple", {("bar", 0): offset}), pid, 0)
        await c.txn_offset_commit(txn_commit_req("simple", {("bar", 0): offset + 1}), pid, 0)
        if commit is not None:
            plog.append_control(pid, 0, commit)
            c.complete_transaction(pid, commit)
    await c.offset_commit(commit_req("simple", {("foo", 0): 999}), 8)


async def observed(c) -> list:
    """What clients can see of a coordinator, encoded (so two coordinators compare byte for byte)."""
    groups = sorted(c.groups)
    out = [c.list_groups(ListGroupsRequest(), 5).encode(5),
           c.describe_groups(DescribeGroupsRequest(groups=groups), 5).encode(5),
           c.consumer_group_describe(ConsumerGroupDescribeRequest(group_ids=groups), 1).encode(1),
           c.share_group_describe(ShareGroupDescribeRequest(group_ids=groups), 1).encode(1)]
    for g in groups:
        req = OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=g)])
        req.groups[0].topics = None  # every offset of the group
        out.append((await c.offset_fetch(req, 8)).encode(8))
    out.append(sorted((pid, sorted(held)) for pid, held in c.offsets.pending.items()))
    return out


async def test_latest_only_load_equals_a_full_replay(tmp_path):
    plog = partition_log(tmp_path)
    env = Env(config=NO_DELAY, log=PartitionRecordLog(plog))
    await history(env, plog)
    await env.advance(0)
    expected = await observed(env.coord)
    assert plog.log_end_offset > 150  # history: far more records than live keys

    latest = Env(config=NO_DELAY, log=PartitionRecordLog(plog), cluster=env.cluster, sched=env.sched,
                 share_state=env.share_state)
    seen = []
    latest.coord.runtime._replay = lambda offset, rec: (seen.append(offset), latest.coord.replay(rec))
    await latest.coord.load()
    assert await observed(latest.coord) == expected
    assert seen == sorted(seen) and len(seen) == len(set(seen))  # in log order, each record once

    full = Env(config=NO_DELAY, log=PartitionRecordLog(plog), cluster=env.cluster, sched=env.sched,
               share_state=env.share_state)
    await full.coord.runtime.load(latest_only=False, after=full.coord._loaded)
    assert await observed(full.coord) == expected
    assert len(seen) < plog.log_end_offset / 3  # only live keys were decoded and replayed


async def test_group_apis_answer_load_in_progress_until_loaded():
    env = Env(config=NO_DELAY)
    await env.coord.offset_commit(commit_req("g", {("foo", 0): 42}), 8)
    again = Env(config=NO_DELAY, log=env.log, cluster=env.cluster, sched=env.sched, share_state=env.share_state)
    c = again.coord
    gate = Gate()
    c.start_loading(gate)
    assert c.unavailable_code() == LOADING
    fetch = OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id="g", topics=[
        OffsetFetchRequest.OffsetFetchRequestTopics(name="foo", partition_indexes=[0])])])
    assert (await c.offset_fetch(fetch, 8)).groups[0].error_code == LOADING
    r = await c.offset_commit(commit_req("g", {("foo", 0): 43, ("bar", 1): 1}), 8)
    assert {p.error_code for t in r.topics for p in t.partitions} == {LOADING}
    assert (await c.join_group(join_req("cg2"), 5)).error_code == LOADING
    assert (await c.heartbeat(hb_req("g", "m", 1), 3)).error_code == Errors.NONE  # Kafka answers it blindly
    assert (await c.consumer_group_heartbeat(cg_hb("cg", "m1"), 1)).error_code == LOADING
    assert (await c.consumer_group_heartbeat(cg_hb("", "m1"), 1)).error_code == Errors.INVALID_REQUEST
    assert (await again.share_hb("sg", "s1")).error_code == LOADING
    assert c.list_groups(ListGroupsRequest(), 5).error_code == LOADING
    assert c.describe_groups(DescribeGroupsRequest(groups=["g"]), 5).groups[0].error_code == LOADING
    assert (await c.delete_groups(DeleteGroupsRequest(groups_names=["g"]), 2)).results[0].error_code == LOADING
    assert env.log.records[-1][0] == len(env.log.records) - 1  # nothing was written meanwhile
    gate.open()
    await c.wait_loaded()
    assert c.unavailable_code() == Errors.NONE
    r = await c.offset_fetch(fetch, 8)
    assert r.groups[0].error_code == 0 and r.groups[0].topics[0].partitions[0].committed_offset == 42


async def test_transaction_apis_answer_load_in_progress_then_prepared_ones_complete():
    log = MemoryRecordLog()
    markers = []

    async def write_markers(pid, epoch, commit, partitions):
        markers.append((pid, commit))

    def coordinator():
        return TransactionCoordinator(log, new_producer_id=iter(range(100, 200)).__next__, write_markers=write_markers,
                                      now_ms=lambda: 1_000, max_timeout_ms=60_000)

    first = coordinator()
    err, pid, epoch = await first.init_producer_id("app", 30_000)
    assert err == 0 and await first.add_partitions("app", pid, epoch, [("t", 0)]) == 0
    # the broker stops between PrepareCommit and the markers: the record is there, no Complete
    n = first.txns["app"].transit()
    n.state = 2  # PREPARE_COMMIT
    await first._commit(n)

    txns = coordinator()
    gate = Gate()
    txns.start_loading(gate)
    assert await txns.init_producer_id("app", 30_000) == (LOADING, -1, -1)
    assert await txns.init_producer_id("", 30_000) == (Errors.INVALID_REQUEST, -1, -1)  # validated first
    assert await txns.add_partitions("app", pid, epoch, [("t", 1)]) == LOADING
    assert txns.verify("app", pid, epoch, ("t", 0)) == LOADING
    assert (await txns.end_txn("app", pid, epoch, True))[0] == LOADING
    assert await txns.abort_timed_out(now=10**12) == 0
    gate.open()
    await txns.wait_loaded()
    await txns.drain()
    assert markers == [(pid, True)]  # the prepared commit was completed once loaded
    assert txns.txns["app"].state_name == "CompleteCommit"


async def test_share_state_wire_answers_load_in_progress_but_the_persister_waits():
    sc = ShareCoordinator(MemoryRecordLog(), None, lambda: 0)
    gate = Gate()
    sc.start_loading(gate)
    req = ReadReq(group_id="g", topics=[ReadReq.ReadStateData(topic_id=b"\x01" * 16, partitions=[
        ReadReq.PartitionData(partition=0, leader_epoch=0)])])
    assert (await sc.read_state(req)).results[0].partitions[0].error_code == LOADING
    waiting = asyncio.ensure_future(sc.persister().read_state(req))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    gate.open()
    # past the load: an uninitialized partition, as any read after loading would answer
    assert (await waiting).results[0].partitions[0].error_code == Errors.INVALID_REQUEST


async def test_a_long_load_gives_the_loop_turns(tmp_path, monkeypatch):
    plog = partition_log(tmp_path)
    env = Env(config=NO_DELAY, log=PartitionRecordLog(plog))
    for i in range(400):  # 400 batches of 3 records
        await env.coord.offset_commit(commit_req("g", {("foo", p): i for p in range(3)}), 8)
    again = Env(config=NO_DELAY, log=PartitionRecordLog(plog), cluster=env.cluster, sched=env.sched)
    monkeypatch.setattr(again.coord.runtime, "LOAD_YIELD_S", 0.0)  # every pause point yields
    turns = 0

    async def other():
        nonlocal turns
        while again.coord.unavailable_code():
            turns += 1
            await asyncio.sleep(0)

    again.coord.start_loading()
    spinner = asyncio.ensure_future(other())
    await again.coord.wait_loaded()
    await spinner
    assert turns >= 10  # the load paused between chunks instead of running in one go


async def test_share_fetch_waits_for_the_share_coordinator_then_delivers():
    from broker.delayed import Watchers
    from broker.share.manager import SharePartitionManager
    from protocol.messages.initialize_share_group_state import InitializeShareGroupStateRequest as Init
    from tests.unit.test_share_manager import GROUP, TOPIC, Config, Connection, GroupConfigs, Log, Logs, fetch

    log = MemoryRecordLog()
    first = ShareCoordinator(log, None, lambda: 0)
    await first.load()
    r = await first.initialize_state(Init(group_id=GROUP, topics=[Init.InitializeStateData(
        topic_id=TOPIC, partitions=[Init.PartitionData(partition=0, state_epoch=0, start_offset=0)])]))
    assert r.results[0].partitions[0].error_code == 0
    sc = ShareCoordinator(log, None, lambda: 0)
    gate = Gate()
    sc.start_loading(gate)
    loop = asyncio.get_running_loop()
    mgr = SharePartitionManager(Config(), logs=Logs(Log((5, 5))), watchers=Watchers(), persister=sc.persister(),
                                group_configs=GroupConfigs(), scheduler=loop, now_ms=lambda: int(loop.time() * 1000))
    conn = Connection()
    try:
        res = await fetch(mgr, conn, 0, max_wait_ms=50)  # Kafka: the partition initializes, the fetch waits
        assert [(p.partition, p.error, p.acquired) for p in res.partitions] == [(0, Errors.NONE, [])]
        waiting = asyncio.ensure_future(fetch(mgr, conn, 1, max_wait_ms=30_000))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        gate.open()  # the load ends: the waiting fetch is woken and delivers
        res = await asyncio.wait_for(waiting, 10)
        assert [p.acquired for p in res.partitions] == [[(0, 9, 1)]]
    finally:
        await mgr.close()


async def test_a_record_of_a_newer_value_version_fails_the_load(caplog):
    """Kafka's CoordinatorRecordSerde: a value version above the highest known is never read with an
    older schema; the load fails (one error line) and the coordinator answers COORDINATOR_NOT_AVAILABLE."""
    from coordinator.runtime import encode_record
    from protocol.coordinator_records.share_snapshot import ShareSnapshotKey, ShareSnapshotValue

    log = MemoryRecordLog()
    key, value = encode_record(ShareSnapshotKey(group_id="g", topic_id=b"\x01" * 16, partition=0),
                               ShareSnapshotValue(start_offset=5))
    newer = (ShareSnapshotValue.MAX_VERSION + 1).to_bytes(2, "big") + value[2:]
    await log.append([(key, value), (key, newer)])
    sc = ShareCoordinator(log, None, lambda: 0)
    sc.start_loading()
    await sc.wait_loaded()
    req = ReadReq(group_id="g", topics=[ReadReq.ReadStateData(topic_id=b"\x01" * 16, partitions=[
        ReadReq.PartitionData(partition=0, leader_epoch=0)])])
    assert (await sc.read_state(req)).results[0].partitions[0].error_code == Errors.COORDINATOR_NOT_AVAILABLE
    failed = [r for r in caplog.records if "loading failed" in r.getMessage()]
    assert len(failed) == 1 and failed[0].exc_info is None
    assert f"value version {ShareSnapshotValue.MAX_VERSION + 1}" in failed[0].getMessage()
