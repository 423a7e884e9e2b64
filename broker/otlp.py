"""A small protobuf wire decoder for the OTLP metrics clients push with PushTelemetry (KIP-714).

Reads ``opentelemetry.proto.metrics.v1.MetricsData`` (the payload of PushTelemetryRequest's
``Metrics`` field, after decompression) and keeps only what the broker exposes on ``/metrics``:

    MetricsData      1: repeated ResourceMetrics
    ResourceMetrics  1: Resource (1: repeated KeyValue attributes), 2: repeated ScopeMetrics
    ScopeMetrics     2: repeated Metric
    Metric           1: name, 5: Gauge, 7: Sum (histograms, summaries and the rest are skipped)
    Gauge            1: repeated NumberDataPoint
    Sum              1: repeated NumberDataPoint, 2: aggregation_temporality, 3: is_monotonic
    NumberDataPoint  7: repeated KeyValue attributes, 3: time_unix_nano (fixed64),
                     4: as_double (fixed64 double), 6: as_int (sfixed64)
    KeyValue         1: key, 2: AnyValue (1 string, 2 bool, 3 int, 4 double; others skipped)

Wire types 0 (varint), 1 (fixed64), 2 (length-delimited) and 5 (fixed32) are read; unknown
fields are skipped, as protobuf requires.  Anything malformed (a truncated varint or field, a
group wire type, a length past the end, bad UTF-8) raises :class:`OtlpError`: the broker answers
INVALID_RECORD, as Kafka does when its exporter plugin cannot read the payload.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

_F64 = struct.Struct("<d")
_I64 = struct.Struct("<q")
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")

# Sum.aggregation_temporality
TEMPORALITY_DELTA, TEMPORALITY_CUMULATIVE = 1, 2


class OtlpError(ValueError):
    """The payload is not a readable protobuf MetricsData."""


@dataclass
class DataPoint:
    value: float
    attributes: dict[str, object] = field(default_factory=dict)
    time_unix_nano: int = 0


@dataclass
class Metric:
    name: str
    kind: str  # "gauge" or "sum"
    points: list[DataPoint] = field(default_factory=list)
    monotonic: bool = False
    temporality: int = 0


@dataclass
class MetricsData:
    resource: dict[str, object] = field(default_factory=dict)  # the resource attributes (merged)
    metrics: list[Metric] = field(default_factory=list)


def _varint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise OtlpError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise OtlpError("varint longer than 10 bytes")


def fields(buf: memoryview, pos: int = 0, end: int | None = None):
    """Yield ``(field number, wire type, value)``: an int for varint / fixed wire types, a
    memoryview for length-delimited ones (fixed64 / fixed32 values as unsigned ints)."""
    end = len(buf) if end is None else end
    while pos < end:
        key, pos = _varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise OtlpError("field number 0")
        if wire == 0:
            value, pos = _varint(buf, pos, end)
        elif wire == 1:
            if pos + 8 > end:
                raise OtlpError("truncated fixed64")
            value = _U64.unpack_from(buf, pos)[0]
            pos += 8
        elif wire == 2:
            n, pos = _varint(buf, pos, end)
            if pos + n > end:
                raise OtlpError("length-delimited field past the end")
            value = buf[pos:pos + n]
            pos += n
        elif wire == 5:
            if pos + 4 > end:
                raise OtlpError("truncated fixed32")
            value = _U32.unpack_from(buf, pos)[0]
            pos += 4
        else:
            raise OtlpError(f"unsupported wire type {wire}")
        yield number, wire, value


def _expect(wire: int, want: int, what: str) -> None:
    if wire != want:
        raise OtlpError(f"{what}: wire type {wire}, expected {want}")


def _str(v) -> str:
    try:
        return bytes(v).decode("utf-8")
    except UnicodeDecodeError:
        raise OtlpError("invalid UTF-8 in a string field") from None


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _any_value(buf) -> object:
    value: object = None
    for num, wire, v in fields(buf):
        if num == 1:
            _expect(wire, 2, "AnyValue.string_value")
            value = _str(v)
        elif num == 2:
            _expect(wire, 0, "AnyValue.bool_value")
            value = bool(v)
        elif num == 3:
            _expect(wire, 0, "AnyValue.int_value")
            value = _signed(v)
        elif num == 4:
            _expect(wire, 1, "AnyValue.double_value")
            value = _F64.unpack(_U64.pack(v))[0]
    return value


def _key_value(buf, into: dict) -> None:
    key, value = "", None
    for num, wire, v in fields(buf):
        if num == 1:
            _expect(wire, 2, "KeyValue.key")
            key = _str(v)
        elif num == 2:
            _expect(wire, 2, "KeyValue.value")
            value = _any_value(v)
    into[key] = value


def _data_point(buf) -> DataPoint:
    p = DataPoint(0.0)
    for num, wire, v in fields(buf):
        if num == 7:
            _expect(wire, 2, "NumberDataPoint.attributes")
            _key_value(v, p.attributes)
        elif num == 3:
            _expect(wire, 1, "NumberDataPoint.time_unix_nano")
            p.time_unix_nano = v
        elif num == 4:
            _expect(wire, 1, "NumberDataPoint.as_double")
            p.value = _F64.unpack(_U64.pack(v))[0]
        elif num == 6:
            _expect(wire, 1, "NumberDataPoint.as_int")
            p.value = _I64.unpack(_U64.pack(v))[0]
    return p


def _metric(buf) -> Metric | None:
    name, kind, body = "", None, None
    for num, wire, v in fields(buf):
        if num == 1:
            _expect(wire, 2, "Metric.name")
            name = _str(v)
        elif num in (5, 7):
            _expect(wire, 2, "Metric.data")
            kind, body = ("gauge" if num == 5 else "sum"), v
    if kind is None:
        return None  # a histogram, summary or empty metric: not exposed
    m = Metric(name, kind)
    for num, wire, v in fields(body):
        if num == 1:
            _expect(wire, 2, "data_points")
            m.points.append(_data_point(v))
        elif num == 2 and kind == "sum":
            _expect(wire, 0, "Sum.aggregation_temporality")
            m.temporality = v
        elif num == 3 and kind == "sum":
            _expect(wire, 0, "Sum.is_monotonic")
            m.monotonic = bool(v)
    return m


def decode_metrics_data(data) -> MetricsData:
    """Decode a MetricsData message; raise :class:`OtlpError` if it is not one."""
    out = MetricsData()
    buf = memoryview(data)
    for num, wire, rm in fields(buf):
        if num != 1:
            continue
        _expect(wire, 2, "MetricsData.resource_metrics")
        for n2, w2, v2 in fields(rm):
            if n2 == 1:
                _expect(w2, 2, "ResourceMetrics.resource")
                for n3, w3, v3 in fields(v2):
                    if n3 == 1:
                        _expect(w3, 2, "Resource.attributes")
                        _key_value(v3, out.resource)
            elif n2 == 2:
                _expect(w2, 2, "ResourceMetrics.scope_metrics")
                for n3, w3, v3 in fields(v2):
                    if n3 == 2:
                        _expect(w3, 2, "ScopeMetrics.metrics")
                        m = _metric(v3)
                        if m is not None:
                            out.metrics.append(m)
    return out
