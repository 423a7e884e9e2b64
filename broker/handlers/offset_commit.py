"""OffsetCommit (8) v2-10: store committed offsets in the group coordinator.

Generation -1 with an empty member id is a standalone commit (a "simple" group is
created); otherwise classic generation / KIP-848 member epoch fencing applies.
v2-4 RetentionTimeMs other than -1 is an explicit per-offset retention (KIP-211
compatibility); v10 addresses topics by id (UNKNOWN_TOPIC_ID).  Unknown topics get
UNKNOWN_TOPIC_OR_PARTITION.  Transactional commits are not implemented.
"""
from __future__ import annotations

from broker.dispatch import handler
from protocol.messages.registry import ApiKey


@handler(ApiKey.OFFSET_COMMIT, versions=(2, 10))
async def offset_commit(ctx, req):
    return await ctx.components.groups.offset_commit(req, ctx.api_version)
