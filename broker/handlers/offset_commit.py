"""OffsetCommit (8) v2-10: store committed offsets in the group coordinator.

Generation -1 with an empty member id is a standalone commit (a "simple" group is
created); otherwise classic generation / KIP-848 member epoch fencing applies.
v2-4 RetentionTimeMs other than -1 is an explicit per-offset retention (KIP-211
compatibility); v10 addresses topics by id (UNKNOWN_TOPIC_ID).  Unknown topics get
UNKNOWN_TOPIC_OR_PARTITION.  Transactional commits are not implemented.
As KafkaApis: READ on the group (else every partition GROUP_AUTHORIZATION_FAILED), READ on
each topic (else its partitions TOPIC_AUTHORIZATION_FAILED, not committed; when no topic is
left the coordinator is not asked).
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import allowed, enabled, split_allowed, topic_name
from protocol.errors import Errors
from protocol.lazy_messages import OffsetCommitResponse as Resp
from protocol.messages.registry import ApiKey
from protocol.primitives import ZERO_UUID


def _answer(topics, code: int, by_id: bool) -> list:
    return [Resp.OffsetCommitResponseTopic(
        name="" if by_id else t.name, topic_id=t.topic_id if by_id else ZERO_UUID, partitions=[
            Resp.OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code)
            for p in t.partitions]) for t in topics]


@handler(ApiKey.OFFSET_COMMIT, versions=(2, 10))
async def offset_commit(ctx, req):
    groups = ctx.components.groups
    if not enabled(ctx):
        return await groups.offset_commit(req, ctx.api_version)
    by_id = ctx.api_version >= 10
    if not allowed(ctx, "READ", "GROUP", req.group_id):
        return Resp(topics=_answer(req.topics, Errors.GROUP_AUTHORIZATION_FAILED, by_id))
    kept, denied = split_allowed(ctx, "READ", "TOPIC", req.topics,
                                 (lambda t: topic_name(ctx, t.topic_id)) if by_id else (lambda t: t.name))
    if not denied:
        return await groups.offset_commit(req, ctx.api_version)
    req.topics = kept
    resp = await groups.offset_commit(req, ctx.api_version) if req.topics else Resp(topics=[])
    resp.topics += _answer(denied, Errors.TOPIC_AUTHORIZATION_FAILED, by_id)
    return resp
