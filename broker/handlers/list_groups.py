"""ListGroups (16) v0-5: every group of every type, filtered by state (v4+) and type (v5+).

Filters are case-insensitive; types are "classic", "consumer" and "share".  As KafkaApis: DESCRIBE
on the CLUSTER lists every group, otherwise only the groups the caller may DESCRIBE (no error).
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import allowed, allowed_cluster, enabled
from protocol.messages.registry import ApiKey


@handler(ApiKey.LIST_GROUPS, versions=(0, 5))
async def list_groups(ctx, req):
    resp = ctx.components.groups.list_groups(req, ctx.api_version)
    if enabled(ctx) and not allowed_cluster(ctx, "DESCRIBE"):
        resp.groups = [g for g in resp.groups if allowed(ctx, "DESCRIBE", "GROUP", g.group_id)]
    return resp
