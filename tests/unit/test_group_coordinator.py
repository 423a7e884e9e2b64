"""Group coordinator, classic protocol and admin APIs: unit tests on a memory log and a fake clock."""
from __future__ import annotations

import asyncio

from coordinator.group import GroupConfig
from coordinator.group.classic import COMPLETING_REBALANCE, EMPTY, PREPARING_REBALANCE, STABLE
from protocol.errors import Errors
from protocol.messages.delete_groups import DeleteGroupsRequest
from protocol.messages.describe_groups import DescribeGroupsRequest
from protocol.messages.list_groups import ListGroupsRequest
from test_group_support import (
    Env, cg_hb, commit_req, hb_req, join_req, leave_req, subscription, sync_req)

NO_DELAY = GroupConfig(initial_rebalance_delay_ms=0)


async def first_join(env, group="g", version=5, **kw):
    """Join twice (MEMBER_ID_REQUIRED, then with the id); returns the parked task and member id."""
    resp = await env.coord.join_group(join_req(group, **kw), version, "client", "/127.0.0.1")
    assert resp.error_code == Errors.MEMBER_ID_REQUIRED
    member = resp.member_id
    assert member.startswith("client-")
    task = asyncio.ensure_future(env.coord.join_group(join_req(group, member=member, **kw), version, "client",
                                                      "/127.0.0.1"))
    await env.advance(0)
    return task, member


async def stable_group(env, n=1, group="g", version=5):
    """n members through join + sync; returns (generation, [member ids], leader)."""
    tasks, members = [], []
    for _ in range(n):
        t, m = await first_join(env, group, version)
        tasks.append(t)
        members.append(m)
    for _ in range(20):
        if all(t.done() for t in tasks):
            break
        await env.advance(max(env.coord.cfg.initial_rebalance_delay_ms, 1))
    resps = [t.result() for t in tasks]
    gen = resps[0].generation_id
    leader = resps[0].leader
    syncs = [asyncio.ensure_future(env.coord.sync_group(
        sync_req(group, m, gen, {x: x.encode() for x in members} if m == leader else None), 3))
        for m in members]
    await env.advance(0)
    for s in syncs:
        assert s.result().error_code == 0
    return gen, members, leader


async def test_join_member_id_required_then_initial_delay():
    env = Env()
    task, member = await first_join(env)
    group = env.coord.groups["g"]
    assert group.state == PREPARING_REBALANCE
    await env.advance(2999)
    assert not task.done()
    await env.advance(1)
    resp = task.result()
    assert resp.error_code == 0
    assert resp.generation_id == 1 and resp.leader == member and resp.member_id == member
    assert resp.protocol_name == "range" and resp.protocol_type == "consumer"
    assert [m.member_id for m in resp.members] == [member]
    assert group.state == COMPLETING_REBALANCE


async def test_initial_delay_extended_by_new_members_up_to_rebalance_timeout():
    env = Env(config=GroupConfig(initial_rebalance_delay_ms=3000))
    t1, m1 = await first_join(env, rebalance=7000)
    await env.advance(2500)
    t2, m2 = await first_join(env, rebalance=7000)
    await env.advance(500)  # first delay over, but a member was added: extended
    assert not t1.done()
    await env.advance(2999)
    assert not t1.done()
    await env.advance(1)
    assert t1.result().generation_id == 1 and t2.result().generation_id == 1
    assert len(t1.result().members) + len(t2.result().members) == 2


async def test_sync_hands_out_leader_assignment_and_persists_it():
    env = Env()
    gen, members, leader = await stable_group(env, n=2)
    group = env.coord.groups["g"]
    assert group.state == STABLE
    follower = next(m for m in members if m != leader)
    resp = await env.coord.sync_group(sync_req("g", follower, gen), 5)
    assert resp.error_code == 0 and resp.assignment == follower.encode()
    assert resp.protocol_type == "consumer" and resp.protocol_name == "range"
    # The GroupMetadata record with the assignment is in the log.
    env2 = await env.restart()
    g2 = env2.coord.groups["g"]
    assert g2.state == STABLE and g2.generation_id == gen
    assert {m.member_id: m.assignment for m in g2.members.values()} == {m: m.encode() for m in members}
    # Loaded members got session timers: the members that do not come back are expired.
    await env2.advance(10000)
    assert g2.state == EMPTY and g2.generation_id == gen + 1


