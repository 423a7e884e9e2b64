"""A Structured Streaming source over a share group: at-least-once into the sink.

    spark.dataSource.register(KafkaShareDataSource)          # or pipeline.register(spark)
    q = (spark.readStream.format("kafka_share")
         .option("kafka.bootstrap.servers", bs).option("kafka.group.id", "jobs")
         .option("subscribe", "work")
         .load()
         .writeStream.format("parquet").option("checkpointLocation", ck).start(out))

Schema: Spark's Kafka schema plus ``deliveryCount int``.

Design (see pipeline/README.md, "Streaming source"): one ``ShareConsumer`` (explicit acks) lives in
the driver-side Python process Spark keeps for the source for the whole query; it is a
``SimpleDataSourceStreamReader``. Each micro-batch is one ``poll()``; its offset is just a batch
sequence number ``{"batch": n}``. The records of batch n are acknowledged ACCEPT when Spark asks
for the batch after it (``read(start)`` with ``start >= n``; also on ``commit``), which Spark does
only once batch n's sink output and commit log entry are written. Nothing is acknowledged before
that: a query that fails or stops drops its consumer without acknowledging, so the records of
uncommitted batches return to the group and are delivered again.

librdkafka's ShareFetch outlives ``poll()``: records it acquires after a poll returned wait in the
client, their locks running, until the next poll (Spark decides when that is). So a poll's records
may have been acquired as early as the previous poll's start; when that is more than half the lock
duration (option ``recordLockMs``, the group's share.record.lock.duration.ms) ago, they are RELEASEd
and polled again rather than handed to a batch whose acknowledgement would come after their lock ran out.
"""
from __future__ import annotations

import json
import time
from typing import Iterator

from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader

from pipeline._common import KAFKA_SCHEMA, arrow_schema, client_config, option, topic_list

SHARE_SCHEMA = KAFKA_SCHEMA + ", deliveryCount int"


class KafkaShareDataSource(DataSource):
    """``format("kafka_share")``: records of a share group, as a stream."""

    @classmethod
    def name(cls) -> str:
        return "kafka_share"

    def schema(self) -> str:
        return SHARE_SCHEMA

    def simpleStreamReader(self, schema) -> "ShareStreamReader":
        return ShareStreamReader(dict(self.options), schema)


