"""Share groups as a kind of group in the group coordinator (ShareGroupHeartbeat / ShareGroupDescribe)."""
from __future__ import annotations

import asyncio

from coordinator.group import GroupConfig
from protocol.errors import Errors
from protocol.messages.delete_groups import DeleteGroupsRequest
from protocol.messages.share_group_describe import ShareGroupDescribeRequest

from test_group_support import Env, assignment_of, cg_hb, commit_req

SESSION = 45000


def describe(env, *groups):
    return env.coord.share_group_describe(ShareGroupDescribeRequest(group_ids=list(groups))).groups


async def test_first_heartbeat_initializes_share_state_and_answers_with_the_assignment():
    """Issue 29 item 6: the joining heartbeat initializes the share state of its partitions
    (InitializeShareGroupState at the group epoch, as Kafka 4.4) before it is answered, and its answer
    carries them: no second heartbeat to wait for (Kafka assigns them at the next one)."""
    env = Env()
    r = await env.share_hb("sg", "s1", topics=["foo"])
    foo = env.cluster.topic_id("foo")
    assert r.error_code == 0 and r.member_epoch == 2 and assignment_of(r) == {foo: {0, 1, 2}}
    assert all(env.share_state.state_of("sg", foo, p) is not None for p in range(3))
    g = env.coord.groups["sg"]
    assert (g.group_epoch, g.assignment_epoch, g.initialized[foo][1]) == (2, 2, {0, 1, 2})
    d = describe(env, "sg")[0]
    assert (d.group_state, d.group_epoch, d.assignment_epoch, d.assignor_name) == ("Stable", 2, 2, "simple")
    assert d.members[0].client_host == "/127.0.0.1" and d.members[0].member_epoch == 2
    assert env.share_state.state_of("sg", foo, 0).state_epoch == 2  # initialized at the group epoch
    steady = await env.share_hb("sg", "s1", epoch=2, topics=None)
    assert steady.member_epoch == 2 and steady.assignment is None


async def test_a_join_is_answered_only_once_its_partitions_are_initialized():
    """The joining heartbeat waits for InitializeShareGroupState (Kafka's GroupCoordinatorService
    answers after persisterInitialize too); a member that joins meanwhile shares that first assignment."""
    env = Env(topics={"foo": 4}, batching=True)
    foo = env.cluster.topic_id("foo")
    await env.share_state.load()
    gate = asyncio.Event()
    initialize = env.share_state.initialize_state

    async def slow_initialize(req):
        await gate.wait()
        return await initialize(req)

    env.share_state.initialize_state = slow_initialize
    t1 = asyncio.ensure_future(env.share_hb("sg", "s1"))
    for _ in range(10):  # (not env.advance: it would wait for the initialization held back here)
        await asyncio.sleep(0)
    t2 = asyncio.ensure_future(env.share_hb("sg", "s2"))
    for _ in range(10):
        await asyncio.sleep(0)
    assert not t1.done() and not t2.done()
    gate.set()
    r1, r2 = await t1, await t2
    a1, a2 = assignment_of(r1)[foo], assignment_of(r2)[foo]
    assert len(a1) == len(a2) == 2 and a1 | a2 == {0, 1, 2, 3}


async def test_a_member_that_leaves_while_its_join_waits_is_not_added_back():
    env = Env(share_initial_delay_ms=100)
    join = asyncio.ensure_future(env.share_hb("sg", "s1"))
    await env.advance(0)
    assert not join.done()
    assert (await env.share_hb("sg", "s1", epoch=-1, topics=None)).error_code == 0
    await env.advance(100)
    assert (await join).error_code == Errors.UNKNOWN_MEMBER_ID
    assert env.coord.groups["sg"].members == {}


async def test_second_member_rebalances_without_revocation():
    env = Env()
    foo = env.cluster.topic_id("foo")
    await env.share_hb("sg", "s1")
    r2 = await env.share_hb("sg", "s2")
    assert r2.member_epoch == 3
    r1 = await env.share_hb("sg", "s1", epoch=2, topics=None)
    assert r1.member_epoch == 3  # takes its new target at once: share groups do not revoke
    a1, a2 = assignment_of(r1)[foo], assignment_of(r2)[foo]
    assert a1 | a2 == {0, 1, 2} and not a1 & a2
    steady = await env.share_hb("sg", "s1", epoch=3, topics=None)
    assert steady.member_epoch == 3 and steady.assignment is None


