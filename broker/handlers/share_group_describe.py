"""ShareGroupDescribe (77) v1: members, epochs and assignments of share groups.

Unknown groups, and groups of another type, get GROUP_ID_NOT_FOUND.  Authorized
operations are not computed (no authorizer yet): the field keeps its default.
"""
from __future__ import annotations

from broker.dispatch import handler
from protocol.messages.registry import ApiKey


@handler(ApiKey.SHARE_GROUP_DESCRIBE, versions=(1, 1))
async def share_group_describe(ctx, req):
    return ctx.components.groups.share_group_describe(req, ctx.api_version)
