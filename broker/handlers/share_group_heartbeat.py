"""ShareGroupHeartbeat (76) v1: join, stay in, or leave a share group (coordinator/group/share.py).

librdkafka 2.16 requires v1 inside the advertised range; v0 (the KIP's early
access version) is not served, as in Kafka 4.x.
"""
from __future__ import annotations

from broker.dispatch import handler
from protocol.messages.registry import ApiKey


@handler(ApiKey.SHARE_GROUP_HEARTBEAT, versions=(1, 1))
async def share_group_heartbeat(ctx, req):
    host = ctx.connection.peer.rsplit(":", 1)[0] if ctx.connection is not None else ""
    return await ctx.components.groups.share_group_heartbeat(req, ctx.client_id, "/" + host)
