"""Metadata (3) v0-13: this broker leads every partition (leader epoch 0, ISR = [this node]).

Topics by name, or by id from v10 (librdkafka resolves share-group assignments by
id); an unknown id gets UNKNOWN_TOPIC_ID.  A null topic list means all topics.
Unknown names are created when ``auto.create.topics.enable`` is true and the
request allows it (always before v4), with ``num.partitions`` partitions, answered once the
topic is durable (as CreateTopics; KAFKA_STORAGE_ERROR if that fails, LEADER_NOT_AVAILABLE while
another request creates it).  The
broker's address is that of the listener the request came on.

Authorization, as KafkaApis.handleTopicMetadataRequest: topics the principal may
not DESCRIBE are left out of an all-topics answer and answered
TOPIC_AUTHORIZATION_FAILED when named (by id: the id, no name); auto-creation needs
CREATE on the CLUSTER or on the topic (TOPIC_AUTHORIZATION_FAILED otherwise).
Authorized operations when asked: each topic's, and the cluster's (v8-10; 0 without
DESCRIBE on the CLUSTER); every operation without an authorizer.

Cost: an answer for every topic is mostly partitions, each the same but for its index, so a
topic's encoded entry is kept on its ``TopicInfo.wire`` (keyed by the version and every field the
entry holds: a topic that gains partitions, or a principal with other operations, gets its own)
and the answer is spliced from those bytes (:class:`Spliced`) instead of one object per partition
encoded each time; an entry is made from one packed struct per partition, not objects.  Metadata for
10,000 partitions costs ~0.5 ms of the loop once encoded, ~2 ms to encode (bench/metadata.py).
The bytes are the codec's own (tests/unit/test_metadata_splice.py), so answers are unchanged.
"""
from __future__ import annotations

import struct

from broker.dispatch import handler
from broker.log.errors import LogError
from broker.security.authorize import ALL_OPERATIONS, UNSET, allowed, allowed_cluster, operations
from protocol.errors import Errors
from protocol.lazy_messages import MetadataResponse  # the real class once Metadata is first served
from protocol.messages.registry import ApiKey
from protocol.primitives import ZERO_UUID, write_array_len, write_compact_array_len

_T = MetadataResponse.MetadataResponseTopic
# READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS
TOPIC_OPERATIONS = ALL_OPERATIONS["TOPIC"]
# CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER, DESCRIBE
CLUSTER_OPERATIONS = ALL_OPERATIONS["CLUSTER"]


def cluster_operations(ctx) -> int:
    """The cluster's authorized operations: 0 without DESCRIBE on it (AuthHelper)."""
    return operations(ctx, "CLUSTER", "kafka-cluster") if allowed_cluster(ctx, "DESCRIBE") else 0


def _tail_len(v: int) -> int:
    """Bytes after the topics array: cluster_authorized_operations (v8-10), error_code (v13+), tagged
    fields (flexible, v9+: none)."""
    return (4 if 8 <= v <= 10 else 0) + (2 if v >= 13 else 0) + (1 if v >= 9 else 0)


_HEAD_LEN: dict[int, int] = {}  # by version: the bytes before an answer's topics (the count included)


def entry_bytes(v: int, t: _T) -> bytes:
    """One topic's entry as the codec encodes it at version ``v``: a response holding only it, less
    what an empty response holds around the topics (the array's count is as wide for 0 as for 1)."""
    tail = _tail_len(v)
    head = _HEAD_LEN.get(v)
    if head is None:
        head = _HEAD_LEN[v] = len(MetadataResponse(brokers=[], topics=[]).encode(v)) - tail
    one = bytearray()
    MetadataResponse(brokers=[], topics=[t]).encode_into(one, v)
    return bytes(one[head:len(one) - tail])


# One partition of ours (no error, leader and only replica and ISR this node, leader epoch 0, none
# offline) by the versions that encode it alike: (first version, layout, the values after the index).
_PARTITION = (
    (9, struct.Struct(">hiiiBiBiBB"), lambda n: (n, 0, 2, n, 2, n, 1, 0)),  # compact arrays, tags
    (7, struct.Struct(">hiiiiiiii"), lambda n: (n, 0, 1, n, 1, n, 0)),  # leader_epoch
    (5, struct.Struct(">hiiiiiii"), lambda n: (n, 1, n, 1, n, 0)),  # offline_replicas
    (0, struct.Struct(">hiiiiii"), lambda n: (n, 1, n, 1, n)),
)


def _fill_array(b: bytearray, tail: int, v: int, items: list[bytes], count: int) -> None:
    """Put ``count`` encoded ``items`` in the empty array that ends ``tail`` bytes before the end of
    ``b`` (its count one byte wide in flexible versions, v9+; four before)."""
    end = len(b) - tail
    rest = b[end:]
    if v >= 9:
        del b[end - 1:]
        write_compact_array_len(b, range(count))
    else:
        del b[end - 4:]
        write_array_len(b, range(count))
    b += b"".join(items)
    b += rest


