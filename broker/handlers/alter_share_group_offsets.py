"""AlterShareGroupOffsets (91) v0: set the start offsets of an empty share group's partitions.

NON_EMPTY_GROUP while the group has members, GROUP_ID_NOT_FOUND for a group of another
type, UNKNOWN_TOPIC_OR_PARTITION per partition; the share state is initialized at a new
state epoch (coordinator/group/share_offsets.py).  As KafkaApis: READ on the group (top
level GROUP_AUTHORIZATION_FAILED, nothing altered), READ on each topic (that topic's
partitions TOPIC_AUTHORIZATION_FAILED and not altered, the others proceed).
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import TOPIC_AUTHORIZATION_MESSAGE, allowed, enabled, split_allowed
from protocol.errors import Errors
from protocol.lazy_messages import AlterShareGroupOffsetsResponse as Resp
from protocol.messages.registry import ApiKey
from protocol.primitives import ZERO_UUID


@handler(ApiKey.ALTER_SHARE_GROUP_OFFSETS, versions=(0, 0))
async def alter_share_group_offsets(ctx, req):
    groups = ctx.components.groups
    if not enabled(ctx):
        return await groups.alter_share_group_offsets(req, ctx.api_version)
    if not allowed(ctx, "READ", "GROUP", req.group_id):
        return Resp(error_code=Errors.GROUP_AUTHORIZATION_FAILED)
    req.topics, denied = split_allowed(ctx, "READ", "TOPIC", req.topics, lambda t: t.topic_name)
    resp = await groups.alter_share_group_offsets(req, ctx.api_version)
    if resp.error_code:
        return resp
    for t in denied:
        info = ctx.components.logs.topic(t.topic_name)  # Kafka answers the topic id it knows
        resp.responses.append(Resp.AlterShareGroupOffsetsResponseTopic(
            topic_name=t.topic_name, topic_id=ZERO_UUID if info is None else info.topic_id.bytes, partitions=[
                Resp.AlterShareGroupOffsetsResponsePartition(
                    partition_index=p.partition_index, error_code=Errors.TOPIC_AUTHORIZATION_FAILED,
                    error_message=TOPIC_AUTHORIZATION_MESSAGE) for p in t.partitions]))
    return resp