async def test_members_joining_together_share_the_first_assignment():
    """Issue 8.6 (librdkafka 0172), issue 29 item 6: members that join a new group within
    group.share.initial.assignment.delay.ms of the first are all answered at its end, with the first
    assignment, which splits the partitions; one joining later waits for KIP-1263's interval."""
    env = Env(topics={"foo": 4}, batching=True, share_initial_delay_ms=100)
    foo = env.cluster.topic_id("foo")
    t1 = asyncio.ensure_future(env.share_hb("sg", "s1"))
    await env.advance(0)  # s1 joins at 0: the window ends at 100
    await env.advance(60)
    t2 = asyncio.ensure_future(env.share_hb("sg", "s2"))
    await env.advance(0)
    await env.advance(39)
    assert not t1.done() and not t2.done()  # the group forms: nothing assigned yet
    assert env.coord.groups["sg"].assignment_epoch == 1
    await env.advance(1)
    r1, r2 = await t1, await t2
    a1, a2 = assignment_of(r1)[foo], assignment_of(r2)[foo]
    assert len(a1) == len(a2) == 2 and a1 | a2 == {0, 1, 2, 3}
    r3 = await env.share_hb("sg", "s3")  # formed: no window, the interval holds the next target back
    assert assignment_of(r3) == {}
    await env.advance(1000)
    r3 = await env.share_hb("sg", "s3", epoch=r3.member_epoch, topics=None)
    assert len(assignment_of(r3)[foo]) == 1


async def test_assignment_interval_group_override():
    env = Env(topics={"foo": 2}, batching=True)
    env.coord.set_group_config("sg", "share.assignment.interval.ms", "5000")
    foo = env.cluster.topic_id("foo")
    r1 = await env.share_hb("sg", "s1")
    assert assignment_of(r1) == {foo: {0, 1}}  # the first assignment is not held back
    r2 = await env.share_hb("sg", "s2")
    await env.advance(1000)
    r2 = await env.share_hb("sg", "s2", epoch=r2.member_epoch, topics=None)
    assert not assignment_of(r2)  # 1 s is not enough under the group's 5 s interval
    await env.advance(4000)
    r2 = await env.share_hb("sg", "s2", epoch=r2.member_epoch, topics=None)
    assert len(assignment_of(r2)[foo]) == 1


async def test_concurrent_joins_compute_on_committed_state():
    env = Env()
    await env.share_state.load()
    rs = await asyncio.gather(*(env.share_hb("sg", f"s{i}") for i in range(4)))
    assert all(r.error_code == 0 for r in rs)
    g = env.coord.groups["sg"]
    assert sorted(g.members) == ["s0", "s1", "s2", "s3"] and g.group_epoch == 5 and g.assignment_epoch == 5


async def test_leave_and_session_expiry_remove_the_member():
    env = Env()
    await env.share_hb("sg", "s1")
    await env.share_hb("sg", "s2")
    r = await env.share_hb("sg", "s1", epoch=-1, topics=None)
    assert r.error_code == 0 and r.member_epoch == -1
    g = env.coord.groups["sg"]
    assert list(g.members) == ["s2"] and g.group_epoch == 4 and g.assignment_epoch == 3
    await env.advance(SESSION)
    assert env.coord.groups["sg"].assignment_epoch == env.coord.groups["sg"].group_epoch  # empty: caught up
    assert env.coord.groups["sg"].members == {} and env.coord.groups["sg"].state_name() == "Empty"


async def test_heartbeats_keep_the_session():
    env = Env()
    await env.share_hb("sg", "s1")
    for _ in range(3):
        await env.advance(SESSION - 1000)
        assert (await env.share_hb("sg", "s1", epoch=2, topics=None)).error_code == 0
    assert "s1" in env.coord.groups["sg"].members


async def test_epoch_and_request_errors():
    env = Env(config=GroupConfig(share_max_size=1))
    await env.share_hb("sg", "s1")
    assert (await env.share_hb("sg", "s1", epoch=5, topics=None)).error_code == Errors.FENCED_MEMBER_EPOCH
    assert (await env.share_hb("sg", "nope", epoch=1, topics=None)).error_code == Errors.UNKNOWN_MEMBER_ID
    # no such group: GROUP_ID_NOT_FOUND, for a heartbeat and a leave (Kafka's getOrMaybeCreateShareGroup / shareGroup)
    assert (await env.share_hb("missing", "s1", epoch=1, topics=None)).error_code == Errors.GROUP_ID_NOT_FOUND
    assert (await env.share_hb("missing", "s1", epoch=-1, topics=None)).error_code == Errors.GROUP_ID_NOT_FOUND
    assert (await env.share_hb("sg", "s2")).error_code == Errors.GROUP_MAX_SIZE_REACHED
    assert (await env.share_hb("sg", "x" * 37)).error_code == Errors.INVALID_REQUEST
    assert (await env.share_hb("sg", "s3", topics=[])).error_code == Errors.INVALID_REQUEST
    assert (await env.share_hb("", "s3")).error_code == Errors.INVALID_REQUEST
    assert (await env.share_hb("sg", "s1", epoch=-1, topics=None)).error_code == 0
    assert (await env.share_hb("sg", "s1", epoch=-1, topics=None)).error_code == Errors.UNKNOWN_MEMBER_ID


