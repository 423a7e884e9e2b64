"""LeaveGroup (13) v0-5: members leave a classic group (v3+: several, by member or instance id).

v0-2 carry one member id and report its error at the top level; v3+ report per
member.  Static members can be removed by group.instance.id alone.
"""
from __future__ import annotations

from broker.dispatch import handler
from protocol.messages.registry import ApiKey


@handler(ApiKey.LEAVE_GROUP, versions=(0, 5))
async def leave_group(ctx, req):
    return await ctx.components.groups.leave_group(req, ctx.api_version)
