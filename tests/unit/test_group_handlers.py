"""The group handlers over the wire codec: requests decoded at every served version, responses encodable."""
from __future__ import annotations

import asyncio

import pytest

from broker.dispatch import RequestContext, load_handlers
from coordinator.group import GroupConfig
from protocol.messages.registry import ApiKey
from test_group_support import Env, cg_hb, commit_req, join_req

HANDLERS = load_handlers()


class FakeConnection:
    peer = "127.0.0.1:50000"


class FakeBroker:
    def __init__(self, coord):
        self.groups = coord


async def call(env, api: ApiKey, version: int, req, host: str = "127.0.0.1"):
    h = HANDLERS[api]
    wire = req.encode(version)
    decoded = h.request_cls.decode(wire, version)
    ctx = RequestContext(FakeBroker(env.coord), FakeConnection(), int(api), version, 1, "client", host=host)
    resp = await h.fn(ctx, decoded)
    back = h.response_cls.decode(resp.encode(version), version)
    return back


@pytest.mark.parametrize("version", range(0, 10))
async def test_classic_flow_every_join_version(version):
    env = Env(config=GroupConfig(initial_rebalance_delay_ms=0))
    from protocol.messages.heartbeat import HeartbeatRequest
    from protocol.messages.leave_group import LeaveGroupRequest
    from protocol.messages.sync_group import SyncGroupRequest
    if version >= 4:
        r = await call(env, ApiKey.JOIN_GROUP, version, join_req("g"))
        assert r.error_code == 79
        task = asyncio.ensure_future(call(env, ApiKey.JOIN_GROUP, version, join_req("g", member=r.member_id)))
    else:
        task = asyncio.ensure_future(call(env, ApiKey.JOIN_GROUP, version, join_req("g")))
    await env.advance(0)
    r = task.result()
    assert r.error_code == 0 and r.generation_id == 1 and r.protocol_name == "range"
    assert r.member_id.startswith("client-")
    m, gen = r.member_id, r.generation_id
    sv = min(version, 5)
    s = await call(env, ApiKey.SYNC_GROUP, sv, SyncGroupRequest(
        group_id="g", generation_id=gen, member_id=m,
        assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=b"x")]))
    assert s.error_code == 0 and s.assignment == b"x"
    hb = await call(env, ApiKey.HEARTBEAT, min(version, 4), HeartbeatRequest(group_id="g", generation_id=gen,
                                                                             member_id=m))
    assert hb.error_code == 0
    lv = min(version, 5)
    if lv < 3:
        leave = LeaveGroupRequest(group_id="g", member_id=m)
    else:
        leave = LeaveGroupRequest(group_id="g", members=[LeaveGroupRequest.MemberIdentity(member_id=m)])
    assert (await call(env, ApiKey.LEAVE_GROUP, lv, leave)).error_code == 0
    # Errors encode at every version too.
    r = await call(env, ApiKey.JOIN_GROUP, version, join_req("g", member="ghost"))
    assert r.error_code == 25


@pytest.mark.parametrize("version", range(2, 11))
async def test_offset_commit_and_fetch_every_version(version):
    env = Env()
    from protocol.messages.offset_fetch import OffsetFetchRequest
    req = commit_req("s", {("foo", 1): 33})
    if version >= 10:
        req.topics[0].topic_id = env.cluster.topic_id("foo")
    r = await call(env, ApiKey.OFFSET_COMMIT, version, req)
    assert r.topics[0].partitions[0].error_code == 0
    fv = version if version <= 10 else 10
    if fv >= 8:
        t = OffsetFetchRequest.OffsetFetchRequestTopics(name="foo", topic_id=env.cluster.topic_id("foo"),
                                                        partition_indexes=[1])
        f = await call(env, ApiKey.OFFSET_FETCH, fv, OffsetFetchRequest(groups=[
            OffsetFetchRequest.OffsetFetchRequestGroup(group_id="s", topics=[t])]))
        assert f.groups[0].topics[0].partitions[0].committed_offset == 33
    else:
        f = await call(env, ApiKey.OFFSET_FETCH, max(fv, 1), OffsetFetchRequest(group_id="s", topics=[
            OffsetFetchRequest.OffsetFetchRequestTopic(name="foo", partition_indexes=[1])]))
        assert f.topics[0].partitions[0].committed_offset == 33


