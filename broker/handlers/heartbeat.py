"""Heartbeat (12) v0-4: keeps a classic group member's session alive.

REBALANCE_IN_PROGRESS tells the member to rejoin; ILLEGAL_GENERATION,
UNKNOWN_MEMBER_ID and FENCED_INSTANCE_ID fence it.
"""
from __future__ import annotations

from broker.dispatch import handler
from protocol.messages.registry import ApiKey


@handler(ApiKey.HEARTBEAT, versions=(0, 4))
async def heartbeat(ctx, req):
    return await ctx.components.groups.heartbeat(req, ctx.api_version)
