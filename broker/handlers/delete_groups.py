"""DeleteGroups (42) v0-3: delete empty groups and their offsets (tombstones).

NON_EMPTY_GROUP for groups with members, GROUP_ID_NOT_FOUND for unknown ones.
"""
from __future__ import annotations

from broker.dispatch import handler
from protocol.messages.registry import ApiKey


@handler(ApiKey.DELETE_GROUPS, versions=(0, 3))
async def delete_groups(ctx, req):
    return await ctx.components.groups.delete_groups(req, ctx.api_version)