async def test_heartbeat_errors_and_generation_fencing():
    env = Env()
    gen, (m,), _ = await stable_group(env)
    hb = env.coord.heartbeat
    assert (await hb(hb_req("g", m, gen), 4)).error_code == 0
    assert (await hb(hb_req("g", m, gen + 1), 4)).error_code == Errors.ILLEGAL_GENERATION
    assert (await hb(hb_req("g", "nobody", gen), 4)).error_code == Errors.UNKNOWN_MEMBER_ID
    assert (await hb(hb_req("missing", m, gen), 4)).error_code == Errors.UNKNOWN_MEMBER_ID
    assert (await hb(hb_req("", m, gen), 4)).error_code == Errors.INVALID_GROUP_ID
    resp = await env.coord.sync_group(sync_req("g", m, gen + 5), 5)
    assert resp.error_code == Errors.ILLEGAL_GENERATION


async def test_session_timeout_expires_member_and_group_becomes_empty():
    env = Env()
    gen, (m,), _ = await stable_group(env)
    await env.advance(9999)
    assert env.coord.groups["g"].state == STABLE
    assert (await env.coord.heartbeat(hb_req("g", m, gen), 4)).error_code == 0
    await env.advance(9999)
    assert env.coord.groups["g"].state == STABLE
    await env.advance(1)
    group = env.coord.groups["g"]
    assert group.state == EMPTY and not group.members and group.generation_id == gen + 1
    assert group.current_state_timestamp == env.sched.now
    env2 = await env.restart()
    assert env2.coord.groups["g"].state == EMPTY
    assert env2.coord.groups["g"].current_state_timestamp == group.current_state_timestamp


async def test_rebalance_on_join_and_leave():
    env = Env()
    gen, (m1,), _ = await stable_group(env)
    # A second member joins: the group rebalances; m1 learns it from its heartbeat.
    t2, m2 = await first_join(env)
    assert env.coord.groups["g"].state == PREPARING_REBALANCE
    assert (await env.coord.heartbeat(hb_req("g", m1, gen), 4)).error_code == Errors.REBALANCE_IN_PROGRESS
    t1 = asyncio.ensure_future(env.coord.join_group(join_req("g", member=m1), 5, "client", "h"))
    await env.advance(0)
    r1, r2 = t1.result(), t2.result()
    assert r1.generation_id == r2.generation_id == gen + 1
    assert r1.leader == m1 and len(r1.members) == 2 and r2.members == []
    # m1 leaves: rebalance; m2 rejoins alone and becomes leader.
    resp = await env.coord.leave_group(leave_req("g", (m1, None)), 3)
    assert resp.error_code == 0 and resp.members[0].error_code == 0
    assert env.coord.groups["g"].state == PREPARING_REBALANCE
    t2 = asyncio.ensure_future(env.coord.join_group(join_req("g", member=m2), 5, "client", "h"))
    await env.advance(0)
    assert t2.result().generation_id == gen + 2 and t2.result().leader == m2


async def test_rebalance_timeout_removes_members_that_do_not_rejoin():
    env = Env()
    gen, (m1, m2), leader = await stable_group(env, n=2)
    t1 = asyncio.ensure_future(env.coord.join_group(join_req("g", member=m1, session=30000), 5, "c", "h"))
    await env.advance(0)
    assert not t1.done()
    for _ in range(5):  # m2 keeps its session alive but never rejoins
        await env.advance(5000)
        assert (await env.coord.heartbeat(hb_req("g", m2, gen), 4)).error_code == Errors.REBALANCE_IN_PROGRESS
    assert not t1.done()
    await env.advance(5000)  # rebalance timeout
    r1 = t1.result()
    assert r1.error_code == 0 and r1.generation_id == gen + 1 and r1.leader == m1
    assert list(env.coord.groups["g"].members) == [m1]


async def test_leave_group_v0_unknown_member_and_empty_group():
    env = Env()
    gen, (m,), _ = await stable_group(env)
    from protocol.messages.leave_group import LeaveGroupRequest
    resp = await env.coord.leave_group(LeaveGroupRequest(group_id="g", member_id="nobody"), 0)
    assert resp.error_code == Errors.UNKNOWN_MEMBER_ID
    resp = await env.coord.leave_group(LeaveGroupRequest(group_id="g", member_id=m), 0)
    assert resp.error_code == 0
    assert env.coord.groups["g"].state == EMPTY
    resp = await env.coord.leave_group(LeaveGroupRequest(group_id="nope", member_id=m), 1)
    assert resp.error_code == Errors.UNKNOWN_MEMBER_ID


