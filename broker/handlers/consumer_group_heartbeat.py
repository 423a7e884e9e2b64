"""ConsumerGroupHeartbeat (68) v0-1: KIP-848 consumer group membership and assignment.

Join (epoch 0), heartbeat, leave (-1) and static temporary leave (-2); server-side
assignors "uniform" (default), "range" and "lag".  v1 requires client-generated
member ids; v0 gets one from the coordinator.  See coordinator/group/consumer.py.
With an authorizer, as KafkaApis: READ on the group, DESCRIBE on every subscribed
topic name (GROUP_ / TOPIC_AUTHORIZATION_FAILED, the coordinator is not asked).
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import enabled, subscription_error
from protocol.lazy_messages import ConsumerGroupHeartbeatResponse
from protocol.messages.registry import ApiKey


@handler(ApiKey.CONSUMER_GROUP_HEARTBEAT, versions=(0, 1))
async def consumer_group_heartbeat(ctx, req):
    if enabled(ctx) and (code := subscription_error(ctx, req.group_id, req.subscribed_topic_names)):
        return ConsumerGroupHeartbeatResponse(error_code=code)
    return await ctx.components.groups.consumer_group_heartbeat(req, ctx.api_version, ctx.client_id or "",
                                                                ctx.client_host)
