"""JoinGroup (11) v0-9: classic group membership, answered by the group coordinator.

A long poll: the response comes when the rebalance completes (or on an error /
MEMBER_ID_REQUIRED from v4).  v0 has no rebalance timeout: the session timeout
is used, as Kafka does.  Before v7 ProtocolName is not nullable, so "" stands
for null.  See coordinator/group/classic.py for the protocol itself.  As KafkaApis: READ on the
group, else GROUP_AUTHORIZATION_FAILED (SyncGroup, Heartbeat and LeaveGroup check the same).
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import allowed, enabled
from protocol.errors import Errors
from protocol.lazy_messages import JoinGroupResponse
from protocol.messages.registry import ApiKey


@handler(ApiKey.JOIN_GROUP, versions=(0, 9))
async def join_group(ctx, req):
    if enabled(ctx) and not allowed(ctx, "READ", "GROUP", req.group_id):
        resp = JoinGroupResponse(error_code=Errors.GROUP_AUTHORIZATION_FAILED, generation_id=-1, member_id="",
                                 members=[])
    else:
        resp = await ctx.components.groups.join_group(req, ctx.api_version, ctx.client_id or "", ctx.client_host)
    if ctx.api_version < 7 and resp.protocol_name is None:
        resp.protocol_name = ""
    if resp.leader is None:
        resp.leader = ""
    return resp
