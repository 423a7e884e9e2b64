"""ShareGroupHeartbeat (76) v1: join, stay in, or leave a share group (coordinator/group/share.py).

librdkafka 2.16 requires v1 inside the advertised range; v0 (the KIP's early
access version) is not served, as in Kafka 4.x.  With an authorizer, as KafkaApis:
READ on the group (GROUP_AUTHORIZATION_FAILED), then DESCRIBE on every subscribed
topic (TOPIC_AUTHORIZATION_FAILED, and the coordinator is not asked).
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import enabled, subscription_error
from protocol.messages.registry import ApiKey
from protocol.lazy_messages import ShareGroupHeartbeatResponse


@handler(ApiKey.SHARE_GROUP_HEARTBEAT, versions=(1, 1))
async def share_group_heartbeat(ctx, req):
    if enabled(ctx) and (code := subscription_error(ctx, req.group_id, req.subscribed_topic_names)):
        return ShareGroupHeartbeatResponse(error_code=code)
    return await ctx.components.groups.share_group_heartbeat(req, ctx.client_id, ctx.client_host)