async def test_join_validation_errors():
    env = Env()
    r = await env.coord.join_group(join_req("g", session=5999), 5, "c", "h")
    assert r.error_code == Errors.INVALID_SESSION_TIMEOUT
    r = await env.coord.join_group(join_req("g", session=1800001), 5, "c", "h")
    assert r.error_code == Errors.INVALID_SESSION_TIMEOUT
    r = await env.coord.join_group(join_req(""), 5, "c", "h")
    assert r.error_code == Errors.INVALID_GROUP_ID
    r = await env.coord.join_group(join_req("g", member="ghost"), 5, "c", "h")
    assert r.error_code == Errors.UNKNOWN_MEMBER_ID


async def test_join_v3_needs_no_member_id_and_protocol_mismatch_is_rejected():
    env = Env(config=NO_DELAY)
    task = asyncio.ensure_future(env.coord.join_group(join_req("g"), 3, "c", "h"))
    await env.advance(0)
    resp = task.result()
    assert resp.error_code == 0 and resp.member_id.startswith("c-") and resp.generation_id == 1
    other = join_req("g", protocols=[("roundrobin", subscription("foo"))])
    resp = await env.coord.join_group(other, 3, "c", "h")
    assert resp.error_code == Errors.INCONSISTENT_GROUP_PROTOCOL


async def test_group_max_size():
    env = Env(config=GroupConfig(initial_rebalance_delay_ms=0, classic_max_size=1))
    await stable_group(env)
    resp = await env.coord.join_group(join_req("g"), 3, "c", "h")
    assert resp.error_code == Errors.GROUP_MAX_SIZE_REACHED


async def test_protocol_selection_by_vote():
    env = Env(config=GroupConfig(initial_rebalance_delay_ms=0))
    p_a = [("range", subscription("foo")), ("roundrobin", subscription("foo"))]
    p_b = [("roundrobin", subscription("foo")), ("range", subscription("foo"))]
    p_c = [("roundrobin", subscription("foo"))]
    t = [asyncio.ensure_future(env.coord.join_group(join_req("g", protocols=p), 3, "c", "h")) for p in (p_a, p_b)]
    await env.advance(0)
    # Only protocols every member supports are candidates.
    gen = t[0].result().generation_id
    assert t[0].result().protocol_name in ("range", "roundrobin")
    m1 = t[0].result().member_id
    t3 = asyncio.ensure_future(env.coord.join_group(join_req("g", protocols=p_c), 3, "c", "h"))
    await env.advance(0)
    t1 = asyncio.ensure_future(env.coord.join_group(join_req("g", member=m1, protocols=p_a), 3, "c", "h"))
    _second = asyncio.ensure_future(env.coord.join_group(join_req("g", member=t[1].result().member_id, protocols=p_b),
                                                    3, "c", "h"))
    await env.advance(0)
    assert t3.result().generation_id == gen + 1
    assert t1.result().protocol_name == "roundrobin"


# ---------------------------------------------------------------- static membership
async def test_static_member_rejoin_replaces_without_rebalance_and_fences_old_id():
    env = Env(config=NO_DELAY)
    task = asyncio.ensure_future(env.coord.join_group(join_req("g", instance="i1"), 5, "c", "h"))
    await env.advance(0)
    r = task.result()
    old, gen = r.member_id, r.generation_id
    assert old.startswith("i1-")
    assert (await env.coord.sync_group(sync_req("g", old, gen, {old: b"A"}, instance="i1"), 5)).assignment == b"A"
    # Restarted instance: unknown member id, same instance id -> new id, same generation, no rebalance.
    r2 = await env.coord.join_group(join_req("g", instance="i1"), 5, "c", "h")
    new = r2.member_id
    assert r2.error_code == 0 and new != old and r2.generation_id == gen
    assert r2.leader == old  # v<9: the old leader id, so the member does not reassign
    group = env.coord.groups["g"]
    assert group.state == STABLE and list(group.members) == [new] and group.leader_id == new
    s = await env.coord.sync_group(sync_req("g", new, gen, instance="i1"), 5)
    assert s.error_code == 0 and s.assignment == b"A"
    # The old id is fenced.
    assert (await env.coord.heartbeat(hb_req("g", old, gen, instance="i1"), 4)).error_code == \
        Errors.FENCED_INSTANCE_ID
    r3 = await env.coord.join_group(join_req("g", member=old, instance="i1"), 5, "c", "h")
    assert r3.error_code == Errors.FENCED_INSTANCE_ID
    # v9: the rejoining static leader gets the member list and SkipAssignment.
    r4 = await env.coord.join_group(join_req("g", instance="i1"), 9, "c", "h")
    assert r4.skip_assignment and r4.leader == r4.member_id and len(r4.members) == 1
    # The replacement is durable.
    env2 = await env.restart()
    assert list(env2.coord.groups["g"].members) == [r4.member_id]


