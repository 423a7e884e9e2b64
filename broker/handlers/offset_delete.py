"""OffsetDelete (47) v0: delete committed offsets of topics the group does not consume.

GROUP_SUBSCRIBED_TO_TOPIC for subscribed topics, NON_EMPTY_GROUP for a non-empty
classic group that does not use the consumer protocol, GROUP_ID_NOT_FOUND for an
unknown group.
"""
from __future__ import annotations

from broker.dispatch import handler
from protocol.messages.registry import ApiKey


@handler(ApiKey.OFFSET_DELETE, versions=(0, 0))
async def offset_delete(ctx, req):
    return await ctx.components.groups.offset_delete(req, ctx.api_version)