def own_entry_bytes(v: int, info, node: int, is_internal: bool, ops: int) -> bytes:
    """A topic of ours as the codec encodes it, without an object per partition: its entry without
    partitions, the empty array filled."""
    b = bytearray(entry_bytes(v, _T(name=info.name, topic_id=info.topic_id.bytes, is_internal=is_internal,
                                    partitions=[], topic_authorized_operations=ops)))
    _, layout, rest = next(p for p in _PARTITION if v >= p[0])
    pack, after, count = layout.pack, rest(node), info.partitions
    # after the partitions: topic_authorized_operations (v8+), tagged fields (v9+: none)
    _fill_array(b, (4 if v >= 8 else 0) + (1 if v >= 9 else 0), v, [pack(0, i, *after) for i in range(count)], count)
    return bytes(b)


def topic_bytes(ctx, info, with_ops: bool) -> bytes:
    """``info``'s entry, encoded once per version and content (``TopicInfo.wire``)."""
    c = ctx.components
    v = ctx.api_version
    node = c.node.node_id
    internal = c.topics.is_internal(info.name)
    ops = operations(ctx, "TOPIC", info.name) if with_ops else UNSET
    key = (v, info.partitions, node, internal, ops)
    wire = info.wire
    b = wire.get(key)
    if b is None:
        if len(wire) >= 16:  # old partition counts, other principals' operations
            wire.clear()
        b = wire[key] = own_entry_bytes(v, info, node, internal, ops)
    return b


class Spliced:
    """A MetadataResponse whose topics are encoded already (``entries``): the codec encodes the rest
    (``head``, its topics empty) and the entries go in its place.  ``throttle_time_ms`` is the head's
    (client quotas set it after the handler)."""

    __slots__ = ("head", "entries")

    def __init__(self, head, entries: list[bytes]):
        self.head = head
        self.entries = entries

    @property
    def throttle_time_ms(self) -> int:
        return self.head.throttle_time_ms

    @throttle_time_ms.setter
    def throttle_time_ms(self, ms: int) -> None:
        self.head.throttle_time_ms = ms

    def encode_into(self, b: bytearray, version: int, sp=None) -> None:
        self.head.encode_into(b, version, sp)
        _fill_array(b, _tail_len(version), version, self.entries, len(self.entries))

    def encode(self, version: int) -> bytes:
        b = bytearray()
        self.encode_into(b, version)
        return bytes(b)


def _denied(v: int, name, topic_id=ZERO_UUID) -> bytes:
    return entry_bytes(v, _T(error_code=Errors.TOPIC_AUTHORIZATION_FAILED, name=name, topic_id=topic_id,
                             partitions=[]))


@handler(ApiKey.METADATA, versions=(0, 13))
async def metadata(ctx, req):
    c = ctx.components
    v = ctx.api_version
    logs = c.logs
    with_ops = v >= 8 and req.include_topic_authorized_operations
    topics = []
    if req.topics is None or (v == 0 and not req.topics):
        topics = [topic_bytes(ctx, info, with_ops) for info in list(logs.topics.values())
                  if allowed(ctx, "DESCRIBE", "TOPIC", info.name)]
    else:
        allow_create = (req.allow_auto_topic_creation if v >= 4 else True) and \
            c.config.get_bool("auto.create.topics.enable", True)
        for t in req.topics:
            if t.name is None:
                info = logs.topic_by_id(t.topic_id) if t.topic_id != ZERO_UUID else None
                if info is None:
                    topics.append(entry_bytes(v, _T(error_code=Errors.UNKNOWN_TOPIC_ID, name=None, topic_id=t.topic_id)))
                    continue
                if not allowed(ctx, "DESCRIBE", "TOPIC", info.name):  # ids are not secret; names are
                    topics.append(_denied(v, None, t.topic_id))
                    continue
            else:
                if not allowed(ctx, "DESCRIBE", "TOPIC", t.name):  # do not disclose whether it exists
                    topics.append(_denied(v, t.name))
                    continue
                info = logs.topic(t.name)
                if info is None:
                    code = Errors.UNKNOWN_TOPIC_OR_PARTITION
                    if allow_create:
                        if not (allowed_cluster(ctx, "CREATE") or allowed(ctx, "CREATE", "TOPIC", t.name)):
                            topics.append(_denied(v, t.name))
                            continue
                        try:  # answered once the topic is durable, as CreateTopics
                            info = await c.topics.create_staged(t.name, c.config.get_int("num.partitions", 1), {})
                        except LogError as e:  # being created by another request: Kafka's answer meanwhile
                            code = Errors.LEADER_NOT_AVAILABLE if e.code == Errors.TOPIC_ALREADY_EXISTS else e.code
                    if info is None:
                        topics.append(entry_bytes(v, _T(error_code=code, name=t.name)))
                        continue
            topics.append(topic_bytes(ctx, info, with_ops))
    host, port = ctx.endpoint()  # the listener this request came on
    return Spliced(MetadataResponse(
        brokers=[MetadataResponse.MetadataResponseBroker(node_id=c.node.node_id, host=host, port=port)],
        cluster_id=c.node.cluster_id, controller_id=c.node.node_id, topics=[],
        cluster_authorized_operations=cluster_operations(ctx) if 8 <= v <= 10 and req.include_cluster_authorized_operations
        else UNSET), topics)
