"""KIP-848 consumer groups: heartbeat epochs, reconciliation, assignors (incl. lag), static members, restart."""
from __future__ import annotations

from coordinator.group import GroupConfig
from coordinator.group.reconcile import STABLE, UNRELEASED_PARTITIONS, UNREVOKED_PARTITIONS
from protocol.errors import Errors
from protocol.messages.consumer_group_describe import ConsumerGroupDescribeRequest
from protocol.messages.offset_fetch import OffsetFetchRequest
from test_group_support import Env, assignment_of, cg_hb, commit_req

FOO = bytes([1] * 16)
BAR = bytes([2] * 16)


async def hb(env, *args, version=1, **kw):
    return await env.coord.consumer_group_heartbeat(cg_hb(*args, **kw), version, "client", "/127.0.0.1")


def all_parts(*assignments) -> list:
    out = []
    for a in assignments:
        for t, ps in a.items():
            out += [(t, p) for p in ps]
    return sorted(out)


async def test_first_member_gets_everything():
    env = Env()
    r = await hb(env, "cg", "m1", topics=["foo"])
    assert r.error_code == 0 and r.member_id == "m1" and r.member_epoch == 2
    assert r.heartbeat_interval_ms == 5000
    assert assignment_of(r) == {FOO: {0, 1, 2}}
    g = env.coord.groups["cg"]
    assert (g.group_epoch, g.assignment_epoch, g.state_name()) == (2, 2, "Stable")
    # A plain heartbeat with the same epoch and no change carries no assignment.
    r = await hb(env, "cg", "m1", epoch=2, topics=None, owned={FOO: {0, 1, 2}})
    assert r.error_code == 0 and r.member_epoch == 2 and r.assignment is None


async def test_v0_server_generates_member_id():
    env = Env()
    r = await hb(env, "cg", "", topics=["foo"], version=0)
    assert r.error_code == 0 and len(r.member_id) == 22 and r.member_epoch == 2


async def test_second_member_revoke_before_assign():
    env = Env()
    await hb(env, "cg", "m1", topics=["foo"])
    r2 = await hb(env, "cg", "m2", topics=["foo"])
    g = env.coord.groups["cg"]
    assert g.group_epoch == 3 and g.assignment_epoch == 3 and g.state_name() == "Reconciling"
    target1, target2 = g.target["m1"], g.target["m2"]
    assert all_parts(target1, target2) == [(FOO, 0), (FOO, 1), (FOO, 2)]
    # m2 cannot get partitions m1 still owns: it moves to epoch 3 and waits for them.
    assert r2.member_epoch == 3 and assignment_of(r2) == {}
    assert g.members["m2"].state == UNRELEASED_PARTITIONS
    # m1 is asked to revoke: same epoch, smaller assignment.
    r1 = await hb(env, "cg", "m1", epoch=2, topics=None, owned={FOO: {0, 1, 2}})
    assert r1.member_epoch == 2 and assignment_of(r1) == target1
    assert g.members["m1"].state == UNREVOKED_PARTITIONS
    # Still owning the revoked partitions: no progress.
    r1 = await hb(env, "cg", "m1", epoch=2, topics=None, owned={FOO: {0, 1, 2}})
    assert r1.member_epoch == 2 and r1.assignment is None
    # Revoked: m1 moves to epoch 3; m2 then gets its partitions.
    r1 = await hb(env, "cg", "m1", epoch=2, topics=None, owned=target1)
    assert r1.member_epoch == 3 and g.members["m1"].state == STABLE
    r2 = await hb(env, "cg", "m2", epoch=3, topics=None, owned={})
    assert r2.member_epoch == 3 and assignment_of(r2) == target2
    assert g.state_name() == "Stable"
    assert sorted(len(ps) for t in (target1, target2) for ps in t.values()) == [1, 2]


