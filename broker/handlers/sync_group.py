"""SyncGroup (14) v0-5: the leader hands in the assignment, every member gets its own.

A long poll for followers until the leader's assignment is durable (GroupMetadata
record).  v5 checks ProtocolType/ProtocolName against the group's
(INCONSISTENT_GROUP_PROTOCOL) and returns them.  As KafkaApis: READ on the group, else
GROUP_AUTHORIZATION_FAILED.
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import allowed, enabled
from protocol.errors import Errors
from protocol.lazy_messages import SyncGroupResponse
from protocol.messages.registry import ApiKey


@handler(ApiKey.SYNC_GROUP, versions=(0, 5))
async def sync_group(ctx, req):
    if enabled(ctx) and not allowed(ctx, "READ", "GROUP", req.group_id):
        return SyncGroupResponse(error_code=Errors.GROUP_AUTHORIZATION_FAILED)
    return await ctx.components.groups.sync_group(req, ctx.api_version)
