"""ListGroups (16) v0-5: every group of every type, filtered by state (v4+) and type (v5+).

Filters are case-insensitive; types are "classic", "consumer" and "share".
"""
from __future__ import annotations

from broker.dispatch import handler
from protocol.messages.registry import ApiKey


@handler(ApiKey.LIST_GROUPS, versions=(0, 5))
async def list_groups(ctx, req):
    return ctx.components.groups.list_groups(req, ctx.api_version)