class ShareStreamReader(SimpleDataSourceStreamReader):
    def __init__(self, options: dict, schema):
        conf = client_config(options)
        if "group.id" not in conf:
            raise ValueError("option 'kafka.group.id' (the share group) is required")
        topics = option(options, "subscribe")
        if not topics:
            raise ValueError("option 'subscribe' is required")
        self.conf = conf
        self.topics = topic_list(topics)
        self.schema = schema
        # how long one micro-batch's poll may wait for its first records
        self.poll_timeout = float(option(options, "pollTimeoutMs", 1000)) / 1000
        # the group's share.record.lock.duration.ms (Kafka's default 30 s): how old polled records may be
        self.lock_s = float(option(options, "recordLockMs", 30000)) / 1000
        max_records = option(options, "maxRecordsPerBatch")
        if max_records is not None:
            self.conf.setdefault("max.poll.records", str(max_records))
        # optional audit log of acknowledgements (JSON lines), for checking the at-least-once rule
        self.ack_log = option(options, "acknowledgementLog")
        self._consumer = None
        self._pending: dict[int, list] = {}  # batch number -> messages polled, not yet acknowledged
        self._polled_at: dict[int, float] = {}  # batch number -> earliest time its records were acquired
        self._poll_started: float | None = None  # when the last poll began

    # ------------------------------------------------------------------ consumer (driver side)
    def _get_consumer(self):
        if self._consumer is None:
            from confluent_kafka import ShareConsumer

            c = ShareConsumer({**self.conf, "share.acknowledgement.mode": "explicit"})
            c.subscribe(self.topics)
            self._consumer = c
        return self._consumer

    def _acknowledge_through(self, batch: int) -> None:
        """ACCEPT every pending batch numbered <= ``batch`` (Spark committed them)."""
        from confluent_kafka import AcknowledgeType

        done = sorted(n for n in self._pending if n <= batch)
        if not done:
            return
        c = self._get_consumer()
        for n in done:
            for m in self._pending[n]:
                c.acknowledge(m, AcknowledgeType.ACCEPT)
        result = c.commit_sync(60)
        failed = {f"{tp.topic}-{tp.partition}": str(err) for tp, err in (result or {}).items() if err is not None}
        if self.ack_log:
            with open(self.ack_log, "a") as f:
                for n in done:
                    f.write(json.dumps({"batch": n, "time": time.time(), "held_s": time.time() - self._polled_at[n],
                                        "records": [[m.topic(), m.partition(), m.offset()] for m in self._pending[n]],
                                        "failed": failed}) + "\n")
        for n in done:
            del self._pending[n]
            del self._polled_at[n]

    # ------------------------------------------------------------------ Spark's calls
    def initialOffset(self) -> dict:
        # Every batch we add advances the offset by one. Our numbers are usually Spark's batch ids,
        # but Spark may run an empty first batch (ending at -1) when the first poll finds nothing;
        # nothing depends on them being equal: acknowledgements follow the offsets Spark hands back.
        return {"batch": -1}

    def read(self, start: dict) -> tuple[Iterator, dict]:
        """Called (through latestOffset) once per trigger, only after the batch ending at ``start``
        has been committed: acknowledge up to it, then poll the next batch."""
        first = int(start["batch"])
        self._acknowledge_through(first)
        if self._pending:  # a batch Spark planned but did not log (it asks again): hand it out again
            n = min(self._pending)
            return iter([self._to_batch(self._pending[n])]), {"batch": n}
        msgs, acquired_after = self._poll()
        if not msgs:
            return iter([]), start
        n = first + 1
        self._pending[n] = msgs
        self._polled_at[n] = acquired_after
        return iter([self._to_batch(msgs)]), {"batch": n}

    def _poll(self) -> tuple[list, float]:
        """One poll's records, with the earliest time they may have been acquired (the previous
        poll's start: librdkafka's fetch goes on after a poll returns). Records older than half the
        lock duration are RELEASEd (their lock may expire before the batch is committed, or already
        did: then the release fails with INVALID_RECORD_STATE, ignored) and the consumer polls again,
        once: the records of that poll are handed out whatever their age (a release adds a delivery)."""
        from confluent_kafka import AcknowledgeType

        c = self._get_consumer()
        msgs, acquired_after = self._poll_once(c)
        if msgs and time.time() - acquired_after > self.lock_s / 2:
            for m in msgs:
                c.acknowledge(m, AcknowledgeType.RELEASE)
            c.commit_sync(60)
            msgs, acquired_after = self._poll_once(c)
        return msgs, acquired_after

    def _poll_once(self, c) -> tuple[list, float]:
        began = time.time()
        acquired_after = began if self._poll_started is None else self._poll_started
        self._poll_started = began
        return [m for m in c.poll(self.poll_timeout) if m.error() is None], acquired_after

    def readBetweenOffsets(self, start: dict, end: dict) -> Iterator:
        # Replay of a batch that was logged but not committed before a restart. Its records were
        # never acknowledged: the old consumer's records went back to the share group and arrive
        # again in new batches. Nothing to replay here (share groups do not re-read by offset).
        return iter([])

    def commit(self, end: dict) -> None:
        self._acknowledge_through(int(end["batch"]))

    def stop(self) -> None:
        c, self._consumer = self._consumer, None
        if c is not None:
            c.close()  # pending (unacknowledged) records are released to the group
        self._pending.clear()
        self._polled_at.clear()
        self._poll_started = None

    def _to_batch(self, msgs: list):
        import pyarrow as pa

        from pipeline._common import messages_to_batch

        schema = arrow_schema(self.schema)
        counts = pa.array([m.delivery_count() for m in msgs], pa.int32())
        return messages_to_batch(msgs, schema, extra=[("deliveryCount", counts)])
