"""DeleteShareGroupState v0-0: served by the share coordinator (coordinator/share_state), the same entry
point the share-partition leader calls in process, so tools and tests can drive
durable share state exactly as another broker would.  As KafkaApis: CLUSTER_ACTION on the CLUSTER,
else every partition CLUSTER_AUTHORIZATION_FAILED (the in-process persister does not come here)."""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import share_state_denied
from protocol.lazy_messages import DeleteShareGroupStateResponse as Resp
from protocol.messages.registry import ApiKey


@handler(ApiKey.DELETE_SHARE_GROUP_STATE, versions=(0, 0))
async def delete_share_group_state(ctx, req):
    denied = share_state_denied(ctx, req, Resp, Resp.DeleteStateResult)
    return denied or await ctx.components.share_state.delete_state(req)
