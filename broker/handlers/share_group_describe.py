"""ShareGroupDescribe (77) v1: members, epochs and assignments of share groups.

Unknown groups, and groups of another type, get GROUP_ID_NOT_FOUND.  As KafkaApis:
DESCRIBE on each group (GROUP_AUTHORIZATION_FAILED), the authorized operations when
asked, TOPIC_AUTHORIZATION_FAILED for a group whose members are assigned topics the
caller may not describe (broker/security/authorize.py ``describe_groups``).
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import describe_groups
from protocol.errors import Errors
from protocol.messages.registry import ApiKey
from protocol.lazy_messages import ShareGroupDescribeRequest, ShareGroupDescribeResponse

_G = ShareGroupDescribeResponse.DescribedGroup


@handler(ApiKey.SHARE_GROUP_DESCRIBE, versions=(1, 1))
async def share_group_describe(ctx, req):
    groups = ctx.components.groups

    def describe(ids):
        return groups.share_group_describe(ShareGroupDescribeRequest(group_ids=ids), ctx.api_version).groups

    return ShareGroupDescribeResponse(groups=describe_groups(
        ctx, req.group_ids, describe, lambda gid: _G(group_id=gid, error_code=Errors.GROUP_AUTHORIZATION_FAILED),
        lambda g: {tp.topic_name for m in g.members for tp in m.assignment.topic_partitions},
        req.include_authorized_operations))
