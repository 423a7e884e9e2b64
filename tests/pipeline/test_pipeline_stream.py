"""format("kafka_share"): a streaming source over a share group, at-least-once into a file sink."""
from __future__ import annotations

import json
import os

from tests.support import until


def committed_batches(checkpoint: str) -> set[int]:
    d = os.path.join(checkpoint, "commits")
    return {int(f) for f in os.listdir(d) if f.isdigit()} if os.path.isdir(d) else set()


def offsets_log(checkpoint: str) -> dict[int, int]:
    """Spark's offset log: batch id -> the source's end offset ({"batch": n}) for that batch."""
    d = os.path.join(checkpoint, "offsets")
    out = {}
    for f in os.listdir(d):
        if f.isdigit():
            with open(os.path.join(d, f)) as fh:
                out[int(f)] = json.loads(fh.read().splitlines()[-1])["batch"]
    return out


def sink_files_by_batch(out: str) -> dict[int, list[str]]:
    """The file sink's own log (_spark_metadata): which files each committed batch added."""
    meta = os.path.join(out, "_spark_metadata")
    by_batch: dict[int, list[str]] = {}
    for name in os.listdir(meta):
        base = name.split(".")[0]
        if not base.isdigit() or name.startswith("."):
            continue
        with open(os.path.join(meta, name)) as f:
            lines = f.read().splitlines()[1:]  # after the version line
        for line in lines:
            entry = json.loads(line)
            if entry.get("action", "add") == "add":
                by_batch.setdefault(int(base), []).append(entry["path"])
    return by_batch


def started(start):
    """The query ``start()`` returns, once its source is up (its first progress, or its failure).

    Spark gives the Python process that runs a Python streaming source 10 s to connect back (fixed in
    ``PythonWorkerFactory.createSimpleWorker``); on an overloaded machine it may not, and the query
    fails before its first batch, having read nothing: it is started again from its checkpoint, as
    whoever runs it would. Any other failure is the query's."""
    for _ in range(3):
        q = start()
        until(lambda: q.exception() is not None or q.lastProgress is not None, 90, "the query's first progress")
        if q.exception() is None or "Python worker failed to connect back" not in str(q.exception()):
            return q
        q.stop()
    return q


