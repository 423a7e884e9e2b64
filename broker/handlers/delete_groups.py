"""DeleteGroups (42) v0-3: delete empty groups and their offsets (tombstones).

NON_EMPTY_GROUP for groups with members, GROUP_ID_NOT_FOUND for unknown ones.  As KafkaApis: DELETE
on each group, else that result GROUP_AUTHORIZATION_FAILED (and it is not deleted).
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import enabled, filter_allowed
from protocol.errors import Errors
from protocol.lazy_messages import DeleteGroupsResponse
from protocol.messages.registry import ApiKey


@handler(ApiKey.DELETE_GROUPS, versions=(0, 3))
async def delete_groups(ctx, req):
    groups = ctx.components.groups
    if not enabled(ctx):
        return await groups.delete_groups(req, ctx.api_version)
    ok = filter_allowed(ctx, "DELETE", "GROUP", req.groups_names)
    denied = list(dict.fromkeys(g for g in req.groups_names if g not in ok))
    req.groups_names = [g for g in req.groups_names if g in ok]
    resp = await groups.delete_groups(req, ctx.api_version)
    resp.results += [DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=Errors.GROUP_AUTHORIZATION_FAILED)
                     for g in denied]
    return resp
