"""DeleteShareGroupOffsets (92) v0: delete an empty share group's state for whole topics.

GROUP_ID_NOT_FOUND / NON_EMPTY_GROUP at the top level, UNKNOWN_TOPIC_OR_PARTITION per topic
(coordinator/group/share_offsets.py); afterwards ``share.auto.offset.reset`` applies again.
As Kafka's KafkaApis: DELETE on the group, READ on the topics.
"""
from __future__ import annotations

from broker.dispatch import DELETE, GROUP, READ, TOPIC, Acl, handler
from protocol.messages.registry import ApiKey


@handler(ApiKey.DELETE_SHARE_GROUP_OFFSETS, versions=(0, 0), acl=(Acl(DELETE, GROUP), Acl(READ, TOPIC)))
async def delete_share_group_offsets(ctx, req):
    return await ctx.components.groups.delete_share_group_offsets(req, ctx.api_version)
