"""DescribeGroups (15) v0-6: classic groups only.

A missing group or a group of another type is "Dead"; from v6 it also carries
GROUP_ID_NOT_FOUND and a message (KIP-1043).  Member metadata and assignments are
only shown for Stable groups, as Kafka does.  As KafkaApis: DESCRIBE on each group (else that
group's GROUP_AUTHORIZATION_FAILED and nothing else), v3+ authorized operations when asked.
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import enabled, filter_allowed, operations
from protocol.errors import Errors
from protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from protocol.messages.registry import ApiKey


@handler(ApiKey.DESCRIBE_GROUPS, versions=(0, 6))
async def describe_groups(ctx, req):
    groups = ctx.components.groups
    if not enabled(ctx):
        return groups.describe_groups(req, ctx.api_version)
    ok = filter_allowed(ctx, "DESCRIBE", "GROUP", req.groups)
    described = iter(groups.describe_groups(DescribeGroupsRequest(
        groups=[g for g in req.groups if g in ok], include_authorized_operations=req.include_authorized_operations),
        ctx.api_version).groups)
    out = []
    for gid in req.groups:
        if gid not in ok:
            out.append(DescribeGroupsResponse.DescribedGroup(
                group_id=gid, error_code=Errors.GROUP_AUTHORIZATION_FAILED, group_state="", protocol_type="",
                protocol_data="", members=[]))
            continue
        d = next(described)
        if ctx.api_version >= 3 and req.include_authorized_operations and not d.error_code:
            d.authorized_operations = operations(ctx, "GROUP", gid)
        out.append(d)
    return DescribeGroupsResponse(groups=out)