async def test_admin_and_kip848_handlers_encode():
    env = Env()
    from protocol.messages.consumer_group_describe import ConsumerGroupDescribeRequest
    from protocol.messages.delete_groups import DeleteGroupsRequest
    from protocol.messages.describe_groups import DescribeGroupsRequest
    from protocol.messages.list_groups import ListGroupsRequest
    from protocol.messages.offset_delete import OffsetDeleteRequest
    for v in (0, 1):
        r = await call(env, ApiKey.CONSUMER_GROUP_HEARTBEAT, v, cg_hb("cg", "m1" if v else ""))
        assert r.error_code == 0 and r.member_epoch >= 1
        d = await call(env, ApiKey.CONSUMER_GROUP_DESCRIBE, v, ConsumerGroupDescribeRequest(group_ids=["cg", "x"]))
        assert d.groups[0].error_code == 0 and d.groups[0].members[0].client_host == "/127.0.0.1"
    await env.coord.offset_commit(commit_req("s", {("foo", 0): 1}), 8)
    for v in range(0, 6):
        r = await call(env, ApiKey.LIST_GROUPS, v, ListGroupsRequest())
        assert sorted(g.group_id for g in r.groups) == ["cg", "s"]
    for v in range(0, 7):
        r = await call(env, ApiKey.DESCRIBE_GROUPS, v, DescribeGroupsRequest(groups=["s", "cg", "x"]))
        assert r.groups[0].group_state == "Empty"
    r = await call(env, ApiKey.OFFSET_DELETE, 0, OffsetDeleteRequest(group_id="s", topics=[
        OffsetDeleteRequest.OffsetDeleteRequestTopic(name="foo", partitions=[
            OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=0)])]))
    assert r.error_code == 0 and r.topics[0].partitions[0].error_code == 0
    for v in range(0, 4):
        r = await call(env, ApiKey.DELETE_GROUPS, v, DeleteGroupsRequest(groups_names=["cg"]))
        assert r.results[0].error_code == 68


@pytest.mark.parametrize("host,expected", [("127.0.0.1", "/127.0.0.1"), ("::1", "/::1"), ("?", "")])
async def test_every_group_api_records_the_client_host_alike(host, expected):
    """Regression (issue 18): ShareGroupHeartbeat worked the host out of the peer string on its own
    ("/?" for an unknown peer, where JoinGroup and ConsumerGroupHeartbeat record nothing)."""
    from protocol.messages.consumer_group_describe import ConsumerGroupDescribeRequest
    from protocol.messages.share_group_describe import ShareGroupDescribeRequest
    from protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest
    env = Env()
    await env.share_state.load()
    r = await call(env, ApiKey.SHARE_GROUP_HEARTBEAT, 1, ShareGroupHeartbeatRequest(
        group_id="sg", member_id="s1", member_epoch=0, subscribed_topic_names=["foo"]), host=host)
    assert r.error_code == 0
    d = await call(env, ApiKey.SHARE_GROUP_DESCRIBE, 1, ShareGroupDescribeRequest(group_ids=["sg"]))
    assert d.groups[0].members[0].client_host == expected
    assert (await call(env, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, cg_hb("cg", "m1"), host=host)).error_code == 0
    d = await call(env, ApiKey.CONSUMER_GROUP_DESCRIBE, 1, ConsumerGroupDescribeRequest(group_ids=["cg"]))
    assert d.groups[0].members[0].client_host == expected
