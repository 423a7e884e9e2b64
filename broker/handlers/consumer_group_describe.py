"""ConsumerGroupDescribe (69) v0-1: KIP-848 groups with epochs, members, assignments and targets.

GROUP_ID_NOT_FOUND for unknown groups and groups of another type; v1 adds
MemberType (1: consumer protocol).  As KafkaApis: DESCRIBE on each group
(GROUP_AUTHORIZATION_FAILED), the authorized operations when asked,
TOPIC_AUTHORIZATION_FAILED for a group whose members' current or target assignments
name topics the caller may not describe (broker/security/authorize.py ``describe_groups``).
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import describe_groups
from protocol.errors import Errors
from protocol.lazy_messages import ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse
from protocol.messages.registry import ApiKey

_G = ConsumerGroupDescribeResponse.DescribedGroup


def _assigned(g) -> set:
    return {tp.topic_name for m in g.members for a in (m.assignment, m.target_assignment) if a is not None
            for tp in a.topic_partitions}


@handler(ApiKey.CONSUMER_GROUP_DESCRIBE, versions=(0, 1))
async def consumer_group_describe(ctx, req):
    groups = ctx.components.groups

    def describe(ids):
        return groups.consumer_group_describe(ConsumerGroupDescribeRequest(
            group_ids=ids, include_authorized_operations=req.include_authorized_operations), ctx.api_version).groups

    return ConsumerGroupDescribeResponse(groups=describe_groups(
        ctx, req.group_ids, describe, lambda gid: _G(group_id=gid, error_code=Errors.GROUP_AUTHORIZATION_FAILED),
        _assigned, req.include_authorized_operations))
