"""DescribeShareGroupOffsets (90) v0-1: start offset, leader epoch and (v1, KIP-1226) lag of share partitions.

``Topics`` null describes every initialized share partition of the group.  The group
coordinator reads ReadShareGroupStateSummary and the log end offsets
(coordinator/group/share_offsets.py).  As Kafka's KafkaApis: DESCRIBE on the group and on
the topics.
"""
from __future__ import annotations

from broker.dispatch import DESCRIBE, GROUP, TOPIC, Acl, handler
from protocol.messages.registry import ApiKey


@handler(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, versions=(0, 1), acl=(Acl(DESCRIBE, GROUP), Acl(DESCRIBE, TOPIC)))
async def describe_share_group_offsets(ctx, req):
    return await ctx.components.groups.describe_share_group_offsets(req, ctx.api_version)
