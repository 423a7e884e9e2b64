"""OffsetFetch (9) v1-10: committed offsets of one group (v1-7) or several (v8+).

Null topics fetch every offset of the group; v9 validates MemberId/MemberEpoch of
KIP-848 members (STALE_MEMBER_EPOCH / UNKNOWN_MEMBER_ID); v10 uses topic ids.
RequireStable is accepted; with no transactional commits nothing is ever pending.
"""
from __future__ import annotations

from broker.dispatch import handler
from protocol.messages.registry import ApiKey


@handler(ApiKey.OFFSET_FETCH, versions=(1, 10))
async def offset_fetch(ctx, req):
    return await ctx.components.groups.offset_fetch(req, ctx.api_version)