async def test_epoch_fencing_and_request_validation():
    env = Env()
    await hb(env, "cg", "m1", topics=["foo"])
    assert (await hb(env, "cg", "m1", epoch=6, topics=None)).error_code == Errors.FENCED_MEMBER_EPOCH
    assert (await hb(env, "cg", "ghost", epoch=2, topics=None)).error_code == Errors.UNKNOWN_MEMBER_ID
    assert (await hb(env, "nogroup", "m1", epoch=2, topics=None)).error_code == Errors.UNKNOWN_MEMBER_ID
    await hb(env, "cg", "m2", topics=["foo"])
    await hb(env, "cg", "m1", epoch=2, topics=None, owned={FOO: {0, 1, 2}})
    g = env.coord.groups["cg"]
    await hb(env, "cg", "m1", epoch=2, topics=None, owned=g.target["m1"])
    assert g.members["m1"].member_epoch == 3
    # The previous epoch is accepted when the owned partitions are a subset (lost response).
    r = await hb(env, "cg", "m1", epoch=2, topics=None, owned=g.target["m1"])
    assert r.error_code == 0 and r.member_epoch == 3
    r = await hb(env, "cg", "m1", epoch=2, topics=None, owned={FOO: {0, 1, 2}})
    assert r.error_code == Errors.FENCED_MEMBER_EPOCH
    bad = cg_hb("cg", "m3")
    bad.rebalance_timeout_ms = -1
    assert (await env.coord.consumer_group_heartbeat(bad, 1, "c", "h")).error_code == Errors.INVALID_REQUEST
    assert (await hb(env, "cg", "", topics=["foo"])).error_code == Errors.INVALID_REQUEST  # v1: id required
    assert (await hb(env, "", "m3", topics=["foo"])).error_code == Errors.INVALID_REQUEST
    r = await hb(env, "cg", "m3", topics=["foo"], assignor="sticky")
    assert r.error_code == Errors.UNSUPPORTED_ASSIGNOR
    assert (await hb(env, "cg", "m3", topics=None, regex="(")).error_code == Errors.INVALID_REGULAR_EXPRESSION


async def test_leave_and_session_timeout_hand_partitions_over():
    env = Env()
    await hb(env, "cg", "m1", topics=["foo"])
    await hb(env, "cg", "m2", topics=["foo"])
    g = env.coord.groups["cg"]
    r = await hb(env, "cg", "m2", epoch=-1, topics=None)
    assert r.error_code == 0 and r.member_epoch == -1
    assert "m2" not in g.members and g.group_epoch == 4
    r1 = await hb(env, "cg", "m1", epoch=2, topics=None, owned={FOO: {0, 1, 2}})
    # m1 never revoked anything, so its assignment is unchanged and not resent.
    assert r1.member_epoch == 4 and r1.assignment is None and g.members["m1"].assigned == {FOO: {0, 1, 2}}
    # m3 joins, then stops heartbeating: fenced after the 45 s session timeout.
    await hb(env, "cg", "m3", topics=["foo"])
    assert g.group_epoch == 5
    for _ in range(9):
        await env.advance(5000)
        await hb(env, "cg", "m1", epoch=g.members["m1"].member_epoch, topics=None,
                 owned=g.members["m1"].assigned)
    assert "m3" not in g.members
    assert g.group_epoch == 6
    r1 = await hb(env, "cg", "m1", epoch=g.members["m1"].member_epoch, topics=None, owned=g.members["m1"].assigned)
    assert assignment_of(r1) == {FOO: {0, 1, 2}} or r1.assignment is None
    assert g.members["m1"].assigned == {FOO: {0, 1, 2}}


async def test_rebalance_timeout_fences_a_member_that_does_not_revoke():
    env = Env()
    await hb(env, "cg", "m1", topics=["foo"], rebalance=10000)
    await hb(env, "cg", "m2", topics=["foo"])
    await hb(env, "cg", "m1", epoch=2, topics=None, owned={FOO: {0, 1, 2}})
    g = env.coord.groups["cg"]
    assert g.members["m1"].state == UNREVOKED_PARTITIONS
    await env.advance(10000)
    assert "m1" not in g.members
    r2 = await hb(env, "cg", "m2", epoch=g.members["m2"].member_epoch, topics=None, owned={})
    assert assignment_of(r2) == {FOO: {0, 1, 2}}


async def test_range_assignor_by_server_assignor_and_describe():
    env = Env()
    await hb(env, "cg", "m1", topics=["foo", "bar"], assignor="range")
    await hb(env, "cg", "m2", topics=["foo", "bar"], assignor="range")
    g = env.coord.groups["cg"]
    assert g.target["m1"] == {FOO: {0, 1}, BAR: {0}} and g.target["m2"] == {FOO: {2}, BAR: {1}}
    d = env.coord.consumer_group_describe(ConsumerGroupDescribeRequest(group_ids=["cg", "nope"]), 1).groups
    assert d[0].error_code == 0 and d[0].assignor_name == "range" and d[0].group_epoch == 3
    assert d[0].group_state == "Reconciling"
    m1 = next(m for m in d[0].members if m.member_id == "m1")
    assert m1.client_id == "client" and m1.client_host == "/127.0.0.1" and m1.member_type == 1
    assert m1.subscribed_topic_names == ["bar", "foo"]
    assert {(tp.topic_name, tuple(tp.partitions)) for tp in m1.target_assignment.topic_partitions} == \
        {("foo", (0, 1)), ("bar", (0,))}
    assert d[1].error_code == Errors.GROUP_ID_NOT_FOUND