async def test_one_namespace_with_consumer_and_classic_groups():
    env = Env()
    await env.coord.consumer_group_heartbeat(cg_hb("cg", "m1"), 1, "c", "h")
    r = await env.share_hb("cg", "s1")
    assert r.error_code == Errors.GROUP_ID_NOT_FOUND and "not a share group" in r.error_message
    await env.coord.offset_commit(commit_req("classic", {("foo", 0): 1}), 8)  # a simple classic group
    assert env.coord.group_type("classic") == "classic"
    assert (await env.share_hb("classic", "s1")).error_code == Errors.GROUP_ID_NOT_FOUND
    d = describe(env, "cg", "none")
    assert [x.error_code for x in d] == [Errors.GROUP_ID_NOT_FOUND] * 2
    assert d[0].error_message == "Group cg is not a share group." and d[1].error_message == "Group none not found."


async def test_restart_replays_share_groups_once_and_rearms_sessions():
    env = Env()
    await env.share_hb("sg", "s1")
    await env.share_hb("sg", "s2")
    before = describe(env, "sg")[0]
    env2 = await env.restart()
    after = describe(env2, "sg")[0]
    assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch, before.assignment_epoch)
    assert sorted((m.member_id, m.member_epoch) for m in after.members) == \
        sorted((m.member_id, m.member_epoch) for m in before.members)
    await env2.advance(SESSION)
    assert env2.coord.groups["sg"].is_empty()


async def test_failed_append_creates_nothing_and_answers_coordinator_error():
    env = Env()
    await env.share_state.load()
    env.log.fail_next = OSError("disk full")
    r = await env.share_hb("sg", "s1")
    assert r.error_code == Errors.COORDINATOR_NOT_AVAILABLE and "sg" not in env.coord.groups
    r = await env.share_hb("sg", "s1")
    assert r.error_code == 0 and r.member_epoch == 2


async def test_delete_groups_removes_records_and_share_state_then_tells_the_listener():
    env = Env()
    deleted = []

    async def on_deleted(gid):
        deleted.append(gid)

    env.coord.on_group_deleted(on_deleted)
    foo = env.cluster.topic_id("foo")
    await env.share_hb("sg", "s1")
    resp = await env.coord.delete_groups(DeleteGroupsRequest(groups_names=["sg"]), 2)
    assert resp.results[0].error_code == Errors.NON_EMPTY_GROUP and deleted == []
    await env.share_hb("sg", "s1", epoch=-1, topics=None)
    resp = await env.coord.delete_groups(DeleteGroupsRequest(groups_names=["sg"]), 2)
    assert resp.results[0].error_code == 0 and deleted == ["sg"]
    assert "sg" not in env.coord.groups and env.share_state.state_of("sg", foo, 0) is None
    env2 = await env.restart()
    assert "sg" not in env2.coord.groups


async def test_deleted_groups_leave_no_memory_behind():
    """Regression (issue 18): ShareGroupManager kept an ``_initializing`` entry for every share group
    ever deleted (memory growing with group churn). Every per-group field that is not replayed is
    empty again once the groups are gone."""
    env = Env(share_initial_delay_ms=100)
    mgr = env.coord.share
    for i in range(5):
        gid = f"churn-{i}"
        join = asyncio.ensure_future(env.share_hb(gid, "s1"))
        await env.advance(0)
        assert gid in mgr._forming
        await env.advance(100)                     # share state initialized, the group formed
        assert assignment_of(await join)
        await env.share_hb(gid, "s1", epoch=2, topics=None)
        assert gid in mgr._initializing
        await env.share_hb(gid, "s1", epoch=-1, topics=None)
        resp = await env.coord.delete_groups(DeleteGroupsRequest(groups_names=[gid]), 2)
        assert resp.results[0].error_code == 0
    assert (mgr._initializing, mgr._lag_checked, mgr._assigned_with, mgr._forming) == ({}, {}, {}, {})


