"""Offsets: OffsetCommit / OffsetFetch / OffsetDelete and every KIP-211 expiration case, with restarts."""
from __future__ import annotations

import asyncio

from coordinator.group import GroupConfig
from coordinator.runtime import decode_record
from protocol.coordinator_records.registry import GROUP_COORDINATOR_RECORDS
from protocol.errors import Errors
from protocol.messages.offset_commit import OffsetCommitRequest
from protocol.messages.offset_delete import OffsetDeleteRequest
from protocol.messages.offset_fetch import OffsetFetchRequest
from test_group_support import Env, cg_hb, commit_req, fetch_offsets, join_req, leave_req, sync_req

MIN = 60 * 1000
DAY = 24 * 60 * MIN
RETENTION = 7 * DAY  # offsets.retention.minutes default 10080
NO_DELAY = GroupConfig(initial_rebalance_delay_ms=0)


def codes(resp) -> dict:
    return {(t.name or t.topic_id, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


async def classic_member(env, group="g", topics=("foo",), session=30000):
    """One member, Stable, subscribed to ``topics``; returns (member id, generation)."""
    task = asyncio.ensure_future(env.coord.join_group(join_req(group, topics=topics, session=session), 3, "c", "h"))
    await env.advance(0)
    r = task.result()
    assert (await env.coord.sync_group(sync_req(group, r.member_id, r.generation_id, {r.member_id: b""}), 3)
            ).error_code == 0
    return r.member_id, r.generation_id


# ---------------------------------------------------------------- commit / fetch
async def test_standalone_commit_and_fetch_all_forms():
    env = Env()
    resp = await env.coord.offset_commit(commit_req("s", {("foo", 0): 10, ("foo", 1): 11, ("bar", 0): 3}), 8)
    assert set(codes(resp).values()) == {0}
    assert await fetch_offsets(env.coord, "s") == {("foo", 0): 10, ("foo", 1): 11, ("bar", 0): 3}
    assert await fetch_offsets(env.coord, "s", {"foo": [0, 2]}) == {("foo", 0): 10, ("foo", 2): -1}
    assert await fetch_offsets(env.coord, "nobody", {"foo": [0]}) == {("foo", 0): -1}
    # v1-7 single-group form
    old = await env.coord.offset_fetch(OffsetFetchRequest(group_id="s", topics=[
        OffsetFetchRequest.OffsetFetchRequestTopic(name="foo", partition_indexes=[1])]), 5)
    assert old.error_code == 0 and old.topics[0].partitions[0].committed_offset == 11
    assert old.topics[0].partitions[0].metadata == "m"
    # The standalone group is an Empty classic group without protocol type.
    g = env.coord.groups["s"]
    assert g.GROUP_TYPE == "classic" and g.state_name() == "Empty" and g.protocol_type is None


async def test_commit_and_fetch_by_topic_id_v10():
    env = Env()
    foo = env.cluster.topic_id("foo")
    req = OffsetCommitRequest(group_id="s", generation_id_or_member_epoch=-1, topics=[
        OffsetCommitRequest.OffsetCommitRequestTopic(topic_id=foo, partitions=[
            OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=2, committed_offset=42)]),
        OffsetCommitRequest.OffsetCommitRequestTopic(topic_id=b"\x99" * 16, partitions=[
            OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])])
    resp = await env.coord.offset_commit(req, 10)
    assert resp.topics[0].topic_id == foo and resp.topics[0].partitions[0].error_code == 0
    assert resp.topics[1].partitions[0].error_code == Errors.UNKNOWN_TOPIC_ID
    fetch = OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id="s", topics=[
        OffsetFetchRequest.OffsetFetchRequestTopics(topic_id=foo, partition_indexes=[2])])])
    got = (await env.coord.offset_fetch(fetch, 10)).groups[0].topics[0]
    assert got.topic_id == foo and got.partitions[0].committed_offset == 42
    all_group = OffsetFetchRequest.OffsetFetchRequestGroup(group_id="s")
    all_group.topics = None
    fetch_all = OffsetFetchRequest(groups=[all_group])
    got = (await env.coord.offset_fetch(fetch_all, 10)).groups[0].topics
    assert [(t.topic_id, t.partitions[0].committed_offset) for t in got] == [(foo, 42)]


