"""DescribeGroups (15) v0-6: classic groups only.

A missing group or a group of another type is "Dead"; from v6 it also carries
GROUP_ID_NOT_FOUND and a message (KIP-1043).  Member metadata and assignments are
only shown for Stable groups, as Kafka does.
"""
from __future__ import annotations

from broker.dispatch import handler
from protocol.messages.registry import ApiKey


@handler(ApiKey.DESCRIBE_GROUPS, versions=(0, 6))
async def describe_groups(ctx, req):
    return ctx.components.groups.describe_groups(req, ctx.api_version)