async def test_null_topic_name_is_refused_before_anything_is_written():
    """Issue 8.2: a null in SubscribedTopicNames (possible in-process; the codec refuses it on the
    wire) answers INVALID_REQUEST and writes nothing; the group stays usable."""
    env = Env()
    records_before = len(env.log.records)
    r = await env.share_hb("sg", "s1", topics=[None, "foo"])
    assert r.error_code == Errors.INVALID_REQUEST and len(env.log.records) == records_before
    assert "sg" not in env.coord.groups
    assert (await env.share_hb("sg", "s1", topics=["foo"])).error_code == 0
    env = await env.restart()
    assert (await env.share_hb("sg", "s2", topics=["foo"])).error_code == 0


async def test_a_heartbeats_draft_leaves_the_committed_group_as_it_was():
    """A heartbeat computes its records on a draft of the group (``ShareGroup.copy``) and replays them
    there first: the committed group changes only when the records are replayed on it after the append."""
    from coordinator.group import records as R

    env = Env()
    r = await env.share_hb("sg", "s1", topics=["foo"])
    g = env.coord.groups["sg"]
    m = g.members["s1"]
    before = (m.client_id, m.member_epoch, {t: set(ps) for t, ps in m.assigned.items()}, dict(g.target))
    changed = m.copy()
    changed.client_id, changed.member_epoch, changed.assigned = "other", 9, {}
    for recs in ([R.share_current_assignment("sg", changed)], [R.share_member_metadata("sg", changed)],
                 [R.share_member_metadata("sg", changed), R.share_current_assignment("sg", changed),
                  R.share_target_member_tombstone("sg", "s1"), R.share_member_metadata_tombstone("sg", "s1")]):
        draft = g.copy()
        for rec in recs:
            draft.replay(rec)
    assert "s1" not in draft.members and "s1" not in draft.target
    assert g.members["s1"] is m and r.error_code == 0
    assert (m.client_id, m.member_epoch, m.assigned, g.target) == before


async def test_what_heartbeats_ask_of_the_whole_group_follows_its_records():
    """A share group keeps its subscribed topics (a count per topic) and its targeted partitions between
    heartbeats (a heartbeat of a 64-member group does not walk the 64 members); each is the walk's answer
    after every change of subscription, membership and target and after a restart, and a draft's replay
    leaves the committed group's alone."""
    from coordinator.group.modern import ModernGroup

    env = Env()
    foo, bar = env.cluster.topic_id("foo"), env.cluster.topic_id("bar")

    def check(names, targeted=None):
        g = env.coord.groups["sg"]
        assert g.subscribed_topic_names() == ModernGroup.subscribed_topic_names(g) == names
        walked: dict = {}
        for parts in g.target.values():
            for t, ps in parts.items():
                walked.setdefault(t, set()).update(ps)
        assert g.targeted_partitions() == walked
        assert targeted is None or walked == targeted

    r1 = await env.share_hb("sg", "s1", topics=["foo"])
    check({"foo"}, {foo: {0, 1, 2}})
    r2 = await env.share_hb("sg", "s2", topics=["bar"])
    check({"foo", "bar"}, {foo: {0, 1, 2}, bar: {0, 1}})
    committed = env.coord.groups["sg"]
    draft = committed.copy()
    draft.replay(type("Rec", (), {"record_type": 10, "key": type("K", (), {"member_id": "s1"})(), "value": None})())
    assert draft.subscribed_topic_names() == {"bar"} and committed.subscribed_topic_names() == {"foo", "bar"}
    r2 = await env.share_hb("sg", "s2", epoch=r2.member_epoch, topics=["foo"])
    check({"foo"})
    assert bar not in env.coord.groups["sg"].targeted_partitions()
    leave = await env.share_hb("sg", "s1", epoch=-1, topics=None)
    assert leave.error_code == 0 and r1.error_code == 0
    check({"foo"})
    r2 = await env.share_hb("sg", "s2", epoch=r2.member_epoch, topics=None)  # the new target
    await env.share_hb("sg", "s2", epoch=r2.member_epoch, topics=None)
    kept = env.coord.groups["sg"]._targeted
    assert kept is not None  # computed once on the committed group, not on each heartbeat's draft
    await env.share_hb("sg", "s2", epoch=r2.member_epoch, topics=None)  # no target record: kept
    assert env.coord.groups["sg"]._targeted is kept
    check({"foo"}, {foo: {0, 1, 2}})
    env = await env.restart()  # the same from the replay of the log
    check({"foo"}, {foo: {0, 1, 2}})