async def test_commit_errors():
    env = Env()
    resp = await env.coord.offset_commit(commit_req("s", {("nope", 0): 1}), 8)
    assert codes(resp) == {("nope", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION}
    resp = await env.coord.offset_commit(commit_req("missing", {("foo", 0): 1}, generation=3, member="m"), 8)
    assert codes(resp) == {("foo", 0): Errors.ILLEGAL_GENERATION}
    resp = await env.coord.offset_commit(commit_req("", {("foo", 0): 1}), 8)
    assert codes(resp) == {("foo", 0): Errors.INVALID_GROUP_ID}
    req = commit_req("s", {("foo", 0): 1})
    req.topics[0].partitions[0].committed_metadata = "x" * 4097
    assert codes(await env.coord.offset_commit(req, 8)) == {("foo", 0): Errors.OFFSET_METADATA_TOO_LARGE}


async def test_classic_member_commit_validation():
    env = Env(config=NO_DELAY)
    m, gen = await classic_member(env)
    ok = await env.coord.offset_commit(commit_req("g", {("foo", 0): 5}, generation=gen, member=m), 8)
    assert codes(ok) == {("foo", 0): 0}
    bad = await env.coord.offset_commit(commit_req("g", {("foo", 0): 5}, generation=gen + 1, member=m), 8)
    assert codes(bad) == {("foo", 0): Errors.ILLEGAL_GENERATION}
    bad = await env.coord.offset_commit(commit_req("g", {("foo", 0): 5}, generation=gen, member="x"), 8)
    assert codes(bad) == {("foo", 0): Errors.UNKNOWN_MEMBER_ID}
    bad = await env.coord.offset_commit(commit_req("g", {("foo", 0): 5}), 8)  # standalone into an active group
    assert codes(bad) == {("foo", 0): Errors.UNKNOWN_MEMBER_ID}


async def test_offset_delete():
    env = Env(config=NO_DELAY)
    m, gen = await classic_member(env, topics=("foo",))
    await env.coord.offset_commit(commit_req("g", {("foo", 0): 5, ("bar", 0): 6}, generation=gen, member=m), 8)
    req = OffsetDeleteRequest(group_id="g", topics=[
        OffsetDeleteRequest.OffsetDeleteRequestTopic(name="foo", partitions=[
            OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=0)]),
        OffsetDeleteRequest.OffsetDeleteRequestTopic(name="bar", partitions=[
            OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=0),
            OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=9)])])
    resp = await env.coord.offset_delete(req, 0)
    assert resp.error_code == 0
    assert codes(resp) == {("foo", 0): Errors.GROUP_SUBSCRIBED_TO_TOPIC, ("bar", 0): 0,
                           ("bar", 9): Errors.UNKNOWN_TOPIC_OR_PARTITION}
    assert await fetch_offsets(env.coord, "g") == {("foo", 0): 5}
    req.group_id = "missing"
    assert (await env.coord.offset_delete(req, 0)).error_code == Errors.GROUP_ID_NOT_FOUND


# ---------------------------------------------------------------- KIP-211
async def test_active_group_keeps_offsets_past_retention():
    env = Env(config=NO_DELAY)
    m, gen = await classic_member(env, topics=("foo",))
    await env.coord.offset_commit(commit_req("g", {("foo", 0): 5}, generation=gen, member=m), 8)
    env.sched.now += RETENTION + DAY  # jump the clock: no timer fires, the member stays
    assert await env.coord.expire_offsets() == 0
    assert await fetch_offsets(env.coord, "g") == {("foo", 0): 5}
    assert env.coord.groups["g"].state_name() == "Stable"


async def test_empty_group_expires_after_retention_from_becoming_empty_and_goes_dead():
    env = Env(config=NO_DELAY)
    m, gen = await classic_member(env)
    await env.coord.offset_commit(commit_req("g", {("foo", 0): 5, ("foo", 1): 6}, generation=gen, member=m), 8)
    env.sched.now += 3 * DAY  # the commit is old; the group is still active
    await env.coord.leave_group(leave_req("g", (m, None)), 3)
    group = env.coord.groups["g"]
    empty_since = env.sched.now
    assert group.state_name() == "Empty" and group.current_state_timestamp == empty_since
    # Retention counts from when the group became Empty, not from the commit.
    env.sched.now = empty_since + RETENTION - 1
    assert await env.coord.expire_offsets() == 0
    assert await fetch_offsets(env.coord, "g") == {("foo", 0): 5, ("foo", 1): 6}
    env.sched.now += 1
    assert await env.coord.expire_offsets() == 2
    assert "g" not in env.coord.groups  # Dead: removed with its offsets
    assert await fetch_offsets(env.coord, "g") == {}
    env2 = await env.restart()
    assert "g" not in env2.coord.groups and env2.coord.offsets.group_offsets("g") == {}


