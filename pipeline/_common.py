"""Helpers shared by the data sources and the worker pool: options, schemas, Arrow columns."""
from __future__ import annotations

import json
from typing import Any, Iterable, Mapping

# Spark's Kafka source schema (with includeHeaders=true), as DDL.
KAFKA_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
                "timestamp timestamp, timestampType int, "
                "headers array<struct<key:string,value:binary>>")


def client_config(options: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.``-prefixed options, without the prefix: the client configuration."""
    conf = {}
    for k, v in options.items():
        if k.lower().startswith("kafka."):
            conf[k[len("kafka."):]] = v
    if "bootstrap.servers" not in conf:
        raise ValueError("option 'kafka.bootstrap.servers' is required")
    return conf


def option(options: Mapping[str, str], name: str, default: Any = None) -> Any:
    """A case-insensitive option lookup (Spark's options are case-insensitive)."""
    low = name.lower()
    for k, v in options.items():
        if k.lower() == low:
            return v
    return default


def topic_list(value: str) -> list[str]:
    return [t.strip() for t in value.split(",") if t.strip()]


def arrow_schema(struct) -> "Any":
    """The Arrow schema Spark expects for a Python data source's RecordBatches (``struct`` is a
    StructType; DDL strings need the JVM to parse, so they are parsed on the driver)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(struct, timezone="UTC")


def headers_array(per_record: list, pa_type) -> "Any":
    """``headers`` column (list<struct<key, value>>) from each record's ``headers()`` (None or pairs).

    Built from flat key/value lists and list offsets, without per-header Python dicts.
    """
    import pyarrow as pa

    offsets = [0]
    mask = []
    keys: list = []
    values: list = []
    n = 0
    for hs in per_record:
        if hs:
            for k, v in hs:
                keys.append(k)
                values.append(v)
            n += len(hs)
            mask.append(False)
        else:
            mask.append(True)
        offsets.append(n)
    struct_type = pa_type.value_type
    items = pa.StructArray.from_arrays(
        [pa.array(keys, struct_type.field(0).type), pa.array(values, struct_type.field(1).type)],
        fields=[struct_type.field(0), struct_type.field(1)])
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), items, type=pa_type,
                                    mask=pa.array(mask, pa.bool_()))


def messages_to_batch(msgs: list, schema, extra: Iterable = (), topic: str | None = None,
                      partition: int | None = None) -> "Any":
    """One Arrow RecordBatch in Spark's Kafka schema from confluent-kafka messages.

    Each record's key and value become Python ``bytes`` once (that is how confluent-kafka hands
    them out) and are then copied into Arrow buffers; nothing else touches them in Python.
    ``extra`` are additional (name, array) columns appended after the Kafka ones; ``topic`` and
    ``partition``, when known (one partition's reader), are repeated instead of asked per record.
    Fields are read with ``map`` over the unbound methods: no Python frame per record.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    from confluent_kafka import Message

    n = len(msgs)
    ts_type, ts_ms = zip(*map(Message.timestamp, msgs)) if n else ((), ())
    ts_type = pa.array(ts_type, pa.int32())
    ts_ms = pa.array(ts_ms, pa.int64())
    if pc.any(pc.equal(ts_type, 0)).as_py():
        # librdkafka reports "no timestamp" as type 0 with -1: Spark shows null then
        ts_ms = pc.if_else(pc.equal(ts_type, 0), pa.nulls(n, pa.int64()), ts_ms)
    ts_us = pc.multiply(ts_ms, 1000).cast(pa.timestamp("us", tz="UTC"))
    headers = list(map(Message.headers, msgs))
    headers_type = schema.field("headers").type
    cols = [
        pa.array(list(map(Message.key, msgs)), pa.binary()),
        pa.array(list(map(Message.value, msgs)), pa.binary()),
        (pa.repeat(pa.scalar(topic, pa.string()), n) if topic is not None
         else pa.array(list(map(Message.topic, msgs)), pa.string())),
        (pa.repeat(pa.scalar(partition, pa.int32()), n) if partition is not None
         else pa.array(list(map(Message.partition, msgs)), pa.int32())),
        pa.array(list(map(Message.offset, msgs)), pa.int64()),
        ts_us,
        ts_type,
        headers_array(headers, headers_type) if any(headers) else pa.nulls(n, headers_type),
    ]
    for _, arr in extra:
        cols.append(arr)
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def parse_json_option(value: str | None, what: str) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except ValueError as e:
        raise ValueError(f"option {what} is neither earliest/latest nor valid JSON: {value!r}") from e
