"""DeleteTopics (20) v1-6: by name, or by id from v6.

Unknown names get UNKNOWN_TOPIC_OR_PARTITION, unknown ids UNKNOWN_TOPIC_ID, an entry
with both a name and an id INVALID_REQUEST, everything TOPIC_DELETION_DISABLED when
``delete.topic.enable`` is false.  The internal topics are refused with
INVALID_TOPIC_EXCEPTION.  Authorization (as Kafka's controller): DELETE on the CLUSTER or
on the topic, else TOPIC_AUTHORIZATION_FAILED, checked before existence for names; an id
the principal may not DESCRIBE is answered without its name.
``controller_mutation_rate`` counts the deleted partitions: from v5 a topic is refused with
THROTTLING_QUOTA_EXCEEDED while the quota is exhausted (``broker.quotas``).
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.log.errors import LogError
from broker.security.authorize import allowed, allowed_cluster
from protocol.errors import Errors
from protocol.lazy_messages import DeleteTopicsResponse
from protocol.messages.registry import ApiKey
from protocol.primitives import ZERO_UUID

_R = DeleteTopicsResponse.DeletableTopicResult


@handler(ApiKey.DELETE_TOPICS, versions=(1, 6))
async def delete_topics(ctx, req):
    c = ctx.components
    if ctx.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in req.topics]
    else:
        wanted = [(n, ZERO_UUID) for n in req.topic_names]
    out = []
    cluster_delete = allowed_cluster(ctx, "DELETE")
    mutations = ctx.quota.mutations(ctx.api_version, strict_since=5) if ctx.quota is not None else None
    for name, tid in wanted:
        if name is not None and tid != ZERO_UUID:
            out.append(_R(name=name, topic_id=tid, error_code=Errors.INVALID_REQUEST,
                          error_message="Topic name and topic id cannot both be set"))
            continue
        if name is not None and not cluster_delete and not allowed(ctx, "DELETE", "TOPIC", name):
            out.append(_R(name=name, topic_id=tid, error_code=Errors.TOPIC_AUTHORIZATION_FAILED))
            continue
        info = c.logs.topic(name) if name is not None else c.logs.topic_by_id(tid)
        if info is not None and name is None and not cluster_delete:
            if not allowed(ctx, "DESCRIBE", "TOPIC", info.name):
                out.append(_R(name=None, topic_id=tid, error_code=Errors.TOPIC_AUTHORIZATION_FAILED))
                continue
            if not allowed(ctx, "DELETE", "TOPIC", info.name):
                out.append(_R(name=info.name, topic_id=tid, error_code=Errors.TOPIC_AUTHORIZATION_FAILED))
                continue
        if info is None:
            code = Errors.UNKNOWN_TOPIC_ID if name is None else Errors.UNKNOWN_TOPIC_OR_PARTITION
            out.append(_R(name=name, topic_id=tid, error_code=code))
            continue
        if not c.config.get_bool("delete.topic.enable", True):
            out.append(_R(name=info.name, topic_id=info.topic_id.bytes, error_code=Errors.TOPIC_DELETION_DISABLED))
            continue
        if c.topics.is_internal(info.name):
            out.append(_R(name=info.name, topic_id=info.topic_id.bytes, error_code=Errors.INVALID_TOPIC_EXCEPTION,
                          error_message=f"Internal topic {info.name} cannot be deleted"))
            continue
        if mutations is not None and not mutations.record(info.partitions):
            out.append(_R(name=info.name, topic_id=info.topic_id.bytes, error_code=Errors.THROTTLING_QUOTA_EXCEEDED,
                          error_message="The throttling quota has been exceeded."))
            continue
        try:
            await c.topics.delete(info.name)
            out.append(_R(name=info.name, topic_id=info.topic_id.bytes))
        except LogError as e:
            out.append(_R(name=info.name, topic_id=info.topic_id.bytes, error_code=e.code, error_message=str(e)))
    return DeleteTopicsResponse(responses=out)
