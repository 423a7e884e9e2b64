"""The Produce fast path against the generated codec: it reads exactly what the codec decodes,
answers exactly the bytes the codec encodes, for every served version, and leaves every other
request (transactional, acks=0, several partitions, tagged fields, malformed) to the general path."""
from __future__ import annotations

import uuid

import pytest

from broker.handlers import produce as P
from protocol.errors import Errors
from protocol.messages.produce import ProduceRequest, ProduceResponse
from protocol.messages.request_header import RequestHeader

TOPIC_ID = uuid.uuid4()
RECORDS = bytes(range(256)) * 3


class Topic:
    name = "orders"
    partitions = 3


class Log:
    durable = False

    class config:
        flush_messages = (1 << 63) - 1
        compact = False


class Logs:
    def topic(self, name):
        return Topic if name == Topic.name else None

    def topic_by_id(self, key):
        return Topic if bytes(key) == TOPIC_ID.bytes else None

    def get_log(self, name, index):
        return Log


class Components:
    class authorizer:
        enabled = False

    class topics:
        @staticmethod
        def is_internal(name):
            return False

    logs = Logs()


class Result:
    base_offset, log_append_time, log_start_offset = 1234567, -1, 17
    durable = None


@pytest.fixture
def appended(monkeypatch):
    calls = []

    def fake(c, topic, index, log, records):
        calls.append((topic.name, index, bytes(records)))
        return calls_result[0]

    calls_result = [(0, None, Result, None)]  # code, message, result, record errors
    monkeypatch.setattr(P, "_append_records", fake)
    return calls, calls_result


def topic_data(version, partitions=((1, RECORDS),), name=Topic.name):
    T, Pd = ProduceRequest.TopicProduceData, ProduceRequest.PartitionProduceData
    return T(name=name if version < 13 else "", topic_id=TOPIC_ID.bytes if version >= 13 else bytes(16),
             partition_data=[Pd(index=i, records=r) for i, r in partitions])


def frame(version, req: ProduceRequest) -> tuple[memoryview, int]:
    flexible = version >= 9
    head = bytearray()
    RequestHeader(request_api_key=0, request_api_version=version, correlation_id=7,
                  client_id="c").encode_into(head, 2 if flexible else 1)
    pos = len(head)
    return memoryview(bytes(head) + req.encode(version)), pos


def expected_response(version, index, code=0, message=None) -> bytes:
    R = ProduceResponse
    part = R.PartitionProduceResponse(index=index, error_code=code, error_message=message,
                                      base_offset=-1 if code else Result.base_offset,
                                      log_append_time_ms=-1 if code else Result.log_append_time,
                                      log_start_offset=-1 if code else Result.log_start_offset)
    topic = R.TopicProduceResponse(name=Topic.name if version < 13 else "",
                                   topic_id=TOPIC_ID.bytes if version >= 13 else bytes(16), partition_responses=[part])
    return ProduceResponse(responses=[topic]).encode(version)


@pytest.mark.parametrize("version", range(3, 14))
@pytest.mark.parametrize("acks", [1, -1])
def test_fast_path_reads_and_answers_as_the_codec(version, acks, appended):
    calls, _ = appended
    m, pos = frame(version, ProduceRequest(acks=acks, timeout_ms=30000, topic_data=[topic_data(version)]))
    b = bytearray()
    assert P.fast_produce(Components, m, pos, version, b)
    assert calls == [(Topic.name, 1, RECORDS)]
    assert bytes(b) == expected_response(version, 1)


@pytest.mark.parametrize("version", [3, 5, 8, 9, 12, 13])
def test_fast_path_answers_errors_as_the_codec(version, appended):
    _, result = appended
    result[0] = (Errors.CORRUPT_MESSAGE, "batch CRC mismatch", None, None)
    m, pos = frame(version, ProduceRequest(acks=-1, timeout_ms=1, topic_data=[topic_data(version)]))
    b = bytearray()
    assert P.fast_produce(Components, m, pos, version, b)
    message = "batch CRC mismatch" if version >= 8 else None  # the codec drops it before v8
    assert bytes(b) == expected_response(version, 1, Errors.CORRUPT_MESSAGE, message)


def _others(version):
    yield "transactional", ProduceRequest(transactional_id="tx", acks=-1, topic_data=[topic_data(version)])
    yield "acks=0", ProduceRequest(acks=0, topic_data=[topic_data(version)])
    yield "two partitions", ProduceRequest(acks=1, topic_data=[topic_data(version, ((0, RECORDS), (1, RECORDS)))])
    yield "two topics", ProduceRequest(acks=1, topic_data=[topic_data(version), topic_data(version)])
    yield "null records", ProduceRequest(acks=1, topic_data=[topic_data(version, ((0, None),))])
    yield "unknown partition", ProduceRequest(acks=1, topic_data=[topic_data(version, ((3, RECORDS),))])
    if version < 13:
        yield "unknown topic", ProduceRequest(acks=1, topic_data=[topic_data(version, name="nope")])
    if version >= 9:
        yield "tagged fields", ProduceRequest(acks=1, topic_data=[topic_data(version)],
                                              _unknown_tagged_fields=[(5, b"x")])


@pytest.mark.parametrize("version", [3, 8, 9, 13])
def test_everything_else_goes_the_general_way(version, appended):
    calls, _ = appended
    for what, req in _others(version):
        m, pos = frame(version, req)
        b = bytearray()
        assert not P.fast_produce(Components, m, pos, version, b), what
        assert not b and not calls, what
        for cut in (1, 9, len(m) - pos - 1):  # truncated: left to the general path, which refuses it
            assert not P.fast_produce(Components, m[:pos + cut], pos, version, bytearray()), (what, cut)
        assert not calls


def test_an_authorizer_turns_the_fast_path_off(appended):
    class WithAcls(Components):
        class authorizer:
            enabled = True

    m, pos = frame(9, ProduceRequest(acks=1, topic_data=[topic_data(9)]))
    assert not P.fast_produce(WithAcls, m, pos, 9, bytearray())
