"""OffsetDelete (47) v0: delete committed offsets of topics the group does not consume.

GROUP_SUBSCRIBED_TO_TOPIC for subscribed topics, NON_EMPTY_GROUP for a non-empty
classic group that does not use the consumer protocol, GROUP_ID_NOT_FOUND for an
unknown group.  As KafkaApis: DELETE on the group (top level GROUP_AUTHORIZATION_FAILED), READ on
each topic (its partitions TOPIC_AUTHORIZATION_FAILED, not deleted).
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import allowed, enabled, split_allowed
from protocol.errors import Errors
from protocol.lazy_messages import OffsetDeleteResponse as Resp
from protocol.messages.registry import ApiKey


@handler(ApiKey.OFFSET_DELETE, versions=(0, 0))
async def offset_delete(ctx, req):
    groups = ctx.components.groups
    if not enabled(ctx):
        return await groups.offset_delete(req, ctx.api_version)
    if not allowed(ctx, "DELETE", "GROUP", req.group_id):
        return Resp(error_code=Errors.GROUP_AUTHORIZATION_FAILED, topics=[])
    req.topics, denied = split_allowed(ctx, "READ", "TOPIC", req.topics, lambda t: t.name)
    resp = await groups.offset_delete(req, ctx.api_version)
    resp.topics += [Resp.OffsetDeleteResponseTopic(name=t.name, partitions=[Resp.OffsetDeleteResponsePartition(
        partition_index=p.partition_index, error_code=Errors.TOPIC_AUTHORIZATION_FAILED) for p in t.partitions])
        for t in denied]
    return resp