def test_stop_and_restart_every_record_at_least_once_acked_after_commit(spark, broker, kafka, tmp_path):
    topic = kafka.topic(2, "stream")
    group = kafka.group(share_record_lock_duration_ms=60000)
    n = 200
    kafka.produce(topic, ({"value": b"%d" % i, "key": b"k%d" % i, "partition": i % 2} for i in range(n)),
                  per_flush=10)
    out, ck, acks = str(tmp_path / "out"), str(tmp_path / "ck"), str(tmp_path / "acks.jsonl")

    def start():
        df = (spark.readStream.format("kafka_share").option("kafka.bootstrap.servers", broker.bootstrap)
              .option("kafka.group.id", group).option("subscribe", topic).option("maxRecordsPerBatch", "40")
              .option("acknowledgementLog", acks).load())
        return df.writeStream.format("parquet").option("checkpointLocation", ck).start(out)

    q = started(start)
    try:
        # Stop once a micro-batch was committed and acknowledged: with Kafka 4.4's share-group
        # sequencing the first trigger may find no partition assigned yet (an empty batch).
        until(lambda: q.exception() or (len(committed_batches(ck)) >= 2 and os.path.exists(acks)
                                        and os.path.getsize(acks) > 0), 90, "a committed and acknowledged micro-batch")
        assert q.exception() is None
    finally:
        q.stop()
    first_run = committed_batches(ck)
    first_acked = [json.loads(line) for line in open(acks)] if os.path.exists(acks) else []

    q = started(start)
    try:
        def all_in_sink():
            assert q.exception() is None, q.exception()
            vals = {int(r.value) for r in spark.read.parquet(out).select("value").collect()} \
                if committed_batches(ck) else set()
            return vals >= set(range(n))
        until(all_in_sink, 120, "every record in the sink")
        # the last batch's records are acknowledged at the next trigger: wait for that too
        until(lambda: sum(len(json.loads(line)["records"]) for line in open(acks)) >= n, 60,
              "every sink record acknowledged")
    finally:
        q.stop()

    # at least once: every record is in the sink (duplicates allowed, deliveryCount says so)
    sink = spark.read.parquet(out)
    rows = sink.select("value", "key", "partition", "offset", "deliveryCount").collect()
    assert {int(r.value) for r in rows} == set(range(n))
    assert all(r.key == b"k%d" % int(r.value) and r.partition == int(r.value) % 2 for r in rows)

    # nothing was acknowledged before its micro-batch was committed: when batch b's records were
    # acknowledged, Spark's commit log held b and the file sink's log listed files with those records
    files = sink_files_by_batch(out)
    records_by_file = {}
    for r in spark.read.parquet(out).selectExpr("input_file_name() as f", "partition", "offset").collect():
        records_by_file.setdefault(os.path.basename(r.f), set()).add((r.partition, r.offset))
    ack_lines = [json.loads(line) for line in open(acks)]
    assert ack_lines and len(first_acked) >= 1
    spark_batch = {end: batch_id for batch_id, end in offsets_log(ck).items()}
    for a in ack_lines:
        b = spark_batch[a["batch"]]  # Spark's batch id for the batch that ended at this offset
        commit_file = os.path.join(ck, "commits", str(b))
        assert os.path.exists(commit_file), f"batch {b} acknowledged but never committed"
        assert os.stat(commit_file).st_mtime <= a["time"], f"batch {b} acknowledged before Spark committed it"
        in_sink = set().union(*(records_by_file.get(os.path.basename(p), set())
                                for bb, ps in files.items() if bb <= b for p in ps))
        assert {(p, o) for _, p, o in a["records"]} <= in_sink, f"batch {b} acknowledged records not in the sink"
        assert not a["failed"], a
    # the first query stopped with batches that were not acknowledged; they came again in the second
    first_acked_batches = {a["batch"] for a in first_acked}
    assert first_acked_batches <= first_run
    acked_records = [tuple(x[1:]) for a in ack_lines for x in a["records"]]
    assert set(acked_records) == {(r.partition, r.offset) for r in rows}
    assert kafka.leftovers(group, topic) == []


def test_records_acquired_after_an_empty_poll_are_not_handed_out_with_expired_locks(spark, broker, kafka, tmp_path):
    """librdkafka's ShareFetch goes on after a poll returned nothing: the records it acquires wait in the
    client, their locks running, until the next poll, which Spark may make long after (issue 29: a query
    whose first poll came too early got its first batch a minute later, and that batch's ACCEPT failed
    with INVALID_RECORD_STATE). The source releases such records and polls them again, with fresh locks."""
    from pipeline.share_stream import SHARE_SCHEMA, ShareStreamReader

    topic = kafka.topic(1, "idle")
    group = kafka.group(share_record_lock_duration_ms=2000)
    acks = str(tmp_path / "acks.jsonl")
    reader = ShareStreamReader({"kafka.bootstrap.servers": broker.bootstrap, "kafka.group.id": group,
                                "subscribe": topic, "pollTimeoutMs": "200", "recordLockMs": "2000",
                                "acknowledgementLog": acks}, spark.createDataFrame([], SHARE_SCHEMA).schema)

    def next_batch(start: int):
        _, end = reader.read({"batch": start})
        return end if end != {"batch": start} else None

    try:
        kafka.produce(topic, [{"value": b"probe"}])
        assert until(lambda: next_batch(-1), 60, "the probe record") == {"batch": 0}
        # batch 0 committed: acknowledged, then a poll that finds nothing; the consumer's fetch goes on
        assert next_batch(0) is None
        kafka.produce(topic, ({"value": b"%d" % i} for i in range(10)))
        # what that fetch acquired stays in the consumer until its lock expires: then another member
        # gets the records (and releases them when it closes)
        until(lambda: kafka.leftovers(group, topic), 60, "the records available again")
        assert until(lambda: next_batch(0), 30, "a batch") == {"batch": 1}
        reader.read({"batch": 1})  # batch 1 committed: its records are acknowledged
        lines = [json.loads(x) for x in open(acks)]
        assert [a["batch"] for a in lines] == [0, 1]
        assert not lines[1]["failed"], lines[1]
        assert len(lines[1]["records"]) == 10
    finally:
        reader.stop()
    assert kafka.leftovers(group, topic) == []
