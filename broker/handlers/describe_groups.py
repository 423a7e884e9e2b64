"""DescribeGroups (15) v0-6: classic groups only.

A missing group or a group of another type is "Dead"; from v6 it also carries
GROUP_ID_NOT_FOUND and a message (KIP-1043).  Member metadata and assignments are
only shown for Stable groups, as Kafka does.  As KafkaApis: DESCRIBE on each group (else that
group's GROUP_AUTHORIZATION_FAILED and nothing else), v3+ authorized operations when asked.
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security import authorize
from protocol.errors import Errors
from protocol.lazy_messages import DescribeGroupsRequest, DescribeGroupsResponse
from protocol.messages.registry import ApiKey

_G = DescribeGroupsResponse.DescribedGroup


def _denied(gid: str):
    return _G(group_id=gid, error_code=Errors.GROUP_AUTHORIZATION_FAILED, group_state="", protocol_type="",
              protocol_data="", members=[])


@handler(ApiKey.DESCRIBE_GROUPS, versions=(0, 6))
async def describe_groups(ctx, req):
    groups = ctx.components.groups
    if not authorize.enabled(ctx):
        return groups.describe_groups(req, ctx.api_version)

    def describe(ids):
        return groups.describe_groups(DescribeGroupsRequest(
            groups=ids, include_authorized_operations=req.include_authorized_operations), ctx.api_version).groups

    # classic groups have no assigned topics to check (their assignments are opaque bytes)
    return DescribeGroupsResponse(groups=authorize.describe_groups(
        ctx, req.groups, describe, _denied, lambda g: (), ctx.api_version >= 3 and req.include_authorized_operations))
