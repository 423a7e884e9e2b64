"""StreamsGroupDescribe (89) v0-1: KIP-1071 groups with their topology, epochs, members and task assignments.

GROUP_ID_NOT_FOUND for unknown groups and groups of another type.  As KafkaApis: DESCRIBE on each
group (GROUP_AUTHORIZATION_FAILED), the authorized operations when asked.  v1's topology
description is never stored here (no topology description plugin): TopologyDescription is null
and its status 0.
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import describe_groups
from protocol.errors import Errors
from protocol.lazy_messages import StreamsGroupDescribeRequest, StreamsGroupDescribeResponse
from protocol.messages.registry import ApiKey

_G = StreamsGroupDescribeResponse.DescribedGroup


@handler(ApiKey.STREAMS_GROUP_DESCRIBE, versions=(0, 1))
async def streams_group_describe(ctx, req):
    groups = ctx.components.groups

    def describe(ids):
        return groups.streams_group_describe(StreamsGroupDescribeRequest(
            group_ids=ids, include_authorized_operations=req.include_authorized_operations), ctx.api_version).groups

    return StreamsGroupDescribeResponse(groups=describe_groups(
        ctx, req.group_ids, describe, lambda gid: _G(group_id=gid, error_code=Errors.GROUP_AUTHORIZATION_FAILED),
        lambda g: set(), req.include_authorized_operations))