async def test_lag_assignor_balances_lag_seed_example():
    env = Env(topics={"t0": 3})
    t0 = env.cluster.topic_id("t0")
    for p, (end, committed) in enumerate([(100_000, 0), (60_000, 0), (50_000, 0)]):
        env.cluster.leo[("t0", p)] = end
    await env.coord.offset_commit(commit_req("cg", {("t0", 0): 0, ("t0", 1): 0, ("t0", 2): 0}), 8)
    await hb(env, "cg", "C0", topics=["t0"], assignor="lag")
    await hb(env, "cg", "C1", topics=["t0"], assignor="lag")
    g = env.coord.groups["cg"]
    assert g.target["C0"] == {t0: {0}} and g.target["C1"] == {t0: {1, 2}}


async def test_lag_without_committed_offsets_follows_reset_policy():
    async def targets(policy):
        env = Env(topics={"t0": 2}, config=GroupConfig(lag_offset_reset=policy))
        env.cluster.leo.update({("t0", 0): 100, ("t0", 1): 1000})
        env.cluster.lso.update({("t0", 0): 0, ("t0", 1): 990})  # earliest lags: 100 and 10
        await env.coord.offset_commit(commit_req("cg", {("t0", 0): 0}), 8)  # committed lag of p0: 100
        lag = env.coord.consumer._lag_function("cg", {env.cluster.topic_id("t0"): _spec("t0", 2)})
        return lag(env.cluster.topic_id("t0"), 0), lag(env.cluster.topic_id("t0"), 1)

    assert await targets("latest") == (100, 0)
    assert await targets("earliest") == (100, 10)


def _spec(name, n):
    from coordinator.assignors import TopicSpec
    return TopicSpec(name=name, num_partitions=n)


async def test_default_reset_policy_counts_the_backlog():
    """Issue 8.3 / seed 001: the broker cannot see the client's auto.offset.reset; by default a
    partition the group never committed lags log end - log start (only ``latest`` means 0)."""
    env = Env(topics={"t0": 1})
    env.cluster.leo[("t0", 0)], env.cluster.lso[("t0", 0)] = 50, 8
    lag = env.coord.consumer._lag_function("cg", {env.cluster.topic_id("t0"): _spec("t0", 1)})
    assert lag(env.cluster.topic_id("t0"), 0) == 42
    env.coord.set_group_config("cg", "consumer.auto.offset.reset", "latest")
    lag = env.coord.consumer._lag_function("cg", {env.cluster.topic_id("t0"): _spec("t0", 1)})
    assert lag(env.cluster.topic_id("t0"), 0) == 0


async def test_group_config_overrides_reset_policy():
    env = Env(topics={"t0": 1})
    env.cluster.leo[("t0", 0)] = 50
    env.coord.set_group_config("cg", "consumer.auto.offset.reset", "earliest")
    lag = env.coord.consumer._lag_function("cg", {env.cluster.topic_id("t0"): _spec("t0", 1)})
    assert lag(env.cluster.topic_id("t0"), 0) == 50


async def test_static_member_temporary_leave_and_takeover():
    env = Env()
    r = await hb(env, "cg", "a1", topics=["foo"], instance="inst")
    assert r.member_epoch == 2
    g = env.coord.groups["cg"]
    r = await hb(env, "cg", "a1", epoch=-2, topics=None, instance="inst")
    assert r.error_code == 0 and r.member_epoch == -2
    assert g.members["a1"].assigned == {FOO: {0, 1, 2}} and g.group_epoch == 2
    # A new incarnation with the same instance id takes the assignment over without a rebalance.
    r = await hb(env, "cg", "a2", topics=["foo"], instance="inst")
    assert r.error_code == 0 and r.member_epoch == 2 and assignment_of(r) == {FOO: {0, 1, 2}}
    assert list(g.members) == ["a2"] and g.group_epoch == 2
    # The instance id is now owned by a2.
    r = await hb(env, "cg", "a3", topics=["foo"], instance="inst")
    assert r.error_code == Errors.UNRELEASED_INSTANCE_ID
    r = await hb(env, "cg", "a1", epoch=2, topics=None, instance="inst")
    assert r.error_code == Errors.FENCED_INSTANCE_ID


