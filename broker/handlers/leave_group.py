"""LeaveGroup (13) v0-5: members leave a classic group (v3+: several, by member or instance id).

v0-2 carry one member id and report its error at the top level; v3+ report per
member.  Static members can be removed by group.instance.id alone.  As KafkaApis: READ on the
group, else GROUP_AUTHORIZATION_FAILED at the top level (no member results).
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import allowed, enabled
from protocol.errors import Errors
from protocol.lazy_messages import LeaveGroupResponse
from protocol.messages.registry import ApiKey


@handler(ApiKey.LEAVE_GROUP, versions=(0, 5))
async def leave_group(ctx, req):
    if enabled(ctx) and not allowed(ctx, "READ", "GROUP", req.group_id):
        return LeaveGroupResponse(error_code=Errors.GROUP_AUTHORIZATION_FAILED, members=[])
    return await ctx.components.groups.leave_group(req, ctx.api_version)
