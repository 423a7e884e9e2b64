"""DescribeShareGroupOffsets (90) v0-1: start offset, leader epoch and (v1, KIP-1226) lag of share partitions.

``Topics`` null describes every initialized share partition of the group.  The group
coordinator reads ReadShareGroupStateSummary and the log end offsets
(coordinator/group/share_offsets.py).  As KafkaApis: DESCRIBE on each group
(GROUP_AUTHORIZATION_FAILED, the coordinator is not asked about it); named topics the
caller may not describe are not asked either and get TOPIC_AUTHORIZATION_FAILED on each
partition; with ``Topics`` null the undescribable topics are left out.
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import TOPIC_AUTHORIZATION_MESSAGE, enabled, filter_allowed, split_allowed
from protocol.errors import Errors
from protocol.lazy_messages import (DescribeShareGroupOffsetsRequest as Req,
                                    DescribeShareGroupOffsetsResponse as Resp)
from protocol.messages.registry import ApiKey
from protocol.primitives import ZERO_UUID


@handler(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, versions=(0, 1))
async def describe_share_group_offsets(ctx, req):
    if not enabled(ctx):
        return await ctx.components.groups.describe_share_group_offsets(req, ctx.api_version)
    groups = [g.group_id for g in req.groups]
    ok = filter_allowed(ctx, "DESCRIBE", "GROUP", groups)
    asked, denied_topics = [], []
    for g in req.groups:
        if g.group_id not in ok:
            continue
        if g.topics is None:
            asked.append(g)
            denied_topics.append([])
            continue
        readable, denied = split_allowed(ctx, "DESCRIBE", "TOPIC", g.topics, lambda t: t.topic_name)
        asked.append(Req.DescribeShareGroupOffsetsRequestGroup(group_id=g.group_id, topics=readable))
        denied_topics.append(denied)
    answered = iter(zip((await ctx.components.groups.describe_share_group_offsets(
        Req(groups=asked), ctx.api_version)).groups, denied_topics))
    out = []
    for g in req.groups:
        if g.group_id not in ok:
            out.append(Resp.DescribeShareGroupOffsetsResponseGroup(
                group_id=g.group_id, error_code=Errors.GROUP_AUTHORIZATION_FAILED, topics=[]))
            continue
        resp, denied = next(answered)
        if not resp.error_code:
            if g.topics is None:  # every topic: the undescribable ones are left out
                resp.topics = split_allowed(ctx, "DESCRIBE", "TOPIC", resp.topics, lambda t: t.topic_name)[0]
            resp.topics += [Resp.DescribeShareGroupOffsetsResponseTopic(
                topic_name=t.topic_name, topic_id=ZERO_UUID, partitions=[
                    Resp.DescribeShareGroupOffsetsResponsePartition(
                        partition_index=p, start_offset=-1, error_code=Errors.TOPIC_AUTHORIZATION_FAILED,
                        error_message=TOPIC_AUTHORIZATION_MESSAGE) for p in t.partitions]) for t in denied]
        out.append(resp)
    return Resp(groups=out)