async def test_static_member_leave_by_instance_id():
    env = Env(config=NO_DELAY)
    task = asyncio.ensure_future(env.coord.join_group(join_req("g", instance="i1"), 5, "c", "h"))
    await env.advance(0)
    resp = await env.coord.leave_group(leave_req("g", ("", "i1"), ("", "i2")), 4)
    assert [m.error_code for m in resp.members] == [0, Errors.UNKNOWN_MEMBER_ID]
    assert env.coord.groups["g"].state == EMPTY
    assert task.result().error_code == 0


# ---------------------------------------------------------------- admin APIs
async def test_list_groups_filters_by_state_and_type():
    env = Env(config=NO_DELAY)
    await stable_group(env, group="classic-stable")
    await env.coord.offset_commit(commit_req("standalone", {("foo", 0): 5}), 8)
    await env.coord.consumer_group_heartbeat(cg_hb("kip848", "m1"), 1, "c", "h")
    lg = env.coord.list_groups

    def ids(resp):
        return sorted(g.group_id for g in resp.groups)

    assert ids(lg(ListGroupsRequest(), 5)) == ["classic-stable", "kip848", "standalone"]
    assert ids(lg(ListGroupsRequest(types_filter=["classic"]), 5)) == ["classic-stable", "standalone"]
    assert ids(lg(ListGroupsRequest(types_filter=["Consumer"]), 5)) == ["kip848"]
    assert ids(lg(ListGroupsRequest(types_filter=["share"]), 5)) == []
    assert ids(lg(ListGroupsRequest(states_filter=["empty"]), 4)) == ["standalone"]
    assert ids(lg(ListGroupsRequest(states_filter=["Stable", "Empty"]), 5)) == ["classic-stable", "kip848",
                                                                                "standalone"]
    listed = {g.group_id: g for g in lg(ListGroupsRequest(), 5).groups}
    assert listed["standalone"].protocol_type == "" and listed["standalone"].group_state == "Empty"
    assert listed["kip848"].protocol_type == "consumer" and listed["kip848"].group_type == "consumer"
    assert listed["classic-stable"].group_type == "classic"


async def test_delete_groups_non_empty_and_not_found():
    env = Env(config=NO_DELAY)
    gen, (m,), _ = await stable_group(env)
    await env.coord.offset_commit(commit_req("simple", {("foo", 0): 5}), 8)
    await env.coord.consumer_group_heartbeat(cg_hb("kip848", "m1"), 1, "c", "h")
    resp = await env.coord.delete_groups(DeleteGroupsRequest(groups_names=["g", "simple", "nope", "kip848", ""]), 2)
    codes = {r.group_id: r.error_code for r in resp.results}
    assert codes == {"g": Errors.NON_EMPTY_GROUP, "simple": 0, "nope": Errors.GROUP_ID_NOT_FOUND,
                     "kip848": Errors.NON_EMPTY_GROUP, "": Errors.INVALID_GROUP_ID}
    assert "simple" not in env.coord.groups and "g" in env.coord.groups
    # Deleting an emptied group works, and the tombstones keep it deleted after a restart.
    await env.coord.leave_group(leave_req("g", (m, None)), 3)
    await env.coord.consumer_group_heartbeat(cg_hb("kip848", "m1", epoch=-1), 1, "c", "h")
    resp = await env.coord.delete_groups(DeleteGroupsRequest(groups_names=["g", "kip848"]), 2)
    assert [r.error_code for r in resp.results] == [0, 0]
    env2 = await env.restart()
    assert env2.coord.groups == {}


