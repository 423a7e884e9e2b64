"""ShareGroupHeartbeat: a subscription change (Kafka 4.4's shareGroupHeartbeat and ShareGroupAssignmentBuilder)
and the heartbeat interval answered while a member waits for partitions (ours; docs/differences.md)."""
from __future__ import annotations

import asyncio

from broker.share.dlq import DeadLetterQueue, DlqError
from coordinator.group.share import PENDING_HEARTBEAT_MARGIN_MS, PENDING_HEARTBEAT_MS

from test_group_support import Env, assignment_of

HEARTBEAT = 5000   # group.share.heartbeat.interval.ms default
INTERVAL = 1000    # group.share.assignment.interval.ms default


async def assigned_member(env, topics=("foo",)):
    """s1 joined: its share state initialized and its partitions assigned in the answer, which is returned."""
    r = await env.share_hb("sg", "s1", topics=topics)
    assert assignment_of(r)
    return r


async def test_new_subscription_revokes_the_old_topics_in_the_same_answer():
    """Kafka's maybeReconcile with hasSubscriptionChanged: the dropped topic goes at once even though the
    assignment interval holds the new target back; the new topic is initialized before the answer and
    assigned by the first heartbeat once the interval has passed."""
    env = Env(batching=True)
    foo, bar = env.cluster.topic_id("foo"), env.cluster.topic_id("bar")
    r = await assigned_member(env)
    g = env.coord.groups["sg"]
    epoch, assignment_epoch = g.group_epoch, g.assignment_epoch
    r = await env.share_hb("sg", "s1", epoch=r.member_epoch, topics=["bar"])
    assert r.error_code == 0 and assignment_of(r) == {}  # foo revoked, bar not initialized yet
    g = env.coord.groups["sg"]
    assert g.group_epoch == epoch + 1 and g.assignment_epoch == assignment_epoch  # target held back (KIP-1263)
    assert g.members["s1"].assigned == {} and r.member_epoch == assignment_epoch
    assert g.initialized[bar][1] == {0, 1}  # bar's share state was initialized before the answer
    assert env.share_state.state_of("sg", foo, 0) is not None  # foo's state stays (the group may come back)
    await env.advance(INTERVAL)
    r = await env.share_hb("sg", "s1", epoch=r.member_epoch, topics=None)
    assert assignment_of(r) == {bar: {0, 1}} and r.member_epoch == env.coord.groups["sg"].assignment_epoch


async def test_new_subscription_recomputes_the_target_when_the_interval_allows():
    env = Env()  # assignment interval 0: every bump computes a target
    foo, bar = env.cluster.topic_id("foo"), env.cluster.topic_id("bar")
    r = await env.share_hb("sg", "s1")
    assert assignment_of(r) == {foo: {0, 1, 2}}
    r = await env.share_hb("sg", "s1", epoch=r.member_epoch, topics=["foo", "bar"])
    assert assignment_of(r) == {foo: {0, 1, 2}, bar: {0, 1}}  # bar initialized, then assigned, in one answer
    r = await env.share_hb("sg", "s1", epoch=r.member_epoch, topics=["bar"])
    assert assignment_of(r) == {bar: {0, 1}}
    assert env.coord.groups["sg"].target["s1"] == {bar: {0, 1}}


async def test_other_members_keep_their_target_when_one_changes_subscription():
    env = Env(batching=True)
    foo = env.cluster.topic_id("foo")
    r1 = await env.share_hb("sg", "s1")
    r2 = await env.share_hb("sg", "s2")
    await env.advance(INTERVAL)
    r1 = await env.share_hb("sg", "s1", epoch=r1.member_epoch, topics=None)
    r2 = await env.share_hb("sg", "s2", epoch=r2.member_epoch, topics=None)
    a2 = assignment_of(r2)[foo]
    r1 = await env.share_hb("sg", "s1", epoch=r1.member_epoch, topics=["bar"])
    assert assignment_of(r1) == {}
    r2 = await env.share_hb("sg", "s2", epoch=r2.member_epoch, topics=None)
    assert r2.assignment is None and env.coord.groups["sg"].members["s2"].assigned == {foo: a2}
    await env.advance(INTERVAL)
    r2 = await env.share_hb("sg", "s2", epoch=r2.member_epoch, topics=None)
    assert assignment_of(r2) == {foo: {0, 1, 2}}  # the new target: s2 alone on foo


