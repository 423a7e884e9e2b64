"""broker.otlp: the protobuf wire decoder, on MetricsData bytes built here by hand (no protobuf library)."""
import struct

import pytest

from broker.otlp import OtlpError, decode_metrics_data, fields
from tests.missing_inputs import missing_input
from tests.protocol.test_null_fields import _uvarint


def varint(n: int) -> bytes:
    """A protobuf varint: 64 bits, negatives as two's complement (10 bytes)."""
    return _uvarint(n & ((1 << 64) - 1))


def key(num: int, wire: int) -> bytes:
    return varint(num << 3 | wire)


def ld(num: int, body: bytes) -> bytes:
    return key(num, 2) + varint(len(body)) + body


def f64(num: int, raw: bytes) -> bytes:
    return key(num, 1) + raw


def kv(k: str, value: bytes) -> bytes:
    return ld(1, k.encode()) + ld(2, value)


def point(attrs: bytes = b"", as_double=None, as_int=None) -> bytes:
    body = attrs + f64(3, struct.pack("<Q", 1_700_000_000_000_000_000))
    if as_double is not None:
        body += f64(4, struct.pack("<d", as_double))
    if as_int is not None:
        body += f64(6, struct.pack("<q", as_int))
    return body


def test_decodes_resource_gauge_and_sum():
    resource = ld(1, kv("client_id", ld(1, b"rdkafka"))) + ld(1, kv("pid", key(3, 0) + varint(-5))) + \
        ld(1, kv("on", key(2, 0) + varint(1)))
    gauge = ld(1, b"org.apache.kafka.consumer.poll.idle.ratio.avg") + ld(2, b"ignored description") + \
        ld(5, ld(1, point(ld(7, kv("topic", ld(1, b"t1"))), as_double=0.25)))
    summ = ld(1, b"org.apache.kafka.producer.record.sent.total") + \
        ld(7, ld(1, point(as_int=-3)) + ld(1, point(as_int=7)) + key(2, 0) + varint(1) + key(3, 0) + varint(1))
    histogram = ld(1, b"some.histogram") + ld(9, b"\x0a\x00")
    scope = ld(1, ld(1, b"librdkafka")) + ld(2, gauge) + ld(2, summ) + ld(2, histogram)
    unknown = key(15, 0) + varint(99) + key(14, 5) + b"\0\0\0\0"  # unknown fields are skipped
    data = ld(1, ld(1, resource) + ld(2, scope) + unknown)
    m = decode_metrics_data(data)
    assert m.resource == {"client_id": "rdkafka", "pid": -5, "on": True}
    assert [x.name for x in m.metrics] == ["org.apache.kafka.consumer.poll.idle.ratio.avg",
                                           "org.apache.kafka.producer.record.sent.total"]
    g, s = m.metrics
    assert g.kind == "gauge" and g.points[0].value == 0.25 and g.points[0].attributes == {"topic": "t1"}
    assert g.points[0].time_unix_nano == 1_700_000_000_000_000_000
    assert s.kind == "sum" and s.monotonic and s.temporality == 1 and [p.value for p in s.points] == [-3, 7]


def test_empty_payload_is_no_metrics():
    assert decode_metrics_data(b"").metrics == []


@pytest.mark.parametrize("data", [
    b"\x0a",                      # length missing
    b"\x0a\x05abc",               # length past the end
    b"\x0b",                      # group wire type (start group)
    b"\x09\x00\x00",              # truncated fixed64
    b"\x08" + b"\xff" * 11,       # varint longer than 10 bytes
    b"\x00\x01",                  # field number 0
    ld(1, ld(2, ld(2, ld(1, b"\xff\xfe")))),  # metric name not UTF-8
    ld(1, ld(2, ld(2, key(1, 0) + varint(3)))),  # metric name with a varint wire type
])
def test_malformed_input_raises(data):
    with pytest.raises(OtlpError):
        decode_metrics_data(data)


def test_fields_reads_every_wire_type():
    data = key(1, 0) + varint(300) + f64(2, struct.pack("<Q", 7)) + ld(3, b"xy") + key(4, 5) + struct.pack("<I", 9)
    got = [(n, w, bytes(v) if w == 2 else v) for n, w, v in fields(memoryview(data))]
    assert got == [(1, 0, 300), (2, 1, 7), (3, 2, b"xy"), (4, 5, 9)]


def test_decodes_what_librdkafka_pushed():
    """The PushTelemetry frames librdkafka 2.16 sent (tests/protocol/golden/confluent_kafka_telemetry/):
    zstd-compressed MetricsData with the producer's gauges and sums."""
    from pathlib import Path

    from protocol import compression
    from protocol.messages.push_telemetry import PushTelemetryRequest
    from protocol.messages.request_header import RequestHeader
    from tests.tools.capture_proxy import read_hex

    files = sorted((Path(__file__).resolve().parents[1] / "protocol" / "golden" / "confluent_kafka_telemetry")
                   .glob("push_telemetry_req_*.hex"))
    assert files
    for f in files:
        frame = memoryview(read_hex(f))
        _, pos = RequestHeader.decode_from(frame, 0, 2)
        req = PushTelemetryRequest.decode_from(frame, pos, 0)[0]
        if not compression.available(req.compression_type):
            missing_input(f"codec {req.compression_type} (the optional extra sharebroker[compression])")
        m = decode_metrics_data(compression.decompress(req.compression_type, req.metrics))
        names = {x.name for x in m.metrics}
        assert "org.apache.kafka.producer.request.latency.avg" in names, names
        assert all(x.kind in ("gauge", "sum") and x.points for x in m.metrics)
        assert {x.kind for x in m.metrics} == {"gauge", "sum"}