async def test_describe_groups():
    env = Env(config=NO_DELAY)
    gen, (m,), _ = await stable_group(env)
    await env.coord.consumer_group_heartbeat(cg_hb("kip848", "m1"), 1, "c", "h")
    resp = env.coord.describe_groups(DescribeGroupsRequest(groups=["g", "nope", "kip848"]), 6)
    g, nope, kip = resp.groups
    assert g.error_code == 0 and g.group_state == "Stable" and g.protocol_type == "consumer"
    assert g.protocol_data == "range" and g.members[0].member_id == m
    assert g.members[0].member_metadata == subscription("foo") and g.members[0].member_assignment == m.encode()
    assert g.members[0].client_host == "/127.0.0.1"
    assert nope.error_code == Errors.GROUP_ID_NOT_FOUND and nope.group_state == "Dead"
    assert kip.error_code == Errors.GROUP_ID_NOT_FOUND
    old = env.coord.describe_groups(DescribeGroupsRequest(groups=["nope"]), 5)
    assert old.groups[0].error_code == 0 and old.groups[0].group_state == "Dead"


async def test_group_types_share_one_namespace():
    env = Env(config=NO_DELAY)
    await env.coord.consumer_group_heartbeat(cg_hb("kip848", "m1"), 1, "c", "h")
    r = await env.coord.join_group(join_req("kip848"), 5, "c", "h")
    assert r.error_code == Errors.INCONSISTENT_GROUP_PROTOCOL
    await stable_group(env, group="classic")
    r = await env.coord.consumer_group_heartbeat(cg_hb("classic", "m1"), 1, "c", "h")
    assert r.error_code == Errors.GROUP_ID_NOT_FOUND
    r = await env.coord.sync_group(sync_req("kip848", "m1", 1), 5)
    assert r.error_code == Errors.UNKNOWN_MEMBER_ID


async def test_empty_consumer_group_converts_to_classic_on_join():
    env = Env(config=NO_DELAY)
    await env.coord.consumer_group_heartbeat(cg_hb("g", "m1"), 1, "c", "h")
    await env.coord.consumer_group_heartbeat(cg_hb("g", "m1", epoch=-1), 1, "c", "h")
    await env.coord.offset_commit(commit_req("g", {("foo", 0): 7}), 9)
    task = asyncio.ensure_future(env.coord.join_group(join_req("g"), 3, "c", "h"))
    await env.advance(0)
    assert task.result().error_code == 0
    assert env.coord.groups["g"].GROUP_TYPE == "classic"
    env2 = await env.restart()
    assert env2.coord.groups["g"].GROUP_TYPE == "classic"
    assert env2.coord.offsets.get("g", "foo", 0).offset == 7


async def test_share_groups_share_the_namespace():
    env = Env(config=NO_DELAY)
    assert (await env.share_hb("sg", "s1")).error_code == 0  # a share group with a member
    r = await env.share_hb("sg-empty", "s2")
    assert (await env.share_hb("sg-empty", "s2", epoch=-1)).error_code == 0  # ... and an empty one
    deleted = []
    env.coord.on_group_deleted(deleted.append)
    listed = env.coord.list_groups(ListGroupsRequest(types_filter=["share"]), 5)
    assert sorted((g.group_id, g.group_type, g.protocol_type) for g in listed.groups) == [
        ("sg", "share", "share"), ("sg-empty", "share", "share")]
    assert (await env.coord.join_group(join_req("sg"), 5, "c", "h")).error_code == Errors.INCONSISTENT_GROUP_PROTOCOL
    assert (await env.coord.consumer_group_heartbeat(cg_hb("sg", "m"), 1, "c", "h")).error_code == \
        Errors.GROUP_ID_NOT_FOUND
    r = await env.coord.offset_commit(commit_req("sg", {("foo", 0): 1}), 8)
    assert r.topics[0].partitions[0].error_code == Errors.GROUP_ID_NOT_FOUND
    d = env.coord.describe_groups(DescribeGroupsRequest(groups=["sg"]), 6)
    assert d.groups[0].error_code == Errors.GROUP_ID_NOT_FOUND
    resp = await env.coord.delete_groups(DeleteGroupsRequest(groups_names=["sg", "sg-empty"]), 2)
    assert [r.error_code for r in resp.results] == [Errors.NON_EMPTY_GROUP, 0] and deleted == ["sg-empty"]
    await stable_group(env, group="classic")
    assert env.coord.group_type("classic") == "classic" and env.coord.group_type("sg") == "share"
    assert env.coord.group_type("sg-empty") is None