async def test_empty_group_retention_clock_survives_restart():
    env = Env(config=NO_DELAY)
    m, gen = await classic_member(env)
    await env.coord.offset_commit(commit_req("g", {("foo", 0): 5}, generation=gen, member=m), 8)
    await env.coord.leave_group(leave_req("g", (m, None)), 3)
    empty_since = env.sched.now
    env.sched.now += 5 * DAY
    env = await env.restart()
    g = env.coord.groups["g"]
    assert g.state_name() == "Empty" and g.current_state_timestamp == empty_since and g.protocol_type == "consumer"
    env.sched.now = empty_since + RETENTION - 1
    assert await env.coord.expire_offsets() == 0
    env.sched.now += 1
    assert await env.coord.expire_offsets() == 1 and "g" not in env.coord.groups


async def test_rejoining_an_empty_group_stops_the_clock():
    env = Env(config=NO_DELAY)
    m, gen = await classic_member(env)
    await env.coord.offset_commit(commit_req("g", {("foo", 0): 5}, generation=gen, member=m), 8)
    await env.coord.leave_group(leave_req("g", (m, None)), 3)
    env.sched.now += RETENTION - 1000
    m2, gen2 = await classic_member(env)
    env.sched.now += 2 * RETENTION
    assert await env.coord.expire_offsets() == 0
    assert await fetch_offsets(env.coord, "g") == {("foo", 0): 5}


async def test_active_group_expires_unsubscribed_topic_by_commit_time():
    env = Env(config=NO_DELAY)
    m, gen = await classic_member(env, topics=("foo",))
    await env.coord.offset_commit(commit_req("g", {("foo", 0): 5, ("bar", 0): 7}, generation=gen, member=m), 8)
    committed = env.sched.now
    env.sched.now = committed + RETENTION - 1
    assert await env.coord.expire_offsets() == 0
    env.sched.now += 1
    assert await env.coord.expire_offsets() == 1
    assert await fetch_offsets(env.coord, "g") == {("foo", 0): 5}
    assert env.coord.groups["g"].state_name() == "Stable"
    env2 = await env.restart()
    assert env2.coord.offsets.group_offsets("g").keys() == {"foo"}


async def test_rebalancing_group_expires_nothing():
    env = Env(config=GroupConfig(initial_rebalance_delay_ms=0))
    m, gen = await classic_member(env, topics=("foo",))
    await env.coord.offset_commit(commit_req("g", {("bar", 0): 7}, generation=gen, member=m), 8)
    asyncio.ensure_future(env.coord.join_group(join_req("g"), 3, "c", "h"))  # a new member joins
    await env.advance(0)
    assert env.coord.groups["g"].state_name() == "PreparingRebalance"  # m has not rejoined yet
    env.sched.now += 2 * RETENTION
    assert await env.coord.expire_offsets() == 0


async def test_standalone_offsets_expire_by_commit_time():
    env = Env()
    await env.coord.offset_commit(commit_req("s", {("foo", 0): 1}), 8)
    t0 = env.sched.now
    env.sched.now = t0 + DAY
    await env.coord.offset_commit(commit_req("s", {("foo", 1): 2}), 8)
    env.sched.now = t0 + RETENTION - 1
    assert await env.coord.expire_offsets() == 0
    env.sched.now = t0 + RETENTION
    assert await env.coord.expire_offsets() == 1
    assert await fetch_offsets(env.coord, "s") == {("foo", 1): 2}
    assert "s" in env.coord.groups
    env.sched.now = t0 + DAY + RETENTION
    assert await env.coord.expire_offsets() == 1
    assert "s" not in env.coord.groups
    env2 = await env.restart()
    assert "s" not in env2.coord.groups