async def test_new_topic_bumps_epoch_and_assigns():
    env = Env(topics={"foo": 1})
    r = await hb(env, "cg", "m1", topics=["foo", "later"])
    assert assignment_of(r) == {FOO: {0}}
    later = env.cluster.add_topic("later", 2)
    r = await hb(env, "cg", "m1", epoch=2, topics=None, owned={FOO: {0}})
    assert r.member_epoch == 3 and assignment_of(r) == {FOO: {0}, later: {0, 1}}


async def test_regex_subscription():
    env = Env(topics={"orders-eu": 1, "orders-us": 1, "payments": 1})
    r = await hb(env, "cg", "m1", topics=None, regex="orders-.*")
    names = {env.cluster.topic_name(t) for t in assignment_of(r)}
    assert names == {"orders-eu", "orders-us"}


async def test_restart_replays_consumer_group():
    env = Env()
    await hb(env, "cg", "m1", topics=["foo"])
    await hb(env, "cg", "m2", topics=["foo"])
    await hb(env, "cg", "m1", epoch=2, topics=None, owned={FOO: {0, 1, 2}})
    g = env.coord.groups["cg"]
    snapshot = {mid: (m.member_epoch, m.previous_member_epoch, m.state, m.assigned, m.pending_revocation)
                for mid, m in g.members.items()}
    env2 = await env.restart()
    g2 = env2.coord.groups["cg"]
    assert (g2.group_epoch, g2.assignment_epoch, g2.target) == (g.group_epoch, g.assignment_epoch, g.target)
    assert {mid: (m.member_epoch, m.previous_member_epoch, m.state, m.assigned, m.pending_revocation)
            for mid, m in g2.members.items()} == snapshot
    assert g2.partition_epochs == g.partition_epochs
    # Reconciliation continues where it stopped.
    r1 = await env2.coord.consumer_group_heartbeat(cg_hb("cg", "m1", epoch=2, topics=None, owned=g2.target["m1"]),
                                                   1, "c", "h")
    assert r1.member_epoch == 3
    # Session timers were re-armed at load: silence fences both members.
    await env2.advance(45000)
    assert g2.members == {} and g2.state_name() == "Empty"
    # Left empty, the assignment epoch follows the group epoch at once (Kafka's consumerGroupFenceMembers).
    assert g2.assignment_epoch == g2.group_epoch == 5


async def test_offsets_of_consumer_group_members():
    env = Env()
    r = await hb(env, "cg", "m1", topics=["foo"])
    ok = await env.coord.offset_commit(commit_req("cg", {("foo", 0): 3}, generation=r.member_epoch, member="m1"), 9)
    assert ok.topics[0].partitions[0].error_code == 0
    stale = await env.coord.offset_commit(commit_req("cg", {("foo", 0): 3}, generation=7, member="m1"), 9)
    assert stale.topics[0].partitions[0].error_code == Errors.STALE_MEMBER_EPOCH
    old = await env.coord.offset_commit(commit_req("cg", {("foo", 0): 3}, generation=1, member="m1"), 8)
    assert old.topics[0].partitions[0].error_code == Errors.UNSUPPORTED_VERSION
    req = OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(
        group_id="cg", member_id="m1", member_epoch=9,
        topics=[OffsetFetchRequest.OffsetFetchRequestTopics(name="foo", partition_indexes=[0])])])
    assert (await env.coord.offset_fetch(req, 9)).groups[0].error_code == Errors.STALE_MEMBER_EPOCH
    req.groups[0].member_epoch = 2
    got = (await env.coord.offset_fetch(req, 9)).groups[0]
    assert got.error_code == 0 and got.topics[0].partitions[0].committed_offset == 3


async def test_group_configs_override_session_and_interval():
    class Configs:
        def overrides(self, group_id):
            return {"consumer.heartbeat.interval.ms": "7000"} if group_id == "cg" else {}

    env = Env()
    env.coord._external_configs = Configs()
    env.coord.set_group_config("cg", "consumer.session.timeout.ms", "50000")
    r = await hb(env, "cg", "m1", topics=["foo"])
    assert r.heartbeat_interval_ms == 7000
    await env.advance(49999)
    assert "m1" in env.coord.groups["cg"].members
    await env.advance(1)
    assert "m1" not in env.coord.groups["cg"].members