async def test_member_that_never_syncs_is_removed_after_rebalance_timeout():
    env = Env()
    t1, m1 = await first_join(env, rebalance=20000, session=30000)
    t2, m2 = await first_join(env, rebalance=20000, session=30000)
    for _ in range(10):
        if t1.done() and t2.done():
            break
        await env.advance(3000)
    gen = t1.result().generation_id
    leader = t1.result().leader
    s = asyncio.ensure_future(env.coord.sync_group(sync_req("g", leader, gen, {m1: b"1", m2: b"2"}), 3))
    await env.advance(0)
    assert s.result().error_code == 0
    await env.advance(20000)  # the other member never sent SyncGroup
    group = env.coord.groups["g"]
    assert list(group.members) == [leader] and group.state == PREPARING_REBALANCE


async def test_failed_assignment_store_answers_error_and_rebalances():
    env = Env(config=NO_DELAY)
    task = asyncio.ensure_future(env.coord.join_group(join_req("g"), 3, "c", "h"))
    await env.advance(0)
    r = task.result()
    env.log.fail_next = OSError("disk full")
    s = await env.coord.sync_group(sync_req("g", r.member_id, r.generation_id, {r.member_id: b"a"}), 3)
    assert s.error_code == Errors.COORDINATOR_NOT_AVAILABLE
    assert env.coord.groups["g"].state == PREPARING_REBALANCE


async def test_failed_offset_commit_is_not_visible():
    env = Env()
    await env.coord.offset_commit(commit_req("s", {("foo", 0): 1}), 8)
    env.log.fail_next = OSError("disk full")
    r = await env.coord.offset_commit(commit_req("s", {("foo", 0): 2}), 8)
    assert r.topics[0].partitions[0].error_code == Errors.COORDINATOR_NOT_AVAILABLE
    assert env.coord.offsets.get("s", "foo", 0).offset == 1


async def test_failed_consumer_heartbeat_rolls_back():
    env = Env()
    env.log.fail_next = OSError("disk full")
    r = await env.coord.consumer_group_heartbeat(cg_hb("cg", "m1"), 1, "c", "h")
    assert r.error_code == Errors.COORDINATOR_NOT_AVAILABLE
    assert "cg" not in env.coord.groups
    r = await env.coord.consumer_group_heartbeat(cg_hb("cg", "m1"), 1, "c", "h")
    assert r.error_code == 0 and r.member_epoch == 2


async def test_duplicate_protocol_names_are_ignored():
    """Issue 8.1: a JoinGroup listing a protocol name twice counts it once (as Kafka keys protocols by
    name); the group completes its rebalance and every member gets an answer."""
    env = Env()
    dup = [("range", subscription("foo")), ("range", subscription("foo")), ("roundrobin", subscription("foo"))]
    t1, m1 = await first_join(env, protocols=dup)
    t2, m2 = await first_join(env)  # a well-formed member
    for _ in range(3):
        await env.advance(3000)  # the initial delay, extended once for the second member
    r1, r2 = t1.result(), t2.result()
    assert r1.error_code == 0 and r2.error_code == 0
    assert r1.protocol_name == r2.protocol_name == "range"
    assert env.coord.groups["g"].supported_protocols["range"] == 2
    # the duplicated member rejoins with the same (duplicated) list: no INCONSISTENT_GROUP_PROTOCOL
    gen = r1.generation_id
    s = [asyncio.ensure_future(env.coord.sync_group(sync_req("g", m, gen, {m1: b"a", m2: b"b"}
                                                             if m == r1.leader else None), 3)) for m in (m1, m2)]
    await env.advance(0)
    assert all(x.result().error_code == 0 for x in s)


async def test_failed_join_completion_answers_joiners(monkeypatch):
    """Issue 8.1: an error while completing the join phase (in the timer) answers every parked
    JoinGroup with an error code instead of leaving it unanswered."""
    env = Env()

    def broken(self):
        raise ValueError("member does not support any candidate protocol")

    monkeypatch.setattr("coordinator.group.classic.ClassicGroup.select_protocol", broken)
    t1, m1 = await first_join(env)
    await env.advance(3000)
    assert t1.done() and t1.result().error_code == Errors.UNKNOWN_SERVER_ERROR
    assert env.coord.groups["g"].state == EMPTY
