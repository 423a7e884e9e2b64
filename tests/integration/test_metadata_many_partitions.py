"""Metadata for many partitions stays right as topics change: the broker keeps each topic's encoded
entry (broker.handlers.metadata), so answers must follow partitions added, topics deleted and
created again under the same name (a new id), for librdkafka, kafka-python and every version."""
from __future__ import annotations

from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from protocol.messages.metadata import MetadataRequest, MetadataResponse
from protocol.messages.response_header import ResponseHeader
from tests.support import create_topic, topic_id, unique
from tests.wire import WireClient

VERSIONS = (0, 1, 4, 5, 7, 8, 9, 10, 12, 13)


def librdkafka_view(bs: str, names) -> dict:
    """{name: (partition count, every leader, every replica list)} from a fresh AdminClient."""
    md = AdminClient({"bootstrap.servers": bs}).list_topics(timeout=15)
    out = {}
    for n in names:
        t = md.topics.get(n)
        if t is None or t.error is not None:
            out[n] = None
            continue
        ps = t.partitions
        out[n] = (len(ps), sorted(ps) == list(range(len(ps))), {p.leader for p in ps.values()},
                  {tuple(p.replicas) for p in ps.values()})
    return out


def kafka_python_counts(bs: str, names) -> dict:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bs)
    try:
        return {t["name"]: len(t["partitions"]) for t in admin.describe_topics(list(names)) if t["error_code"] == 0}
    finally:
        admin.close()


def every_version(bs: str) -> dict:
    """All topics at each version: the frame must be what our codec makes of what it decodes to
    (nothing spliced out of place), and every version must say the same."""
    seen = {}
    with WireClient(bs) as w:
        for v in VERSIONS:
            req = MetadataRequest(allow_auto_topic_creation=False)
            req.topics = [] if v == 0 else None  # all topics (the constructor makes None a list)
            w.send(req, v)
            frame = w.recv_frame()
            header, pos = ResponseHeader.decode_from(memoryview(frame), 0, 1 if v >= 9 else 0)
            body = frame[pos:]
            resp = MetadataResponse.decode(body, v)
            assert resp.encode(v) == body, v
            view = {t.name: len(t.partitions) for t in resp.topics}
            assert all(p.partition_index == i for t in resp.topics for i, p in enumerate(t.partitions)), v
            assert seen.setdefault("view", view) == view, v
    return seen["view"]


def test_metadata_follows_topic_changes(sharebroker):
    bs = sharebroker.bootstrap
    a = create_topic(bs, 400, prefix="many")
    b = create_topic(bs, 300, prefix="many")
    rd = librdkafka_view(bs, [a, b])
    assert rd[a][:2] == (400, True) and rd[b][:2] == (300, True)
    assert len(rd[a][2]) == 1 and len(rd[a][3]) == 1 and rd[a][2] == rd[b][2]
    assert kafka_python_counts(bs, [a, b]) == {a: 400, b: 300}
    assert {a: 400, b: 300}.items() <= every_version(bs).items()

    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_partitions([NewPartitions(a, 450)])[a].result(15)  # after its entry was kept
    assert librdkafka_view(bs, [a])[a][:2] == (450, True)
    assert kafka_python_counts(bs, [a]) == {a: 450}
    assert every_version(bs)[a] == 450

    old_id = topic_id(bs, b)
    admin.delete_topics([b])[b].result(15)
    assert librdkafka_view(bs, [b])[b] is None
    assert b not in every_version(bs)
    admin.create_topics([NewTopic(b, 5, 1)])[b].result(15)  # the same name, a new topic
    assert topic_id(bs, b) != old_id
    assert librdkafka_view(bs, [b])[b][:2] == (5, True)
    assert kafka_python_counts(bs, [a, b]) == {a: 450, b: 5}
    assert {a: 450, b: 5}.items() <= every_version(bs).items()


def test_named_topics_known_and_unknown(sharebroker):
    """Named topics mix kept entries with errors; by id (v10+) an unknown id answers UNKNOWN_TOPIC_ID."""
    bs = sharebroker.bootstrap
    a = create_topic(bs, 20, prefix="named")
    missing = unique("missing")
    with WireClient(bs) as w:
        for v in VERSIONS[2:]:  # v4+: auto-creation can be refused
            req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in (missing, a, a)],
                                  allow_auto_topic_creation=False)
            resp = w.request(req, v)
            assert [(t.name, t.error_code, len(t.partitions)) for t in resp.topics] == \
                [(missing, 3, 0), (a, 0, 20), (a, 0, 20)], v
        tid = topic_id(bs, a)
        unknown = b"\x01" * 16
        resp = w.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(topic_id=i, name=None)
                                                 for i in (tid, unknown)]), 12)
        assert [(t.name, t.error_code, t.topic_id) for t in resp.topics] == [(a, 0, tid), (None, 100, unknown)]
