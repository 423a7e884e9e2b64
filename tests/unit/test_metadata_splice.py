"""Metadata answers spliced from encoded topic entries (broker.handlers.metadata.Spliced) are byte for
byte what the codec makes of the same answer built from objects, at every version."""
from __future__ import annotations

import uuid

import pytest

from broker.handlers.metadata import Spliced, entry_bytes, own_entry_bytes
from protocol.errors import Errors
from protocol.messages.metadata import MetadataResponse

_T = MetadataResponse.MetadataResponseTopic
_B = MetadataResponse.MetadataResponseBroker
_P = MetadataResponse.MetadataResponsePartition


class Info:  # what topic_entry reads of a broker.log.manager.TopicInfo
    def __init__(self, name: str, partitions: int):
        self.name = name
        self.topic_id = uuid.uuid4()
        self.partitions = partitions


def topic_entry(info, node: int, is_internal: bool, ops: int) -> _T:
    """A topic of ours as objects, as the handler built it before it kept bytes."""
    parts = [_P(partition_index=i, leader_id=node, leader_epoch=0, replica_nodes=[node], isr_nodes=[node])
             for i in range(info.partitions)]
    return _T(name=info.name, topic_id=info.topic_id.bytes, is_internal=is_internal, partitions=parts,
              topic_authorized_operations=ops)


def topics() -> list:
    return [
        topic_entry(Info("orders", 7), 1, False, -2147483648),
        topic_entry(Info("__consumer_offsets", 3), 1, True, 0b11111111000),
        topic_entry(Info("big", 200), 3, False, 0),  # a count past one byte of varint
        topic_entry(Info("t" * 200, 1), 1, False, 8),  # a name past one byte of varint
        topic_entry(Info("none", 0), 1, False, -2147483648),
        _T(error_code=Errors.UNKNOWN_TOPIC_OR_PARTITION, name="missing"),
        _T(error_code=Errors.TOPIC_AUTHORIZATION_FAILED, name="secret", partitions=[]),
        _T(error_code=Errors.UNKNOWN_TOPIC_ID, name=None, topic_id=uuid.uuid4().bytes),
        _T(error_code=Errors.TOPIC_AUTHORIZATION_FAILED, name=None, topic_id=uuid.uuid4().bytes, partitions=[]),
    ]


def response(ts: list, cluster_ops: int) -> MetadataResponse:
    return MetadataResponse(brokers=[_B(node_id=1, host="127.0.0.1", port=9092)], cluster_id="c-1",
                            controller_id=1, topics=ts, cluster_authorized_operations=cluster_ops)


def usable(v: int, t: _T) -> bool:
    """Null names exist from v12 (ids from v10); the ones before cannot carry them."""
    return t.name is not None or v >= 12


@pytest.mark.parametrize("version", range(0, 14))
@pytest.mark.parametrize("cluster_ops", [-2147483648, 0, 0b10110110])
@pytest.mark.parametrize("count", [0, 1, 150])
def test_spliced_answer_is_the_codecs(version, cluster_ops, count):
    ts = [t for t in topics() if usable(version, t)]
    ts = (ts * (count // len(ts) + 1))[:count]
    expected = response(ts, cluster_ops)
    expected.throttle_time_ms = 250
    spliced = Spliced(response([], cluster_ops), [entry_bytes(version, t) for t in ts])
    spliced.throttle_time_ms = 250  # as client quotas set it, after the handler
    assert spliced.encode(version) == expected.encode(version)
    b = bytearray(b"head")
    spliced.encode_into(b, version, [])
    assert bytes(b) == b"head" + expected.encode(version)


@pytest.mark.parametrize("version", range(0, 14))
def test_entry_decodes_as_the_topic(version):
    t = topic_entry(Info("orders", 5), 2, False, 8)
    back = MetadataResponse.decode(Spliced(response([], 0), [entry_bytes(version, t)]).encode(version), version)
    assert [p.partition_index for p in back.topics[0].partitions] == [0, 1, 2, 3, 4]
    assert back.topics[0].name == "orders" and back.topics[0].partitions[4].leader_id == 2


@pytest.mark.parametrize("version", range(0, 14))
@pytest.mark.parametrize("partitions", [0, 1, 126, 127, 1000])
@pytest.mark.parametrize("node, internal, ops", [(1, False, -2147483648), (7, True, 0b11111111000), (2**31 - 1, False, 0)])
def test_own_entry_is_the_codecs(version, partitions, node, internal, ops):
    """A topic of ours encoded without partition objects (the compact count's varint grows at 127)."""
    info = Info("t" * (partitions % 150 + 1), partitions)
    assert own_entry_bytes(version, info, node, internal, ops) == \
        entry_bytes(version, topic_entry(info, node, internal, ops))