async def test_explicit_retention_keeps_its_own_expiry():
    env = Env(config=NO_DELAY)
    # Standalone, v2 with RetentionTimeMs = 1 hour: gone after an hour, not a week.
    req = commit_req("s", {("foo", 0): 1}, retention=60 * MIN)
    assert set(codes(await env.coord.offset_commit(req, 2)).values()) == {0}
    rec = decode_record(GROUP_COORDINATOR_RECORDS, *env.log.records[-1][1:])
    assert rec.value_version == 1 and rec.value.expire_timestamp == env.sched.now + 60 * MIN
    # A long explicit retention outlives the default one.
    await env.coord.offset_commit(commit_req("s", {("foo", 1): 1}, retention=30 * DAY), 3)
    env.sched.now += 60 * MIN
    env = await env.restart()  # the expire timestamp is persisted
    assert await env.coord.expire_offsets() == 1
    env.sched.now += RETENTION
    assert await env.coord.expire_offsets() == 0
    assert await fetch_offsets(env.coord, "s") == {("foo", 1): 1}
    env.sched.now += 30 * DAY
    assert await env.coord.expire_offsets() == 1 and "s" not in env.coord.groups
    # In an active group, on a subscribed topic, the explicit expiry still applies (KIP-211 compatibility).
    m, gen = await classic_member(env, group="g", topics=("foo",))
    await env.coord.offset_commit(commit_req("g", {("foo", 2): 9}, generation=gen, member=m, retention=MIN), 4)
    env.sched.now += MIN
    assert await env.coord.expire_offsets() == 1
    assert env.coord.groups["g"].state_name() == "Stable"
    # RetentionTimeMs -1 (the default) means broker retention, and v5+ has no such field.
    await env.coord.offset_commit(commit_req("s2", {("foo", 0): 1}, retention=-1), 4)
    rec = decode_record(GROUP_COORDINATOR_RECORDS, *env.log.records[-1][1:])
    assert rec.value_version in (3, 4) and rec.value.expire_timestamp == -1


async def test_consumer_group_expires_only_unsubscribed_topics():
    env = Env()
    r = await env.coord.consumer_group_heartbeat(cg_hb("cg", "m1", topics=["foo"]), 1, "c", "h")
    await env.coord.offset_commit(commit_req("cg", {("foo", 0): 1, ("bar", 0): 2}, generation=r.member_epoch,
                                             member="m1"), 9)
    env.sched.now += RETENTION
    assert await env.coord.expire_offsets() == 1
    assert await fetch_offsets(env.coord, "cg") == {("foo", 0): 1}


async def test_empty_groups_without_offsets_are_deleted_by_the_cleanup():
    env = Env()
    r = await env.coord.join_group(join_req("g"), 5, "c", "h")  # MEMBER_ID_REQUIRED creates an Empty group
    assert r.error_code == Errors.MEMBER_ID_REQUIRED and "g" in env.coord.groups
    await env.coord.expire_offsets()
    assert "g" not in env.coord.groups


async def test_cleanup_runs_on_its_own_timer():
    env = Env(config=GroupConfig(offsets_retention_ms=10 * MIN, offsets_retention_check_interval_ms=MIN))
    await env.coord.load()
    await env.coord.offset_commit(commit_req("s", {("foo", 0): 1}), 8)
    await env.advance(9 * MIN)
    assert await fetch_offsets(env.coord, "s") == {("foo", 0): 1}
    await env.advance(MIN)
    assert await fetch_offsets(env.coord, "s") == {}
    assert "s" not in env.coord.groups


async def test_broker_config_names():
    from broker.config import BrokerConfig
    cfg = GroupConfig.from_broker_config(BrokerConfig({"offsets.retention.minutes": "5",
                                                       "offsets.retention.check.interval.ms": "1000",
                                                       "group.initial.rebalance.delay.ms": "0"}))
    assert cfg.offsets_retention_ms == 5 * MIN and cfg.offsets_retention_check_interval_ms == 1000
    assert cfg.initial_rebalance_delay_ms == 0
    d = GroupConfig.from_broker_config(BrokerConfig())
    assert d.offsets_retention_ms == 10080 * MIN and d.offsets_retention_check_interval_ms == 600000
    assert (d.min_session_timeout_ms, d.max_session_timeout_ms) == (6000, 1800000)
    assert d.consumer_assignors[0] == "uniform"
