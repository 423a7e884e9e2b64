"""OffsetFetch (9) v1-10: committed offsets of one group (v1-7) or several (v8+).

Null topics fetch every offset of the group; v9 validates MemberId/MemberEpoch of
KIP-848 members (STALE_MEMBER_EPOCH / UNKNOWN_MEMBER_ID); v10 uses topic ids.
RequireStable (v7+): a partition whose offset a TxnOffsetCommit holds pending in an open
transaction answers UNSTABLE_OFFSET_COMMIT (the pending store: coordinator/group/offsets.py).
As KafkaApis: DESCRIBE on each group (v8+: that group's error; v2-7: the top-level error;
v1: every requested partition's error); named topics without DESCRIBE are not asked and
their partitions get TOPIC_AUTHORIZATION_FAILED; with null topics the undescribable ones
are left out.
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import allowed, enabled, filter_allowed, split_allowed, topic_name
from protocol.errors import Errors
from protocol.lazy_messages import (OffsetFetchRequest as Req, OffsetFetchResponse as Resp)
from protocol.messages.registry import ApiKey


class _Scope:
    """One group's authorization: which of its requested topics are asked, which are denied."""

    def __init__(self, ctx, group_id: str, topics, by_id: bool):
        self.ctx, self.by_id = ctx, by_id
        self.allowed = allowed(ctx, "DESCRIBE", "GROUP", group_id)
        self.asked, self.denied = topics, []
        if self.allowed and topics is not None:
            self.asked, self.denied = split_allowed(ctx, "DESCRIBE", "TOPIC", topics, self.name)

    def name(self, t) -> str | None:
        return topic_name(self.ctx, t.topic_id) if self.by_id else t.name

    def filter(self, topics) -> list:
        """The answered topics the caller may describe (null topics: every offset of the group)."""
        if self.asked is not None:
            return topics
        ok = filter_allowed(self.ctx, "DESCRIBE", "TOPIC", [n for t in topics if (n := self.name(t)) is not None])
        return [t for t in topics if self.name(t) in ok]


def _errors(topics, code: int, new_topic, new_partition) -> list:
    return [new_topic(t, [new_partition(partition_index=p, committed_offset=-1, error_code=code)
                          for p in t.partition_indexes]) for t in topics]


def _topics(t, parts):
    return Resp.OffsetFetchResponseTopics(name=t.name, topic_id=t.topic_id, partitions=parts)


def _topic(t, parts):
    return Resp.OffsetFetchResponseTopic(name=t.name, partitions=parts)


@handler(ApiKey.OFFSET_FETCH, versions=(1, 10))
async def offset_fetch(ctx, req):
    groups = ctx.components.groups
    if not enabled(ctx):
        return await groups.offset_fetch(req, ctx.api_version)
    version = ctx.api_version
    if version < 8:
        scope = _Scope(ctx, req.group_id, req.topics, False)
        if not scope.allowed:
            if version >= 2:
                return Resp(error_code=Errors.GROUP_AUTHORIZATION_FAILED, topics=[])
            return Resp(topics=_errors(req.topics or [], Errors.GROUP_AUTHORIZATION_FAILED, _topic,
                                       Resp.OffsetFetchResponsePartition))
        req.topics = scope.asked
        resp = await groups.offset_fetch(req, version)
        if not resp.error_code:
            resp.topics = scope.filter(resp.topics) + _errors(
                scope.denied, Errors.TOPIC_AUTHORIZATION_FAILED, _topic, Resp.OffsetFetchResponsePartition)
        return resp
    scopes = [_Scope(ctx, g.group_id, g.topics, version >= 10) for g in req.groups]
    asked = []
    for g, s in zip(req.groups, scopes):
        if s.allowed:
            one = Req.OffsetFetchRequestGroup(group_id=g.group_id, member_id=g.member_id, member_epoch=g.member_epoch)
            one.topics = s.asked  # after the constructor, which turns None (all topics) into [] (none)
            asked.append(one)
    answers = iter((await groups.offset_fetch(Req(groups=asked, require_stable=req.require_stable),
                                              version)).groups)
    out = []
    for g, scope in zip(req.groups, scopes):
        if not scope.allowed:
            out.append(Resp.OffsetFetchResponseGroup(group_id=g.group_id, error_code=Errors.GROUP_AUTHORIZATION_FAILED,
                                                     topics=[]))
            continue
        r = next(answers)
        if not r.error_code:
            r.topics = scope.filter(r.topics) + _errors(scope.denied, Errors.TOPIC_AUTHORIZATION_FAILED, _topics,
                                                        Resp.OffsetFetchResponsePartitions)
        out.append(r)
    return Resp(groups=out)
