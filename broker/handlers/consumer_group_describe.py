"""ConsumerGroupDescribe (69) v0-1: KIP-848 groups with epochs, members, assignments and targets.

GROUP_ID_NOT_FOUND for unknown groups and groups of another type; v1 adds
MemberType (1: consumer protocol).
"""
from __future__ import annotations

from broker.dispatch import handler
from protocol.messages.registry import ApiKey


@handler(ApiKey.CONSUMER_GROUP_DESCRIBE, versions=(0, 1))
async def consumer_group_describe(ctx, req):
    return ctx.components.groups.consumer_group_describe(req, ctx.api_version)