async def test_heartbeat_interval_is_short_until_the_first_assignment():
    """Ours: a member waiting for partitions (here one that joined just after the group's last target) is
    asked back when the next target can be computed (the assignment interval after the last one, plus a
    margin), then gets the configured interval."""
    env = Env(batching=True)
    foo = env.cluster.topic_id("foo")
    r = await env.share_hb("sg", "s1")
    assert assignment_of(r) == {foo: {0, 1, 2}} and r.heartbeat_interval_ms == HEARTBEAT
    r = await env.share_hb("sg", "s2")
    assert assignment_of(r) == {} and r.heartbeat_interval_ms == INTERVAL + PENDING_HEARTBEAT_MARGIN_MS
    await env.advance(INTERVAL // 2)
    r = await env.share_hb("sg", "s2", epoch=r.member_epoch, topics=None)
    assert r.heartbeat_interval_ms == INTERVAL // 2 + PENDING_HEARTBEAT_MARGIN_MS
    await env.advance(INTERVAL // 4)
    r = await env.share_hb("sg", "s2", epoch=r.member_epoch, topics=None)
    assert r.heartbeat_interval_ms == PENDING_HEARTBEAT_MS  # never shorter than that
    await env.advance(INTERVAL // 4)
    r = await env.share_hb("sg", "s2", epoch=r.member_epoch, topics=None)
    assert len(assignment_of(r)[foo]) == 1 and r.heartbeat_interval_ms == HEARTBEAT
    r = await env.share_hb("sg", "s2", epoch=r.member_epoch, topics=None)
    assert r.heartbeat_interval_ms == HEARTBEAT


async def test_heartbeat_interval_configured_without_a_persister():
    env = Env(batching=True)
    env.coord.share.share_state = None  # nothing would ever initialize the partitions
    r = await env.share_hb("sg", "s1")
    assert assignment_of(r) == {} and r.heartbeat_interval_ms == HEARTBEAT


async def test_heartbeat_interval_short_while_initialization_is_pending():
    """A subscribed topic whose share state could not be initialized: the heartbeat, answered once the
    attempt ended, gets what could be assigned and the short interval (the next one retries)."""
    env = Env(batching=True)
    foo, bar = env.cluster.topic_id("foo"), env.cluster.topic_id("bar")
    r = await env.share_hb("sg", "s1")
    await env.advance(10 * INTERVAL)
    initialize = env.share_state.initialize_state

    async def failing(req):
        raise OSError("disk full")

    env.share_state.initialize_state = failing
    r = await env.share_hb("sg", "s1", epoch=r.member_epoch, topics=["foo", "bar"])
    g = env.coord.groups["sg"]
    assert g.group_epoch == g.assignment_epoch  # target computed at once, without bar
    assert assignment_of(r) == {foo: {0, 1, 2}} and r.heartbeat_interval_ms == INTERVAL + PENDING_HEARTBEAT_MARGIN_MS
    env.share_state.initialize_state = initialize
    await env.advance(INTERVAL)
    r = await env.share_hb("sg", "s1", epoch=r.member_epoch, topics=None)
    assert assignment_of(r) == {foo: {0, 1, 2}, bar: {0, 1}} and r.heartbeat_interval_ms == HEARTBEAT


async def test_heartbeat_interval_configured_for_missing_topics_and_group_overrides():
    env = Env(batching=True)
    r = await env.share_hb("sg", "s1", topics=["nope"])
    assert r.heartbeat_interval_ms == HEARTBEAT  # nothing to initialize or assign: no reason to come back early
    env.coord.set_group_config("sg2", "share.heartbeat.interval.ms", "400")
    r = await env.share_hb("sg2", "s1")
    assert r.heartbeat_interval_ms == 400  # never longer than the configured interval


async def test_members_joining_within_the_window_are_answered_together_at_its_end():
    """librdkafka 0172 (issue 8.6, issue 29 item 6) at the broker's defaults: a second member joining
    50 ms after the first is answered with it, at the end of group.share.initial.assignment.delay.ms
    (100), and the first assignment splits the partitions; both get the configured interval."""
    import asyncio
    env = Env(topics={"foo": 4}, batching=True, share_initial_delay_ms=100)
    foo = env.cluster.topic_id("foo")
    t1 = asyncio.ensure_future(env.share_hb("sg", "s1"))
    await env.advance(0)
    await env.advance(50)
    t2 = asyncio.ensure_future(env.share_hb("sg", "s2"))
    await env.advance(0)
    assert not t1.done() and not t2.done()
    await env.advance(50)
    r1, r2 = await t1, await t2
    a1, a2 = assignment_of(r1)[foo], assignment_of(r2)[foo]
    assert len(a1) == len(a2) == 2 and a1 | a2 == {0, 1, 2, 3}
    assert r1.heartbeat_interval_ms == r2.heartbeat_interval_ms == HEARTBEAT


def test_dlq_topic_name_starting_with_double_underscore_is_refused_at_write_time_too():
    """The group config refuses it (GroupConfig.validate); a value persisted before that still fails at
    the DLQ write (Kafka's validateDlqTopic)."""
    dlq = DeadLetterQueue(config=_NoConfig(), logs=None, watchers=None, topics=object())
    try:
        asyncio.run(dlq._topic("g", "__x"))
    except DlqError as e:
        assert "cannot start with __" in str(e)
    else:
        raise AssertionError("__x accepted as a DLQ topic")


class _NoConfig:
    def get_int(self, key, default):
        return default


def test_group_config_refuses_dlq_topic_starting_with_double_underscore(tmp_path):
    from broker.config import BrokerConfig
    from broker.group_configs import GroupConfigManager
    from broker.log.config import ConfigError

    mgr = GroupConfigManager(BrokerConfig(), str(tmp_path))
    for bad in ("__x", "__consumer_offsets", "__"):
        try:
            mgr.validate("g", {"errors.deadletterqueue.topic.name": bad})
        except ConfigError as e:
            assert str(e) == "errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'"
        else:
            raise AssertionError(f"{bad} accepted")
    for ok in ("", "dlq.x", "_x", "x__"):
        mgr.validate("g", {"errors.deadletterqueue.topic.name": ok})
