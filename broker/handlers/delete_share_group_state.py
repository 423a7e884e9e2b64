"""DeleteShareGroupState v0-0: served by the share coordinator (coordinator/share_state), the same entry
point the share-partition leader calls in process, so tools and tests can drive
durable share state exactly as another broker would."""
from __future__ import annotations

from broker.dispatch import handler
from protocol.messages.registry import ApiKey


@handler(ApiKey.DELETE_SHARE_GROUP_STATE, versions=(0, 0))
async def delete_share_group_state(ctx, req):
    return await ctx.components.share_state.delete_state(req)
