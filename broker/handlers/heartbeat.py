"""Heartbeat (12) v0-4: keeps a classic group member's session alive.

REBALANCE_IN_PROGRESS tells the member to rejoin; ILLEGAL_GENERATION,
UNKNOWN_MEMBER_ID and FENCED_INSTANCE_ID fence it.  As KafkaApis: READ on the group, else
GROUP_AUTHORIZATION_FAILED.
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import allowed, enabled
from protocol.errors import Errors
from protocol.lazy_messages import HeartbeatResponse
from protocol.messages.registry import ApiKey


@handler(ApiKey.HEARTBEAT, versions=(0, 4))
async def heartbeat(ctx, req):
    if enabled(ctx) and not allowed(ctx, "READ", "GROUP", req.group_id):
        return HeartbeatResponse(error_code=Errors.GROUP_AUTHORIZATION_FAILED)
    return await ctx.components.groups.heartbeat(req, ctx.api_version)
