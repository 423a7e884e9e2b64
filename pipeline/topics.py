"""Kafka topics as a PySpark Python data source: batch read, batch and streaming write.

    spark.dataSource.register(KafkaTopicDataSource)          # or pipeline.register(spark)
    df = (spark.read.format("kafka_topic")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "t1,t2")                       # or assign / subscribePattern
          .option("startingOffsets", "earliest")              # earliest | latest | JSON
          .option("endingOffsets", "latest")
          .load())
    (df.write.format("kafka_topic").mode("append")              # required: PySpark refuses the default mode
       .option("kafka.bootstrap.servers", bs).option("topic", "t").save())

The schema is Spark's Kafka source schema with headers. Reading: one input partition per
topic-partition offset range (split by ``maxRecordsPerPartition`` / ``minPartitions``); each task
assigns a confluent-kafka ``Consumer`` to its range (no group, nothing committed) and yields Arrow
RecordBatches. Writing: each task has its own idempotent ``Producer``; it flushes and checks every
delivery before returning, and raises (failing the task) if any record was not delivered.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Iterator

from pyspark.sql.datasource import (DataSource, DataSourceArrowWriter, DataSourceReader,
                                    DataSourceStreamArrowWriter, InputPartition, WriterCommitMessage)

from pipeline._common import (KAFKA_SCHEMA, arrow_schema, client_config, messages_to_batch, option,
                              parse_json_option, topic_list)

EARLIEST, LATEST = -2, -1


class OffsetRange(InputPartition):
    """Offsets [start, end) of one topic-partition: one Spark task."""

    def __init__(self, topic: str, partition: int, start: int, end: int):
        self.topic, self.partition, self.start, self.end = topic, partition, start, end

    def __eq__(self, other) -> bool:
        return isinstance(other, OffsetRange) and vars(self) == vars(other)


@dataclass
class WriteResult(WriterCommitMessage):
    records: int
    seconds: float


class KafkaTopicDataSource(DataSource):
    """``format("kafka_topic")``: read topics in batch, write DataFrames to a topic (batch or stream)."""

    @classmethod
    def name(cls) -> str:
        return "kafka_topic"

    def schema(self) -> str:
        return KAFKA_SCHEMA

    def reader(self, schema) -> "TopicReader":
        return TopicReader(dict(self.options), schema)

    def writer(self, schema, overwrite: bool) -> "TopicWriter":
        if overwrite:  # a topic is appended to; Spark's own Kafka sink refuses Overwrite as well
            raise ValueError("Save mode Overwrite is not allowed for a kafka_topic: records are appended, "
                             "use .mode(\"append\")")
        return TopicWriter(dict(self.options), schema)

    def streamWriter(self, schema, overwrite: bool) -> "TopicStreamWriter":
        return TopicStreamWriter(dict(self.options), schema)


# ------------------------------------------------------------------------------------ reading

def _admin_consumer(conf: dict):
    from confluent_kafka import Consumer

    return Consumer({**conf, "group.id": conf.get("group.id", "spark-kafka-topic-planner"),
                     "enable.auto.commit": False})


def _resolve_partitions(consumer, options, timeout: float) -> list[tuple[str, int]]:
    subscribe = option(options, "subscribe")
    pattern = option(options, "subscribePattern")
    assign = option(options, "assign")
    if sum(x is not None for x in (subscribe, pattern, assign)) != 1:
        raise ValueError("exactly one of the options 'subscribe', 'subscribePattern', 'assign' is required")
    if assign is not None:
        spec = json.loads(assign)
        return [(t, int(p)) for t, ps in spec.items() for p in ps]
    md = consumer.list_topics(timeout=timeout)
    if subscribe is not None:
        wanted = topic_list(subscribe)
        missing = [t for t in wanted if t not in md.topics or md.topics[t].error is not None]
        if missing:
            raise ValueError(f"unknown topic(s): {missing}")
    else:
        rx = re.compile(pattern)
        wanted = sorted(t for t in md.topics if rx.fullmatch(t) and not t.startswith("__"))
    return [(t, p) for t in wanted for p in sorted(md.topics[t].partitions)]


def _offset_spec(options, name: str, default: int) -> tuple[int | None, dict | None]:
    """(a default of EARLIEST / LATEST, per-partition JSON or None)."""
    raw = option(options, name)
    if raw is None:
        return default, None
    low = raw.strip().lower()
    if low == "earliest":
        return EARLIEST, None
    if low == "latest":
        return LATEST, None
    return None, parse_json_option(raw, name)


def plan_ranges(options) -> list[OffsetRange]:
    """The offset ranges a batch read covers (called on the driver)."""
    from confluent_kafka import TopicPartition

    conf = client_config(options)
    timeout = float(option(options, "kafkaConsumer.pollTimeoutMs", 120_000)) / 1000
    fail_on_loss = str(option(options, "failOnDataLoss", "true")).lower() == "true"
    c = _admin_consumer(conf)
    try:
        tps = _resolve_partitions(c, options, timeout)
        start_default, start_json = _offset_spec(options, "startingOffsets", EARLIEST)
        end_default, end_json = _offset_spec(options, "endingOffsets", LATEST)
        if start_default == LATEST:
            raise ValueError("startingOffsets=latest is not valid for a batch query")
        if end_default == EARLIEST:
            raise ValueError("endingOffsets=earliest is not valid for a batch query")
        ranges = []
        for topic, p in tps:
            low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)

            def pick(spec_json, default):
                if spec_json is None:
                    return default
                v = spec_json.get(topic, {}).get(str(p))
                return default if v is None else int(v)

            s = pick(start_json, EARLIEST)
            e = pick(end_json, LATEST)
            s = low if s == EARLIEST else high if s == LATEST else s
            e = high if e == LATEST else low if e == EARLIEST else e
            if s < low:
                if fail_on_loss:
                    raise ValueError(f"{topic}-{p}: offset {s} was deleted (log start {low}); "
                                     "set failOnDataLoss=false to read from the log start")
                s = low
            if e > high:
                if fail_on_loss:
                    raise ValueError(f"{topic}-{p}: ending offset {e} is beyond the end of the log ({high})")
                e = high
            if e > s:
                ranges.append(OffsetRange(topic, p, s, e))
    finally:
        c.close()
    return split_ranges(ranges, option(options, "maxRecordsPerPartition"), option(options, "minPartitions"))


def split_ranges(ranges: list[OffsetRange], max_records=None, min_partitions=None) -> list[OffsetRange]:
    """Split large ranges: at most ``max_records`` each, and at least ``min_partitions`` in total
    (the biggest ranges are split first, in proportion to their size, as Spark's Kafka source)."""
    out = ranges
    if max_records:
        m = int(max_records)
        out = [OffsetRange(r.topic, r.partition, s, min(s + m, r.end))
               for r in out for s in range(r.start, r.end, m)]
    if min_partitions and len(out) < int(min_partitions):
        want = int(min_partitions)
        total = sum(r.end - r.start for r in out)
        split = []
        for r in out:
            size = r.end - r.start
            parts = max(1, min(size, round(want * size / total)))
            step = -(-size // parts)
            split += [OffsetRange(r.topic, r.partition, s, min(s + step, r.end)) for s in range(r.start, r.end, step)]
        out = split
    return out


class TopicReader(DataSourceReader):
    def __init__(self, options: dict, schema):
        self.options = options
        self.schema = schema
        self.batch_records = int(option(options, "arrowBatchRecords", 20_000))

    def partitions(self):
        return plan_ranges(self.options)

    def read(self, partition: OffsetRange) -> Iterator:
        if not isinstance(partition, OffsetRange):  # nothing to read: Spark plans one empty partition
            return iter(())
        return read_range(self.options, partition, self.schema, self.batch_records)


def read_range(options, r: OffsetRange, spark_schema, batch_records: int = 20_000) -> Iterator:
    """Yield Arrow RecordBatches with every record of ``r`` (on an executor)."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

    schema = arrow_schema(spark_schema)
    conf = client_config(options)
    timeout = float(option(options, "kafkaConsumer.pollTimeoutMs", 120_000)) / 1000
    c = Consumer({"fetch.max.bytes": 64 << 20, "max.partition.fetch.bytes": 16 << 20,
                  "queued.max.messages.kbytes": 256 << 10, **conf,
                  "group.id": conf.get("group.id", "spark-kafka-topic-reader"),
                  "enable.auto.commit": False, "enable.auto.offset.store": False,
                  "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(r.topic, r.partition, r.start)])
        pos = r.start
        last_progress = time.monotonic()
        while pos < r.end:
            # ask for no more than the range holds: consume() returns as soon as it has them
            msgs = c.consume(min(batch_records, r.end - pos), 0.5)
            if not msgs:
                if time.monotonic() - last_progress > timeout:
                    raise TimeoutError(f"no records of {r.topic}-{r.partition} after offset {pos} "
                                       f"within {timeout}s (want up to {r.end})")
                continue
            good = msgs
            if any(map(Message.error, msgs)):
                good = []
                for m in msgs:
                    err = m.error()
                    if err is None:
                        good.append(m)
                    elif err.code() == KafkaError._PARTITION_EOF:
                        if m.offset() >= r.end:  # nothing left in the range (gaps at its end)
                            pos = r.end
                    else:
                        raise KafkaException(err)
            if good:
                last_progress = time.monotonic()
                if good[-1].offset() >= r.end:
                    good = [m for m in good if m.offset() < r.end]
                    pos = r.end
                else:
                    pos = good[-1].offset() + 1
                if good:
                    yield messages_to_batch(good, schema, topic=r.topic, partition=r.partition)
    finally:
        c.close()


# ------------------------------------------------------------------------------------ writing

def _producer_conf(options) -> dict:
    conf = client_config(options)
    return {"linger.ms": 5, "batch.size": 1 << 20, "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1 << 20, **conf,
            # idempotent: retries inside the producer cannot duplicate or reorder records
            "enable.idempotence": True, "acks": "all",
            # only failures come back as delivery reports: successes cost no Python call
            "delivery.report.only.error": True}


def write_batches(options, batches: Iterator) -> WriteResult:
    """Produce every row of the Arrow batches; return once all are delivered, raise otherwise."""
    from confluent_kafka import KafkaException, Producer

    started = time.monotonic()
    errors: list = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append((err, msg.topic(), msg.partition()))

    p = Producer({**_producer_conf(options), "on_delivery": on_delivery})
    topic_opt = option(options, "topic")
    flush_timeout = float(option(options, "flushTimeoutMs", 300_000)) / 1000
    produce = p.produce
    n = 0
    for batch in batches:
        names = batch.schema.names
        if "value" not in names:
            raise ValueError("the DataFrame to write needs a 'value' column")
        values = batch.column("value").to_pylist()
        keys = batch.column("key").to_pylist() if "key" in names else None
        parts = batch.column("partition").to_pylist() if "partition" in names else None
        headers = batch.column("headers").to_pylist() if "headers" in names else None
        topics = None
        if topic_opt is None:
            if "topic" not in names:
                raise ValueError("set the 'topic' option or give the DataFrame a 'topic' column")
            topics = batch.column("topic").to_pylist()
        if keys is None and parts is None and headers is None and topics is None:
            # the common case, kept lean
            for v in values:
                try:
                    produce(topic_opt, v)
                except BufferError:
                    p.poll(0.05)
                    produce(topic_opt, v)
        else:
            for i, v in enumerate(values):
                kw = {}
                if keys is not None:
                    kw["key"] = keys[i]
                if parts is not None and parts[i] is not None:
                    kw["partition"] = parts[i]
                if headers is not None and headers[i]:
                    kw["headers"] = [(h["key"], h["value"]) for h in headers[i]]
                t = topic_opt if topics is None else topics[i]
                if t is None:
                    raise ValueError("a row has a null topic and no 'topic' option is set")
                while True:
                    try:
                        produce(t, v, **kw)
                        break
                    except BufferError:
                        p.poll(0.05)
        n += len(values)
        p.poll(0)
        if errors:
            break
    left = p.flush(flush_timeout)
    if errors:
        err, t, part = errors[0]
        raise KafkaException(err) from RuntimeError(
            f"{len(errors)} of {n} records were not delivered (first: {t}-{part}: {err})")
    if left:
        raise TimeoutError(f"{left} of {n} records were not delivered within {flush_timeout}s")
    return WriteResult(records=n, seconds=time.monotonic() - started)


class TopicWriter(DataSourceArrowWriter):
    def __init__(self, options: dict, schema):
        self.options = options

    def write(self, iterator) -> WriteResult:
        return write_batches(self.options, iterator)


class TopicStreamWriter(DataSourceStreamArrowWriter):
    """Each micro-batch is written like a batch write (at-least-once, as Spark's Kafka sink)."""

    def __init__(self, options: dict, schema):
        self.options = options

    def write(self, iterator) -> WriteResult:
        return write_batches(self.options, iterator)

    def commit(self, messages, batchId) -> None:  # every record was delivered before write() returned
        pass

    def abort(self, messages, batchId) -> None:
        pass
