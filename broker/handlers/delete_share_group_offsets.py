"""DeleteShareGroupOffsets (92) v0: delete an empty share group's state for whole topics.

GROUP_ID_NOT_FOUND / NON_EMPTY_GROUP at the top level, UNKNOWN_TOPIC_OR_PARTITION per topic
(coordinator/group/share_offsets.py); afterwards ``share.auto.offset.reset`` applies again.
As KafkaApis: DELETE on the group (top level GROUP_AUTHORIZATION_FAILED), READ on each
topic (that topic TOPIC_AUTHORIZATION_FAILED, not deleted; the others proceed).
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.handlers.describe_share_group_offsets import TOPIC_AUTHORIZATION_MESSAGE
from broker.security.authorize import allowed, enabled, filter_allowed
from protocol.errors import Errors
from protocol.messages.delete_share_group_offsets import DeleteShareGroupOffsetsResponse as Resp
from protocol.messages.registry import ApiKey
from protocol.primitives import ZERO_UUID


@handler(ApiKey.DELETE_SHARE_GROUP_OFFSETS, versions=(0, 0))
async def delete_share_group_offsets(ctx, req):
    groups = ctx.components.groups
    if not enabled(ctx):
        return await groups.delete_share_group_offsets(req, ctx.api_version)
    if not allowed(ctx, "DELETE", "GROUP", req.group_id):
        return Resp(error_code=Errors.GROUP_AUTHORIZATION_FAILED)
    readable = filter_allowed(ctx, "READ", "TOPIC", [t.topic_name for t in req.topics])
    denied = [Resp.DeleteShareGroupOffsetsResponseTopic(
        topic_name=t.topic_name, topic_id=ZERO_UUID, error_code=Errors.TOPIC_AUTHORIZATION_FAILED,
        error_message=TOPIC_AUTHORIZATION_MESSAGE) for t in req.topics if t.topic_name not in readable]
    req.topics = [t for t in req.topics if t.topic_name in readable]
    resp = await groups.delete_share_group_offsets(req, ctx.api_version)
    if not resp.error_code:
        resp.responses = denied + resp.responses
    return resp
