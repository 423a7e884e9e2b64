"""AlterShareGroupOffsets (91) v0: set the start offsets of an empty share group's partitions.

NON_EMPTY_GROUP while the group has members, GROUP_ID_NOT_FOUND for a group of another
type, UNKNOWN_TOPIC_OR_PARTITION per partition; the share state is initialized at a new
state epoch (coordinator/group/share_offsets.py).  As Kafka's KafkaApis: READ on the group
and on the topics.
"""
from __future__ import annotations

from broker.dispatch import GROUP, READ, TOPIC, Acl, handler
from protocol.messages.registry import ApiKey


@handler(ApiKey.ALTER_SHARE_GROUP_OFFSETS, versions=(0, 0), acl=(Acl(READ, GROUP), Acl(READ, TOPIC)))
async def alter_share_group_offsets(ctx, req):
    return await ctx.components.groups.alter_share_group_offsets(req, ctx.api_version)
